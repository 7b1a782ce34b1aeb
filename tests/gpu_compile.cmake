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
endif()
