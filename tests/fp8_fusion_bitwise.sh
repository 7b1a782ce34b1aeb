#!/usr/bin/env bash
# fp8_fusion_bitwise.sh MCC MODEL — FP8's amaxes made by the kernels that write their tensors (the
# fusion pass's amax results: a norm's output, SwiGLU's, a norm gradient's dx, swiglu_grad's dgate
# and dup) are the bits the separate fp8_amax instructions compute (mcc compile --unfused-fp8-amax),
# so both programs train alike byte for byte on CPU ranks: over 10 steps the dumps (the batches,
# step-1 gradients, initial and final weights, each step's loss, lr and grad norm) of tensorwise and
# delayed scaling on one rank (tensorwise also with SwiGLU recomputed: its gradient's kernel,
# swiglu_grad_product, makes the amaxes), tensorwise at TP=2 with sequence parallelism (the fused amax
# max-all-reduced over tp) and delayed at DP=2 (the history's step amax from the fused result). The
# fused plans hold fewer fp8_amax instructions than the unfused ones (else the test fails: nothing
# was fused).
set -euo pipefail
mcc=$1; model=$2
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0} # Open MPI's allocations (parallel_e2e.sh)
"$mcc" data preprocess --input "$root/tests/data/numerics.txt" --output-prefix "$work/text" --append-eod >/dev/null 2>&1
spec=("$root/models/$model.json" --target cpu --vocab-size 260 --make-vocab-size-divisible-by 1)
status=0 runs=0
source "$root/tests/same_dumps.sh"
train() { # NAME NP FLAGS...: compiled and run 10 steps, dumps in $work/NAME
  local name=$1 np=$2; shift 2
  "$mcc" compile "${spec[@]}" "$@" -o "$work/tr" 2>"$work/c.log" || { cat "$work/c.log"; exit 1; }
  local run=("$work/tr" --data-path "$work/text_text_document" --train-iters 10 --eval-iters 0 --dump-dir "$work/$name")
  if [ "$np" = 1 ]; then "${run[@]}"; else mpirun -np "$np" "${run[@]}"; fi >"$work/run.log" 2>&1 ||
    { cat "$work/run.log"; exit 1; }
}
amaxes() { "$mcc" ir "${spec[@]}" "$@" 2>/dev/null | grep -c ' = fp8_amax ' || true; }
same() { # NP FLAGS...: the fused program against the unfused one
  local np=$1; shift
  runs=$((runs + 1))
  local fused unfused
  fused=$(amaxes "$@"); unfused=$(amaxes "$@" --unfused-fp8-amax)
  [ "$fused" -lt "$unfused" ] || { echo "FAIL: $*: $fused fp8_amax instructions fused, $unfused apart"; status=1; }
  train "fused$runs" "$np" "$@"; train "unfused$runs" "$np" "$@" --unfused-fp8-amax
  same_dumps "$work" "unfused$runs" "fused$runs" "$np rank(s) $* ($fused fp8_amax instructions left of $unfused)"
}
tensorwise=(--fp8-format hybrid --fp8-recipe tensorwise)
delayed=(--fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 4 --fp8-amax-compute-algo max)
same 1 "${tensorwise[@]}"
same 1 "${delayed[@]}"
same 1 "${tensorwise[@]}" --recompute-granularity selective --recompute-modules mlp_act # swiglu_grad_product's
same 2 "${tensorwise[@]}" --tp 2 --sequence-parallel
same 2 "${delayed[@]}" --dp 2
[ $status = 0 ] && echo PASS
exit $status
