#!/usr/bin/env bash
# bundle.sh — prepares devrun/ for one call on the GPU machine (which has no compiler toolchain
# for mcc): builds mcc here (Release, reference BLAS), compiles every train_rank the run needs,
# computes the CPU oracle's dumps, and copies the few shared libraries the device may lack.
# Then the device tool runs `tar xJf devrun.tar.xz && bash bench/device_run.sh` with carry
# ["devrun.tar.xz"] (the executables compress from ~120 MB to ~8 MB; carry takes 64 MiB).
set -euo pipefail
cd "$(dirname "$0")/.."
B=build-dev
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DBLA_VENDOR=Generic >/dev/null
cmake --build $B -j"$(nproc)" >/dev/null
rm -rf devrun && mkdir -p devrun/bin devrun/lib devrun/cpu devrun/data devrun/anchors
# cpu_oracle MODEL NAME FLAGS...: the CPU's 10 steps of models/MODEL.json with FLAGS on the numerics
# text, dumped to devrun/cpu/NAME (the oracle device_run.sh compares a GPU run with); made once
cpu_oracle() {
  local model=$1 name=$2; shift 2
  [ -d devrun/cpu/$name ] && return
  $B/mcc compile models/$model.json --target cpu "$@" -o /tmp/oracle-$name 2>/dev/null
  /tmp/oracle-$name --data-path devrun/data/numerics_text_document --train-iters 10 --eval-iters 0 \
    --dump-dir devrun/cpu/$name >/dev/null
  rm -f /tmp/oracle-$name
}
cp ../shared/anchors/torch_baseline.py devrun/anchors/
for t in attention_test attention_bench cp_attention_bench moe_gemm_bench cuda_ops_test dropout_test overlap_bench comm_nccl_test host_adamw_bench; do [ -x $B/$t ] && cp $B/$t devrun/bin/; done
# data: 2 MB of the Brown corpus (scripts/train_tiny.sh fetches it) with the byte-level tokenizer,
# whose ids fit every model's vocabulary, and the numerics text
[ -f data/brown.txt ] || { echo "run scripts/train_tiny.sh once first (fetches the corpus)"; exit 1; }
head -c 2000000 data/brown.txt > devrun/data/brown2m.txt
$B/mcc data preprocess --input devrun/data/brown2m.txt --output-prefix devrun/data/brown --append-eod >/dev/null 2>&1
rm devrun/data/brown2m.txt
$B/mcc data preprocess --input tests/data/numerics.txt --output-prefix devrun/data/numerics --append-eod >/dev/null 2>&1
# with_lanes "LANES..." OUT ARGS...: mcc compile ARGS -o OUT on the default lanes (the copy
# engines), and -o OUT-<lanes> with --comm-lanes <lanes> for each of LANES (the lanes are compiled
# into the plan; bench/device_env.sh's lanes_bin names them)
with_lanes() {
  local lanes=$1 out=$2; shift 2
  $B/mcc compile "$@" -o "$out" 2>"$out.compile.log" || cat "$out.compile.log"
  for l in $lanes; do
    $B/mcc compile "$@" --comm-lanes "$l" -o "$out-$l" 2>"$out-$l.compile.log" || cat "$out-$l.compile.log"
  done
}
alt=${LANES_ALT:-none}; [ "$alt" = 0 ] && alt="" # device_run.sh's other lanes for dp2ov and the tp2 variants
# correctness: tiny models on both targets; the CPU dumps are made here
for m in tiny-gpt2 tiny-llama; do
  $B/mcc compile models/$m.json --target cpu --keep-logits -o devrun/bin/$m-cpu 2>/dev/null
  $B/mcc compile models/$m.json --target cuda --keep-logits -o devrun/bin/$m-cuda 2>/dev/null
  with_lanes none devrun/bin/$m-cuda-dp2 models/$m.json --target cuda --keep-logits --dp 2
  with_lanes none devrun/bin/$m-cuda-dp2ov models/$m.json --target cuda --keep-logits --dp 2 --overlap-grad-reduce \
    --ddp-bucket-size 20000
  $B/mcc compile models/$m.json --target cuda --keep-logits --dp 2 --use-distributed-optimizer -o devrun/bin/$m-cuda-zero2 2>/dev/null
  # tensor parallel on 2 GPUs, against one GPU with the same (tp-divisible, unpadded) vocabulary
  v258=(--vocab-size 258 --make-vocab-size-divisible-by 1)
  $B/mcc compile models/$m.json --target cuda --keep-logits "${v258[@]}" -o devrun/bin/$m-cuda-v258 2>/dev/null
  $B/mcc compile models/$m.json --target cuda --keep-logits "${v258[@]}" --tp 2 -o devrun/bin/$m-cuda-tp2 2>/dev/null
  with_lanes none devrun/bin/$m-cuda-tp2sp models/$m.json --target cuda --keep-logits "${v258[@]}" --tp 2 \
    --sequence-parallel
  with_lanes "none side,copy" devrun/bin/$m-cuda-tp2spb models/$m.json --target cuda --keep-logits "${v258[@]}" --tp 2 \
    --sequence-parallel --sequence-parallel-split batch
  # --tp-comm-overlap: the collectives fused with their matmuls, split by sequence (o) and batch (bo)
  $B/mcc compile models/$m.json --target cuda --keep-logits "${v258[@]}" --tp 2 --sequence-parallel \
    --tp-comm-overlap -o devrun/bin/$m-cuda-tp2spo 2>/dev/null
  $B/mcc compile models/$m.json --target cuda --keep-logits "${v258[@]}" --tp 2 --sequence-parallel \
    --sequence-parallel-split batch --tp-comm-overlap -o devrun/bin/$m-cuda-tp2spbo 2>/dev/null
  # --tp-comm-interleave: the micro-batch's halves as two chains, split by batch rows (bi)
  $B/mcc compile models/$m.json --target cuda --keep-logits "${v258[@]}" --tp 2 --sequence-parallel \
    --sequence-parallel-split batch --tp-comm-interleave -o devrun/bin/$m-cuda-tp2spbi 2>/dev/null
  devrun/bin/$m-cpu --data-path devrun/data/numerics_text_document --train-iters 10 --eval-iters 0 --dump-dir devrun/cpu/$m >/dev/null
  # one micro-batch per step: the gradients' first writes assign (no zeroing)
  $B/mcc compile models/$m.json --target cpu --keep-logits --global-batch-size 4 -o devrun/bin/$m-cpu-gb4 2>/dev/null
  $B/mcc compile models/$m.json --target cuda --keep-logits --global-batch-size 4 -o devrun/bin/$m-cuda-gb4 2>/dev/null
  devrun/bin/$m-cpu-gb4 --data-path devrun/data/numerics_text_document --train-iters 10 --eval-iters 0 \
    --dump-dir devrun/cpu/$m-gb4 >/dev/null
  rm devrun/bin/$m-cpu-gb4
  devrun/bin/$m-cpu --data-path devrun/data/brown_text_document --split 100,0,0 --train-iters 200 --log-interval 1 --eval-iters 0 > devrun/cpu/$m-200.log
  rm devrun/bin/$m-cpu
