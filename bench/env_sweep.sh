#!/usr/bin/env bash
# env_sweep.sh — one train_rank of devrun/ (bench/bundle.sh) under several environments, 25 steps
# each, printing the median tokens/s/GPU of each: for NCCL and runtime knobs. On the GPU machine:
#   bash bench/env_sweep.sh bench-llama-1B-tp2sp 2 "" "NCCL_MIN_CTAS=32" "NCCL_PROTO=Simple"
# ("" is the environment as it is; a word may set several variables, comma-separated).
# Measured with it (bench/RESULTS.md): data parallel's --overlap-grad-reduce under NCCL_MAX_CTAS
# and MCC_OVERLAP_GEMM_SMS, and tensor parallel's collectives under NCCL's CTA and protocol knobs.
set -uo pipefail
bin=$1 nproc=$2; shift 2
source "$(dirname "$0")/device_env.sh"
for envs in "$@"; do
  launch=(); [ "$nproc" -gt 1 ] && launch=(--nproc-per-node "$nproc")
  log="$O/sweep-$bin-$(echo "${envs:-default}" | tr -c 'A-Za-z0-9_-' '_').log"
  env ${envs//,/ } timeout 150 devrun/bin/$bin "${launch[@]}" --data-path devrun/data/brown_text_document \
    --split 100,0,0 --train-iters 25 --log-interval 1 --eval-iters 0 > "$log" 2>&1
  echo "exit $? $(python3 bench/median_tok_s.py "$bin ${envs:-default}" < "$log" 2>&1)"
done
