/* shard.c — sharding propagation over a mesh axis, and tensor parallelism (config
 * tensor_model_parallel_size = tp > 1) in Megatron's layout as its run over tp.
 * The engine (pass_shard_axis) knows no axis: its context carries the axis being split and its
 * degree; the globals' types say which dimension of each parameter is split over it, and each
 * op's rule (ops.def's shard column, the table `rules` below) places its results given its
 * operands'. It rewrites every function into the local graph every rank along the axis runs,
 * carrying for each value which dimension is split over the axis and whether it is a partial
 * sum over it (splits over other axes, an earlier run's, stay), and inserts `all_reduce` over
 * the axis where an op needs a complete value. A new axis brings its placements and, where an
 * op splits differently along it, rules; not edits here.
 * Tensor parallelism: parameters are split as the model builder placed them (ir_global's
 * placement, shard_globals, which records the split in their layout records): column-parallel (q, k, v, mlp up/gate: output features split), row-parallel (attention out,
 * mlp down: input features split) and vocab-parallel (word embedding, output head: vocabulary
 * rows split); the all_reduces come after row-parallel matmuls, the vocab-parallel lookup, and
 * the column-parallel input gradients. Cross entropy over split logits is lowered to the
 * vocab-parallel form (row max and sums combined over the axis).
 * With sequence_parallel, the activations between the blocks (residual stream, norms, position
 * add) are split along the sequence instead of replicated: a partial sum headed there is
 * reduce-scattered rather than all-reduced, and a sequence slice entering a matmul (or anything
 * that needs every token) is all-gathered, as in Megatron's sequence parallelism.
 * Dropout ops draw their masks by each element's index in the whole tensor, so where their
 * operand is split the pass records the rank's block in their attributes. Such offsets (and the
 * vocab-parallel and position offsets) are rank terms, `step*tp` (ir_rank_term): one plan
 * serves every rank along the axis, and each resolves them when it loads the plan. Attention
 * dropout's head_offset keeps an earlier pass's terms, shrunk by tp (`2*tp+1*cp` under a2a cp).
 * Types in the result are local shapes with the split dimension annotated {shard=[.., tp]}.
 * Context parallelism is the run over cp with the tokens split (pass_axis_split's `tokens`, from
 * the placements context_parallel.c gives the step's tokens and targets): every value holds the
 * rank's tokens along the dimension its placement names (1 of [B,T,...], 0 of an MoE layer's rows
 * [B T,...]), which the token-wise rules keep; a sum over them (a weight's gradient) is the rank's
 * share, left as it is (data_parallel sums it over dp_cp); and the rules lower what needs other
 * ranks' tokens or a token's place (the seq_split lowerings below: attention by cp_comm_type as
 * ring pieces, over gathered keys or on a block of heads; the position ops' cp attributes; an MoE
 * router's rows gathered for its sums), as cross entropy over split logits is lowered for tp.
 * Expert parallelism is the run over ep with the experts split (`experts`, from the expert
 * weights' placements expert_parallel.c records): moe_permute's rule dispatches the routed rows to
 * their experts' ranks, the grouped GEMMs run on the rank's experts' rows (placed `routed`), and
 * moe_unpermute's rule combines them back first (Megatron's all-to-all token dispatcher, below). */
#include "passes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int dim;                        /* the dimension split over the context's axis, or -1 (whole) */
    bool partial;                   /* a pending sum over the axis */
    bool seq;                       /* dim splits the residual stream's tokens (sequence parallelism:
                                       [B,T,...] along T, dim 1, or along B, dim 0) */
    bool routed;                    /* rows an MoE layer's dispatch brought to the rank's experts (split
                                       experts): no slice of a whole, so unmarked */
} placement;

typedef struct {
    int logits, targets;            /* source values of a lowered cross entropy */
    int gmax, stats;                /* its combined row statistics in the new function */
} lowered_ce;

/* The state of the lowerings of a sequence split over the axis in balanced chunks (below). */
typedef struct {
    ir_module *m;
    ir_func *dst;                   /* the function being written */
    ir_axis axis;
    int n;                          /* the axis's degree */
    ir_cp_comm comm;                /* how attention reaches the other ranks' keys (cp_comm_type) */
    int64_t T;                      /* the whole sequence */
    int *moved;                     /* per value: its gathered or head-split form, or -1 */
    int cap;
} seq_split;

typedef struct {
    ir_module *m;
    const ir_func *src;
    ir_func *dst;
    ir_axis axis;                   /* the mesh axis this run splits values over */
    int n;                          /* its degree */
    bool sp;                        /* sequence parallelism over the axis */
    int sp_dim;                     /* the dimension it splits: 1 (the sequence) or 0 (batch rows) */
    bool tokens;                    /* the axis splits the tokens (pass_axis_split): a partial value is the
                                       rank's share of a sum over them */
    seq_split seq;                  /* tokens: the lowerings' state */
    bool experts;                   /* the axis splits an MoE layer's experts (pass_axis_split) */
    int *dispatched;                /* experts: new value -> a sort's counts' local counts (moe_sort_runs'),
                                       or its permutation's received splits (all_to_all_v's came), or -1 */
    int *map;                       /* source value -> new value */
    placement *at;                  /* per new value */
    int *reduced;                   /* new partial value -> its all_reduce, or -1 */
    int *scattered;                 /* new partial value -> its reduce_scatter_seq, or -1 */
    int *gathered;                  /* new sequence slice -> its all_gather_seq, or -1 */
    int cap;
    bool *complete_grad;            /* per global: a gradient some write completed before storing */
    lowered_ce *ces;
    int nces;
    bool failed;                    /* place() could not record a split (err says why) */
    char *err;
    size_t errlen;
} shard_ctx;

static bool fail(shard_ctx *c, const char *what, const ir_instr *in)
{
    snprintf(c->err, c->errlen, "%s: %s (splitting %s over %s is not supported in this layout)", c->src->name, what,
             ir_ops[in->op].name, ir_axis_name(c->axis));
    return false;
}

/* --- the new function ---------------------------------------------------------------------- */

static void grow(shard_ctx *c)
{
    if (c->dst->nvals + IR_MAX_RES + 8 < c->cap)
        return;
    int cap = 2 * c->cap + 64;
    while (c->dst->nvals + IR_MAX_RES + 8 >= cap) /* a lowering emits many values */
        cap *= 2;
    c->at = realloc(c->at, sizeof(placement) * (size_t)cap);
    c->reduced = realloc(c->reduced, sizeof(int) * (size_t)cap);
    c->scattered = realloc(c->scattered, sizeof(int) * (size_t)cap);
    c->gathered = realloc(c->gathered, sizeof(int) * (size_t)cap);
    c->dispatched = realloc(c->dispatched, sizeof(int) * (size_t)cap);
    for (int i = c->cap; i < cap; i++)
        c->reduced[i] = c->scattered[i] = c->gathered[i] = c->dispatched[i] = -1;
    c->cap = cap;
}

/* Marks value v's type with its placement along the context's axis (the shapes are already
 * local); its splits over other axes stay. The rank's share of a sum over split tokens is no
 * pending sum of the plan's: its type is not marked partial. */
static void place(shard_ctx *c, int v, placement p)
{
    ir_type *t = &c->dst->vals[v].type;
    ir_shard_drop(t, c->axis);
    if (p.dim >= 0 && !ir_shard_push(t, p.dim, c->axis) && !c->failed) {
        snprintf(c->err, c->errlen, "%s: dimension %d of %%%d cannot be split over %s too (at most %d axes a dimension)",
                 c->src->name, p.dim, v, ir_axis_name(c->axis), IR_MAX_SHARD_AXES);
        c->failed = true;
    }
    unsigned bit = 1u << c->axis;
    t->partial = (uint8_t)(p.partial && !c->tokens ? t->partial | bit : t->partial & ~bit);
    c->at[v] = p;
}

/* Value v, made by a lowering that typed it, is placed p. */
static void note(shard_ctx *c, int v, placement p)
{
    grow(c);
    c->at[v] = p;
}

/* Value v's type takes `from`'s splits and partial sums over the axes other than the context's
 * (outer to its split along the context's axis): what an earlier run over another axis placed.
 * A type that says them itself (a global's) keeps its own. */
static void keep_other_axes(shard_ctx *c, int v, const ir_type *from)
{
    ir_type *t = &c->dst->vals[v].type, merged = *t, own = *t;
    unsigned bit = 1u << c->axis;
    ir_shard_drop(&own, c->axis);
    if (t->ndim != from->ndim || ir_shard_any(&own) || (own.partial & ~bit))
        return;
    int dim = ir_shard_dim(t, c->axis);
    ir_shard_clear(&merged);
    for (int d = 0; d < from->ndim; d++) {
        ir_axis axes[IR_MAX_SHARD_AXES];
        for (int k = 0, n = ir_shard_axes(from, d, axes); k < n; k++)
            if (axes[k] != c->axis)
                ir_shard_push(&merged, d, axes[k]);
    }
    if (dim >= 0)
        ir_shard_push(&merged, dim, c->axis);
    merged.partial = (uint8_t)((from->partial & ~bit) | (t->partial & bit));
    *t = merged;
}

/* Places the results of the `op` just emitted, r the first, p. */
static int placed(shard_ctx *c, ir_op op, int r, placement p)
{
    grow(c);
    for (int i = 0; r >= 0 && i < ir_ops[op].nres; i++)
        place(c, r + i, p);
    return r;
}

static int emit(shard_ctx *c, ir_op op, const int *args, int nargs, const double *attrs, const char *sym,
                const ir_type *explicit_type, placement p)
{
    return placed(c, op, ir_emit(c->m, c->dst, op, args, nargs, attrs, sym, explicit_type), p);
}

/* Collective `op` {axis = the context's; all_reduce's max 0; a sequence collective's overlap 0 and
 * batch} of value v, placed p, emitted once however often v is used (*memo[v] remembers it); its
 * type keeps v's splits over other axes. */
static int collective_once(shard_ctx *c, int **memo, ir_op op, int v, bool batch, placement p)
{
    if ((*memo)[v] < 0) {
        double attrs[IR_MAX_ATTRS] = {[IR_ATTR_AXIS] = c->axis, [IR_ATTR_BATCH] = batch};
        int r = emit(c, op, &v, 1, attrs, NULL, NULL, p);
        keep_other_axes(c, r, &c->dst->vals[v].type);
        (*memo)[v] = r; /* after emit: it may move the memo */
    }
    return (*memo)[v];
}

/* v as a complete value: a partial sum is all-reduced over the axis. */
static int complete(shard_ctx *c, int v)
{
    placement whole = {c->at[v].dim, false, c->at[v].seq, false};
    return c->at[v].partial ? collective_once(c, &c->reduced, IR_OP_ALL_REDUCE, v, false, whole) : v;
}

static int last_dim_of(shard_ctx *c, int v) { return c->dst->vals[v].type.ndim - 1; }

/* Attribute k of value v's instruction is this rank's offset: its coordinate along the axis times
 * `block`. */
static void rank_offset(shard_ctx *c, int v, int k, int64_t block) { ir_set_per_rank(c->dst, v, k, 0, (double)block, c->axis); }

/* This rank's share of the residual stream's tokens: its slice of the sequence (dim 1), or with
 * sequence_parallel_split batch its batch rows (dim 0). */
static placement seq_slice_at(const shard_ctx *c) { return (placement){c->sp_dim, false, true, false}; }

/* v split along the sequence: a partial sum is reduce-scattered (overlap: the comm_overlap pass's). */
static int seq_slice(shard_ctx *c, int v)
{
    if (!c->at[v].partial)
        return v;
    return collective_once(c, &c->scattered, IR_OP_REDUCE_SCATTER_SEQ, v, c->sp_dim == 0, seq_slice_at(c));
}

/* v as a sequence slice where it joins one: a partial sum is reduce-scattered, and a complete
 * value every rank holds whole (the MoE block's input gradient, which the router's part makes
 * complete) is sliced locally. */
