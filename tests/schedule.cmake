# schedule.cmake — the verifier's checks of function kinds and the schedule programs
# (tests/schedule_verify.sh); the schedule pass's own tests are tests/passes/schedule_*.ir.
add_test(NAME schedule_verify COMMAND ${CMAKE_SOURCE_DIR}/tests/schedule_verify.sh $<TARGET_FILE:mcc>)
