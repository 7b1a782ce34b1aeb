/* comm_overlap.c — sequence parallelism's collectives overlap the work that does not need them:
 * in the backward, each reduce_scatter_seq and all_gather_seq runs beside weight gradients'
 * GEMMs. Each collective moves up to right after the instruction making its operand, and beside
 * it go the matmul_accumulates (weight gradients) autodiff emitted since the previous collective,
 * oldest first, until their work covers the time its bytes take on the wire (hiding_target); those
 * already between its operand and it (attention's q projection, before the reduce-scatter of the
 * input gradient its dgrad completes) count too, where they are.
 * Of the rest, the newest move on past the next collective, as few as leave the next three
 * least short of their targets (lack_ahead: each sublayer's input gradient is reduce-scattered,
 * then the next one's output gradient all-gathered, with unequal work between: attention's weight
 * gradients are a third of the MLP's, or less with grouped-query attention, so the MLP's surplus
 * may serve a collective two on); the others stay beside this one. A collective that real work
 * (not a `global` or a `reshape`) then separates from its result's first use is marked overlap =
 * 1: the GPU runs it on the comm stream, and the compute stream waits for it (for it and the
 * collectives forked before it, not for later ones) before that first use; the memory plan keeps
 * its operand's bytes until then.
 * With tp_comm_interleave, micro_step holds two chains (the micro-batch's halves) and is list-
 * scheduled instead (interleave_func), so that the forward's collectives too have work beside
 * them: the other chain's. */
#include "passes.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool is_work(ir_op op) { return op != IR_OP_GLOBAL && !ir_op_has(op, IR_OPF_VIEW); }

/* Whether real work lies between instruction i and the first instruction reading value v. */
static bool work_before_use(const ir_func *f, int i, int v)
{
    for (int j = i + 1, use = ir_first_reader(f, i, v); j < use; j++)
        if (is_work(f->instrs[j].op))
            return true;
    return false;
}

/* Whether the matmul_accumulate at k may move past instruction p: no instruction in (k, p] names
 * the global it accumulates into. */
static bool may_defer(const ir_func *f, int k, int p)
{
    int dst = ir_global_of(f, f->instrs[k].args[0]);
    for (int j = k + 1; j <= p; j++)
        if (f->instrs[j].op == IR_OP_GLOBAL && f->instrs[j].global == dst)
            return false;
    return true;
}

typedef struct {
    int *after;                     /* per source instruction: the first instruction emitted after it, or -1 */
    int *next;                      /* ... and the next one after that same instruction, or -1 */
    bool *moved;                    /* source instructions emitted elsewhere */
} reorder;

/* Appends source instruction k to the list emitted after instruction at. */
static void emit_after(reorder *o, int at, int k)
{
    int *tail = &o->after[at];
    while (*tail >= 0)
        tail = &o->next[*tail];
    *tail = k, o->next[k] = -1, o->moved[k] = true;
}

/* A matmul_accumulate's multiply-adds (dst += op(a) op(b)): what it takes to hide a collective
 * beside it. */
static double accumulate_flops(const ir_func *f, int k) { return ir_work_macs(f, &f->instrs[k]); }

/* The next sequence-parallel collective after instruction i, or -1. */
static int next_seq_collective(const ir_func *f, int i)
{
    for (int j = i + 1; j < f->ninstrs; j++)
        if (ir_op_has(f->instrs[j].op, IR_OPF_SEQ_COLLECTIVE))
            return j;
    return -1;
}

/* The weight-gradient work that hides sequence collective i: as long as its bytes take on the
 * wire (each rank sends (n-1)/n of the whole tensor), at the target's multiply-adds per byte on
 * the wire (mcc_target_macs_per_wire_byte: its GEMM rate over its link's). */
static double hiding_target(const ir_func *f, int i, int ranks, double macs_per_byte)
{
    const ir_instr *in = &f->instrs[i];
    const ir_type *whole = &f->vals[in->op == IR_OP_REDUCE_SCATTER_SEQ ? in->args[0] : in->res[0]].type;
    return macs_per_byte * (double)ir_bytes(whole) * (ranks - 1) / ranks;
}

/* The unmoved weight gradients in (from, to) that may wait until after instruction `to`, in
 * order, appended to list (n items; NULL: only counted): what a collective there can have
 * beside it. Adds their work to *macs (when given). */
