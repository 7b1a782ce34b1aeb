/* comm_overlap.c — sequence parallelism's collectives overlap the work that does not need them:
 * in the backward, each reduce_scatter_seq and all_gather_seq runs beside weight gradients'
 * GEMMs of the same layer. Each reduce_scatter_seq moves up to right after the instruction making
 * its operand, and the matmul_accumulates (weight gradients) autodiff emitted since the previous
 * collective move down to right after it. When the next sequence collective is an all-gather
 * (the next sublayer's output gradient), the last of those GEMMs, about half their work, move on
 * past it instead, and it moves up to right after its operand. A collective that real work (not a
 * `global` or a `reshape`) then separates from its result's first use is marked overlap = 1: the
 * GPU runs it on the comm stream, which the compute stream joins before that first use, and the
 * memory plan keeps its operand's bytes until then. */
#include "passes.h"

#include <stdlib.h>
#include <string.h>

static bool is_work(ir_op op) { return op != IR_OP_GLOBAL && op != IR_OP_RESHAPE; }

/* Whether real work lies between instruction i and the first instruction reading value v. */
static bool work_before_use(const ir_func *f, int i, int v)
{
    for (int j = i + 1; j < f->ninstrs; j++) {
        const ir_instr *in = &f->instrs[j];
        for (int a = 0; a < in->nargs; a++)
            if (in->args[a] == v)
                return false;
        if (is_work(in->op))
            return true;
    }
    return false;
}

/* Whether the matmul_accumulate at k may move past instruction p: no instruction in (k, p] names
 * the global it accumulates into. */
static bool may_defer(const ir_func *f, int k, int p)
{
    const char *dst = ir_global_of(f, f->instrs[k].args[0]);
    for (int j = k + 1; j <= p; j++)
        if (f->instrs[j].op == IR_OP_GLOBAL && strcmp(f->instrs[j].sym, dst) == 0)
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

/* A matmul_accumulate's multiply-adds (dst += op(a) op(b), attrs ta, tb), up to a constant:
 * what it takes to hide a collective beside it. */
static double accumulate_flops(const ir_func *f, int k)
{
    const ir_instr *in = &f->instrs[k];
    const ir_type *a = &f->vals[in->args[1]].type, *b = &f->vals[in->args[2]].type;
    double na = (double)ir_numel(a), last = (double)a->dims[a->ndim - 1];
    double contracted = in->attr[0] != 0 ? na / last : last;
    return na * (double)ir_numel(b) / contracted;
}

/* The next sequence-parallel collective after instruction i, or -1. */
static int next_seq_collective(const ir_func *f, int i)
{
    for (int j = i + 1; j < f->ninstrs; j++)
        if (f->instrs[j].op == IR_OP_REDUCE_SCATTER_SEQ || f->instrs[j].op == IR_OP_ALL_GATHER_SEQ)
            return j;
    return -1;
}

static void overlap_func(ir_module *m, int fi)
{
    const ir_func *src = m->funcs[fi];
    int n = src->ninstrs, last_collective = -1;
    reorder o = {malloc(sizeof(int) * (size_t)(n + 1)), malloc(sizeof(int) * (size_t)(n + 1)),
                 calloc((size_t)n + 1, sizeof(bool))};
    int *pool = malloc(sizeof(int) * (size_t)(n + 1)), npool = 0;
    int *carry = malloc(sizeof(int) * (size_t)(n + 1)), ncarry = 0, carry_to = -1; /* ... for the all-gather carry_to */
    for (int k = 0; k < n; k++)
        o.after[k] = o.next[k] = -1;
    for (int i = 0; i < n; i++) {
        const ir_instr *in = &src->instrs[i];
        if (in->op == IR_OP_REDUCE_SCATTER_SEQ) {
            int p = src->vals[in->args[0]].def;
            emit_after(&o, p, i);
            npool = 0;
            double total = 0;
            for (int k = last_collective + 1; k < p; k++)
                if (src->instrs[k].op == IR_OP_MATMUL_ACCUMULATE && !o.moved[k] && may_defer(src, k, p)) {
                    pool[npool++] = k;
                    total += accumulate_flops(src, k);
                }
            /* When an all-gather comes next, the last of these GEMMs (about half their work) wait
             * for it instead: in the backward, each sublayer's input gradient is reduce-scattered,
             * then the next one's output gradient all-gathered, and each wants GEMMs beside it. */
            int g = next_seq_collective(src, i), q = g >= 0 ? src->vals[src->instrs[g].args[0]].def : -1;
            int keep = npool;
            if (g >= 0 && src->instrs[g].op == IR_OP_ALL_GATHER_SEQ && q > p) {
                double moved = 0;
                while (keep > 1 && may_defer(src, pool[keep - 1], q) &&
                       moved + accumulate_flops(src, pool[keep - 1]) <= 0.5 * total) {
                    moved += accumulate_flops(src, pool[keep - 1]);
                    keep--;
                }
            }
            for (int k = 0; k < keep; k++)
                emit_after(&o, p, pool[k]);
            ncarry = 0, carry_to = keep < npool ? g : -1;
            for (int k = keep; k < npool; k++)
                carry[ncarry++] = pool[k], o.moved[pool[k]] = true;
        }
        if (in->op == IR_OP_ALL_GATHER_SEQ && i == carry_to) {
            int q = src->vals[in->args[0]].def;
            emit_after(&o, q, i);
            for (int k = 0; k < ncarry; k++)
                o.moved[carry[k]] = false, emit_after(&o, q, carry[k]);
            ncarry = 0, carry_to = -1;
        }
        if (ir_op_communicates(in->op))
            last_collective = i;
    }
    ir_func *dst = ir_func_new(m, src->name);
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
        if (in->op == IR_OP_REDUCE_SCATTER_SEQ || in->op == IR_OP_ALL_GATHER_SEQ)
            in->attr[1] = work_before_use(dst, i, in->res[0]); /* what ir_overlapped reads */
    }
    ir_func_replace(m, fi, dst);
    free(o.after);
    free(o.next);
    free(o.moved);
    free(pool);
    free(carry);
    free(map);
}

bool pass_comm_overlap(ir_module *m, char *err, size_t errlen)
{
    for (int f = 0; f < m->nfuncs; f++)
        overlap_func(m, f);
    return true;
}
