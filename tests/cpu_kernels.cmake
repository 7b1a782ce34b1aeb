# cpu_kernels.cmake — the CPU backend's kernels: gradients vs finite differences, forwards vs formulas.
add_executable(cpu_kernels_test ${CMAKE_SOURCE_DIR}/tests/cpu_kernels_test.c)
target_link_libraries(cpu_kernels_test PRIVATE mccrt)
# the table of LLaMA 3.1 rope frequencies: transformers' definition (rope_scaling_reference checks it)
add_test(NAME cpu_kernels COMMAND cpu_kernels_test ${CMAKE_SOURCE_DIR}/tests/data/rope_llama3_freqs.txt)
add_test(NAME rope_scaling_reference COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/rope_scaling_ref.py check
         ${CMAKE_SOURCE_DIR}/tests/data/rope_llama3_freqs.txt)
