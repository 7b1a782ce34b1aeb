# data_safety.sh: a failed or interrupted `mcc data preprocess` keeps the dataset at its prefix;
# train_rank refuses damaged .idx/.bin pairs, zero and malformed --split shares, and sample indices
# that cannot fit in memory, each with a message and exit status 1 (no signal).
add_test(NAME data_safety COMMAND ${CMAKE_SOURCE_DIR}/tests/data_safety.sh $<TARGET_FILE:mcc>)
set_tests_properties(data_safety PROPERTIES TIMEOUT 120)