static int join_slice(shard_ctx *c, int v)
{
    const ir_type *t = &c->dst->vals[v].type;
    bool whole = !c->at[v].partial && c->at[v].dim < 0 && t->ndim >= 2 && t->dims[c->sp_dim] % c->n == 0;
    return whole ? collective_once(c, &c->scattered, IR_OP_LOCAL_SLICE_SEQ, v, c->sp_dim == 0, seq_slice_at(c))
                 : seq_slice(c, v);
}

/* v with every token: a sequence slice is all-gathered, a partial sum all-reduced. */
static int every_token(shard_ctx *c, int v)
{
    v = complete(c, v);
    placement whole = {-1, false, false, false};
    return c->at[v].seq ? collective_once(c, &c->gathered, IR_OP_ALL_GATHER_SEQ, v, c->sp_dim == 0, whole) : v;
}

/* A replicated parameter's gradient under sequence parallelism is a partial sum over the axis
 * (each rank saw its slice of the tokens): it is stored as it is, the global marked {partial=tp},
 * and data_parallel.c sums it over the axis once per step, in f32 and with one collective for them all,
 * instead of an all-reduce per layer on the critical path (Megatron reduces its layer-norm
 * gradients the same way). A gradient also written complete is completed at every write. */
static int store_partial_grad(shard_ctx *c, const ir_instr *in, const int *args)
{
    int g = ir_global_of(c->dst, args[0]);
    if (g < 0 || c->m->globals[g].kind != IR_GLOBAL_GRAD || c->at[args[0]].dim >= 0)
        return 0;
    ir_type *t = &c->m->globals[g].type;
    bool partial = c->at[args[1]].partial && !c->at[args[1]].seq;
    if (!partial || c->complete_grad[g]) {
        if (t->partial)
            return fail(c, "a gradient receives both partial and complete sums", in) ? 1 : -1;
        c->complete_grad[g] = true;
        return 0;
    }
    t->partial |= (uint8_t)(1u << c->axis);
    emit(c, in->op, args, 2, NULL, NULL, NULL, (placement){-1, false, false, false});
    return 1;
}

/* An activation of the residual stream: a sequence slice under sequence parallelism (a partial
 * sum is reduce-scattered), else a complete value. */
static int stream_value(shard_ctx *c, int v) { return c->sp ? seq_slice(c, v) : complete(c, v); }

/* --- rules ---------------------------------------------------------------------------------- */

/* The position ops' lowering over split tokens (below, with attention's). */
static void lower_positions(seq_split *a, int r);

/* Where reshape moves a split dimension: to the new dimension with the same number of elements
 * before it (Megatron's layouts only ever split an outer factor: [B,T,H*D] <-> [B,T,H,D]); split
 * tokens, to the one with the same number after it (the tokens flattened with the batch, as an MoE
 * layer's rows: [B,T,C] <-> [B T,C]; the rank's tokens of each sample stay together). */
static bool reshape_dim(const ir_type *from, const ir_type *to, int dim, int n, bool tokens, int *out)
{
    if (dim < 0)
        return *out = -1, true;
    int64_t before = 1, acc = 1;
    for (int i = tokens ? dim + 1 : 0; i < (tokens ? from->ndim : dim); i++)
        before *= from->dims[i];
    for (int j = tokens ? to->ndim - 1 : 0; j >= 0 && j < to->ndim; j += tokens ? -1 : 1) {
        if (acc == before && to->dims[j] % n == 0)
            return *out = j, true;
        acc *= to->dims[j];
    }
    return false;
}

/* Global (unsharded) type of a source value with the new value's split dimension divided. */
static ir_type local_type(const ir_type *global, int dim, int tp)
{
    ir_type t = *global;
    if (dim >= 0)
        t.dims[dim] /= tp;
    return t;
}

/* matmul on 2-D views: A (m x k), B (k x n). Which of m, k, n a split operand splits. */
enum { SPLIT_NONE, SPLIT_M, SPLIT_K, SPLIT_N };

static int split_of_a(shard_ctx *c, int a, bool ta)
{
    int d = c->at[a].dim;
    if (d < 0)
        return SPLIT_NONE;
    bool last = d == last_dim_of(c, a);
    return ta ? (last ? SPLIT_M : SPLIT_K) : (last ? SPLIT_K : SPLIT_M);
}

static int split_of_b(shard_ctx *c, int b, bool tb)
{
    int d = c->at[b].dim;
    if (d < 0)
        return SPLIT_NONE;
    bool last = d == last_dim_of(c, b);
    return tb ? (last ? SPLIT_K : SPLIT_N) : (last ? SPLIT_N : SPLIT_K);
}

/* The placement of op(a) op(b) (attributes ta, tb first), a and b (operands ia and ib of args)
 * made whole along the sequence first; false where the splits do not make a local product. */
static bool matmul_placement(shard_ctx *c, const ir_instr *in, int *args, int ia, int ib, placement *p)
{
    bool ta = in->attr[IR_ATTR_TA] != 0, tb = in->attr[IR_ATTR_TB] != 0;
    args[ia] = every_token(c, args[ia]);
    args[ib] = every_token(c, args[ib]);
    int sa = split_of_a(c, args[ia], ta), sb = split_of_b(c, args[ib], tb);
    *p = (placement){-1, false, false, false};
    if (sa == SPLIT_K && sb == SPLIT_K)
        p->partial = true; /* row-parallel: each rank holds a slice of the contraction */
    else if (sa == SPLIT_K || sb == SPLIT_K || (sa == SPLIT_M && sb == SPLIT_N))
        return fail(c, "operands split along different dimensions", in);
    int rank = ta ? 2 : c->dst->vals[args[ia]].type.ndim;
    if (sb == SPLIT_N)
        p->dim = rank - 1;
    else if (sa == SPLIT_M)
        p->dim = ta ? 0 : c->at[args[ia]].dim;
    return true;
}

static bool rule_matmul(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    placement p;
    if (!matmul_placement(c, in, args, 0, 1, &p))
        return false;
    *res = emit(c, IR_OP_MATMUL, args, 2, in->attr, NULL, NULL, p);
    return true;
}

/* FP8 (ops.def). A split tensor's ranks share one scale: the amax of their parts is
 * max-all-reduced over the axis, so each quantizes its part as the one rank quantizes the whole
 * (a partial sum is completed first: its amax is not its parts'). */
static bool rule_fp8_amax(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    args[0] = complete(c, args[0]);
    placement whole = {-1, false, false, false};
    *res = emit(c, in->op, args, 1, NULL, NULL, NULL, whole);
    if (c->at[args[0]].dim >= 0) {
        double max_attrs[IR_NATTRS_ALL_REDUCE] = {[IR_ATTR_AXIS] = c->axis, [IR_ATTR_ALL_REDUCE_MAX] = 1};
        *res = emit(c, IR_OP_ALL_REDUCE, res, 1, max_attrs, NULL, NULL, whole);
    }
    return true;
}

/* q placed as x (a sequence slice stays one: its fp8 bytes are what fp8_matmul gathers, half a
 * bf16 gather's), its scale_inv whole */
static bool rule_fp8_quantize(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    args[0] = complete(c, args[0]);
    if (c->at[args[1]].dim >= 0 || c->at[args[1]].partial)
        return fail(c, "an amax that is not whole", in);
    *res = emit(c, in->op, args, 2, in->attr, NULL, NULL, c->at[args[0]]);
    place(c, *res + 1, (placement){-1, false, false, false});
    return true;
}

/* x whole, q and scale_inv too: a block's scale is its own amax, and a block cut over ranks would
 * need a max over them (blockwise FP8 of a split activation is not built: spec.c refuses tp, cp).
 * Over split experts (the forward's: the autodiff's quantizes come after) the rank's experts' rows
 * or weights, whose tiles and blocks are each one expert's: q and scale_inv placed as x (a weight's
 * blocks' scales, [E F/128, ...], split along the experts with it) */
static bool rule_fp8_block_quantize(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    if (c->experts && in->nargs == 1 && (c->at[args[0]].routed || c->at[args[0]].dim == 0)) {
        *res = emit(c, in->op, args, 1, in->attr, NULL, NULL, c->at[args[0]]);
        place(c, *res + 1, c->at[args[0]]);
        return true;
    }
    if (in->nargs != 1)
        return fail(c, "blockwise FP8 experts' rows quantized with their counts (the backward's, never sharded)", in);
    args[0] = complete(c, args[0]);
    if (c->at[args[0]].dim >= 0)
        return fail(c, "blockwise FP8 of a split tensor (not built yet: use --fp8-recipe tensorwise)", in);
    *res = emit(c, in->op, args, 1, in->attr, NULL, NULL, c->at[args[0]]);
    place(c, *res + 1, c->at[args[0]]);
    return true;
}

/* (qa, sa, qb, sb[, hdy]): a matmul's placement of qa and qb; the scale_invs (and dy's amax
 * history) are whole */
static bool rule_fp8_matmul(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    placement p;
    if (!matmul_placement(c, in, args, 0, 2, &p))
        return false;
    *res = emit(c, in->op, args, in->nargs, in->attr, NULL, NULL, p);
    return true;
}

/* an amax history and the amaxes folded into it: replicated (an amax of a split tensor is
 * all-reduced where fp8_amax is made); over split experts an expert weight's history [E, 1 + len]
 * and its amaxes [E] are split with the experts (dim 0), each rank's its own experts' */
static bool rule_fp8_scaling(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    int dim = c->experts && c->at[args[0]].dim == 0 ? 0 : -1;
    for (int a = 0; a < in->nargs; a++)
        if (c->at[args[a]].dim != dim || c->at[args[a]].partial)
            return fail(c, "an FP8 amax or history that is not whole", in);
    int r = emit(c, in->op, args, in->nargs, in->attr, NULL, NULL, (placement){dim, false, false, false});
    if (ir_ops[in->op].nres)
        *res = r;
    return true;
}

/* Cross entropy over logits split along the vocabulary: the row max and (sum of exp, target
 * logit) are combined over the axis, so no rank ever holds the whole row. */
static int lower_cross_entropy(shard_ctx *c, const ir_instr *in, int logits, int targets)
{
    placement rows = {-1, false, false, false};
    double max_attrs[IR_NATTRS_ALL_REDUCE] = {[IR_ATTR_AXIS] = c->axis, [IR_ATTR_ALL_REDUCE_MAX] = 1};
    double sum_attrs[IR_NATTRS_ALL_REDUCE] = {[IR_ATTR_AXIS] = c->axis, [IR_ATTR_ALL_REDUCE_MAX] = 0};
    int mx = emit(c, IR_OP_CE_ROW_MAX, &logits, 1, NULL, NULL, NULL, rows);
    int gmax = emit(c, IR_OP_ALL_REDUCE, &mx, 1, max_attrs, NULL, NULL, rows);
    int st_args[3] = {logits, targets, gmax};
    int st = emit(c, IR_OP_CE_ROW_STATS, st_args, 3, NULL, NULL, NULL, rows);
    rank_offset(c, st, 0, c->dst->vals[logits].type.dims[last_dim_of(c, logits)]); /* vocab_start */
    int stats = emit(c, IR_OP_ALL_REDUCE, &st, 1, sum_attrs, NULL, NULL, rows);
    c->ces = realloc(c->ces, sizeof(lowered_ce) * (size_t)(c->nces + 1));
    c->ces[c->nces++] = (lowered_ce){in->args[0], in->args[1], gmax, stats};
    int loss_args[2] = {stats, gmax};
    return emit(c, IR_OP_CE_LOSS, loss_args, 2, NULL, NULL, NULL, rows);
}

static int lower_cross_entropy_grad(shard_ctx *c, const ir_instr *in, const int *args)
{
    for (int i = 0; i < c->nces; i++)
        if (c->ces[i].logits == in->args[1] && c->ces[i].targets == in->args[2]) {
            int g[5] = {args[0], args[1], args[2], c->ces[i].gmax, c->ces[i].stats};
            placement split = {last_dim_of(c, args[1]), false, false, false};
            int r = emit(c, IR_OP_CE_GRAD_SHARDED, g, 5, NULL, NULL, NULL, split);
            rank_offset(c, r, 0, c->dst->vals[args[1]].type.dims[last_dim_of(c, args[1])]); /* vocab_start */
            return r;
        }
    return -1;
}

