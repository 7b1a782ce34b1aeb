#!/usr/bin/env bash
# hf_bundle.sh [MCC] — prepares hfcheck/ for bench/hf_transformers_check.py on the GPU machine
# (which has transformers; this one has not): tiny-gpt2 and tiny-llama trained 3 steps on the CPU
# with --save, exported by `mcc convert --to hf`, and a one-rank --load --finetune run's step-1
# tokens and logits (what mcc computes with the trained weights) as .npy beside each export. The
# third, tiny-llama-rope-scaling, is LLaMA 3.1's rope (rope_scaling llama3, factor 8, base 500000)
# with eps 1e-6 over 128 positions, exported without --spec (the checkpoint records its model).
set -euo pipefail
cd "$(dirname "$0")/.."
mcc=${1:-build-dev/mcc}
out=hfcheck work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
rm -rf "$out" && mkdir -p "$out"
$mcc data preprocess --input tests/data/numerics.txt --output-prefix "$work/text" --append-eod >/dev/null 2>&1
rope=(--rotary-base 500000 --norm-epsilon 1e-6 --use-rope-scaling --rope-scaling-factor 8 --seq-length 128
  --max-position-embeddings 128)
for m in tiny-gpt2 tiny-llama tiny-llama-rope-scaling; do
  spec=models/${m%-rope-scaling}.json flags=() export=(--spec "$spec")
  if [ "$m" = tiny-llama-rope-scaling ]; then flags=("${rope[@]}") export=(); fi
  $mcc compile "$spec" --target cpu "${flags[@]}" -o "$work/$m" 2>/dev/null
  "$work/$m" --data-path "$work/text_text_document" --train-iters 3 --save "$work/ck-$m" >/dev/null
  $mcc convert --to hf "$work/ck-$m" "$out/$m" "${export[@]}"
  $mcc compile "$spec" --target cpu --keep-logits --lr-warmup-iters 0 "${flags[@]}" -o "$work/$m-one" 2>/dev/null
  "$work/$m-one" --data-path "$work/text_text_document" --train-iters 1 --load "$work/ck-$m" --finetune \
    --dump-dir "$work/d-$m" >/dev/null
  /usr/bin/python3 - "$work/d-$m" "$out/$m" <<'PY'
import os, sys
import numpy as np
sys.path.insert(0, "tests")
import torch_ref
d, o = sys.argv[1:]
np.save(os.path.join(o, "tokens.npy"), torch_ref.read_mcct(os.path.join(d, "batches.mcct"))["tokens.1.0"].astype(np.int64))
np.save(os.path.join(o, "targets.npy"), torch_ref.read_mcct(os.path.join(d, "batches.mcct"))["targets.1.0"].astype(np.int64))
np.save(os.path.join(o, "logits.npy"), torch_ref.read_mcct(os.path.join(d, "logits_step1.mcct"))["logits"].astype(np.float32))
PY
done
du -sh "$out"
