# spec.cmake — the spec frontend test: shipped models load, flags override, bad input is refused.
add_executable(spec_test ${CMAKE_SOURCE_DIR}/tests/spec_test.c)
target_link_libraries(spec_test PRIVATE mcc_compiler)
add_test(NAME spec COMMAND spec_test ${CMAKE_SOURCE_DIR}/tests/bad_specs.txt ${CMAKE_SOURCE_DIR}/models)
