# dropout.cmake — dropout end to end on the CPU (p = 0 is today's graph, runs reproduce, eval_step
# has none: tests/dropout_e2e.sh), and on GPUs (label gpu: needs an sm_90 GPU) Philox compiled by
# NVRTC against its known answers and the CUDA dropout and attention-dropout kernels against the
# CPU oracle. The other dropout tests sit with their kinds: cpu_kernels (Philox, mask statistics
# and layouts), gradcheck, spec, pass_autodiff_dropout and pass_shard_tp2_sp_dropout (the masks in
# the plan), numerics_vs_torch_dropout_* and the *_dropout layouts of *_equals_single_rank_*
# (compiler.cmake).
add_test(NAME dropout_reproducible COMMAND ${CMAKE_SOURCE_DIR}/tests/dropout_e2e.sh $<TARGET_FILE:mcc>)

if(TARGET mccrt_cuda)
  add_executable(dropout_test ${CMAKE_SOURCE_DIR}/tests/gpu/dropout_test.c)
  target_link_libraries(dropout_test PRIVATE mccrt_cuda mcc_nvrtc)
  add_test(NAME dropout_gpu COMMAND dropout_test)
  set_tests_properties(dropout_gpu PROPERTIES LABELS gpu)
endif()
