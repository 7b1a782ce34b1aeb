# cpu_kernels.cmake — the CPU backend's kernels: gradients vs finite differences, forwards vs formulas.
add_executable(cpu_kernels_test ${CMAKE_SOURCE_DIR}/tests/cpu_kernels_test.c)
target_link_libraries(cpu_kernels_test PRIVATE mccrt)
add_test(NAME cpu_kernels COMMAND cpu_kernels_test)
