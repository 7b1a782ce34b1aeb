# moe_gemm_bench.cmake — the benchmark of the MoE grouped GEMMs against a dense GEMM of the same
# FLOPs (an executable, not a test: it needs a GPU and prints timings; mcc_convert: it reads the
# MoE specs of bench/configs).
if(TARGET mccrt_cuda)
  add_executable(moe_gemm_bench ${CMAKE_SOURCE_DIR}/bench/moe_gemm_bench.c)
  target_link_libraries(moe_gemm_bench PRIVATE mccrt_cuda mcc_nvrtc mcc_convert)
endif()