/* Ops whose result keeps the placement of their complete operands, which must agree. */
static bool rule_same(shard_ctx *c, const ir_instr *in, int *args, int *res, bool linear)
{
    bool all_partial = linear, any_seq = false;
    for (int a = 0; a < in->nargs; a++) {
        all_partial &= c->at[args[a]].partial;
        any_seq |= c->at[args[a]].seq;
    }
    for (int a = 0; a < in->nargs && !all_partial; a++) /* a partial joining a slice is scattered */
        args[a] = any_seq ? join_slice(c, args[a]) : complete(c, args[a]);
    placement p = c->at[args[0]];
    for (int a = 1; a < in->nargs; a++)
        if (c->at[args[a]].dim != c->at[args[0]].dim)
            return fail(c, "operands split differently", in);
    p.partial = all_partial;
    *res = emit(c, in->op, args, in->nargs, in->attr, NULL, NULL, p);
    return true;
}

/* rope rotates each token by its place in the sequence: split tokens by the rank's chunks' */
static bool rule_rope(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    if (!rule_same(c, in, args, res, false))
        return false;
    if (c->tokens && c->at[*res].dim == 1)
        lower_positions(&c->seq, *res);
    return true;
}

/* Whether the norm's operand x is split along a dimension of its rows (not the last, which it
 * normalises) and not the sequence: the heads of q and k under tensor parallelism (qk_layernorm). */
static bool rows_split(shard_ctx *c, const ir_instr *in, int x)
{
    bool norm = in->op != IR_OP_POS_ADD && in->op != IR_OP_POS_ADD_GRAD;
    return norm && !c->at[x].seq && !c->at[x].partial && c->at[x].dim >= 0 && c->at[x].dim < last_dim_of(c, x);
}

/* Norms, the position add and their gradients work token by token on the residual stream:
 * replicated, or a sequence slice under sequence parallelism, where the weight gradients (sums
 * over this rank's tokens) become partial and the position table is offset to the slice. A norm
 * of heads split over the axis (qk_layernorm's, each head normalised alone) keeps their split,
 * and its weight gradients, sums over this rank's heads, become partial alike; so does one of
 * split tokens (the sums the rank's shares), the position ops at the rank's chunks' places. */
static bool rule_stream(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    int x = in->op == IR_OP_LAYERNORM_GRAD || in->op == IR_OP_RMSNORM_GRAD ? 1 : 0; /* (dy, x, w) */
    bool positions = in->op == IR_OP_POS_ADD || in->op == IR_OP_POS_ADD_GRAD;
    bool kept = rows_split(c, in, args[x]) || (c->tokens && c->at[args[x]].dim >= 0);
    if (!kept)
        args[x] = stream_value(c, args[x]);
    bool seq = c->at[args[x]].seq;
    if (x == 1 && !kept)
        args[0] = seq ? join_slice(c, args[0]) : complete(c, args[0]);
    if (x == 1 && kept)
        args[0] = complete(c, args[0]);
    for (int a = 0; a < in->nargs; a++) {
        bool stream = a <= x || (in->op == IR_OP_POS_ADD_GRAD);
        if (!stream)
            args[a] = complete(c, args[a]); /* weights, bias, table: replicated */
        bool placed = stream && (c->at[args[a]].seq || (kept && c->at[args[a]].dim == c->at[args[x]].dim));
        if (c->at[args[a]].dim >= 0 && !placed)
            return fail(c, "a normalisation or position table over a split dimension", in);
    }
    double attrs[IR_MAX_ATTRS];
    memcpy(attrs, in->attr, sizeof attrs);
    placement p = seq ? seq_slice_at(c) : kept ? c->at[args[x]] : (placement){-1, false, false, false};
    if (in->op == IR_OP_POS_ADD_GRAD)
        p = (placement){-1, seq || kept, false, false}; /* rows of this slice's positions only */
    int64_t slice = c->dst->vals[args[0]].type.dims[1];
    /* a sequence slice's tokens are [offset, offset + slice) of the sequence's extent (ops.def);
       batch rows hold every position */
    bool sliced = seq && c->sp_dim == 1 && positions;
    int pos = sliced ? (int)(ir_pos_attrs(in) - in->attr) : 0; /* offset, extent, ... as pos_add's */
    if (sliced)
        attrs[pos + IR_ATTR_POS_ADD_EXTENT] = (double)(slice * c->n);
    *res = emit(c, in->op, args, in->nargs, attrs, NULL, NULL, p);
    if (sliced)
        rank_offset(c, *res, pos + IR_ATTR_POS_ADD_OFFSET, slice);
    if (positions && kept) /* split tokens: at their places */
        lower_positions(&c->seq, *res);
    for (int r = 1; r < ir_ops[in->op].nres; r++) /* dw, db: summed over this slice's tokens (heads, tokens) */
        place(c, *res + r, (placement){-1, seq || kept, false, false});
    return true;
}

/* Dropout is elementwise, with a mask drawn from each element's place in the whole tensor. A
 * partial sum is completed first (under sequence parallelism reduce-scattered to this rank's
 * slice, where Megatron drops out); where the operand is split, the attributes dim, offset and
 * extent (ops.def) say which block of which dimension this rank holds. */
static bool rule_dropout(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    if (c->at[args[0]].partial)
        args[0] = stream_value(c, args[0]);
    placement p = c->at[args[0]];
    if (c->tokens) { /* the rank's tokens: by their places (ops.def's cp, cp_rank) */
        *res = emit(c, in->op, args, 2, in->attr, NULL, NULL, p);
        if (p.dim == 1)
            lower_positions(&c->seq, *res);
        return true;
    }
    if (p.dim == 0 && !p.seq)
        return fail(c, "dropout over a split batch dimension", in);
    if (p.dim >= 2 && in->attr[IR_ATTR_DROPOUT_CP] > 1) /* runtime/dropout.c: cp cuts dimension 1 */
        return fail(c, "dropout over a split feature dimension under context parallelism", in);
    double attrs[IR_MAX_ATTRS];
    memcpy(attrs, in->attr, sizeof attrs);
    int64_t local = p.dim >= 0 ? c->dst->vals[args[0]].type.dims[p.dim] : 0;
    if (p.dim >= 0) { /* dim 0: sequence parallelism split by batch rows */
        attrs[IR_ATTR_DROPOUT_DIM] = p.dim;
        attrs[IR_ATTR_DROPOUT_EXTENT] = (double)(local * c->n);
    }
    *res = emit(c, in->op, args, 2, attrs, NULL, NULL, p);
    if (p.dim >= 0)
        rank_offset(c, *res, IR_ATTR_DROPOUT_OFFSET, local);
    return true;
}

/* --- a sequence split over the axis in balanced chunks (context parallelism's lowerings) ---------
 * Token-wise ops run on the rank's tokens as they are, but for those whose result depends on a
 * token's place in the sequence and those that need other ranks' tokens: attention and an MoE
 * router's sums over the micro-batch's tokens. */

ir_type pass_seq_local(ir_type t, int dim, ir_axis axis, int n)
{
    t.dims[dim] /= n;
    ir_shard_push(&t, dim, axis);
    return t;
}

/* Op r of dst, a copy of a token-wise op whose result depends on a token's place in the sequence
 * (pos_add, pos_add_grad, rope, dropout: ops.def's attributes cp, cp_rank): its tokens are the
 * rank's chunks (ir_cp_position), and dropout's extent along the sequence (dim 1) the rank's. */
static void lower_positions(seq_split *a, int r)
{
    ir_instr *made = &a->dst->instrs[a->dst->vals[r].def];
    int cp_at = ir_attr_index(made->op, "cp");
    made->attr[cp_at] = a->n;
    if (made->op == IR_OP_DROPOUT && made->attr[IR_ATTR_DROPOUT_DIM] == 1)
        made->attr[IR_ATTR_DROPOUT_EXTENT] = (double)a->dst->vals[r].type.dims[1];
    ir_set_per_rank(a->dst, r, cp_at + 1, 0, 1, a->axis); /* cp_rank */
}

/* Attention: q, k, v hold the rank's balanced chunks of every sequence (ir_cp_position), and
 * attention reaches the other ranks' keys and values as cp_comm_type says, as the vocab-parallel
 * cross entropy is tp's lowering (docs/design/parallelism.md's Context parallelism, the contract
 * with the kernels):
 *
 *   p2p (ring)   attention(q, k, v) -> n pieces {ring=1, shift=s}, piece s over the keys ring_shift
 *                has moved s steps (emitted before piece s-1, so the shift runs beside it), each
 *                merged into the running (o, lse) by attention_merge; attention_grad's pieces take
 *                the merged y and lse (each piece's FA2 backward is then exact), dq summed, the
 *                keys' gradients riding the ring with their keys, one last shift bringing them home
 *   all_gather   attention(q, all_gather_seq(k), all_gather_seq(v)) {cp, cp_rank}: each query
 *                masked by the whole sequence's positions; dk, dv (summed over the ranks whose
 *                queries read them) reduce_scatter_seq back to the chunks they came from
 *   a2a          (Ulysses) cp_all_to_all{heads=1} of q, k, v (and dy, y): every token in sequence
 *                order of the rank's 1/n of the heads, attention as one rank's (cp 0), the results
 *                back {heads=0}; the forward's lse stays on the heads
 *
 * Under grouped-query attention only the kv heads travel. A dropout twin carries attention's
 * attributes after its own; its mask is drawn by whole-sequence positions, so a ring piece's y is
 * (P Z) v of its keys and the merge stays exact, and under a2a the block's first head is
 * head_offset, rank H/n. */

/* memo slot of new value v: its all_gather_seq (all_gather), head-split form (a2a) or an MoE
 * router's rows of every rank (seq_whole_rows), or -1 */
static int *seq_moved(seq_split *a, int v)
{
    if (v >= a->cap) {
        int cap = 2 * v + 64;
        a->moved = realloc(a->moved, sizeof(int) * (size_t)cap);
        for (int i = a->cap; i < cap; i++)
            a->moved[i] = -1;
        a->cap = cap;
    }
    return &a->moved[v];
}

/* New value v as attention reads it, made once however many ops read it: all_gather, k or v of
 * every rank (axis; overlap 0, batch 0); a2a, q, k, v, y or dy with every token and the rank's
 * block of the heads (heads 1). */
static int seq_kv(seq_split *a, int v)
{
    if (*seq_moved(a, v) < 0) {
        bool a2a = a->comm == IR_CP_A2A;
        double attrs[IR_MAX_ATTRS] = {[IR_ATTR_AXIS] = a->axis, [IR_ATTR_CP_ALL_TO_ALL_HEADS] = a2a};
        int r = ir_emit(a->m, a->dst, a2a ? IR_OP_CP_ALL_TO_ALL : IR_OP_ALL_GATHER_SEQ, &v, 1, attrs, NULL, NULL);
        *seq_moved(a, v) = r;
    }
    return *seq_moved(a, v);
}

/* New value v [B,T,H/n,D] back to the rank's tokens and every head (a2a) */
static int seq_to_tokens(seq_split *a, int v)
{
    double attrs[IR_NATTRS_CP_ALL_TO_ALL] = {[IR_ATTR_AXIS] = a->axis, [IR_ATTR_CP_ALL_TO_ALL_HEADS] = 0};
    return ir_emit(a->m, a->dst, IR_OP_CP_ALL_TO_ALL, &v, 1, attrs, NULL, NULL);
}

/* Attention op `in` over new operands args, with in's attributes but {cp, cp_rank, ring, shift}
 * (ops.def); ranked 0: over the whole sequence in order, as one rank's (a2a) */
