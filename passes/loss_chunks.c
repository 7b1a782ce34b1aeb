/* loss_chunks.c — the output head and its cross entropy over chunks of the micro-batch's tokens
 * (config cross_entropy_chunks n > 1), so that one chunk's logits are live at a time, not the
 * whole [tokens, vocabulary] (LLaMA-3's 128,256 columns at 8,192 tokens: 1.96 GiB of bf16, the
 * peak of a short model's step). After the fusion pass the head is
 *
 *     logits = matmul x, W {tb=1}                       x [*, H] (T tokens), W [V, H]
 *     dlogits, loss = cross_entropy_with_grad logits, targets, fill {value=s}
 *     output @loss loss
 *     dx = matmul dlogits, W                            (the backward's first instructions)
 *     matmul_accumulate @W.grad, dlogits, x {ta=1}
 *
 * and becomes, at the cross entropy, for each chunk c of T/n tokens (rows views of x and targets):
 *
 *     logits_c = matmul x_c, W {tb=1};  dlogits_c, loss_c = cross_entropy_with_grad logits_c, targets_c, s/n
 *     dx_c = matmul dlogits_c, W;       matmul_accumulate @W.grad, dlogits_c, x_c {ta=1} (assign: chunk 0's)
 *
 * the loss (sum of loss_c) / n and dx the chunks' dx_c concatenated: the same sums (each chunk's
 * mean over T/n tokens, dloss s/n, is the whole mean's share), the weight gradient's GEMM split
 * along its token dimension. Each further chunk reads W again and adds into W's fp32 gradient once
 * more: the step-time model charges that, the memory plan frees each chunk's logits before the
 * next (with --keep-logits the chunks' logits are concatenated for the output: no saving, the same
 * computation, which the numerics tests compare). Heads of another shape (vocabulary-parallel
 * cross entropy under tp, a pipeline's last stage, whose backward is a function of its own) stay
 * whole. The weight gradient moves ahead of `output @loss`, past nothing that names its global; it
 * reads the forward's x, where selective recompute of layernorm had it read a recomputation of the
 * final norm (then left out). */
#include "passes.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct {
    int mm, ce, dx, acc; /* the head's instructions: logits, cross entropy, dx, the weight gradient */
    bool kept;           /* the logits are an output too (--keep-logits): the chunks' are concatenated */
    int redo;            /* the backward's recomputation of x the weight gradient reads (selective
                            recompute of layernorm: the final norm), which the chunks leave unread; -1 */
} head;

/* The reader of v after instruction i of op `op` with v as operand `arg`, or -1. */
static int reader(const ir_func *f, int i, ir_op op, int arg, int v)
{
    for (int j = i + 1; j < f->ninstrs; j++)
        if (f->instrs[j].op == op && f->instrs[j].args[arg] == v)
            return j;
    return -1;
}

/* Whether instructions i and j compute the same: one op, operands and attributes (a recomputation). */
static bool same_instr(const ir_func *f, int i, int j)
{
    const ir_instr *a = &f->instrs[i], *b = &f->instrs[j];
    if (a->op != b->op || a->nargs != b->nargs || a->nres != 1 || b->nres != 1)
        return false;
    for (int k = 0; k < a->nargs; k++)
        if (a->args[k] != b->args[k])
            return false;
    for (int k = 0; k < IR_MAX_ATTRS; k++)
        if (a->attr[k] != b->attr[k])
            return false;
    return true;
}

/* Whether an instruction in (from, to) other than `except` names global g. */
static bool names_between(const ir_func *f, int from, int to, int except, int g)
{
    for (int j = from + 1; j < to; j++)
        for (int a = 0; j != except && a < f->instrs[j].nargs; a++)
            if (ir_global_of(f, f->instrs[j].args[a]) == g)
                return true;
    return false;
}

/* The head of cross_entropy_with_grad instruction ce, as the header draws it, when every piece is
 * there and read only as drawn (uses: each value's readers; the logits also by an output after the
 * cross entropy), else false. */
