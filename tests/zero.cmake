# The distributed optimizer (ZeRO-1, --use-distributed-optimizer): its graph structure, and dp=2
# with it equals the single-rank program on CPU ranks (tests/parallel_e2e.sh, fp32, 1e-5).
add_test(NAME zero_ir_structure COMMAND ${CMAKE_SOURCE_DIR}/tests/zero_ir.sh $<TARGET_FILE:mcc>)
if(MPI_C_FOUND)
  foreach(model tiny-gpt2 tiny-llama)
    mcc_layout_test(zero_dp2_equals_single_rank_${model} ${model} 2 --dp 2 --use-distributed-optimizer)
  endforeach()
endif()
