# checkpoint.cmake — checkpoints (checkpoint/, runtime/checkpoint_io.c: train_rank --save/--load):
# the safetensors reader on crafted bad files (tests/safetensors_test.c); resume bit for bit
# (tests/checkpoint_resume.sh) on one rank (and a schedule in samples), TP=2 x DP=2 with the distributed optimizer, with
# dropout, with 4 micro-batches a step, FP8 delayed scaling's histories (one rank, TP=2 x DP=2 ZeRO), and TP=2 + SP x DP=2 ZeRO with dropout; a TP=2 x DP=2 ZeRO checkpoint loaded under other
# layouts (tests/checkpoint_layout.sh); SIGKILL during saves (tests/checkpoint_kill.sh); each bad
# checkpoint's own message (tests/checkpoint_errors.sh); --async-save's resume and SIGKILLs; the SIGTERM save, --finetune, --no-load-optim and
# --save-retain and --exit-duration-in-mins (tests/checkpoint_signal.sh).
add_executable(safetensors_test ${CMAKE_SOURCE_DIR}/tests/safetensors_test.c)
target_link_libraries(safetensors_test PRIVATE mcc_ckpt)
set(_st_out ${CMAKE_BINARY_DIR}/tests/safetensors)
add_test(NAME checkpoint_safetensors
         COMMAND sh -c "rm -rf '${_st_out}' && mkdir -p '${_st_out}' && exec '$<TARGET_FILE:safetensors_test>' '${_st_out}'")

set(_ckr ${CMAKE_SOURCE_DIR}/tests/checkpoint_resume.sh $<TARGET_FILE:mcc>)
add_test(NAME checkpoint_resume_single_rank COMMAND ${_ckr} tiny-gpt2 1)
add_test(NAME checkpoint_resume_dropout COMMAND ${_ckr} tiny-gpt2 1 --hidden-dropout 0.1 --attention-dropout 0.1)
add_test(NAME checkpoint_resume_accum4 COMMAND ${_ckr} tiny-llama 1 --micro-batch-size 2 --global-batch-size 8)
# a schedule counted in samples (12 iterations of 8), warming up from lr_warmup_init: the resumed
# run's lr at 6-10 continues from the steps the checkpoint applied
add_test(NAME checkpoint_resume_sample_schedule COMMAND ${_ckr} tiny-gpt2 1 --train-samples 96 --lr-warmup-samples 20
         --lr-decay-samples 64 --lr-warmup-init 1e-4)
# an MoE model (its [E, out, in] experts and router saved as any parameter), dropping tokens
add_test(NAME checkpoint_resume_moe COMMAND ${_ckr} tiny-moe 1 --moe-expert-capacity-factor 0.8)
# aux-loss-free balancing: each layer's expert bias (and its zeroed step counts) saved and loaded
add_test(NAME checkpoint_resume_moe_expert_bias COMMAND ${_ckr} tiny-moe 1 --moe-router-score-function sigmoid
         --moe-router-enable-expert-bias --moe-router-bias-update-rate 0.01)
# saved without recompute, resumed with full recompute (a checkpoint holds no recompute state; the
# replay computes the forward's values, bit for bit on the CPU), with dropout: the replay's masks
add_test(NAME checkpoint_resume_full_recompute COMMAND ${_ckr} tiny-llama 1 --hidden-dropout 0.1 --attention-dropout 0.1)
set_tests_properties(checkpoint_resume_full_recompute PROPERTIES ENVIRONMENT
                     "CHECKPOINT_RESUME_FLAGS=--recompute-granularity full --recompute-method uniform --recompute-num-layers 1")
# FP8 (tensorwise: no scaling state) with dropout and 4 micro-batches a step, resumed with full
# recompute: the replayed quantizations are the forward's, so steps 6-10 equal the run's bit for bit
add_test(NAME checkpoint_resume_fp8_full_recompute COMMAND ${_ckr} tiny-llama 1 --fp8-format hybrid --fp8-recipe tensorwise
         --hidden-dropout 0.1 --attention-dropout 0.1 --micro-batch-size 2 --global-batch-size 8)
set_tests_properties(checkpoint_resume_fp8_full_recompute PROPERTIES ENVIRONMENT
                     "CHECKPOINT_RESUME_FLAGS=--recompute-granularity full --recompute-method uniform --recompute-num-layers 1")
