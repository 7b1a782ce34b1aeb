# ir.cmake — the IR text form and verifier (ir/print.c, ir/parse.c, ir/verify.c): round-trips,
# parse and verifier error messages, the memory-plan check against an oracle, a parser fuzz, and
# a layout record's index map (ir/ir.c ir_layout_index).
add_executable(ir_test ${CMAKE_SOURCE_DIR}/tests/ir_test.c)
target_link_libraries(ir_test PRIVATE mcc_ir)
foreach(t roundtrip parse_errors verify_errors memory_errors memory_check rank_terms fuzz layout_index layout_balanced)
  add_test(NAME ir_${t} COMMAND ir_test ${t})
endforeach()
