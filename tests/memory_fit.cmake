# memory_fit.cmake — the recipes fit where Megatron's fit (issue 39): what the memory plan promises
# on real recipes planned for an H100 without a GPU (tests/memory_rules.sh: the distributed
# optimizer never raises a plan, bf16 gradients halve the gradients, FP8 keeps no bf16 or weight
# copy for the backward and selective recompute saves under it, LLaMA-3 8B's H100 FP8 recipe fits),
# the "To fit" hints (tests/fit_hints.sh: none raises memory), and --grad-reduce-in-bf16's numerics:
# dp 2 (bf16 buckets), dp 2 with ZeRO (bf16 reduce-scatter into bf16 blocks) and tp 2 x dp 2 with
# sequence parallelism (the norms' bf16 gradients all-reduced over tp first) against the single rank
# with bf16 gradients too, within bf16's rounding (1e-2; the largest is 5.3e-3, step 1's gradients:
# one rank rounds the sum of its two micro-batches once, two ranks round each and their sum).
set(_rules ${CMAKE_SOURCE_DIR}/tests/memory_rules.sh $<TARGET_FILE:mcc>)
add_test(NAME zero_never_raises_plan COMMAND ${_rules} zero)
add_test(NAME grad_reduce_bf16_halves_gradients COMMAND ${_rules} grad_bf16)
add_test(NAME fp8_activations_below_bf16 COMMAND ${_rules} fp8)
if(TARGET mccrt_cuda) # compiles for --target h100: NVRTC's kernels, no GPU
  add_test(NAME llama3_8b_fp8_recipe_fits_h100 COMMAND ${_rules} recipe)
endif()
mcc_e2e_test(fit_hints_lower_memory fit_hints.sh) # 30 plans: the fast build's mcc
if(MPI_C_FOUND)
  mcc_layout_test(grad_reduce_bf16_dp2_equals_single_rank_tiny-llama tiny-llama 2 TOL 1e-2 --grad-reduce-in-bf16
                  -- --dp 2)
  mcc_layout_test(grad_reduce_bf16_dp2_zero_equals_single_rank_tiny-llama tiny-llama 2 TOL 1e-2 --grad-reduce-in-bf16
                  -- --dp 2 --use-distributed-optimizer)
  mcc_layout_test(grad_reduce_bf16_tp2_sp_dp2_zero_equals_single_rank_tiny-gpt2 tiny-gpt2 4 TOL 1e-2
                  --grad-reduce-in-bf16 -- --tp 2 --sequence-parallel --dp 2 --use-distributed-optimizer)
endif()
