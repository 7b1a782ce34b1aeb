# checkpoint.cmake — checkpoints (checkpoint/, runtime/checkpoint_io.c: train_rank --save/--load):
# the safetensors reader on crafted bad files (tests/safetensors_test.c); resume bit for bit
# (tests/checkpoint_resume.sh) on one rank (and a schedule in samples), TP=2 x DP=2 with the distributed optimizer, with
# dropout, with 4 micro-batches a step, FP8 delayed scaling's histories (one rank, TP=2 x DP=2 ZeRO), and TP=2 + SP x DP=2 ZeRO with dropout; a TP=2 x DP=2 ZeRO checkpoint loaded under other
# layouts (tests/checkpoint_layout.sh); SIGKILL during saves (tests/checkpoint_kill.sh); each bad
# checkpoint's own message (tests/checkpoint_errors.sh); --async-save's resume and SIGKILLs; the SIGTERM save, --finetune, --no-load-optim and
# --save-retain and --exit-duration-in-mins (tests/checkpoint_signal.sh); the resume matrix (longer
# and shorter runs, a schedule in samples, validation on and off, a blend, pp, cp, ep with ZeRO,
# SIGTERM and --exit-duration-in-mins stops, the cyclic sampler).
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
# DeepSeek-V3's multi-token depth (layers.2: eh_proj, its norms, an MoE layer with expert bias) saved
# and loaded as the model's layers are
add_test(NAME checkpoint_resume_mtp COMMAND ${_ckr} tiny-deepseek-v3 1 --mtp-num-layers 1 --mtp-loss-scaling-factor 0.3)
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
  # saved under one --pipeline-model-parallel-layout (a multi-token depth beside the head), loaded under
  # another, under interleaved stages and by one rank
  mcc_e2e_test(checkpoint_pp_layout_to_others_tiny-llama checkpoint_pp_layout.sh tiny-llama)
  set_tests_properties(checkpoint_pp_layout_to_others_tiny-llama PROPERTIES PROCESSORS 2)
  # every axis at once: sequence parallelism, ZeRO, dropout (tiny-llama: GQA, SwiGLU, RoPE)
  add_test(NAME checkpoint_resume_tp2_sp_dp2_zero_dropout COMMAND ${_ckr} tiny-llama 4 --tp 2 --sequence-parallel --dp 2
           --use-distributed-optimizer --hidden-dropout 0.1 --attention-dropout 0.1 --vocab-size 258)
  # four writer threads, the ranks agreeing at each step's end on when all are done
  mcc_e2e_test(checkpoint_resume_async_tp2_dp2_zero checkpoint_resume.sh tiny-gpt2 4 --tp 2 --dp 2 --use-distributed-optimizer)
  set_tests_properties(checkpoint_resume_async_tp2_dp2_zero PROPERTIES ENVIRONMENT "CHECKPOINT_RUN_FLAGS=--async-save")
  set_tests_properties(checkpoint_resume_tp2_dp2_zero checkpoint_layout_tp2_dp2_zero_to_others checkpoint_resume_async_tp2_dp2_zero
                       checkpoint_resume_tp2_sp_dp2_zero_dropout PROPERTIES PROCESSORS 2)
endif()
# The resume matrix (tests/checkpoint_resume.sh's cases; the fast build's mcc, 1-2 ranks, 10
# iterations of the tiny models): each resumed run's steps and validations equal the uninterrupted
# run's bit for bit. A finished run extended with a longer --train-iters under the issue-40 crash's
# conditions (a validation of 20 batches, many epochs of a small valid split), the valid split
# built for the checkpoint's validations and this run's: its validation at 10 reads the samples
# after those the first run's own last validation (at 5) read, where the uninterrupted run reads
# those, so it is run and not compared. Under the sanitizers.
add_test(NAME checkpoint_resume_longer_valid_past_built COMMAND ${_ckr} tiny-llama 1 --lr-decay-iters 10)
set_tests_properties(checkpoint_resume_longer_valid_past_built PROPERTIES ENVIRONMENT
  "CHECKPOINT_RESUME_ITERS=5 5 10;CHECKPOINT_DATA=large;CHECKPOINT_EVAL=--eval-iters 20;CHECKPOINT_VALID_DIFFERS=the first run validated at its own last iteration (5), the uninterrupted run does not")
