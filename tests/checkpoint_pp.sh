#!/usr/bin/env bash
# checkpoint_pp.sh MCC MODEL — checkpoints under pipeline parallelism: saved at iteration 5 by
# PP=2 (each stage's ranks write their own stage's tensors; the manifest, written by rank 0, names
# every stage's; a parameter two stages share, GPT-2's tied embedding, is written once), then
#   - resumed at PP=2: losses 6-10 equal the uninterrupted PP=2 run's bit for bit;
#   - loaded by PP=4, by one rank and by TP=2 x PP=2: losses 6-10 equal the uninterrupted run's
#     within 1e-6 (fp32 CPU ranks: the layouts' sums differ in order only).
# The model has 4 layers so that PP=4 has one a stage.
set -euo pipefail
mcc=$1; model=$2
root=$(cd "$(dirname "$0")/.." && pwd)
common=(--target cpu --num-layers 4 --vocab-size 260 --make-vocab-size-divisible-by 1 --global-batch-size 16)
source "$root/tests/checkpoint_check.sh"
compile pp2 --pp 2
compile pp4 --pp 4
compile single
compile tp2_pp2 --tp 2 --pp 2
flags=(--data-path "$work/text_text_document" --train-iters 10 --eval-iters 0)
save pp2 2 pp2
# every stage's tensors are in the manifest, each once
/usr/bin/python3 - "$work/ck/iter_0000005/manifest.json" <<'PY'
import json, sys
names = list(json.load(open(sys.argv[1]))["tensors"])  # a JSON object: each name once
for want in ("embedding.word", "layers.0.mlp.down.weight", "layers.3.mlp.down.weight", "layers.3.mlp.down.weight.adam_m"):
    assert want in names, f"the manifest lacks {want}: it names {len(names)} tensors"
print(f"manifest: {len(names)} tensors, every stage's")
PY
check pp2 2 0
check pp4 4 1e-6
check single 1 1e-6
check tp2_pp2 4 1e-6
