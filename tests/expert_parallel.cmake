# expert_parallel.cmake — expert parallelism (passes/expert_parallel.c) on CPU ranks against the
# single rank over 10 steps (tests/parallel_e2e.sh, 1e-5): tiny-moe's 4 experts over ep 2 beside
# dp 2 (edp 1: no expert gradient reduction), over ep 2 beside dp 4 (edp 2: the expert gradients
# summed over the ranks holding the same experts), over ep 4 (one expert a rank) and with a
# capacity factor (only the kept pairs sent, into a dispatch buffer sized by the capacity: 256 rows
# where the worst case is 512), with expert bias (every rank routes its tokens over all the experts,
# the counts summed over dp); ep 2 beside dp 4 with the distributed optimizer (the experts' ZeRO
# blocks over edp, the dense ones' over dp: blocks of the experts over dp sum other ranks' experts)
# and with --overlap-grad-reduce (the experts' buckets over edp inside the backward), also with
# --moe-shared-expert-overlap (the all-to-alls with the shared expert's work and the router's gradients
# between them and their first reader: comm_overlap.c's moves keep what the program computes; also at
# tp 2 with SP, ZeRO and a capacity factor, and at interleaved pp 2 x ep 2 with dropout); under tp 2 with
# sequence parallelism (the tokens gathered before the router, every expert's features split over
# tp: shard.c's MoE rules), alone and beside ep 2 (the experts split over ep and tp; also with the
# distributed optimizer, the experts' shards over edp of each tp rank's features, and at edp 2: blocks
# three levels deep, tp, ep and edp, each initialised at its whole-tensor indices); under pipeline
# parallelism (the MoE layers on the stages like dense ones, each stage outputting its own layers'
# router losses and counts, combined over the stages): pp 2 with 1F1B, expert bias and a capacity
# factor (layers 0-1 and 2: both stages hold MoE layers), and interleaved pp 2 x ep 2 with every
# other layer MoE (virtual stages 0 and 2 on rank 0 hold the MoE layers, rank 1 only dense ones); and an
# EP=2 checkpoint loaded on one rank and at DP=2 without EP (tests/checkpoint_ep.sh), also one saved
# with the distributed optimizer at ep 2 x edp 2 (its experts' moments in edp blocks) and one saved
# at pp 2 x ep 2 (each stage's ranks their own layers' experts). Group-limited routing as DeepSeek-V3's
# (8 experts in 4 groups, the best 2 kept, top 2 of sigmoid + expert bias, weights scaled by 2.5) over
# ep 2 (each rank 2 of the groups) and under tp 2 with SP (every tp rank routing the gathered tokens).
# The router in fp32 (--moe-router-dtype fp32: its GEMM on converts of the input and the weight) over ep 2
# and under tp 2 with SP. --moe-router-force-load-balancing's random logits (drawn per token, as
# dropout's masks) over ep 2, tp 2 with SP, cp 2 and interleaved pp 2 x ep 2
# (tests/force_load_balancing.sh: that they replace the logits). In every ep layout the CPU leaves the receive buffers' room past the rows
# received NaN (the dispatch's, the run sorts', the grouped GEMMs' and the row-bounded elementwise
# ops' results: passes/row_bounds.c), so a reader of it turns the comparison NaN.
set(MCC_EP_GROUP_ROUTING "--num-experts 8 --moe-router-num-groups 4 --moe-router-group-topk 2 --moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-router-bias-update-rate 0.01 --moe-router-topk-scaling-factor 2.5")
if(MPI_C_FOUND)
  foreach(layout "ep2:2:--dp 2 --expert-model-parallel-size 2" "ep2_edp2:4:--dp 4 --expert-model-parallel-size 2"
                 "ep4:4:--dp 4 --expert-model-parallel-size 4"
                 "ep2_edp2_zero:4:--dp 4 --expert-model-parallel-size 2 --use-distributed-optimizer"
                 "ep2_edp2_overlap:4:--dp 4 --expert-model-parallel-size 2 --overlap-grad-reduce"
                 "ep2_edp2_shared_overlap:4:--moe-shared-expert-overlap -- --dp 4 --expert-model-parallel-size 2 --overlap-grad-reduce"
                 "pp2_v2_ep2_shared_overlap_dropout:4:--moe-shared-expert-overlap --hidden-dropout 0.1 --num-layers 4 --moe-layer-freq 2 -- --pp 2 --num-virtual-stages-per-pipeline-rank 2 --dp 2 --expert-model-parallel-size 2"
                 "tp2_sp_ep2_zero_shared_overlap_capacity:4:--moe-shared-expert-overlap --moe-expert-capacity-factor 1.0 -- --tp 2 --sequence-parallel --dp 2 --expert-model-parallel-size 2 --use-distributed-optimizer"
                 "ep2_capacity:2:--moe-expert-capacity-factor 1.0 -- --dp 2 --expert-model-parallel-size 2"
                 "ep2_expert_bias:2:--moe-router-score-function sigmoid --moe-router-enable-expert-bias -- --dp 2 --expert-model-parallel-size 2"
                 "pp2_1f1b_bias_capacity:2:--moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-expert-capacity-factor 1.0 -- --pp 2 --decoder-first-pipeline-num-layers 2 --pipeline-schedule 1f1b"
                 "pp2_v2_ep2:4:--num-layers 4 --moe-layer-freq 2 -- --pp 2 --num-virtual-stages-per-pipeline-rank 2 --dp 2 --expert-model-parallel-size 2"
                 "tp2_sp:2:--tp 2 --sequence-parallel"
                 "ep2_group_routing:2:${MCC_EP_GROUP_ROUTING} -- --dp 2 --expert-model-parallel-size 2"
                 "tp2_sp_group_routing:2:${MCC_EP_GROUP_ROUTING} -- --tp 2 --sequence-parallel"
                 "ep2_router_fp32:2:--moe-router-dtype fp32 -- --dp 2 --expert-model-parallel-size 2"
                 "tp2_sp_router_fp32:2:--moe-router-dtype fp32 -- --tp 2 --sequence-parallel"
                 "tp2_sp_ep2:4:--tp 2 --sequence-parallel --dp 2 --expert-model-parallel-size 2"
                 "tp2_sp_ep2_zero:4:--tp 2 --sequence-parallel --dp 2 --expert-model-parallel-size 2 --use-distributed-optimizer"
                 "tp2_sp_ep2_edp2_zero:8:--tp 2 --sequence-parallel --dp 4 --expert-model-parallel-size 2 --use-distributed-optimizer"
                 "ep2_force_balance:2:--moe-router-force-load-balancing -- --dp 2 --expert-model-parallel-size 2"
                 "tp2_sp_force_balance:2:--moe-router-force-load-balancing -- --tp 2 --sequence-parallel"
                 "cp2_force_balance:2:--moe-router-force-load-balancing -- --cp 2"
                 "pp2_v2_ep2_force_balance:4:--moe-router-force-load-balancing --num-layers 4 --moe-layer-freq 2 -- --pp 2 --num-virtual-stages-per-pipeline-rank 2 --dp 2 --expert-model-parallel-size 2")
    string(REPLACE ":" ";" parts "${layout}")
    list(GET parts 0 name)
    list(GET parts 1 ranks)
    list(GET parts 2 flags)
    separate_arguments(flags)
    mcc_layout_test(${name}_equals_single_rank_tiny-moe tiny-moe ${ranks} ${flags})
  endforeach()
  mcc_e2e_test(checkpoint_ep2_to_single_and_dp2 checkpoint_ep.sh tiny-moe)
  set_tests_properties(checkpoint_ep2_to_single_and_dp2 PROPERTIES PROCESSORS 2 TIMEOUT 120)
  mcc_e2e_test(checkpoint_ep2_zero_to_single_and_dp2 checkpoint_ep.sh tiny-moe 4 --dp 4 --expert-model-parallel-size 2 --use-distributed-optimizer)
  set_tests_properties(checkpoint_ep2_zero_to_single_and_dp2 PROPERTIES PROCESSORS 4 TIMEOUT 120)
  mcc_e2e_test(checkpoint_pp2_ep2_to_single_and_dp2 checkpoint_ep.sh tiny-moe 4 --pp 2 --decoder-first-pipeline-num-layers 2 --dp 2 --expert-model-parallel-size 2)
  set_tests_properties(checkpoint_pp2_ep2_to_single_and_dp2 PROPERTIES PROCESSORS 4 TIMEOUT 120)
endif()

# --moe-router-force-load-balancing replaces the routers' logits (one rank; its layouts above)
mcc_e2e_test(moe_force_load_balancing force_load_balancing.sh)
