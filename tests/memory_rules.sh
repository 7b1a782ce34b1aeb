#!/usr/bin/env bash
# memory_rules.sh MCC RULE — what the memory plan promises a user, on the plans of issue 39's
# recipes, planned for an H100 without a GPU (--gpu-memory 1 stops mcc compile before code
# generation; the report before it has the figures):
#   zero       --use-distributed-optimizer never raises a plan: Mixtral 8x7B with its experts' replicas
#              one rank (edp 1: tp 2 x ep 4 on 8 ranks, and tp 2 x pp 4 x ep 4 on 32), LLaMA-3 8B at dp
#              8 and tiny-moe at dp 2 x ep 2 plan no more with it than without, stage by stage
#   grad_bf16  --grad-reduce-in-bf16 halves the gradients' bytes (accumulators and ZeRO's blocks) and
#              nothing else, at dp 8 with ZeRO and at tp 2 x dp 2 without
#   fp8        FP8 keeps no bf16 activation beside an FP8 copy that alone is read, and no FP8 copy of a
#              weight, for the backward: the LLaMA-3 8B recipe's activations under FP8 are below bf16's;
#              and selective recompute saves under FP8 (the quantized norms' and SwiGLU's outputs go too)
#   recipe     Megatron's LLaMA-3 8B H100 FP8 recipe (examples/llama/train_llama3_8b_h100_fp8.sh's
#              flags, dp 8) compiles for --target h100 and the report says it fits: 98.3 GiB before
#              issue 39, 74.8 with bf16 gradients and no FP8 weight copies kept
set -euo pipefail
mcc=$1; rule=$2
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
status=0
fail() { echo "FAIL: $*"; status=1; }

# report FLAGS...: the memory report of the plan FLAGS make, in $work/log (never written out)
report() {
  "$mcc" compile "$@" --target h100 --gpu-memory 1 --memory-report -o "$work/never" >"$work/log" 2>&1 && {
    cat "$work/log"; echo "FAIL: mcc compile $* fit 1 GiB" >&2; return 1; }
  grep -q 'the plan needs' "$work/log" || { cat "$work/log" >&2; return 1; }
}
# field NAME: the report's NAME line's GiB, a stage a line; totals: each stage's total bytes
field() { sed -n "s/^  $1  *\([0-9.]*\) GiB.*/\1/p" "$work/log"; }
totals() { sed -n 's/^  total  *[0-9.]* GiB  *(\([0-9]*\) bytes.*/\1/p' "$work/log" | tr '\n' ' '; }

m=$root/models
recipe=("$m/llama3-8b.json" --seq-length 8192 --max-position-embeddings 8192 --micro-batch-size 1
  --global-batch-size 128 --rotary-base 1000000 --init-method-std 0.0134 --clip-grad 1.0 --weight-decay 0.1
  --adam-beta2 0.95 --lr 0.00015 --min-lr 0.00001 --lr-decay-style cosine --world-size 8
  --use-distributed-optimizer --overlap-grad-reduce --sequence-parallel)
fp8=(--fp8-format hybrid --fp8-amax-history-len 1024 --fp8-amax-compute-algo max)

# no_larger NAME FLAGS... -- MORE...: each stage's total with MORE at most without it
no_larger() {
  local name=$1; shift
  local base=() more=()
  while [ "$1" != -- ]; do base+=("$1"); shift; done
  shift; more=("$@")
  report "${base[@]}" || { fail "$name: no plan"; return; }
  local without with
  without=$(totals)
  report "${base[@]}" "${more[@]}" || { fail "$name: no plan with ${more[*]}"; return; }
  with=$(totals)
  echo "$name: total bytes by stage ${without}-> ${with}(${more[*]})"
  python3 -c 'import sys; a, b = (list(map(float, s.split())) for s in sys.argv[1:]); sys.exit(len(a) != len(b) or any(y > x for x, y in zip(a, b)))' \
    "$without" "$with" || fail "$name: ${more[*]} raises the plan: $without-> $with bytes"
}

