# plan_grads.cmake — every shipped model's plan, in each layout, on both targets, writes every
# parameter's gradient (passes/plan_check.c), and the check refuses a plan that does not. A test
# a model (plan_grads_<model>: ctest runs them side by side), and the refusal (plan_grads_refusal).
add_executable(plan_grads_test ${CMAKE_SOURCE_DIR}/tests/plan_grads_test.c)
target_link_libraries(plan_grads_test PRIVATE mcc_compiler)
set(_plan_grads ${CMAKE_SOURCE_DIR}/tests/plan_grads.sh $<TARGET_FILE:mcc> $<TARGET_FILE:plan_grads_test>)
file(GLOB _plan_grads_specs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/models/*.json)
foreach(spec ${_plan_grads_specs})
  get_filename_component(model ${spec} NAME_WLE) # gpt2-1.5b, not gpt2-1
  add_test(NAME plan_grads_${model} COMMAND ${_plan_grads} ${spec})
endforeach()
add_test(NAME plan_grads_refusal COMMAND ${_plan_grads} refusal)
