# cli.cmake — the command-line parser mcc and train_rank share (common/cli.c).
add_executable(cli_test ${CMAKE_SOURCE_DIR}/tests/cli_test.c)
target_link_libraries(cli_test PRIVATE mcc_common)
add_test(NAME cli COMMAND cli_test)