static int seq_piece(seq_split *a, const ir_instr *in, const int *args, int ring, int shift, bool ranked)
{
    double attrs[IR_MAX_ATTRS];
    memcpy(attrs, in->attr, sizeof attrs);
    int at = (int)(ir_attention_attrs(in) - in->attr); /* cp's, and the others' from it as attention's */
    attrs[at + IR_ATTR_ATTENTION_CP] = ranked ? a->n : 0, attrs[at + IR_ATTR_ATTENTION_CP_RANK] = 0;
    attrs[at + IR_ATTR_ATTENTION_RING] = ring, attrs[at + IR_ATTR_ATTENTION_SHIFT] = shift;
    int r = ir_emit(a->m, a->dst, in->op, args, in->nargs, attrs, NULL, NULL);
    if (ranked)
        ir_set_per_rank(a->dst, r, at + IR_ATTR_ATTENTION_CP_RANK, 0, 1, a->axis);
    return r;
}

/* New value v of the previous rank of the axis's ring, overlapped (it runs beside what is
 * computed before its first use). */
static int seq_ring_shift(seq_split *a, int v)
{
    double attrs[IR_NATTRS_RING_SHIFT] = {[IR_ATTR_AXIS] = a->axis, [IR_ATTR_RING_SHIFT_OVERLAP] = 1};
    return ir_emit(a->m, a->dst, IR_OP_RING_SHIFT, &v, 1, attrs, NULL, NULL);
}

static int seq_add(seq_split *a, int x, int y)
{
    int args[2] = {x, y};
    return ir_emit(a->m, a->dst, IR_OP_ADD, args, 2, NULL, NULL, NULL);
}

/* The forward's ring pieces over (q, k, v[, first_sample]), merged: returns (o, lse). */
static int seq_ring_forward(seq_split *a, const ir_instr *in, const int *mapped)
{
    int args[4], o = -1;
    memcpy(args, mapped, sizeof(int) * (size_t)in->nargs);
    for (int s = 0; s < a->n; s++) {
        bool more = s + 1 < a->n;
        int next_k = more ? seq_ring_shift(a, args[1]) : -1, next_v = more ? seq_ring_shift(a, args[2]) : -1;
        int piece = seq_piece(a, in, args, 1, s, true);
        if (s == 0)
            o = piece;
        else {
            int m[4] = {o, o + 1, piece, piece + 1};
            o = ir_emit(a->m, a->dst, IR_OP_ATTENTION_MERGE, m, 4, NULL, NULL, NULL);
        }
        args[1] = next_k, args[2] = next_v;
    }
    return o;
}

/* The backward's ring pieces over (dy, q, k, v, y, lse[, first_sample]), y and lse the merged
 * ones: res := dq, dk, dv. After the last piece the keys' gradients belong to rank + 1's keys. */
static void seq_ring_backward(seq_split *a, const ir_instr *in, const int *mapped, int *res)
{
    int args[7];
    memcpy(args, mapped, sizeof(int) * (size_t)in->nargs);
    int next_k = seq_ring_shift(a, args[2]), next_v = seq_ring_shift(a, args[3]);
    int g = seq_piece(a, in, args, 1, 0, true);
    int dq = g, ak = g + 1, av = g + 2;
    for (int s = 1; s < a->n; s++) {
        args[2] = next_k, args[3] = next_v;
        if (s + 1 < a->n)
            next_k = seq_ring_shift(a, args[2]), next_v = seq_ring_shift(a, args[3]);
        ak = seq_ring_shift(a, ak);
        av = seq_ring_shift(a, av);
        g = seq_piece(a, in, args, 1, s, true);
        dq = seq_add(a, dq, g);
        ak = seq_add(a, ak, g + 1);
        av = seq_add(a, av, g + 2);
    }
    res[0] = dq;
    res[1] = seq_ring_shift(a, ak);
    res[2] = seq_ring_shift(a, av);
}

/* Ulysses: over every token of the rank's block of the heads; the lse and first_sample stay as
 * they are. With dropout the block's first head is rank H/n (under tp the shard pass makes it
 * tp_rank H/tp + cp_rank H/(tp cp): rule_attention). */
static void seq_ulysses(seq_split *a, const ir_instr *in, const int *mapped, int *res)
{
    bool fwd = ir_ops[in->op].nres == 2, dropout = ir_attr_index(in->op, "head_offset") >= 0;
    int args[7], lse = fwd ? -1 : 5, first_sample = dropout ? in->nargs - 1 : -1;
    for (int i = 0; i < in->nargs; i++)
        args[i] = i == lse || i == first_sample ? mapped[i] : seq_kv(a, mapped[i]);
    int r = seq_piece(a, in, args, 0, 0, false);
    if (dropout)
        ir_set_per_rank(a->dst, r, IR_ATTR_ATTENTION_DROPOUT_HEAD_OFFSET, 0,
                        (double)a->dst->vals[args[fwd ? 0 : 1]].type.dims[2], a->axis);
    if (fwd) {
        res[0] = seq_to_tokens(a, r);
        *seq_moved(a, res[0]) = r; /* y as attention_grad reads it */
        res[1] = r + 1;
        return;
    }
    for (int g = 0; g < 3; g++)
        res[g] = seq_to_tokens(a, r + g);
}

/* all_gather: over every rank's keys and values; dk, dv reduce-scattered back. */
static void seq_gathered(seq_split *a, const ir_instr *in, const int *mapped, int *res)
{
    bool fwd = ir_ops[in->op].nres == 2;
    int k = fwd ? 1 : 2, args[7];
    memcpy(args, mapped, sizeof(int) * (size_t)in->nargs);
    args[k] = seq_kv(a, args[k]);
    args[k + 1] = seq_kv(a, args[k + 1]);
    int r = seq_piece(a, in, args, 0, 0, true);
    res[0] = r;
    if (fwd) { /* lse [B,H,T/n]: the rank's queries' rows */
        res[1] = r + 1;
        return;
    }
    for (int g = 1; g < 3; g++) {
        double rs[IR_NATTRS_REDUCE_SCATTER_SEQ] = {[IR_ATTR_AXIS] = a->axis}; /* overlap 0, batch 0 */
        int full = r + g;
        res[g] = ir_emit(a->m, a->dst, IR_OP_REDUCE_SCATTER_SEQ, &full, 1, rs, NULL, NULL);
    }
}

static void lower_attention(seq_split *a, const ir_instr *in, const int *args, int *res)
{
    switch (a->comm) {
    case IR_CP_P2P:
        if (ir_ops[in->op].nres == 2)
            res[0] = seq_ring_forward(a, in, args), res[1] = res[0] + 1;
        else
            seq_ring_backward(a, in, args, res);
        return;
    case IR_CP_ALL_GATHER:
        seq_gathered(a, in, args, res);
        return;
    case IR_CP_A2A:
        seq_ulysses(a, in, args, res);
        return;
    }
}

static int seq_reshape(seq_split *a, int v, ir_type t)
{
    return ir_emit(a->m, a->dst, IR_OP_RESHAPE, &v, 1, NULL, NULL, &t);
}

/* An MoE layer's rows are the rank's tokens flattened, [B T/n, X]. New value v of such rows, whole
 * type `whole` [B T, X], as every rank's: each sequence's T rows together (its chunks in rank
 * order: the router's sums do not mind), made once. */
static int seq_whole_rows(seq_split *a, int v, const ir_type *whole)
{
    if (*seq_moved(a, v) < 0) {
        int64_t seq[3] = {whole->dims[0] / a->T, a->T, whole->dims[1]};
        double attrs[IR_NATTRS_ALL_GATHER_SEQ] = {[IR_ATTR_AXIS] = a->axis}; /* overlap 0, batch 0 */
        int s = seq_reshape(a, v, pass_seq_local(ir_tensor(whole->dtype, 3, seq), 1, a->axis, a->n));
        int r = seq_reshape(a, ir_emit(a->m, a->dst, IR_OP_ALL_GATHER_SEQ, &s, 1, attrs, NULL, NULL), *whole);
        *seq_moved(a, v) = r;
    }
    return *seq_moved(a, v);
}

/* New value g [B T, X], a gradient of seq_whole_rows' value, back to the rank's rows: summed over
 * the ranks that read them (every rank's router loss reads every row; each rank's is seeded 1/n
 * of the one rank's loss, as its lm loss is, so the sum is the one rank's gradient). */
static int seq_rank_rows(seq_split *a, int g, const ir_type *whole)
{
    int64_t seq[3] = {whole->dims[0] / a->T, a->T, whole->dims[1]};
    double attrs[IR_NATTRS_REDUCE_SCATTER_SEQ] = {[IR_ATTR_AXIS] = a->axis}; /* overlap 0, batch 0 */
    int s = seq_reshape(a, g, ir_tensor(whole->dtype, 3, seq));
    s = ir_emit(a->m, a->dst, IR_OP_REDUCE_SCATTER_SEQ, &s, 1, attrs, NULL, NULL);
    return seq_reshape(a, s, pass_seq_local(*whole, 0, a->axis, a->n));
}

static int lower_router_loss(seq_split *a, const ir_func *src, const ir_instr *in, const int *mapped)
{
    int args[3], first = in->op == IR_OP_MOE_AUX_LOSS_GRAD; /* (dloss, logits, ids) */
    for (int i = 0; i < in->nargs; i++)
        args[i] = i < first ? mapped[i] : seq_whole_rows(a, mapped[i], &src->vals[in->args[i]].type);
    int r = ir_emit(a->m, a->dst, in->op, args, in->nargs, in->attr, NULL, NULL);
    return first ? seq_rank_rows(a, r, &src->vals[in->res[0]].type) : r;
}

static int lower_capacity(seq_split *a, const ir_func *src, const ir_instr *in, const int *mapped)
{
    const ir_type *t = &src->vals[in->res[0]].type;
    int args[3];
    for (int i = 0; i < 3; i++)
        args[i] = seq_whole_rows(a, mapped[i], &src->vals[in->args[i]].type);
    double attrs[IR_MAX_ATTRS];
    memcpy(attrs, in->attr, sizeof attrs);
    attrs[IR_ATTR_MOE_CAPACITY_CP] = a->n;
    attrs[IR_ATTR_MOE_CAPACITY_SEQ] = (double)a->T;
    int r = ir_emit(a->m, a->dst, IR_OP_MOE_CAPACITY, args, 3, attrs, NULL, NULL);
    int64_t seq[3] = {t->dims[0] / a->T, a->T, t->dims[1]};
    double slice[IR_NATTRS_LOCAL_SLICE_SEQ] = {[IR_ATTR_AXIS] = a->axis}; /* overlap 0, batch 0 */
    int s = seq_reshape(a, r, ir_tensor(t->dtype, 3, seq));
    s = ir_emit(a->m, a->dst, IR_OP_LOCAL_SLICE_SEQ, &s, 1, slice, NULL, NULL);
    return seq_reshape(a, s, pass_seq_local(*t, 0, a->axis, a->n));
}

static void seq_free(seq_split *a)
{
    free(a->moved);
    a->moved = NULL, a->cap = 0;
}

/* Attention over split tokens (q, k, v the rank's chunks of every sequence): lowered as cp_comm_type
 * says; its results hold the rank's tokens (the forward's lse [B,H,T] along dimension 2), but a2a's
 * lse, which stays on the rank's block of the heads. */
static bool attention_over_tokens(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    bool forward = ir_ops[in->op].nres == 2;
    int k = forward ? 1 : 2;
    for (int a = k - 1; a <= k + 1; a++)
        if (c->at[args[a]].dim != 1)
            return fail(c, "attention over values not split along the sequence", in);
    lower_attention(&c->seq, in, args, res);
    for (int r = 0; r < in->nres; r++) {
        bool lse = forward && r == 1;
        note(c, res[r], (placement){lse ? (c->seq.comm == IR_CP_A2A ? -1 : 2) : 1, false, false, false});
    }
    return true;
}

/* Attention reads whole sequences; its heads may be split (column-parallel q, k, v). With
 * dropout, the attributes head_offset and heads (ops.def) then name this rank's first head and
 * the whole head count. */
