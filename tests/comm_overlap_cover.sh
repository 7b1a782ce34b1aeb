#!/usr/bin/env bash
# comm_overlap_cover.sh MCC — the comm_overlap pass puts enough weight-gradient work beside each
# backward collective to hide it (tests/comm_overlap_cover.py): on llama-1B at TP=2 with sequence
# parallelism, split by sequence or by batch rows, every one but the backward's first all-gather.
# (Before the pass counted the weight gradients already between a collective's operand and the
# collective, 16 all-gathers had a third of their target: attention's k projection alone.)
set -euo pipefail
mcc=$1
root=$(cd "$(dirname "$0")/.." && pwd)
for split in sequence batch; do
  "$mcc" ir "$root/bench/configs/llama-1B.json" --tp 2 --sequence-parallel --sequence-parallel-split $split \
    --rank 0 --after comm_overlap --target cuda | python3 "$root/tests/comm_overlap_cover.py" 2 1
done
