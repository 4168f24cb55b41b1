#!/usr/bin/env bash
# The GPU side of the sm_90a instruction budget and the Triton contender
# (issue 36), in one go, about five minutes on an H100; one log per step
# under ${OUT:-budget-check-logs}, a summary line per step, non-zero exit if
# any step failed. Each step has a time limit (seconds): PYTEST_LIMIT,
# TUNE_LIMIT, BENCH_LIMIT.
#   pytest  the GPU tests of what the cuts touched: the shared e2m1/e4m3
#           numerics over adversarial bit patterns on the device and in the
#           emulated sm_80 build (test_fp4_math), every quantize and
#           dequantize kernel and the dynamic quantizer against the reference
#           (test_api, test_dequantize, test_global_scale, test_fuzz,
#           test_padded_k, test_pre_hopper), the fused and row kernels
#           (test_silu_and_mul, test_rms_norm, test_per_row);
#   tune    the Triton contender's tile per default shape
#           (scripts/bench/tune_triton.py): every tile checked byte for byte
#           against fp4q's output, then timed; writes the tuned table both to
#           $OUT/triton_tuned.json and to scripts/bench/triton_tuned.json,
#           which the benchmark then reads;
#   bench   fp4q against the tuned Triton kernel and a copy of the same bytes
#           at the benchmark's default shapes, with the MXFP4, dequantize and
#           dynamic rows (scripts/bench/bench.py; the other contenders'
#           sections skipped).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
logs=${OUT:-budget-check-logs}
mkdir -p "$logs"
logs=$(cd "$logs" && pwd)
source "$here/steps.sh"
cd "$root"
tests=(test_fp4_math.py test_api.py test_dequantize.py test_global_scale.py test_fuzz.py test_padded_k.py
       test_pre_hopper.py test_silu_and_mul.py test_rms_norm.py test_per_row.py)
step pytest "${PYTEST_LIMIT:-150}" python3 -m pytest -q -m gpu -p no:cacheprovider --durations=10 \
  "${tests[@]/#/tests/}"
step tune "${TUNE_LIMIT:-120}" python3 -m scripts.bench.tune_triton --out "$logs/triton_tuned.json"
[ -f "$logs/triton_tuned.json" ] && cp "$logs/triton_tuned.json" "$root/scripts/bench/triton_tuned.json"
step bench "${BENCH_LIMIT:-120}" python3 -m scripts.bench.bench \
  --skip eager,compile,torchao,chain,graph,host,first-call,corner \
  --md "$logs/benchmarks.md" --out "$logs/bench.json" --png "$logs/benchmarks.png"
exit $status
