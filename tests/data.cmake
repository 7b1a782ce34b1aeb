# Data path: `mcc data preprocess` (ByteLevel tokenizer -> Megatron MMIDIDX) and the runtime reader.
# (GPT-2 BPE preprocessing: tests/tokenizer.cmake.)
# data_preprocess writes the datasets; the other tests read them (ctest fixtures order the runs).
add_executable(data_test ${CMAKE_SOURCE_DIR}/tests/data_test.c)
target_link_libraries(data_test PRIVATE mcc_compiler mccrt)

set(MCC_DATA_OUT ${CMAKE_BINARY_DIR}/tests/data_out)
set(MCC_DATA_PY /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/megatron_indexed.py)
file(MAKE_DIRECTORY ${MCC_DATA_OUT})

# (a) preprocess the fixtures; error messages name the flag or line; failed runs leave no files.
add_test(NAME data_preprocess COMMAND data_test preprocess ${CMAKE_SOURCE_DIR}/tests/data ${MCC_DATA_OUT})
set_tests_properties(data_preprocess PROPERTIES FIXTURES_SETUP data_out)

# (b) mcc's .bin/.idx are byte-identical to what Megatron's rules give (independent Python writer).
foreach(case jsonl jsonl_eod txt_eod)
  string(REGEX REPLACE "_eod$" "" ext ${case})
  set(eod "")
  if(case MATCHES "_eod$")
    set(eod --append-eod)
  endif()
  add_test(NAME data_megatron_${case}
           COMMAND ${MCC_DATA_PY} expect --input ${CMAKE_SOURCE_DIR}/tests/data/fixture.${ext} ${eod}
                   --expected ${MCC_DATA_OUT}/expected_${case} --actual ${MCC_DATA_OUT}/fixture_${case}_text_document)
  set_tests_properties(data_megatron_${case} PROPERTIES FIXTURES_REQUIRED data_out FIXTURES_SETUP data_expected)
endforeach()

add_test(NAME data_synthetic COMMAND ${MCC_DATA_PY} synthetic --prefix ${MCC_DATA_OUT}/synthetic)
set_tests_properties(data_synthetic PROPERTIES FIXTURES_SETUP data_synthetic)

# (c) rt_dataset on mcc's output and on Python-written datasets of every integer dtype:
#     token count, max id, samples incl. wrap-around equal the expected token stream.
set(_pairs "")
foreach(case jsonl jsonl_eod txt_eod)
  list(APPEND _pairs ${MCC_DATA_OUT}/fixture_${case}_text_document ${MCC_DATA_OUT}/expected_${case}.tokens)
endforeach()
foreach(dtype uint8 int8 int16 uint16 int32 int64)
  list(APPEND _pairs ${MCC_DATA_OUT}/synthetic_${dtype} ${MCC_DATA_OUT}/synthetic_${dtype}.tokens)
endforeach()
add_test(NAME data_dataset COMMAND data_test dataset ${_pairs})
set_tests_properties(data_dataset PROPERTIES FIXTURES_REQUIRED "data_out;data_expected;data_synthetic")

# (d) corrupt datasets (bad magic, version, dtype, truncated .idx/.bin, pointers that disagree with
#     the lengths, a bad document index, trailing bytes, another dataset's .bin) are refused,
#     naming the file and the first bad entry.
add_test(NAME data_dataset_corrupt COMMAND data_test corrupt ${MCC_DATA_OUT}/fixture_jsonl_eod_text_document
                                           ${MCC_DATA_OUT}/fixture_jsonl_text_document ${MCC_DATA_OUT})
set_tests_properties(data_dataset_corrupt PROPERTIES FIXTURES_REQUIRED data_out)

# A sampler bug can loop forever: fail fast instead.
set_tests_properties(data_preprocess data_megatron_jsonl data_megatron_jsonl_eod data_megatron_txt_eod
                     data_synthetic data_dataset data_dataset_corrupt PROPERTIES TIMEOUT 60)
