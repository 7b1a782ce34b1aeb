/* row_bounds.c — the work over expert parallelism's receive buffers bounded by the rows received.
 * A dispatch's buffers ([C, *]) have room for the dropless worst case, C = ep N min(k, E/ep) rows
 * (at DeepSeek-V3's ep 64, 32 times what balanced routing fills), while only the rows received hold
 * data: the run sorts move those alone and the grouped GEMMs multiply each expert's counted rows.
 * This pass follows those rows through each function and
 *   - gives every elementwise op over them (the experts' activation, its gradient, the sum of the
 *     up and gate projections' input gradients) their row bound (ir_row_bound: the dispatch's
 *     local counts, whose sum the kernels read on the device), so that it walks the rows received,
 *     not the room, and the grouped GEMMs too, so that they leave their results' room as it is
 *     rather than zero it (the zeros are for a token-dropping capacity's dropped rows, which the
 *     combine reads with weight 0: behind a dispatch no reader looks past the rows received);
 *   - marks a dispatch's all_to_all_v whose every reader is a run sort `unread_room`, so that it
 *     leaves the room past the received rows as it is instead of zeroing it.
 * A value holds the rows of a dispatch's counts when a run sort made it (its local counts, one
 * canonical value per `came`: the backward's run sorts recount what the forward's counted), a
 * grouped GEMM made it from such rows by the same counts, or a bounded op made it from operands
 * bounded alike. A pipeline stage's backward (and wgrad) reads its forward's counts through a stash
 * (passes/pipeline.c); where it also sorts the same `came`, stashed in too, its grouped GEMMs are
 * given that recount instead (the same numbers, counted here: stashed_counts), so they and what
 * follows them are bounded as the unpipelined step's are, and costed by the rows received. */
#include "passes.h"

#include <stdlib.h>

typedef struct {
    int *rows_of;                   /* per value: the canonical counts bounding its rows, or -1 */
    int *counts_of;                 /* per value: a run sort's `came` -> its first counts; a counts
                                       value -> its canonical one; else -1 */
} bounds;

/* Per stash global: the function and value copied into it (pipeline.c's stash_into), or -1. */
typedef struct {
    int *func, *val;
} stash_map;

static stash_map stash_map_of(const ir_module *m)
{
    stash_map s = {malloc(sizeof(int) * (size_t)(m->nglobals + 1)), malloc(sizeof(int) * (size_t)(m->nglobals + 1))};
    for (int g = 0; g < m->nglobals; g++)
        s.func[g] = s.val[g] = -1;
    for (int k = 0; k < m->nfuncs; k++) {
        const ir_func *f = m->funcs[k];
        for (int i = 0; i < f->ninstrs; i++) {
            const ir_instr *in = &f->instrs[i], *dst = in->op == IR_OP_COPY ? &f->instrs[f->vals[in->args[0]].def] : NULL;
            if (dst && dst->nargs == 0 && dst->global >= 0 && m->globals[dst->global].kind == IR_GLOBAL_STASH)
                s.func[dst->global] = k, s.val[dst->global] = in->args[1];
        }
    }
    return s;
}

/* The value function f's value v holds as the function that made it made it: through every stash
 * between (the wgrad's of the backward's of the forward's), into *func; v itself where no stash. */
static int stash_origin(const ir_module *m, const stash_map *s, int fk, int v, int *func)
{
    for (int depth = 0; depth < 8; depth++) { /* a stash of a stash at most, each a pipeline cut */
        const ir_instr *leaf = &m->funcs[fk]->instrs[m->funcs[fk]->vals[v].def];
        int g = leaf->nargs == 0 ? leaf->global : -1;
        if (g < 0 || s->func[g] < 0)
            break;
        fk = s->func[g], v = s->val[g];
    }
    return *func = fk, v;
}

/* The canonical counts of function fk that count what run sort counts `sv` of function sk counted:
 * those of fk's own run sort of the same `came` (stashed in from where sk's came from), or -1. */
static int counts_here(const ir_module *m, const stash_map *s, int fk, const bounds *b, int sk, int sv)
{
    const ir_instr *sort = &m->funcs[sk]->instrs[m->funcs[sk]->vals[sv].def];
    if (sk == fk || sort->op != IR_OP_MOE_SORT_RUNS || sort->res[1] != sv)
        return -1;
    int ok, ov = stash_origin(m, s, sk, sort->args[1], &ok); /* that came's own origin */
    for (int v = 0; v < m->funcs[fk]->nvals; v++) { /* a `came` sorted here: its counts_of is set */
        int ck, cv = b->counts_of[v] >= 0 && b->counts_of[v] != v ? stash_origin(m, s, fk, v, &ck) : -1;
        if (cv >= 0 && ck == ok && cv == ov)
            return b->counts_of[v];
    }
    return -1;
}

