# harness.cmake — how the end-to-end tests are declared, included before the other tests/*.cmake.
#
# Two builds run the suite (scripts/test.sh, tests/README.md). This one, Debug with ASan + UBSan,
# runs every test. The end-to-end tests (label e2e: a parallel layout against one rank, a run
# against the PyTorch reference, full recompute against none, offload against the device's
# optimizer, checkpoints across layouts, kills during saves) start hundreds of train_ranks through
# the same code paths, so they take the mcc of MCC_FAST_BUILD, an unsanitized build of the same
# sources (Release, assertions on), where one is given: except those named in MCC_SANITIZED_E2E
# (label sanitized too), which run this build's mcc so that every axis's path (tp, sp, dp, ZeRO,
# pp and its schedules, cp's three kinds, ep, recompute, FP8, offload, checkpoints under a layout,
# dropout, MoE routing) still runs under the sanitizers at least once.
set(MCC_FAST_BUILD "" CACHE PATH "An unsanitized build directory (Release, assertions on) whose mcc runs the end-to-end numerics tests; empty: this build's mcc runs them")
if(MCC_FAST_BUILD)
  set(MCC_E2E_MCC ${MCC_FAST_BUILD}/mcc)
else()
  set(MCC_E2E_MCC $<TARGET_FILE:mcc>)
endif()
set(MCC_SANITIZED_E2E
    # tp + sp + dp + ZeRO; the tp collectives fused with their matmuls beside dp's overlapped buckets;
    # the interleaved halves with dropout; selective and full recompute under tp
    tp2_sp_dp2_zero_equals_single_rank_tiny-llama tp2_sp_batch_tpo_dp2_overlap_equals_single_rank_tiny-gpt2
    tp2_sp_batch_interleave_dropout_equals_single_rank_tiny-gpt2 tp2_sp_recompute_dropout_equals_single_rank_tiny-llama
    tp2_dp2_zero_full_block1_equals_single_rank_tiny-llama
    # pp: ZB-H1 with an uneven split, interleaved virtual stages, 1F1B with full recompute and dropout
    pp2_uneven_zb_equals_single_rank_tiny-gpt2 pp2_v2_equals_single_rank_tiny-llama
    pp2_1f1b_full_uniform1_dropout_equals_single_rank_tiny-llama
    # cp: the ring beside tp with dropout, Ulysses, all_gather with dropout
    cp2_p2p_tp2_dropout_equals_single_rank_tiny-gpt2 cp2_a2a_equals_single_rank_tiny-llama
    cp2_all_gather_dropout_equals_single_rank_tiny-llama
    # MoE: ep beside tp + sp and ZeRO, the shared-expert overlap, pp with expert bias and capacity
    tp2_sp_ep2_zero_equals_single_rank_tiny-moe ep2_edp2_shared_overlap_equals_single_rank_tiny-moe
    pp2_1f1b_bias_capacity_equals_single_rank_tiny-moe
    # FP8 delayed scaling under tp + sp; against PyTorch: each model, dropout, FP8, bf16 moments
    fp8_delayed_tp2_sp_equals_single_rank_tiny-llama numerics_vs_torch_tiny-gpt2 numerics_vs_torch_tiny-moe
    numerics_vs_torch_dropout_tiny-llama numerics_vs_torch_fp8_delayed_tiny-llama
    numerics_vs_torch_bf16_moments_tiny-gpt2
    # FP8 experts (per-expert scales and histories) over ep beside tp + sp
    fp8_delayed_tp2_sp_ep2_equals_single_rank_tiny-moe
    # full recompute bit for bit; offload on one rank; an ep x edp ZeRO checkpoint loaded elsewhere
    # (checkpoint.cmake's tp x dp ZeRO resumes and reshards, and the kills' loads, are this build's)
    recompute_bitwise_tiny-llama offload_equals_device_optimizer checkpoint_ep2_zero_to_single_and_dp2)

