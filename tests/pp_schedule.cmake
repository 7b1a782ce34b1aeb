# pp_schedule.cmake — pipeline schedules, the stage split and their simulation
# (tests/pp_schedule_test.c over passes/pp_schedule.c).
add_executable(pp_schedule_test ${CMAKE_SOURCE_DIR}/tests/pp_schedule_test.c)
target_link_libraries(pp_schedule_test PRIVATE mcc_compiler)
foreach(t 1f1b interleaved zb_h1 p2p invalid refusals split virtual)
  add_test(NAME pp_schedule_${t} COMMAND pp_schedule_test ${t})
endforeach()
