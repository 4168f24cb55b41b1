#!/usr/bin/env bash
# Runs the sanitizer workload under compute-sanitizer's memcheck, racecheck,
# synccheck and initcheck, the four at once (each is bound by host-side
# instrumentation, so they overlap well on a many-core host); exits non-zero
# if any tool reports an error, a mismatch, or runs out of time.
# Usage: scripts/gpu/sanitize.sh [--configs NAME,NAME|all] [--passes NAME,NAME|all] [--trace] [--emulate-sm80]
#        [--device N]
# Logs go to $SANITIZE_LOGS (default ./sanitize-logs); each tool gets
# $SANITIZE_TIMEOUT seconds (default 1200).
set -u
here=$(cd "$(dirname "$0")" && pwd)
logs=${SANITIZE_LOGS:-sanitize-logs}
limit=${SANITIZE_TIMEOUT:-1200}
tools="memcheck racecheck synccheck initcheck"
mkdir -p "$logs"
for tool in $tools; do
  (
    start=$SECONDS
    timeout "$limit" compute-sanitizer --tool "$tool" --report-api-errors no --error-exitcode 99 --print-limit 20 \
      python3 "$here/sanitize_workload.py" "$@" >"$logs/$tool.log" 2>&1
    echo "$? $((SECONDS - start))" >"$logs/$tool.rc"
  ) &
done
wait
status=0
for tool in $tools; do
  read -r rc secs <"$logs/$tool.rc"
  summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|sanitize workload" "$logs/$tool.log" | tr '\n' ' ')
  [ "$rc" = 124 ] && summary="timed out after ${limit}s; $summary"
  echo "$tool: exit $rc in ${secs}s; $summary"
  [ "$rc" = 0 ] || status=1
done
exit $status
