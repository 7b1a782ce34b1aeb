# overlap_bench.cmake — a collective beside a GEMM, under NCCL's CTA policies (an executable, not a
# test: it needs two GPUs; bench/overlap_bench.sh launches its two ranks).
if(TARGET mccrt_cuda)
  add_executable(overlap_bench ${CMAKE_SOURCE_DIR}/bench/overlap_bench.c)
  target_link_libraries(overlap_bench PRIVATE CUDA::cudart CUDA::cublas ${MCC_NCCL_LIBRARY})
endif()
