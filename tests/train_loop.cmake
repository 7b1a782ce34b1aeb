# train_loop.cmake — train_rank's training loop: every LR style against its formula, counted in
# iterations and in samples, from lr_warmup_init, and the decoupled group's (lr_test); each
# iteration's logged lr against a transcription of Megatron's scheduler (lr_schedule_e2e.sh); and
# end to end on a tiny GPT (train_loop.sh): eval on the valid split leaves training untouched, log
# lines and the JSONL metrics file, `mcc plot`, NaN stop and --skip-nan-steps. --decoupled-lr on
# one rank, tp 2 and pp 2 (decoupled_lr.sh), and under tp 2 x pp 2 against one rank.
add_executable(lr_test ${CMAKE_SOURCE_DIR}/tests/lr_test.c)
target_include_directories(lr_test PRIVATE ${CMAKE_SOURCE_DIR})
target_link_libraries(lr_test PRIVATE mccrt)
add_test(NAME lr_schedule COMMAND lr_test)
add_test(NAME lr_schedule_vs_megatron COMMAND ${CMAKE_SOURCE_DIR}/tests/lr_schedule_e2e.sh $<TARGET_FILE:mcc>)
add_test(NAME train_loop COMMAND ${CMAKE_SOURCE_DIR}/tests/train_loop.sh $<TARGET_FILE:mcc>)
set_tests_properties(train_loop PROPERTIES TIMEOUT 120)
if(MPI_C_FOUND)
  mcc_e2e_test(decoupled_lr decoupled_lr.sh)
  set_tests_properties(decoupled_lr PROPERTIES PROCESSORS 2)
  mcc_layout_test(decoupled_lr_tp2_pp2_equals_single_rank_tiny-gpt2 tiny-gpt2 4 --decoupled-lr 3e-3
                  --decoupled-min-lr 2e-4 -- --tp 2 --pp 2)
endif()
