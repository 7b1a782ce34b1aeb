# Megatron GPT data semantics (runtime/gpt_dataset.c): --split, multi-epoch shuffles, samples, blends.
# megatron_gpt_dataset.py (numpy, Megatron's index building in Python) writes the datasets and the
# expected samples; gpt_dataset_test reads them through rt_gpt_data (ctest fixtures order the runs).
add_executable(gpt_dataset_test ${CMAKE_SOURCE_DIR}/tests/gpt_dataset_test.c)
target_link_libraries(gpt_dataset_test PRIVATE mccrt)

set(MCC_GPT_DATA_OUT ${CMAKE_BINARY_DIR}/tests/gpt_data_out)
file(MAKE_DIRECTORY ${MCC_GPT_DATA_OUT})

add_test(NAME gpt_dataset_reference
         COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/megatron_gpt_dataset.py make --out ${MCC_GPT_DATA_OUT})
set_tests_properties(gpt_dataset_reference PROPERTIES FIXTURES_SETUP gpt_data)

# Exact sample sequences vs numpy's RandomState: one dataset over 949,50,1 (train, valid, a
# one-sequence test split), a 30/70 blend, a 3-way blend listing a dataset twice; many epochs each.
add_test(NAME gpt_dataset_megatron COMMAND gpt_dataset_test expect ${MCC_GPT_DATA_OUT} single blend blend3)
# Bad --data-path / --split / --seed / --seq-length and a split with no sequences are refused by name.
add_test(NAME gpt_dataset_errors COMMAND gpt_dataset_test errors ${MCC_GPT_DATA_OUT})
set_tests_properties(gpt_dataset_megatron gpt_dataset_errors PROPERTIES FIXTURES_REQUIRED gpt_data)
set_tests_properties(gpt_dataset_reference gpt_dataset_megatron gpt_dataset_errors PROPERTIES TIMEOUT 60)