static int collect_new(const ir_func *f, const reorder *o, int from, int to, int *list, int n, double *macs)
{
    for (int k = from + 1; k < to; k++)
        if ((f->instrs[k].op == IR_OP_MATMUL_ACCUMULATE || f->instrs[k].op == IR_OP_FP8_MATMUL_ACCUMULATE) &&
            !o->moved[k] && may_defer(f, k, to)) {
            if (list)
                list[n] = k;
            n++;
            if (macs)
                *macs += accumulate_flops(f, k);
        }
    return n;
}

enum { LOOKAHEAD = 3 }; /* collectives a collective's spare weight gradients may provide for */

/* The multiply-adds the LOOKAHEAD collectives after collective i would lack of their targets if
 * the weight gradients carry[n] (oldest first) went on from i: each takes the oldest it has (the
 * carried ones, then its own new ones) until its target is met and passes the rest on, as
 * overlap_func does. Weight gradients are whole GEMMs, so a surplus here may be what a collective
 * two on needs: on a grouped-query model attention's are too few for its two collectives, the
 * MLP's before them many. pool: room for every instruction. */
static double lack_ahead(const ir_func *f, const reorder *o, int i, int ranks, double macs_per_byte, const int *carry,
                         int n, int *pool)
{
    double lack = 0;
    int first = 0;
    memcpy(pool, carry, sizeof(int) * (size_t)n);
    for (int j = 0, from = i, g; j < LOOKAHEAD && (g = next_seq_collective(f, from)) >= 0; j++, from = g) {
        n = collect_new(f, o, from, g, pool, n, NULL);
        double target = hiding_target(f, g, ranks, macs_per_byte), beside = 0;
        while (first < n && beside < target)
            beside += accumulate_flops(f, pool[first++]);
        lack += beside < target ? target - beside : 0;
    }
    return lack;
}

/* Weight gradient k stays beside the collective after instruction p: right after it, or, when it
 * already lay after p (in_place), where it is. Also where a carried one goes that may not wait
 * for the next collective: beside the one it was carried from. */
static void keep_beside(reorder *o, const bool *in_place, int p, int k)
{
    if (in_place[k])
        o->moved[k] = false;
    else
        emit_after(o, p, k);
}

