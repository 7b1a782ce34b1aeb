# plan_grads.cmake — every shipped model's plan, in each layout, on both targets, writes every
# parameter's gradient (passes/plan_check.c), and the check refuses a plan that does not.
add_executable(plan_grads_test ${CMAKE_SOURCE_DIR}/tests/plan_grads_test.c)
target_link_libraries(plan_grads_test PRIVATE mcc_compiler)
add_test(NAME plan_grads COMMAND ${CMAKE_SOURCE_DIR}/tests/plan_grads.sh $<TARGET_FILE:mcc> $<TARGET_FILE:plan_grads_test>)
