# mcc_flags.cmake — mcc's command line as a Megatron user meets it (tests/mcc_flags.sh): a pasted
# LLaMA-3 recipe compiles, --flag=value, --help, --version, and bad flags exit 2 naming the flag.
add_test(NAME mcc_flags COMMAND ${CMAKE_SOURCE_DIR}/tests/mcc_flags.sh $<TARGET_FILE:mcc>)
# Megatron-LM's LLaMA-3 8B, Mixtral, GPT-3 175B and DeepSeek-V3 scripts pasted whole as @FILE
# (tests/megatron_scripts.sh): no unknown flag, every gap named in one run, the world from torchrun's flags
# (the fast mcc: four large plans and a run; mcc_flags and spec keep the flag reading sanitized)
mcc_e2e_test(megatron_scripts megatron_scripts.sh)
set_tests_properties(megatron_scripts PROPERTIES PROCESSORS 2)
# mcc tune (tests/tune.sh): the layouts it lists compile to plans that fit, fastest first by the step-time model
mcc_e2e_test(tune tune.sh)
# the step-time model against the H100 steps it was fitted to (tests/step_cost.sh)
mcc_e2e_test(step_cost step_cost.sh)
# mcc tune on the seed's recipes, DeepSeek-V3 on 2,048 among them (tests/tune_seed.sh): each first layout
# compiles to a fitting plan
mcc_e2e_test(tune_seed tune_seed.sh)