static void overlap_func(ir_module *m, int fi, double macs_per_byte)
{
    const ir_func *src = m->funcs[fi];
    int n = src->ninstrs, ranks = (int)ir_cfg_int(m, IR_CFG_TENSOR_MODEL_PARALLEL_SIZE), last_collective = -1;
    reorder o = {malloc(sizeof(int) * (size_t)(n + 1)), malloc(sizeof(int) * (size_t)(n + 1)),
                 calloc((size_t)n + 1, sizeof(bool))};
    int *cand = malloc(sizeof(int) * (size_t)(n + 1)), *carry = malloc(sizeof(int) * (size_t)(n + 1)),
        *pool = malloc(sizeof(int) * (size_t)(n + 1));
    int ncarry = 0, carried_at = -1; /* weight gradients carried from the collective after instruction carried_at */
    bool *in_place = calloc((size_t)n + 1, sizeof(bool)); /* candidates that were after their collective's operand */
    for (int k = 0; k < n; k++)
        o.after[k] = o.next[k] = -1;
    if (ranks < 2)
        ranks = 2;
    for (int i = 0; i < n; i++) {
        const ir_instr *in = &src->instrs[i];
        if (ir_op_has(in->op, IR_OPF_SEQ_COLLECTIVE)) {
            /* the collective moves up to right after its operand; beside it, the weight gradients
             * carried here (those that may wait so long; the others stay where they were) and the
             * new ones since the previous collective, oldest first, until their work covers its
             * bytes' time */
            int p = src->vals[in->args[0]].def, nc = 0, ncarried;
            emit_after(&o, p, i);
            for (int k = 0; k < ncarry; k++) {
                if (carry[k] > p) /* already after this one's operand: beside it where it is */
                    cand[nc++] = carry[k], in_place[carry[k]] = true;
                else if (may_defer(src, carry[k], p))
                    cand[nc++] = carry[k], in_place[carry[k]] = false; /* beside this one: after p */
                else
                    keep_beside(&o, in_place, carried_at, carry[k]);
            }
            ncarried = nc;
            nc = collect_new(src, &o, last_collective, p, cand, nc, NULL);
            /* and those between the operand and the collective: beside it where they are, unless
             * they go on to the next one (the newest, so the first to) */
            int late = nc;
            nc = collect_new(src, &o, p, i, cand, nc, NULL);
            for (int k = ncarried; k < nc; k++)
                o.moved[cand[k]] = true, in_place[cand[k]] = k >= late;
            double target = hiding_target(src, i, ranks, macs_per_byte), beside = 0;
            int used = 0;
            while (used < nc && beside < target)
                keep_beside(&o, in_place, p, cand[used]), beside += accumulate_flops(src, cand[used]), used++;
            /* of the rest, the newest go on to the next collective, as few as leave the ones
             * after it least short of their targets; the others run here too */
            int g = next_seq_collective(src, i), q = g >= 0 ? src->vals[src->instrs[g].args[0]].def : -1;
            int keep = nc;
            if (g >= 0 && q > p) {
                double least = lack_ahead(src, &o, i, ranks, macs_per_byte, cand + nc, 0, pool);
                for (int k = nc - 1; k >= used && may_defer(src, cand[k], q); k--) {
                    double lack = lack_ahead(src, &o, i, ranks, macs_per_byte, cand + k, nc - k, pool);
                    if (lack < least)
                        least = lack, keep = k;
                }
            }
            for (int k = used; k < keep; k++)
                keep_beside(&o, in_place, p, cand[k]);
            ncarry = 0;
            for (int k = keep; k < nc; k++)
                carry[ncarry++] = cand[k];
            carried_at = p;
        }
        if (ir_op_has(in->op, IR_OPF_COLLECTIVE))
            last_collective = i;
    }
    for (int k = 0; k < ncarry; k++) /* nothing after to hide: where they were last placed */
        keep_beside(&o, in_place, carried_at, carry[k]);
    ir_func *dst = ir_func_new(m, src->name, src->kind);
    int *map = malloc(sizeof(int) * ((size_t)src->nvals + 1));
    for (int i = 0; i < n; i++) {
        if (o.moved[i])
            continue;
        ir_copy_instr(m, dst, src, &src->instrs[i], map);
        for (int k = o.after[i]; k >= 0; k = o.next[k])
            ir_copy_instr(m, dst, src, &src->instrs[k], map);
    }
    for (int i = 0; i < dst->ninstrs; i++) {
        ir_instr *in = &dst->instrs[i];
        if (ir_op_has(in->op, IR_OPF_SEQ_COLLECTIVE))
            in->attr[IR_ATTR_SEQ_OVERLAP] = work_before_use(dst, i, in->res[0]); /* what ir_overlapped reads */
    }
    ir_func_replace(m, fi, dst);
    free(o.after);
    free(o.next);
    free(o.moved);
    free(cand);
    free(carry);
    free(pool);
    free(in_place);
    free(map);
}

/* --- two chains (tp_comm_interleave): each one's collectives beside the other's work ---------- */

/* The index of the `assign` attribute of a GEMM writing a gradient (matmul_accumulate's,
 * moe_grouped_wgrad_accumulate's), or -1 */
static int assign_attr(const ir_instr *in) { return ir_attr_index(in->op, "assign"); }

static bool assigns(const ir_instr *in)
{
    return in->op == IR_OP_COPY || (assign_attr(in) >= 0 && in->attr[assign_attr(in)] != 0);
}

typedef struct {
    int *npred;                     /* per instruction: predecessors not yet emitted */
    int *succ_head, *succ_next, *succ_to; /* successor lists (edges) */
    int nedges, cap;
} dag;

static void add_edge(dag *d, int from, int to)
{
    if (d->nedges == d->cap) {
        d->cap = 2 * d->cap + 64;
        d->succ_next = realloc(d->succ_next, sizeof(int) * (size_t)d->cap);
        d->succ_to = realloc(d->succ_to, sizeof(int) * (size_t)d->cap);
    }
    d->succ_to[d->nedges] = to;
    d->succ_next[d->nedges] = d->succ_head[from];
    d->succ_head[from] = d->nedges++;
    d->npred[to]++;
}

/* The dependences of f's instructions: on the instructions making their operands, and, for
 * every global, of its other side effects (a bucket's all-reduce) on the writes before them and
 * of the writes after them on those; writes of one gradient between two such may go in any
 * order. (`global` instructions only name a buffer.) */
