/* context_parallel.c — context parallelism (config context_parallel_size = cp > 1): every
 * activation of the step and eval functions split along the sequence over the cp ranks, with
 * Megatron's causal load balance: the sequence is cut into 2 cp chunks and rank r holds chunks r
 * and 2 cp - 1 - r (the BALANCED split of ir.h's layout records; ir_cp_position), so that each
 * rank's share of the causal attention's work is the same.
 *
 *     tokens, targets [B,T] -> [B,T/cp] {shard=[-,cp]}   the rank's two chunks (train_rank binds
 *                                                         them by the input's layout record), and
 *                                                         so their rows (tp_comm_interleave's halves)
 *     pos_add, rope, dropout                             positions of the rank's chunks (cp, cp_rank)
 *
 * Attention reaches the other ranks' keys and values as config cp_comm_type says (Megatron's
 * --cp-comm-type): p2p, ring attention in cp pieces merged by their lse; all_gather, over keys and
 * values gathered; a2a (Ulysses), over every token of the rank's block of the heads. Those
 * lowerings, the position ops' attributes and the MoE router rows' below are the shard pass's
 * (shard.c's pass_seq_*: what the shard rules for cp will use once this pass is placements plus
 * pass_shard_axis, docs/design/parallelism.md); this pass tracks which values hold the rank's
 * tokens and calls them. Everything else is token by token and runs on the rank's tokens as it
 * is, but for what reduces over the tokens to one value: an FP8 amax is max-all-reduced over cp,
 * so the ranks quantize by the whole sequence's scale. An MoE layer flattens the tokens into rows
 * [B T/cp, ...] (and its routed pairs' [B T/cp k, ...]), which route, sort, permute and run the
 * experts on the rank's rows as they are; the load-balancing loss (aux_loss, seq_aux_loss: a
 * product of two sums over the micro-batch's or a sequence's tokens) runs on the router's logits
 * and ids all-gathered over cp, the same on every rank, its gradient's rows reduce-scattered back;
 * moe_sort's counts are summed over cp where they are output (train_rank's load statistics); the
 * z loss, a mean over the tokens, needs nothing (train_rank's mean over cp reports it). Token
 * dropping (moe_capacity) ranks the pairs of the whole micro-batch in token order: each rank ranks
 * them all, gathered, and keeps its own rows of the result (pass_seq_capacity).
 * The loss is the mean over the rank's tokens: autodiff seeds it with 1/(micro-batches dp cp),
 * data_parallel sums every gradient over cp (each rank saw its share of the tokens) before dp,
 * and train_rank's loss is the mean over dp x cp.
 * It runs after autodiff and recompute (the backward's attention and position ops are rewritten
 * beside the forward's, a replayed forward as the forward) and before the shard and pipeline
 * passes (the pipeline cuts the rewritten step into stages; the shard pass over tp passes the cp
 * collectives and ring ops through, heads split; with sequence parallelism it splits the rank's
 * tokens further, the position ops' offset and extent counting them); under expert parallelism (ep
 * carved from dp x cp) the dispatch and combine all-to-alls' room is the rank's rows' (a capacity's
 * room stays the capacity's). What the cuda target cannot run of it (attention dropout under p2p and
 * all_gather) the target check refuses before the passes (passes/target.c). */
#include "passes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What a source value holds of the micro-batch's tokens on this rank. */
typedef enum {
    CP_WHOLE,                       /* no token's own (a weight, a loss), or the same on every rank */
    CP_SEQ,                         /* [B,T/cp,...]: dimension 1 the rank's chunks */
    CP_ROWS,                        /* [B T/cp,...]: those tokens flattened (an MoE layer's rows, or its N k
                                       routed pairs') */
    CP_SHARE,                       /* the rank's share of a sum over the tokens (moe_sort's counts) */
} cp_form;

typedef struct {
    ir_module *m;
    const ir_func *src;
    ir_func *dst;
    int cp;
    pass_seq_split seq;             /* the lowerings of attention, positions, router rows (shard.c) */
    int64_t T;                      /* the whole sequence (config seq_length) */
    int64_t rows, pairs;            /* the whole micro-batch's tokens B T and routed pairs B T k (0: no router) */
    int *map;                       /* source value -> new value */
    cp_form *form;                  /* per source value */
} cp_ctx;

