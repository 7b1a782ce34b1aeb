#!/usr/bin/env bash
# checkpoint_resume.sh MCC MODEL NP FLAGS... — resume is bit for bit: the model compiled with FLAGS
# (e.g. --tp 2 --dp 2 --use-distributed-optimizer, --hidden-dropout 0.1) on NP CPU ranks, run
# uninterrupted, and again stopped with a save and resumed with --load: the resumed steps (loss,
# lr, grad norm, %.9g) and every validation after the stop must be the same text as the
# uninterrupted run's, and the first run's steps up to the stop the uninterrupted run's too.
#
# The environment picks the case of the resume matrix (tests/checkpoint.cmake):
# CHECKPOINT_RESUME_ITERS="F S R" (default "10 5 10"): the first run's --train-iters F, stopped at
#   S (by --exit-interval S when S < F; at its own end, where it also validates, when S = F), and
#   the resumed and uninterrupted runs' --train-iters R (longer or shorter than F). F != R changes
#   the lr schedule unless FLAGS fix it (--lr-decay-iters, a schedule in samples), and the train
#   split's order unless it has one epoch for both (CHECKPOINT_DATA=large).
# CHECKPOINT_RESUME_STOP=signal: the first run (F = R, S unused) is stopped by SIGTERM to every
#   rank once it finished iteration 3, with --exit-signal-handler: it saves the iteration it stopped
#   after, wherever that is. =duration: by --exit-duration-in-mins 0.0001 (at iteration 1).
# CHECKPOINT_EVAL: the validation flags (default --eval-interval 3 --eval-iters 1: validations
#   before and after the stop).
# CHECKPOINT_DATA: numerics (default: tests/data/numerics.txt, 5 documents, --split 50,50,0), large
#   (40 generated documents, --split 80,20,0: 215 train and 62 valid samples of 32 tokens an
#   epoch) or blend (both, --data-path 0.3 numerics 0.7 large).
# CHECKPOINT_VALID_DIFFERS=WHY: the validations after the stop read other samples than the
#   uninterrupted run's, for the reason WHY (printed): each must still run, not be compared.
# CHECKPOINT_RUN_FLAGS: train_rank flags of every run; with --async-save the
#   saving run goes on to 10 while iteration 5's files are written in the background (the run's own
#   steps must not change), and the resume reads iteration 5 (the latest file set back to it): a
#   copy the steps 6-10 changed under the writer would differ.
# CHECKPOINT_RESUME_FLAGS: compile flags of the resuming executable alone, which must compute as
#   the saving one does (full recompute: a checkpoint saved without it resumes with it).
set -euo pipefail
mcc=$1; model=$2; np=$3; shift 3
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0} # Open MPI's allocations (parallel_e2e.sh)
fail() { echo "FAIL: $*"; exit 1; }
run() { if [ "$np" = 1 ]; then "$@"; else mpirun -np "$np" --oversubscribe "$@"; fi; }
read -r first stop_at iters <<<"${CHECKPOINT_RESUME_ITERS:-10 5 10}"
"$mcc" data preprocess --input "$root/tests/data/numerics.txt" --output-prefix "$work/text" --append-eod >/dev/null 2>&1
# 40 documents of 50 numbers: 8,893 byte tokens
seq 1 2000 | paste -d' ' - - - - - - - - - - | awk '{ print } NR % 5 == 0 { print "" }' >"$work/large.txt"
"$mcc" data preprocess --input "$work/large.txt" --output-prefix "$work/large" --append-eod >/dev/null 2>&1
case ${CHECKPOINT_DATA:-numerics} in
  numerics) data=(--data-path "$work/text_text_document" --split 50,50,0) ;;
  large) data=(--data-path "$work/large_text_document" --split 80,20,0) ;;
  blend) data=(--data-path 0.3 "$work/text_text_document" 0.7 "$work/large_text_document" --split 50,50,0) ;;
  *) fail "CHECKPOINT_DATA=$CHECKPOINT_DATA: numerics, large or blend" ;;
