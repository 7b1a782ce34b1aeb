# tensorboard.cmake — TensorBoard event files (runtime/tensorboard.c, train_rank's --tensorboard-dir):
# the C writer writes scalars and meets its errors (tests/tensorboard_test.c); an independent reader
# (tests/tensorboard_read.py: CRCs and protobuf decoded from the format, as Debian 12 packages no
# TensorBoard) reads them back.
add_executable(tensorboard_test ${CMAKE_SOURCE_DIR}/tests/tensorboard_test.c)
target_link_libraries(tensorboard_test PRIVATE mccrt)

set(_tb_out ${CMAKE_BINARY_DIR}/tests/tensorboard)
set(MCC_TB_READ /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/tensorboard_read.py)
# each run starts from no directory: the writer must create it, and the reader find one file
add_test(NAME tensorboard_clean COMMAND ${CMAKE_COMMAND} -E rm -rf ${_tb_out})
set_tests_properties(tensorboard_clean PROPERTIES FIXTURES_SETUP tensorboard_clean)

add_test(NAME tensorboard_write COMMAND tensorboard_test write ${_tb_out}/run/a/b)
add_test(NAME tensorboard_errors COMMAND tensorboard_test errors ${_tb_out}/errors)
set_tests_properties(tensorboard_write tensorboard_errors PROPERTIES
                     FIXTURES_REQUIRED tensorboard_clean FIXTURES_SETUP tensorboard_events)

# the scalars as written; after the file size limit, the records before it whole and the cut one gone
add_test(NAME tensorboard_read COMMAND ${MCC_TB_READ} ${_tb_out}/run/a/b --expect ${_tb_out}/run/a/b/expected.tsv)
add_test(NAME tensorboard_read_cut COMMAND ${MCC_TB_READ} ${_tb_out}/errors/limited
                                           --expect ${_tb_out}/errors/limited/expected.tsv)
set_tests_properties(tensorboard_read tensorboard_read_cut PROPERTIES FIXTURES_REQUIRED tensorboard_events)
set_tests_properties(tensorboard_clean tensorboard_write tensorboard_errors tensorboard_read tensorboard_read_cut
                     PROPERTIES TIMEOUT 30)

# train_rank --tensorboard-dir: the same scalars as its metrics file, under Megatron's tags
add_test(NAME tensorboard_train_rank COMMAND ${CMAKE_SOURCE_DIR}/tests/tensorboard_e2e.sh $<TARGET_FILE:mcc>)
set_tests_properties(tensorboard_train_rank PROPERTIES TIMEOUT 120)