/* New value v summed (max: its max taken) over the cp ranks: what the single rank computes of
 * every token from each rank's share. */
static int all_reduce(cp_ctx *c, int v, bool max)
{
    double attrs[IR_NATTRS_ALL_REDUCE] = {[IR_ATTR_AXIS] = IR_AXIS_CP, [IR_ATTR_ALL_REDUCE_MAX] = max};
    return ir_emit(c->m, c->dst, IR_OP_ALL_REDUCE, &v, 1, attrs, NULL, NULL);
}

/* Type t with the rank's tokens: dimension dim (1, the sequence; 0, flattened rows) split over cp. */
static ir_type local_of(const cp_ctx *c, ir_type t, int dim) { return pass_seq_local(t, dim, IR_AXIS_CP, c->cp); }

static ir_type local_type(const cp_ctx *c, int v) { return local_of(c, c->src->vals[v].type, 1); }

/* Whether `in` sums over its operands' rows (a weight's gradient a^T b, one per expert): its result
 * holds no token, whatever its first dimension. */
static bool sums_rows(const ir_instr *in)
{
    int ta = ir_attr_index(in->op, "ta");
    return (ta >= 0 && in->attr[ta] != 0) || in->op == IR_OP_MOE_GROUPED_WGRAD;
}

/* The form of result k of `in`, from its operands': activations are [B,T,...] (3 or 4
 * dimensions; weights and their gradients 1 or 2), an MoE layer's rows [B T,...] or [B T k,...]. */
static cp_form result_form(const cp_ctx *c, const ir_instr *in, int k)
{
    bool seq = false, rows = false;
    for (int a = 0; a < in->nargs; a++)
        seq |= c->form[in->args[a]] == CP_SEQ, rows |= c->form[in->args[a]] == CP_ROWS;
    const ir_type *t = &c->src->vals[in->res[k]].type;
    if (in->op == IR_OP_MOE_SORT && k == 1) /* counts: of the rank's pairs */
        return rows ? CP_SHARE : CP_WHOLE;
    if (seq && t->ndim >= 3 && t->dims[1] == c->T)
        return CP_SEQ;
    if (rows && !sums_rows(in) && t->ndim >= 1 && (t->dims[0] == c->rows || t->dims[0] == c->pairs))
        return CP_ROWS;
    return CP_WHOLE;
}

/* Copies `in` with its operands mapped; its results split as result_form says. */
static int copy(cp_ctx *c, const ir_instr *in)
{
    int r = ir_copy_instr(c->m, c->dst, c->src, in, c->map);
    for (int k = 0; k < in->nres; k++) {
        c->form[in->res[k]] = result_form(c, in, k);
        if (c->form[in->res[k]] == CP_SEQ || c->form[in->res[k]] == CP_ROWS)
            ir_shard_push(&c->dst->vals[r + k].type, c->form[in->res[k]] == CP_SEQ ? 1 : 0, IR_AXIS_CP);
    }
    return r;
}

/* in's operands, mapped, into args */
static int *map_args(const cp_ctx *c, const ir_instr *in, int *args)
{
    for (int a = 0; a < in->nargs; a++)
        args[a] = c->map[in->args[a]];
    return args;
}

