# kernels_bench.cmake — the benchmark of the memory-bound CUDA kernels (an executable, not a
# test: it needs an H200-sized GPU and prints timings).
if(TARGET mccrt_cuda)
  add_executable(kernels_bench ${CMAKE_SOURCE_DIR}/bench/kernels_bench.c)
  target_link_libraries(kernels_bench PRIVATE mccrt_cuda mcc_nvrtc)
endif()