/* Attention and its dropout twins, heads split over tp. A dropout twin's mask is drawn by the
 * whole heads: tp splits them outermost (the projections' weights are split by heads before any
 * exchange), so a tp rank's first head is tp_rank heads/tp, and the source's head_offset (a2a's
 * cp term, cp_rank H/cp) indexes within the rank's heads/tp: it shrinks by tp. */
static bool rule_attention(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    if (c->tokens)
        return attention_over_tokens(c, in, args, res);
    bool forward = ir_ops[in->op].nres == 2, dropout = ir_attr_index(in->op, "head_offset") >= 0;
    for (int a = 0; a < in->nargs; a++)
        args[a] = every_token(c, args[a]);
    int q = args[forward ? 0 : 1], heads = c->at[q].dim;
    if (dropout && heads >= 0 && heads != 2)
        return fail(c, "attention dropout with q split other than by heads", in);
    *res = emit(c, in->op, args, in->nargs, in->attr, NULL, NULL, (placement){heads, false, false, false});
    if (dropout && heads >= 0) {
        int k = IR_ATTR_ATTENTION_DROPOUT_HEAD_OFFSET; /* the _GRAD twin's too (ir.c) */
        ir_instr *made = &c->dst->instrs[c->dst->vals[*res].def];
        made->attr[k] = in->attr[k] / c->n;
        for (int a = IR_AXIS_NONE + 1; a < IR_NUM_AXES; a++)
            made->per_rank[k].step[a] = in->per_rank[k].step[a] / c->n;
        made->per_rank[k].step[c->axis] = in->attr[IR_ATTR_ATTENTION_DROPOUT_HEADS] / c->n;
    }
    if (forward) /* lse [B,H,T]: heads are dimension 1 */
        place(c, *res + 1, (placement){heads >= 0 ? 1 : -1, false, false, false});
    return true;
}

/* An input or constant is placed as its type records (context parallelism's tokens and targets). */
static bool rule_source(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    (void)args;
    const ir_type *t = &c->src->vals[in->res[0]].type;
    *res = emit(c, in->op, NULL, 0, in->attr, in->sym, t, (placement){ir_shard_dim(t, c->axis), false, false, false});
    c->dst->instrs[c->dst->ninstrs - 1].role = in->role;
    return true;
}

/* A global is placed as its type records (the model builder's placement, or shard_globals'). */
static bool rule_global(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    (void)args;
    int dim = ir_shard_dim(&c->m->globals[in->global].type, c->axis);
    *res = placed(c, in->op, ir_global_ref(c->m, c->dst, in->global), (placement){dim, false, false, false});
    return true;
}

static bool rule_output(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    (void)res;
    args[0] = every_token(c, args[0]);
    emit(c, in->op, args, 1, NULL, in->sym, NULL, (placement){-1, false, false, false});
    c->dst->instrs[c->dst->ninstrs - 1].role = in->role;
    return true;
}

static bool rule_store(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    (void)res;
    if (c->tokens) { /* a sum over the rank's tokens, its share, as it is: data_parallel sums it over dp_cp */
        emit(c, in->op, args, 2, NULL, NULL, NULL, (placement){-1, false, false, false});
        return true;
    }
    switch (store_partial_grad(c, in, args)) {
    case 1: return true;
    case -1: return false;
    default: break;
    }
    args[1] = c->at[args[1]].seq ? every_token(c, args[1]) : complete(c, args[1]);
    if (c->at[args[1]].dim != c->at[args[0]].dim)
        return fail(c, "the value and its destination are split differently", in);
    emit(c, in->op, args, 2, NULL, NULL, NULL, (placement){-1, false, false, false});
    return true;
}

static bool rule_linear(shard_ctx *c, const ir_instr *in, int *args, int *res) { return rule_same(c, in, args, res, true); }
static bool rule_elementwise(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    return rule_same(c, in, args, res, false);
}

static bool rule_bias_add(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    args[0] = c->at[args[1]].dim == 0 ? complete(c, args[0]) : stream_value(c, args[0]);
    if ((c->at[args[1]].dim == 0) != (c->at[args[0]].dim == last_dim_of(c, args[0])))
        return fail(c, "bias and input split differently", in);
    *res = emit(c, in->op, args, 2, NULL, NULL, NULL, c->at[args[0]]);
    return true;
}

static bool rule_reshape(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    const ir_type *src_t = &c->src->vals[in->res[0]].type;
    if (c->at[args[0]].seq)
        args[0] = every_token(c, args[0]);
    placement p = c->at[args[0]];
    if (!reshape_dim(&c->src->vals[in->args[0]].type, src_t, p.dim, c->n, c->tokens, &p.dim))
        return fail(c, "a reshape that moves the split dimension", in);
    ir_type t = local_type(src_t, p.dim, c->n);
    *res = emit(c, in->op, args, 1, NULL, NULL, &t, p);
    return true;
}

/* rows of a value whole along its rows (the step's inputs) */
static bool rule_rows(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    if (c->at[args[0]].seq)
        args[0] = every_token(c, args[0]);
    if (c->at[args[0]].dim == 0 || c->at[args[0]].partial)
        return fail(c, "rows of a value split along them", in);
    *res = emit(c, in->op, args, 1, in->attr, NULL, NULL, c->at[args[0]]);
    return true;
}

/* shift_seq {by, count} of new value v [B,L,...] of the rank's tokens, by = start + step rank of
 * the axis: its rows [by, by + count), 0 outside v */
static int shift_window(shard_ctx *c, int v, int64_t start, int64_t step, int64_t count)
{
    placement split = {1, false, false, false};
    double at[IR_NATTRS_SHIFT_SEQ] = {[IR_ATTR_SHIFT_SEQ_BY] = (double)start, [IR_ATTR_SHIFT_SEQ_COUNT] = (double)count};
    int w = emit(c, IR_OP_SHIFT_SEQ, &v, 1, at, NULL, NULL, split);
    if (step)
        ir_set_per_rank(c->dst, w, IR_ATTR_SHIFT_SEQ_BY, (double)start, (double)step, c->axis);
    return w;
}

/* v's rows [start + step rank, .. + len) put at rows [place, place + len) of a value of `count`
 * rows, 0 elsewhere */
static int put_window(shard_ctx *c, int v, int64_t start, int64_t step, int64_t len, int64_t place, int64_t count)
{
    return shift_window(c, shift_window(c, v, start, step, len), -place, 0, count);
}

static int add_placed(shard_ctx *c, int x, int y)
{
    int xy[2] = {x, y};
    return emit(c, IR_OP_ADD, xy, 2, NULL, NULL, NULL, (placement){1, false, false, false});
}

/* shift_seq {by = s, count = T} of x split along the sequence over cp (the rank's balanced chunks
 * q0 = r and q1 = 2n-1-r of c = T/2n tokens each, ir_cp_position): each chunk's rows rolled |s| within
 * it, and the |s| rows that cross its edge from its neighbour chunk in the whole sequence (s > 0:
 * the first s rows of the chunk after it; s < 0: the last -s of the one before it; 0 past the
 * sequence). Each rank's two edges of |s| rows (s > 0: its chunks' heads, else their tails) are
 * all-gathered over cp (E [B,2|s|n,...], rank q's at 2|s|q: q0's, then q1's), and each chunk picks
 * its neighbour's from them by a rank term:
 *   s > 0  chunk r's successor r+1: rank r+1's q0 (r < n-1), or the rank's own q1 (r = n-1);
 *          chunk 2n-1-r's successor 2n-r: rank r-1's q1 (r > 0), the end of the sequence (r = 0)
 *   s < 0  chunk r's predecessor r-1: rank r-1's q0 (r > 0), the start (r = 0);
 *          chunk 2n-1-r's predecessor 2n-2-r: rank r+1's q1 (r < n-1), the rank's own q0 (r = n-1)
 * where an out-of-range window reads zeros (the ranks the other case names). The gradient,
 * shift_seq {by = -s}, is the reverse exchange by the same rule. Cost: an all_gather of 2|s| rows a
 * rank, and shift_seq copies of the rank's 2c rows. */
static bool shift_over_tokens(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    int x = args[0];
    int64_t L = c->dst->vals[x].type.dims[1], half = L / 2, n = c->n, s = (int64_t)in->attr[IR_ATTR_SHIFT_SEQ_BY];
    int64_t u = s < 0 ? -s : s;
    if ((int64_t)in->attr[IR_ATTR_SHIFT_SEQ_COUNT] == L * n && u >= L * n) { /* every position past the sequence */
        double zero[IR_NATTRS_SHIFT_SEQ] = {[IR_ATTR_SHIFT_SEQ_BY] = (double)L, [IR_ATTR_SHIFT_SEQ_COUNT] = (double)L};
        *res = emit(c, in->op, args, 1, zero, NULL, NULL, c->at[x]);
        return true;
    }
    if ((int64_t)in->attr[IR_ATTR_SHIFT_SEQ_COUNT] != L * n || u > half || L % 2)
        return fail(c, "a sequence shift over split tokens that keeps fewer positions or crosses more than a chunk",
                    in);
    if (u == 0) {
        *res = emit(c, in->op, args, 1, in->attr, NULL, NULL, c->at[x]);
        return true;
    }
    int edges = add_placed(c, put_window(c, x, s > 0 ? 0 : half - u, 0, u, 0, 2 * u),
                           put_window(c, x, s > 0 ? half : L - u, 0, u, u, 2 * u));
    int all = collective_once(c, &c->gathered, IR_OP_ALL_GATHER_SEQ, edges, false, (placement){-1, false, false, false});
    int r = -1;
    for (int j = 0; j < 2; j++) {
        int64_t own_start = s > 0 ? j * half + s : j * half, own_place = s > 0 ? j * half : j * half + u;
        int64_t edge_place = s > 0 ? j * half + half - u : j * half;
        int part = half > u ? put_window(c, x, own_start, 0, half - u, own_place, L) : -1;
        int64_t start, step = 2 * u; /* the neighbour's edge in `all`, rank r's: start + 2u r */
        if (s > 0)
            start = j == 0 ? 2 * u : -u;
        else
            start = j == 0 ? -2 * u : 3 * u;
        int edge = put_window(c, all, start, step, u, edge_place, L);
        part = part >= 0 ? add_placed(c, part, edge) : edge;
        if ((s > 0) == (j == 0)) { /* the rank at the end of the first half holds this chunk's neighbour */
            int64_t from = s > 0 ? half : half - u; /* its own other chunk's head or tail */
            int mine = put_window(c, x, from + 2 * half * (n - 1), -2 * half, u, edge_place, L);
            part = add_placed(c, part, mine);
        }
        r = r >= 0 ? add_placed(c, r, part) : part;
    }
    *res = r;
    return true;
}

/* every token of x complete (a partial sum summed, a sequence split gathered), its placement kept off
 * the sequence; over split tokens, the exchange of the chunks' edges (shift_over_tokens) */
static bool rule_shift_seq(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    args[0] = every_token(c, args[0]);
    if (c->tokens && c->at[args[0]].dim == 1 && !c->at[args[0]].partial)
        return shift_over_tokens(c, in, args, res);
    if (c->at[args[0]].dim == 1)
        return fail(c, "a sequence shift of a value split along its sequence", in);
    *res = emit(c, in->op, args, 1, in->attr, NULL, NULL, c->at[args[0]]);
    return true;
}

/* of values split alike, not along their rows */
static bool rule_concat_rows(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    for (int a = 0; a < 2; a++)
        if (c->at[args[a]].seq)
            args[a] = every_token(c, args[a]);
    if (c->at[args[0]].dim != c->at[args[1]].dim || c->at[args[0]].dim == 0 || c->at[args[0]].partial ||
        c->at[args[1]].partial)
        return fail(c, "stacking rows of values split differently, or along their rows", in);
    *res = emit(c, in->op, args, 2, NULL, NULL, NULL, c->at[args[0]]);
    return true;
}

