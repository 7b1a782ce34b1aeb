# host_adamw_bench.cmake — the benchmark of the host's AdamW under --optimizer-cpu-offload and its
# bf16 conversion going up (an executable, not a test: it prints timings; bench/host_adamw_bench.c).
add_executable(host_adamw_bench ${CMAKE_SOURCE_DIR}/bench/host_adamw_bench.c)
target_link_libraries(host_adamw_bench PRIVATE mccrt)
