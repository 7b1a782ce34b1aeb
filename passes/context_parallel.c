/* context_parallel.c — context parallelism (config context_parallel_size = cp > 1): every
 * activation of the step and eval functions split along the sequence over the cp ranks, with
 * Megatron's causal load balance: the sequence is cut into 2 cp chunks and rank r holds chunks r
 * and 2 cp - 1 - r (the BALANCED split of ir.h's layout records; ir_cp_position), so that each
 * rank's share of the causal attention's work is the same.
 *
 * The pass is the placements, then the shard pass's propagation over cp with the tokens split
 * (pass_shard_axis, pass_axis_split's `tokens`), as tensor parallelism is Megatron's placements
 * and the propagation over tp:
 *
 *     tokens, targets [B,T] -> [B,T/cp] {shard=[-,cp]}   the rank's two chunks (by their roles;
 *                                                         train_rank binds them by the input's
 *                                                         layout record)
 *     moe_permute's gradient's weights (a fill [B T,k]) -> the rank's rows [B T/cp,k]
 *
 * The shard rules over split tokens (passes/shard.c) keep every token-wise op on the rank's
 * tokens (dimension 1 of [B,T,...], or 0 of an MoE layer's rows [B T/cp,...] and routed pairs'
 * [B T/cp k,...]) and leave a sum over them (a weight's gradient) as the rank's share, which
 * data_parallel sums over dp x cp (dp_cp); they lower what needs a token's place or other ranks'
 * tokens: pos_add, rope and dropout at the rank's chunks' places (cp, cp_rank); attention as
 * cp_comm_type says (Megatron's --cp-comm-type: p2p, ring attention in cp pieces merged by their
 * lse; all_gather, over keys and values gathered; a2a, Ulysses, over every token of the rank's
 * block of the heads); an FP8 amax max-all-reduced over cp (the whole sequence's scale); an MoE
 * router's load-balancing loss over its logits and ids gathered over cp (its gradient's rows
 * reduce-scattered back), token dropping ranked among every rank's pairs (the rank's rows of the
 * result kept), moe_sort's counts summed over cp where output (train_rank's load statistics), and
 * expert parallelism's all-to-alls' room the rank's rows' (a capacity's stays), multi-token
 * prediction's rolls by the chunks' edges all-gathered (shift_over_tokens). The loss is the
 * mean over the rank's tokens: autodiff seeds it with 1/(micro-batches dp cp), and train_rank's
 * loss is the mean over dp x cp.
 * It runs after autodiff and recompute (the backward's attention and position ops are rewritten
 * beside the forward's, a replayed forward as the forward) and before the shard pass over tp,
 * which passes the cp collectives through (heads split; with sequence parallelism it splits the
 * rank's tokens further), and the pipeline pass, which cuts the rewritten step into stages. What
 * the cuda target cannot run of it (attention dropout under p2p and all_gather) the target check
 * refuses before the passes (passes/target.c). */
#include "passes.h"

#include <stdio.h>

static bool cp_splits(const ir_func *f) { return f->kind == IR_FUNC_STEP || f->kind == IR_FUNC_EVAL; }

/* Value v's type: the rank's share of dimension dim (1, the sequence; 0, the tokens' rows). */
static void place(ir_func *f, int v, int dim, int cp)
{
    if (ir_shard_dim(&f->vals[v].type, IR_AXIS_CP) < 0)
        f->vals[v].type = pass_seq_local(f->vals[v].type, dim, IR_AXIS_CP, cp);
}

/* The placements, in the step and eval functions: the tokens and targets [B,T] (by their roles)
 * -> the rank's chunks [B,T/cp] {shard=[-,cp]}, and the constant weights of an MoE combine's
 * gradient (moe_permute's: a fill of ones [B T,k] read as moe_unpermute's weights) -> the rank's
 * rows. */
static void place_tokens(ir_module *m, int cp)
{
    for (int fi = 0; fi < m->nfuncs; fi++) {
        ir_func *f = m->funcs[fi];
        for (int i = 0; cp_splits(f) && i < f->ninstrs; i++) {
            const ir_instr *in = &f->instrs[i];
            if (in->op == IR_OP_INPUT && (in->role.kind == IR_ROLE_TOKENS || in->role.kind == IR_ROLE_TARGETS))
                place(f, in->res[0], 1, cp);
            if (in->op == IR_OP_MOE_UNPERMUTE && f->instrs[f->vals[in->args[2]].def].op == IR_OP_FILL)
                place(f, in->args[2], 0, cp);
        }
    }
}

bool pass_context_parallel(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen)
{
    (void)opts;
    int cp = (int)ir_cfg_int(m, IR_CFG_CONTEXT_PARALLEL_SIZE);
    if (cp <= 1)
        return true;
    int64_t T = ir_cfg_int(m, IR_CFG_SEQ_LENGTH);
    if (T % (2 * cp))
        return snprintf(err, errlen, "--context-parallel-size %d: seq_length %lld does not cut into 2 x %d equal chunks",
                        cp, (long long)T, cp), false;
    place_tokens(m, cp);
    pass_axis_split tokens = {.seq_dim = -1, .tokens = true, .comm = (ir_cp_comm)ir_cfg_choice(m, IR_CFG_CP_COMM_TYPE)};
    return pass_shard_axis(m, IR_AXIS_CP, cp, tokens, err, errlen);
}
