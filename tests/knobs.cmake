# knobs.cmake — the MCC_* environment variables (common/knobs.h) end to end on the tiny GPT
# (knobs.sh): a misspelt variable or a bad value refused by mcc and train_rank, a valid setting
# in train_rank's start-up box and the metrics file's first record (`mcc plot` reads past it),
# and docs/gpus.md's Knobs table listing every knob.
add_test(NAME knobs COMMAND ${CMAKE_SOURCE_DIR}/tests/knobs.sh $<TARGET_FILE:mcc>)
set_tests_properties(knobs PROPERTIES TIMEOUT 120)
