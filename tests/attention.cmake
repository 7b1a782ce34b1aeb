# attention.cmake — the CUDA flash-attention kernels against the CPU oracle (label gpu: needs an
# sm_90 GPU), and the attention benchmarks (executables, not tests): attention_bench, and
# cp_attention_bench (context parallelism's ring pieces against the whole sequence).
if(TARGET mccrt_cuda)
  add_executable(attention_test ${CMAKE_SOURCE_DIR}/tests/gpu/attention_test.c)
  target_link_libraries(attention_test PRIVATE mccrt_cuda mcc_nvrtc)
  add_test(NAME attention_gpu COMMAND attention_test)
  set_tests_properties(attention_gpu PROPERTIES LABELS gpu)

  add_executable(attention_bench ${CMAKE_SOURCE_DIR}/bench/attention_bench.c)
  target_link_libraries(attention_bench PRIVATE mccrt_cuda mcc_nvrtc)
  add_executable(cp_attention_bench ${CMAKE_SOURCE_DIR}/bench/cp_attention_bench.c)
  target_link_libraries(cp_attention_bench PRIVATE mccrt_cuda mcc_nvrtc)
endif()
