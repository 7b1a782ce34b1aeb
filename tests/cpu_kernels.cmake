# cpu_kernels.cmake — the CPU backend's kernels: gradients vs finite differences, forwards vs formulas.
add_executable(cpu_kernels_test ${CMAKE_SOURCE_DIR}/tests/cpu_kernels_test.c)
target_link_libraries(cpu_kernels_test PRIVATE mccrt)
# the tables of LLaMA 3.1's and YaRN's rope frequencies: transformers' and Megatron's definitions
# (rope_scaling_reference and rope_yarn_reference check them)
add_test(NAME cpu_kernels COMMAND cpu_kernels_test ${CMAKE_SOURCE_DIR}/tests/data/rope_llama3_freqs.txt
         ${CMAKE_SOURCE_DIR}/tests/data/rope_yarn_freqs.txt)
add_test(NAME rope_scaling_reference COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/rope_scaling_ref.py check
         ${CMAKE_SOURCE_DIR}/tests/data/rope_llama3_freqs.txt)
add_test(NAME rope_yarn_reference COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/rope_scaling_ref.py check
         ${CMAKE_SOURCE_DIR}/tests/data/rope_yarn_freqs.txt)