static dag build_dag(const ir_module *m, const ir_func *f)
{
    int n = f->ninstrs;
    dag d = {calloc((size_t)n + 1, sizeof(int)), malloc(sizeof(int) * ((size_t)n + 1)), NULL, NULL, 0, 0};
    int *barrier = malloc(sizeof(int) * ((size_t)m->nglobals + 1)), *wlast = malloc(sizeof(int) * ((size_t)m->nglobals + 1));
    int *wprev = malloc(sizeof(int) * ((size_t)n + 1));
    for (int i = 0; i < n; i++)
        d.succ_head[i] = -1;
    for (int g = 0; g < m->nglobals; g++)
        barrier[g] = wlast[g] = -1;
    for (int i = 0; i < n; i++) {
        const ir_instr *in = &f->instrs[i];
        for (int a = 0; a < in->nargs; a++)
            add_edge(&d, f->vals[in->args[a]].def, i);
        if (in->nres != 0)
            continue;
        /* a gradient's writes (ir_writes_global) commute once the first one emitted assigns */
        bool write = ir_writes_global(f, in);
        for (int a = 0; a < (write ? 1 : in->nargs); a++) {
            int g = ir_global_of(f, in->args[a]);
            if (g < 0)
                continue;
            if (barrier[g] >= 0 && barrier[g] != i)
                add_edge(&d, barrier[g], i);
            if (write) {
                wprev[i] = wlast[g], wlast[g] = i;
                continue;
            }
            for (int w = wlast[g]; w >= 0; w = wprev[w])
                add_edge(&d, w, i);
            barrier[g] = i, wlast[g] = -1;
        }
    }
    free(barrier);
    free(wlast);
    free(wprev);
    return d;
}

/* After reordering: the first emitted write of each gradient that some write assigned (the
 * step's first, with one micro-batch per step) assigns, and the others add. */
static void fix_first_writes(const ir_module *m, ir_func *f)
{
    bool *assigned = calloc((size_t)m->nglobals + 1, sizeof(bool)), *seen = calloc((size_t)m->nglobals + 1, sizeof(bool));
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < f->ninstrs; i++) {
            ir_instr *in = &f->instrs[i];
            int g = ir_writes_global(f, in) ? ir_global_of(f, in->args[0]) : -1;
            if (g < 0)
                continue;
            if (pass == 0) {
                assigned[g] |= assigns(in);
                continue;
            }
            bool first = assigned[g] && !seen[g];
            seen[g] = true;
            if (assign_attr(in) >= 0)
                in->attr[assign_attr(in)] = first;
            else
                in->op = first ? IR_OP_COPY : IR_OP_ACCUMULATE;
        }
    free(assigned);
    free(seen);
}

/* The ready instructions (all predecessors emitted, not yet emitted), in their original order. */
typedef struct {
    int *at, n;
} ready_list;

static void ready_add(ready_list *r, int i)
{
    int k = r->n++;
    while (k > 0 && r->at[k - 1] > i)
        r->at[k] = r->at[k - 1], k--;
    r->at[k] = i;
}

static void ready_remove(ready_list *r, int i)
{
    int k = 0;
    while (r->at[k] != i)
        k++;
    memmove(&r->at[k], &r->at[k + 1], sizeof(int) * (size_t)(r->n - k - 1));
    r->n--;
}

typedef bool (*wanted)(const ir_func *f, int i, const void *ctx);

typedef struct {
    int inflight;                   /* the sequence collective whose readers wait, or -1 */
    const double *to_collective;    /* per instruction: work_to_collective */
    const int *ready_at;            /* per instruction: collectives issued when it became ready */
    int issued;                     /* collectives issued so far */
    const unsigned *chain;          /* per instruction: chains_of */
} sched_state;

static bool want_collective(const ir_func *f, int i, const void *ctx)
{
    return ir_op_has(f->instrs[i].op, IR_OPF_SEQ_COLLECTIVE);
}

static bool want_independent(const ir_func *f, int i, const void *ctx)
{
    const sched_state *st = ctx;
    const ir_instr *in = &f->instrs[i];
    return !ir_op_has(in->op, IR_OPF_SEQ_COLLECTIVE) && (st->inflight < 0 || !ir_reads(in, f->instrs[st->inflight].res[0]));
}

/* Work no collective waits for (weight gradients) that two collectives have gone by since it
 * was ready: it runs now, so that what it reads does not stay alive to the end. */
static bool want_overdue(const ir_func *f, int i, const void *ctx)
{
    const sched_state *st = ctx;
    return st->to_collective[i] == HUGE_VAL && st->issued - st->ready_at[i] >= 2 && want_independent(f, i, ctx);
}