static bool head_of(const ir_func *f, int ce, const int *uses, head *h)
{
    const ir_instr *in = &f->instrs[ce];
    int logits = in->args[0], dlogits = in->res[0];
    h->ce = ce;
    h->mm = f->vals[logits].def;
    h->kept = uses[logits] == 2 && reader(f, ce, IR_OP_OUTPUT, 0, logits) >= 0;
    const ir_instr *mm = &f->instrs[h->mm];
    if (mm->op != IR_OP_MATMUL || mm->attr[IR_ATTR_TA] != 0 || mm->attr[IR_ATTR_TB] != 1 || uses[logits] != 1 + h->kept ||
        f->instrs[f->vals[in->args[2]].def].op != IR_OP_FILL || uses[dlogits] != 2)
        return false;
    int x = mm->args[0], w = mm->args[1];
    h->dx = reader(f, ce, IR_OP_MATMUL, 0, dlogits);
    h->acc = reader(f, ce, IR_OP_MATMUL_ACCUMULATE, 1, dlogits);
    if (h->dx < 0 || h->acc < 0)
        return false;
    const ir_instr *dx = &f->instrs[h->dx], *acc = &f->instrs[h->acc];
    int xr = acc->args[2];
    h->redo = xr != x && uses[xr] == 1 && same_instr(f, f->vals[x].def, f->vals[xr].def) ? f->vals[xr].def : -1;
    return dx->args[1] == w && dx->attr[IR_ATTR_TA] == 0 && dx->attr[IR_ATTR_TB] == 0 && (acc->args[2] == x || h->redo >= 0) &&
           acc->attr[IR_ATTR_TA] == 1 && acc->attr[IR_ATTR_TB] == 0 &&
           !names_between(f, ce, h->acc, h->dx, ir_global_of(f, acc->args[0]));
}

/* Value v viewed as [tokens] (targets) or [tokens, its last dim] (x): a reshape, a view */
static int as_rows(ir_module *m, ir_func *dst, int v, int64_t tokens, bool width)
{
    ir_type t = dst->vals[v].type;
    t = ir_tensor(t.dtype, width ? 2 : 1, (int64_t[]){tokens, t.dims[t.ndim - 1]});
    return ir_emit(m, dst, IR_OP_RESHAPE, &v, 1, NULL, NULL, &t);
}

/* Emits head h of src over n chunks into dst (map: src values to dst's), mapping the loss and dx. */
static void emit_chunks(ir_module *m, ir_func *dst, const ir_func *src, const head *h, int n, int *map)
{
    const ir_instr *mm = &src->instrs[h->mm], *ce = &src->instrs[h->ce], *dx = &src->instrs[h->dx],
                   *acc = &src->instrs[h->acc];
    const ir_instr *seed = &src->instrs[src->vals[ce->args[2]].def];
    int64_t tokens = ir_numel(&src->vals[ce->args[1]].type), rows = tokens / n;
    int x = as_rows(m, dst, map[mm->args[0]], tokens, true), targets = as_rows(m, dst, map[ce->args[1]], tokens, false);
    double share = seed->attr[IR_ATTR_FILL_VALUE] / n, mean = 1.0 / n;
    int dloss = ir_emit(m, dst, IR_OP_FILL, NULL, 0, &share, NULL, &src->vals[seed->res[0]].type);
    int loss = -1, grad = -1, kept = -1, wgrad = ir_global_ref(m, dst, ir_global_of(src, acc->args[0])); /* named after: its own ref */
    for (int c = 0; c < n; c++) {
        double span[IR_NATTRS_ROWS] = {[IR_ATTR_ROWS_FIRST] = (double)(c * rows), [IR_ATTR_ROWS_COUNT] = (double)rows};
        int xc = ir_emit(m, dst, IR_OP_ROWS, &x, 1, span, NULL, NULL);
        int tc = ir_emit(m, dst, IR_OP_ROWS, &targets, 1, span, NULL, NULL);
        int logits = ir_emit(m, dst, IR_OP_MATMUL, (int[]){xc, map[mm->args[1]]}, 2, mm->attr, NULL, NULL);
        if (h->kept) /* copied before the cross entropy takes the chunk's bytes for its gradient */
            kept = c == 0 ? logits : ir_emit(m, dst, IR_OP_CONCAT_ROWS, (int[]){kept, logits}, 2, NULL, NULL, NULL);
        int d = ir_emit(m, dst, IR_OP_CROSS_ENTROPY_WITH_GRAD, (int[]){logits, tc, dloss}, 3, NULL, NULL, NULL);
        int dxc = ir_emit(m, dst, IR_OP_MATMUL, (int[]){d, map[dx->args[1]]}, 2, dx->attr, NULL, NULL);
        double attrs[IR_NATTRS_MATMUL_ACCUMULATE];
        for (int a = 0; a < IR_NATTRS_MATMUL_ACCUMULATE; a++)
            attrs[a] = acc->attr[a];
        attrs[IR_ATTR_MATMUL_ACCUMULATE_ASSIGN] = c == 0 ? acc->attr[IR_ATTR_MATMUL_ACCUMULATE_ASSIGN] : 0;
        ir_emit(m, dst, IR_OP_MATMUL_ACCUMULATE, (int[]){wgrad, d, xc}, 3, attrs, NULL, NULL);
        loss = c == 0 ? d + 1 : ir_emit(m, dst, IR_OP_ADD, (int[]){loss, d + 1}, 2, NULL, NULL, NULL);
        grad = c == 0 ? dxc : ir_emit(m, dst, IR_OP_CONCAT_ROWS, (int[]){grad, dxc}, 2, NULL, NULL, NULL);
    }
    map[ce->res[1]] = ir_emit(m, dst, IR_OP_SCALE, &loss, 1, &mean, NULL, NULL);
    map[dx->res[0]] = ir_emit(m, dst, IR_OP_RESHAPE, &grad, 1, NULL, NULL, &src->vals[dx->res[0]].type);
    if (h->kept)
        map[mm->res[0]] = ir_emit(m, dst, IR_OP_RESHAPE, &kept, 1, NULL, NULL, &src->vals[mm->res[0]].type);
}

