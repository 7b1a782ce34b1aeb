# ir_checks.cmake — FileCheck lines on one pass's `mcc ir` output (tests/ir_check.sh), for what a
# numerics test cannot always see: the vocabulary-parallel cross entropy combines the row maxima by
# maximum (tests/vocab_parallel_ce.check, after shard, tp 2 with and without sequence parallel),
# and no bias or norm weight is decayed (tests/no_weight_decay.check, after optimizer, one rank
# and ZeRO over tp 2 x dp 2).
execute_process(COMMAND ${LLVM_CONFIG} --bindir OUTPUT_VARIABLE _llvm_bindir OUTPUT_STRIP_TRAILING_WHITESPACE)
find_program(MCC_FILECHECK NAMES FileCheck FileCheck-14 FileCheck-19 HINTS ${_llvm_bindir} REQUIRED)
set(_ir_check ${CMAKE_SOURCE_DIR}/tests/ir_check.sh ${MCC_FILECHECK})
foreach(model tiny-gpt2 tiny-llama)
  set(_spec ${CMAKE_SOURCE_DIR}/models/${model}.json)
  add_test(NAME vocab_parallel_ce_max_ir_tp2_${model} COMMAND ${_ir_check} ${CMAKE_SOURCE_DIR}/tests/vocab_parallel_ce.check
           CHECK $<TARGET_FILE:mcc> ${_spec} --tp 2 --after shard)
  add_test(NAME vocab_parallel_ce_max_ir_tp2_sp_${model} COMMAND ${_ir_check} ${CMAKE_SOURCE_DIR}/tests/vocab_parallel_ce.check
           CHECK $<TARGET_FILE:mcc> ${_spec} --tp 2 --sequence-parallel --after shard)
endforeach()
foreach(pair "GPT;tiny-gpt2" "LLAMA;tiny-llama")
  list(GET pair 0 prefix)
  list(GET pair 1 model)
  set(_spec ${CMAKE_SOURCE_DIR}/models/${model}.json)
  add_test(NAME no_weight_decay_ir_${model} COMMAND ${_ir_check} ${CMAKE_SOURCE_DIR}/tests/no_weight_decay.check
           ${prefix} $<TARGET_FILE:mcc> ${_spec} --weight-decay 0.5 --after optimizer)
  add_test(NAME no_weight_decay_ir_zero_tp2_dp2_${model} COMMAND ${_ir_check} ${CMAKE_SOURCE_DIR}/tests/no_weight_decay.check
           ${prefix} $<TARGET_FILE:mcc> ${_spec} --weight-decay 0.5 --tp 2 --dp 2 --use-distributed-optimizer --after optimizer)
endforeach()