/* The canonical local counts of run sort `in` (the first sort of the same `came`). */
static int sort_counts(bounds *b, const ir_instr *in)
{
    int came = in->args[1];
    if (b->counts_of[came] < 0)
        b->counts_of[came] = in->res[1];
    b->counts_of[in->res[1]] = b->counts_of[came];
    return b->counts_of[came];
}

/* The bound every operand of elementwise `in` shares, or -1 (an operand of other rows, or none
 * bounded). */
static int shared_bound(const bounds *b, const ir_instr *in)
{
    int bound = b->rows_of[in->args[0]];
    for (int a = 1; a < ir_ops[in->op].nargs && bound >= 0; a++)
        if (b->rows_of[in->args[a]] != bound)
            bound = -1;
    return bound;
}

/* Gives `in` row bound `bound` (one given it already, by an earlier run or the text, stays), and
 * its results. */
static void bound_rows(bounds *b, ir_instr *in, int bound)
{
    if (ir_row_bound(in) < 0) {
        in->args = realloc(in->args, sizeof(int) * (size_t)(in->nargs + 1));
        in->args[in->nargs++] = bound;
    }
    for (int r = 0; r < in->nres; r++)
        b->rows_of[in->res[r]] = ir_row_bound(in);
}

/* Whether every reader of value v in f is a run sort (which moves the received rows alone). */
static bool read_by_run_sorts_only(const ir_func *f, int v)
{
    for (int i = f->vals[v].def + 1; i < f->ninstrs; i++)
        if (ir_reads(&f->instrs[i], v) && f->instrs[i].op != IR_OP_MOE_SORT_RUNS)
            return false;
    return true;
}

/* Function fk's rows bounds (rows_all[fk], kept for the functions after it that read its stashes). */
static void bound_func(const ir_module *m, const stash_map *s, int fk, int **rows_all)
{
    ir_func *f = m->funcs[fk];
    bounds b = {malloc(sizeof(int) * (size_t)(f->nvals + 1)), malloc(sizeof(int) * (size_t)(f->nvals + 1))};
    for (int v = 0; v < f->nvals; v++)
        b.rows_of[v] = b.counts_of[v] = -1;
    for (int i = 0; i < f->ninstrs; i++) {
        ir_instr *in = &f->instrs[i];
        int buffer, counts, sk, sv;
        if (ir_grouped_operands(in, &buffer, &counts) && b.counts_of[in->args[counts]] < 0) {
            sv = stash_origin(m, s, fk, in->args[counts], &sk); /* a run sort's counts, stashed in */
            int here = counts_here(m, s, fk, &b, sk, sv);
            if (here >= 0)
                in->args[counts] = here;
        }
        for (int a = 0; a < in->nargs; a++) { /* a stashed value bounded where it was made */
            int v = in->args[a];
            sv = b.rows_of[v] < 0 ? stash_origin(m, s, fk, v, &sk) : -1;
            if (sv >= 0 && sk != fk && rows_all[sk] && rows_all[sk][sv] >= 0)
                b.rows_of[v] = counts_here(m, s, fk, &b, sk, rows_all[sk][sv]);
        }
        switch (in->op) {
        case IR_OP_MOE_SORT_RUNS:
            b.rows_of[in->res[0]] = sort_counts(&b, in);
            break;
        case IR_OP_MOE_GROUPED_MATMUL: /* on rows bounded by its own counts: bounded alike */
            if (b.rows_of[in->args[0]] >= 0 && b.rows_of[in->args[0]] == b.counts_of[in->args[2]])
                bound_rows(&b, in, b.rows_of[in->args[0]]);
            break;
        case IR_OP_ALL_TO_ALL_V:
            if (read_by_run_sorts_only(f, in->res[0]))
                in->attr[IR_ATTR_ALL_TO_ALL_V_UNREAD_ROOM] = 1;
            break;
        default:
            if (ir_op_has(in->op, IR_OPF_ROW_BOUND) && shared_bound(&b, in) >= 0)
                bound_rows(&b, in, shared_bound(&b, in));
        }
    }
    rows_all[fk] = b.rows_of;
    free(b.counts_of);
}

bool pass_row_bounds(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen)
{
    if (ir_cfg_int(m, IR_CFG_EXPERT_MODEL_PARALLEL_SIZE) <= 1)
        return true; /* no dispatch: every buffer's rows are routed rows */
    stash_map s = stash_map_of(m);
    int **rows_all = calloc((size_t)m->nfuncs + 1, sizeof *rows_all);
    for (int k = 0; k < m->nfuncs; k++) /* a stage's forward before the backward reading its stashes */
        bound_func(m, &s, k, rows_all);
    for (int k = 0; k < m->nfuncs; k++)
        free(rows_all[k]);
    free(rows_all);
    free(s.func);
    free(s.val);
    return true;
}
