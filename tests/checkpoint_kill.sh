#!/usr/bin/env bash
# checkpoint_kill.sh MCC [KILLS [FLAGS...]] — a crash at any moment leaves the latest complete checkpoint
# loadable: a train_rank that saves after every iteration (--save-interval 1, --save-retain 2) and
# resumes from its own --save directory is killed with SIGKILL at random moments KILLS times
# (default 50), many of them inside a save (a .tmp directory left behind); each next run must load
# the latest checkpoint (or, before the first, start from scratch) without an error, and from the
# iteration the latest file named when it started. A last run resumes once more, to the next
# multiple of 10: its steps equal the uninterrupted run's, bit for bit. FLAGS go to every saving
# run (--async-save: the kills also land while a writer thread writes, and before the commit that
# follows it at a later step).
set -euo pipefail
mcc=$1; kills=${2:-50}; shift $(($# < 2 ? $# : 2))
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
# one BLAS thread a run (the runs and the reference alike, so their steps still compare bit for
# bit): on this tiny model OpenBLAS's second thread only spins, a third of the speed at twice the CPU
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
"$mcc" data preprocess --input "$root/tests/data/numerics.txt" --output-prefix "$work/text" --append-eod >/dev/null 2>&1
"$mcc" compile "$root/models/tiny-gpt2.json" --target cpu --vocab-size 260 --make-vocab-size-divisible-by 1 \
  --micro-batch-size 4 --global-batch-size 4 -o "$work/train" 2>"$work/c.log" || { cat "$work/c.log"; exit 1; }
iters=3000
flags=(--data-path "$work/text_text_document" --train-iters $iters --eval-iters 0)
ck=(--save "$work/ck" --save-interval 1 --save-retain 2 --load "$work/ck" "$@")
# The kills' moments are scaled to this machine and build: the first run, from scratch to iteration
# 3 (start-up and three steps with their saves), takes T; each later run is killed after a time drawn
# from [T, 4 T], past its start-up and load, through some steps and their saves (10-20 a run, so
# that the 3000 iterations of the schedule are never reached).
t0=$(date +%s%N)
"$work/train" "${flags[@]}" "${ck[@]}" --exit-interval 3 >"$work/run0.log" 2>&1 || { cat "$work/run0.log"; exit 1; }
t=$((($(date +%s%N) - t0) / 1000)) # microseconds
in_save=0
for k in $(seq 1 "$kills"); do
  latest=$(cat "$work/ck/latest_checkpointed_iteration.txt" 2>/dev/null || echo none)
  "$work/train" "${flags[@]}" "${ck[@]}" >"$work/run$k.log" 2>&1 &
  pid=$!
  sleep "$(awk -v t=$t -v r=$RANDOM 'BEGIN { printf "%.6f", t * (1 + 3 * r / 32768) / 1e6 }')"
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  if grep -qE "error|AddressSanitizer|runtime error" "$work/run$k.log"; then
    echo "FAIL: run $k (after $((k - 1)) kills) failed to resume:"; cat "$work/run$k.log"; exit 1
  fi
  ls -d "$work"/ck/iter_*.tmp >/dev/null 2>&1 && in_save=$((in_save + 1))
  # it resumed from the checkpoint the latest file named when it started
  at=$(sed -n 's/.*loaded checkpoint .* at iteration \([0-9]*\) .*/\1/p' "$work/run$k.log")
  if [ -n "$at" ] && [ "$at" != "$latest" ]; then
    echo "FAIL: run $k loaded iteration $at, but the latest complete checkpoint was $latest"; exit 1
  fi
done
# the last run stops at the next multiple of 10 (--exit-interval): steps enough to compare
"$work/train" "${flags[@]}" "${ck[@]}" --exit-interval 10 --dump-dir "$work/last" >"$work/last.log" 2>&1 ||
  { cat "$work/last.log"; exit 1; }
from=$(sed -n 's/.*loaded checkpoint .* at iteration \([0-9]*\) .*/\1/p' "$work/last.log")
[ -n "$from" ] || { echo "FAIL: the last run loaded nothing"; cat "$work/last.log"; exit 1; }
[ -s "$work/last/steps.txt" ] ||
  { echo "FAIL: the last run ran no step (resumed at $from of $iters: the kills left no steps to compare)"; exit 1; }
to=$(tail -1 "$work/last/steps.txt" | cut -d' ' -f1)
# the uninterrupted run, from scratch to the same iteration (the same --train-iters: the same schedule)
"$work/train" "${flags[@]}" --exit-interval "$to" --dump-dir "$work/ref" >"$work/ref.log" 2>&1 || { cat "$work/ref.log"; exit 1; }
diff <(sed -n "$((from + 1)),${to}p" "$work/ref/steps.txt") "$work/last/steps.txt" ||
  { echo "FAIL: steps after resuming at $from (>) differ from the uninterrupted run's (<)"; exit 1; }
n=$(ls -d "$work"/ck/iter_??????? | wc -l)
[ "$n" -le 2 ] || { echo "FAIL: --save-retain 2 left $n checkpoints"; exit 1; }
echo "$k SIGKILLs $((t / 1000))-$((4 * t / 1000)) ms into a run ($in_save of them during a save): each run resumed" \
     "from the latest complete checkpoint; the last, from iteration $from, equals the uninterrupted run bit for bit"
