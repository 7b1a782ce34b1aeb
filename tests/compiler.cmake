# Tests of the compiler pipeline end to end: gradient rules, IR round-trip on every model,
# golden graphs, CLI errors, and the CPU executable against PyTorch.
add_executable(gradcheck_test ${CMAKE_SOURCE_DIR}/tests/gradcheck_test.c)
target_link_libraries(gradcheck_test PRIVATE mcc_compiler mccrt)
add_test(NAME gradcheck COMMAND gradcheck_test)

add_executable(roundtrip_test ${CMAKE_SOURCE_DIR}/tests/roundtrip_test.c)
target_link_libraries(roundtrip_test PRIVATE mcc_compiler)
file(GLOB MCC_MODEL_SPECS ${CMAKE_SOURCE_DIR}/models/*.json)
add_test(NAME ir_roundtrip_models COMMAND roundtrip_test ${MCC_MODEL_SPECS})

add_test(NAME golden_graphs COMMAND ${CMAKE_SOURCE_DIR}/tests/golden.sh $<TARGET_FILE:mcc>)
add_test(NAME cli_errors COMMAND ${CMAKE_SOURCE_DIR}/tests/cli_errors.sh $<TARGET_FILE:mcc>)
foreach(model tiny-gpt2 tiny-llama)
  add_test(NAME numerics_vs_torch_${model} COMMAND ${CMAKE_SOURCE_DIR}/tests/numerics_e2e.sh $<TARGET_FILE:mcc> ${model})
  set_tests_properties(numerics_vs_torch_${model} PROPERTIES LABELS numerics)
endforeach()

# Data parallelism on CPU ranks (Open MPI): dp=2 equals the single-rank program.
if(MPI_C_FOUND)
  add_test(NAME dp2_equals_single_rank_tiny-gpt2 COMMAND ${CMAKE_SOURCE_DIR}/tests/dp_e2e.sh $<TARGET_FILE:mcc> tiny-gpt2 8)
  add_test(NAME dp2_equals_single_rank_tiny-llama COMMAND ${CMAKE_SOURCE_DIR}/tests/dp_e2e.sh $<TARGET_FILE:mcc> tiny-llama 16)
  set_tests_properties(dp2_equals_single_rank_tiny-gpt2 dp2_equals_single_rank_tiny-llama PROPERTIES LABELS numerics)
endif()
