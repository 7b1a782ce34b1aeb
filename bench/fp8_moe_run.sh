#!/usr/bin/env bash
# fp8_moe_run.sh prepare | run — one GPU call for FP8 experts (issue 44; not yet run on a GPU):
#   1. cuda_ops_test's fp8_grouped_* cases (each expert's amax and quantize on its slice, one FP8
#      cuBLASLt GEMM an expert with its scale pointers, the wgrad's rows padded to 16, the fused
#      accumulate) and the histories a row an expert (fp8_history_amax, fp8_amax_fold,
#      fp8_history_update), each against its CPU kernel;
#   2. tiny-moe (tensorwise, hybrid) and tiny-deepseek-v3 (delayed, hybrid) trained 10 steps on one
#      GPU against the CPU oracle's same steps (tests/compare_dumps.py, bf16 tolerances).
# prepare (here, a CUDA-enabled build): fp8moe.tar.xz (fp8moe/: cuda_ops_test, the two cuda
# train_ranks, the CPU's dumps, the data, the libraries). The GPU machine: carry fp8moe.tar.xz,
# `bash bench/fp8_moe_run.sh run`.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${FP8MOE_BUILD:-build-dev}
# model:flags of each run
runs=("tiny-moe:--fp8-format hybrid --fp8-recipe tensorwise" "tiny-deepseek-v3:--fp8-format hybrid --fp8-recipe delayed")
if [ "${1:-}" = prepare ]; then
  set -e
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DBLA_VENDOR=Generic >/dev/null
  cmake --build "$B" -j"$(nproc)" --target mcc cuda_ops_test >/dev/null
  rm -rf fp8moe && mkdir -p fp8moe/bin fp8moe/cpu fp8moe/data && cp "$B"/cuda_ops_test fp8moe/bin/
  "$B"/mcc data preprocess --input tests/data/numerics.txt --output-prefix fp8moe/data/numerics --append-eod >/dev/null 2>&1
  for run in "${runs[@]}"; do
    m=${run%%:*}
    # shellcheck disable=SC2206 # the flags split as words
    fp8=(--keep-logits --vocab-size 260 --make-vocab-size-divisible-by 1 --global-batch-size 16 ${run#*:})
    "$B"/mcc compile models/$m.json --target cuda "${fp8[@]}" -o fp8moe/bin/$m-cuda-fp8 2>/dev/null
    "$B"/mcc compile models/$m.json --target cpu "${fp8[@]}" -o /tmp/$m-cpu-fp8 2>/dev/null
    /tmp/$m-cpu-fp8 --data-path fp8moe/data/numerics_text_document --train-iters 10 --eval-iters 0 \
      --dump-dir fp8moe/cpu/$m-fp8 >/dev/null
  done
  source bench/bundle_libs.sh && bundle_libs fp8moe/lib
  tar cf - fp8moe | xz -T0 > fp8moe.tar.xz
  ls -la fp8moe.tar.xz
  exit 0
fi
[ "${1:-}" = run ] || { echo "usage: bench/fp8_moe_run.sh prepare | run"; exit 2; }
tar xJf fp8moe.tar.xz || exit 1
DEVICE_BUNDLE=fp8moe source bench/device_env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
for ops in fp8_grouped fp8_h fp8_amax_fold; do
  echo "=== cuda_ops_test, the $ops ops"
  OPS_TEST_ONLY=$ops timeout 150 fp8moe/bin/cuda_ops_test > "$O/cuda_ops_test-$ops.log" 2>&1; echo "exit $?"
  grep -iE "^(ok|fail)" "$O/cuda_ops_test-$ops.log" | head -40; tail -2 "$O/cuda_ops_test-$ops.log"
done
echo "=== FP8 experts, GPU against the CPU, 10 steps"
for run in "${runs[@]}"; do
  m=${run%%:*}
  timeout 120 fp8moe/bin/$m-cuda-fp8 --data-path fp8moe/data/numerics_text_document --train-iters 10 --eval-iters 0 \
    --dump-dir /tmp/g-$m > "$O/$m-fp8.log" 2>&1
  echo "$m exit $?"; tail -1 "$O/$m-fp8.log" | cut -c1-250
  python3 tests/compare_dumps.py --detail --cpu fp8moe/cpu/$m-fp8 --gpu /tmp/g-$m > "$O/cmp-$m.txt" 2>&1; echo "compare rc $?"
  grep -E ' FAIL$' "$O/cmp-$m.txt" | head -8; grep -E '^largest' "$O/cmp-$m.txt"; tail -2 "$O/cmp-$m.txt" | cut -c1-300
done
