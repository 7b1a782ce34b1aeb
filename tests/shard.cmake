# shard.cmake — mesh-generic sharding (tests/shard_test.c): a dimension split over several mesh
# axes in the text form and the verifier, every op's sharding rule (ops.def's shard column
# against passes/shard.c's table), and the shard pass run over cp instead of tp (features split,
# and cp's split of the tokens) and over ep (the experts split).
add_executable(shard_test ${CMAKE_SOURCE_DIR}/tests/shard_test.c)
target_link_libraries(shard_test PRIVATE mcc_compiler)
add_test(NAME ir_shard_text COMMAND shard_test text)
add_test(NAME pass_shard_rules COMMAND shard_test rules)
add_test(NAME pass_shard_axis COMMAND shard_test axis)
add_test(NAME pass_shard_tokens COMMAND shard_test tokens)
add_test(NAME pass_shard_experts COMMAND shard_test experts)