# FP8 delayed scaling: the amax histories (4 steps, their max) are saved and loaded, so steps 6-10
# take the scales the uninterrupted run takes (without them the resumed step 6 quantizes at scale 1),
# resumed with full recompute: the replayed forward folds the amaxes it folded (a max) and reads
# the history as the step began
add_test(NAME checkpoint_resume_fp8_delayed COMMAND ${_ckr} tiny-llama 1 --fp8-format hybrid --fp8-recipe delayed
         --fp8-amax-history-len 4 --fp8-amax-compute-algo max --micro-batch-size 2 --global-batch-size 8)
set_tests_properties(checkpoint_resume_fp8_delayed PROPERTIES ENVIRONMENT
                     "CHECKPOINT_RESUME_FLAGS=--recompute-granularity full --recompute-method uniform --recompute-num-layers 1")
add_test(NAME checkpoint_errors COMMAND ${CMAKE_SOURCE_DIR}/tests/checkpoint_errors.sh $<TARGET_FILE:mcc>)
add_test(NAME checkpoint_kill COMMAND ${CMAKE_SOURCE_DIR}/tests/checkpoint_kill.sh $<TARGET_FILE:mcc>)
# --async-save forced on for CPU ranks: the write on a thread, the commit at a later step
add_test(NAME checkpoint_resume_async COMMAND ${_ckr} tiny-gpt2 1)
set_tests_properties(checkpoint_resume_async PROPERTIES ENVIRONMENT "CHECKPOINT_RUN_FLAGS=--async-save")
# (runs resume further between kills when saves do not block: checkpoint_kill.sh's 3000 iterations
# leave room for 50 kills either way); checkpoint_kill's loads after kills run under the sanitizers
mcc_e2e_test(checkpoint_kill_async checkpoint_kill.sh 50 --async-save)
if(MPI_C_FOUND)
  add_test(NAME checkpoint_resume_tp2_dp2_zero COMMAND ${_ckr} tiny-gpt2 4 --tp 2 --dp 2 --use-distributed-optimizer)
  # and under TP=2 x DP=2 ZeRO: each history written once (a replica), read by every rank
  mcc_e2e_test(checkpoint_resume_fp8_delayed_tp2_dp2_zero checkpoint_resume.sh tiny-llama 4 --tp 2 --dp 2
           --use-distributed-optimizer --fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 4)
  add_test(NAME checkpoint_layout_tp2_dp2_zero_to_others
           COMMAND ${CMAKE_SOURCE_DIR}/tests/checkpoint_layout.sh $<TARGET_FILE:mcc> tiny-gpt2)
  # pipeline parallelism: saved per stage at PP=2, resumed bit for bit, loaded at PP=4, PP=1 and
  # TP=2 x PP=2 (GPT-2: its tied embedding saved once)
  foreach(model tiny-gpt2 tiny-llama)
    mcc_e2e_test(checkpoint_pp2_to_others_${model} checkpoint_pp.sh ${model})
    set_tests_properties(checkpoint_pp2_to_others_${model} PROPERTIES PROCESSORS 4)
  endforeach()
  # every axis at once: sequence parallelism, ZeRO, dropout (tiny-llama: GQA, SwiGLU, RoPE)
  add_test(NAME checkpoint_resume_tp2_sp_dp2_zero_dropout COMMAND ${_ckr} tiny-llama 4 --tp 2 --sequence-parallel --dp 2
           --use-distributed-optimizer --hidden-dropout 0.1 --attention-dropout 0.1 --vocab-size 258)
  # four writer threads, the ranks agreeing at each step's end on when all are done
  mcc_e2e_test(checkpoint_resume_async_tp2_dp2_zero checkpoint_resume.sh tiny-gpt2 4 --tp 2 --dp 2 --use-distributed-optimizer)
  set_tests_properties(checkpoint_resume_async_tp2_dp2_zero PROPERTIES ENVIRONMENT "CHECKPOINT_RUN_FLAGS=--async-save")
  set_tests_properties(checkpoint_resume_tp2_dp2_zero checkpoint_layout_tp2_dp2_zero_to_others checkpoint_resume_async_tp2_dp2_zero
                       checkpoint_resume_tp2_sp_dp2_zero_dropout PROPERTIES PROCESSORS 2)
endif()
add_test(NAME checkpoint_signal_finetune_retain COMMAND ${CMAKE_SOURCE_DIR}/tests/checkpoint_signal.sh $<TARGET_FILE:mcc>)
