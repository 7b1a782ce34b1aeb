#!/usr/bin/env bash
# recompute_bitwise.sh MCC MODEL — full recompute computes what no recompute computes, bit for bit
# on CPU ranks: the replay runs the forward's instructions on the forward's inputs (dropout's masks
# drawn again from the same seed, site and element indices). With dropout, over 10 steps, the dumps
# (the batches, step-1 gradients, initial and final weights, each step's loss, lr and grad norm) of
# uniform 1, uniform 2 and block 1 on one rank, and of uniform 1 at TP=2 x DP=2 with the
# distributed optimizer (an MoE model: with sequence parallelism and EP=2; and its token dropping at
# CP=2, uniform 2, expert bias, uniform 1, and PP=2, block 1), and of selective recompute under FP8
# (the recomputed norms' and activations' quantized copies made again by the forward's scales; an
# MoE model's also under full recompute, uniform 1: its experts' per-expert quantizes replayed), are
# byte for byte the no-recompute program's of the same layout.
# recompute_bitwise.sh MCC MODEL modules — instead, the selective modules recomputed as regions
# (passes/recompute.c's mark_regions) against none: multi-latent attention's up projections (alone,
# with layernorm), the dense MLP, the routed experts (moe), their activation (moe_act), the shared
# expert, and Megatron's DeepSeek-V3 recipe's set (mlp moe mla_up_proj layernorm), on one rank and
# at TP=2 with SP x DP=2 ZeRO x EP=2 (a model with all of them: tiny-deepseek-v3); under delayed
# FP8 there too, and under blockwise FP8 (its experts' too) on one rank and at EP=2.
set -euo pipefail
mcc=$1; model=$2; only=${3:-}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0} # Open MPI's allocations (parallel_e2e.sh)
"$mcc" data preprocess --input "$root/tests/data/numerics.txt" --output-prefix "$work/text" --append-eod >/dev/null 2>&1
status=0
train() { # NAME NP FLAGS...: compiled and run 10 steps, dumps in $work/NAME
  local name=$1 np=$2; shift 2
  "$mcc" compile "$root/models/$model.json" --target cpu --vocab-size 260 --make-vocab-size-divisible-by 1 \
    --hidden-dropout 0.1 --attention-dropout 0.1 "$@" -o "$work/tr" 2>"$work/c.log" || { cat "$work/c.log"; exit 1; }
  local run=("$work/tr" --data-path "$work/text_text_document" --train-iters 10 --eval-iters 0 --dump-dir "$work/$name")
  if [ "$np" = 1 ]; then "${run[@]}"; else mpirun -np "$np" "${run[@]}"; fi >"$work/run.log" 2>&1 ||
    { cat "$work/run.log"; exit 1; }
}
source "$root/tests/same_dumps.sh"
same() { same_dumps "$work" "$1" "$2"; } # REF NAME
if [ "$only" = modules ]; then
  sel=(--recompute-granularity selective --recompute-modules)
  train none 1
  for m in mla_up_proj layernorm,mla_up_proj mlp moe moe_act shared_experts mlp,moe,mla_up_proj,layernorm; do
    train "sel_$m" 1 "${sel[@]}" "$m"; same none "sel_$m"
  done
  tpdp=(--tp 2 --sequence-parallel --dp 2 --expert-model-parallel-size 2 --use-distributed-optimizer)
  train tp2_dp2_zero 4 "${tpdp[@]}"
  for m in mla_up_proj mlp,moe,mla_up_proj,layernorm,shared_experts; do
    train "tp2_dp2_zero_$m" 4 "${tpdp[@]}" "${sel[@]}" "$m"; same tp2_dp2_zero "tp2_dp2_zero_$m"
  done
  # under FP8 (delayed: its scales the same on every layout) the regions open at FP8 GEMMs, whose
  # weights' quantizes replay with them, and the activations' quantized copies replay too
  fp8=(--fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 4)
  all=mlp,moe,mla_up_proj,layernorm,shared_experts
  train fp8 1 "${fp8[@]}"; train "fp8_$all" 1 "${fp8[@]}" "${sel[@]}" "$all"; same fp8 "fp8_$all"
  train fp8_tp2_dp2_zero 4 "${tpdp[@]}" "${fp8[@]}"
  train "fp8_tp2_dp2_zero_$all" 4 "${tpdp[@]}" "${fp8[@]}" "${sel[@]}" "$all"; same fp8_tp2_dp2_zero "fp8_tp2_dp2_zero_$all"
  # blockwise (the widths tile by 128: MLA's one head of 128 + 128 rope channels, latents of 128):
  # the regions replay the routed experts' block-scaled GEMMs, their weights' quantizes with them,
  # on one rank and at EP=2 (no TP: blockwise refuses it)
  fp8b=(--fp8-format e4m3 --fp8-recipe blockwise --hidden-size 128 --ffn-hidden-size 256 --moe-ffn-hidden-size 128
        --moe-shared-expert-intermediate-size 128 --num-attention-heads 1 --q-lora-rank 128 --kv-lora-rank 128
        --qk-head-dim 128 --qk-pos-emb-head-dim 128 --v-head-dim 128)
  train fp8b 1 "${fp8b[@]}"; train "fp8b_$all" 1 "${fp8b[@]}" "${sel[@]}" "$all"; same fp8b "fp8b_$all"
  ep=(--dp 2 --expert-model-parallel-size 2)
  train fp8b_ep2 2 "${ep[@]}" "${fp8b[@]}"
  train "fp8b_ep2_$all" 2 "${ep[@]}" "${fp8b[@]}" "${sel[@]}" "$all"; same fp8b_ep2 "fp8b_ep2_$all"
  [ $status = 0 ] && echo PASS
  exit $status
