#!/usr/bin/env bash
# fp8_curve.sh — llama-1B (seq 1024, 4 sequences a step) for 1000 steps on the Brown corpus in bf16,
# FP8 tensorwise and FP8 delayed (issue 42's loss-curve goal); each log to $OUT, then the last-100
# means beside bf16's. Needs devrun/ (bench/bundle.sh: its libraries and data) and curve/ (the three executables,
# compiled by `mcc compile bench/configs/llama-1B.json --target cuda --seq-length 1024
# --micro-batch-size 4 --global-batch-size 4 --train-iters 1000 [--fp8-format hybrid --fp8-recipe
# tensorwise|delayed] -o curve/llama-1B-bf16|fp8t|fp8d`) unpacked beside it.
source bench/device_env.sh
for v in bf16 fp8t fp8d; do
  timeout 200 curve/llama-1B-$v --data-path devrun/data/brown_text_document --split 100,0,0 --train-iters 1000 \
    --log-interval 1 --eval-iters 0 > "$O/curve-$v.log" 2>&1
  echo "$v exit $?"; grep -E "iteration +1000/" "$O/curve-$v.log" | cut -c1-200
done
python3 - "$O" <<'PY'
import re, sys
o = sys.argv[1]
loss = {v: [float(x) for x in re.findall(r'\| lm loss: ([0-9.E+-]+) \|', open(f'{o}/curve-{v}.log').read())] for v in ('bf16', 'fp8t', 'fp8d')}
base = sum(loss['bf16'][-100:]) / 100
for v, l in loss.items():
    m = sum(l[-100:]) / max(1, len(l[-100:]))
    print(f'{v}: {len(l)} steps, last-100 mean {m:.4f}, {100 * (m / base - 1):+.2f}% of bf16')
PY
