#!/usr/bin/env bash
# Everything that needs the GPU, in one go, with one log per step under
# ${LOGS:-gpu-check-logs}: the GPU test suite, the sanitizers over every
# shipped config, the soak, and a quick benchmark. Exits non-zero if any
# step failed; prints one summary line per step.
set -u
here=$(cd "$(dirname "$0")" && pwd)
logs=${LOGS:-gpu-check-logs}
mkdir -p "$logs"
export PYTHONUNBUFFERED=1
status=0
step() {
  local name=$1; shift
  local start=$SECONDS
  "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  printf '%-10s exit %-3s %4ss  %s\n' "$name" "$rc" "$((SECONDS - start))" "$(tail -n 1 "$logs/$name.log")"
  [ $rc -eq 0 ] || status=1
}
step pytest python3 -m pytest -q -m gpu -p no:cacheprovider "$here/../tests"
step sanitize env SANITIZE_LOGS="$logs/sanitize" bash "$here/sanitize.sh"
step soak python3 "$here/soak.py"
step bench python3 "$here/bench.py" --quick --md "$logs/benchmarks.md" --out "$logs/bench.json"
exit $status