/* Work of the chain other than the one in flight. */
static bool want_other_chain(const ir_func *f, int i, const void *ctx)
{
    const sched_state *st = ctx;
    return st->inflight >= 0 && st->chain[i] != 0 && (st->chain[i] & st->chain[st->inflight]) == 0 &&
           want_independent(f, i, ctx);
}

static bool want_reader(const ir_func *f, int i, const void *ctx)
{
    const sched_state *st = ctx;
    return st->inflight >= 0 && ir_reads(&f->instrs[i], f->instrs[st->inflight].res[0]);
}

static bool want_any(const ir_func *f, int i, const void *ctx) { return true; }

/* The ready instruction that `want` accepts nearest to a sequence collective (the original order
 * breaks ties), or -1. */
static int first_ready(const ir_func *f, const ready_list *r, wanted want, const void *ctx)
{
    const sched_state *st = ctx;
    int best = -1;
    for (int k = 0; k < r->n; k++)
        if (want(f, r->at[k], ctx) && (best < 0 || st->to_collective[r->at[k]] < st->to_collective[best]))
            best = r->at[k];
    return best;
}

/* Per instruction: the work (work_of) on the shortest path from it to a sequence collective
 * that needs it, itself included; HUGE_VAL for work no collective needs (weight gradients, the
 * loss). The chain nearest its collective goes first, so that collective goes out early, with
 * the other chain's work still ahead to run beside it. */
static double *work_to_collective(const ir_func *f)
{
    int n = f->ninstrs;
    double *d = malloc(sizeof(double) * ((size_t)n + 1)), *after = malloc(sizeof(double) * ((size_t)n + 1));
    for (int i = 0; i < n; i++)
        after[i] = HUGE_VAL;
    for (int j = n - 1; j >= 0; j--) {
        const ir_instr *in = &f->instrs[j];
        d[j] = ir_op_has(in->op, IR_OPF_SEQ_COLLECTIVE) ? 0 : ir_work_macs(f, in) + after[j];
        for (int a = 0; a < in->nargs; a++) {
            int i = f->vals[in->args[a]].def;
            after[i] = d[j] < after[i] ? d[j] : after[i];
        }
    }
    free(after);
    return d;
}

/* Per instruction: which of the micro-batch's halves it computes on, bit 0 the first (rows from
 * row 0), bit 1 the second; 0 for what neither feeds (weights), both for what both do (the loss). */
static unsigned *chains_of(const ir_func *f)
{
    unsigned *c = calloc((size_t)f->ninstrs + 1, sizeof(unsigned));
    for (int j = 0; j < f->ninstrs; j++) {
        const ir_instr *in = &f->instrs[j];
        for (int a = 0; a < in->nargs; a++)
            c[j] |= c[f->vals[in->args[a]].def];
        if (in->op == IR_OP_ROWS)
            c[j] = in->attr[IR_ATTR_ROWS_FIRST] == 0 ? 1u : 2u;
    }
    return c;
}

/* micro_step of an interleaved plan holds two chains (the micro-batch's halves) that meet only
 * in the loss, the weights and the gradients. A list schedule over their dependences: a ready
 * sequence collective goes out at once when none is in flight (the comm stream runs one after
 * the other, and a join waits for all of them); beside it, ready work that does not need it
 * (the other chain's first, nearest its own next collective) until that work covers its bytes'
 * time (hiding_target), or only half the other chain's work before its own collective where
 * this chain's next collective follows after little work; then its reader joins it. With
 * nothing in flight, the chain nearest its next collective goes first. So the chains fall into opposite phases: each one's reduce-scatter
 * and the all-gather after it (only an add and a norm between) run beside the other's attention
 * or MLP, forward and backward. Weight gradients fill in, each at most two collectives late. */
