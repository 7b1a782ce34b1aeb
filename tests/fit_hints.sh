#!/usr/bin/env bash
# fit_hints.sh MCC — no "To fit" hint proposes a change that raises memory. For plans over an H100's
# memory (frontend/main.c's gpu_fit_hints: the LLaMA-3 8B FP8 recipe at dp 8, Mixtral 8x7B at tp 2
# x ep 4 on 8 ranks, LLaMA-3 8B on one rank under full recompute, LLaMA-3 70B at tp 4 x pp 4 on 64
# ranks against 60 GiB) and over a machine's host memory (host_fit_hints: offload at dp 2, and under
# ZeRO on 8 ranks), each hint line's flags are added to the plan's and the plan is made again: it
# must be accepted, and its largest stage's memory (the host's, a machine's ranks together) must not
# exceed the plan's before. Every configuration must get hints, and the GPU ones at least 4 each.
set -euo pipefail
mcc=$1
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
status=0
fail() { echo "FAIL: $*"; status=1; }

# plan KIND FLAGS...: the memory of the plan FLAGS make (gpu: the largest stage's total bytes; host:
# the GiB a machine's ranks need), with the hints it printed in $work/hints; never written out:
# --gpu-memory 1 (or --host-memory 0.001) stops mcc compile before code generation
plan() {
  local kind=$1; shift
  local limit=(--gpu-memory 1)
  [ "$kind" = host ] && limit=(--gpu-memory 1000 --host-memory 0.001)
  "$mcc" compile "$@" --target h100 "${limit[@]}" -o "$work/never" >"$work/log" 2>&1 && {
    cat "$work/log"; echo "FAIL: mcc compile $* fit where it must not" >&2; return 1; }
  grep -q 'the plan needs\|host memory per rank' "$work/log" || { cat "$work/log" >&2; return 1; }
  sed -n 's/^    \(--[^:]*\): .*/\1/p' "$work/log" >"$work/hints"
  if [ "$kind" = gpu ]; then
    sed -n 's/^  total  *[0-9.]* GiB  *(\([0-9]*\) bytes.*/\1/p' "$work/log" | sort -n | tail -1
  else
    sed -n 's/.*host memory per rank, \([0-9.]*\) GiB for the .*/\1/p' "$work/log"
  fi
}

# check KIND NAME FLAGS...: each hint of the plan FLAGS make, re-planned
check() {
  local kind=$1 name=$2; shift 2
  local base hints n=0 hint got
  base=$(plan "$kind" "$@") || { fail "$name: mcc compile $* did not plan"; return; }
  hints=$(cat "$work/hints")
  while IFS= read -r hint; do
    [ -n "$hint" ] || continue
    n=$((n + 1))
    # shellcheck disable=SC2086  # the hint is flags, split as a shell splits what a user pastes
    got=$(plan "$kind" "$@" $hint) || { fail "$name: the hint '$hint' is refused"; continue; }
    if awk -v a="$got" -v b="$base" 'BEGIN { exit !(a + 0 > b + 0) }'; then
      fail "$name: the hint '$hint' raises the $kind memory from $base to $got"
    else
      echo "$name: '$hint': $kind memory $base -> $got"
    fi
  done <<<"$hints"
  [ "$n" -ge $([ "$kind" = gpu ] && echo 4 || echo 1) ] || fail "$name: only $n hints"
}

m=$root/models
check gpu llama3-8b-fp8-recipe "$m/llama3-8b.json" --seq-length 8192 --max-position-embeddings 8192 \
  --micro-batch-size 1 --global-batch-size 128 --rotary-base 1000000 --world-size 8 --use-distributed-optimizer \
  --overlap-grad-reduce --fp8-format hybrid --fp8-amax-history-len 1024 --fp8-amax-compute-algo max --sequence-parallel
check gpu mixtral-tp2-ep4 "$m/mixtral-8x7b.json" --seq-length 4096 --tp 2 --expert-model-parallel-size 4 --world-size 8 \
  --sequence-parallel
check gpu llama3-8b-one-rank-full "$m/llama3-8b.json" --world-size 1 --micro-batch-size 2 --global-batch-size 8 \
  --recompute-granularity full --recompute-method uniform --recompute-num-layers 2
check gpu llama3-70b-tp4-pp4 "$m/llama3-70b.json" --tp 4 --pp 4 --world-size 64 --sequence-parallel \
  --use-distributed-optimizer --seq-length 4096 --pipeline-schedule 1f1b --gpu-memory 60
check host llama3-8b-offload-dp2 "$m/llama3-8b.json" --dp 2 --optimizer-cpu-offload
check host llama3-8b-offload-zero-8 "$m/llama3-8b.json" --world-size 8 --use-distributed-optimizer --optimizer-cpu-offload
[ $status = 0 ] && echo PASS
exit $status