esac
"$mcc" compile "$root/models/$model.json" --target cpu --vocab-size 260 --make-vocab-size-divisible-by 1 "$@" \
  -o "$work/train" 2>"$work/c.log" || { cat "$work/c.log"; exit 1; }
read -ra resume_flags <<<"${CHECKPOINT_RESUME_FLAGS:-}"
resume=$work/train
if [ ${#resume_flags[@]} -gt 0 ]; then
  resume=$work/resume
  "$mcc" compile "$root/models/$model.json" --target cpu --vocab-size 260 --make-vocab-size-divisible-by 1 "$@" \
    "${resume_flags[@]}" -o "$resume" 2>"$work/c2.log" || { cat "$work/c2.log"; exit 1; }
fi
# a valid split of several documents, so each validation reads other samples (evals_done matters)
read -ra eval_flags <<<"${CHECKPOINT_EVAL:---eval-interval 3 --eval-iters 1}"
flags=("${data[@]}" "${eval_flags[@]}")
read -ra run_flags <<<"${CHECKPOINT_RUN_FLAGS:-}"
run "$work/train" "${flags[@]}" --train-iters "$iters" "${run_flags[@]}" --dump-dir "$work/ref" >"$work/ref.log" 2>&1 ||
  { cat "$work/ref.log"; exit 1; }
if [[ " ${run_flags[*]} " == *" --async-save "* ]]; then
  run "$work/train" "${flags[@]}" --train-iters "$iters" "${run_flags[@]}" --save "$work/ck" --save-interval 5 \
    --dump-dir "$work/a" >"$work/a.log" 2>&1 || { cat "$work/a.log"; exit 1; }
  grep -q "saved checkpoint at iteration 5 .*written in the background" "$work/a.log" ||
    { echo "FAIL: no asynchronous save at iteration 5"; cat "$work/a.log"; exit 1; }
  diff "$work/ref/steps.txt" "$work/a/steps.txt" || { echo "FAIL: the asynchronous saves changed the run's steps"; exit 1; }
  # committed at a step's end once every writer was done (rt_ckpt_poll), not left to the next save
  [ "$(grep -n "saved checkpoint at iteration 5 " "$work/a.log" | head -1 | cut -d: -f1)" -lt \
    "$(grep -n "iteration  *10/" "$work/a.log" | head -1 | cut -d: -f1)" ] ||
    { echo "FAIL: the save at 5 was committed only at the save at 10"; cat "$work/a.log"; exit 1; }
  [ "$(cat "$work/ck/latest_checkpointed_iteration.txt")" = 10 ] ||
    { echo "FAIL: the save at the run's end was not committed at exit"; cat "$work/a.log"; exit 1; }
  echo 5 >"$work/ck/latest_checkpointed_iteration.txt"
elif [ "${CHECKPOINT_RESUME_STOP:-}" = signal ]; then
  # every rank signalled, as a scheduler's preemption does, once rank 0 wrote iteration 3's
  # metrics record (written whole when made: its log reaches mpirun's output later)
  run "$work/train" "${flags[@]}" --train-iters "$iters" "${run_flags[@]}" --save "$work/ck" --exit-signal-handler \
    --metrics-file "$work/a.jsonl" --dump-dir "$work/a" >"$work/a.log" 2>&1 &
  pid=$!
  for _ in $(seq 1000); do grep -q '"iteration": *3[,}]' "$work/a.jsonl" 2>/dev/null && break; sleep 0.01; done
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/exe" 2>/dev/null)" = "$work/train" ] && kill -TERM "${p#/proc/}" 2>/dev/null || true
  done
  rc=0; wait "$pid" || rc=$?
  [ "$rc" != 0 ] || { cat "$work/a.log"; fail "SIGTERM: the run went on to its end (status 0)"; }
  stop_at=$(sed -n 's/.*saved checkpoint at iteration \([0-9]*\) .*/\1/p' "$work/a.log" | tail -1)
  [ -n "$stop_at" ] && [ "$stop_at" -lt "$iters" ] || { cat "$work/a.log"; fail "SIGTERM saved '$stop_at' of $iters"; }
  [ "$(wc -l <"$work/a/steps.txt")" = "$stop_at" ] || fail "the SIGTERM save at $stop_at is not the last step run"
elif [ "${CHECKPOINT_RESUME_STOP:-}" = duration ]; then
  # past by the first iteration's end: the process's start-up alone takes longer than 6 ms
  run "$work/train" "${flags[@]}" --train-iters "$iters" "${run_flags[@]}" --save "$work/ck" \
    --exit-duration-in-mins 0.0001 --dump-dir "$work/a" >"$work/a.log" 2>&1 || { cat "$work/a.log"; exit 1; }
  stop_at=$(sed -n 's/.*saved checkpoint at iteration \([0-9]*\) .*/\1/p' "$work/a.log" | tail -1)
  grep -q "exiting program after .* at iteration $stop_at$" "$work/a.log" && [ "$stop_at" -lt "$iters" ] ||
    { cat "$work/a.log"; fail "--exit-duration-in-mins saved '$stop_at' of $iters"; }
else
  stop=()
  [ "$stop_at" -lt "$first" ] && stop=(--exit-interval "$stop_at")
  run "$work/train" "${flags[@]}" --train-iters "$first" "${run_flags[@]}" --save "$work/ck" --save-interval "$stop_at" \
    "${stop[@]}" --dump-dir "$work/a" >"$work/a.log" 2>&1 || { cat "$work/a.log"; exit 1; }
  grep -q "saved checkpoint at iteration $stop_at " "$work/a.log" || { cat "$work/a.log"; fail "no save at $stop_at"; }
  [ "$(wc -l <"$work/a/steps.txt")" = "$stop_at" ] || fail "the first run did not stop at $stop_at"
fi
# up to the stop, the first run is the uninterrupted one
diff <(head -n "$stop_at" "$work/ref/steps.txt") <(head -n "$stop_at" "$work/a/steps.txt") ||
  fail "steps 1-$stop_at of the first run (>) differ from the uninterrupted run's (<)"
run "$resume" "${flags[@]}" --train-iters "$iters" "${run_flags[@]}" --load "$work/ck" --dump-dir "$work/b" \
  >"$work/b.log" 2>&1 || { cat "$work/b.log"; exit 1; }
grep -q "loaded checkpoint .* at iteration $stop_at " "$work/b.log" || { cat "$work/b.log"; fail "nothing loaded"; }
if ! diff <(sed -n "$((stop_at + 1)),${iters}p" "$work/ref/steps.txt") "$work/b/steps.txt"; then
  fail "steps $((stop_at + 1))-$iters after resuming at $stop_at (>) differ from the uninterrupted run's (<)"
fi
# validation after the resume continues where the uninterrupted run's was (evals_done)
valid() { sed -n 's/ validation loss at iteration \([0-9]*\) \(.*\)elapsed.*/\1 \2/p' "$1" | awk -v s="$stop_at" '$1 > s'; }
if [ -n "${CHECKPOINT_VALID_DIFFERS:-}" ]; then
  [ "$(valid "$work/ref.log" | cut -d' ' -f1)" = "$(valid "$work/b.log" | cut -d' ' -f1)" ] ||
    fail "the resumed run validated at other iterations than the uninterrupted run"
  echo "validations after the resume not compared: $CHECKPOINT_VALID_DIFFERS"
else
  diff <(valid "$work/ref.log") <(valid "$work/b.log") ||
    fail "the validation losses after the resume (>) differ from the uninterrupted run's (<)"
fi
echo "steps $((stop_at + 1))-$iters resumed from iteration $stop_at equal the uninterrupted run's, bit for bit" \
     "($(valid "$work/b.log" | wc -l) validations after it)"