done
# --grad-reduce-in-bf16: bf16 gradient buffers and reductions on the GPU against the CPU's, which
# round their gradients to bf16 as the GPU stores them (device_run.sh's numerics section)
for m in tiny-gpt2 tiny-llama; do
  $B/mcc compile models/$m.json --target cuda --keep-logits --grad-reduce-in-bf16 -o devrun/bin/$m-cuda-gbf16 2>/dev/null
  cpu_oracle $m $m-gbf16 --keep-logits --grad-reduce-in-bf16
done
# Megatron's LLaMA-3 8B H100 FP8 script as README's walkthrough runs it (its flags pasted, no spec,
# its train_rank flags baked), at 4 layers and a global batch of 8 on one GPU, without its
# checkpoint and TensorBoard paths: device_run.sh launches it with torchrun --no-python, no flags,
# and sets its measured memory beside the plan's
grep -v -- '--nproc_per_node\|--save\|--load\|--tensorboard-dir' tests/megatron_scripts/llama3_8b_h100_fp8.args \
  >devrun/recipe-8b-l4.args
$B/mcc compile @devrun/recipe-8b-l4.args --num-layers 4 --global-batch-size 8 --train-samples 96 --log-interval 1 \
  --eval-iters 0 --target h100 -o devrun/bin/recipe-8b-l4 2>devrun/bin/recipe-8b-l4.compile.log ||
  tail -5 devrun/bin/recipe-8b-l4.compile.log