/* x's parts placed as x (a partial sum's parts partial), which must not split the last dimension;
 * a part summed over heads split over the axis is a partial sum of this rank's heads */
static bool rule_split_last_dim(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    placement p = c->at[args[0]];
    int last = last_dim_of(c, args[0]);
    if (p.dim == last)
        return fail(c, "a split along the dimension split over the axis", in);
    *res = emit(c, in->op, args, 1, in->attr, NULL, NULL, p);
    for (int k = 0; k < 2; k++)
        if ((int)in->attr[IR_ATTR_SPLIT_LAST_DIM_SUM_HEADS] == k + 1 && p.dim == last - 1)
            place(c, *res + k, (placement){-1, true, false, false});
    return true;
}

/* complete operands placed alike, or a one-head operand whole beside heads split over the axis (the
 * result split as they are); a sequence slice beside a value of every token is gathered */
static bool rule_concat_last_dim(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    for (int a = 0; a < 2; a++)
        args[a] = complete(c, args[a]);
    if (c->at[args[0]].seq != c->at[args[1]].seq)
        for (int a = 0; a < 2; a++)
            args[a] = every_token(c, args[a]);
    int heads = last_dim_of(c, args[0]) - 1, d0 = c->at[args[0]].dim, d1 = c->at[args[1]].dim;
    bool one0 = c->dst->vals[args[0]].type.dims[heads] == 1, one1 = c->dst->vals[args[1]].type.dims[heads] == 1;
    placement p = c->at[args[0]];
    if (d0 < 0 && one0 && d1 == heads)
        p = c->at[args[1]];
    else if (!(d0 == d1 || (d1 < 0 && one1 && d0 == heads)) || d0 == heads + 1)
        return fail(c, "operands split differently, or along the channels joined", in);
    *res = emit(c, in->op, args, 2, NULL, NULL, NULL, p);
    return true;
}

/* a split over features stays split; a sum over split rows (tokens) is partial */
static bool rule_sum_rows(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    placement p = c->at[args[0]];
    bool features = p.dim == last_dim_of(c, args[0]);
    p = (placement){features ? 0 : -1, p.partial || (p.dim >= 0 && !features), false, false};
    *res = emit(c, in->op, args, 1, NULL, NULL, NULL, p);
    return true;
}

/* --- the MoE block (frontend/model.c) under tensor parallelism ---------------------------------
 * Every rank along the axis routes the micro-batch's N tokens alike: the block's input is
 * gathered (under sequence parallelism; reshape gathers a slice), so the router's scores,
 * losses, capacity and counts are the one rank's. The experts' weights [E, out, in] are split as
 * each expert's Linear (column-parallel up and gate: dim 1, row-parallel down: dim 2), so each
 * rank runs every routed row through its slice of the features, and the down projection's output
 * is a partial sum that the combine keeps: the block's output is reduce-scattered into the
 * residual stream as a dense MLP's (Megatron's expert tensor parallelism, with the tokens
 * gathered before the router as its allgather dispatcher does). Expert parallelism's exchanges
 * (an earlier pass's) move whole rows of every feature, partial ones too. */

/* v with every token (a sequence slice gathered), a partial sum kept */
static int gather_tokens(shard_ctx *c, int v) { return c->at[v].seq ? every_token(c, v) : v; }

/* v whole along the axis, or -1 (with c's error) where it is split */
static int whole(shard_ctx *c, int v, const ir_instr *in)
{
    v = every_token(c, v);
    return c->at[v].dim >= 0 ? (fail(c, "an operand split over the features", in), -1) : v;
}

/* Over split tokens an MoE layer's ops run on the rank's rows [B T/n, ...] as they are (its routed
 * pairs' [B T/n k, ...]; after expert parallelism's dispatch, the rows received, whole; the counts
 * the rank's own): op `in` with attrs, result k placed p[k]. */
static int on_rows(shard_ctx *c, const ir_instr *in, const int *args, const double *attrs, const placement *p)
{
    int r = emit(c, in->op, args, in->nargs, attrs, NULL, NULL, p[0]);
    for (int k = 1; k < in->nres; k++)
        place(c, r + k, p[k]);
    return r;
}

/* the router's ops: whole operands, whole results; over split tokens, results of the rank's rows
 * (a loss, a mean over them: the rank's) */
static bool rule_moe(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    if (c->tokens) {
        bool rows = false;
        for (int a = 0; a < in->nargs; a++)
            rows |= c->at[args[a]].dim == 0;
        placement p[IR_MAX_RES];
        for (int k = 0; k < in->nres; k++)
            p[k] = (placement){rows && c->src->vals[in->res[k]].type.ndim > 0 ? 0 : -1, false, false, false};
        int r = on_rows(c, in, args, in->attr, p);
        if (in->nres)
            *res = r;
        return true;
    }
    for (int a = 0; a < in->nargs; a++)
        if ((args[a] = whole(c, args[a], in)) < 0)
            return false;
    int r = emit(c, in->op, args, in->nargs, in->attr, NULL, NULL, (placement){-1, false, false, false});
    if (ir_ops[in->op].nres)
        *res = r;
    return true;
}

/* rows of operand 0 moved, masked or combined by whole operands: operand 0's placement, which
 * must not split the rows (over split tokens: the rank's rows, moved as they are) */
static bool rule_move_rows(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    if (c->tokens) {
        placement p[IR_MAX_RES] = {c->at[args[0]], {-1, false, false, false}, {-1, false, false, false}};
        *res = on_rows(c, in, args, in->attr, p);
        return true;
    }
    if (c->at[args[0]].seq || c->at[args[0]].dim == 0)
        return fail(c, "rows moved along a split dimension", in);
    for (int a = 1; a < in->nargs; a++)
        if ((args[a] = whole(c, args[a], in)) < 0)
            return false;
    *res = emit(c, in->op, args, in->nargs, in->attr, NULL, NULL, c->at[args[0]]);
    for (int r = 1; r < ir_ops[in->op].nres; r++) /* came, counts */
        place(c, *res + r, (placement){-1, false, false, false});
    return true;
}

/* --- split experts (expert parallelism's lowering: Megatron's all-to-all token dispatcher) ------
 *
 *     (perm, counts[E]) = moe_sort(ids)           xp[N k, H] = moe_permute(x, perm)
 *     (xr[C, H], came[n, E/n]) = all_to_all_v(xp, reshape(counts, [n, E/n]))     dispatch
 *     (xs, counts_local[E/n]) = moe_sort_runs(xr, came)      each local expert's rows together
 *       ... the experts' grouped GEMMs over xs by counts_local ...                 -> ys[C, H]
 *     (yb[N k, H], _) = all_to_all_v(moe_unsort_runs(ys, came), came)               combine
 *     y = moe_unpermute(yb, perm, w)
 *
 * C is the exact worst case, every token of every rank routed here: n N min(k, E/n) rows (a
 * token's k experts are distinct); with a capacity factor (moe_sort given moe_capacity's kept
 * weights, so only kept rows are counted and sent) at most the capacity, n (E/n) capacity rows
 * when fewer (the op's capacity attribute says which). */

/* all_to_all_v over the axis; capacity 0: rows is the exact worst case, else the expert capacity
 * that sized rows */
static int all_to_all_v(shard_ctx *c, int x, int splits, int64_t rows, int64_t capacity)
{
    int args[2] = {x, splits};
    double attrs[IR_NATTRS_ALL_TO_ALL_V] = {[IR_ATTR_AXIS] = c->axis, [IR_ATTR_ALL_TO_ALL_V_ROWS] = (double)rows,
                                            [IR_ATTR_ALL_TO_ALL_V_CAPACITY] = (double)capacity};
    int r = ir_emit(c->m, c->dst, IR_OP_ALL_TO_ALL_V, args, 2, attrs, NULL, NULL);
    note(c, r, (placement){-1, false, false, false});
    note(c, r + 1, (placement){-1, false, false, false});
    return r;
}

/* The most pairs an expert keeps of a rank's micro-batch: the capacity of the moe_capacity whose
 * kept weights the sort counts (0: dropless, every routed pair sent). */
static int64_t sort_capacity(const ir_func *f, const ir_instr *sort)
{
    if (sort->nargs < 2)
        return 0;
    const ir_instr *def = &f->instrs[f->vals[sort->args[1]].def];
    return def->op == IR_OP_MOE_CAPACITY ? (int64_t)def->attr[IR_ATTR_MOE_CAPACITY_CAPACITY] : 0;
}

/* After moe_permute `in` (made: xp, args[1] the new permutation): the dispatch; returns the rows
 * of the rank's experts, their local counts and the received splits remembered. */
static int dispatch(shard_ctx *c, const ir_instr *in, const int *args, int xp)
{
    const ir_instr *sort = &c->src->instrs[c->src->vals[in->args[1]].def];
    int counts = c->map[sort->res[1]];
    int64_t E = c->src->vals[sort->res[1]].type.dims[0], N = c->src->vals[in->args[0]].type.dims[0];
    int64_t k = c->src->vals[in->res[0]].type.dims[0] / N, local = E / c->n, most = k < local ? k : local;
    int64_t dims[2] = {c->n, local}, worst = c->n * N * most, capacity = sort_capacity(c->src, sort);
    bool by_capacity = capacity > 0 && c->n * local * capacity < worst;
    int splits = ir_reshape(c->m, c->dst, counts, 2, dims);
    note(c, splits, (placement){-1, false, false, false});
    int xr = all_to_all_v(c, xp, splits, by_capacity ? c->n * local * capacity : worst, by_capacity ? capacity : 0);
    int received[2] = {xr, xr + 1};
    int xs = emit(c, IR_OP_MOE_SORT_RUNS, received, 2, NULL, NULL, NULL, (placement){-1, false, false, true});
    place(c, xs + 1, (placement){-1, false, false, false});
    c->dispatched[args[1]] = xr + 1;
    c->dispatched[counts] = xs + 1;
    return xs;
}

/* moe_permute: over split experts its rows dispatched to their experts' ranks */
static bool rule_permute(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    if (!rule_move_rows(c, in, args, res))
        return false;
    if (!c->experts)
        return true;
    if (c->src->instrs[c->src->vals[in->args[1]].def].op != IR_OP_MOE_SORT)
        return snprintf(c->err, c->errlen, "%s: moe_permute %%%d's permutation is not moe_sort's: expert parallelism "
                        "dispatches the rows the sort ordered", c->src->name, in->res[0]), false;
    *res = dispatch(c, in, args, *res);
    return true;
}

/* moe_unpermute of the rows of the rank's experts: the combine first, back to the ranks they came
 * from, by the splits its permutation's dispatch received */
static bool rule_unpermute(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    if (c->experts && c->at[args[0]].routed) {
        int came = c->dispatched[args[1]];
        if (came < 0)
            return fail(c, "rows of the rank's experts combined by a permutation no dispatch made", in);
        int back[2] = {args[0], came};
        int yr = emit(c, IR_OP_MOE_UNSORT_RUNS, back, 2, NULL, NULL, NULL, (placement){-1, false, false, false});
        args[0] = all_to_all_v(c, yr, came, c->src->vals[in->args[0]].type.dims[0], 0);
    }
    return rule_move_rows(c, in, args, res);
}

/* (ids[, w]) -> (perm, counts): over split tokens the rank's pairs, its counts its share of the sum
 * over the micro-batch's (an output is summed over the axis: train_rank's load statistics) */
static bool rule_moe_sort(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    if (!c->tokens)
        return rule_moe(c, in, args, res);
    placement p[2] = {c->at[args[0]], {-1, true, false, false}};
    *res = on_rows(c, in, args, in->attr, p);
    return true;
}

/* A load-balancing loss (moe_aux_loss, seq_aux_loss: a product of two sums over the micro-batch's
 * or a sequence's tokens) over split rows: over every rank's rows, gathered, the same on every rank;
 * its gradient's rows back to the rank's */
