#!/usr/bin/env bash
# oracle_run.sh prepare | run — one GPU call that checks, against the CPU oracle, what was built for
# the GPU and not yet run on one (the list below; issue 44's and 42's backlog), in the order most
# needed: cuda_ops_test's cases of the new kernels (each against its CPU kernel), then tiny models
# trained 10 steps on one GPU against the CPU target's same 10 steps (tests/compare_dumps.py, the
# bf16 tolerances). Every run is a (name, model, flags) row, so a new feature adds a row, not a
# script. Measurements are not here (bench/fp8_offload_run.sh, bench/calibrate.sh).
# prepare (here, a CUDA-enabled build): oracle.tar.xz (oracle/: cuda_ops_test, each row's cuda
# train_rank and the CPU's dumps, the data, the libraries). The GPU machine: carry ["oracle.tar.xz"],
# `bash bench/oracle_run.sh run` (a few minutes).
set -uo pipefail
cd "$(dirname "$0")/.."
B=${ORACLE_BUILD:-build-dev}
# cuda_ops_test's cases, OPS_TEST_ONLY prefix:OPS_TEST_SHAPE: the FP8 GEMMs, blockwise (VEC128_32F /
# BLK128x128_32F scale modes) and the experts' (a scale an expert, or blockwise), the experts' amax histories, the
# MoE run sorts bounded by the rows received, the elementwise ops bounded alike (56 rows received
# into 4,096), and FP8's amaxes made by the norms', SwiGLU's and their gradients' kernels (amax=)
ops=("fp8_:" "fp8_h:" "fp8_amax_fold:" "moe_:" ":rows bounded" ":amax")
# NAME[:RANKS] MODEL FLAGS... [-- LAYOUT...]: the rows (blockwise FP8 needs widths that tile by 128);
# LAYOUT goes to the GPU's program only, run as RANKS ranks under mpirun sharing the one GPU (their
# transfers through host memory, runtime/cuda/comm_staged.c): the layout against one CPU rank
block="--fp8-format e4m3 --fp8-recipe blockwise --hidden-size 128 --ffn-hidden-size 256 --num-attention-heads 2"
rows=(
  "llama-fp8b tiny-llama $block --num-query-groups 2"
  "gpt2-fp8b tiny-gpt2 $block"
  # selective recompute's regions (mlp, moe, shared_experts, mla_up_proj) with top-8 of 8 experts,
  # so no routing choice can flip between the GPU's bf16 scores and the CPU's fp32 ones
  "ds3-regions tiny-deepseek-v3 --moe-router-topk 8 --moe-router-group-topk 4 --recompute-granularity selective
   --recompute-modules mlp,moe,shared_experts,mla_up_proj,layernorm"
  # FP8 experts (a scale an expert): tensorwise on tiny-moe, delayed on tiny-deepseek-v3, and the
  # regions under FP8
  "moe-fp8t tiny-moe --vocab-size 260 --make-vocab-size-divisible-by 1 --global-batch-size 16
   --fp8-format hybrid --fp8-recipe tensorwise"
  "ds3-fp8d tiny-deepseek-v3 --vocab-size 260 --make-vocab-size-divisible-by 1 --global-batch-size 16
   --fp8-format hybrid --fp8-recipe delayed"
  "ds3-fp8d-regions tiny-deepseek-v3 --moe-router-topk 8 --moe-router-group-topk 4 --fp8-format hybrid
   --fp8-recipe delayed --recompute-granularity selective --recompute-modules mlp,moe,shared_experts,mla_up_proj"
  # blockwise FP8 experts (each expert's rows in 1x128 tiles, its weight in 128x128 blocks, the wgrad's
  # tiles from each expert's first row) on tiny-deepseek-v3 widened to tile by 128 (MLA's one head of
  # 128 + 128 rope channels, latents of 128), top-8 of 8 so that no routing choice can flip
  "ds3-fp8b tiny-deepseek-v3 --moe-router-topk 8 --moe-router-group-topk 4 --fp8-format e4m3 --fp8-recipe blockwise
   --hidden-size 128 --ffn-hidden-size 256 --moe-ffn-hidden-size 128 --moe-shared-expert-intermediate-size 128
   --num-attention-heads 1 --q-lora-rank 128 --kv-lora-rank 128 --qk-head-dim 128 --qk-pos-emb-head-dim 128
   --v-head-dim 128"
  # --moe-router-force-load-balancing: the routers' normal logits (the GPU's sin, cos, log to the
  # CPU's within an ulp or two: a top-2 choice could flip on a near tie, unlikely at these sizes)
  "moe-flb tiny-moe --moe-router-force-load-balancing"
  # the host's AdamW beside the backward under --clip-grad 0 (grad_ready's marks, the host thread)
  "offload-beside tiny-llama --clip-grad 0 --vocab-size 260 --make-vocab-size-divisible-by 1 --global-batch-size 16
   -- --optimizer-cpu-offload"
  # FP8's amaxes made by the kernels that write the tensors (the fusion pass's amax results): RMSNorm,
  # SwiGLU and their gradients tensorwise, delayed with SwiGLU recomputed (swiglu_grad_product's),
  # LayerNorm's
  "llama-fp8t tiny-llama --fp8-format hybrid --fp8-recipe tensorwise"
  "llama-fp8d-sel tiny-llama --fp8-format hybrid --fp8-recipe delayed --recompute-granularity selective
   --recompute-modules mlp_act"
  "gpt2-fp8t tiny-gpt2 --fp8-format hybrid --fp8-recipe tensorwise"
  # --pipeline-model-parallel-layout: uneven interleaved stages; a multi-token depth alone on a stage
  "pplayout-llama:2 tiny-llama --num-layers 6 --vocab-size 260 --make-vocab-size-divisible-by 1 --global-batch-size 16
   -- --pp 2 --pipeline-schedule interleaved --pipeline-model-parallel-layout Et|tt|t|ttL"
  "pplayout-ds3:3 tiny-deepseek-v3 --mtp-num-layers 1 --moe-router-topk 8 --moe-router-group-topk 4 --vocab-size 260
   --make-vocab-size-divisible-by 1 --global-batch-size 16 -- --pp 3 --pipeline-schedule 1f1b
   --pipeline-model-parallel-layout Et|t|mL"
)
if [ "${1:-}" = prepare ]; then
  set -e
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DBLA_VENDOR=Generic >/dev/null
  cmake --build "$B" -j"$(nproc)" --target mcc cuda_ops_test dropout_test >/dev/null
  rm -rf oracle && mkdir -p oracle/bin oracle/cpu oracle/data && cp "$B"/cuda_ops_test "$B"/dropout_test oracle/bin/
  "$B"/mcc data preprocess --input tests/data/numerics.txt --output-prefix oracle/data/numerics --append-eod >/dev/null 2>&1
  for row in "${rows[@]}"; do
    # shellcheck disable=SC2086 # the row's words
    set -- $row
    name=${1%%:*} model=$2; shift 2
    spec=() layout=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do spec+=("$1"); shift; done
    [ $# -gt 0 ] && shift && layout=("$@")
    "$B"/mcc compile models/$model.json --target cuda --keep-logits "${spec[@]}" "${layout[@]}" -o oracle/bin/$name \
      2>/tmp/oracle-$name.log || { cat /tmp/oracle-$name.log; exit 1; }
    "$B"/mcc compile models/$model.json --target cpu --keep-logits "${spec[@]}" -o /tmp/oracle-cpu-$name 2>/dev/null
    /tmp/oracle-cpu-$name --data-path oracle/data/numerics_text_document --train-iters 10 --eval-iters 0 \
      --dump-dir oracle/cpu/$name >/dev/null
  done
  source bench/bundle_libs.sh && bundle_libs oracle/lib
  # -9e: a 64 MiB dictionary, whose 192 MiB blocks hold the whole tar (-T0's default: 54 MB, past carry's 64 MiB
  # with the working tree; this 35 MB)
  tar cf - oracle | xz -9e -T2 > oracle.tar.xz
  ls -la oracle.tar.xz
  exit 0
fi
[ "${1:-}" = run ] || { echo "usage: bench/oracle_run.sh prepare | run"; exit 2; }
tar xJf oracle.tar.xz || exit 1
DEVICE_BUNDLE=oracle source bench/device_env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
for o in "${ops[@]}"; do
  only=${o%%:*} shape=${o#*:} log="$O/cuda_ops_test-${only:-all}${shape:+-${shape// /_}}.log"
  echo "=== cuda_ops_test, OPS_TEST_ONLY=$only OPS_TEST_SHAPE=$shape"
  OPS_TEST_ONLY=$only OPS_TEST_SHAPE=$shape timeout 150 oracle/bin/cuda_ops_test > "$log" 2>&1; echo "exit $?"
  grep -iE "^(ok|fail)|fail" "$log" | head -40; tail -2 "$log"
done
echo "=== dropout_test: the masks, and the normal values of --moe-router-force-load-balancing"
timeout 120 oracle/bin/dropout_test > "$O/dropout_test.log" 2>&1; echo "exit $?"
grep -iE "normal|fail" "$O/dropout_test.log" | head -12; tail -1 "$O/dropout_test.log"
echo "=== GPU against the CPU oracle, 10 steps"
for row in "${rows[@]}"; do
  name=${row%% *} launch=()
  [[ $name == *:* ]] && launch=(mpirun -np "${name#*:}" --oversubscribe) name=${name%%:*}
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 "${launch[@]}" oracle/bin/$name --data-path oracle/data/numerics_text_document --train-iters 10 --eval-iters 0 \
    --dump-dir /tmp/g-$name > "$O/$name.log" 2>&1
  rc=$?; echo "$name exit $rc"; tail -1 "$O/$name.log" | cut -c1-250
  # a failed run's own words (its last line is the HINT; only the call's tail and 8 files come back)
  [ $rc = 0 ] || grep -E "error|note:|status" "$O/$name.log" | head -4 | cut -c1-300
  python3 tests/compare_dumps.py --detail --cpu oracle/cpu/$name --gpu /tmp/g-$name > "$O/cmp-$name.txt" 2>&1
  echo "$name compare rc $?"
  grep -E ' FAIL$' "$O/cmp-$name.txt" | head -8; grep -E '^largest' "$O/cmp-$name.txt"; tail -2 "$O/cmp-$name.txt" | cut -c1-300
done
