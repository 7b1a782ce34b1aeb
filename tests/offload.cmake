# offload.cmake — CPU optimizer offload (tests/offload.sh): the host's update of the offloaded
# parameters equals the device's bit for bit, on one rank (with and without gradient accumulation,
# checkpoints across offload on and off, the host memory report and refusal), under dp 2 with the
# distributed optimizer, under pp 2, and under tp 2 with --clip-grad 0 (the host step beside the backward).
# --use-precision-aware-optimizer's bf16 moments against the PyTorch reference rounding them alike
# (tests/torch_ref.py round_moments); offload.sh checks the host's bf16 moments equal the device's
mcc_e2e_test(numerics_vs_torch_bf16_moments_tiny-gpt2 numerics_e2e.sh
         tiny-gpt2 --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16)
mcc_e2e_test(offload_equals_device_optimizer offload.sh 1)
if(MPI_C_FOUND)
  mcc_e2e_test(offload_dp2_zero_equals_device_optimizer offload.sh 2 --dp 2 --use-distributed-optimizer)
  mcc_e2e_test(offload_pp2_equals_device_optimizer offload.sh 2 --pp 2)
  # --clip-grad 0 under tp 2: each rank's host update beside its backward (passes/grad_ready.c)
  mcc_e2e_test(offload_tp2_beside_backward_equals_device_optimizer offload.sh 2 --tp 2 --clip-grad 0)
  # composed: FP8, full recompute and dropout on a pipeline
  mcc_e2e_test(offload_pp2_fp8_full_recompute_dropout_equals_device_optimizer offload.sh 2 --pp 2
           --fp8-format hybrid --fp8-recipe tensorwise --recompute-granularity full --recompute-method uniform
           --recompute-num-layers 1 --hidden-dropout 0.1 --attention-dropout 0.1)
  set_tests_properties(offload_dp2_zero_equals_device_optimizer offload_pp2_equals_device_optimizer
                       offload_tp2_beside_backward_equals_device_optimizer
                       offload_pp2_fp8_full_recompute_dropout_equals_device_optimizer PROPERTIES PROCESSORS 2)
endif()
# the host executor alone: the converting copy up (bf16 working copies) and AdamW over the thread pool,
# a GPU plan's fp32 AdamW in each instruction set against the formula, and beside the backward the
# waits for each parameter's ready mark in order
add_executable(host_optimizer_test ${CMAKE_SOURCE_DIR}/tests/host_optimizer_test.c)
target_link_libraries(host_optimizer_test PRIVATE mccrt)
# its fp32 reference of the GPU formula rounds each operation, as host_optimizer.c does
set_source_files_properties(tests/host_optimizer_test.c PROPERTIES COMPILE_OPTIONS "-ffp-contract=off")
add_test(NAME host_optimizer_convert_and_pool COMMAND host_optimizer_test)
