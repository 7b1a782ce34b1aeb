# fp8.cmake — FP8 (passes/fp8.c, runtime/fp8.c): the rounding against an enumeration of both
# formats, tiny models trained 10 steps in FP8 against the PyTorch reference of the same rounding
# (tests/torch_ref.py), and FP8 under DP=2, PP=2 and TP=2 (with and without sequence parallelism)
# against one rank (CP=2: tests/context_parallel.cmake); FP8 experts (tiny-moe, tiny-deepseek-v3)
# against the reference and under dp, ZeRO, pp, ep and tp with SP, and their checkpoints; the amaxes the
# fusion pass folds into their tensors' producers against the unfused program. The pass tests are
# tests/passes/fp8_*.ir.
add_executable(fp8_rounding_test ${CMAKE_SOURCE_DIR}/tests/fp8_rounding_test.c)
target_link_libraries(fp8_rounding_test PRIVATE mccrt)
add_test(NAME fp8_rounding COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/fp8_rounding.py $<TARGET_FILE:fp8_rounding_test>)
# the GPU's rounding (cuda_fp8.h's conversion, which fp8_quantize's kernel calls) against the CPU's
if(CUDAToolkit_FOUND)
  add_executable(fp8_cuda_rounding_test ${CMAKE_SOURCE_DIR}/tests/fp8_cuda_rounding_test.c)
  target_include_directories(fp8_cuda_rounding_test PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  target_link_libraries(fp8_cuda_rounding_test PRIVATE mccrt)
  add_test(NAME fp8_cuda_rounding COMMAND fp8_cuda_rounding_test)
endif()

set(_fp8 --fp8-format hybrid --fp8-recipe tensorwise)
# a NaN FP8 amax stops the step naming its amax history, or is skipped with --skip-nan-steps
add_test(NAME fp8_nan_amax COMMAND ${CMAKE_SOURCE_DIR}/tests/fp8_nan.sh $<TARGET_FILE:mcc>)
foreach(model tiny-gpt2 tiny-llama)
  mcc_e2e_test(numerics_vs_torch_fp8_${model} numerics_e2e.sh ${model} ${_fp8})
  # E4M3 gradients, weight gradients from the unquantized operands, the first layer unquantized
  mcc_e2e_test(numerics_vs_torch_fp8_e4m3_${model} numerics_e2e.sh
           ${model} --fp8-format e4m3 --fp8-recipe tensorwise --no-fp8-wgrad --first-last-layers-bf16
           --num-layers-at-end-in-bf16 0)
  # delayed scaling (Megatron's defaults: a history of 1 step, most_recent, margin 0), and a longer
  # history's max with a margin; the reference replays the histories (against a tensorwise
  # reference the delayed run's final weights are 0.15 off) and checks them as the run ends: by
  # norms, and a 16-step history's step-1 amax of each tensor at 1e-4 (2.5e-7 is the largest)
  mcc_e2e_test(numerics_vs_torch_fp8_delayed_${model} numerics_e2e.sh ${model} --fp8-format hybrid --fp8-recipe delayed)
  # a history shorter than the run (3 of 10 steps: the oldest amax leaves it), the weights kept
  # (lr 0) so that the runs do not drift apart and the reference checks every history at 1e-3: an
  # amax left out of the history's max, or a roll that smears one step over the rest, moves them by
  # 3e-2 or more, where the drifting runs' 0.25 lets them through
  mcc_e2e_test(numerics_vs_torch_fp8_delayed_history_${model} numerics_e2e.sh ${model} --fp8-format hybrid
               --fp8-recipe delayed --fp8-amax-history-len 3 --fp8-amax-compute-algo max --lr 0 --min-lr 0)
  mcc_e2e_test(numerics_vs_torch_fp8_delayed_max_${model} numerics_e2e.sh ${model} --fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 16
           --fp8-amax-compute-algo max --fp8-margin 1)
endforeach()
# Blockwise (DeepSeek-V3's): tiny-llama widened to tile by 128 (hidden 128, two 64-channel heads of
# their own keys and values, ffn 256, 4 x 32 tokens a micro-batch), the reference quantizing each
# GEMM's operands along its reduction dim as mcc does; a tensorwise reference fails it (gradients
# 9e-2 to 0.11 off, where blockwise's are within 1e-2).
set(_blockwise --hidden-size 128 --ffn-hidden-size 256 --num-attention-heads 2 --num-query-groups 2
    --fp8-format e4m3 --fp8-recipe blockwise)
mcc_e2e_test(numerics_vs_torch_fp8_blockwise_tiny-llama numerics_e2e.sh tiny-llama ${_blockwise})
mcc_e2e_test(numerics_vs_torch_fp8_blockwise_bf16_wgrad_tiny-llama numerics_e2e.sh tiny-llama ${_blockwise}
             --no-fp8-wgrad)
# layers recomputed (their quantizes with them), and GPT-2's biases, fused QKV and GELU
mcc_e2e_test(numerics_vs_torch_fp8_blockwise_recompute_full_tiny-llama numerics_e2e.sh tiny-llama ${_blockwise}
             --recompute-granularity full --recompute-method uniform --recompute-num-layers 1)
mcc_e2e_test(numerics_vs_torch_fp8_blockwise_tiny-gpt2 numerics_e2e.sh tiny-gpt2 --hidden-size 128 --ffn-hidden-size 256
             --num-attention-heads 2 --fp8-format e4m3 --fp8-recipe blockwise)

# FP8's amaxes made by the kernels that write their tensors (the fusion pass's amax results) train
# byte for byte as the separate fp8_amax instructions do (mcc compile --unfused-fp8-amax), tensorwise
# and delayed, on one rank, TP=2 with SP and DP=2: RMSNorm and SwiGLU (tiny-llama), LayerNorm
# (tiny-gpt2), and their gradients
if(MPI_C_FOUND)
  foreach(model tiny-gpt2 tiny-llama)
    mcc_e2e_test(fp8_fusion_bitwise_${model} fp8_fusion_bitwise.sh ${model})
    set_tests_properties(fp8_fusion_bitwise_${model} PROPERTIES PROCESSORS 2)
  endforeach()
endif()

# Each rank quantizes its own micro-batches as the one rank does: step 1's logits, loss and
# gradients and step 2's loss equal the single rank's to 1e-5. Two steps, not ten, and the final
# weights to 1e-4: the two ways of summing the gradients (all-reduce, accumulation) leave the
# updated weights an ulp apart, and an element within an ulp of an FP8 tie then rounds the other
# way (tiny-llama's step 2 moves one weight's update by 3e-5; tiny-gpt2's step 3 its loss), which
# later steps spread: a difference in rounding, not in what the layout computes.
# fp8_equals_single_rank(PREFIX MODEL "OPTIONS" SPEC_FLAGS -- "NAME:LAYOUT FLAGS"...): a test
# PREFIX_NAME_equals_single_rank_MODEL per layout, on two ranks, with mcc_layout_test's OPTIONS
function(fp8_equals_single_rank prefix model options)
  set(spec)
  set(layouts ${ARGN})
  list(FIND layouts "--" sep)
  list(SUBLIST layouts 0 ${sep} spec)
  math(EXPR sep "${sep} + 1")
  list(SUBLIST layouts ${sep} -1 layouts)
  foreach(layout ${layouts})
    string(REPLACE ":" ";" parts "${layout}")
    list(GET parts 0 name)
    list(GET parts 1 flags)
    separate_arguments(flags)
    mcc_layout_test(${prefix}_${name}_equals_single_rank_${model} ${model} 2 ${options} ${spec} -- ${flags})
  endforeach()
endfunction()

if(MPI_C_FOUND)
  foreach(model tiny-gpt2 tiny-llama)
    # and the pipeline's stages (ZB-H1, auto's choice on CPU ranks, and 1F1B) quantize what the one rank does
    fp8_equals_single_rank(fp8 ${model} "ITERS;2;FINAL_TOL;1e-4" ${_fp8} --
                           "dp2:--dp 2" "pp2:--pp 2" "pp2_1f1b:--pp 2 --pipeline-schedule 1f1b")
    # Tensor parallelism's ranks share each split tensor's scale (its amax max-all-reduced over
    # tp): the losses equal the one rank's to 1e-5 and the logits to 2e-7. The row-parallel
    # partial sums and the all-reduced input gradients add in another order, so a value lies an
    # ulp from the one rank's, and an element within an ulp of an FP8 tie rounds the other way:
    # one row of a step-1 gradient moves (tiny-llama's layers.0.mlp.gate, 9e-5 relative), hence
    # 3e-4 for the tensors. Without the all-reduce each rank scales its part by its own amax: the
    # losses differ by 4e-5 to 3e-4, the logits by 2e-2 to 5e-2 and the gradients by 8e-2 to 0.5.
    fp8_equals_single_rank(fp8 ${model} "ITERS;2;TOL;3e-4" ${_fp8} --
                           "tp2:--tp 2" "tp2_sp:--tp 2 --sequence-parallel")
    # Delayed scaling (a 4-step history's max): every layout takes a step's scales from the
    # histories as the step began and rolls in the step's amax, the max over its micro-batches and
    # (all-reduced by the optimizer) over dp, so each equals the one rank over three steps, the
    # histories rolled twice (the tolerance as tp's: an ulp from a tie); without the dp all-reduce
    # the dp2 ones fail. tp only for tiny-llama: the first step quantizes at scale 1 (an empty
    # history), where tiny-gpt2's output gradients (~1e-5) lie among E5M2's subnormals, a quantum
    # (1.5e-5) apart, and the sums' other order under tp moves whole rows of its step-1 gradients
    # (3.6e-3; in the last layer single rows, as one flipped element of a quantized gradient does).
    set(_delayed_layouts "dp2:--dp 2" "pp2:--pp 2")
    if(model STREQUAL "tiny-llama")
      list(APPEND _delayed_layouts "tp2:--tp 2" "tp2_sp:--tp 2 --sequence-parallel")
    endif()
    fp8_equals_single_rank(fp8_delayed ${model} "ITERS;3;TOL;3e-4" --fp8-format hybrid
                           --fp8-recipe delayed --fp8-amax-history-len 4 --fp8-amax-compute-algo max --
                           ${_delayed_layouts})
  endforeach()
  # blockwise: every block's scale is its own, so dp's and pp's ranks quantize what the one rank does
  fp8_equals_single_rank(fp8_blockwise tiny-llama "ITERS;2;FINAL_TOL;1e-4" ${_blockwise} --
                         "dp2:--dp 2" "dp2_zero:--dp 2 --use-distributed-optimizer" "pp2:--pp 2")
endif()
# FP8 experts (fp8_grouped_*: Transformer Engine's GroupedLinear, a scale per expert): the routed
# experts' GEMMs against the reference's per-expert quantization (tests/torch_ref.py's Fp8Linear on
# each expert's own rows and weight; with one scale for all experts instead, the step-1 logits are
# 5e-3 off, over the 3e-3 FP8 tolerance), tensorwise; E4M3 gradients and the experts' weight
# gradients from the unquantized operands (moe_grouped_wgrad); delayed with a 16-step history's max,
# each expert's row of the [E, 1 + len] histories checked at step 1 to 1e-4. tiny-deepseek-v3 (8
# experts in 4 groups, sigmoid, expert bias, a shared expert, MLA) with lr 0: its expert bias moves
# by whole +-rate steps, which the FP8 runs' drift (1e-2 after 10 steps) flips at lr > 0.
mcc_e2e_test(numerics_vs_torch_fp8_tiny-moe numerics_e2e.sh tiny-moe ${_fp8})
mcc_e2e_test(numerics_vs_torch_fp8_e4m3_tiny-moe numerics_e2e.sh tiny-moe --fp8-format e4m3 --fp8-recipe tensorwise
             --no-fp8-wgrad)
mcc_e2e_test(numerics_vs_torch_fp8_delayed_max_tiny-moe numerics_e2e.sh tiny-moe --fp8-format hybrid
             --fp8-recipe delayed --fp8-amax-history-len 16 --fp8-amax-compute-algo max)
mcc_e2e_test(numerics_vs_torch_fp8_delayed_tiny-deepseek-v3 numerics_e2e.sh tiny-deepseek-v3 --fp8-format hybrid
             --fp8-recipe delayed --lr 0 --min-lr 0)
# FP8 experts under the layouts. Tensorwise: dp (ZeRO too) and pp quantize each micro-batch's rows
# per expert as the one rank does. Delayed (a 4-step history's max): every layout takes the scales
# from the histories as the step began, so ep equals the one rank too (the experts' histories split
# with them, their step amaxes max-reduced over edp: over dp instead, ep2 fails at step 2), and tp 2
# with SP (the split rows' and weights' amaxes max-all-reduced over tp), alone and beside ep 2, over
# two steps (the third's router metrics drift past their 1e-5 by an FP8 tie, 6e-5). Not tensorwise
# under ep: an expert's scale is the amax of the rows it receives from every ep rank's micro-batch
# (as GroupedLinear's behind Megatron's all-to-all dispatcher), not one rank's; nor under tp: one
# element of an E5M2 gradient a dgrad's other order of sums puts across a tie moves a row of the
# step-1 gradients (the shared expert's gate in layer 2), which spreads to 1.7e-2 by layer 0.
if(MPI_C_FOUND)
  fp8_equals_single_rank(fp8 tiny-moe "ITERS;2;FINAL_TOL;1e-4" ${_fp8} --
                         "dp2:--dp 2" "dp2_zero:--dp 2 --use-distributed-optimizer"
                         "pp2:--pp 2 --decoder-first-pipeline-num-layers 2")
  set(_moe_delayed --fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 4 --fp8-amax-compute-algo max)
  fp8_equals_single_rank(fp8_delayed tiny-moe "ITERS;3;TOL;3e-4" ${_moe_delayed} --
                         "ep2:--dp 2 --expert-model-parallel-size 2" "pp2:--pp 2 --decoder-first-pipeline-num-layers 2")
  mcc_layout_test(fp8_delayed_ep2_edp2_equals_single_rank_tiny-moe tiny-moe 4 ITERS 3 TOL 3e-4 ${_moe_delayed} --
                  --dp 4 --expert-model-parallel-size 2)
  fp8_equals_single_rank(fp8_delayed tiny-moe "ITERS;2;TOL;3e-4" ${_moe_delayed} -- "tp2_sp:--tp 2 --sequence-parallel")
  mcc_layout_test(fp8_delayed_tp2_sp_ep2_equals_single_rank_tiny-moe tiny-moe 4 ITERS 2 TOL 3e-4 ${_moe_delayed} --
                  --tp 2 --sequence-parallel --dp 2 --expert-model-parallel-size 2)
  # the experts' histories saved split over ep by each rank and resumed bit for bit, and loaded on
  # one rank and at dp 2 without ep (their rows gathered as the experts' weights are)
  mcc_e2e_test(checkpoint_resume_fp8_delayed_ep2_tiny-moe checkpoint_resume.sh tiny-moe 2 --dp 2
               --expert-model-parallel-size 2 ${_moe_delayed})
  set_tests_properties(checkpoint_resume_fp8_delayed_ep2_tiny-moe PROPERTIES PROCESSORS 2)
  mcc_e2e_test(checkpoint_fp8_delayed_ep2_to_single_and_dp2 checkpoint_ep.sh tiny-moe)
  list(JOIN _moe_delayed " " _moe_delayed_text)
  set_tests_properties(checkpoint_fp8_delayed_ep2_to_single_and_dp2 PROPERTIES PROCESSORS 2 TIMEOUT 120
                       ENVIRONMENT "CHECKPOINT_SPEC_FLAGS=${_moe_delayed_text}")
endif()
# Blockwise FP8 experts (DeepSeek-V3's recipe on the routed experts' grouped GEMMs): the rows in
# 1x128 tiles, each expert's weight in 128x128 blocks, the wgrad's tiles along each expert's rows
# from its first (the last partial), against the reference's blockwise Fp8Linear on each expert's
# own rows (tests/torch_ref.py). tiny-moe widened to tile by 128 (two 64-channel heads, the experts
# and the shared expert 128 wide) with 8 x 32 tokens a micro-batch, so that experts receive more
# than 128 rows and their wgrads more than one tile; tiny-deepseek-v3 (lr 0, as its delayed test)
# with MLA's projections 128 wide (one head of 128 + 128 rope channels, latents of 128). Where a
# wgrad tile starts moves a scale only where it moves the tile's amax across a power of 2, under
# these checks' FP8 tolerance (tiles shifted 64 rows pass them): cpu_kernels' blockwise experts
# case checks the tiles and their scales exactly.
set(_blockwise_moe --fp8-format e4m3 --fp8-recipe blockwise --hidden-size 128 --ffn-hidden-size 256
    --moe-ffn-hidden-size 128 --moe-shared-expert-intermediate-size 128)
set(_blockwise_tiny_moe ${_blockwise_moe} --num-attention-heads 2 --num-query-groups 2 --micro-batch-size 8
    --global-batch-size 16)
set(_blockwise_mla --num-attention-heads 1 --q-lora-rank 128 --kv-lora-rank 128 --qk-head-dim 128
    --qk-pos-emb-head-dim 128 --v-head-dim 128)
mcc_e2e_test(numerics_vs_torch_fp8_blockwise_tiny-moe numerics_e2e.sh tiny-moe ${_blockwise_tiny_moe})
mcc_e2e_test(numerics_vs_torch_fp8_blockwise_bf16_wgrad_tiny-moe numerics_e2e.sh tiny-moe ${_blockwise_tiny_moe}
             --no-fp8-wgrad)
mcc_e2e_test(numerics_vs_torch_fp8_blockwise_tiny-deepseek-v3 numerics_e2e.sh tiny-deepseek-v3 ${_blockwise_moe}
             ${_blockwise_mla} --lr 0 --min-lr 0)
# Under the layouts: every tile and block is one expert's, so dp (ZeRO too) and pp quantize each
# micro-batch as the one rank does, and ep too (an expert's tiles are its rows' own, whichever
# rank they came from: unlike tensorwise, whose expert scale is the amax of the rows it receives)
if(MPI_C_FOUND)
  fp8_equals_single_rank(fp8_blockwise tiny-moe "ITERS;2;FINAL_TOL;1e-4" ${_blockwise_tiny_moe} --
                         "dp2:--dp 2" "dp2_zero:--dp 2 --use-distributed-optimizer"
                         "ep2:--dp 2 --expert-model-parallel-size 2"
                         "pp2:--pp 2 --decoder-first-pipeline-num-layers 2")
endif()
# Blockwise on one GPU against the CPU oracle (tests/gpu_numerics.sh: bf16 tolerances, 10 steps):
# cuBLASLt's block-scaled GEMMs and the quantize kernel in a whole plan (skipped without a GPU)
if(TARGET mccrt_cuda)
  add_test(NAME gpu_fp8_blockwise_equals_cpu_tiny-llama COMMAND ${CMAKE_SOURCE_DIR}/tests/gpu_numerics.sh
           $<TARGET_FILE:mcc> tiny-llama 1 ${_blockwise} --)
  set_tests_properties(gpu_fp8_blockwise_equals_cpu_tiny-llama PROPERTIES LABELS gpu SKIP_RETURN_CODE 77)
  # FP8 experts (one FP8 cuBLASLt GEMM an expert, a scale each; not yet run on a GPU): tiny-moe
  # tensorwise and tiny-deepseek-v3 delayed against the CPU oracle
  add_test(NAME gpu_fp8_equals_cpu_tiny-moe COMMAND ${CMAKE_SOURCE_DIR}/tests/gpu_numerics.sh
           $<TARGET_FILE:mcc> tiny-moe 1 ${_fp8} --)
  add_test(NAME gpu_fp8_delayed_equals_cpu_tiny-deepseek-v3 COMMAND ${CMAKE_SOURCE_DIR}/tests/gpu_numerics.sh
           $<TARGET_FILE:mcc> tiny-deepseek-v3 1 --fp8-format hybrid --fp8-recipe delayed --)
  # blockwise FP8 experts (cuBLASLt's block-scaled GEMM an expert; not yet run on a GPU), top-8 of 8
  # so that no routing choice can flip between the GPU's scores and the CPU's
  add_test(NAME gpu_fp8_blockwise_equals_cpu_tiny-deepseek-v3 COMMAND ${CMAKE_SOURCE_DIR}/tests/gpu_numerics.sh
           $<TARGET_FILE:mcc> tiny-deepseek-v3 1 ${_blockwise_moe} ${_blockwise_mla} --moe-router-topk 8
           --moe-router-group-topk 4 --)
  set_tests_properties(gpu_fp8_equals_cpu_tiny-moe gpu_fp8_delayed_equals_cpu_tiny-deepseek-v3
                       gpu_fp8_blockwise_equals_cpu_tiny-deepseek-v3 PROPERTIES LABELS gpu SKIP_RETURN_CODE 77)
endif()
