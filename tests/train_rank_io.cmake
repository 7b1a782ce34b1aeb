# train_rank_io.cmake — what train_rank reads and writes, and how it stops: the plan's values
# range-checked at load (train_config_test), and end to end on the tiny GPT (train_rank_io.sh):
# checked numeric flags, --flag=value, Megatron's log fields, the metrics file appended a whole
# record at a time through SIGKILL, SIGTERM and SIGINT (and `mcc plot` of what they leave), write
# errors that stop the run naming the file, and 2 MPI ranks that stop at the same iteration.
add_executable(train_config_test ${CMAKE_SOURCE_DIR}/tests/train_config_test.c)
target_include_directories(train_config_test PRIVATE ${CMAKE_SOURCE_DIR})
target_link_libraries(train_config_test PRIVATE mccrt)
add_test(NAME train_config COMMAND train_config_test)
set(_train_io_mpirun "")
if(MPI_C_FOUND)
  set(_train_io_mpirun ${MPIEXEC_EXECUTABLE})
endif()
add_test(NAME train_rank_io COMMAND ${CMAKE_SOURCE_DIR}/tests/train_rank_io.sh $<TARGET_FILE:mcc> ${_train_io_mpirun})
set_tests_properties(train_rank_io PROPERTIES TIMEOUT 180)
