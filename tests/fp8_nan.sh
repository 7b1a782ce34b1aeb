#!/usr/bin/env bash
# fp8_nan.sh MCC — a non-finite FP8 amax under delayed scaling stops the step naming the tensor's
# amax history, or with --skip-nan-steps skips the optimizer step and says so. The NaN comes from a
# learning rate of 1e30 (no test-only code path): step 1's update makes weights of 1e30, and step
# 2's backward a NaN output gradient, whose amax the first layer's q projection folds. A skipped step
# leaves every amax history as it was (zero_grads' fp8_history_update clears the step's amax alone):
# with a 4-step history, after steps 2-4 are skipped each holds step 1's amax and three zeros.
set -euo pipefail
mcc=$1
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
"$mcc" data preprocess --input "$root/tests/data/numerics.txt" --output-prefix "$work/text" --append-eod >/dev/null 2>&1
"$mcc" compile "$root/models/tiny-gpt2.json" --target cpu --fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 4 --lr 1e30 \
  --lr-warmup-iters 0 -o "$work/train" 2>"$work/c.log" || { cat "$work/c.log"; exit 1; }
run=("$work/train" --data-path "$work/text_text_document" --train-iters 4 --eval-iters 0)
want='iteration 2: the FP8 amax of @layers.0.attention.q.weight.amax_history.dy (this step'"'"'s amax of the tensor it scales) is NaN'
if "${run[@]}" >"$work/stop.log" 2>&1; then
  cat "$work/stop.log"; echo "FAIL: the run went on past a NaN FP8 amax"; exit 1
fi
grep -qF "error: $want, the step's first non-finite value; stopping" "$work/stop.log" ||
  { cat "$work/stop.log"; echo "FAIL: the stop does not name the amax history"; exit 1; }
"${run[@]}" --skip-nan-steps --dump-dir "$work/dump" >"$work/skip.log" 2>&1 || { cat "$work/skip.log"; echo "FAIL: --skip-nan-steps stopped"; exit 1; }
grep -qF "warning: $want; skipping the optimizer step" "$work/skip.log" ||
  { cat "$work/skip.log"; echo "FAIL: the skip does not name the amax history"; exit 1; }
grep -q "iteration        4/       4 .*number of skipped iterations:   1" "$work/skip.log" ||
  { cat "$work/skip.log"; echo "FAIL: iteration 4 (each of 2-4) should be logged as skipped"; exit 1; }
/usr/bin/python3 - "$root/tests" "$work/dump/fp8_histories_final.mcct" <<'PY'
import math, sys
sys.path.insert(0, sys.argv[1])
from compare_dumps import read_mcct
hist = read_mcct(sys.argv[2])
assert hist, "no amax histories dumped"
for name, h in hist.items():
    if not (h[0] == 0 and math.isfinite(h[1]) and h[1] > 0 and all(v == 0 for v in h[2:])):
        sys.exit(f"FAIL: {name} is {list(h)} after steps 2-4 were skipped: wanted [0, step 1's amax, 0, 0, 0]")
print(f"ok: {len(hist)} amax histories hold step 1's amax alone after 3 skipped steps")
PY
echo PASS
