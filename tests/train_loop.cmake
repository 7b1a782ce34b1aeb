# train_loop.cmake — train_rank's training loop: every LR style against its formula (lr_test),
# and end to end on a tiny GPT (train_loop.sh): eval on the valid split leaves training
# untouched, log lines and the JSONL metrics file, `mcc plot`, NaN stop and --skip-nan-steps.
add_executable(lr_test ${CMAKE_SOURCE_DIR}/tests/lr_test.c)
target_include_directories(lr_test PRIVATE ${CMAKE_SOURCE_DIR})
target_link_libraries(lr_test PRIVATE mccrt)
add_test(NAME lr_schedule COMMAND lr_test)
add_test(NAME train_loop COMMAND ${CMAKE_SOURCE_DIR}/tests/train_loop.sh $<TARGET_FILE:mcc>)
set_tests_properties(train_loop PROPERTIES TIMEOUT 120)
