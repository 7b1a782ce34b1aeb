# mcc_flags.cmake — mcc's command line as a Megatron user meets it (tests/mcc_flags.sh): a pasted
# LLaMA-3 recipe compiles, --flag=value, --help, --version, and bad flags exit 2 naming the flag.
add_test(NAME mcc_flags COMMAND ${CMAKE_SOURCE_DIR}/tests/mcc_flags.sh $<TARGET_FILE:mcc>)
