#!/usr/bin/env bash
# tensorboard_e2e.sh MCC — train_rank --tensorboard-dir writes the metrics file's scalars under
# Megatron's tags: the tiny GPT on the CPU, 4 iterations with validation at 2 and 4; every
# metrics record's loss, lr, grad norm, iteration time and valid loss appear in the event file
# (read by tests/tensorboard_read.py, which shares no code with the writer) at its iteration.
set -euo pipefail
mcc=$1
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
"$mcc" data preprocess --input "$root/tests/data/numerics.txt" --output-prefix "$work/text" --append-eod >/dev/null 2>&1
"$mcc" compile "$root/models/tiny-gpt2.json" --target cpu -o "$work/tr" 2>/dev/null
"$work/tr" --data-path "$work/text_text_document" --train-iters 4 --eval-interval 2 --eval-iters 1 --split 60,40,0 \
  --metrics-file "$work/m.jsonl" --tensorboard-dir "$work/tb/run1" > "$work/log"
/usr/bin/python3 "$root/tests/tensorboard_read.py" "$work/tb/run1" > "$work/scalars.tsv"
/usr/bin/python3 - "$work/m.jsonl" "$work/scalars.tsv" <<'PY'
import json, struct, sys
f32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]
tb = {}
for line in open(sys.argv[2]):
    tag, step, value = line.rstrip("\n").split("\t")
    assert (tag, int(step)) not in tb, f"{tag} at {step} twice"
    tb[tag, int(step)] = float(value)
want = {"loss": ("lm loss", 1), "lr": ("learning-rate", 1), "grad_norm": ("grad-norm", 1),
        "ms_per_iter": ("iteration-time", 1e-3), "valid_loss": ("lm loss validation", 1),
        "valid_ppl": ("lm loss validation ppl", 1)}
seen = 0
for line in open(sys.argv[1]):
    rec = json.loads(line)
    for key, (tag, scale) in want.items():
        if key in rec:
            got = tb.get((tag, rec["iteration"]))
            assert got is not None, f"no {tag} at iteration {rec['iteration']}"
            assert got == f32(rec[key] * scale), f"{tag} at {rec['iteration']}: {got} != {rec[key]} * {scale}"
            seen += 1
assert seen == 4 * 4 + 2 * 2, f"{seen} scalars matched"
print(f"tensorboard_e2e: {seen} scalars match the metrics file")
PY
