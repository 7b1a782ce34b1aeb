# comm.cmake — ranks and comms: launcher env detection, the Megatron rank layout, train_rank's
# --nproc-per-node launcher, and (with MPI) collectives, the variable all-to-all over ep groups and
# the collective timeout on 4 CPU ranks,
# point to point on 2 and 4; the NCCL backend on 2 GPUs (label gpu).
add_executable(comm_test ${CMAKE_SOURCE_DIR}/tests/comm_test.c)
target_include_directories(comm_test PRIVATE ${CMAKE_SOURCE_DIR}/tests)
target_link_libraries(comm_test PRIVATE mccrt)

add_test(NAME comm_env COMMAND comm_test env)
add_test(NAME comm_mesh COMMAND comm_test mesh)
file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/tests/comm_launch)
add_test(NAME comm_launch COMMAND comm_test launch ${CMAKE_BINARY_DIR}/tests/comm_launch)
add_test(NAME comm_launch_fail COMMAND comm_test launch-fail)
add_test(NAME comm_launch_signal COMMAND comm_test launch-signal)
set_tests_properties(comm_env comm_mesh comm_launch comm_launch_fail comm_launch_signal PROPERTIES TIMEOUT 30)

set(MCC_EXPECT_FAIL sh ${CMAKE_SOURCE_DIR}/tests/comm_expect_fail.sh)
get_target_property(_mccrt_defs mccrt INTERFACE_COMPILE_DEFINITIONS)
if(MPI_C_FOUND AND NOT "MCC_HAVE_MPI" IN_LIST _mccrt_defs)
  message(WARNING "MPI found but libmccrt is built without it (MCC_HAVE_MPI): the MPI comm tests are skipped")
