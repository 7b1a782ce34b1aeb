#!/usr/bin/env bash
# train_loop.sh MCC — train_rank's loop end to end on the tiny GPT and a generated corpus:
# (1) validation (eval_step) leaves training untouched: the same losses with and without it;
# (2) log lines every --log-interval and the JSONL metrics (train and validation records);
# (3) `mcc plot` turns the metrics into an SVG with its curves;
# (4) a NaN loss stops the run naming iteration and micro-batch; --skip-nan-steps goes on.
set -euo pipefail
mcc=$1
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# 300 documents of sentences from a tiny grammar: a model learns them within 40 steps.
awk 'BEGIN { srand(7); split("the a one every some", det, " "); split("cat dog bird fish horse mouse", n, " ");
  split("sees chases likes eats follows", v, " ");
  for (d = 0; d < 300; d++) { s = "";
    for (k = 0; k < 4; k++) s = s det[int(rand()*5)+1] " " n[int(rand()*6)+1] " " v[int(rand()*5)+1] " " det[int(rand()*5)+1] " " n[int(rand()*6)+1] ". ";
    print s; print "" } }' > "$work/corpus.txt"
"$mcc" data preprocess --input "$work/corpus.txt" --output-prefix "$work/c" --append-eod >/dev/null 2>&1
"$mcc" compile "$root/models/tiny-gpt2.json" --target cpu --train-iters 40 -o "$work/tr" 2>/dev/null
train() { "$work/tr" --data-path "$work/c_text_document" "$@"; }

# (1) the same training losses, lr and grad norms whether or not validation runs in between
train --eval-interval 7 --eval-iters 2 --log-interval 1 --metrics-file "$work/m.jsonl" > "$work/eval.log"
train --eval-iters 0 --log-interval 1 > "$work/noeval.log"
# iteration, consumed samples, learning rate, lm loss, grad norm: Megatron's fields 1, 2, 5, 7, 9
steps() { grep '^ \[.*\] iteration ' "$1" | sed 's/^ \[[^]]*\]//' | cut -d'|' -f1,2,5,7,9; }
cmp <(steps "$work/eval.log") <(steps "$work/noeval.log") || fail "validation changed the training run"

# (2) validation at 7, 14, ..., 35 and at the end (40); a log line per iteration; metrics agree
[ "$(grep -c '^ validation loss at iteration' "$work/eval.log")" = 6 ] || fail "want 6 validations: $(grep validation "$work/eval.log")"
[ "$(grep -c '^ \[.*\] iteration ' "$work/eval.log")" = 40 ] || fail "want 40 log lines"
/usr/bin/python3 - "$work/m.jsonl" "$work/eval.log" <<'PY' || fail "metrics file"
import json, math, re, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
train = [r for r in recs if "loss" in r]
valid = [r for r in recs if "valid_loss" in r]
assert [r["iteration"] for r in train] == list(range(1, 41)), "one train record per iteration"
assert [r["iteration"] for r in valid] == [7, 14, 21, 28, 35, 40], "validation records"
logged = [float(x) for x in re.findall(r"^ \[.*?\] iteration .*?\| lm loss: ([0-9.E+-]+) \|", open(sys.argv[2]).read(), re.M)]
assert len(logged) == 40 and all(abs(r["loss"] - l) < 1e-4 for r, l in zip(train, logged)), "metrics loss == logged loss"
assert train[-1]["consumed_samples"] == 40 * 8 and train[-1]["mfu"] is None  # global batch 8; MFU "-" on the CPU
for k in ("lr", "grad_norm", "ms_per_iter", "tokens_per_s_per_gpu", "tflops_per_gpu", "memory_gib"):
    assert train[-1][k] > 0, k
assert abs(valid[-1]["valid_ppl"] - math.exp(valid[-1]["valid_loss"])) < 1e-3 * valid[-1]["valid_ppl"]
assert valid[-1]["valid_loss"] < valid[0]["valid_loss"] - 0.3, "validation loss falls as the model trains"
PY

# (3) the plot: well-formed SVG, a polyline per curve (train, valid, lr, tokens/s)
"$mcc" plot "$work/m.jsonl" -o "$work/m.svg" 2>/dev/null
/usr/bin/python3 -c "
import sys, xml.etree.ElementTree as E
lines = [e for e in E.parse(sys.argv[1]).iter() if e.tag.endswith('polyline')]
assert len(lines) == 4 and all(len(l.get('points').split()) >= 6 for l in lines), len(lines)" "$work/m.svg" ||
  fail "plot"
! "$mcc" plot "$work/none.jsonl" -o "$work/x.svg" 2> "$work/plot.err" || fail "plot of a missing file succeeded"
grep -q "cannot open .*none.jsonl" "$work/plot.err" || fail "plot error: $(cat "$work/plot.err")"

# (4) lr 1e30 overflows the weights in step 1, so step 2's first loss is NaN
"$mcc" compile "$root/models/tiny-gpt2.json" --target cpu --lr 1e30 --lr-warmup-iters 0 -o "$work/nan" 2>/dev/null
if "$work/nan" --data-path "$work/c_text_document" --train-iters 4 --eval-iters 0 > "$work/nan.log" 2>&1; then
  fail "a NaN loss did not stop the run"
fi
grep -q "iteration 2: the loss of micro-batch 0 is NaN" "$work/nan.log" || fail "NaN message: $(tail -1 "$work/nan.log")"
"$work/nan" --data-path "$work/c_text_document" --train-iters 4 --eval-iters 0 --skip-nan-steps > "$work/skip.log" 2>&1 ||
  fail "--skip-nan-steps stopped the run"
[ "$(grep -c 'skipping the optimizer step' "$work/skip.log")" = 3 ] || fail "want iterations 2-4 skipped"
echo "train loop ok"