# fp8_flags RECIPE: the FP8 flags of a recipe: hybrid for tensorwise and delayed, E4M3 throughout for
# blockwise (DeepSeek-V3's; the spec refuses it hybrid)
fp8_flags() { [ "$1" = blockwise ] && echo "--fp8-format e4m3 --fp8-recipe blockwise" || echo "--fp8-format hybrid --fp8-recipe $1"; }
# FP8 (tensorwise, delayed and blockwise) on the GPU against the CPU's FP8 emulation (device_run.sh's
# FP8 section): the same spec and flags on both targets; blockwise on the tiny models widened to
# tile by 128 (tests/fp8.cmake's)
for m in tiny-gpt2 tiny-llama; do
  for r in tensorwise delayed blockwise; do
    fp8=(--keep-logits $(fp8_flags $r))
    [ $r = blockwise ] && fp8+=(--hidden-size 128 --ffn-hidden-size 256 --num-attention-heads 2)
    [ $r = blockwise ] && [ $m = tiny-llama ] && fp8+=(--num-query-groups 2)
    $B/mcc compile models/$m.json --target cuda "${fp8[@]}" -o devrun/bin/$m-cuda-fp8-$r 2>/dev/null
    $B/mcc compile models/$m.json --target cpu "${fp8[@]}" -o devrun/bin/$m-cpu-fp8-$r 2>/dev/null
    devrun/bin/$m-cpu-fp8-$r --data-path devrun/data/numerics_text_document --train-iters 10 --eval-iters 0 \
      --dump-dir devrun/cpu/$m-fp8-$r >/dev/null
    rm devrun/bin/$m-cpu-fp8-$r
  done
done
# MLA=1: tiny-deepseek-v3 on both targets (device_run.sh's MLA=1): multi-latent attention, its values
# (16) narrower than q and k (24), which the cuda target runs through cuDNN alone; the CPU dumps made here
if [ "${MLA:-0}" != 0 ]; then
  cpu_oracle tiny-deepseek-v3 tiny-deepseek-v3 --keep-logits
  $B/mcc compile models/tiny-deepseek-v3.json --target cuda --keep-logits -o devrun/bin/tiny-deepseek-v3-cuda \
    2>devrun/bin/tiny-deepseek-v3-cuda.compile.log || cat devrun/bin/tiny-deepseek-v3-cuda.compile.log
fi
# MOE=1: tiny-moe on both targets (device_run.sh's MoE numerics: the CPU dumps are made here) and the
# MoE benchmark configs, beside ../shared/anchors/torch_moe_baseline.py (device_run.sh's MOE=1)
if [ "${MOE:-0}" != 0 ]; then
  cp ../shared/anchors/torch_moe_baseline.py devrun/anchors/
  $B/mcc compile models/tiny-moe.json --target cpu --keep-logits -o devrun/bin/tiny-moe-cpu 2>/dev/null
  $B/mcc compile models/tiny-moe.json --target cuda --keep-logits -o devrun/bin/tiny-moe-cuda \
    2>devrun/bin/tiny-moe-cuda.compile.log || cat devrun/bin/tiny-moe-cuda.compile.log
  devrun/bin/tiny-moe-cpu --data-path devrun/data/numerics_text_document --train-iters 10 --eval-iters 0 \
    --dump-dir devrun/cpu/tiny-moe >/dev/null
  rm devrun/bin/tiny-moe-cpu
  # token dropping (capacity factor 1.0) on one GPU and at cp 2 (2 ranks sharing it, every rank
  # ranking the micro-batch's pairs), against the CPU's one rank with the same factor
  cap=(--keep-logits --moe-expert-capacity-factor 1.0)
  cpu_oracle tiny-moe cap-tiny-moe "${cap[@]}"
  $B/mcc compile models/tiny-moe.json --target cuda "${cap[@]}" -o devrun/bin/tiny-moe-cuda-cap 2>/dev/null
  $B/mcc compile models/tiny-moe.json --target cuda "${cap[@]}" --cp 2 -o devrun/bin/tiny-moe-cuda-cap_cp2 2>/dev/null
  # MOE_LAYERS=8: the configs cut to 8 layers (bench-<config>-L8: the full ones need more than an
  # H100's 80 GB, mcc's and PyTorch's alike; device_run.sh's MOE_LAYERS=8 runs the baseline so too)
  cut=${MOE_LAYERS:+-L$MOE_LAYERS}
  for c in moe-8x1B moe-32x8; do
    $B/mcc compile bench/configs/$c.json --target cuda ${MOE_LAYERS:+--num-layers $MOE_LAYERS} -o devrun/bin/bench-$c$cut \
      2>devrun/bin/bench-$c$cut.compile.log || cat devrun/bin/bench-$c$cut.compile.log
    # -lean: fp32 masters as bf16 copy + remainder, and selective recompute (below PyTorch's memory)
    $B/mcc compile bench/configs/$c.json --target cuda ${MOE_LAYERS:+--num-layers $MOE_LAYERS} \
      --use-precision-aware-optimizer --recompute-granularity selective -o devrun/bin/bench-$c$cut-lean \
      2>devrun/bin/bench-$c$cut-lean.compile.log || cat devrun/bin/bench-$c$cut-lean.compile.log
    # -full: masters as remainders and full recompute (each layer keeps its input): the whole
    # configs on an 80 GB H100 (plans 72.6 and 73.0 GiB)
    $B/mcc compile bench/configs/$c.json --target cuda ${MOE_LAYERS:+--num-layers $MOE_LAYERS} \
      --use-precision-aware-optimizer --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 \
      -o devrun/bin/bench-$c$cut-full 2>devrun/bin/bench-$c$cut-full.compile.log || cat devrun/bin/bench-$c$cut-full.compile.log
  done
  # full recompute on the GPU against the CPU oracle (whose full recompute is its none, bit for bit)
  $B/mcc compile models/tiny-moe.json --target cuda --keep-logits --recompute-granularity full --recompute-method uniform \
    --recompute-num-layers 1 -o devrun/bin/tiny-moe-cuda-full 2>/dev/null
