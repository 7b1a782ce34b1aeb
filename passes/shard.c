/* shard.c — tensor parallelism (config tensor_model_parallel_size = tp > 1) in Megatron's layout,
 * by sharding propagation. Parameters get placements from their role: column-parallel
 * (q, k, v, mlp up/gate: output features split), row-parallel (attention out, mlp down: input
 * features split) and vocab-parallel (word embedding, output head: vocabulary rows split). The
 * pass then rewrites every function into the local graph every tp rank runs, carrying for
 * each value which dimension is split over tp and whether it is a partial sum, and inserts
 * `all_reduce {axis=tp}` where an op needs a complete value: after row-parallel matmuls, the
 * vocab-parallel lookup, and the column-parallel input gradients. Cross entropy over split
 * logits is lowered to the vocab-parallel form (row max and sums combined over tp).
 * With sequence_parallel, the activations between the blocks (residual stream, norms, position
 * add) are split along the sequence instead of replicated: a partial sum headed there is
 * reduce-scattered rather than all-reduced, and a sequence slice entering a matmul (or anything
 * that needs every token) is all-gathered, as in Megatron's sequence parallelism.
 * Dropout ops draw their masks by each element's index in the whole tensor, so where their
 * operand is split the pass records the rank's block in their attributes. Such offsets (and the
 * vocab-parallel and position offsets) are rank terms, `step*tp` (ir_rank_term): one plan
 * serves every tp rank, and each resolves them when it loads the plan.
 * Types in the result are local shapes with the split dimension annotated {shard=[.., tp]}. */
#include "passes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int dim;                        /* the dimension split over tp, or -1 (replicated) */
    bool partial;                   /* a pending sum over tp */
    bool seq;                       /* dim splits the residual stream's tokens (sequence parallelism:
                                       [B,T,...] along T, dim 1, or along B, dim 0) */
} placement;

typedef struct {
    int logits, targets;            /* source values of a lowered cross entropy */
    int gmax, stats;                /* its combined row statistics in the new function */
} lowered_ce;

typedef struct {
    ir_module *m;
    const ir_func *src;
    ir_func *dst;
    int tp;
    bool sp;                        /* sequence parallelism */
    int sp_dim;                     /* the dimension it splits: 1 (the sequence) or 0 (batch rows) */
    int *map;                       /* source value -> new value */
    placement *at;                  /* per new value */
    int *reduced;                   /* new partial value -> its all_reduce, or -1 */
    int *scattered;                 /* new partial value -> its reduce_scatter_seq, or -1 */
    int *gathered;                  /* new sequence slice -> its all_gather_seq, or -1 */
    int cap;
    bool *complete_grad;            /* per global: a gradient some write completed before storing */
    lowered_ce *ces;
    int nces;
    char *err;
    size_t errlen;
} shard_ctx;

static const char *const column_parallel[] = {".attention.q.", ".attention.k.", ".attention.v.", ".mlp.up.",
                                              ".mlp.gate."};
static const char *const row_parallel[] = {".attention.out.weight", ".mlp.down.weight"};

/* The dimension of parameter `name` (or of its .grad/.bf16/.adam_* companions) split over tp. */
static int param_split_dim(const char *name)
{
    if (!strncmp(name, "embedding.word", 14) || !strncmp(name, "output.weight", 13))
        return 0;
    for (size_t i = 0; i < sizeof column_parallel / sizeof *column_parallel; i++)
        if (strstr(name, column_parallel[i]))
            return 0; /* weights [out, in] and biases [out] */
    for (size_t i = 0; i < sizeof row_parallel / sizeof *row_parallel; i++)
        if (strstr(name, row_parallel[i]))
            return 1;
    return -1;
}

static bool fail(shard_ctx *c, const char *what, const ir_instr *in)
{
    snprintf(c->err, c->errlen, "%s: %s (tensor parallelism of %s is not supported in this layout)", c->src->name,
             what, ir_ops[in->op].name);
    return false;
}

/* --- the new function ---------------------------------------------------------------------- */

static void grow(shard_ctx *c)
{
    if (c->dst->nvals + IR_MAX_RES + 8 < c->cap)
        return;
    int cap = 2 * c->cap + 64;
    c->at = realloc(c->at, sizeof(placement) * (size_t)cap);
    c->reduced = realloc(c->reduced, sizeof(int) * (size_t)cap);
    c->scattered = realloc(c->scattered, sizeof(int) * (size_t)cap);
    c->gathered = realloc(c->gathered, sizeof(int) * (size_t)cap);
    for (int i = c->cap; i < cap; i++)
        c->reduced[i] = c->scattered[i] = c->gathered[i] = -1;
    c->cap = cap;
}