case $rule in
zero)
  mixtral=("$m/mixtral-8x7b.json" --seq-length 4096 --tp 2 --expert-model-parallel-size 4 --sequence-parallel)
  no_larger mixtral-edp1 "${mixtral[@]}" --world-size 8 -- --use-distributed-optimizer
  no_larger mixtral-pp4-edp1 "${mixtral[@]}" --pp 4 --world-size 32 -- --use-distributed-optimizer
  no_larger mixtral-edp4 "${mixtral[@]}" --world-size 32 -- --use-distributed-optimizer
  no_larger llama3-8b-dp8 "$m/llama3-8b.json" --world-size 8 -- --use-distributed-optimizer
  no_larger tiny-moe-dp2-ep2 "$m/tiny-moe.json" --dp 2 --expert-model-parallel-size 2 -- --use-distributed-optimizer
  ;;
grad_bf16)
  for layout in "--world-size 8 --use-distributed-optimizer" "--tp 2 --dp 2 --sequence-parallel"; do
    # shellcheck disable=SC2086  # the layout's flags
    report "$m/llama3-8b.json" $layout || { fail "$layout: no plan"; continue; }
    cp "$work/log" "$work/f32"
    # shellcheck disable=SC2086
    report "$m/llama3-8b.json" $layout --grad-reduce-in-bf16 || { fail "$layout: no bf16 plan"; continue; }
    for name in parameters "optimizer state" "peak activations"; do
      [ "$(field "$name")" = "$(sed -n "s/^  $name  *\([0-9.]*\) GiB.*/\1/p" "$work/f32")" ] ||
        fail "$layout: --grad-reduce-in-bf16 changes the $name"
    done
    f32=$(sed -n 's/^  gradients  *\([0-9.]*\) GiB.*/\1/p' "$work/f32") bf16=$(field gradients)
    echo "$layout: gradients $f32 -> $bf16 GiB with --grad-reduce-in-bf16"
    awk -v a="$f32" -v b="$bf16" 'BEGIN { exit !(a > 1 && (2 * b - a) ^ 2 < 1e-5) }' ||
      fail "$layout: --grad-reduce-in-bf16 does not halve the gradients ($f32 -> $bf16 GiB)"
  done
  ;;
fp8)
  report "${recipe[@]}" || fail "no bf16 plan"
  bf16=$(field "peak activations")
  report "${recipe[@]}" "${fp8[@]}" || fail "no FP8 plan"
  fp8_none=$(field "peak activations")
  grep -q '^  fp8_quantize ' "$work/log" || fail "no FP8 copies live at the FP8 plan's peak"
  report "${recipe[@]}" "${fp8[@]}" --recompute-granularity selective || fail "no FP8 plan with selective recompute"
  fp8_selective=$(field "peak activations")
  echo "peak activations: bf16 $bf16 GiB, FP8 $fp8_none, FP8 with selective recompute $fp8_selective"
  awk -v a="$fp8_none" -v b="$bf16" 'BEGIN { exit !(a < b) }' ||
    fail "FP8's activations ($fp8_none GiB) are not below bf16's ($bf16 GiB): copies kept beside the FP8 ones"
  awk -v a="$fp8_selective" -v b="$fp8_none" 'BEGIN { exit !(a < b - 4) }' ||
    fail "selective recompute under FP8 saves less than 4 GiB ($fp8_none -> $fp8_selective GiB)"
  ;;
recipe)
  "$mcc" compile "${recipe[@]}" "${fp8[@]}" --target h100 -o "$work/before" >"$work/log" 2>&1 && fail "fits without --grad-reduce-in-bf16"
  echo "without --grad-reduce-in-bf16: $(grep 'the plan needs' "$work/log")"
  "$mcc" compile "${recipe[@]}" "${fp8[@]}" --grad-reduce-in-bf16 --target h100 -o "$work/train_rank" >"$work/log" 2>&1 ||
    { cat "$work/log"; fail "the recipe with --grad-reduce-in-bf16 does not compile for --target h100"; }
  grep -q "^mcc: the plan fits: .* GiB the GPU has (the h100 target's" "$work/log" ||
    fail "the report does not say the plan fits: $(cat "$work/log")"
  echo "with --grad-reduce-in-bf16: $(grep 'the plan fits' "$work/log")"
  ;;
*) echo "usage: memory_rules.sh MCC zero|grad_bf16|fp8|recipe" >&2; exit 2 ;;
esac
[ $status = 0 ] && echo PASS
exit $status
