#!/usr/bin/env bash
# plan_grads.sh MCC PLAN_GRADS_TEST SPEC... | refusal — every parameter's gradient is written by
# micro_step, in the plan of each SPEC (a shipped model, at 2 layers) in each layout, for the CPU
# (fp32) and the CUDA (bf16 working copies) targets: mcc checks it after each pass
# (passes/plan_check.c), so each `mcc ir` below fails on a plan without it. `refusal`: the check
# itself: a CUDA plan with one parameter's gradient accumulation removed is refused, naming that
# parameter. (tests/plan_grads.cmake runs each shipped model as its own test, so that ctest runs
# them side by side, and the refusal as another.)
set -uo pipefail
mcc=$1; check=$2; shift 2
[ $# -gt 0 ] || { echo "usage: $0 MCC PLAN_GRADS_TEST SPEC... | refusal"; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
status=0

if [ "$1" = refusal ]; then
  # The check refuses a plan where one gradient is never written: the bf16 plan of tiny-gpt2 with
  # the accumulate into @final_norm.bias.grad deleted.
  "$mcc" ir "$root/models/tiny-gpt2.json" --target cuda 2>/dev/null >"$work/plan.ir"
  "$check" "$work/plan.ir" || { echo "FAIL: the unchanged plan is refused"; status=1; }
  ref=$(awk '/^func micro_step/ {f = 1} f && / = global @final_norm\.bias\.grad / {print $1; exit}' "$work/plan.ir")
  awk -v ref="$ref" '/^func / {f = $2 == "micro_step"} !(f && $1 ~ /^(accumulate|copy)$/ && $2 == ref ",")' \
      "$work/plan.ir" >"$work/planted.ir"
  if out=$("$check" "$work/planted.ir"); then
    echo "FAIL: a plan that never writes @final_norm.bias.grad passes the check"; status=1
  else
    grep -q "writes nothing into @final_norm.bias.grad .*parameter @final_norm.bias would never train" <<<"$out" ||
      { echo "FAIL: the refusal does not name the gradient and its parameter: $out"; status=1; }
  fi
  exit $status
fi

layouts=("" "--tp 2" "--tp 2 --sequence-parallel" "--dp 2" "--dp 2 --use-distributed-optimizer"
         "--dp 2 --overlap-grad-reduce --ddp-bucket-size 20000")
# GPT-2 1.5B's 25 heads do not split over tp 2: 32 heads of 50 there. An MoE model's moe_layer_freq
# may list its own layer count: at 2 layers, every layer MoE
declare -A model_flags=([gpt2-1.5b]="--num-attention-heads 32")
# an MoE model also with its experts split over ep, and over ep and tp; under tp without sequence
# parallelism it is refused (Megatron's rule)
moe_layouts=("--dp 2 --expert-model-parallel-size 2" "--tp 2 --sequence-parallel --dp 2 --expert-model-parallel-size 2")
plans=0
for spec in "$@"; do
  [ -f "$spec" ] || { echo "FAIL: no spec $spec"; status=1; continue; }
  model=$(basename "$spec" .json)
  moe=0; grep -q '"num_experts"' "$spec" && moe=1 && model_flags[$model]="--moe-layer-freq 1"
  extra=(); [ $moe = 1 ] && extra=("${moe_layouts[@]}")
  # multi-latent attention on the cuda target: its narrower values as the spec has them (cuDNN's
  # attention runs them; none of these layouts splits the sequence by a ring)
  cuda_flags=""
  for layout in "${layouts[@]}" "${extra[@]}"; do
    for target in cpu cuda; do
      target_flags=""; [ $target = cuda ] && target_flags=$cuda_flags
      # shellcheck disable=SC2086  # the layout is its flags
      if ! "$mcc" ir "$spec" --target "$target" --num-layers 2 ${model_flags[$model]:-} $target_flags $layout >/dev/null 2>"$work/err"; then
        if [ $moe = 1 ] && [ "$layout" = "--tp 2" ] && grep -q "needs sequence_parallel (--sequence-parallel)" "$work/err"; then
          continue # refused, as Megatron refuses it
        fi
        echo "FAIL: $model --target $target $layout: $(tail -n 1 "$work/err")"; status=1
      fi
      plans=$((plans + 1))
    done
  done
done
echo "$plans plans write every parameter's gradient"
exit $status
