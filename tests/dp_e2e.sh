#!/usr/bin/env bash
# dp_e2e.sh MCC MODEL GLOBAL_BATCH — data parallelism on CPU ranks under mpirun: the model
# compiled with --data-parallel-size 2 and run on 2 ranks must compute what the single-rank
# program computes for the same global batch: the same loss, lr and grad norm at each of 10
# steps, the same step-1 gradients and the same final weights (fp32, relative error <= 1e-5).
set -euo pipefail
mcc=$1; model=$2; gbs=$3
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
"$mcc" data preprocess --input "$root/tests/data/numerics.txt" --output-prefix "$work/text" --append-eod >/dev/null 2>&1
for dp in 1 2; do
  "$mcc" compile "$root/models/$model.json" --target cpu --keep-logits --global-batch-size "$gbs" \
    --data-parallel-size $dp -o "$work/train_dp$dp" 2>"$work/compile$dp.log" || { cat "$work/compile$dp.log"; exit 1; }
done
"$work/train_dp1" --data-path "$work/text_text_document" --train-iters 10 --dump-dir "$work/dp1" >"$work/dp1.log" ||
  { cat "$work/dp1.log"; exit 1; }
mpirun -np 2 --oversubscribe "$work/train_dp2" --data-path "$work/text_text_document" --train-iters 10 \
  --dump-dir "$work/dp2" >"$work/dp2.log" 2>&1 || { cat "$work/dp2.log"; exit 1; }
/usr/bin/python3 "$root/tests/compare_dumps.py" --cpu "$work/dp1" --gpu "$work/dp2" --tol 1e-5 --loss-tol 1e-5
