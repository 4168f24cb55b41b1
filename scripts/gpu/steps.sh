# Sourced by the GPU check scripts: `step NAME LIMIT COMMAND...` runs COMMAND under a time limit
# (seconds), its output in $logs/NAME.log, prints one summary line and clears `status` on failure.
export PYTHONUNBUFFERED=1 FP4Q_REQUIRE_GPU=1  # pytest fails instead of skipping the GPU tests
status=0
step() {
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  timeout "$limit" "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  printf '%-10s exit %-3s %4ss  %s\n' "$name" "$rc" "$((SECONDS - start))" "$(tail -n 1 "$logs/$name.log")"
  [ $rc -eq 0 ] || status=1
}
