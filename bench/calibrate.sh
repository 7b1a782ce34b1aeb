#!/usr/bin/env bash
# calibrate.sh list | prepare | run steps|profile|all — the measurements behind mcc's step-time model (issue 41):
# one-GPU configs (models x micro-batch x recompute x FP8 x sequence length x accumulation), each
# compiled here with --mock-data and run on the GPU machine
#   steps:   12 steps with CUDA graphs, the median of steps 5-12's elapsed time (the measured step)
#   profile: 3 steps under MCC_PROFILE=1 with MCC_PROFILE_DUMP: every instruction's GPU time per call,
#            its op, multiply-adds and bytes (bench/calibrate.py fits the rates from these)
#   prepare (here, where mcc builds): calib/ with the executables and the libraries the GPU machine
#     lacks, as calib.tar.xz (carry ["calib.tar.xz"]; there: `tar xJf calib.tar.xz && bash
#     bench/calibrate.sh run all`: steps, then profile)
# Outputs go to $OUT (the device tool's): steps.tsv (name, measured ms, GiB in use) and
# profiles.tgz (calib-profiles/profile-NAME.tsv); calib/plans/NAME.txt (here) holds each config's
# flags: `bench/calibrate.py tables build-fast/mcc` then `bench/calibrate.py fit calib-profiles
# steps.tsv --target h100 --def passes/step_cost_h100.def` fits the model (bench/RESULTS.md).
set -uo pipefail
cd "$(dirname "$0")/.."
# NAME CONFIG FLAGS...: each a one-GPU plan (the bench configs fit an 80 GB H100). The FP8 ones
# (tensorwise, delayed) with --unfused-fp8-amax: bench/calibration/h100-steps.tsv measured them
# before the fusion pass folded FP8's amaxes into the norms' and SwiGLU's kernels, and
# tests/step_cost.sh holds the model to those steps; drop the flag when they are measured again.
configs=(
  "gpt2-124M gpt2-124M"
  "gpt2-124M-mbs8 gpt2-124M --micro-batch-size 8 --global-batch-size 8"
  "gpt2-124M-mbs16-sel gpt2-124M --micro-batch-size 16 --global-batch-size 16 --recompute-granularity selective"
  "gpt2-124M-mbs8-acc4 gpt2-124M --micro-batch-size 8 --global-batch-size 32"
  "gpt2-1.5B gpt2-1.5B"
  "gpt2-1.5B-mbs8-sel gpt2-1.5B --micro-batch-size 8 --global-batch-size 8 --recompute-granularity selective"
  "gpt2-1.5B-full gpt2-1.5B --recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
  "llama-1B llama-1B"
  "llama-1B-mbs2 llama-1B --micro-batch-size 2 --global-batch-size 2"
  "llama-1B-mbs1 llama-1B --micro-batch-size 1 --global-batch-size 1"
  "llama-1B-sel llama-1B --recompute-granularity selective"
  "llama-1B-full llama-1B --recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
  "llama-1B-fp8t llama-1B --fp8-format hybrid --fp8-recipe tensorwise --unfused-fp8-amax"
  "llama-1B-fp8d llama-1B --fp8-format hybrid --fp8-recipe delayed --unfused-fp8-amax"
  "llama-1B-T2k llama-1B --seq-length 2048 --micro-batch-size 8 --global-batch-size 8"
  "llama-1B-T8k llama-1B --seq-length 8192 --max-position-embeddings 8192 --micro-batch-size 2 --global-batch-size 2"
  "llama-1B-mbs2-acc4 llama-1B --micro-batch-size 2 --global-batch-size 8"
  "llama-1B-L8 llama-1B --num-layers 8"
  "llama-1B-gqa llama-1B-gqa"
  "llama-1B-gqa-sel llama-1B-gqa --recompute-granularity selective"
  "llama-1B-gqa-fp8t llama-1B-gqa --fp8-format hybrid --fp8-recipe tensorwise --unfused-fp8-amax"
  "llama-1B-32k llama-1B-32k"
  "llama-8B-L4 llama-8B-L4"
  "llama-8B-L4-sel llama-8B-L4 --recompute-granularity selective"
  "llama-8B-L4-full llama-8B-L4 --recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
  "llama-8B-L4-fp8t llama-8B-L4 --fp8-format hybrid --fp8-recipe tensorwise --unfused-fp8-amax"
  "llama-8B-L4-T4k llama-8B-L4 --seq-length 4096 --micro-batch-size 2 --global-batch-size 2"
  "llama-8B-L2 llama-8B-L4 --num-layers 2"
  "moe-8x1B-L8 moe-8x1B --num-layers 8"
  "moe-32x8-L8 moe-32x8 --num-layers 8"
)
# CALIB_SET=tune: instead, the candidates `mcc tune --world-size 1 --target h100` lists for three
# models at a global batch of 16 (4 for the 8B), each as tune's row compiles (issue 41: the tuner's
# pick against the best measured of its candidates)
if [ "${CALIB_SET:-}" = tune ]; then
  configs=()
  for m in "llama-1B 16" "gpt2-1.5B 16" "llama-8B-L4 4"; do
    read -r model gbs <<<"$m"
    for mbs in 1 2 4 8; do
      [ "$mbs" -le "$gbs" ] && configs+=("tune-$model-mbs$mbs $model --global-batch-size $gbs --micro-batch-size $mbs")
    done
  done