static bool cp_instr(cp_ctx *c, const ir_instr *in, char *err, size_t errlen)
{
    const ir_type *t0 = in->nres ? &c->src->vals[in->res[0]].type : NULL;
    int *map = c->map, args[7];
    switch (in->op) {
    case IR_OP_INPUT: /* the placements: tokens, targets [B,T] -> the rank's chunks {shard=[-,cp]} */
        if (in->role.kind == IR_ROLE_TOKENS || in->role.kind == IR_ROLE_TARGETS) {
            ir_type t = local_type(c, in->res[0]);
            map[in->res[0]] = ir_input(c->m, c->dst, in->role, in->sym, t);
            c->form[in->res[0]] = CP_SEQ;
            c->rows = t0->dims[0] * t0->dims[1];
            return true;
        }
        break;
    case IR_OP_RESHAPE: /* [B,T,...] <-> [B T,...] (an MoE layer's rows), or within the sequence */
        if (c->form[in->args[0]] == CP_SEQ || c->form[in->args[0]] == CP_ROWS) {
            cp_form f = t0->dims[0] == c->rows ? CP_ROWS : t0->ndim >= 2 && t0->dims[1] == c->T ? CP_SEQ : CP_WHOLE;
            if (f == CP_WHOLE)
                return snprintf(err, errlen, "%s: reshape %%%d moves the sequence of a value split over cp (context "
                                "parallelism keeps it dimension 1, or the tokens' rows)", c->src->name, in->res[0]), false;
            ir_type t = local_of(c, *t0, f == CP_SEQ ? 1 : 0);
            map[in->res[0]] = ir_emit(c->m, c->dst, IR_OP_RESHAPE, &map[in->args[0]], 1, NULL, NULL, &t);
            c->form[in->res[0]] = f;
            return true;
        }
        break;
    case IR_OP_ROWS: { /* some of the micro-batch's samples (tp_comm_interleave's halves), each its tokens */
        if (c->form[in->args[0]] != CP_SEQ || t0->ndim != 2)
            break;
        int r = copy(c, in); /* [B,T] -> [B/2,T]: tokens, targets */
        ir_shard_push(&c->dst->vals[r].type, 1, IR_AXIS_CP);
        c->form[in->res[0]] = CP_SEQ;
        c->rows = t0->dims[0] * t0->dims[1]; /* a half's MoE layers have its rows */
        return true;
    }
    case IR_OP_MOE_ROUTE: /* what follows has the routed pairs' rows too */
        c->pairs = c->rows * t0->dims[1];
        break;
    case IR_OP_FILL: { /* a constant of an MoE layer's rows (moe_permute's gradient: weights 1, [B T,k]) */
        if (!c->pairs || t0->ndim < 1 || t0->dims[0] != c->rows)
            break;
        ir_type t = local_of(c, *t0, 0);
        map[in->res[0]] = ir_emit(c->m, c->dst, IR_OP_FILL, NULL, 0, in->attr, NULL, &t);
        c->form[in->res[0]] = CP_ROWS;
        return true;
    }
    case IR_OP_MOE_AUX_LOSS: /* over every rank's rows: the same on every rank */
    case IR_OP_MOE_AUX_LOSS_GRAD: /* its gradient's rows, summed over the ranks, back */
        if (c->form[in->args[in->nargs - 1]] != CP_ROWS)
            break;
        map[in->res[0]] = pass_seq_router_loss(&c->seq, c->src, in, map_args(c, in, args));
        c->form[in->res[0]] = in->op == IR_OP_MOE_AUX_LOSS_GRAD ? CP_ROWS : CP_WHOLE;
        return true;
    case IR_OP_ALL_TO_ALL_V: { /* expert parallelism's dispatch (x: the rank's pairs) or combine (back to them) */
        double attrs[IR_MAX_ATTRS];
        memcpy(attrs, in->attr, sizeof attrs);
        if (attrs[IR_ATTR_ALL_TO_ALL_V_CAPACITY] == 0) /* the room, the exact worst case: the rank's rows; a */
            attrs[IR_ATTR_ALL_TO_ALL_V_ROWS] /= c->cp; /* capacity's (each rank's kept pairs of an expert are at
                                                          most its capacity still) stays */
        int args[2] = {map[in->args[0]], map[in->args[1]]};
        int r = ir_emit(c->m, c->dst, in->op, args, 2, attrs, NULL, NULL);
        bool back = c->form[in->args[0]] != CP_ROWS;
        c->form[in->res[0]] = back ? CP_ROWS : CP_WHOLE;
        if (back)
            ir_shard_push(&c->dst->vals[r].type, 0, IR_AXIS_CP);
        map[in->res[0]] = r, map[in->res[1]] = r + 1;
        return true;
    }
    case IR_OP_MOE_CAPACITY:
        if (c->form[in->args[2]] != CP_ROWS)
            break;
        map[in->res[0]] = pass_seq_capacity(&c->seq, c->src, in, map_args(c, in, args));
        c->form[in->res[0]] = CP_ROWS;
        return true;
    case IR_OP_OUTPUT: /* the rank's share of a sum over the tokens: the sum (train_rank's load statistics) */
        if (c->form[in->args[0]] != CP_SHARE)
            break;
        ir_output(c->m, c->dst, in->role, in->sym, all_reduce(c, map[in->args[0]], false));
        return true;
    case IR_OP_POS_ADD:
    case IR_OP_POS_ADD_GRAD:
    case IR_OP_ROPE:
    case IR_OP_DROPOUT: {
        if (c->form[in->args[0]] != CP_SEQ)
            break;
        pass_seq_positions(&c->seq, copy(c, in));
        return true;
    }
    case IR_OP_ATTENTION:
    case IR_OP_ATTENTION_GRAD:
    case IR_OP_ATTENTION_DROPOUT:
    case IR_OP_ATTENTION_DROPOUT_GRAD: {
        bool fwd = ir_ops[in->op].nres == 2;
        int k = fwd ? 1 : 2, made[3];
        if (c->form[in->args[k - 1]] != CP_SEQ || c->form[in->args[k]] != CP_SEQ || c->form[in->args[k + 1]] != CP_SEQ)
            return snprintf(err, errlen, "%s: attention %%%d over values not split along the sequence", c->src->name,
                            in->res[0]), false;
        pass_seq_attention(&c->seq, in, map_args(c, in, args), made);
        for (int r = 0; r < in->nres; r++) { /* a2a's lse stays on the rank's heads */
            map[in->res[r]] = made[r];
            c->form[in->res[r]] = c->seq.comm == IR_CP_A2A && fwd && r == 1 ? CP_WHOLE : CP_SEQ;
        }
        return true;
    }
    case IR_OP_FP8_AMAX: /* the rank's tokens' amax: the ranks share the whole sequence's scale */
        if (c->form[in->args[0]] != CP_SEQ && c->form[in->args[0]] != CP_ROWS)
            break;
        map[in->res[0]] = all_reduce(c, copy(c, in), true);
        return true;
    default:
        break;
    }
    copy(c, in);
    return true;
}

