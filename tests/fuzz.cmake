# fuzz.cmake — libFuzzer targets (tests/fuzz/) for the readers of what a user hands mcc: the spec and
# its flags, IR text, Megatron .idx datasets, safetensors files, checkpoint directories and Hugging
# Face config.json files; each run for MCC_FUZZ_SECONDS from a seed corpus made of tests/' own inputs
# (tests/fuzz/seeds.py), a test each (label fuzz), failing on a crash, a sanitizer's report, a leak, a
# hang or 2 GiB (tests/fuzz/run.sh).
#
# libFuzzer is clang's, and this build's compiler may be gcc: the fuzzers are a build of their own,
# this source tree configured again under BUILD/fuzz with clang and MCC_FUZZ=ON (an ExternalProject,
# built with this one), where CMakeLists.txt instruments every library for coverage and the sanitizers
# and includes this file for the executables below, then stops.
set(MCC_FUZZ_TARGETS spec ir idx safetensors checkpoint hf_config)

if(MCC_FUZZ)
  add_custom_target(mcc_fuzzers)
  foreach(t ${MCC_FUZZ_TARGETS})
    add_executable(${t}_fuzz ${CMAKE_SOURCE_DIR}/tests/fuzz/${t}_fuzz.c)
    target_include_directories(${t}_fuzz PRIVATE ${CMAKE_SOURCE_DIR})
    target_compile_definitions(${t}_fuzz PRIVATE _GNU_SOURCE) # memmem, nftw (tests/fuzz/fuzz.h)
    target_link_options(${t}_fuzz PRIVATE -fsanitize=fuzzer)
    add_dependencies(mcc_fuzzers ${t}_fuzz)
  endforeach()
  # each links the library code it reads with, no more
  target_link_libraries(spec_fuzz PRIVATE mcc_convert)
  target_link_libraries(ir_fuzz PRIVATE mcc_ir)
  target_sources(idx_fuzz PRIVATE ${CMAKE_SOURCE_DIR}/runtime/dataset.c) # libmccrt's reader alone
  target_link_libraries(safetensors_fuzz PRIVATE mcc_ckpt)
  target_link_libraries(checkpoint_fuzz PRIVATE mcc_ckpt)
  target_link_libraries(hf_config_fuzz PRIVATE mcc_convert)
  return()
endif()

set(MCC_FUZZ_SECONDS 20 CACHE STRING "Seconds each fuzz test runs its fuzzer (label fuzz)")
# clang with libFuzzer: Debian's clang-14 and libclang-rt-14-dev (scripts/deps.sh installs them)
find_program(MCC_FUZZ_CC NAMES clang-14 clang)
set(_fuzz_why "")
if(NOT MCC_FUZZ_CC)
  set(_fuzz_why "no clang (clang-14)")
else()
  file(WRITE ${CMAKE_BINARY_DIR}/fuzz-check/check.c
       "#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return 0; }\n")
  execute_process(COMMAND ${MCC_FUZZ_CC} -fsanitize=fuzzer,address,undefined ${CMAKE_BINARY_DIR}/fuzz-check/check.c
                          -o ${CMAKE_BINARY_DIR}/fuzz-check/check
                  RESULT_VARIABLE _fuzz_rc ERROR_VARIABLE _fuzz_err OUTPUT_QUIET)
  if(NOT _fuzz_rc EQUAL 0)
    set(_fuzz_why "${MCC_FUZZ_CC} cannot link -fsanitize=fuzzer (libFuzzer: libclang-rt-14-dev): ${_fuzz_err}")
  endif()
endif()

if(_fuzz_why)
  message(WARNING "fuzz tests CANNOT BUILD: ${_fuzz_why}. Each fuzz_* test fails until they can: install clang-14 "
          "and libclang-rt-14-dev (scripts/deps.sh as root) and configure again.")
  foreach(t ${MCC_FUZZ_TARGETS})
    add_test(NAME fuzz_${t} COMMAND sh -c "echo 'fuzz_${t}: not built: ${_fuzz_why}' >&2; exit 1")
    set_tests_properties(fuzz_${t} PROPERTIES LABELS fuzz)
  endforeach()
  return()
endif()

include(ExternalProject)
if(CMAKE_GENERATOR MATCHES "Makefiles")
  set(_fuzz_build $(MAKE) mcc_fuzzers) # under this build's make: its -j
else()
  set(_fuzz_build ${CMAKE_COMMAND} --build <BINARY_DIR> --target mcc_fuzzers)
endif()
# Debug at -O1 as build-test (tests/README.md); without MPI: no fuzzer needs it
ExternalProject_Add(mcc_fuzz_build
  SOURCE_DIR ${CMAKE_SOURCE_DIR}
  BINARY_DIR ${CMAKE_BINARY_DIR}/fuzz
  PREFIX ${CMAKE_BINARY_DIR}/fuzz-ep
  CMAKE_ARGS -DCMAKE_C_COMPILER=${MCC_FUZZ_CC} -DMCC_FUZZ=ON -DMCC_REQUIRE_MPI=OFF -DCMAKE_BUILD_TYPE=Debug
             "-DCMAKE_C_FLAGS_DEBUG=-g -O1"
  BUILD_COMMAND ${_fuzz_build}
  BUILD_ALWAYS ON
  INSTALL_COMMAND "")

file(GLOB _fuzz_seed_inputs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/models/*.json ${CMAKE_SOURCE_DIR}/tests/passes/*.ir
     ${CMAKE_SOURCE_DIR}/tests/fuzz/regressions/*/*)
set(_corpus ${CMAKE_BINARY_DIR}/fuzz-corpus)
add_custom_command(OUTPUT ${_corpus}/.stamp
  COMMAND python3 ${CMAKE_SOURCE_DIR}/tests/fuzz/seeds.py --mcc-convert $<TARGET_FILE:mcc-convert> --out ${_corpus}
  COMMAND ${CMAKE_COMMAND} -E touch ${_corpus}/.stamp
  DEPENDS ${CMAKE_SOURCE_DIR}/tests/fuzz/seeds.py ${CMAKE_SOURCE_DIR}/tests/bad_specs.txt
          ${CMAKE_SOURCE_DIR}/tests/megatron_indexed.py ${CMAKE_SOURCE_DIR}/tests/ep_layer.ir ${_fuzz_seed_inputs}
          mcc-convert
  COMMENT "fuzz seed corpora (tests/fuzz/seeds.py)")
add_custom_target(mcc_fuzz_corpus ALL DEPENDS ${_corpus}/.stamp)

foreach(t ${MCC_FUZZ_TARGETS})
  add_test(NAME fuzz_${t} COMMAND ${CMAKE_SOURCE_DIR}/tests/fuzz/run.sh ${CMAKE_BINARY_DIR}/fuzz/${t}_fuzz
           ${_corpus}/${t} ${MCC_FUZZ_SECONDS} ${CMAKE_BINARY_DIR}/fuzz-runs/${t})
  set_tests_properties(fuzz_${t} PROPERTIES LABELS fuzz TIMEOUT 120)
endforeach()