fi
full=(--recompute-granularity full --recompute-method)
train none 1
train uniform1 1 "${full[@]}" uniform --recompute-num-layers 1; same none uniform1
train uniform2 1 "${full[@]}" uniform --recompute-num-layers 2; same none uniform2
train block1 1 "${full[@]}" block --recompute-num-layers 1; same none block1
tpdp=(--tp 2 --dp 2 --use-distributed-optimizer)
moe=0; grep -q '"num_experts"' "$root/models/$model.json" && moe=1
# FP8 (an MoE model's experts too, whose per-expert quantizes and amax folds a full recompute replays)
fp8=(--fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 4 --fp8-amax-compute-algo max)
train fp8 1 "${fp8[@]}"
train fp8_selective 1 "${fp8[@]}" --recompute-granularity selective; same fp8 fp8_selective
if [ $moe = 0 ]; then # blockwise (the widths tile by 128): the MLP's region replays its block-scaled GEMMs
  fp8b=(--fp8-format e4m3 --fp8-recipe blockwise --hidden-size 128 --ffn-hidden-size 256 --num-attention-heads 2)
  train fp8b 1 "${fp8b[@]}"
  train fp8b_mlp 1 "${fp8b[@]}" --recompute-granularity selective --recompute-modules mlp,layernorm; same fp8b fp8b_mlp
fi
if [ $moe = 1 ]; then
  train fp8_uniform1 1 "${fp8[@]}" "${full[@]}" uniform --recompute-num-layers 1; same fp8 fp8_uniform1
fi
if [ $moe = 1 ]; then # an MoE model: its layouts (SP with TP, experts over ep)
  tpdp=(--tp 2 --sequence-parallel --dp 2 --expert-model-parallel-size 2 --use-distributed-optimizer)
fi
train tp2_dp2_zero 4 "${tpdp[@]}"
train tp2_dp2_zero_uniform1 4 "${tpdp[@]}" "${full[@]}" uniform --recompute-num-layers 1
same tp2_dp2_zero tp2_dp2_zero_uniform1
if [ $moe = 1 ]; then
  # the replayed router drops what the forward's dropped (a capacity's ranking over the micro-batch's
  # pairs, gathered over cp) and the stages replay their own layers
  cap=(--cp 2 --moe-expert-capacity-factor 1.0)
  train cp2_capacity 2 "${cap[@]}"
  train cp2_capacity_uniform2 2 "${cap[@]}" "${full[@]}" uniform --recompute-num-layers 2
  same cp2_capacity cp2_capacity_uniform2
  bias=(--moe-router-score-function sigmoid --moe-router-enable-expert-bias) # the counts the bias steps by: the forward's once
  train expert_bias 1 "${bias[@]}"
  train expert_bias_uniform1 1 "${bias[@]}" "${full[@]}" uniform --recompute-num-layers 1
  same expert_bias expert_bias_uniform1
  pp=(--pp 2 --decoder-first-pipeline-num-layers 1)
  train pp2 2 "${pp[@]}"
  train pp2_block1 2 "${pp[@]}" "${full[@]}" block --recompute-num-layers 1
  same pp2 pp2_block1
fi
[ $status = 0 ] && echo PASS
exit $status
