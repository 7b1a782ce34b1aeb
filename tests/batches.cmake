# batches.cmake — the tokens and targets each step trains on are the dataset's (tests/batches_e2e.sh):
# rank 0's dumped micro-batches against Megatron's sample order read independently
# (tests/megatron_gpt_dataset.py), targets the tokens shifted by one, and every dp rank's share
# replayed by the PyTorch reference against the logged loss and grad norm; with data parallel
# and gradient accumulation (global batch 16 = micro-batch 2 x dp 2 x 4 micro-batches).
# sampler_is_megatrons: the cyclic sampler's order alone, over epochs (the train split is built
# for the run's samples, so a run never leaves the sampler's first epoch).
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
  # --dataloader-type cyclic (baked by mcc compile): each dp rank's micro-batches in Megatron's
  # MegatronPretrainingRandomSampler order (tests/megatron_sampler.py, torch.randperm), at dp 1
  # and dp 2 with accumulation, with and without data sharding, and resumed mid-run (--load) with
  # the loader rebuilt from the consumed samples; dropout's masks stay on each row's position
  set(_cyclic --dataloader-type cyclic)
  add_test(NAME batches_are_cyclic_dp1_accum4_tiny-gpt2
           COMMAND ${CMAKE_SOURCE_DIR}/tests/batches_e2e.sh $<TARGET_FILE:mcc> tiny-gpt2 1 1 --micro-batch-size 2
                   --global-batch-size 8 ${_cyclic})
  add_test(NAME batches_are_cyclic_dp2_accum4_resumed_tiny-gpt2
           COMMAND ${CMAKE_SOURCE_DIR}/tests/batches_e2e.sh $<TARGET_FILE:mcc> tiny-gpt2 2 1 --resume-at 2 ${_batch}
                   ${_cyclic})
  add_test(NAME batches_are_cyclic_no_sharding_dp2_accum4_dropout_tiny-gpt2
           COMMAND ${CMAKE_SOURCE_DIR}/tests/batches_e2e.sh $<TARGET_FILE:mcc> tiny-gpt2 2 1 ${_batch} ${_cyclic}
                   --no-data-sharding --hidden-dropout 0.1)
  add_test(NAME batches_are_cyclic_no_sharding_dp2_accum4_resumed_tiny-gpt2
           COMMAND ${CMAKE_SOURCE_DIR}/tests/batches_e2e.sh $<TARGET_FILE:mcc> tiny-gpt2 2 1 --resume-at 2 ${_batch}
                   ${_cyclic} --no-data-sharding)
  set_tests_properties(batches_are_cyclic_dp1_accum4_tiny-gpt2 PROPERTIES LABELS numerics TIMEOUT 120)
  set_tests_properties(batches_are_cyclic_dp2_accum4_resumed_tiny-gpt2
                       batches_are_cyclic_no_sharding_dp2_accum4_dropout_tiny-gpt2
                       batches_are_cyclic_no_sharding_dp2_accum4_resumed_tiny-gpt2
                       PROPERTIES LABELS numerics PROCESSORS 2 TIMEOUT 120)
endif()

# runtime/sampler.c against Megatron's samplers and torch.randperm (tests/megatron_sampler.py):
# several epochs, loaders built mid-epoch and past an epoch's end, with and without data sharding
add_executable(sampler_test ${CMAKE_SOURCE_DIR}/tests/sampler_test.c)
target_link_libraries(sampler_test PRIVATE mccrt)
add_test(NAME sampler_is_megatrons
         COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/megatron_sampler.py check $<TARGET_FILE:sampler_test>)
set_tests_properties(sampler_is_megatrons PROPERTIES TIMEOUT 60)