fi
# ZERO=1: the distributed optimizer on one GPU (device_run.sh's ZERO section: ranks sharing it, their
# collectives staged through the host), against the CPU oracle's one-rank dumps: the tiny models at
# dp 2, tiny-moe at dp 4 x ep 2 and at tp 2 x dp 4 x ep 2 (an expert weight's blocks: three levels
# of its layout, tp, ep and edp), each rank's blocks initialised on the GPU at their whole-tensor
# indices and the bf16 working copies gathered from them; and tiny-moe at dp 4 x ep 2 without it
# (ddp_: the layout's own difference from the oracle). tiny-moe's oracle (devrun/cpu/moe-mb2-tiny-moe)
# has their micro-batch of 2 sequences (the load-balancing loss is a micro-batch's) and a
# tp-divisible vocabulary. The names keep "_" where ONE_GPU=1's patterns (-dp2, -tp2) would
# remove a multi-GPU binary.
if [ "${ZERO:-0}" != 0 ]; then
  for m in tiny-gpt2 tiny-llama; do
    $B/mcc compile models/$m.json --target cuda --keep-logits --dp 2 --use-distributed-optimizer \
      -o devrun/bin/$m-cuda-zero_dp2 2>/dev/null
  done
  mb2=(--keep-logits --micro-batch-size 2 --vocab-size 258 --make-vocab-size-divisible-by 1)
  cpu_oracle tiny-moe moe-mb2-tiny-moe "${mb2[@]}"
  moe4=("${mb2[@]}" --dp 4 --expert-model-parallel-size 2)
  $B/mcc compile models/tiny-moe.json --target cuda "${moe4[@]}" --use-distributed-optimizer \
    -o devrun/bin/tiny-moe-cuda-zero_dp4ep2 2>/dev/null
  $B/mcc compile models/tiny-moe.json --target cuda "${moe4[@]}" -o devrun/bin/tiny-moe-cuda-ddp_dp4ep2 2>/dev/null
  $B/mcc compile models/tiny-moe.json --target cuda "${moe4[@]}" --tp 2 --sequence-parallel \
    -o devrun/bin/tiny-moe-cuda-ddp_tp2dp4ep2 2>/dev/null
  $B/mcc compile models/tiny-moe.json --target cuda "${moe4[@]}" --tp 2 --sequence-parallel --use-distributed-optimizer \
    -o devrun/bin/tiny-moe-cuda-zero_tp2dp4ep2 2>/dev/null
