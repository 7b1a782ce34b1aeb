# plan_memory.cmake — the memory `mcc compile` reports against what train_rank allocates for the
# plan, on CPU ranks under mpirun (tests/plan_memory.sh).
if(MPI_C_FOUND)
  add_test(NAME memory_report_equals_train_rank COMMAND ${CMAKE_SOURCE_DIR}/tests/plan_memory.sh $<TARGET_FILE:mcc>)
  set_tests_properties(memory_report_equals_train_rank PROPERTIES PROCESSORS 4 TIMEOUT 300)
endif()