/* Marks value v's type with its placement (the shapes are already local). */
static void place(shard_ctx *c, int v, placement p)
{
    ir_type *t = &c->dst->vals[v].type;
    for (int i = 0; i < t->ndim; i++)
        t->shard[i] = i == p.dim ? IR_AXIS_TP : IR_AXIS_NONE;
    t->partial = p.partial ? 1u << IR_AXIS_TP : 0;
    c->at[v] = p;
}

static int emit(shard_ctx *c, ir_op op, const int *args, int nargs, const double *attrs, const char *sym,
                const ir_type *explicit_type, placement p)
{
    grow(c);
    int r = ir_emit(c->m, c->dst, op, args, nargs, attrs, sym, explicit_type);
    for (int i = 0; r >= 0 && i < ir_ops[op].nres; i++)
        place(c, r + i, p);
    return r;
}

/* v as a complete value: a partial sum is all-reduced over tp (once, however often it is used). */
static int complete(shard_ctx *c, int v)
{
    if (!c->at[v].partial)
        return v;
    if (c->reduced[v] < 0) {
        double attrs[2] = {IR_AXIS_TP, 0};
        int r = emit(c, IR_OP_ALL_REDUCE, &v, 1, attrs, NULL, NULL, (placement){c->at[v].dim, false, c->at[v].seq});
        c->reduced[v] = r; /* after emit: it may move c->reduced */
    }
    return c->reduced[v];
}

static int last_dim_of(shard_ctx *c, int v) { return c->dst->vals[v].type.ndim - 1; }

/* Attribute k of value v's instruction is this rank's offset: its tp coordinate times `block`. */
static void tp_offset(shard_ctx *c, int v, int k, int64_t block) { ir_set_per_rank(c->dst, v, k, 0, (double)block, IR_AXIS_TP); }

/* This rank's share of the residual stream's tokens: its slice of the sequence (dim 1), or with
 * sequence_parallel_split batch its batch rows (dim 0). */
static placement seq_slice_at(const shard_ctx *c) { return (placement){c->sp_dim, false, true}; }

/* v split along the sequence: a partial sum is reduce-scattered (once). */
static int seq_slice(shard_ctx *c, int v)
{
    if (!c->at[v].partial)
        return v;
    if (c->scattered[v] < 0) {
        double attrs[3] = {IR_AXIS_TP, 0, c->sp_dim == 0}; /* axis, overlap (the comm_overlap pass's), batch */
        int r = emit(c, IR_OP_REDUCE_SCATTER_SEQ, &v, 1, attrs, NULL, NULL, seq_slice_at(c));
        c->scattered[v] = r;
    }
    return c->scattered[v];
}

/* v with every token: a sequence slice is all-gathered (once), a partial sum all-reduced. */
static int every_token(shard_ctx *c, int v)
{
    v = complete(c, v);
    if (!c->at[v].seq)
        return v;
    if (c->gathered[v] < 0) {
        double attrs[3] = {IR_AXIS_TP, 0, c->sp_dim == 0}; /* axis, overlap (the comm_overlap pass's), batch */
        int r = emit(c, IR_OP_ALL_GATHER_SEQ, &v, 1, attrs, NULL, NULL, (placement){-1, false, false});
        c->gathered[v] = r;
    }
    return c->gathered[v];
}

/* A replicated parameter's gradient under sequence parallelism is a partial sum over tp (each
 * rank saw its slice of the tokens): it is stored as it is, the global marked {partial=tp}, and
 * data_parallel.c sums it over tp once per step, in f32 and with one collective for them all,
 * instead of an all-reduce per layer on the critical path (Megatron reduces its layer-norm
 * gradients the same way). A gradient also written complete is completed at every write. */
static int store_partial_grad(shard_ctx *c, const ir_instr *in, const int *args)
{
    int g = ir_global_index_of(c->m, c->dst, args[0]);
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
    t->partial |= 1u << IR_AXIS_TP;
    emit(c, in->op, args, 2, NULL, NULL, NULL, (placement){-1, false, false});
    return 1;
}