fi
# CALIB_SET=fp8: FP8 beside bf16 as the model deepens (issue 42: llama-8B-L4's output head, 37% of
# its GEMM FLOPs, stays bf16 as Megatron keeps it, so FP8's gain grows with the layers): LLaMA-3 8B's
# layers at 4, 8 and 12 (the 12 with the memory levers, to fit 80 GB), bf16, tensorwise and blockwise
if [ "${CALIB_SET:-}" = fp8 ]; then
  lev="--use-precision-aware-optimizer --store-param-remainders --recompute-granularity selective --recompute-modules layernorm,mlp_act"
  configs=()
  for d in "L4" "L8 --num-layers 8" "L12lev --num-layers 12 $lev"; do
    read -r tag flags <<<"$d"
    configs+=("8B-$tag llama-8B-L4 $flags" "8B-$tag-fp8t llama-8B-L4 $flags --fp8-format hybrid --fp8-recipe tensorwise"
              "8B-$tag-fp8b llama-8B-L4 $flags --fp8-format e4m3 --fp8-recipe blockwise")
  done
  # and L4's tensorwise with FP8's amaxes as passes of their own (the fusion pass's amax results undone)
  configs+=("8B-L4-fp8t-unfused llama-8B-L4 --fp8-format hybrid --fp8-recipe tensorwise --unfused-fp8-amax")
fi
mode=${1:-}
if [ "$mode" = list ]; then # the configs, a line each: NAME CONFIG FLAGS... (tests/step_cost.sh)
  printf '%s\n' "${configs[@]}"
  exit 0
fi
if [ "$mode" = prepare ]; then
  B=${CALIB_BUILD:-build-dev} # CALIB_BUILD: another build of mcc (a worktree's)
  cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DBLA_VENDOR=Generic >/dev/null
  cmake --build $B -j"$(nproc)" --target mcc >/dev/null || exit 1
  rm -rf calib && mkdir -p calib/bin calib/lib calib/plans
  for c in "${configs[@]}"; do
    read -r name config flags <<<"$c"
    echo "$config $flags" > calib/plans/$name.txt
    # shellcheck disable=SC2086 # the flags split as words
    $B/mcc compile bench/configs/$config.json --target cuda --mock-data $flags -o calib/bin/$name \
      2>calib/plans/$name.compile.log || { echo "$name: compile failed"; tail -3 calib/plans/$name.compile.log; }
  done
  source bench/bundle_libs.sh && bundle_libs calib/lib
  tarball=calib${CALIB_SET:+-$CALIB_SET}.tar.xz # carry it; there: tar xJf it, CALIB_SET=... bash bench/calibrate.sh run
  tar cf - --sort=name calib/bin calib/lib | xz -T0 --lzma2=preset=6,dict=256MiB > $tarball
  du -sh calib $tarball
  exit 0
fi
[ "$mode" = run ] || { echo "usage: bench/calibrate.sh list | prepare | run steps|profile|all"; exit 2; }
DEVICE_BUNDLE=calib source bench/device_env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
what=${2:-steps}
if [ "$what" = all ]; then # both, steps first: within one call of the device's 10 minutes
  bash "$0" run steps; bash "$0" run profile
  exit
fi
[ "$what" = steps ] && printf 'name\tmeasured_ms\tgib\n' > "$O/steps.tsv"
for c in "${configs[@]}"; do
  read -r name _ <<<"$c"
  [ -x calib/bin/$name ] || { echo "$name: not compiled"; continue; }
  log=/tmp/calib-$what-$name.log
  if [ "$what" = steps ]; then
    timeout "${CALIB_TIMEOUT:-60}" calib/bin/$name --train-iters 12 --log-interval 1 --eval-iters 0 > "$log" 2>&1
    rc=$?
    ms=$(python3 - "$log" <<'PY'
import re, statistics, sys
t = open(sys.argv[1]).read()
v = [float(x) for x in re.findall(r'elapsed time per iteration \(ms\): ([0-9.]+)', t)]
print(f"{statistics.median(v[4:]):.2f}" if len(v) >= 12 else "nan")
PY
)
    gib=$(grep -o 'memory (GiB): [0-9.]*' "$log" | tail -1 | grep -o '[0-9.]*$')
    printf '%s\t%s\t%s\n' "$name" "$ms" "${gib:-nan}" >> "$O/steps.tsv"
    echo "$name exit $rc: $ms ms, $gib GiB"
  else
    # 12 iterations as the steps' (a warmup longer than the decay is refused), the first 3 run
    mkdir -p /tmp/calib-profiles
    MCC_PROFILE=1 MCC_PROFILE_DUMP=/tmp/calib-profiles/profile-$name.tsv timeout 60 calib/bin/$name --train-iters 12 \
      --exit-interval 3 --log-interval 1 --eval-iters 0 > "$log" 2>&1
    echo "$name profile exit $?: $(grep -m1 'GPU time by op' "$log" | grep -o '[0-9.]* ms in all')"
  fi
  grep -m2 -i "error" "$log" || true
done
# one file home: the device tool returns a handful of files a call
[ "$what" = profile ] && tar czf "$O/profiles.tgz" -C /tmp calib-profiles
