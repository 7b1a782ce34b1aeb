#!/usr/bin/env bash
# plan_memory.sh MCC — the memory `mcc compile` reports is what train_rank allocates for the plan:
# the report's total in bytes (rank 0's plan) against rank 0's start-up box, `plan memory, bytes`
# (the global slab in ir_global_span units, the arena, the copy lane's exchange buffers: the
# memory plan's config keys, which both read), for tiny GPT-2 at hidden 40 (its biases, 160
# bytes, take 256 in the slab) on CPU ranks under mpirun: a single rank, TP=2 with sequence
# parallelism and ZeRO over DP=2, and DP=2 with gradient buckets in the backward. (The exchange
# buffers are the CUDA target's copy lane: tests/passes/memory_plan_exchange.ir checks that the
# plan sizes them; comparing them with a GPU's allocation needs a GPU.)
set -euo pipefail
mcc=$1
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0} # Open MPI's unloaded components (parallel_e2e.sh)
"$mcc" data preprocess --input "$root/tests/data/numerics.txt" --output-prefix "$work/text" --append-eod >/dev/null 2>&1
status=0
check() { # RANKS FLAGS...
  local np=$1; shift
  "$mcc" compile "$root/models/tiny-gpt2.json" --target cpu --vocab-size 260 --make-vocab-size-divisible-by 1 \
    --global-batch-size 8 --hidden-size 40 --ffn-hidden-size 160 "$@" -o "$work/tr" 2>"$work/c.log" || { cat "$work/c.log"; exit 1; }
  local want got
  want=$(sed -n 's/^  total .*(\([0-9]*\) bytes: train_rank.s plan memory)$/\1/p' "$work/c.log")
  [ -n "$want" ] || { echo "FAIL: $*: no total in bytes in: $(cat "$work/c.log")"; exit 1; }
  mpirun -np "$np" "$work/tr" --data-path "$work/text_text_document" --train-iters 2 --eval-iters 0 >"$work/run.log" 2>&1 ||
    { cat "$work/run.log"; exit 1; }
  got=$(sed -n 's/^| plan memory, bytes  *| *\([0-9]*\) |$/\1/p' "$work/run.log" | sort -u | tr '\n' ' ')
  if [ "$got" = "$want " ]; then
    echo "ok: ${*:-one rank} ($np ranks): $want bytes"
  else
    echo "FAIL: ${*:-one rank} ($np ranks): mcc compile reports $want bytes, train_rank allocated: ${got:-none shown}"
    status=1
  fi
}
check 1
check 4 --tp 2 --sequence-parallel --dp 2 --use-distributed-optimizer
check 2 --dp 2 --overlap-grad-reduce --ddp-bucket-size 20000
exit $status