static bool rule_router_loss(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    if (!c->tokens || c->at[args[in->nargs - 1]].dim != 0)
        return rule_moe(c, in, args, res);
    *res = lower_router_loss(&c->seq, c->src, in, args);
    note(c, *res, (placement){in->op == IR_OP_MOE_AUX_LOSS_GRAD ? 0 : -1, false, false, false});
    return true;
}

/* Token dropping over split rows ranks the pairs of the whole micro-batch in token order: every
 * rank ranks them all, gathered, and keeps its own rows of the result */
static bool rule_capacity(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    if (!c->tokens || c->at[args[2]].dim != 0)
        return rule_move_rows(c, in, args, res);
    *res = lower_capacity(&c->seq, c->src, in, args);
    note(c, *res, (placement){0, false, false, false});
    return true;
}

/* Expert parallelism's dispatch of the rank's routed rows (its result the rows received: whole) or
 * combine (back to them); over split tokens its room, the exact worst case, is the rank's rows' (a
 * capacity's stays: each rank's kept pairs of an expert are at most its capacity still) */
static bool rule_exchange(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    if (!c->tokens)
        return rule_move_rows(c, in, args, res);
    double attrs[IR_MAX_ATTRS];
    memcpy(attrs, in->attr, sizeof attrs);
    if (attrs[IR_ATTR_ALL_TO_ALL_V_CAPACITY] == 0)
        attrs[IR_ATTR_ALL_TO_ALL_V_ROWS] /= c->n;
    placement p[2] = {{c->at[args[0]].dim == 0 ? -1 : 0, false, false, false}, {-1, false, false, false}};
    *res = on_rows(c, in, args, attrs, p);
    return true;
}

/* (x[R,K], w[E,F,K] (tb) or [E,K,F], counts): a matmul per expert, w's dimensions 1 and 2 its
 * Linear's (as matmul_placement's, with x's rows whole); over split tokens, x's rows. The expert
 * weights are operand iw, the counts icounts (moe_grouped_matmul's 1 and 2; fp8_grouped_matmul's
 * quantized ones 2 and 4, beside their scale_invs, a scale an expert placed as the experts are) */
static bool grouped_matmul_at(shard_ctx *c, const ir_instr *in, int *args, int *res, int iw, int icounts, bool tb)
{
    if (c->experts) { /* the rows and counts of the rank's experts, whose weights it holds */
        if (!c->at[args[0]].routed || c->dispatched[args[icounts]] < 0 || c->at[args[iw]].dim != 0)
            return fail(c, "split experts over rows that were not dispatched to them", in);
        args[icounts] = c->dispatched[args[icounts]];
        *res = emit(c, in->op, args, in->nargs, in->attr, NULL, NULL, c->at[args[0]]);
        return true;
    }
    if (c->tokens) {
        *res = on_rows(c, in, args, in->attr, &c->at[args[0]]);
        return true;
    }
    if ((args[icounts] = whole(c, args[icounts], in)) < 0)
        return false;
    args[0] = gather_tokens(c, args[0]);
    args[iw] = complete(c, args[iw]);
    int dx = c->at[args[0]].dim, dw = c->at[args[iw]].dim;
    bool x_k = dx == 1, w_k = dw == (tb ? 2 : 1), w_n = dw == (tb ? 1 : 2);
    if (dx == 0 || dw == 0 || x_k != w_k || (w_n && c->at[args[0]].partial))
        return fail(c, "operands split along different dimensions", in);
    placement p = {w_n ? 1 : -1, x_k || c->at[args[0]].partial, false, false};
    *res = emit(c, in->op, args, in->nargs, in->attr, NULL, NULL, p);
    return true;
}

static bool rule_grouped_matmul(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    return grouped_matmul_at(c, in, args, res, 1, 2, in->attr[IR_ATTR_MOE_GROUPED_MATMUL_TB] != 0);
}

/* (a[R,P], b[R,Q], counts) -> [E,P,Q] (operands 0, ib and icounts: moe_grouped_wgrad's 0, 1, 2,
 * fp8_grouped_wgrad's quantized 0, 2, 4 beside their whole scale_invs): split where a's or b's
 * features are; partial where one is; over split tokens the rank's share */
static bool grouped_wgrad_at(shard_ctx *c, const ir_instr *in, int *args, int *res, int ib, int icounts)
{
    if (c->tokens) {
        *res = on_rows(c, in, args, in->attr, &(placement){-1, true, false, false});
        return true;
    }
    if ((args[icounts] = whole(c, args[icounts], in)) < 0)
        return false;
    args[0] = gather_tokens(c, args[0]);
    args[ib] = gather_tokens(c, args[ib]);
    const placement *a = &c->at[args[0]], *b = &c->at[args[ib]];
    if (a->dim == 0 || b->dim == 0 || (a->dim >= 0 && b->dim >= 0) || (a->partial && b->partial) ||
        (a->partial && b->dim >= 0) || (b->partial && a->dim >= 0))
        return fail(c, "operands split along different dimensions", in);
    placement p = {a->dim >= 0 ? 1 : b->dim >= 0 ? 2 : -1, a->partial || b->partial, false, false};
    *res = emit(c, in->op, args, in->nargs, in->attr, NULL, NULL, p);
    return true;
}

static bool rule_grouped_wgrad(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    return grouped_wgrad_at(c, in, args, res, 1, 2);
}

/* --- FP8 experts (ops.def's fp8_grouped_*): a scale per expert ------------------------------ */

/* Over split experts: the rank's experts' rows (their counts the dispatch's local ones) or weights,
 * each expert's amax and scale its own, split with the experts; else false with c's error */
static bool fp8_groups_of_rank(shard_ctx *c, const ir_instr *in, int *args, int icounts)
{
    if (icounts < 0 ? c->at[args[0]].dim != 0 : !c->at[args[0]].routed || c->dispatched[args[icounts]] < 0)
        return fail(c, "FP8 experts' rows or weights that are not the rank's experts'", in);
    if (icounts >= 0)
        args[icounts] = c->dispatched[args[icounts]];
    return true;
}

/* (x[R,K], counts) or (w[E,...]) -> amax[E]: as fp8_amax's, a split operand's amaxes max-all-reduced
 * over the axis (x's features, a weight's Linear dimensions); over split experts the rank's own */
static bool rule_fp8_grouped_amax(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    int icounts = in->nargs == 2 ? 1 : -1;
    if (c->tokens)
        return fail(c, "FP8 experts over split tokens (not built yet: drop --fp8-format or context_parallel_size)", in);
    if (c->experts) {
        if (!fp8_groups_of_rank(c, in, args, icounts))
            return false;
        *res = emit(c, in->op, args, in->nargs, NULL, NULL, NULL, (placement){0, false, false, false});
        return true;
    }
    if (icounts >= 0 && (args[icounts] = whole(c, args[icounts], in)) < 0)
        return false;
    args[0] = complete(c, icounts >= 0 ? gather_tokens(c, args[0]) : args[0]);
    if (c->at[args[0]].dim == 0)
        return fail(c, "FP8 experts' rows or weights split along the experts or rows", in);
    placement whole_amax = {-1, false, false, false};
    *res = emit(c, in->op, args, in->nargs, NULL, NULL, NULL, whole_amax);
    if (c->at[args[0]].dim > 0) {
        double max_attrs[IR_NATTRS_ALL_REDUCE] = {[IR_ATTR_AXIS] = c->axis, [IR_ATTR_ALL_REDUCE_MAX] = 1};
        *res = emit(c, IR_OP_ALL_REDUCE, res, 1, max_attrs, NULL, NULL, whole_amax);
    }
    return true;
}

/* (x, amax[E][, counts]) -> (q placed as x, scale_inv as the amax) */
static bool rule_fp8_grouped_quantize(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    int icounts = in->nargs == 3 ? 2 : -1;
    if (c->tokens)
        return fail(c, "FP8 experts over split tokens (not built yet: drop --fp8-format or context_parallel_size)", in);
    if (c->experts && !fp8_groups_of_rank(c, in, args, icounts))
        return false;
    if (!c->experts && icounts >= 0 && (args[icounts] = whole(c, args[icounts], in)) < 0)
        return false;
    if (!c->experts)
        args[0] = complete(c, icounts >= 0 ? gather_tokens(c, args[0]) : args[0]);
    if (c->at[args[1]].dim != (c->experts ? 0 : -1) || c->at[args[1]].partial)
        return fail(c, "an amax that is not the experts' own", in);
    *res = emit(c, in->op, args, in->nargs, in->attr, NULL, NULL, c->at[args[0]]);
    place(c, *res + 1, c->at[args[1]]);
    return true;
}

/* (qx, sx, qw, sw, counts[, hdy]): moe_grouped_matmul's placement of qx and qw */
static bool rule_fp8_grouped_matmul(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    if (c->tokens)
        return fail(c, "FP8 experts over split tokens (not built yet: drop --fp8-format or context_parallel_size)", in);
    return grouped_matmul_at(c, in, args, res, 2, 4, in->attr[IR_ATTR_FP8_GROUPED_MATMUL_TB] != 0);
}

/* (qa, sa, qb, sb, counts): moe_grouped_wgrad's placement of qa and qb */
static bool rule_fp8_grouped_wgrad(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    if (c->tokens)
        return fail(c, "FP8 experts over split tokens (not built yet: drop --fp8-format or context_parallel_size)", in);
    return grouped_wgrad_at(c, in, args, res, 2, 4);
}

/* (dy, yp, perm, w) -> (dyp as dy, dw = dy . yp over the features: partial where yp is partial
 * or split over them); over split tokens dyp the rank's pairs as yp, dw its rows as dy */
static bool rule_unpermute_grad(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    if (c->tokens) {
        placement p[2] = {c->at[args[1]], c->at[args[0]]};
        *res = on_rows(c, in, args, in->attr, p);
        return true;
    }
    for (int a = 0; a < in->nargs; a++)
        if (a != 1 && (args[a] = whole(c, args[a], in)) < 0)
            return false;
    args[1] = gather_tokens(c, args[1]);
    if (c->at[args[1]].dim == 0)
        return fail(c, "rows moved along a split dimension", in);
    bool partial = c->at[args[1]].partial || c->at[args[1]].dim >= 0;
    *res = emit(c, in->op, args, 4, in->attr, NULL, NULL, (placement){-1, false, false, false});
    place(c, *res + 1, (placement){-1, partial, false, false});
    return true;
}

static bool rule_embedding(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    placement p = {c->at[args[1]].dim, false, false, false}; /* [ids..., C]: split as the ids (the rank's tokens) */
    double attrs[IR_NATTRS_EMBEDDING] = {[IR_ATTR_EMBEDDING_VOCAB_START] = 0, [IR_ATTR_EMBEDDING_VOCAB_SIZE] = 0};
    int64_t local = c->dst->vals[args[0]].type.dims[0];
    bool vocab_parallel = c->at[args[0]].dim == 0; /* other shards' rows are zero here */
    if (vocab_parallel) {
        attrs[IR_ATTR_EMBEDDING_VOCAB_SIZE] = (double)(local * c->n);
        p.partial = true;
    }
    *res = emit(c, in->op, args, 2, attrs, NULL, NULL, p);
    if (vocab_parallel)
        rank_offset(c, *res, IR_ATTR_EMBEDDING_VOCAB_START, local);
    return true;
}

/* the gradient of a vocab-parallel table (tp's), or of the rank's tokens' rows (split ids): a sum over
 * them, its share */
static bool rule_embedding_grad(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    if (c->at[args[1]].dim >= 0) {
        *res = emit(c, in->op, args, 2, in->attr, NULL, NULL, (placement){-1, true, false, false});
        return true;
    }
    args[0] = every_token(c, args[0]);
    double vocab = in->attr[IR_ATTR_EMBEDDING_GRAD_VOCAB] / c->n;
    double attrs[IR_NATTRS_EMBEDDING_GRAD] = {[IR_ATTR_EMBEDDING_GRAD_VOCAB] = vocab,
                                              [IR_ATTR_EMBEDDING_GRAD_VOCAB_START] = 0};
    *res = emit(c, in->op, args, 2, attrs, NULL, NULL, (placement){0, false, false, false});
    rank_offset(c, *res, IR_ATTR_EMBEDDING_GRAD_VOCAB_START, (int64_t)vocab);
    return true;
}