static void interleave_func(ir_module *m, int fi, double macs_per_byte)
{
    const ir_func *src = m->funcs[fi];
    int n = src->ninstrs, ranks = (int)ir_cfg_int(m, IR_CFG_TENSOR_MODEL_PARALLEL_SIZE), count = 0;
    dag d = build_dag(m, src);
    ready_list ready = {malloc(sizeof(int) * ((size_t)n + 1)), 0};
    int *order = malloc(sizeof(int) * ((size_t)n + 1)), *ready_at = calloc((size_t)n + 1, sizeof(int));
    for (int i = 0; i < n; i++)
        if (d.npred[i] == 0)
            ready_add(&ready, i);
    double *to_collective = work_to_collective(src);
    unsigned *chain = chains_of(src);
    sched_state st = {-1, to_collective, ready_at, 0, chain};
    double covered = 0, target = 0;
    while (count < n) {
        int pick = st.inflight < 0 ? first_ready(src, &ready, want_collective, &st) : -1;
        if (pick < 0)
            pick = first_ready(src, &ready, want_overdue, &st);
        if (pick < 0 && st.inflight >= 0 && covered < target)
            pick = first_ready(src, &ready, want_independent, &st);
        if (pick < 0 && st.inflight >= 0 && (pick = first_ready(src, &ready, want_reader, &st)) >= 0)
            st.inflight = -1; /* joined */
        if (pick < 0)
            pick = first_ready(src, &ready, want_independent, &st);
        if (pick < 0)
            pick = first_ready(src, &ready, want_any, &st);
        const ir_instr *in = &src->instrs[pick];
        ready_remove(&ready, pick);
        order[count++] = pick;
        if (ir_op_has(in->op, IR_OPF_SEQ_COLLECTIVE)) {
            st.inflight = pick;
            st.issued++;
            covered = 0;
            target = hiding_target(src, pick, ranks, macs_per_byte);
            /* where this chain's next collective follows with little work between (a
             * reduce-scatter's all-gather, after a norm), that one needs the other chain's work
             * too: this one takes at most half of what the other has before its own collective */
            double gap = HUGE_VAL;
            for (int e = d.succ_head[pick]; e >= 0; e = d.succ_next[e])
                gap = to_collective[d.succ_to[e]] < gap ? to_collective[d.succ_to[e]] : gap;
            int other = first_ready(src, &ready, want_other_chain, &st);
            if (other >= 0 && gap < target && to_collective[other] > 0 && 0.5 * to_collective[other] < target)
                target = 0.5 * to_collective[other];
        } else if (st.inflight >= 0) {
            covered += ir_work_macs(src, in);
        }
        for (int e = d.succ_head[pick]; e >= 0; e = d.succ_next[e])
            if (--d.npred[d.succ_to[e]] == 0) {
                ready_add(&ready, d.succ_to[e]);
                ready_at[d.succ_to[e]] = st.issued;
            }
    }
    ir_func *dst = ir_func_new(m, src->name, src->kind);
    int *map = malloc(sizeof(int) * ((size_t)src->nvals + 1));
    for (int k = 0; k < n; k++)
        ir_copy_instr(m, dst, src, &src->instrs[order[k]], map);
    for (int i = 0; i < dst->ninstrs; i++) {
        ir_instr *in = &dst->instrs[i];
        if (ir_op_has(in->op, IR_OPF_SEQ_COLLECTIVE))
            in->attr[IR_ATTR_SEQ_OVERLAP] = work_before_use(dst, i, in->res[0]); /* what ir_overlapped reads */
    }
    fix_first_writes(m, dst);
    ir_func_replace(m, fi, dst);
    free(d.npred);
    free(d.succ_head);
    free(d.succ_next);
    free(d.succ_to);
    free(ready.at);
    free(order);
    free(ready_at);
    free(to_collective);
    free(chain);
    free(map);
}

/* --- expert parallelism's all-to-alls beside the work that needs neither (moe_shared_expert_overlap) ---
 * Megatron's --moe-shared-expert-overlap. Each all_to_all_v gets, between it and the first reader of
 * its results, the instructions that need neither it nor what waits for it: those before it whose
 * results only instructions from that reader on read (sunk: the shared expert's backward, before the
 * combine's gradient) and those after that reader whose operands exist before it (hoisted, looking
 * as far as the next layer's all-to-all: the shared expert's forward, after the combine, beside the
 * dispatch). An instruction placed beside one all-to-all stays there. Only work moves: no
 * collective, host wait, input or output; a gradient's write (IR_OPF_STORES_GLOBAL) or a read of a
 * global the function writes does not cross another instruction touching that global. The
 * all-to-all is then marked overlap = 1 where real work lies before its results' first reader:
 * the GPU runs it on the comm stream (its side lane) beside that work. */

/* Whether instruction k may move: work, or a gradient's write. */
static bool movable(const ir_func *f, int k)
{
    const ir_instr *in = &f->instrs[k];
    if (ir_op_has(in->op, IR_OPF_COLLECTIVE) || ir_op_has(in->op, IR_OPF_HOST_WAIT))
        return false;
    if (ir_op_has(in->op, IR_OPF_SYM) && in->op != IR_OP_GLOBAL) /* input, output */
        return false;
    return in->nres > 0 || ir_op_has(in->op, IR_OPF_STORES_GLOBAL);
}

