#!/usr/bin/env bash
# Everything that needs the GPU, in one go, with one log per step under
# ${LOGS:-gpu-check-logs}: the GPU test suite, the sanitizers over every
# shipped config (and the pre-Hopper kernels: needs an sm_90a GPU), the soak,
# and a quick benchmark. Exits non-zero if any
# step failed; prints one summary line per step. Each step runs under a
# time limit (seconds) so that one slow step cannot starve the others:
# PYTEST_LIMIT, SANITIZE_TIMEOUT, SOAK_LIMIT, BENCH_LIMIT.
set -u
here=$(cd "$(dirname "$0")" && pwd)
logs=${LOGS:-gpu-check-logs}
mkdir -p "$logs"
source "$here/steps.sh"
sanitize_limit=${SANITIZE_TIMEOUT:-1200}
step pytest "${PYTEST_LIMIT:-1200}" python3 -m pytest -q -m gpu -p no:cacheprovider --durations=10 "$here/../../tests"
step sanitize "$((sanitize_limit + 30))" env SANITIZE_LOGS="$logs/sanitize" SANITIZE_TIMEOUT="$sanitize_limit" \
  bash "$here/sanitize.sh"
step sanitize80 "$((sanitize_limit + 30))" env SANITIZE_LOGS="$logs/sanitize80" SANITIZE_TIMEOUT="$sanitize_limit" \
  bash "$here/sanitize.sh" --emulate-sm80
step soak "${SOAK_LIMIT:-1200}" python3 "$here/soak.py"
step bench "${BENCH_LIMIT:-1200}" python3 "$here/../bench/bench.py" --quick --md "$logs/benchmarks.md" --out "$logs/bench.json" \
  --png "$logs/benchmarks.png"
exit $status
