# Context parallelism (passes/context_parallel.c) on CPU ranks: the sequence split over cp in
# Megatron's balanced chunks, keys and values all-gathered, computes what one rank computes (10
# steps: losses 1e-5, step-1 logits and gradients, final weights; tests/parallel_e2e.sh), on
# LLaMA (RoPE, grouped-query attention: only the kv heads gathered) and GPT-2 (learned
# positions); CP=2 x DP=2 with the distributed optimizer (gradients reduce-scattered over dp x cp
# at once, the axis dp_cp: the shards span dp x cp), with --overlap-grad-reduce (the buckets over
# dp x cp inside the backward), and CP=2 alone with the distributed optimizer (the shards over cp);
# CP=2 x PP=2 (the pipeline's stages cut from the rewritten step, the
# schedule auto picks); CP=2 x TP=2 without sequence parallelism (heads split over tp, the tp
# shard pass passing the cp collectives through) and with it; a checkpoint saved by CP=2 x DP=2 with
# the distributed optimizer resumed by one rank, DP=4 and CP=4 with it, and itself.
# Ring attention (--cp-comm-type p2p, Megatron's default): cp pieces over the keys passed around
# the cp ring, merged by their log-sum-exp, their gradients riding the ring home; CP=2 and CP=4
# on both models, and CP=2 beside TP=2, DP=2 with the distributed optimizer, and PP=2. Ulysses
# (--cp-comm-type a2a): q, k, v exchanged to every token of the rank's heads, attention as one
# rank's, the output exchanged back; the same layouts (tiny LLaMA's 2 kv heads: 4 at CP=4).
# Dropout (masks drawn by whole-sequence positions), hidden and attention dropout together: under
# the ring (its pieces' masks at their keys' positions, merged exactly; CP=2 on LLaMA's GQA, CP=4,
# and beside TP=2, head_offset tp_rank H/tp), all_gather, and Ulysses (each rank's heads from
# head_offset cp_rank H/cp; beside TP=2, tp_rank H/tp + cp_rank H/(tp cp), a rank term of two axes).
# The cuda target refuses attention dropout under p2p and all_gather (its kernels draw the mask by
# the rank's own positions): cp_attention_dropout_cuda_refused. Full recompute: the replayed
# forward rewritten as the forward (its ring pieces, its dropout masks). FP8, its amaxes
# max-all-reduced over cp. MoE (tiny-moe, dropless; the router metrics compared too): the
# load-balancing loss over the router's logits and ids gathered over cp, the counts per expert
# summed over cp: aux_loss under the ring, and seq_aux_loss with expert bias (its step counts summed
# over dp x cp) at CP=2 x DP=2. Expert parallelism carved from dp x cp (Megatron's): EP=2 x CP=2
# x DP=2 (edp 2: the expert gradients summed over edp, not cp; the all-to-alls' room the rank's
# rows').
# mcc_cp_e2e(NAME MODEL NP FLAGS [OPTIONS...]): mcc_layout_test of MODEL on NP ranks with FLAGS (one
# string) and mcc_layout_test's OPTIONS (ITERS, TOL)
function(mcc_cp_e2e name model np flags)
  separate_arguments(_flags UNIX_COMMAND "${flags}")
  mcc_layout_test(${name} ${model} ${np} ${ARGN} ${_flags})