# matrix rows: NAME:MODEL:RANKS:compile flags:environment (`,` between variables, `+` for a space)
set(_matrix
    # longer and shorter --train-iters (the decay fixed by --lr-decay-iters, one epoch of train data
    # for both lengths); validating every 5, the first run's last validation is the uninterrupted one's
    "longer_iters:tiny-gpt2:1:--lr-decay-iters 10:CHECKPOINT_RESUME_ITERS=5+5+10,CHECKPOINT_DATA=large,CHECKPOINT_EVAL=--eval-interval+5+--eval-iters+2"
    "shorter_iters:tiny-gpt2:1:--lr-decay-iters 10:CHECKPOINT_RESUME_ITERS=10+5+8,CHECKPOINT_DATA=large"
    # a schedule in samples, extended
    "longer_train_samples:tiny-llama:1:--train-samples 80 --lr-warmup-samples 16 --lr-decay-samples 80:CHECKPOINT_RESUME_ITERS=5+5+10,CHECKPOINT_DATA=large,CHECKPOINT_EVAL=--eval-interval+5+--eval-iters+1"
    "eval_off:tiny-gpt2:1::CHECKPOINT_EVAL=--eval-iters+0"
    # a blend of two datasets, validating at 4 (before the stop), 8 and 10
    "blend_eval_interval4:tiny-llama:1::CHECKPOINT_DATA=blend,CHECKPOINT_EVAL=--eval-interval+4+--eval-iters+2"
    # a layout of each family (tp x dp ZeRO: checkpoint_resume_tp2_dp2_zero above)
    "pp2:tiny-llama:2:--pp 2:"
    "cp2:tiny-llama:2:--cp 2:"
    "ep2_zero:tiny-moe:2:--dp 2 --expert-model-parallel-size 2 --use-distributed-optimizer:"
    # SIGTERM to both ranks mid-run, validating every iteration: the stop skips the validation due
    # at its iteration and passes over its samples, so the resumed run's validations are the
    # uninterrupted run's
    "sigterm_dp2_zero:tiny-gpt2:2:--dp 2 --use-distributed-optimizer:CHECKPOINT_RESUME_STOP=signal,CHECKPOINT_RESUME_ITERS=60+0+60,CHECKPOINT_EVAL=--eval-interval+1+--eval-iters+1"
    "exit_duration_tp2:tiny-llama:2:--tp 2:CHECKPOINT_RESUME_STOP=duration"
    # Megatron's cyclic sampler (baked at compile time), the valid split too. With data sharding
    # (the default) a position's sample is the same whatever the loader's start; without it
    # (--no-data-sharding) where a split is not a whole number of rounds (B x dp) a rank's pass can
    # outrun the epoch and the next pass starts where the loader started, as Megatron's resumed
    # loader does: batches_are_cyclic_no_sharding_dp2_accum4_resumed checks that order instead
    "cyclic_dp2:tiny-gpt2:2:--dp 2 --dataloader-type cyclic:")
foreach(row ${_matrix})
  string(REPLACE ":" ";" parts "${row}")
  list(GET parts 0 name)
  list(GET parts 1 model)
  list(GET parts 2 ranks)
  list(GET parts 3 flags)
  list(GET parts 4 env)
  separate_arguments(flags)
  string(REPLACE "," ";" env "${env}")
  string(REPLACE "+" " " env "${env}")
  if(ranks GREATER 1 AND NOT MPI_C_FOUND)
    continue()
  endif()
  mcc_e2e_test(checkpoint_resume_${name} checkpoint_resume.sh ${model} ${ranks} ${flags})
  set_tests_properties(checkpoint_resume_${name} PROPERTIES PROCESSORS ${ranks})
  if(env)
    set_tests_properties(checkpoint_resume_${name} PROPERTIES ENVIRONMENT "${env}")
  endif()
endforeach()
add_test(NAME checkpoint_signal_finetune_retain COMMAND ${CMAKE_SOURCE_DIR}/tests/checkpoint_signal.sh $<TARGET_FILE:mcc>)