fi
# MOE_LAYOUTS=1: tiny-moe's layouts on one GPU (device_run.sh's MOE_LAYOUTS section), each against the
# micro-batch-2 oracle and against the one-GPU run of the same spec (lay_one), to tell a layout's own
# error from bf16's; and token dropping by position and with a factor that drops nothing (2.0 at
# top-2 of 4 experts: the capacity is every token), each against its CPU oracle
if [ "${MOE_LAYOUTS:-0}" != 0 ]; then
  mb2=(--keep-logits --micro-batch-size 2 --vocab-size 258 --make-vocab-size-divisible-by 1)
  cpu_oracle tiny-moe moe-mb2-tiny-moe "${mb2[@]}"
  sp=(--tp 2 --sequence-parallel)
  for v in "lay_one:" "lay_ep2:--dp 2 --expert-model-parallel-size 2" "lay_tp2:${sp[*]}" "lay_tp2dp2:${sp[*]} --dp 2" \
           "lay_tp2ep2:${sp[*]} --dp 2 --expert-model-parallel-size 2" "lay_tp2dp4ep2:${sp[*]} --dp 4 --expert-model-parallel-size 2"; do
    # shellcheck disable=SC2086
    $B/mcc compile models/tiny-moe.json --target cuda "${mb2[@]}" ${v#*:} -o devrun/bin/tiny-moe-cuda-${v%%:*} 2>/dev/null
  done
  # k4_*: top-4 of the 4 experts, so that every token goes to every expert. At top-2 a router score
  # near a tie can choose another expert in bf16 than in fp32 (or than another layout's bf16), and one
  # token moved changes its experts' step-1 gradients by ~1/sqrt(rows an expert), 5-9e-2 here; at
  # top-4 nothing is chosen, so the layouts' gradients must agree to bf16's ~1e-2 (RESULTS, 2026-12-06)
  k4=(--moe-router-topk 4)
  cpu_oracle tiny-moe moe-mb2-k4-tiny-moe "${mb2[@]}" "${k4[@]}"
  for v in "k4_one:" "k4_tp2:${sp[*]}" "k4_tp2dp4ep2:${sp[*]} --dp 4 --expert-model-parallel-size 2" \
           "k4_tp2dp4ep2_full:${sp[*]} --dp 4 --expert-model-parallel-size 2 --recompute-granularity full --recompute-method uniform --recompute-num-layers 1" \
           "k4_dp2ep2_ov:--dp 2 --expert-model-parallel-size 2 --moe-shared-expert-overlap" \
           "k4_tp2dp4ep2_ov:${sp[*]} --dp 4 --expert-model-parallel-size 2 --moe-shared-expert-overlap"; do
    # shellcheck disable=SC2086
    $B/mcc compile models/tiny-moe.json --target cuda "${mb2[@]}" "${k4[@]}" ${v#*:} -o devrun/bin/tiny-moe-cuda-${v%%:*} 2>/dev/null
  done
  for v in "drop_pos:--moe-expert-capacity-factor 1.0 --moe-token-drop-policy position" "drop_none:--moe-expert-capacity-factor 2.0"; do
    t=${v%%:*}
    # shellcheck disable=SC2086
    # shellcheck disable=SC2086
    cpu_oracle tiny-moe $t-tiny-moe --keep-logits ${v#*:}
    # shellcheck disable=SC2086
    $B/mcc compile models/tiny-moe.json --target cuda --keep-logits ${v#*:} -o devrun/bin/tiny-moe-cuda-$t 2>/dev/null
  done
fi
# REMAINDERS=1: store_param_remainders on the GPU (device_run.sh's REMAINDERS section): the tiny models
# with --use-precision-aware-optimizer (fp32 moments, masters as bf16 copy + i16 remainder) against
# the CPU oracle's dumps (devrun/cpu/<model>, fp32 masters: the same function), and a save/resume
# of tiny-llama so (bench/checkpoint_gpu.sh tiny-llama-rem)
if [ "${REMAINDERS:-0}" != 0 ]; then
  for m in tiny-gpt2 tiny-llama; do
    $B/mcc compile models/$m.json --target cuda --keep-logits --use-precision-aware-optimizer -o devrun/bin/$m-cuda-rem \
      2>devrun/bin/$m-cuda-rem.compile.log || cat devrun/bin/$m-cuda-rem.compile.log
  done
  $B/mcc compile models/tiny-llama.json --target cuda --use-precision-aware-optimizer -o devrun/bin/bench-tiny-llama-rem 2>/dev/null
fi
# MEM42=1: issue 42's memory levers on the GPU (device_run.sh's MEM42 section): the tiny models with
# the head over 4 chunks of the tokens, selective recompute (swiglu_grad_product) and the masters as
# remainders, against the CPU oracle's plain dumps (devrun/cpu/<model>: the same function)
if [ "${MEM42:-0}" != 0 ]; then
  for m in tiny-gpt2 tiny-llama; do
    $B/mcc compile models/$m.json --target cuda --keep-logits --cross-entropy-chunks 4 --recompute-granularity selective \
      --use-precision-aware-optimizer -o devrun/bin/$m-cuda-mem42 2>devrun/bin/$m-cuda-mem42.compile.log ||
      cat devrun/bin/$m-cuda-mem42.compile.log
  done
fi
# pipeline stages on one GPU (device_run.sh's PP1 section): ranks sharing the GPU, their transfers
# and collectives through host memory (runtime/cuda/comm_staged.c), against the CPU oracle of the
# same spec (4 layers, so that PP=4 and two virtual stages split it)
pp_common=(--keep-logits --vocab-size 260 --make-vocab-size-divisible-by 1 --global-batch-size 16 --num-layers 4)
pp_dropout=(--attention-dropout 0.1 --hidden-dropout 0.1)
for m in tiny-gpt2 tiny-llama; do
  cpu_oracle $m pp-$m "${pp_common[@]}"
  cpu_oracle $m pp-dropout-$m "${pp_common[@]}" "${pp_dropout[@]}"
  for v in "pp2:--pp 2" "pp2-1f1b:--pp 2 --pipeline-schedule 1f1b" "pp2-v2:--pp 2 --num-virtual-stages-per-pipeline-rank 2" \
           "pp4:--pp 4 --pipeline-schedule 1f1b" "pp2tp2sp:--tp 2 --sequence-parallel --pp 2" \
           "pp2dp2zero:--dp 2 --pp 2 --use-distributed-optimizer"; do
    $B/mcc compile models/$m.json --target cuda "${pp_common[@]}" ${v#*:} -o devrun/bin/$m-cuda-${v%%:*} 2>/dev/null
  done
  $B/mcc compile models/$m.json --target cuda "${pp_common[@]}" "${pp_dropout[@]}" --pp 2 -o devrun/bin/$m-cuda-pp2-dropout 2>/dev/null
done
# CP=1: context parallelism on the GPU (device_run.sh's CP section): the tiny models at cp 2 with
# each --cp-comm-type (p2p, all_gather, a2a) as two ranks sharing one GPU, against the CPU oracle's
# one-rank dumps of the same spec (devrun/cpu/<model>, made above: every layout computes the same function); with hidden dropout (its masks at the whole sequence's positions), at cp 2 and at cp 2 x tp 2
# with sequence parallelism (4 ranks), against a CPU oracle with the same dropout and a tp-divisible
# vocabulary (devrun/cpu/hdrop-<model>); tiny-moe at cp 2 (MOE=1: its router's sums over cp)
if [ "${CP:-0}" != 0 ]; then
  hdrop=(--keep-logits --vocab-size 258 --make-vocab-size-divisible-by 1 --hidden-dropout 0.1)
  for m in tiny-gpt2 tiny-llama; do
    for t in p2p all_gather a2a; do
      $B/mcc compile models/$m.json --target cuda --keep-logits --cp 2 --cp-comm-type $t \
        -o devrun/bin/$m-cuda-cp2-$t 2>devrun/bin/$m-cuda-cp2-$t.compile.log || cat devrun/bin/$m-cuda-cp2-$t.compile.log
    done
    for v in "p2p-hdrop:--cp 2 --cp-comm-type p2p" "tpsp-hdrop:--cp 2 --cp-comm-type p2p --tp 2 --sequence-parallel"; do
      $B/mcc compile models/$m.json --target cuda "${hdrop[@]}" ${v#*:} -o devrun/bin/$m-cuda-cp2-${v%%:*} \
        2>devrun/bin/$m-cuda-cp2-${v%%:*}.compile.log || cat devrun/bin/$m-cuda-cp2-${v%%:*}.compile.log
    done
    cpu_oracle $m hdrop-$m "${hdrop[@]}"
  done
  if [ "${MOE:-0}" != 0 ]; then
    $B/mcc compile models/tiny-moe.json --target cuda --keep-logits --cp 2 --cp-comm-type p2p \
      -o devrun/bin/tiny-moe-cuda-cp2-p2p 2>devrun/bin/tiny-moe-cuda-cp2-p2p.compile.log ||
      cat devrun/bin/tiny-moe-cuda-cp2-p2p.compile.log
  fi
fi
# CP_BENCH=1: llama-1B at seq 32K, one sequence a step (51 GiB planned: no recompute needed), for
# device_run.sh's CP_BENCH section beside torch_baseline.py's llama-1B-32k and cp_attention_bench
if [ "${CP_BENCH:-0}" != 0 ]; then
  $B/mcc compile bench/configs/llama-1B-32k.json --target cuda -o devrun/bin/bench-llama-1B-32k \
    2>devrun/bin/bench-llama-1B-32k.compile.log || cat devrun/bin/bench-llama-1B-32k.compile.log
fi
# llama-1B in 8 micro-batches of one sequence: one GPU, and PP=2 on the same GPU (1F1B, ZB-H1, two
# virtual stages), the same global batch
mb8=(--micro-batch-size 1 --global-batch-size 8)
$B/mcc compile bench/configs/llama-1B.json --target cuda "${mb8[@]}" -o devrun/bin/bench-llama-1B-mb8 2>/dev/null
for v in "pp2:--pipeline-schedule 1f1b" "pp2-zb:--pipeline-schedule zb-h1" "pp2-v2:--num-virtual-stages-per-pipeline-rank 2"; do
  $B/mcc compile bench/configs/llama-1B.json --target cuda "${mb8[@]}" --pp 2 ${v#*:} -o devrun/bin/bench-llama-1B-mb8-${v%%:*} \
    2>devrun/bin/bench-llama-1B-mb8-${v%%:*}.compile.log || cat devrun/bin/bench-llama-1B-mb8-${v%%:*}.compile.log
done
# benchmarks
for c in gpt2-124M gpt2-1.5B llama-1B llama-1B-gqa llama-8B-L4; do
  $B/mcc compile bench/configs/$c.json --target cuda -o devrun/bin/bench-$c 2>devrun/bin/bench-$c.compile.log || cat devrun/bin/bench-$c.compile.log
  $B/mcc compile bench/configs/$c.json --target cuda --recompute-granularity selective -o devrun/bin/bench-$c-rc \
    2>devrun/bin/bench-$c-rc.compile.log || cat devrun/bin/bench-$c-rc.compile.log
done
# issue 42's memory (BENCH_CONFIGS="llama-8B-L4-mem llama-8B-L4-ce4"; RESULTS: "llama-8B-L4 memory:
# planned"): mem the fp32 masters as bf16 copy + remainder, the norms' outputs and the SwiGLU product
# recomputed, the head over 4 chunks of the tokens; ce4 the head's chunks alone
v42_flags() {
  case $1 in
    mem) echo "--use-precision-aware-optimizer --store-param-remainders --recompute-granularity selective --recompute-modules layernorm,mlp_act --cross-entropy-chunks 4" ;;
    ce4) echo "--cross-entropy-chunks 4" ;;
  esac
}
for v in mem ce4; do
  $B/mcc compile bench/configs/llama-8B-L4.json --target cuda $(v42_flags $v) -o devrun/bin/bench-llama-8B-L4-$v \
    2>devrun/bin/bench-llama-8B-L4-$v.compile.log || cat devrun/bin/bench-llama-8B-L4-$v.compile.log
done
# FP8 beside bf16 (BENCH_CONFIGS=llama-8B-L4-fp8-tensorwise ... in device_run.sh)
for c in llama-1B llama-8B-L4; do
  for r in tensorwise delayed blockwise; do
    $B/mcc compile bench/configs/$c.json --target cuda $(fp8_flags $r) \
      -o devrun/bin/bench-$c-fp8-$r 2>devrun/bin/bench-$c-fp8-$r.compile.log || cat devrun/bin/bench-$c-fp8-$r.compile.log
  done
done
# MEMORY_LEVERS=1: the recompute table's variants and llama3-8b on one GPU (bench/memory_levers.sh;
# device_run.sh's LEVERS=1 runs them)
if [ "${MEMORY_LEVERS:-0}" != 0 ]; then
  source bench/memory_levers.sh
  levers_compile $B/mcc
fi
# HF_LLAMA=1: mcc-convert (`mcc convert` linked without LLVM, so it runs on the GPU machine) for
# device_run.sh's bench/hf_llama_check.sh, with bench-llama-1B
if [ "${HF_LLAMA:-0}" != 0 ]; then
  cp $B/mcc-convert devrun/bin/
fi
# tensor parallel (with sequence parallel) on two GPUs: the same global batch as one GPU. Variants:
# spb splits sequence parallelism's activations by batch rows (one contiguous block per
# collective), spo and spbo fuse the collectives with their matmuls (--tp-comm-overlap)
tp2_variant_flags() {
  case $1 in
    tp2sp) echo "--tp 2 --sequence-parallel" ;;
    tp2spo) echo "--tp 2 --sequence-parallel --tp-comm-overlap" ;;
    tp2spb) echo "--tp 2 --sequence-parallel --sequence-parallel-split batch" ;;
    tp2spbo) echo "--tp 2 --sequence-parallel --sequence-parallel-split batch --tp-comm-overlap" ;;
    tp2spbi) echo "--tp 2 --sequence-parallel --sequence-parallel-split batch --tp-comm-interleave" ;;
  esac
}
for c in llama-1B llama-1B-gqa; do
  for v in tp2sp tp2spo tp2spb tp2spbo tp2spbi; do
    with_lanes "$alt" devrun/bin/bench-$c-$v bench/configs/$c.json --target cuda $(tp2_variant_flags $v)
  done