static bool cp_rewrites(const ir_func *f) { return f->kind == IR_FUNC_STEP || f->kind == IR_FUNC_EVAL; }

static bool cp_func(ir_module *m, int fi, int cp, ir_cp_comm comm, char *err, size_t errlen)
{
    const ir_func *src = m->funcs[fi];
    cp_ctx c = {.m = m, .src = src, .dst = ir_func_new(m, src->name, src->kind), .cp = cp,
                .T = ir_cfg_int(m, IR_CFG_SEQ_LENGTH)};
    c.seq = (pass_seq_split){.m = m, .dst = c.dst, .axis = IR_AXIS_CP, .n = cp, .comm = comm, .T = c.T};
    c.map = malloc(sizeof(int) * ((size_t)src->nvals + 1));
    c.form = calloc((size_t)src->nvals + 1, sizeof(cp_form));
    bool ok = true;
    for (int i = 0; i < src->ninstrs && ok; i++)
        ok = cp_instr(&c, &src->instrs[i], err, errlen);
    if (ok)
        ir_func_replace(m, fi, c.dst);
    free(c.map);
    free(c.form);
    pass_seq_free(&c.seq);
    return ok;
}

bool pass_context_parallel(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen)
{
    int cp = (int)ir_cfg_int(m, IR_CFG_CONTEXT_PARALLEL_SIZE);
    if (cp <= 1)
        return true;
    int64_t T = ir_cfg_int(m, IR_CFG_SEQ_LENGTH);
    if (T % (2 * cp))
        return snprintf(err, errlen, "--context-parallel-size %d: seq_length %lld does not cut into 2 x %d equal chunks",
                        cp, (long long)T, cp), false;
    (void)opts;
    ir_cp_comm comm = (ir_cp_comm)ir_cfg_choice(m, IR_CFG_CP_COMM_TYPE); /* how attention reaches the keys */
    for (int f = 0; f < m->nfuncs; f++)
        if (cp_rewrites(m->funcs[f]) && !cp_func(m, f, cp, comm, err, errlen))
            return false;
    return true;
}
