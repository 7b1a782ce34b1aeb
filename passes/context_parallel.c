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
 * --cp-comm-type). all_gather:
 *
 *     attention(q, k, v)      -> attention(q, all_gather_seq(k), all_gather_seq(v)) {cp, cp_rank}
 *     attention_grad(.., k, v) -> dq, reduce_scatter_seq(dk), reduce_scatter_seq(dv)
 *
 * keys and values gathered over cp, each query attending by the causal mask of the positions in
 * the whole sequence; their gradients, summed over the cp ranks whose queries read them,
 * reduce-scattered back to the chunks they came from. p2p (ring attention, the default), in cp
 * pieces, piece s over the keys of rank (cp_rank - s) mod cp passed around the ring:
 *
 *     attention(q, k, v)  -> k0 = k; (o, lse) = attention(q, k0, v0) {ring=1, shift=0};
 *                            for s = 1..cp-1: ks = ring_shift(k_{s-1}) (and v: emitted before piece
 *                            s-1, so the shift runs beside it); (os, lses) = attention(q, ks, vs)
 *                            {shift=s}; (o, lse) = attention_merge(o, lse, os, lses)
 *     attention_grad(dy, q, k, v, y, lse) -> each piece's attention_grad over the same keys, with
 *                            the merged y and lse; dq summed; the keys' gradients accumulated as
 *                            they travel with their keys (ak = ring_shift(ak) + dks), and one last
 *                            ring_shift brings them home to the rank that owns the keys
 *
 * (the contract with the CUDA kernels: docs/design/parallelism.md's Context parallelism). a2a (Ulysses):
 *
 *     attention(q, k, v)  -> y = cp_all_to_all{heads=0}(attention(qh, kh, vh)), xh = cp_all_to_all
 *                            {heads=1}(x): every token in sequence order, the rank's 1/cp of the heads
 *     attention_grad      -> over dyh, qh, kh, vh, yh and the forward's lse; dq, dk, dv back {heads=0}
 *
 * Under grouped-query attention only the kv heads travel. Attention dropout's ops (attention_dropout
 * and its grad) are rewritten as attention's, with its attributes (ops.def: their mask is drawn by
 * whole-sequence positions, so a ring piece's y is (P Z) v of its keys and the merge stays exact;
 * under a2a the rank's block of heads starts at head_offset cp_rank H/cp). Everything else is token
 * by token and runs on the rank's tokens as it is,
 * but for what reduces over the tokens to one value: an FP8 amax is max-all-reduced over cp, so
 * the ranks quantize by the whole sequence's scale. An MoE layer flattens the tokens into rows
 * [B T/cp, ...] (and its routed pairs' [B T/cp k, ...]), which route, sort, permute and run the
 * experts on the rank's rows as they are; the load-balancing loss (aux_loss, seq_aux_loss: a
 * product of two sums over the micro-batch's or a sequence's tokens) runs on the router's logits
 * and ids all-gathered over cp, the same on every rank, its gradient's rows reduce-scattered back;
 * moe_sort's counts are summed over cp where they are output (train_rank's load statistics); the
 * z loss, a mean over the tokens, needs nothing (train_rank's mean over cp reports it). Token
 * dropping (moe_capacity) ranks the pairs of the whole micro-batch in token order: each rank ranks
 * them all, gathered, and keeps its own rows of the result (capacity()).
 * The loss is the mean over the rank's tokens: autodiff seeds it with 1/(micro-batches dp cp),
 * data_parallel sums every gradient over cp (each rank saw its share of the tokens) before dp,
 * and train_rank's loss is the mean over dp x cp.
 * It runs after autodiff and recompute (the backward's attention and position ops are rewritten
 * beside the forward's, a replayed forward as the forward) and before the shard and pipeline
 * passes (the pipeline cuts the rewritten step into stages; the shard pass over tp passes the cp
 * collectives and ring ops through, heads split; with sequence parallelism it splits the rank's
 * tokens further, the position ops' offset and extent counting them); under expert parallelism (ep
 * carved from dp x cp) the dispatch and combine all-to-alls' room is the rank's rows' (a capacity's
 * room stays the capacity's), and on the cuda target attention dropout under
 * p2p and all_gather (its kernels draw the mask by the rank's own positions). */
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
    ir_op kv_op;                    /* how attention reaches the other ranks' keys (cp_comm_type): ring_shift
                                       (p2p), all_gather_seq (all_gather) or cp_all_to_all (a2a) */
    int64_t T;                      /* the whole sequence (config seq_length) */
    int64_t rows, pairs;            /* the whole micro-batch's tokens B T and routed pairs B T k (0: no router) */
    int *map;                       /* source value -> new value */
    cp_form *form;                  /* per source value */
    int *moved;                     /* per source value: its all_gather_seq over cp (all_gather; an MoE
                                       router's rows, whole_rows) or its head-split form (a2a:
                                       cp_all_to_all), or -1 */
    bool cuda;                      /* the cuda backend, whose attention kernels' dropout twins draw the
                                       mask by the local sequence (kernels_templates/attention.cuh) */
} cp_ctx;

/* Attribute k of new value v's instruction is this rank's cp coordinate. */
static void cp_rank_attr(cp_ctx *c, int v, int k) { ir_set_per_rank(c->dst, v, k, 0, 1, IR_AXIS_CP); }

/* Source value v as attention reads it, made once however many ops read it: all_gather, k or v
 * of every cp rank (attributes axis, overlap 0, batch 0); a2a, q, k, v, y or dy with every token
 * and this rank's block of the heads (axis, heads 1). */
static int moved(cp_ctx *c, int v)
{
    if (c->moved[v] < 0) {
        double attrs[IR_MAX_ATTRS] = {[IR_ATTR_AXIS] = IR_AXIS_CP,
                                      [IR_ATTR_CP_ALL_TO_ALL_HEADS] = c->kv_op == IR_OP_CP_ALL_TO_ALL};
        c->moved[v] = ir_emit(c->m, c->dst, c->kv_op, &c->map[v], 1, attrs, NULL, NULL);
    }
    return c->moved[v];
}

/* New value v [B,T,H/cp,D] back to the rank's tokens and every head (a2a) */
static int to_tokens(cp_ctx *c, int v)
{
    double attrs[IR_NATTRS_CP_ALL_TO_ALL] = {[IR_ATTR_AXIS] = IR_AXIS_CP, [IR_ATTR_CP_ALL_TO_ALL_HEADS] = 0};
    return ir_emit(c->m, c->dst, IR_OP_CP_ALL_TO_ALL, &v, 1, attrs, NULL, NULL);
}

/* Attention op `in` (attention, attention_grad or a dropout twin) over the new operands args, with
 * in's attributes but {cp, cp_rank, ring, shift} (ops.def); ranked 0: over the whole sequence in
 * order, as one rank's (a2a) */
static int attention_piece(cp_ctx *c, const ir_instr *in, const int *args, int ring, int shift, bool ranked)
{
    double attrs[IR_MAX_ATTRS];
    memcpy(attrs, in->attr, sizeof attrs);
    int at = (int)(ir_attention_attrs(in) - in->attr); /* cp's, and the others' from it as attention's */
    attrs[at + IR_ATTR_ATTENTION_CP] = ranked ? c->cp : 0, attrs[at + IR_ATTR_ATTENTION_CP_RANK] = 0;
    attrs[at + IR_ATTR_ATTENTION_RING] = ring, attrs[at + IR_ATTR_ATTENTION_SHIFT] = shift;
    int r = ir_emit(c->m, c->dst, in->op, args, in->nargs, attrs, NULL, NULL);
    if (ranked)
        cp_rank_attr(c, r, at + IR_ATTR_ATTENTION_CP_RANK);
    return r;
}

/* New value v of the previous cp rank: ring attention's step, overlapped (it runs beside what is
 * computed before its first use). */
static int ring_shift(cp_ctx *c, int v)
{
    double attrs[IR_NATTRS_RING_SHIFT] = {[IR_ATTR_AXIS] = IR_AXIS_CP, [IR_ATTR_RING_SHIFT_OVERLAP] = 1};
    return ir_emit(c->m, c->dst, IR_OP_RING_SHIFT, &v, 1, attrs, NULL, NULL);
}

/* New value v summed (max: its max taken) over the cp ranks: what the single rank computes of
 * every token from each rank's share. */
static int all_reduce(cp_ctx *c, int v, bool max)
{
    double attrs[IR_NATTRS_ALL_REDUCE] = {[IR_ATTR_AXIS] = IR_AXIS_CP, [IR_ATTR_ALL_REDUCE_MAX] = max};
    return ir_emit(c->m, c->dst, IR_OP_ALL_REDUCE, &v, 1, attrs, NULL, NULL);
}

static int emit2(cp_ctx *c, ir_op op, int a, int b)
{
    int args[2] = {a, b};
    return ir_emit(c->m, c->dst, op, args, 2, NULL, NULL, NULL);
}

/* Forward attention `in` over args (new values: q, k, v, and with dropout first_sample) in cp ring
 * pieces, merged: returns (o, lse). With dropout a piece's o is (P Z) v of its keys, P normalised
 * by its own lse, so the merge's exp(lse_i - lse) weights make it the whole row's (P Z) v. */
static int ring_forward(cp_ctx *c, const ir_instr *in, const int *mapped)
{
    int args[4], o = -1;
    memcpy(args, mapped, sizeof(int) * (size_t)in->nargs);
    for (int s = 0; s < c->cp; s++) {
        int next_k = s + 1 < c->cp ? ring_shift(c, args[1]) : -1, next_v = s + 1 < c->cp ? ring_shift(c, args[2]) : -1;
        int piece = attention_piece(c, in, args, 1, s, true);
        if (s == 0)
            o = piece;
        else {
            int m[4] = {o, o + 1, piece, piece + 1};
            o = ir_emit(c->m, c->dst, IR_OP_ATTENTION_MERGE, m, 4, NULL, NULL, NULL);
        }
        args[1] = next_k, args[2] = next_v;
    }
    return o;
}

/* Backward attention `in` over args (new values: dy, q, k, v, y, lse, and with dropout
 * first_sample; y, lse the merged ones) in cp ring pieces: grads := dq, dk, dv. The keys'
 * gradients travel with their keys and are added to at every piece; after the last piece they
 * belong to rank cp_rank + 1's keys, one more shift brings them home. */
static void ring_backward(cp_ctx *c, const ir_instr *in, const int *mapped, int *grads)
{
    int args[7];
    memcpy(args, mapped, sizeof(int) * (size_t)in->nargs);
    int next_k = ring_shift(c, args[2]), next_v = ring_shift(c, args[3]);
    int g = attention_piece(c, in, args, 1, 0, true);
    int dq = g, ak = g + 1, av = g + 2;
    for (int s = 1; s < c->cp; s++) {
        args[2] = next_k, args[3] = next_v;
        if (s + 1 < c->cp)
            next_k = ring_shift(c, args[2]), next_v = ring_shift(c, args[3]);
        ak = ring_shift(c, ak);
        av = ring_shift(c, av);
        g = attention_piece(c, in, args, 1, s, true);
        dq = emit2(c, IR_OP_ADD, dq, g);
        ak = emit2(c, IR_OP_ADD, ak, g + 1);
        av = emit2(c, IR_OP_ADD, av, g + 2);
    }
    grads[0] = dq;
    grads[1] = ring_shift(c, ak);
    grads[2] = ring_shift(c, av);
}

/* Ulysses (a2a): attention (or its dropout form) over every token of the rank's block of the
 * heads, as one rank's (cp 0): q, k, v (backward: dy, y too) exchanged there, the lse kept there,
 * the results exchanged back. With dropout the block's first head is head_offset, cp_rank H/cp
 * (under tp the shard pass makes it tp_rank H/tp + cp_rank H/(tp cp): its rule_attention). */
static bool ulysses_attention(cp_ctx *c, const ir_instr *in)
{
    bool fwd = ir_ops[in->op].nres == 2, dropout = ir_attr_index(in->op, "head_offset") >= 0;
    int args[7], lse = fwd ? -1 : 5, first_sample = dropout ? in->nargs - 1 : -1;
    for (int a = 0; a < in->nargs; a++)
        args[a] = a == lse || a == first_sample ? c->map[in->args[a]] : moved(c, in->args[a]);
    int r = attention_piece(c, in, args, 0, 0, false);
    if (dropout)
        ir_set_per_rank(c->dst, r, IR_ATTR_ATTENTION_DROPOUT_HEAD_OFFSET, 0,
                        (double)c->dst->vals[args[fwd ? 0 : 1]].type.dims[2], IR_AXIS_CP);
    for (int g = 0; g < in->nres; g++) /* back on the rank's tokens; lse stays on its heads */
        c->form[in->res[g]] = !fwd || g == 0 ? CP_SEQ : CP_WHOLE;
    if (fwd) {
        c->moved[in->res[0]] = r; /* y as attention_grad reads it */
        c->map[in->res[0]] = to_tokens(c, r);
        c->map[in->res[1]] = r + 1;
        return true;
    }
    for (int g = 0; g < 3; g++)
        c->map[in->res[g]] = to_tokens(c, r + g);
    return true;
}

/* Type t with the rank's tokens: dimension dim (1, the sequence; 0, flattened rows) split over cp. */
static ir_type local_of(const cp_ctx *c, ir_type t, int dim)
{
    t.dims[dim] /= c->cp;
    ir_shard_push(&t, dim, IR_AXIS_CP);
    return t;
}

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

static int reshape(cp_ctx *c, int v, ir_type t) { return ir_emit(c->m, c->dst, IR_OP_RESHAPE, &v, 1, NULL, NULL, &t); }

/* Source value v of an MoE layer's rows, [B T/cp, X] (logits, expert ids), as every rank's: [B T, X],
 * each sequence's T rows together (its chunks in rank order: the router's sums do not mind), made
 * once. */
static int whole_rows(cp_ctx *c, int v)
{
    if (c->moved[v] < 0) {
        const ir_type *src = &c->src->vals[v].type;
        int64_t seq[3] = {c->rows / c->T, c->T, src->dims[1]};
        double attrs[IR_NATTRS_ALL_GATHER_SEQ] = {[IR_ATTR_AXIS] = IR_AXIS_CP}; /* overlap 0, batch 0 */
        int s = reshape(c, c->map[v], local_of(c, ir_tensor(src->dtype, 3, seq), 1));
        c->moved[v] = reshape(c, ir_emit(c->m, c->dst, IR_OP_ALL_GATHER_SEQ, &s, 1, attrs, NULL, NULL), *src);
    }
    return c->moved[v];
}

/* New value g [B T, X], a gradient of whole_rows' value, back to the rank's rows: summed over the
 * cp ranks that read them (every rank's router loss reads every row; each rank's is seeded 1/cp
 * of the one rank's loss, as its lm loss is, so the sum is the one rank's gradient). */
static int rank_rows(cp_ctx *c, int g, const ir_type *whole)
{
    int64_t seq[3] = {c->rows / c->T, c->T, whole->dims[1]};
    double attrs[IR_NATTRS_REDUCE_SCATTER_SEQ] = {[IR_ATTR_AXIS] = IR_AXIS_CP}; /* overlap 0, batch 0 */
    int s = reshape(c, g, ir_tensor(whole->dtype, 3, seq));
    s = ir_emit(c->m, c->dst, IR_OP_REDUCE_SCATTER_SEQ, &s, 1, attrs, NULL, NULL);
    return reshape(c, s, local_of(c, *whole, 0));
}

/* The router's load-balancing loss (its counts and probabilities summed over every token of the
 * micro-batch or of each sequence) over every rank's rows: the same on every rank, as the one
 * rank's; its gradient's rows, the sum over the ranks, back (rank_rows). */
static void router_loss(cp_ctx *c, const ir_instr *in)
{
    int args[3], first = in->op == IR_OP_MOE_AUX_LOSS_GRAD; /* (dloss, logits, ids) */
    for (int a = 0; a < in->nargs; a++)
        args[a] = a < first ? c->map[in->args[a]] : whole_rows(c, in->args[a]);
    int r = ir_emit(c->m, c->dst, in->op, args, in->nargs, in->attr, NULL, NULL);
    c->form[in->res[0]] = first ? CP_ROWS : CP_WHOLE;
    c->map[in->res[0]] = first ? rank_rows(c, r, &c->src->vals[in->res[0]].type) : r;
}

/* Token dropping (moe_capacity, and its gradient, itself on dy): an expert's capacity ranks the
 * pairs of the whole micro-batch, by weight with ties to the earlier token or by token, so every rank
 * ranks them all: its operands' rows gathered over cp (whole_rows: each sequence's ranks' chunks in
 * turn), ranked at their tokens' places (the op's cp and seq), the rank's own rows then cut back out
 * of the result (local_slice_seq: they are its block of each sequence). */
static void capacity(cp_ctx *c, const ir_instr *in)
{
    const ir_type *t = &c->src->vals[in->res[0]].type;
    int args[3];
    for (int a = 0; a < 3; a++)
        args[a] = whole_rows(c, in->args[a]);
    double attrs[IR_MAX_ATTRS];
    memcpy(attrs, in->attr, sizeof attrs);
    attrs[IR_ATTR_MOE_CAPACITY_CP] = c->cp;
    attrs[IR_ATTR_MOE_CAPACITY_SEQ] = (double)c->T;
    int r = ir_emit(c->m, c->dst, IR_OP_MOE_CAPACITY, args, 3, attrs, NULL, NULL);
    int64_t seq[3] = {c->rows / c->T, c->T, t->dims[1]};
    double slice[IR_NATTRS_LOCAL_SLICE_SEQ] = {[IR_ATTR_AXIS] = IR_AXIS_CP}; /* overlap 0, batch 0 */
    int s = reshape(c, r, ir_tensor(t->dtype, 3, seq));
    s = ir_emit(c->m, c->dst, IR_OP_LOCAL_SLICE_SEQ, &s, 1, slice, NULL, NULL);
    c->map[in->res[0]] = reshape(c, s, local_of(c, *t, 0));
    c->form[in->res[0]] = CP_ROWS;
}

static bool cp_instr(cp_ctx *c, const ir_instr *in, char *err, size_t errlen)
{
    const ir_type *t0 = in->nres ? &c->src->vals[in->res[0]].type : NULL;
    int *map = c->map;
    switch (in->op) {
    case IR_OP_INPUT:
        if (t0->ndim == 2 && t0->dims[1] == c->T) { /* tokens, targets [B,T] */
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
            map[in->res[0]] = reshape(c, map[in->args[0]], local_of(c, *t0, f == CP_SEQ ? 1 : 0));
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
    case IR_OP_MOE_AUX_LOSS:
    case IR_OP_MOE_AUX_LOSS_GRAD:
        if (c->form[in->args[in->nargs - 1]] != CP_ROWS)
            break;
        router_loss(c, in);
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
        capacity(c, in);
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
        int cp_at = ir_attr_index(in->op, "cp"); /* ops.def: the attributes cp, cp_rank */
        if (c->form[in->args[0]] != CP_SEQ)
            break;
        int r = copy(c, in);
        ir_instr *made = &c->dst->instrs[c->dst->ninstrs - 1];
        made->attr[cp_at] = c->cp;
        if (in->op == IR_OP_DROPOUT && made->attr[IR_ATTR_DROPOUT_DIM] == 1) /* extent: the rank's tokens */
            made->attr[IR_ATTR_DROPOUT_EXTENT] = (double)(c->T / c->cp);
        cp_rank_attr(c, r, cp_at + 1);
        return true;
    }
    case IR_OP_ATTENTION:
    case IR_OP_ATTENTION_GRAD:
    case IR_OP_ATTENTION_DROPOUT:
    case IR_OP_ATTENTION_DROPOUT_GRAD: {
        bool fwd = ir_ops[in->op].nres == 2;
        int k = fwd ? 1 : 2, args[7];
        if (c->cuda && c->kv_op != IR_OP_CP_ALL_TO_ALL && ir_attr_index(in->op, "head_offset") >= 0)
            return snprintf(err, errlen, "--attention-dropout with --context-parallel-size %d and --cp-comm-type %s on "
                            "the cuda target: the CUDA attention kernels draw the dropout mask by the rank's own "
                            "positions, not yet by the whole sequence's: pass --cp-comm-type a2a (attention on whole "
                            "sequences of a block of heads), or --attention-dropout 0, or --target cpu", c->cp,
                            ir_cfg_text(c->m, IR_CFG_CP_COMM_TYPE)), false;
        for (int a = 0; a < in->nargs; a++)
            args[a] = map[in->args[a]];
        if (c->form[in->args[k - 1]] != CP_SEQ || c->form[in->args[k]] != CP_SEQ || c->form[in->args[k + 1]] != CP_SEQ)
            return snprintf(err, errlen, "%s: attention %%%d over values not split along the sequence", c->src->name,
                            in->res[0]), false;
        for (int r = 0; r < in->nres; r++)
            c->form[in->res[r]] = CP_SEQ;
        if (c->kv_op == IR_OP_RING_SHIFT) {
            int made[3];
            if (fwd)
                made[0] = ring_forward(c, in, args), made[1] = made[0] + 1;
            else
                ring_backward(c, in, args, made);
            for (int g = 0; g < in->nres; g++)
                map[in->res[g]] = made[g];
            return true;
        }
        if (c->kv_op == IR_OP_CP_ALL_TO_ALL)
            return ulysses_attention(c, in);
        args[k] = moved(c, in->args[k]);
        args[k + 1] = moved(c, in->args[k + 1]);
        int r = attention_piece(c, in, args, 0, 0, true);
        map[in->res[0]] = r;
        if (fwd) { /* lse [B,H,T/cp]: the rank's queries' rows */
            map[in->res[1]] = r + 1;
            return true;
        }
        for (int g = 1; g < 3; g++) { /* dk, dv of every rank's keys: summed, the rank's chunks back */
            double rs[IR_NATTRS_REDUCE_SCATTER_SEQ] = {[IR_ATTR_AXIS] = IR_AXIS_CP}; /* overlap 0, batch 0 */
            int full = r + g;
            map[in->res[g]] = ir_emit(c->m, c->dst, IR_OP_REDUCE_SCATTER_SEQ, &full, 1, rs, NULL, NULL);
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

static bool cp_func(ir_module *m, int fi, int cp, ir_op kv_op, bool cuda, char *err, size_t errlen)
{
    const ir_func *src = m->funcs[fi];
    cp_ctx c = {.m = m, .src = src, .dst = ir_func_new(m, src->name, src->kind), .cp = cp,
                .kv_op = kv_op, .T = ir_cfg_int(m, IR_CFG_SEQ_LENGTH), .cuda = cuda};
    c.map = malloc(sizeof(int) * ((size_t)src->nvals + 1));
    c.form = calloc((size_t)src->nvals + 1, sizeof(cp_form));
    c.moved = malloc(sizeof(int) * ((size_t)src->nvals + 1));
    for (int v = 0; v <= src->nvals; v++)
        c.moved[v] = -1;
    bool ok = true;
    for (int i = 0; i < src->ninstrs && ok; i++)
        ok = cp_instr(&c, &src->instrs[i], err, errlen);
    if (ok)
        ir_func_replace(m, fi, c.dst);
    free(c.map);
    free(c.form);
    free(c.moved);
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
    static const ir_op kv_ops[] = {[IR_CP_P2P] = IR_OP_RING_SHIFT, [IR_CP_ALL_GATHER] = IR_OP_ALL_GATHER_SEQ,
                                   [IR_CP_A2A] = IR_OP_CP_ALL_TO_ALL}; /* how attention reaches the keys */
    ir_op kv_op = kv_ops[ir_cfg_choice(m, IR_CFG_CP_COMM_TYPE)];
    bool cuda = pass_backend(m, opts) == IR_BACKEND_CUDA;
    for (int f = 0; f < m->nfuncs; f++)
        if ((m->funcs[f]->kind == IR_FUNC_STEP || m->funcs[f]->kind == IR_FUNC_EVAL) &&
            !cp_func(m, f, cp, kv_op, cuda, err, errlen))
            return false;
    return true;
}
