# batches.cmake — the tokens and targets each step trains on are the dataset's (tests/batches_e2e.sh):
# rank 0's dumped micro-batches against Megatron's sample order read independently
# (tests/megatron_gpt_dataset.py), targets the tokens shifted by one, and every dp rank's share
# replayed by the PyTorch reference against the logged loss and grad norm; with data parallel
# and gradient accumulation (global batch 16 = micro-batch 2 x dp 2 x 4 micro-batches).
if(MPI_C_FOUND)
  set(_batch --micro-batch-size 2 --global-batch-size 16)
  add_test(NAME batches_are_dataset_dp2_accum4_tiny-gpt2
           COMMAND ${CMAKE_SOURCE_DIR}/tests/batches_e2e.sh $<TARGET_FILE:mcc> tiny-gpt2 2 1 ${_batch})
  # tp ranks share their dp rank's batch; dropout's masks follow each sample's global index
  add_test(NAME batches_are_dataset_tp2_dp2_accum4_dropout_tiny-llama
           COMMAND ${CMAKE_SOURCE_DIR}/tests/batches_e2e.sh $<TARGET_FILE:mcc> tiny-llama 2 2 ${_batch}
                   --vocab-size 260 --make-vocab-size-divisible-by 1 --hidden-dropout 0.1 --attention-dropout 0.1)
  set_tests_properties(batches_are_dataset_dp2_accum4_tiny-gpt2 PROPERTIES LABELS numerics PROCESSORS 2 TIMEOUT 120)
  set_tests_properties(batches_are_dataset_tp2_dp2_accum4_dropout_tiny-llama PROPERTIES LABELS numerics PROCESSORS 4 TIMEOUT 120)
endif()