done
# PREV=COMMIT: every one-GPU benchmark config (bench-<config>-prev) and llama-1B's tp2sp, tp2spb
# and dp2ov also as an earlier commit's mcc compiles them (its runtime and kernels with them), for
# a same-call A/B of a change (device_run.sh's AB_CONFIGS alternates them; bench/env_sweep.sh)
if [ -n "${PREV:-}" ]; then
  rm -rf /tmp/mcc-prev && git worktree add -f --detach /tmp/mcc-prev "$PREV" >/dev/null
  cmake -S /tmp/mcc-prev -B /tmp/mcc-prev/build -DCMAKE_BUILD_TYPE=Release -DBLA_VENDOR=Generic >/dev/null
  cmake --build /tmp/mcc-prev/build -j"$(nproc)" --target mcc >/dev/null
  for c in gpt2-124M gpt2-1.5B llama-1B llama-1B-gqa; do
    /tmp/mcc-prev/build/mcc compile bench/configs/$c.json --target cuda -o devrun/bin/bench-$c-prev 2>/dev/null
  done
  # PREV_FP8="llama-8B-L4 ...": those configs' FP8 binaries too (bench-<config>-fp8-<recipe>-prev)
  for c in ${PREV_FP8:-}; do
    for r in tensorwise delayed; do
      /tmp/mcc-prev/build/mcc compile bench/configs/$c.json --target cuda --fp8-format hybrid --fp8-recipe $r \
        -o devrun/bin/bench-$c-fp8-$r-prev 2>/dev/null
    done
  done
  for v in tp2sp tp2spb; do
    /tmp/mcc-prev/build/mcc compile bench/configs/llama-1B.json --target cuda $(tp2_variant_flags $v) \
      -o devrun/bin/bench-llama-1B-$v-prev 2>/dev/null
  done
  /tmp/mcc-prev/build/mcc compile bench/configs/llama-1B.json --target cuda --dp 2 --global-batch-size 8 \
    --overlap-grad-reduce -o devrun/bin/bench-llama-1B-dp2ov-prev 2>/dev/null
  git worktree remove --force /tmp/mcc-prev