/* Whether instruction k writes global g (operand 0 of a gradient's write). */
static bool writes_global(const ir_func *f, int k, int g)
{
    const ir_instr *in = &f->instrs[k];
    return ir_op_has(in->op, IR_OPF_STORES_GLOBAL) && in->nargs > 0 && ir_global_of(f, in->args[0]) == g;
}

static bool touches_global(const ir_func *f, int k, int g)
{
    const ir_instr *in = &f->instrs[k];
    for (int a = 0; a < in->nargs; a++)
        if (ir_global_of(f, in->args[a]) == g)
            return true;
    return false;
}

/* Whether moving instruction j over instructions [lo, hi] (but those in `skip`) would reorder it with
 * another write of a global it touches, or a read of one it writes. written: per global, whether
 * the function writes it. */
static bool global_conflict(const ir_func *f, const bool *written, const bool *skip, int j, int lo, int hi)
{
    const ir_instr *in = &f->instrs[j];
    for (int a = 0; a < in->nargs; a++) {
        int g = ir_global_of(f, in->args[a]);
        if (g < 0 || !written[g])
            continue;
        bool writer = writes_global(f, j, g);
        for (int k = lo; k <= hi; k++)
            if (k != j && !skip[k] && (writes_global(f, k, g) || (writer && touches_global(f, k, g))))
                return true;
    }
    return false;
}

/* The first reader of any result of instruction i. */
static int first_reader_of(const ir_func *f, int i)
{
    int u = f->ninstrs;
    for (int r = 0; r < f->instrs[i].nres; r++) {
        int k = ir_first_reader(f, i, f->instrs[i].res[r]);
        u = k < u ? k : u;
    }
    return u;
}

/* Whether every reader of instruction j's results in (j, end) is in `sunk`. */
static bool read_only_by(const ir_func *f, int j, int end, const bool *sunk)
{
    const ir_instr *in = &f->instrs[j];
    for (int k = j + 1; k < end; k++)
        for (int r = 0; r < in->nres; r++)
            if (!sunk[k] && ir_reads(&f->instrs[k], in->res[r]))
                return false;
    return true;
}

/* The instructions that move beside the all-to-all at i of f, whose results' first reader is u. */
typedef struct {
    const ir_func *f;
    int i, u;
    const bool *pinned;             /* placed beside an earlier all-to-all: they stay */
    const bool *written;            /* per global: a gradient's write in f names it */
    bool *sunk, *hoisted, *away;    /* per instruction: moves down to u, up to u, either */
} a2a_moves;

/* sunk: the instructions after the all-to-all before i (prev) whose results only instructions from
 * u on read, or others sunk; newest first, so that a chain goes whole */
static void choose_sunk(a2a_moves *v, int prev)
{
    for (int j = v->i - 1; j > prev; j--)
        if (!v->pinned[j] && movable(v->f, j) && read_only_by(v->f, j, v->u, v->sunk) &&
            !global_conflict(v->f, v->written, v->away, j, j + 1, v->u - 1))
            v->sunk[j] = v->away[j] = true;
}

/* hoisted: the instructions after u, before lim, whose operands exist before u (nothing between the
 * all-to-all and u reads its results) or are hoisted too; a parameter's `global` goes with its reader */
static void choose_hoisted(a2a_moves *v, int lim)
{
    const ir_func *f = v->f;
    for (int j = v->u + 1; j < lim; j++) {
        const ir_instr *in = &f->instrs[j];
        if (v->pinned[j] || !movable(f, j) || in->op == IR_OP_GLOBAL)
            continue;
        bool ready = true;
        for (int a = 0; a < in->nargs && ready; a++) {
            int d = f->vals[in->args[a]].def;
            ready = (d < v->u && d != v->i) || v->hoisted[d] ||
                    (d > v->u && f->instrs[d].op == IR_OP_GLOBAL && !v->pinned[d]);
        }
        if (!ready || global_conflict(f, v->written, v->away, j, v->u, j - 1))
            continue;
        for (int a = 0; a < in->nargs; a++) {
            int d = f->vals[in->args[a]].def;
            if (d > v->u)
                v->hoisted[d] = v->away[d] = true;
        }
        v->hoisted[j] = v->away[j] = true;
    }
}

/* Function fi rebuilt with v's moves, before u: the sunk, then the hoisted, each in their order;
 * the all-to-all's overlap set. Returns its index; *pinned becomes the new function's. */
