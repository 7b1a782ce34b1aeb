#!/usr/bin/env bash
# comm_overlap_cover.sh MCC — the comm_overlap pass puts enough weight-gradient work beside each
# backward collective to hide it (tests/comm_overlap_cover.py): every one but the backward's first
# all-gather, on llama-1B at TP=2 (sequence parallelism split by sequence or by batch rows), its
# grouped-query variant, and an 8B LLaMA at TP=4. (Before the pass counted the weight gradients
# already between a collective's operand and the collective, and looked past the next collective,
# 17, 17 and 33 of them fell short.)
set -euo pipefail
mcc=$1
root=$(cd "$(dirname "$0")/.." && pwd)
check() { # TP SPEC FLAGS...
  local tp=$1; shift
  "$mcc" ir "$@" --tp "$tp" --sequence-parallel --rank 0 --after comm_overlap --target cuda |
    python3 "$root/tests/comm_overlap_cover.py" "$tp" 1
}
check 2 "$root/bench/configs/llama-1B.json"
check 2 "$root/bench/configs/llama-1B.json" --sequence-parallel-split batch
check 2 "$root/bench/configs/llama-1B-gqa.json"
check 4 "$root/models/llama3-8b.json" --micro-batch-size 2
