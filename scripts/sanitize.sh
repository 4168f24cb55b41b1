#!/usr/bin/env bash
# Runs the sanitizer workload under compute-sanitizer's memcheck, racecheck,
# synccheck and initcheck; exits non-zero if any tool reports an error.
# Usage: scripts/sanitize.sh [--configs NAME,NAME|all] ; logs go to $SANITIZE_LOGS (default ./sanitize-logs)
set -u
here=$(cd "$(dirname "$0")" && pwd)
logs=${SANITIZE_LOGS:-sanitize-logs}
mkdir -p "$logs"
status=0
for tool in memcheck racecheck synccheck initcheck; do
  compute-sanitizer --tool "$tool" --report-api-errors no --error-exitcode 99 --print-limit 20 \
    python3 "$here/sanitize_workload.py" "$@" >"$logs/$tool.log" 2>&1
  rc=$?
  summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|sanitize workload" "$logs/$tool.log" | tr '\n' ' ')
  echo "$tool: exit $rc; $summary"
  [ $rc -eq 0 ] || status=1
done
exit $status
