#!/usr/bin/env bash
# checkpoint_resume.sh MCC MODEL NP FLAGS... — resume is bit for bit: the model compiled with FLAGS
# (e.g. --tp 2 --dp 2 --use-distributed-optimizer, --hidden-dropout 0.1) on NP CPU ranks, run 10
# iterations uninterrupted, and again saved at iteration 5 (--save-interval 5 --exit-interval 5:
# the run stops there) and resumed with --load to 10: steps 6-10 (loss, lr, grad norm, %.9g) must
# be the same text as the uninterrupted run's. CHECKPOINT_RUN_FLAGS: train_rank flags of the saving
# and the resuming run; with --async-save the saving run goes on to 10 while iteration 5's files are
# written in the background (the run's own steps must not change), and the resume reads iteration 5
# (the latest file set back to it): a copy the steps 6-10 changed under the writer would differ.
# CHECKPOINT_RESUME_FLAGS: compile flags of the resuming executable alone, which must compute as
# the saving one does (full recompute: a checkpoint saved without it resumes with it).
set -euo pipefail
mcc=$1; model=$2; np=$3; shift 3
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0} # Open MPI's allocations (parallel_e2e.sh)
run() { if [ "$np" = 1 ]; then "$@"; else mpirun -np "$np" --oversubscribe "$@"; fi; }
"$mcc" data preprocess --input "$root/tests/data/numerics.txt" --output-prefix "$work/text" --append-eod >/dev/null 2>&1
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
flags=(--data-path "$work/text_text_document" --split 50,50,0 --train-iters 10 --eval-interval 3 --eval-iters 1)
run "$work/train" "${flags[@]}" --dump-dir "$work/ref" >"$work/ref.log" 2>&1 || { cat "$work/ref.log"; exit 1; }
read -ra run_flags <<<"${CHECKPOINT_RUN_FLAGS:-}"
if [[ " ${run_flags[*]} " == *" --async-save "* ]]; then
  run "$work/train" "${flags[@]}" "${run_flags[@]}" --save "$work/ck" --save-interval 5 --dump-dir "$work/a" \
    >"$work/a.log" 2>&1 || { cat "$work/a.log"; exit 1; }
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
else
  run "$work/train" "${flags[@]}" "${run_flags[@]}" --save "$work/ck" --save-interval 5 --exit-interval 5 --dump-dir "$work/a" \
    >"$work/a.log" 2>&1 || { cat "$work/a.log"; exit 1; }
  grep -q "saved checkpoint at iteration 5 " "$work/a.log" || { echo "FAIL: no save at iteration 5"; cat "$work/a.log"; exit 1; }
  [ "$(wc -l <"$work/a/steps.txt")" = 5 ] || { echo "FAIL: --exit-interval 5 did not stop the run at 5"; exit 1; }
fi
run "$resume" "${flags[@]}" "${run_flags[@]}" --load "$work/ck" --dump-dir "$work/b" >"$work/b.log" 2>&1 || { cat "$work/b.log"; exit 1; }
grep -q "loaded checkpoint .* at iteration 5 " "$work/b.log" || { echo "FAIL: nothing loaded"; cat "$work/b.log"; exit 1; }
if ! diff <(sed -n 6,10p "$work/ref/steps.txt") "$work/b/steps.txt"; then
  echo "FAIL: steps 6-10 after resuming at 5 (>) differ from the uninterrupted run's (<)"; exit 1
fi
# validation after the resume continues where the uninterrupted run's was (evals_done)
diff <(grep "validation loss at iteration 9 " "$work/ref.log" | sed 's/elapsed.*//') \
     <(grep "validation loss at iteration 9 " "$work/b.log" | sed 's/elapsed.*//') ||
  { echo "FAIL: the validation loss at 9 differs after the resume"; exit 1; }
echo "steps 6-10 resumed from iteration 5 equal the uninterrupted run's, bit for bit"