fi
# data parallel on two GPUs: the same micro-batch per GPU, so twice the global batch (gpt2-1.5B
# has no tensor-parallel layout on 2 GPUs: its 25 heads do not divide by 2)
for c in gpt2-124M llama-1B gpt2-1.5B; do
  gbs=$(python3 -c "import json; print(2 * json.load(open('bench/configs/$c.json'))['training']['micro_batch_size'])")
  $B/mcc compile bench/configs/$c.json --target cuda --dp 2 --global-batch-size $gbs -o devrun/bin/bench-$c-dp2 \
    2>devrun/bin/bench-$c-dp2.compile.log || cat devrun/bin/bench-$c-dp2.compile.log
  with_lanes "$alt" devrun/bin/bench-$c-dp2ov bench/configs/$c.json --target cuda --dp 2 --global-batch-size $gbs \
    --overlap-grad-reduce
done
# node scale (issue 6; NODE_GPUS=8 or 4): each model's layouts of bench/node_layouts.sh, for
# bench/node_run.sh on the 4- or 8-GPU machine
if [ -n "${NODE_GPUS:-}" ]; then
  source bench/node_layouts.sh
  for model in llama-1B llama3-8b; do
    while IFS=: read -r name ranks flags; do
      $B/mcc compile "$(node_spec $model)" --target cuda $(node_flags $model $NODE_GPUS) $flags \
        -o devrun/bin/node-$model-$name 2> devrun/bin/node-$model-$name.compile.log < /dev/null ||
        cat devrun/bin/node-$model-$name.compile.log
    done < <(node_layouts $model $NODE_GPUS)
  done