# mcc_e2e_test(NAME SCRIPT ARGS...): the test NAME running tests/SCRIPT MCC ARGS..., MCC the fast
# build's mcc unless NAME is in MCC_SANITIZED_E2E (label sanitized); label e2e.
function(mcc_e2e_test name script)
  set(mcc ${MCC_E2E_MCC})
  set(labels e2e)
  if(name IN_LIST MCC_SANITIZED_E2E)
    set(mcc $<TARGET_FILE:mcc>)
    list(APPEND labels sanitized)
  endif()
  add_test(NAME ${name} COMMAND ${CMAKE_SOURCE_DIR}/tests/${script} ${mcc} ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS "${labels}")
endfunction()

# mcc_layout_test(NAME MODEL RANKS [ITERS n] [TOL t] [FINAL_TOL t] FLAGS...): tests/parallel_e2e.sh
# of MODEL on RANKS CPU ranks with FLAGS (spec flags, a `--`, layout flags) against the single-rank
# program. The single rank's run is shared: one fixture test per (model, iterations, spec flags),
# single_rank_MODEL_HASH, runs it once into the build tree (tests/single_rank_ref.sh), and every
# layout of that reference reads it (PARALLEL_E2E_REF). ITERS, TOL and FINAL_TOL: parallel_e2e.sh's.
function(mcc_layout_test name model ranks)
  cmake_parse_arguments(PARSE_ARGV 3 arg "" "ITERS;TOL;FINAL_TOL" "")
  set(flags ${arg_UNPARSED_ARGUMENTS})
  if(NOT arg_ITERS)
    set(arg_ITERS 10)
  endif()
  set(spec "")
  list(FIND flags "--" sep)
  if(sep GREATER -1)
    list(SUBLIST flags 0 ${sep} spec)
  endif()
  string(MD5 key "${model};${arg_ITERS};${spec}")
  string(SUBSTRING ${key} 0 10 key)
  set(ref single_rank_${model}_${key})
  set(dir ${CMAKE_BINARY_DIR}/tests/single_rank/${model}_${key})
  if(NOT TEST ${ref})
    add_test(NAME ${ref} COMMAND ${CMAKE_SOURCE_DIR}/tests/single_rank_ref.sh ${MCC_E2E_MCC} ${model} ${dir}
             ${arg_ITERS} ${spec})
    set_tests_properties(${ref} PROPERTIES FIXTURES_SETUP ${ref} LABELS e2e)
  endif()
  mcc_e2e_test(${name} parallel_e2e.sh ${model} ${ranks} ${flags})
  set(env PARALLEL_E2E_REF=${dir} PARALLEL_E2E_ITERS=${arg_ITERS})
  if(arg_TOL)
    list(APPEND env PARALLEL_E2E_TOL=${arg_TOL})
  endif()
  if(arg_FINAL_TOL)
    list(APPEND env PARALLEL_E2E_FINAL_TOL=${arg_FINAL_TOL})
  endif()
  set_tests_properties(${name} PROPERTIES PROCESSORS ${ranks} FIXTURES_REQUIRED ${ref} ENVIRONMENT "${env}")
endfunction()

# mcc_test_environment(): what every test runs under, set once all are declared. One BLAS thread
# (ctest runs a test a core, and a multi-rank test's ranks fill the cores: OpenBLAS's second thread
# only spins beside them) and one OpenMP thread (PyTorch's reference); Open MPI's ob1 messaging
# (shared memory between the ranks of one machine: its start-up is a third of the default UCX's,
# 0.11 s against 0.32 s for 4 ranks). Tests that want more say so in their own environment.
function(mcc_test_environment)
  get_property(tests DIRECTORY ${CMAKE_SOURCE_DIR} PROPERTY TESTS)
  foreach(test ${tests})
    get_test_property(${test} ENVIRONMENT own)
    if(NOT own)
      set(own "")
    endif()
    set_tests_properties(${test} PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=1;OMPI_MCA_pml=ob1;${own}")
  endforeach()
endfunction()
