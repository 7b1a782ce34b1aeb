#!/usr/bin/env bash
# lr_schedule_e2e.sh MCC — train_rank's logged learning rate against Megatron's, end to end: the
# tiny GPT compiled with a schedule in samples (--train-samples, --lr-warmup-samples,
# --lr-decay-samples, --lr-wsd-decay-samples, --lr-warmup-fraction), in iterations, warming up from
# --lr-warmup-init, trained for the iterations the spec derives (train_samples / global batch: no
# --train-iters), each iteration's lr in the metrics file equal to what a transcription of Megatron's
# get_optimizer_param_scheduler and OptimizerParamScheduler.get_lr gives (its scheduler counts
# samples, a global batch a step, and logs the lr after the step); the spec file's iteration
# fields give way to --train-samples with a note, and the start-up box names the warmup's unit.
set -euo pipefail
mcc=$1
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
fail() { echo "FAIL: $*"; exit 1; }
"$mcc" data preprocess --input "$root/tests/data/numerics.txt" --output-prefix "$work/text" --append-eod >/dev/null 2>&1

# compile flags (tiny-gpt2: a global batch of 8, lr 1e-3 and min_lr 1e-4 unless given) and the
# iterations the run must take
cases=(
  "12|--train-samples 100 --lr-warmup-samples 20 --lr-decay-samples 72 --lr-warmup-init 1e-4 --lr-decay-style cosine"
  "10|--train-samples 80 --lr-warmup-samples 12 --lr-decay-style WSD --lr-wsd-decay-samples 40 --lr-wsd-decay-style minus_sqrt"
  "8|--train-samples 64 --lr-warmup-fraction 0.25 --lr-decay-style inverse-square-root --min-lr 0"
  "8|--train-iters 8 --lr-warmup-iters 3 --lr-warmup-init 5e-4 --lr-decay-style linear --lr-decay-iters 6"
)
for k in "${!cases[@]}"; do
  iters=${cases[$k]%%|*} flags=${cases[$k]#*|}
  read -ra f <<<"$flags"
  "$mcc" compile "$root/models/tiny-gpt2.json" --target cpu --vocab-size 260 --make-vocab-size-divisible-by 1 "${f[@]}" \
    -o "$work/tr$k" 2>"$work/c$k.log" || { cat "$work/c$k.log"; fail "case $k did not compile: $flags"; }
  "$work/tr$k" --data-path "$work/text_text_document" --eval-iters 0 --metrics-file "$work/m$k.jsonl" \
    >"$work/r$k.log" 2>&1 || { cat "$work/r$k.log"; fail "case $k did not run"; }
  /usr/bin/python3 - "$work/m$k.jsonl" "$iters" "$flags" <<'PY' || fail "case $k ($flags)"
import json, math, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if '"lr"' in l]
want_iters, words = int(sys.argv[2]), sys.argv[3].split()
a = {"lr": 1e-3, "min_lr": 1e-4, "lr_warmup_init": 0.0, "lr_wsd_decay_style": "exponential"}
a.update({w[2:].replace("-", "_"): v for w, v in zip(words[::2], words[1::2])})
num = lambda k: float(a[k]) if k in a else None
gbs = 8

# Megatron's training.py get_optimizer_param_scheduler: every span in samples
if "train_samples" in a:
    decay = num("lr_decay_samples") or num("train_samples")
    wsd = num("lr_wsd_decay_samples")
    warmup = num("lr_warmup_fraction") * decay if "lr_warmup_fraction" in a else num("lr_warmup_samples") or 0
else:
    decay = (num("lr_decay_iters") or num("train_iters")) * gbs
    wsd = (num("lr_wsd_decay_iters") or 0) * gbs
    warmup = num("lr_warmup_fraction") * decay if "lr_warmup_fraction" in a else (num("lr_warmup_iters") or 0) * gbs

def get_lr(n):  # optimizer_param_scheduler.py get_lr after n samples
    init, max_lr, min_lr, style = num("lr_warmup_init"), num("lr"), num("min_lr"), a["lr_decay_style"]
    if warmup > 0 and n <= warmup:
        return init + (max_lr - init) * n / warmup
    if style == "constant":
        return max_lr
    if n > decay:
        return min_lr
    if style == "inverse-square-root":
        return max(min_lr, max_lr * max(warmup, 1) ** 0.5 / max(n, 1) ** 0.5)
    ratio = (n - warmup) / (decay - warmup)
    if style == "linear":
        coeff = 1 - ratio
    elif style == "cosine":
        coeff = 0.5 * (math.cos(math.pi * ratio) + 1)
    else:  # WSD
        start = decay - wsd
        r = (n - start) / wsd
        coeff = 1 if n <= start else {"linear": 1 - r, "cosine": 0.5 * (math.cos(math.pi * r) + 1),
                                      "exponential": 2 * 0.5 ** r - 1, "minus_sqrt": 1 - r ** 0.5}[a["lr_wsd_decay_style"]]
    return min_lr + coeff * (max_lr - min_lr)

assert [r["iteration"] for r in recs] == list(range(1, want_iters + 1)), \
    f"iterations {[r['iteration'] for r in recs]}, want 1..{want_iters}"
for r in recs:  # Megatron logs the lr after its scheduler stepped `iteration` global batches
    want = get_lr(r["iteration"] * gbs)
    assert abs(r["lr"] - want) <= 1e-7 * max(want, 1e-6), f"iteration {r['iteration']}: lr {r['lr']!r}, Megatron's {want!r}"
print(f"ok: {want_iters} iterations, lr {recs[0]['lr']:.4g} .. {recs[-1]['lr']:.4g} as Megatron's")
PY
done
# the spec file's train_iters and lr_warmup_iters gave way to --train-samples, said so; the box
grep -qF "mcc: note: --train-samples trains by samples: the spec file's training.train_iters 10 gives way" "$work/c0.log" ||
  fail "no note that training.train_iters gives way: $(cat "$work/c0.log")"
grep -qF "the spec file's training.lr_warmup_iters 2 gives way" "$work/c0.log" || fail "no note for lr_warmup_iters"
grep -q '^| warmup samples  *|  *20 |' "$work/r0.log" || fail "the start-up box: $(grep warmup "$work/r0.log")"
grep -q '^| train iters  *|  *12 |' "$work/r0.log" || fail "train iters in the box: $(grep 'train iters' "$work/r0.log")"
grep -q '^| warmup iterations  *|  *3 |' "$work/r3.log" || fail "the start-up box: $(grep warmup "$work/r3.log")"
echo "lr schedules ok"