static int a2a_rebuild(ir_module *m, int fi, const a2a_moves *v, bool **pinned)
{
    const ir_func *src = m->funcs[fi];
    int n = src->ninstrs, at = -1, *map = malloc(sizeof(int) * ((size_t)src->nvals + 1));
    bool *next = calloc((size_t)n + 1, sizeof(bool));
    ir_func *dst = ir_func_new(m, src->name, src->kind);
    for (int k = 0; k < n; k++) {
        if (v->away[k])
            continue;
        for (int pass = 0; k == v->u && pass < 2; pass++)
            for (int j = 0; j < n; j++)
                if (pass == 0 ? v->sunk[j] : v->hoisted[j]) {
                    next[dst->ninstrs] = true;
                    ir_copy_instr(m, dst, src, &src->instrs[j], map);
                }
        if (k == v->i)
            at = dst->ninstrs;
        next[dst->ninstrs] = (*pinned)[k];
        ir_copy_instr(m, dst, src, &src->instrs[k], map);
    }
    ir_instr *a2a = &dst->instrs[at];
    int overlap = IR_ATTR_ALL_TO_ALL_V_OVERLAP;
    a2a->attr[overlap] = 0;
    for (int k = at + 1, end = first_reader_of(dst, at); k < end; k++)
        if (is_work(dst->instrs[k].op))
            a2a->attr[overlap] = 1; /* what ir_overlapped reads */
    ir_func_replace(m, fi, dst);
    free(*pinned);
    *pinned = next;
    free(map);
    return at;
}

/* Puts work beside the all_to_all_v at instruction i of function fi (rebuilt; pinned: per
 * instruction, placed beside an all-to-all already). Returns its index in the new function. */
static int a2a_beside(ir_module *m, int fi, int i, bool **pinned, bool *written)
{
    const ir_func *f = m->funcs[fi];
    int n = f->ninstrs, prev = -1, lim = n, seen = 0;
    a2a_moves v = {f, i, first_reader_of(f, i), *pinned, written, calloc((size_t)n + 1, sizeof(bool)),
                   calloc((size_t)n + 1, sizeof(bool)), calloc((size_t)n + 1, sizeof(bool))};
    for (int k = i - 1; k >= 0 && prev < 0; k--)
        if (f->instrs[k].op == IR_OP_ALL_TO_ALL_V)
            prev = k;
    for (int k = v.u + 1; k < n && lim == n; k++) /* as far as the all-to-all after the next one */
        if (f->instrs[k].op == IR_OP_ALL_TO_ALL_V && ++seen == 2)
            lim = k;
    if (v.u < n) {
        choose_sunk(&v, prev);
        choose_hoisted(&v, lim);
    }
    int at = a2a_rebuild(m, fi, &v, pinned);
    free(v.sunk);
    free(v.hoisted);
    free(v.away);
    return at;
}

/* The all-to-alls of function fi in turn; written (per global: a gradient's write in the function
 * names it) is the same for every rebuild, which only reorders. */
static void a2a_overlap_func(ir_module *m, int fi)
{
    const ir_func *f = m->funcs[fi];
    bool *pinned = calloc((size_t)f->ninstrs + 1, sizeof(bool)), *written = calloc((size_t)m->nglobals + 1, sizeof(bool));
    for (int k = 0; k < f->ninstrs; k++) {
        int g = ir_op_has(f->instrs[k].op, IR_OPF_STORES_GLOBAL) ? ir_global_of(f, f->instrs[k].args[0]) : -1;
        if (g >= 0)
            written[g] = true;
    }
    for (int i = 0; i < m->funcs[fi]->ninstrs; i++)
        if (m->funcs[fi]->instrs[i].op == IR_OP_ALL_TO_ALL_V)
            i = a2a_beside(m, fi, i, &pinned, written);
    free(pinned);
    free(written);
}

bool pass_comm_overlap(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen)
{
    bool interleaved = ir_cfg_int(m, IR_CFG_TP_COMM_INTERLEAVE) == 2;
    double macs_per_byte = mcc_target_macs_per_wire_byte(opts->target);
    for (int f = 0; f < m->nfuncs; f++) {
        if (interleaved && m->funcs[f]->kind == IR_FUNC_STEP)
            interleave_func(m, f, macs_per_byte);
        else
            overlap_func(m, f, macs_per_byte);
        if (ir_cfg_bool(m, IR_CFG_MOE_SHARED_EXPERT_OVERLAP))
            a2a_overlap_func(m, f);
    }
    return true;
}
