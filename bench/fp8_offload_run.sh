#!/usr/bin/env bash
# fp8_offload_run.sh prepare [BEFORE_COMMIT] | run — one GPU call (twenty-fourth session) measuring what
# that session built (its checks against the CPU oracle moved to bench/oracle_run.sh, the call before):
#   1. LLaMA-3 8B's layers in bf16, FP8 tensorwise and blockwise (bench/calibrate.sh's CALIB_SET=fp8)
#      at 4 layers, then 8 at the end if time is left;
#   2. llama3-8b with --optimizer-cpu-offload (full recompute, seq 8192, global batch 8, --clip-grad 0),
#      the train_rank of BEFORE_COMMIT (default 2d850ad, before the vectorised host AdamW; bc1b120:
#      before the host step beside the backward and the huge pages) and this tree's, 3 steps each,
#      and bench/host_adamw_bench at 16 threads.
#      OFFLOAD_VARIANTS="after" runs this tree's alone (a call short of time). The run does 2 first.
# prepare (here): calib-fp8.tar.xz (CALIB_SET=fp8 bench/calibrate.sh prepare) and calib-offl.tar.xz
# (offl/: the offload train_ranks, host_adamw_bench, libraries). The GPU machine: carry the two,
# `bash bench/fp8_offload_run.sh run`.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${FP8OFF_BUILD:-build-dev}
if [ "${1:-}" = prepare ]; then
  set -e
  before=${2:-2d850ad}
  cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DBLA_VENDOR=Generic >/dev/null
  cmake --build $B -j"$(nproc)" --target mcc host_adamw_bench >/dev/null
  CALIB_SET=fp8 CALIB_BUILD=$B bash bench/calibrate.sh prepare
  rm -rf offl /tmp/mcc-before && mkdir -p offl/bin offl/lib && git worktree add --detach /tmp/mcc-before "$before" >/dev/null
  (cd /tmp/mcc-before && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DBLA_VENDOR=Generic >/dev/null &&
   cmake --build build -j"$(nproc)" --target mcc >/dev/null)
  # --clip-grad 0: the host's update beside the last micro-batch's backward where the tree has it
  # (passes/grad_ready.c); a tree before it runs the host step after the backward either way
  full="--recompute-granularity full --recompute-method uniform --recompute-num-layers 1 --lr-warmup-iters 1
        --optimizer-cpu-offload --global-batch-size 8 --host-memory 120 --mock-data --clip-grad 0"
  # shellcheck disable=SC2086 # the flags split as words
  /tmp/mcc-before/build/mcc compile models/llama3-8b.json --target cuda $full -o offl/bin/before 2>offl/bin/before.log
  # shellcheck disable=SC2086
  $B/mcc compile models/llama3-8b.json --target cuda $full -o offl/bin/after 2>offl/bin/after.log
  git worktree remove --force /tmp/mcc-before
  cp $B/host_adamw_bench offl/bin/
  source bench/bundle_libs.sh && bundle_libs offl/lib
  tar cf - offl | xz -T0 > calib-offl.tar.xz
  ls -la calib-fp8.tar.xz calib-offl.tar.xz
  exit 0
fi
[ "${1:-}" = run ] || { echo "usage: bench/fp8_offload_run.sh prepare [BEFORE_COMMIT] | run"; exit 2; }
tar xJf calib-fp8.tar.xz && tar xJf calib-offl.tar.xz || exit 1
DEVICE_BUNDLE=calib source bench/device_env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
# steps NAMES...: those of CALIB_SET=fp8's executables, each 12 steps (calibrate.sh run steps)
steps() {
  local keep=" $* " f
  for f in calib/bin/8B-*; do [[ $keep == *" ${f#calib/bin/} "* ]] || mv "$f" "$f.later"; done
  CALIB_SET=fp8 CALIB_TIMEOUT=90 bash bench/calibrate.sh run steps 2>&1 | grep -v "not compiled"
  for f in calib/bin/*.later; do mv "$f" "${f%.later}"; done
}
echo "=== llama3-8b, CPU offload"
export LD_LIBRARY_PATH=$PWD/offl/lib:$LD_LIBRARY_PATH
nproc; free -g | head -2; lscpu | grep -E "Model name|NUMA node\(s\)"
# 128 Mi elements: at 512 twice only the header line came back within the 60 s
timeout 60 offl/bin/host_adamw_bench --elements-mi 128 --threads 16 --reps 1 2>&1 | tail -12
for v in ${OFFLOAD_VARIANTS:-before after}; do
  echo "--- $v"
  timeout 110 offl/bin/$v --train-iters 3 --log-interval 1 --eval-iters 0 > "$O/offload-$v.log" 2>&1
  echo "exit $?"; grep -E "first step|page-locked host memory in|iteration +[0-9]+/" "$O/offload-$v.log" |
    sed -e 's/number of skipped iterations: *0 | number of nan iterations: *0 | //' -e 's/ | learning rate[^|]*|/ |/' | cut -c1-600
  grep -i -m3 "error" "$O/offload-$v.log"
done
# the offload pair first: the twenty-sixth session measured these FP8 steps, and its call was cut
# before the offload pair
echo "=== FP8 beside bf16, 4 layers of LLaMA-3 8B"
steps 8B-L4 8B-L4-fp8t 8B-L4-fp8t-unfused 8B-L4-fp8b
echo "=== FP8 beside bf16, 8 layers"
steps 8B-L8 8B-L8-fp8t 8B-L8-fp8b
