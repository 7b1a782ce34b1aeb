#!/usr/bin/env bash
# interleave_schedule.sh MCC — what --tp-comm-interleave is for: the sequence collectives of
# micro_step that nothing runs beside (overlap=0 after comm_overlap). On llama-1B at TP=2 with the
# batch split they fall from the whole forward's (66 of 132) to at most 2 of 264; at most 2 also for
# an 8B LLaMA at TP=8, GPT-2 (a bias and a residual add between each reduce-scatter and the next
# all-gather) and the fp32 plan (twice the bytes to hide). `mcc ir` builds the GPU's (bf16) plan
# without the CUDA toolkit.
set -euo pipefail
mcc=$1
root=$(cd "$(dirname "$0")/.." && pwd)
count() { # PATTERN SPEC FLAGS...: matching sequence collectives in micro_step
  local pattern=$1; shift
  "$mcc" ir "$@" --sequence-parallel --rank 0 --after comm_overlap 2>/dev/null |
    awk '/^func micro_step/,/^}/' | grep -c "$pattern" || true
}
fails=0
check() { # MAX_EXPOSED SPEC FLAGS...
  local max=$1; shift
  local exposed total
  exposed=$(count '_seq .*overlap=0' "$@") total=$(count '_seq ' "$@")
  if [ "$total" -gt 0 ] && [ "$exposed" -le "$max" ]; then echo "ok: $exposed of $total exposed: $*"
  else echo "FAIL: $exposed of $total exposed (at most $max): $*"; fails=$((fails + 1)); fi
}
llama1b=("$root/bench/configs/llama-1B.json" --tp 2 --sequence-parallel-split batch)
plain=$(count '_seq .*overlap=0' "${llama1b[@]}" --target cuda)
[ "$plain" -eq 66 ] && echo "ok: 66 exposed without interleaving" || { echo "FAIL: $plain exposed without interleaving, not 66"; fails=$((fails + 1)); }
check 2 "${llama1b[@]}" --target cuda --tp-comm-interleave
check 2 "${llama1b[@]}" --target cpu --tp-comm-interleave
check 2 "$root/models/llama3-8b.json" --tp 8 --micro-batch-size 2 --target cuda --tp-comm-interleave
check 2 "$root/bench/configs/gpt2-124M.json" --tp 2 --vocab-size 50304 --target cuda --tp-comm-interleave
[ $fails -eq 0 ] && echo PASS || { echo "$fails failed"; exit 1; }