static bool chunk_func(ir_module *m, int fi, int n, char *err, size_t errlen)
{
    const ir_func *src = m->funcs[fi];
    int *uses = calloc((size_t)src->nvals + 1, sizeof(int));
    for (int i = 0; i < src->ninstrs; i++)
        for (int a = 0; a < src->instrs[i].nargs; a++)
            uses[src->instrs[i].args[a]]++;
    head h = {-1, -1, -1, -1, false, -1};
    bool found = false;
    for (int i = 0; i < src->ninstrs && !found; i++)
        found = src->instrs[i].op == IR_OP_CROSS_ENTROPY_WITH_GRAD && head_of(src, i, uses, &h);
    /* the seed and the gradient's global ref, when the head alone reads them: the chunks take their own */
    int seed = found ? src->vals[src->instrs[h.ce].args[2]].def : -1;
    int ref = found ? src->vals[src->instrs[h.acc].args[0]].def : -1;
    bool seed_dies = found && uses[src->instrs[h.ce].args[2]] == 1;
    bool ref_dies = found && uses[src->instrs[h.acc].args[0]] == 1;
    free(uses);
    if (!found)
        return true;
    int64_t tokens = ir_numel(&src->vals[src->instrs[h.ce].args[1]].type);
    if (tokens % n)
        return snprintf(err, errlen, "config cross_entropy_chunks %d: %s's head has %lld tokens, which %d chunks do not "
                        "split evenly (take a divisor of them)", n, src->name, (long long)tokens, n), false;
    ir_func *dst = ir_func_new(m, src->name, src->kind);
    int *map = malloc(sizeof(int) * ((size_t)src->nvals + 1));
    for (int i = 0; i < src->ninstrs; i++) {
        if (i == h.ce)
            emit_chunks(m, dst, src, &h, n, map);
        else if (i != h.mm && i != h.dx && i != h.acc && i != h.redo && !(i == seed && seed_dies) &&
                 !(i == ref && ref_dies))
            ir_copy_instr(m, dst, src, &src->instrs[i], map);
    }
    free(map);
    ir_func_replace(m, fi, dst);
    return true;
}

bool pass_loss_chunks(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen)
{
    (void)opts;
    int n = (int)ir_cfg_int(m, IR_CFG_CROSS_ENTROPY_CHUNKS);
    for (int f = 0; n > 1 && f < m->nfuncs; f++)
        if (ir_func_per_micro_batch(m->funcs[f]->kind) && !chunk_func(m, f, n, err, errlen))
            return false;
    return true;
}