fi
# the attention tile sweep (device_run.sh's ATTN_SWEEP=1): its cubins compiled here, where no GPU
# is needed (the driver stub satisfies the loader), and carried in devrun/cache
if [ "${ATTN_SWEEP:-0}" != 0 ]; then
  mkdir -p /tmp/mcc-cuda-stub && ln -sf /usr/local/cuda/lib64/stubs/libcuda.so /tmp/mcc-cuda-stub/libcuda.so.1
  LD_LIBRARY_PATH=/tmp/mcc-cuda-stub MCC_CACHE_DIR=devrun/cache $B/attention_bench --compile-only \
    $(grep -v '^#' bench/attention_tiles.txt)
fi
source bench/bundle_libs.sh && bundle_libs devrun/lib
# ONE_GPU=1: only what a one-GPU call runs (the device lends one H200; the whole bundle, ~61 MB
# compressed with PREV=, leaves too little of the 64 MiB carry for the working tree)
if [ "${ONE_GPU:-0}" != 0 ]; then
  rm -f devrun/bin/*-dp2* devrun/bin/*-tp2* devrun/bin/*-zero2* devrun/bin/node-*
fi
du -sh devrun
# names sorted and a dictionary larger than one executable (~9 MB each, mostly the same runtime):
# xz then stores each repeat as a reference, 84 MB -> 20 MB at 98 executables
tar cf - --sort=name devrun | xz -T0 --lzma2=preset=6,dict=256MiB > devrun.tar.xz
ls -la devrun.tar.xz