endfunction()
if(MPI_C_FOUND)
  set(_drop "--hidden-dropout 0.1 --attention-dropout 0.1 --")
  mcc_cp_e2e(cp2_p2p_dropout_equals_single_rank_tiny-llama tiny-llama 2 "${_drop} --cp 2 --cp-comm-type p2p")
  mcc_cp_e2e(cp4_p2p_dropout_equals_single_rank_tiny-gpt2 tiny-gpt2 4 "${_drop} --cp 4 --cp-comm-type p2p")
  mcc_cp_e2e(cp2_all_gather_dropout_equals_single_rank_tiny-llama tiny-llama 2 "${_drop} --cp 2 --cp-comm-type all_gather")
  mcc_cp_e2e(cp4_all_gather_dropout_equals_single_rank_tiny-llama tiny-llama 4 "${_drop} --cp 4 --cp-comm-type all_gather")
  mcc_cp_e2e(cp2_p2p_tp2_dropout_equals_single_rank_tiny-gpt2 tiny-gpt2 4 "${_drop} --cp 2 --cp-comm-type p2p --tp 2")
  mcc_cp_e2e(cp2_a2a_dropout_equals_single_rank_tiny-gpt2 tiny-gpt2 2 "${_drop} --cp 2 --cp-comm-type a2a")
  # Ulysses with dropout where query heads share key/value heads (GQA): tiny LLaMA's 4 heads over 2
  # kv groups at cp 2, and 8 heads over 4 kv groups at cp 4, each rank 2 heads and their kv head
  mcc_cp_e2e(cp2_a2a_dropout_equals_single_rank_tiny-llama tiny-llama 2 "${_drop} --cp 2 --cp-comm-type a2a")
  mcc_cp_e2e(cp4_a2a_gqa_dropout_equals_single_rank_tiny-llama tiny-llama 4
             "--num-attention-heads 8 --num-query-groups 4 ${_drop} --cp 4 --cp-comm-type a2a")
  mcc_cp_e2e(cp2_a2a_tp2_dropout_equals_single_rank_tiny-gpt2 tiny-gpt2 4 "${_drop} --cp 2 --cp-comm-type a2a --tp 2")
  # MoE beside TP with sequence parallelism (Megatron's requirement for TP + EP) and EP=2 from cp
  mcc_cp_e2e(cp2_tp2_sp_ep2_equals_single_rank_tiny-moe tiny-moe 4 "--cp 2 --cp-comm-type p2p --tp 2 --sequence-parallel --expert-model-parallel-size 2")
  # the dense gradients summed over dp x cp (dp_cp) in one collective: bucketed inside the backward
  # (--overlap-grad-reduce), and ZeRO's shards over cp alone (dp 1: Megatron's distributed optimizer
  # shards over the dp x cp group)
  mcc_cp_e2e(cp2_p2p_dp2_overlap_equals_single_rank_tiny-gpt2 tiny-gpt2 4 "--micro-batch-size 8 -- --cp 2 --cp-comm-type p2p --dp 2 --overlap-grad-reduce --ddp-bucket-size 20000")
  mcc_cp_e2e(cp2_p2p_zero_equals_single_rank_tiny-llama tiny-llama 2 "--cp 2 --cp-comm-type p2p --use-distributed-optimizer")
  mcc_cp_e2e(cp2_p2p_full_recompute_dropout_equals_single_rank_tiny-llama tiny-llama 2 "--hidden-dropout 0.1 -- --cp 2 --cp-comm-type p2p --recompute-granularity full --recompute-method uniform --recompute-num-layers 1")
  foreach(case "cp2;2;tiny-llama;2;" "cp2;2;tiny-gpt2;2;" "cp4;4;tiny-gpt2;4;" "cp4;4;tiny-llama;4;--num-query-groups 4 --"
               "cp2_tp2;2;tiny-gpt2;4;--tp 2" "cp2_dp2_zero;2;tiny-llama;4;--dp 2 --use-distributed-optimizer"
               "cp2_pp2;2;tiny-llama;4;--num-layers 4 -- --pp 2")
    list(GET case 0 _name)
    list(GET case 1 _cp)
    list(GET case 2 _model)
    list(GET case 3 _np)
    list(GET case 4 _extra)
    mcc_cp_e2e(${_name}_a2a_equals_single_rank_${_model} ${_model} ${_np} "${_extra} --cp ${_cp} --cp-comm-type a2a")
  endforeach()
  foreach(cp 2 4)
    foreach(model tiny-llama tiny-gpt2)
      mcc_cp_e2e(cp${cp}_p2p_equals_single_rank_${model} ${model} ${cp} "--context-parallel-size ${cp} --cp-comm-type p2p")
    endforeach()
  endforeach()
  # FP8: each cp rank's amax is of its tokens, max-all-reduced over cp so the ranks quantize with
  # the whole sequence's scale (without it the logits differ by 2e-2, the gradients by 8e-2):
  # tensorwise, and delayed beside TP=2 (the tp shard pass passing the cp all-reduce through). As
  # FP8 under TP (tests/fp8.cmake): 2 or 3 steps, tensors to 3e-4, for the ring's other order of
  # sums leaves a value an ulp off and one within an ulp of an FP8 tie rounds the other way.
  mcc_cp_e2e(cp2_p2p_fp8_equals_single_rank_tiny-gpt2 tiny-gpt2 2
             "--fp8-format hybrid --fp8-recipe tensorwise -- --cp 2 --cp-comm-type p2p" ITERS 2 TOL 3e-4)
  mcc_cp_e2e(cp2_p2p_tp2_fp8_delayed_equals_single_rank_tiny-llama tiny-llama 4
             "--fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 4 --fp8-amax-compute-algo max -- --cp 2 --cp-comm-type p2p --tp 2"
             ITERS 3 TOL 3e-4)
  mcc_cp_e2e(cp2_p2p_equals_single_rank_tiny-moe tiny-moe 2 "--cp 2 --cp-comm-type p2p")
  mcc_cp_e2e(cp2_dp2_seq_aux_expert_bias_equals_single_rank_tiny-moe tiny-moe 4
             "--moe-router-load-balancing-type seq_aux_loss --moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-router-bias-update-rate 0.01 -- --cp 2 --cp-comm-type p2p --dp 2")
  mcc_cp_e2e(cp2_dp2_ep2_equals_single_rank_tiny-moe tiny-moe 4 "--cp 2 --cp-comm-type p2p --dp 2 --expert-model-parallel-size 2")
  # expert bias's step counts summed over dp x cp again, under all_gather beside ep 2 (a second test of
  # the sum, the seq_aux_loss one above the first)
  mcc_cp_e2e(cp2_all_gather_dp2_ep2_expert_bias_equals_single_rank_tiny-moe tiny-moe 4
             "--moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-router-bias-update-rate 0.01 -- --cp 2 --cp-comm-type all_gather --dp 2 --expert-model-parallel-size 2")
  # token dropping: each rank ranks the micro-batch's pairs gathered over cp, at their tokens' places
  # (13-20% of the pairs dropped at factor 1.0), by weight and by position (padded to capacity), and
  # beside ep 2 (the dispatch's room sized by the capacity)
  mcc_cp_e2e(cp2_p2p_capacity_probs_equals_single_rank_tiny-moe tiny-moe 2 "--moe-expert-capacity-factor 1.0 -- --cp 2 --cp-comm-type p2p")
  mcc_cp_e2e(cp2_all_gather_capacity_position_pad_equals_single_rank_tiny-moe tiny-moe 2
             "--moe-expert-capacity-factor 1.0 --moe-token-drop-policy position --moe-pad-expert-input-to-capacity -- --cp 2 --cp-comm-type all_gather")
  mcc_cp_e2e(cp2_dp2_ep2_capacity_equals_single_rank_tiny-moe tiny-moe 4
             "--moe-expert-capacity-factor 1.0 -- --cp 2 --cp-comm-type p2p --dp 2 --expert-model-parallel-size 2")
  # and at cp 4 (each rank two chunks of 4 tokens: a place in the gathered pairs that cp 2 gets right
  # by its symmetry can be wrong here)
  mcc_cp_e2e(cp4_p2p_capacity_probs_equals_single_rank_tiny-moe tiny-moe 4 "--moe-expert-capacity-factor 1.0 -- --cp 4 --cp-comm-type p2p")
  set(_p2p "--context-parallel-size 2 --cp-comm-type p2p")
  mcc_cp_e2e(cp2_p2p_tp2_equals_single_rank_tiny-gpt2 tiny-gpt2 4 "${_p2p} --tp 2")
  mcc_cp_e2e(cp2_p2p_dp2_zero_equals_single_rank_tiny-llama tiny-llama 4 "${_p2p} --dp 2 --use-distributed-optimizer")
  mcc_cp_e2e(cp2_p2p_pp2_equals_single_rank_tiny-llama tiny-llama 4 "--num-layers 4 -- ${_p2p} --pp 2")
  set(_cp "--context-parallel-size 2 --cp-comm-type all_gather")
  foreach(model tiny-llama tiny-gpt2)
    mcc_cp_e2e(cp2_all_gather_equals_single_rank_${model} ${model} 2 "${_cp}")
  endforeach()
  mcc_cp_e2e(cp2_dp2_zero_equals_single_rank_tiny-llama tiny-llama 4 "${_cp} --dp 2 --use-distributed-optimizer")
  mcc_cp_e2e(cp2_pp2_equals_single_rank_tiny-llama tiny-llama 4 "--num-layers 4 -- ${_cp} --pp 2")
  mcc_cp_e2e(cp2_tp2_equals_single_rank_tiny-gpt2 tiny-gpt2 4 "${_cp} --tp 2")
  # CP=2 x TP=2 with sequence parallelism: a cp rank's tokens split over tp (the sequence over cp and
  # tp at once), GPT-2's position table and hidden dropout at the slices' whole-sequence positions
  # (a slice is one balanced chunk here); by sequence (ring) and by batch rows (Ulysses)
  foreach(case "p2p;sequence" "a2a;batch")
    list(GET case 0 _comm)
    list(GET case 1 _split)
    mcc_cp_e2e(cp2_${_comm}_tp2_sp_${_split}_dropout_equals_single_rank_tiny-gpt2 tiny-gpt2 4
               "--hidden-dropout 0.1 -- --cp 2 --cp-comm-type ${_comm} --tp 2 --sequence-parallel --sequence-parallel-split ${_split}")
  endforeach()
  # the micro-batch's two halves of --tp-comm-interleave, each its samples' chunks of the sequence;
  # token dropping beside TP with sequence parallelism, the capacity's rows cut back to the cp
  # rank's by a local slice that the tp shard pass passes through (both crashed or were refused as
  # unsupported before tests/compile_sweep.py found them)
  mcc_cp_e2e(cp2_all_gather_tp2_sp_interleave_dropout_equals_single_rank_tiny-gpt2 tiny-gpt2 4
             "${_drop} --cp 2 --cp-comm-type all_gather --tp 2 --sequence-parallel --sequence-parallel-split batch --tp-comm-interleave")
  mcc_cp_e2e(cp2_p2p_tp2_sp_capacity_equals_single_rank_tiny-moe tiny-moe 4
             "--moe-expert-capacity-factor 1.0 -- --cp 2 --cp-comm-type p2p --tp 2 --sequence-parallel")
  mcc_e2e_test(checkpoint_cp2_dp2_zero_to_others checkpoint_cp.sh tiny-llama)
  set_tests_properties(checkpoint_cp2_dp2_zero_to_others PROPERTIES PROCESSORS 4)
endif()
add_test(NAME cp_flops_split COMMAND ${CMAKE_SOURCE_DIR}/tests/cp_flops.sh $<TARGET_FILE:mcc>)
add_test(NAME cp_attention_dropout_cuda_refused COMMAND $<TARGET_FILE:mcc> compile ${CMAKE_SOURCE_DIR}/models/tiny-llama.json
         --target cuda --attention-dropout 0.1 --cp 2 --cp-comm-type p2p -o ${CMAKE_CURRENT_BINARY_DIR}/cp_attention_dropout_cuda)
set_tests_properties(cp_attention_dropout_cuda_refused PROPERTIES
                     PASS_REGULAR_EXPRESSION "--cp-comm-type p2p on the cuda target: the CUDA attention kernels draw the dropout mask by the rank's own positions")
