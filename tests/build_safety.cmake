# build_safety.cmake — what `mcc compile` writes and how (tests/build_safety.sh): an output name
# with quotes and shell text, a file size limit while writing, the cold-NVRTC-cache message, and
# an installed mcc used from a copy of its prefix; the GPU each rank takes under each launcher.
set(_bs bash ${CMAKE_SOURCE_DIR}/tests/build_safety.sh)
add_test(NAME build_quoted_output COMMAND ${_bs} quote $<TARGET_FILE:mcc>)
add_test(NAME build_full_disk COMMAND ${_bs} full-disk $<TARGET_FILE:mcc>)
add_test(NAME build_install COMMAND ${_bs} install $<TARGET_FILE:mcc> ${CMAKE_BINARY_DIR})
set_tests_properties(build_quoted_output build_full_disk build_install PROPERTIES TIMEOUT 60)
if(TARGET mccrt_cuda)
  # A cold cache compiles every kernel with NVRTC: 18 s on two cores from the unsanitized mcc
  # (MCC_E2E_MCC, tests/harness.cmake), 29 s under ASan, nearly all of it inside NVRTC itself; the
  # other --target cuda compiles run this build's mcc through the cache
  add_test(NAME build_nvrtc_cache_message COMMAND ${_bs} nvrtc-cache ${MCC_E2E_MCC})
  set_tests_properties(build_nvrtc_cache_message PROPERTIES TIMEOUT 300 LABELS e2e)
endif()

# Each launcher's variables alone (env -i), as its ranks see them on a node of 4 GPUs; the last
# case has more ranks than GPUs (they share, round robin).
add_executable(rank_device_test ${CMAKE_SOURCE_DIR}/tests/rank_device_test.c)
target_link_libraries(rank_device_test PRIVATE mccrt)
foreach(_case
    "single|8|0"
    "torchrun|4|1|RANK=5;WORLD_SIZE=8;LOCAL_RANK=1;LOCAL_WORLD_SIZE=4"
    "openmpi|4|3|OMPI_COMM_WORLD_RANK=3;OMPI_COMM_WORLD_SIZE=4;OMPI_COMM_WORLD_LOCAL_RANK=3;OMPI_COMM_WORLD_LOCAL_SIZE=4"
    "slurm|4|2|SLURM_PROCID=6;SLURM_NTASKS=8;SLURM_LOCALID=2;SLURM_STEP_TASKS_PER_NODE=4(x2)"
    "shared|2|1|OMPI_COMM_WORLD_RANK=3;OMPI_COMM_WORLD_SIZE=4;OMPI_COMM_WORLD_LOCAL_RANK=3;OMPI_COMM_WORLD_LOCAL_SIZE=4")
  string(REPLACE "|" ";" _f "${_case}")
  list(POP_FRONT _f _name _ndev _want)
  add_test(NAME rank_device_${_name} COMMAND env -i ${_f} $<TARGET_FILE:rank_device_test> ${_ndev} ${_want})
endforeach()