/* An activation of the residual stream: a sequence slice under sequence parallelism (a partial
 * sum is reduce-scattered), else a complete value. */
static int stream_value(shard_ctx *c, int v) { return c->sp ? seq_slice(c, v) : complete(c, v); }

/* --- rules ---------------------------------------------------------------------------------- */

/* Where reshape moves a split dimension: to the new dimension with the same number of elements
 * before it (Megatron's layouts only ever split an outer factor: [B,T,H*D] <-> [B,T,H,D]). */
static bool reshape_dim(const ir_type *from, const ir_type *to, int dim, int tp, int *out)
{
    if (dim < 0)
        return *out = -1, true;
    int64_t before = 1, acc = 1;
    for (int i = 0; i < dim; i++)
        before *= from->dims[i];
    for (int j = 0; j < to->ndim; j++) {
        if (acc == before && to->dims[j] % tp == 0)
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

static bool rule_matmul(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    bool ta = in->attr[0] != 0, tb = in->attr[1] != 0;
    args[0] = every_token(c, args[0]);
    args[1] = every_token(c, args[1]);
    int sa = split_of_a(c, args[0], ta), sb = split_of_b(c, args[1], tb);
    placement p = {-1, false, false};
    if (sa == SPLIT_K && sb == SPLIT_K)
        p.partial = true; /* row-parallel: each rank holds a slice of the contraction */
    else if (sa == SPLIT_K || sb == SPLIT_K || (sa == SPLIT_M && sb == SPLIT_N))
        return fail(c, "operands split along different dimensions", in);
    int rank = ta ? 2 : c->dst->vals[args[0]].type.ndim;
    if (sb == SPLIT_N)
        p.dim = rank - 1;
    else if (sa == SPLIT_M)
        p.dim = ta ? 0 : c->at[args[0]].dim;
    *res = emit(c, IR_OP_MATMUL, args, 2, in->attr, NULL, NULL, p);
    return true;
}

/* Cross entropy over logits split along the vocabulary: the row max and (sum of exp, target
 * logit) are combined over tp, so no rank ever holds the whole row. */
static int lower_cross_entropy(shard_ctx *c, const ir_instr *in, int logits, int targets)
{
    placement rows = {-1, false, false};
    double max_attrs[2] = {IR_AXIS_TP, 1}, sum_attrs[2] = {IR_AXIS_TP, 0};
    int mx = emit(c, IR_OP_CE_ROW_MAX, &logits, 1, NULL, NULL, NULL, rows);
    int gmax = emit(c, IR_OP_ALL_REDUCE, &mx, 1, max_attrs, NULL, NULL, rows);
    int st_args[3] = {logits, targets, gmax};
    int st = emit(c, IR_OP_CE_ROW_STATS, st_args, 3, NULL, NULL, NULL, rows);
    tp_offset(c, st, 0, c->dst->vals[logits].type.dims[last_dim_of(c, logits)]); /* vocab_start */
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
            int r = emit(c, IR_OP_CE_GRAD_SHARDED, g, 5, NULL, NULL, NULL, (placement){last_dim_of(c, args[1]), false, false});
            tp_offset(c, r, 0, c->dst->vals[args[1]].type.dims[last_dim_of(c, args[1])]); /* vocab_start */
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
        args[a] = any_seq ? seq_slice(c, args[a]) : complete(c, args[a]);
    placement p = c->at[args[0]];
    for (int a = 1; a < in->nargs; a++)
        if (c->at[args[a]].dim != c->at[args[0]].dim)
            return fail(c, "operands split differently", in);
    p.partial = all_partial;
    *res = emit(c, in->op, args, in->nargs, in->attr, NULL, NULL, p);
    return true;
}

/* Norms, the position add and their gradients work token by token on the residual stream:
 * replicated, or a sequence slice under sequence parallelism, where the weight gradients (sums
 * over this rank's tokens) become partial and the position table is offset to the slice. */
static bool rule_stream(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    int x = in->op == IR_OP_LAYERNORM_GRAD || in->op == IR_OP_RMSNORM_GRAD ? 1 : 0; /* (dy, x, w) */
    args[x] = stream_value(c, args[x]);
    bool seq = c->at[args[x]].seq;
    if (x == 1)
        args[0] = seq ? seq_slice(c, args[0]) : complete(c, args[0]);
    for (int a = 0; a < in->nargs; a++) {
        bool stream = a <= x || (in->op == IR_OP_POS_ADD_GRAD);
        if (!stream)
            args[a] = complete(c, args[a]); /* weights, bias, table: replicated */
        if (c->at[args[a]].dim >= 0 && !(stream && c->at[args[a]].seq))
            return fail(c, "a normalisation or position table over a split dimension", in);
    }
    double attrs[IR_MAX_ATTRS];
    memcpy(attrs, in->attr, sizeof attrs);
    placement p = seq ? seq_slice_at(c) : (placement){-1, false, false};
    if (in->op == IR_OP_POS_ADD_GRAD)
        p = (placement){-1, seq, false}; /* rows of this slice's positions only */
    int64_t slice = c->dst->vals[args[0]].type.dims[1];
    *res = emit(c, in->op, args, in->nargs, attrs, NULL, NULL, p);
    /* a sequence slice's positions start at its offset; batch rows hold every position */
    if (seq && c->sp_dim == 1 && (in->op == IR_OP_POS_ADD || in->op == IR_OP_POS_ADD_GRAD))
        tp_offset(c, *res, in->op == IR_OP_POS_ADD ? 0 : 1, slice); /* first */
    for (int r = 1; r < ir_ops[in->op].nres; r++) /* dw, db: summed over this slice's tokens */
        place(c, *res + r, (placement){-1, seq, false});
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
    if (p.dim == 0 && !p.seq)
        return fail(c, "dropout over a split batch dimension", in);
    double attrs[IR_MAX_ATTRS];
    memcpy(attrs, in->attr, sizeof attrs);
    int64_t local = p.dim >= 0 ? c->dst->vals[args[0]].type.dims[p.dim] : 0;
    if (p.dim >= 0) { /* dim 0: sequence parallelism split by batch rows */
        attrs[3] = p.dim;                       /* dim */
        attrs[5] = (double)(local * c->tp);     /* extent */
    }
    *res = emit(c, in->op, args, 2, attrs, NULL, NULL, p);
    if (p.dim >= 0)
        tp_offset(c, *res, 4, local); /* offset */
    return true;
}

/* Attention reads whole sequences; its heads may be split (column-parallel q, k, v). With
 * dropout, the attributes head_offset and heads (ops.def) then name this rank's first head and
 * the whole head count. */
static bool rule_attention(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    bool forward = in->op == IR_OP_ATTENTION || in->op == IR_OP_ATTENTION_DROPOUT;
    bool dropout = in->op == IR_OP_ATTENTION_DROPOUT || in->op == IR_OP_ATTENTION_DROPOUT_GRAD;
    for (int a = 0; a < in->nargs; a++)
        args[a] = every_token(c, args[a]);
    int q = args[forward ? 0 : 1], heads = c->at[q].dim;
    double attrs[IR_MAX_ATTRS];
    memcpy(attrs, in->attr, sizeof attrs);
    bool split_heads = dropout && heads >= 0;
    int64_t local = split_heads ? c->dst->vals[q].type.dims[2] : 0;
    if (split_heads) {
        if (heads != 2)
            return fail(c, "attention dropout with q split other than by heads", in);
        attrs[4] = (double)(local * c->tp);     /* heads */
    }
    *res = emit(c, in->op, args, in->nargs, attrs, NULL, NULL, (placement){heads, false, false});
    if (split_heads)
        tp_offset(c, *res, 3, local); /* head_offset */
    if (forward) /* lse [B,H,T]: heads are dimension 1 */
        place(c, *res + 1, (placement){heads >= 0 ? 1 : -1, false, false});
    return true;
}

static bool rule(shard_ctx *c, const ir_instr *in, int *args, int *res)
{
    const ir_type *src_t = in->nres ? &c->src->vals[in->res[0]].type : NULL;
    placement rep = {-1, false, false};
    switch (in->op) {
    case IR_OP_INPUT:
    case IR_OP_FILL:
        *res = emit(c, in->op, NULL, 0, in->attr, in->sym, src_t, rep);
        return true;
    case IR_OP_GLOBAL: {
        int g = ir_global_find(c->m, in->sym);
        int dim = param_split_dim(in->sym);
        *res = emit(c, in->op, NULL, 0, NULL, in->sym, NULL, (placement){dim, false, false});
        return g >= 0;
    }
    case IR_OP_OUTPUT:
        args[0] = every_token(c, args[0]);
        emit(c, in->op, args, 1, NULL, in->sym, NULL, rep);
        return true;
    case IR_OP_ACCUMULATE:
    case IR_OP_COPY:
        switch (store_partial_grad(c, in, args)) {
        case 1: return true;
        case -1: return false;
        default: break;
        }
        args[1] = c->at[args[1]].seq ? every_token(c, args[1]) : complete(c, args[1]);
        if (c->at[args[1]].dim != c->at[args[0]].dim)
            return fail(c, "the value and its destination are split differently", in);
        emit(c, in->op, args, 2, NULL, NULL, NULL, rep);
        return true;
    case IR_OP_ADD:
    case IR_OP_SCALE:
        return rule_same(c, in, args, res, true);
    case IR_OP_MUL: case IR_OP_GELU: case IR_OP_SILU: case IR_OP_GELU_GRAD: case IR_OP_SILU_GRAD:
    case IR_OP_SWIGLU: case IR_OP_SWIGLU_GRAD: case IR_OP_ROPE:
        return rule_same(c, in, args, res, false);
    case IR_OP_BIAS_ADD:
        args[0] = c->at[args[1]].dim == 0 ? complete(c, args[0]) : stream_value(c, args[0]);
        if ((c->at[args[1]].dim == 0) != (c->at[args[0]].dim == last_dim_of(c, args[0])))
            return fail(c, "bias and input split differently", in);
        *res = emit(c, in->op, args, 2, NULL, NULL, NULL, c->at[args[0]]);
        return true;
    case IR_OP_RESHAPE: {
        if (c->at[args[0]].seq)
            args[0] = every_token(c, args[0]);
        placement p = c->at[args[0]];
        if (!reshape_dim(&c->src->vals[in->args[0]].type, src_t, p.dim, c->tp, &p.dim))
            return fail(c, "a reshape that moves the split dimension", in);
        ir_type t = local_type(src_t, p.dim, c->tp);
        *res = emit(c, in->op, args, 1, NULL, NULL, &t, p);
        return true;
    }
    case IR_OP_ROWS: /* of a value whole along its rows (the step's inputs) */
        if (c->at[args[0]].seq)
            args[0] = every_token(c, args[0]);
        if (c->at[args[0]].dim == 0 || c->at[args[0]].partial)
            return fail(c, "rows of a value split along them", in);
        *res = emit(c, in->op, args, 1, in->attr, NULL, NULL, c->at[args[0]]);
        return true;
    case IR_OP_CONCAT_ROWS: /* of values split alike, not along their rows */
        for (int a = 0; a < 2; a++)
            if (c->at[args[a]].seq)
                args[a] = every_token(c, args[a]);
        if (c->at[args[0]].dim != c->at[args[1]].dim || c->at[args[0]].dim == 0 || c->at[args[0]].partial ||
            c->at[args[1]].partial)
            return fail(c, "stacking rows of values split differently, or along their rows", in);
        *res = emit(c, in->op, args, 2, NULL, NULL, NULL, c->at[args[0]]);
        return true;
    case IR_OP_MATMUL:
        return rule_matmul(c, in, args, res);
    case IR_OP_SUM_ROWS: {
        /* a split over features stays split; a sum over split rows (tokens) is partial */
        placement p = c->at[args[0]];
        bool features = p.dim == last_dim_of(c, args[0]);
        p = (placement){features ? 0 : -1, p.partial || (p.dim >= 0 && !features), false};
        *res = emit(c, in->op, args, 1, NULL, NULL, NULL, p);
        return true;
    }
    case IR_OP_EMBEDDING: {
        placement p = rep;
        double attrs[2] = {0, 0};
        int64_t local = c->dst->vals[args[0]].type.dims[0];
        bool vocab_parallel = c->at[args[0]].dim == 0; /* other shards' rows are zero here */
        if (vocab_parallel) {
            attrs[1] = (double)(local * c->tp);
            p.partial = true;
        }
        *res = emit(c, in->op, args, 2, attrs, NULL, NULL, p);
        if (vocab_parallel)
            tp_offset(c, *res, 0, local);
        return true;
    }
    case IR_OP_EMBEDDING_GRAD: {
        args[0] = every_token(c, args[0]);
        double attrs[2] = {in->attr[0] / c->tp, 0};
        *res = emit(c, in->op, args, 2, attrs, NULL, NULL, (placement){0, false, false});
        tp_offset(c, *res, 1, (int64_t)attrs[0]);
        return true;
    }
    case IR_OP_POS_ADD:
    case IR_OP_POS_ADD_GRAD:
    case IR_OP_LAYERNORM: case IR_OP_RMSNORM: case IR_OP_LAYERNORM_GRAD: case IR_OP_RMSNORM_GRAD:
        return rule_stream(c, in, args, res);
    case IR_OP_DROPOUT:
        return rule_dropout(c, in, args, res);
    case IR_OP_ATTENTION:
    case IR_OP_ATTENTION_GRAD:
    case IR_OP_ATTENTION_DROPOUT:
    case IR_OP_ATTENTION_DROPOUT_GRAD:
        return rule_attention(c, in, args, res);
    case IR_OP_CROSS_ENTROPY:
        args[0] = every_token(c, args[0]);
        *res = c->at[args[0]].dim == last_dim_of(c, args[0]) ? lower_cross_entropy(c, in, args[0], args[1])
                                                              : emit(c, in->op, args, 2, NULL, NULL, NULL, rep);
        return true;
    case IR_OP_CROSS_ENTROPY_GRAD:
        args[1] = every_token(c, args[1]);
        *res = c->at[args[1]].dim == last_dim_of(c, args[1]) ? lower_cross_entropy_grad(c, in, args)
                                                              : emit(c, in->op, args, 3, NULL, NULL, NULL, rep);
        return *res >= 0 || fail(c, "the gradient of a cross entropy that was not lowered", in);
    default:
        return fail(c, "no sharding rule", in);
    }
}

/* Rewrites source function index fi into this rank's local graph. */
static bool shard_func(ir_module *m, int fi, int tp, char *err, size_t errlen)
{
    const ir_func *src = m->funcs[fi];
    shard_ctx c = {m, src, ir_func_new(m, src->name, src->kind), tp, ir_cfg_bool(m, IR_CFG_SEQUENCE_PARALLEL),
                   (int)ir_cfg_int(m, IR_CFG_SEQUENCE_PARALLEL_DIM), .err = err, .errlen = errlen};
    c.map = malloc(sizeof(int) * (size_t)(src->nvals + 1));
    c.complete_grad = calloc((size_t)m->nglobals + 1, sizeof(bool));
    bool ok = true;
    for (int i = 0; i < src->ninstrs && ok; i++) {
        const ir_instr *in = &src->instrs[i];
        int args[8], res = -1;
        for (int a = 0; a < in->nargs && a < 8; a++)
            args[a] = c.map[in->args[a]];
        if (in->nargs > 8)
            ok = fail(&c, "too many operands", in);
        ok = ok && rule(&c, in, args, &res);
        for (int r = 0; ok && r < in->nres; r++)
            c.map[in->res[r]] = res + r;
    }
    free(c.map);
    free(c.complete_grad);
    free(c.at);
    free(c.reduced);
    free(c.scattered);
    free(c.gathered);
    free(c.ces);
    if (ok)
        ir_func_replace(m, fi, c.dst);
    return ok;
}

/* Parameters and their gradients, working copies and optimizer state become local shards. */
static bool shard_globals(ir_module *m, int tp, char *err, size_t errlen)
{
    for (int g = 0; g < m->nglobals; g++) {
        ir_global *gl = &m->globals[g];
        int dim = param_split_dim(gl->name);
        if (dim < 0 || dim >= gl->type.ndim)
            continue;
        if (gl->type.dims[dim] % tp)
            return snprintf(err, errlen, "@%s: dimension %d (%lld) is not divisible by tensor_model_parallel_size %d",
                            gl->name, dim, (long long)gl->type.dims[dim], tp), false;
        gl->type.dims[dim] /= tp;
        gl->type.shard[dim] = IR_AXIS_TP;
    }
    return true;
}

bool pass_shard(ir_module *m, char *err, size_t errlen)
{
    int tp = (int)ir_cfg_int(m, IR_CFG_TENSOR_MODEL_PARALLEL_SIZE);
    if (tp <= 1)
        return true;
    if (!shard_globals(m, tp, err, errlen))
        return false;
    for (int f = 0; f < m->nfuncs; f++)
        if (!shard_func(m, f, tp, err, errlen))
            return false;
    return true;
}
