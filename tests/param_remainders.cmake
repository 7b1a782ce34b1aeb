# param_remainders.cmake — store_param_remainders planned where it applies (tests/param_remainders.sh:
# the parameters' memory at 4 bytes instead of 6 under one rank, TP and PP; whole masters where it
# does not apply; every such plan verified).
add_test(NAME param_remainders_plan COMMAND ${CMAKE_SOURCE_DIR}/tests/param_remainders.sh $<TARGET_FILE:mcc>)