elseif(MPI_C_FOUND)
  # CI runs as root; more ranks than cores.
  set(_mpirun ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root ${MPIEXEC_NUMPROC_FLAG} 4)
  set(_mpirun2 ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root ${MPIEXEC_NUMPROC_FLAG} 2)
  add_test(NAME comm_mpi_collectives COMMAND ${_mpirun} $<TARGET_FILE:comm_test> collectives)
  add_test(NAME comm_mpi_all_to_all_v COMMAND ${_mpirun} $<TARGET_FILE:comm_test> all-to-all-v)
  add_test(NAME comm_mpi_all_to_all_v_room COMMAND ${MCC_EXPECT_FAIL}
           "all_to_all_v #1 on group 'ep': 4 rows come to this rank but its receive buffer holds 3" "!received more rows"
           -- ${_mpirun} $<TARGET_FILE:comm_test> all-to-all-v-room)
  # the all_to_all_v op in a plan (tests/passes/all_to_all_v.ir, its pass test beside it), run on 4 ranks
  add_executable(a2a_run_test ${CMAKE_SOURCE_DIR}/tests/a2a_run_test.c)
  target_include_directories(a2a_run_test PRIVATE ${CMAKE_SOURCE_DIR})
  target_link_libraries(a2a_run_test PRIVATE mcc_compiler mccrt)
  add_test(NAME ep_all_to_all_v_run COMMAND ${_mpirun} $<TARGET_FILE:a2a_run_test> ${CMAKE_SOURCE_DIR}/tests/passes/all_to_all_v.ir)
  # expert parallelism against one rank: ep 2 x dp 2 (edp 1) and ep 2 x dp 4 (edp 2), tests/ep_layer.ir
  add_executable(ep_run_test ${CMAKE_SOURCE_DIR}/tests/ep_run_test.c)
  target_include_directories(ep_run_test PRIVATE ${CMAKE_SOURCE_DIR})
  target_link_libraries(ep_run_test PRIVATE mcc_compiler mccrt)
  add_test(NAME ep2_layer_equals_single_rank COMMAND ${_mpirun2} $<TARGET_FILE:ep_run_test> ${CMAKE_SOURCE_DIR}/tests/ep_layer.ir)
  add_test(NAME ep2_dp4_layer_equals_single_rank COMMAND ${_mpirun} $<TARGET_FILE:ep_run_test> ${CMAKE_SOURCE_DIR}/tests/ep_layer.ir)
  add_test(NAME comm_mpi_timeout COMMAND ${MCC_EXPECT_FAIL}
           "all_reduce #2 on group 'world' (world ranks 0,1,2,3) did not complete within 2 s"
           "did not arrive: rank 3 (no answer" "!rank 1 (" -- ${_mpirun} $<TARGET_FILE:comm_test> timeout)
  # point to point: rings and chains of 4 and of 2 (next and previous are one member)
  add_test(NAME comm_mpi_p2p COMMAND ${_mpirun} $<TARGET_FILE:comm_test> p2p)
  add_test(NAME comm_mpi_p2p_2ranks COMMAND ${_mpirun2} $<TARGET_FILE:comm_test> p2p)
  add_test(NAME comm_mpi_p2p_bad_peer COMMAND ${MCC_EXPECT_FAIL}
           "send on group 'world': peer 2 is not a neighbour of member 0 (group of 4: its neighbours are members 3 and 1)"
           "!got past" -- ${_mpirun} $<TARGET_FILE:comm_test> p2p-bad-peer)
  add_test(NAME comm_mpi_p2p_timeout COMMAND ${MCC_EXPECT_FAIL}
           "error: recv #1 from world rank " "on group 'world' (world ranks 0,1) did not complete within 2 s"
           "has sent this rank 0 messages on it and waits in recv #1 from world rank" "!received a message never sent"
           -- ${_mpirun2} $<TARGET_FILE:comm_test> p2p-timeout)
  set_tests_properties(comm_mpi_p2p comm_mpi_p2p_2ranks comm_mpi_p2p_bad_peer comm_mpi_p2p_timeout PROPERTIES TIMEOUT 60
    ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;MCC_COLLECTIVE_TIMEOUT_S=2;ASAN_OPTIONS=detect_leaks=0")
  set_tests_properties(comm_mpi_collectives comm_mpi_all_to_all_v comm_mpi_all_to_all_v_room ep_all_to_all_v_run
    ep2_layer_equals_single_rank ep2_dp4_layer_equals_single_rank comm_mpi_timeout PROPERTIES TIMEOUT 60
    # Open MPI keeps allocations of components it has unloaded: LeakSanitizer cannot attribute
    # (or suppress) them, so leak checking is off under mpirun; the other tests check our code.
    ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;MCC_COLLECTIVE_TIMEOUT_S=2;ASAN_OPTIONS=detect_leaks=0")
endif()

if(TARGET mccrt_cuda)
  find_package(Threads REQUIRED)
  find_library(MCC_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} REQUIRED)
  add_executable(comm_nccl_test ${CMAKE_SOURCE_DIR}/tests/gpu/comm_nccl_test.c)
  target_include_directories(comm_nccl_test PRIVATE ${CMAKE_SOURCE_DIR}/tests)
  # --as-needed: the GPU machine needs only CUDA and NCCL for it, not BLAS or MPI
  target_link_options(comm_nccl_test PRIVATE -Wl,--as-needed)
  target_link_libraries(comm_nccl_test PRIVATE mccrt_cuda ${MCC_NCCL_LIBRARY} Threads::Threads)
  add_test(NAME comm_nccl_collectives COMMAND comm_nccl_test collectives)
  add_test(NAME comm_nccl_timeout COMMAND ${MCC_EXPECT_FAIL}
           "all_reduce #2 on group 'world' (world ranks 0,1) did not complete within 3 s" "!got past"
           -- $<TARGET_FILE:comm_nccl_test> timeout)
  add_test(NAME comm_nccl_p2p COMMAND comm_nccl_test p2p)
  add_test(NAME comm_nccl_p2p_timeout COMMAND ${MCC_EXPECT_FAIL}
           "recv #1 from world rank 1 on group 'world' (world ranks 0,1) did not complete within 3 s" "!got past"
           -- $<TARGET_FILE:comm_nccl_test> p2p-timeout)
  set_tests_properties(comm_nccl_collectives comm_nccl_timeout comm_nccl_p2p comm_nccl_p2p_timeout PROPERTIES LABELS gpu TIMEOUT 120
    ENVIRONMENT "MCC_COLLECTIVE_TIMEOUT_S=3;NCCL_NVLS_ENABLE=0")
  if(MPI_C_FOUND AND "MCC_HAVE_MPI" IN_LIST _mccrt_defs)
    # the host-staged backend (ranks sharing one GPU): 4 ranks, a 2x2 mesh's groups among them
    add_test(NAME comm_staged_4_ranks_one_gpu COMMAND ${_mpirun} $<TARGET_FILE:comm_nccl_test> staged)
    set_tests_properties(comm_staged_4_ranks_one_gpu PROPERTIES LABELS gpu TIMEOUT 120
      ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;MCC_COLLECTIVE_TIMEOUT_S=10;ASAN_OPTIONS=detect_leaks=0")
  endif()
endif()
