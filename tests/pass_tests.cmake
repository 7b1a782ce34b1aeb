# pass_tests.cmake — one ctest test per pass test in tests/passes/ (an input module, `; RUN:` lines
# that run one pass on it with `mcc opt IN.ir --pass NAME`, FileCheck lines on what the pass
# writes; tests/pass_test.sh runs them), mcc opt's refusals (tests/opt_errors.sh), and the
# verifier's on globals' roles and layout records (tests/layout_errors.sh).
execute_process(COMMAND ${LLVM_CONFIG} --bindir OUTPUT_VARIABLE _llvm_bindir OUTPUT_STRIP_TRAILING_WHITESPACE)
find_program(MCC_FILECHECK NAMES FileCheck FileCheck-14 FileCheck-19 HINTS ${_llvm_bindir} REQUIRED)
file(GLOB _pass_tests CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/passes/*.ir)
foreach(f ${_pass_tests})
  get_filename_component(_name ${f} NAME_WE)
  add_test(NAME pass_${_name} COMMAND ${CMAKE_SOURCE_DIR}/tests/pass_test.sh ${MCC_FILECHECK} $<TARGET_FILE:mcc> ${f})
endforeach()
add_test(NAME opt_errors COMMAND ${CMAKE_SOURCE_DIR}/tests/opt_errors.sh $<TARGET_FILE:mcc>)
add_test(NAME ir_layout_errors COMMAND ${CMAKE_SOURCE_DIR}/tests/layout_errors.sh $<TARGET_FILE:mcc>)
