#!/usr/bin/env bash
# fp8_nan.sh MCC — a non-finite FP8 amax under delayed scaling stops the step naming the tensor's
# amax history, or with --skip-nan-steps skips the optimizer step and says so. The NaN comes from a
# learning rate of 1e30 (no test-only code path): step 1's update makes weights of 1e30, and step
# 2's backward a NaN output gradient, whose amax the first layer's q projection folds.
set -euo pipefail
mcc=$1
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
"$mcc" data preprocess --input "$root/tests/data/numerics.txt" --output-prefix "$work/text" --append-eod >/dev/null 2>&1
"$mcc" compile "$root/models/tiny-gpt2.json" --target cpu --fp8-format hybrid --fp8-recipe delayed --lr 1e30 \
  --lr-warmup-iters 0 -o "$work/train" 2>"$work/c.log" || { cat "$work/c.log"; exit 1; }
run=("$work/train" --data-path "$work/text_text_document" --train-iters 4 --eval-iters 0)
want='iteration 2: the FP8 amax of @layers.0.attention.q.weight.amax_history.dy (this step'"'"'s amax of the tensor it scales) is NaN'
if "${run[@]}" >"$work/stop.log" 2>&1; then
  cat "$work/stop.log"; echo "FAIL: the run went on past a NaN FP8 amax"; exit 1
fi
grep -qF "error: $want, the step's first non-finite value; stopping" "$work/stop.log" ||
  { cat "$work/stop.log"; echo "FAIL: the stop does not name the amax history"; exit 1; }
"${run[@]}" --skip-nan-steps >"$work/skip.log" 2>&1 || { cat "$work/skip.log"; echo "FAIL: --skip-nan-steps stopped"; exit 1; }
grep -qF "warning: $want; skipping the optimizer step" "$work/skip.log" ||
  { cat "$work/skip.log"; echo "FAIL: the skip does not name the amax history"; exit 1; }
grep -q "iteration        4/       4 .*number of skipped iterations:   1" "$work/skip.log" ||
  { cat "$work/skip.log"; echo "FAIL: iteration 4 (each of 2-4) should be logged as skipped"; exit 1; }
echo PASS
