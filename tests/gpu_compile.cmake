# gpu_compile.cmake — the CUDA kernels of every op but matmul/attention: NVRTC compiles them and
# every kernel the launchers name is in the cubin (no GPU needed, runs in CI), and each op's
# launcher against the CPU oracle in f32 and bf16 (label gpu: needs an sm_90 GPU).
if(TARGET mccrt_cuda)
  add_executable(cuda_compile_test ${CMAKE_SOURCE_DIR}/tests/cuda_compile_test.c)
  target_link_libraries(cuda_compile_test PRIVATE mcc_nvrtc)
  add_test(NAME cuda_compile COMMAND cuda_compile_test)

  add_executable(cuda_ops_test ${CMAKE_SOURCE_DIR}/tests/gpu/ops_test.c)
  target_link_libraries(cuda_ops_test PRIVATE mccrt_cuda mcc_nvrtc)
  add_test(NAME cuda_ops_gpu COMMAND cuda_ops_test)
  set_tests_properties(cuda_ops_gpu PROPERTIES LABELS gpu)

  # MoE for --target cuda: tiny-moe and the MoE bench configs compile (no GPU needed), and on a GPU
  # tiny-moe trains as the CPU oracle does (label gpu; kernels_templates/moe.cuh)
  add_test(NAME moe_cuda_compile COMMAND ${CMAKE_SOURCE_DIR}/tests/moe_cuda_compile.sh $<TARGET_FILE:mcc>)
  add_test(NAME gpu_1gpu_equals_cpu_tiny-moe
           COMMAND ${CMAKE_SOURCE_DIR}/tests/gpu_numerics.sh $<TARGET_FILE:mcc> tiny-moe 1)
  set_tests_properties(gpu_1gpu_equals_cpu_tiny-moe PROPERTIES LABELS gpu SKIP_RETURN_CODE 77)
endif()
