#!/usr/bin/env bash
# dp_overlap_sweep.sh — data parallel on 2 GPUs with --overlap-grad-reduce under NCCL's CTA cap
# (NCCL_MAX_CTAS) and the SMs left to GEMMs that run beside a collective (MCC_OVERLAP_GEMM_SMS),
# against the plain DP=2 plan. From devrun/ (bench/bundle.sh) on the 2-GPU machine:
#   SWEEP="8:124 16:116" bash bench/dp_overlap_sweep.sh
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/devrun/lib:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0
O=${OUT:-/tmp/out}; mkdir -p "$O"
run() { # name, binary, then env assignments
  local name=$1 bin=$2; shift 2
  env "$@" timeout 150 devrun/bin/$bin --nproc-per-node 2 --data-path devrun/data/brown_text_document --split 100,0,0 \
    --train-iters 25 --log-interval 1 --eval-iters 0 > "$O/sweep-${name// /_}.log" 2>&1
  echo "exit $? $(python3 bench/median_tok_s.py "$name" < "$O/sweep-${name// /_}.log" 2>&1)"
}
for c in ${DP2_CONFIGS-llama-1B gpt2-124M}; do
  run "$c dp2" bench-$c-dp2
  run "$c dp2 overlap" bench-$c-dp2ov
  for s in ${SWEEP-8:124 16:116 32:100}; do
    run "$c dp2 overlap ctas=${s%%:*} sms=${s##*:}" bench-$c-dp2ov NCCL_MAX_CTAS=${s%%:*} MCC_OVERLAP_GEMM_SMS=${s##*:}
  done
done
