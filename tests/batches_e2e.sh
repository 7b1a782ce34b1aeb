#!/usr/bin/env bash
# batches_e2e.sh MCC MODEL DP TP [--resume-at K] [SPEC_FLAGS...] — the batches train_rank feeds are
# the dataset's: MODEL compiled with SPEC_FLAGS (micro and global batch: gradient accumulation;
# train_rank flags such as --dataloader-type cyclic, baked in) at --dp DP --tp TP runs 4 steps on
# DP*TP CPU ranks under mpirun (2 epochs of tests/data/numerics.txt) with --dump-dir; with
# --resume-at K it stops after K (--exit-interval, saving) and a second run resumes from that
# checkpoint (--load) to step 4. tests/batches_vs_dataset.py checks rank 0's dumped micro-batches
# against Megatron's sample order read independently from the .bin/.idx, and replays every rank's
# share of each global batch through the PyTorch reference against the logged loss, lr and grad norm.
set -euo pipefail
mcc=$1; model=$2; dp=$3; tp=$4; shift 4
resume_at=
if [[ ${1:-} == --resume-at ]]; then resume_at=$2; shift 2; fi
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0} # as parallel_e2e.sh: Open MPI's unloaded components
"$mcc" data preprocess --input "$root/tests/data/numerics.txt" --output-prefix "$work/text" --append-eod >/dev/null 2>&1
"$mcc" compile "$root/models/$model.json" --target cpu "$@" --dp "$dp" --tp "$tp" -o "$work/train_rank" 2>"$work/compile.log" ||
  { cat "$work/compile.log"; exit 1; }
train() { # DUMP [FLAGS...]: 4 steps (the run's --train-iters) into --dump-dir DUMP
  local dump=$1; shift
  mpirun -np $((dp * tp)) --oversubscribe "$work/train_rank" --data-path "$work/text_text_document" --train-iters 4 \
    --eval-iters 0 --dump-dir "$work/$dump" "$@" >"$work/$dump.log" 2>&1 || { cat "$work/$dump.log"; exit 1; }
}
dumps=(--dump-dir "$work/dump")
if [[ -n $resume_at ]]; then
  train dump --exit-interval "$resume_at" --save "$work/ckpt"
  train dump2 --load "$work/ckpt"
  dumps+=(--dump-dir "$work/dump2")
else
  train dump
fi
/usr/bin/python3 "$root/tests/batches_vs_dataset.py" --spec "$root/models/$model.json" --data-prefix "$work/text_text_document" \
  "${dumps[@]}" --dp "$dp" -- "$@"
