#!/usr/bin/env bash
# gpu_numerics.sh MCC MODEL [NGPU [SPEC_FLAGS... --] FLAGS...] — on a GPU machine: the model
# compiled for CUDA (bf16, with FLAGS, on NGPU GPUs through --nproc-per-node) against the CPU
# oracle (fp32, one rank) for the same global batch: step-1 logits and gradients and 10 losses
# within bf16 tolerance (tests/compare_dumps.py: 3e-2 on tensors, 2e-2 on losses). SPEC_FLAGS,
# before a `--`, change what is computed (e.g. --hidden-dropout 0.1) and go to both programs.
# GPU_NUMERICS_RANKS=N instead starts N ranks under mpirun on the NGPU GPUs, sharing them: their
# collectives and pipeline transfers go through host memory (MCC_GPU_COMM=auto picks the staged
# path, runtime/cuda/comm_staged.c), so a multi-rank plan (a pipeline's stages back to back) runs
# on one GPU. Exits 77 (ctest: skipped) when the machine has fewer GPUs than NGPU.
set -euo pipefail
mcc=$1; model=$2; ngpu=${3:-1}; shift $(( $# >= 3 ? 3 : 2 ))
spec=()
sep=0 # a loop, not printf | grep -q: under pipefail printf's SIGPIPE fails at random
for a in "$@"; do [ "$a" = -- ] && sep=1; done
if [ $sep = 1 ]; then
  while [ "$1" != -- ]; do spec+=("$1"); shift; done
  shift
fi
root=$(cd "$(dirname "$0")/.." && pwd)
have=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ "$have" -ge "$ngpu" ] || { echo "needs $ngpu GPU(s), this machine has $have: skipped"; exit 77; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
# unpadded (as tests/parallel_e2e.sh): the same vocabulary at every tp
common=(--keep-logits --vocab-size 260 --make-vocab-size-divisible-by 1 --global-batch-size 16 "${spec[@]}")
"$mcc" data preprocess --input "$root/tests/data/numerics.txt" --output-prefix "$work/text" --append-eod >/dev/null 2>&1
"$mcc" compile "$root/models/$model.json" "${common[@]}" --target cpu -o "$work/cpu" 2>/dev/null
"$mcc" compile "$root/models/$model.json" "${common[@]}" --target cuda "$@" -o "$work/gpu" 2>"$work/c.log" ||
  { cat "$work/c.log"; exit 1; }
args=(--data-path "$work/text_text_document" --train-iters 10 --eval-iters 0)
"$work/cpu" "${args[@]}" --dump-dir "$work/ref" >/dev/null
launch=("$work/gpu")
[ "$ngpu" -gt 1 ] && launch+=(--nproc-per-node "$ngpu")
if [ -n "${GPU_NUMERICS_RANKS:-}" ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  launch=(mpirun -np "$GPU_NUMERICS_RANKS" --oversubscribe "$work/gpu")
fi
"${launch[@]}" "${args[@]}" --dump-dir "$work/run" >"$work/run.log" 2>&1 || { cat "$work/run.log"; exit 1; }
if [ -n "${GPU_NUMERICS_RANKS:-}" ] && [ "$GPU_NUMERICS_RANKS" -gt "$have" ]; then
  grep -q "through host memory over MPI" "$work/run.log" ||
    { cat "$work/run.log"; echo "FAIL: $GPU_NUMERICS_RANKS ranks on $have GPU(s) did not take the staged path"; exit 1; }
fi
/usr/bin/python3 "$root/tests/compare_dumps.py" --cpu "$work/ref" --gpu "$work/run"
