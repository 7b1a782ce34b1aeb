#!/usr/bin/env bash
# comm_overlap_cover.sh MCC — the comm_overlap pass puts enough weight-gradient work beside each
# backward collective to hide it (tests/comm_overlap_cover.py): every one but the backward's first
# all-gather, on llama-1B at TP=2 (sequence parallelism split by sequence or by batch rows), its
# grouped-query variant, and an 8B LLaMA at TP=4. (Before the pass counted the weight gradients
# already between a collective's operand and the collective, and looked past the next collective,
# 17, 17 and 33 of them fell short.) And two layouts that once crashed the pass (below).
set -euo pipefail
mcc=$1
root=$(cd "$(dirname "$0")/.." && pwd)
err=$(mktemp); trap 'rm -f "$err"' EXIT
check() { # TP SPEC FLAGS...
  local tp=$1; shift
  "$mcc" ir "$@" --tp "$tp" --sequence-parallel --rank 0 --after comm_overlap --target cuda |
    python3 "$root/tests/comm_overlap_cover.py" "$tp" 1
}
check 2 "$root/bench/configs/llama-1B.json"
check 2 "$root/bench/configs/llama-1B.json" --sequence-parallel-split batch
check 2 "$root/bench/configs/llama-1B-gqa.json"
check 4 "$root/models/llama3-8b.json" --micro-batch-size 2
# A weight gradient carried on to a collective whose operand is made before it stays where it is
# (beside that collective already): the pass once moved it above its own operands, and mcc crashed
# on the seed's 70B layout and on LLaMA-3 8B under ZB-H1, both on h100-pcie (a slower link than the
# h200's: more weight gradients carried). mcc ir verifies the IR after every pass.
for layout in "llama3-70b --tp 4 --pp 4 --dp 4 --use-distributed-optimizer --seq-length 4096" \
              "llama3-8b --tp 4 --pp 2 --pipeline-schedule zb-h1"; do
  set -- $layout
  model=$1; shift
  "$mcc" ir "$root/models/$model.json" "$@" --sequence-parallel --target h100-pcie --rank 0 --after comm_overlap \
    >/dev/null 2>"$err" || { cat "$err"; echo "FAIL: comm_overlap on $layout (h100-pcie)"; exit 1; }
  echo "ok: $layout with sequence parallelism on h100-pcie through comm_overlap"
done
