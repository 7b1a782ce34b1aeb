#!/usr/bin/env bash
# numerics_e2e.sh MCC MODEL [FLAGS...] — compiles MODEL for the CPU with FLAGS (spec fields, e.g.
# --hidden-dropout 0.1, which the reference applies too, or --recompute-granularity selective,
# which must not change what is computed), trains 10 steps with --dump-dir and has the PyTorch
# reference (tests/torch_ref.py, float64) check logits, loss, every gradient of step 1, the loss,
# lr and grad norm of all 10 AdamW steps and every final weight (relative error <= 1e-4), and an
# MoE model's router metrics of each step (the metrics file).
set -euo pipefail
mcc=$1; model=$2; shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
"$mcc" data preprocess --input "$root/tests/data/numerics.txt" --output-prefix "$work/text" --append-eod >/dev/null 2>&1
"$mcc" compile "$root/models/$model.json" --target cpu --keep-logits "$@" -o "$work/train_rank" 2>"$work/compile.log" || { cat "$work/compile.log"; exit 1; }
"$work/train_rank" --data-path "$work/text_text_document" --train-iters 10 --dump-dir "$work/dump" \
  --metrics-file "$work/metrics.jsonl" >"$work/train.log" || { cat "$work/train.log"; exit 1; }
/usr/bin/python3 "$root/tests/torch_ref.py" --spec "$root/models/$model.json" --dump-dir "$work/dump" --rtol 1e-4 \
  --metrics-file "$work/metrics.jsonl" -- "$@"
