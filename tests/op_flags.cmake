# op_flags.cmake — ops.def's flags column (IR_OPF_*) against what its readers need.
add_executable(op_flags_test ${CMAKE_SOURCE_DIR}/tests/op_flags_test.c)
target_link_libraries(op_flags_test PRIVATE mcc_ir)
add_test(NAME ir_op_flags COMMAND op_flags_test)
