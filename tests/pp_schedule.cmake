# pp_schedule.cmake — pipeline schedules, the stage split and their simulation
# (tests/pp_schedule_test.c over passes/pp_schedule.c).
add_executable(pp_schedule_test ${CMAKE_SOURCE_DIR}/tests/pp_schedule_test.c)
target_link_libraries(pp_schedule_test PRIVATE mcc_compiler)
foreach(t balanced 1f1b interleaved zb_h1 orders p2p invalid refusals auto split virtual layout)
  add_test(NAME pp_schedule_${t} COMMAND pp_schedule_test ${t})
endforeach()
# `mcc schedule` on llama3-70b at TP=4 x PP=4 x DP=4 with 2 virtual stages, and its refusals
add_test(NAME pp_schedule_cli COMMAND ${CMAKE_SOURCE_DIR}/tests/pp_schedule_cli.sh $<TARGET_FILE:mcc>)
# Megatron's --pipeline-model-parallel-layout: its H100 DeepSeek-V3 recipe compiled and scheduled, its refusals
add_test(NAME pp_layout_cli COMMAND ${CMAKE_SOURCE_DIR}/tests/pp_layout_cli.sh $<TARGET_FILE:mcc>)
# `mcc schedule`'s memory per rank is the compiled plan's: the same as mcc compile prints
add_test(NAME schedule_memory_equals_compile COMMAND ${CMAKE_SOURCE_DIR}/tests/schedule_memory.sh $<TARGET_FILE:mcc>)