static bool rule_cross_entropy(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    args[0] = every_token(c, args[0]);
    *res = c->at[args[0]].dim == last_dim_of(c, args[0])
               ? lower_cross_entropy(c, in, args[0], args[1])
               : emit(c, in->op, args, 2, NULL, NULL, NULL, (placement){-1, false, false, false});
    return true;
}

static bool rule_cross_entropy_grad(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    args[1] = every_token(c, args[1]);
    *res = c->at[args[1]].dim == last_dim_of(c, args[1])
               ? lower_cross_entropy_grad(c, in, args)
               : emit(c, in->op, args, 3, NULL, NULL, NULL, c->at[args[1]]); /* placed as the logits */
    return *res >= 0 || fail(c, "the gradient of a cross entropy that was not lowered", in);
}

/* A sequence collective an earlier pass made over another axis (context parallelism's all-gather
 * of k, v over cp and reduce-scatter of their gradients, and the local slice that takes a
 * token-dropping capacity's rows back to the rank's): along this axis its operand's placement
 * passes through (heads split over tp stay split), a partial sum completed first. */
static bool rule_seq_collective(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    if ((ir_axis)in->attr[IR_ATTR_AXIS] == c->axis)
        return fail(c, "a sequence collective over the axis being split", in);
    args[0] = complete(c, args[0]);
    if (c->at[args[0]].dim == ir_seq_dim(in) || c->at[args[0]].seq)
        return fail(c, "a sequence collective over a value split along its sequence", in);
    *res = emit(c, in->op, args, 1, in->attr, NULL, NULL, c->at[args[0]]);
    return true;
}

/* Context parallelism's ops (the run over cp's lowerings): ring_shift moves a value between
 * the cp ranks as it is, attention_merge combines two ring pieces head by head and row by row,
 * cp_all_to_all moves each head block of the tp rank's heads as a whole, all_reduce combines a
 * value (an FP8 amax) element by element; so each result k is placed as operand k (q, k, v and
 * the outputs split by heads over tp), complete. */
static bool rule_cp(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    if (ir_op_has(in->op, IR_OPF_COLLECTIVE) && (ir_axis)in->attr[IR_ATTR_AXIS] == c->axis)
        return fail(c, "a context-parallel collective over the axis being split", in);
    for (int a = 0; a < in->nargs; a++) {
        args[a] = complete(c, args[a]);
        if (c->at[args[a]].seq)
            return fail(c, "a context-parallel op over a value split along its sequence", in);
    }
    *res = emit(c, in->op, args, in->nargs, in->attr, NULL, NULL, c->at[args[0]]);
    for (int k = 1; k < in->nres; k++)
        place(c, *res + k, c->at[args[k]]);
    return true;
}

/* The rules, by ops.def's shard column (ORDER ir_shard_rule). */
typedef bool (*shard_rule_fn)(shard_ctx *c, const ir_instr *in, int *args, int *res);
static const shard_rule_fn rules[IR_NUM_SHARD_RULES] = {
    [IR_SHARD_SOURCE] = rule_source,
    [IR_SHARD_GLOBAL] = rule_global,
    [IR_SHARD_OUTPUT] = rule_output,
    [IR_SHARD_STORE] = rule_store,
    [IR_SHARD_LINEAR] = rule_linear,
    [IR_SHARD_ELEMENTWISE] = rule_elementwise,
    [IR_SHARD_BIAS_ADD] = rule_bias_add,
    [IR_SHARD_RESHAPE] = rule_reshape,
    [IR_SHARD_ROWS] = rule_rows,
    [IR_SHARD_CONCAT_ROWS] = rule_concat_rows,
    [IR_SHARD_SPLIT_LAST_DIM] = rule_split_last_dim,
    [IR_SHARD_CONCAT_LAST_DIM] = rule_concat_last_dim,
    [IR_SHARD_SHIFT_SEQ] = rule_shift_seq,
    [IR_SHARD_MATMUL] = rule_matmul,
    [IR_SHARD_SUM_ROWS] = rule_sum_rows,
    [IR_SHARD_EMBEDDING] = rule_embedding,
    [IR_SHARD_EMBEDDING_GRAD] = rule_embedding_grad,
    [IR_SHARD_STREAM] = rule_stream,
    [IR_SHARD_DROPOUT] = rule_dropout,
    [IR_SHARD_ATTENTION] = rule_attention,
    [IR_SHARD_CROSS_ENTROPY] = rule_cross_entropy,
    [IR_SHARD_CROSS_ENTROPY_GRAD] = rule_cross_entropy_grad,
    [IR_SHARD_ROPE] = rule_rope,
    [IR_SHARD_MOE] = rule_moe,
    [IR_SHARD_MOE_SORT] = rule_moe_sort,
    [IR_SHARD_ROUTER_LOSS] = rule_router_loss,
    [IR_SHARD_CAPACITY] = rule_capacity,
    [IR_SHARD_MOVE_ROWS] = rule_move_rows,
    [IR_SHARD_PERMUTE] = rule_permute,
    [IR_SHARD_UNPERMUTE] = rule_unpermute,
    [IR_SHARD_EXCHANGE] = rule_exchange,
    [IR_SHARD_GROUPED_MATMUL] = rule_grouped_matmul,
    [IR_SHARD_GROUPED_WGRAD] = rule_grouped_wgrad,
    [IR_SHARD_UNPERMUTE_GRAD] = rule_unpermute_grad,
    [IR_SHARD_FP8_AMAX] = rule_fp8_amax,
    [IR_SHARD_FP8_QUANTIZE] = rule_fp8_quantize,
    [IR_SHARD_FP8_MATMUL] = rule_fp8_matmul,
    [IR_SHARD_FP8_BLOCK_QUANTIZE] = rule_fp8_block_quantize,
    [IR_SHARD_FP8_SCALING] = rule_fp8_scaling,
    [IR_SHARD_FP8_GROUPED_AMAX] = rule_fp8_grouped_amax,
    [IR_SHARD_FP8_GROUPED_QUANTIZE] = rule_fp8_grouped_quantize,
    [IR_SHARD_FP8_GROUPED_MATMUL] = rule_fp8_grouped_matmul,
    [IR_SHARD_FP8_GROUPED_WGRAD] = rule_fp8_grouped_wgrad,
    [IR_SHARD_SEQ_COLLECTIVE] = rule_seq_collective,
    [IR_SHARD_CP] = rule_cp,
};

bool pass_shard_has_rule(ir_shard_rule kind) { return kind > IR_SHARD_NEVER && kind < IR_NUM_SHARD_RULES && rules[kind]; }

static bool rule(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    ir_shard_rule kind = ir_ops[in->op].shard;
    if (!pass_shard_has_rule(kind)) /* ops.def marks it NEVER: an earlier pass made what this one makes */
        return fail(c, "an op that ops.def says never reaches the shard pass", in);
    return rules[kind](c, in, args, res);
}

/* Rewrites source function index fi into the local graph of every rank along `axis`. A rule
 * writes its first result in res[0], and the others in res[k] where they do not follow it. */
static bool shard_func(ir_module *m, int fi, ir_axis axis, int n, pass_axis_split split, char *err, size_t errlen)
{
    const ir_func *src = m->funcs[fi];
    shard_ctx c = {m, src, ir_func_new(m, src->name, src->kind), axis, n, split.seq_dim >= 0, split.seq_dim,
                   split.tokens, .experts = split.experts, .err = err, .errlen = errlen};
    c.seq = (seq_split){.m = m, .dst = c.dst, .axis = axis, .n = n, .comm = split.comm,
                        .T = ir_cfg_int(m, IR_CFG_SEQ_LENGTH)};
    c.map = malloc(sizeof(int) * (size_t)(src->nvals + 1));
    c.complete_grad = calloc((size_t)m->nglobals + 1, sizeof(bool));
    bool ok = true;
    for (int i = 0; i < src->ninstrs && ok; i++) {
        const ir_instr *in = &src->instrs[i];
        int args[8], res[IR_MAX_RES];
        memset(res, -1, sizeof res);
        for (int a = 0; a < in->nargs && a < 8; a++)
            args[a] = c.map[in->args[a]];
        if (in->nargs > 8)
            ok = fail(&c, "too many operands", in);
        ok = ok && rule(&c, in, args, res) && !c.failed;
        for (int r = 1; r < in->nres; r++)
            res[r] = res[r] >= 0 ? res[r] : res[0] + r;
        if (ok && res[0] >= 0) /* an earlier run's rank terms (another axis's) the rule kept the attribute of */
            for (int k = 0; k < IR_MAX_ATTRS; k++) {
                ir_instr *made = &c.dst->instrs[c.dst->vals[res[0]].def];
                if (ir_rank_term_any(&in->per_rank[k]) && made->op == in->op && !ir_rank_term_any(&made->per_rank[k]) &&
                    made->attr[k] == in->attr[k])
                    made->per_rank[k] = in->per_rank[k];
            }
        for (int r = 0; ok && r < in->nres; r++) {
            c.map[in->res[r]] = res[r];
            keep_other_axes(&c, res[r], &src->vals[in->res[r]].type);
        }
    }
    seq_free(&c.seq);
    free(c.map);
    free(c.complete_grad);
    free(c.at);
    free(c.reduced);
    free(c.scattered);
    free(c.gathered);
    free(c.dispatched);
    free(c.ces);
    if (ok)
        ir_func_replace(m, fi, c.dst);
    return ok;
}

/* Parameters placed over tp, and their companions (gradients, working copies), become local
 * shards along the dimension the placement names, recorded in their layouts. */
static bool shard_globals(ir_module *m, int tp, char *err, size_t errlen)
{
    for (int g = 0; g < m->nglobals; g++) {
        ir_global *gl = &m->globals[g];
        const ir_global *param = &m->globals[ir_global_param(m, g)];
        int dim = ir_placement_dim(param->placement, param->type.ndim);
        if (dim < 0)
            continue;
        /* a later pass's split (ZeRO's): sharding comes first; expert parallelism's comes before */
        if (gl->layout.nsplits > (ir_layout_split(&gl->layout, IR_AXIS_EP) != NULL))
            return snprintf(err, errlen, "@%s is already split (layout) before tensor parallelism: run the shard pass "
                            "before data_parallel and optimizer", gl->name), false;
        if (gl->type.dims[dim] % tp)
            return snprintf(err, errlen, "@%s: dimension %d (%lld) is not divisible by tensor_model_parallel_size %d",
                            gl->name, dim, (long long)gl->type.dims[dim], tp), false;
        gl->type.dims[dim] /= tp;
        ir_shard_push(&gl->type, dim, IR_AXIS_TP);
        ir_layout_add(&gl->layout, IR_AXIS_TP, IR_SPLIT_DIM, dim);
    }
    return true;
}

bool pass_shard_axis(ir_module *m, ir_axis axis, int n, pass_axis_split split, char *err, size_t errlen)
{
    for (int f = 0; f < m->nfuncs; f++)
        if (!shard_func(m, f, axis, n, split, err, errlen))
            return false;
    return true;
}

/* Tensor parallelism: the pass over tp from Megatron's parameter placements, with sequence
 * parallelism over tp when asked. */
bool pass_shard(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen)
{
    int tp = (int)ir_cfg_int(m, IR_CFG_TENSOR_MODEL_PARALLEL_SIZE);
    if (tp <= 1)
        return true;
    if (!shard_globals(m, tp, err, errlen))
        return false;
    int seq_dim = ir_cfg_bool(m, IR_CFG_SEQUENCE_PARALLEL) ? (int)ir_cfg_int(m, IR_CFG_SEQUENCE_PARALLEL_DIM) : -1;
    return pass_shard_axis(m, IR_AXIS_TP, tp, (pass_axis_split){.seq_dim = seq_dim}, err, errlen);
}
