/* fusion.c — merges instructions that a fused kernel runs in one pass over memory:
 *   - a matmul whose only use is a bias_add becomes one matmul_bias (on the GPU, cuBLASLt adds
 *     the bias in the GEMM's epilogue instead of a separate read and write of the output);
 *   - a matmul whose only use is an accumulate into a global (a weight gradient) becomes one
 *     matmul_accumulate: the GEMM adds into the accumulator (beta = 1) and the product is never
 *     stored, nor read again; a copy into a global (the step's first write of a gradient, see
 *     optimizer.c) likewise, with assign = 1 (beta = 0); a moe_grouped_wgrad (the experts' weight
 *     gradients) so becomes one moe_grouped_wgrad_accumulate, an fp8_matmul (an FP8 weight
 *     gradient) one fp8_matmul_accumulate: the gradient reaches its fp32 accumulator unrounded;
 *   - an adamw followed by the copy that refreshes its parameter's working copy becomes one
 *     adamw that writes the copy too (the updated parameter is not read back);
 *   - a cross_entropy and the cross_entropy_grad of the same logits (with a constant dloss, the
 *     loss seed) become one cross_entropy_with_grad: the logits are read once for both;
 *   - a swiglu that the backward recomputes (selective recompute of mlp_act: its gradient already
 *     made) and the swiglu_grad of the same gate and up become one swiglu_grad_product, which
 *     stores the product as it computes the gradients: the recomputation costs one more write of
 *     the product, not a pass of its own over gate and up;
 *   - a matmul_bias (as above) and the gelu of its result become one matmul_bias_gelu, which
 *     also keeps the pre-activation for the backward (cuBLASLt's GELU_AUX_BIAS epilogue);
 *   - a matmul whose only use is a gelu_grad, and the sum_rows of that gradient (the bias
 *     gradient) become one matmul_dgelu_bgrad (the DGELU_BGRAD epilogue): the product is never
 *     stored and the gradient is read once, by the next GEMMs;
 *   - an add of a matmul's (or matmul_bias's, fp8_matmul's) product that nothing else reads becomes
 *     one matmul_add (matmul_bias_add, fp8_matmul_add): the GEMM adds the other operand (beta =
 *     1), so a residual or a sum of input gradients (q, k, v's) costs no pass of its own;
 *   - otherwise, an add of a layernorm_grad's (rmsnorm_grad's) dx that nothing else reads, to
 *     a value that exists before that instruction (the residual's gradient), becomes one
 *     layernorm_grad_add (rmsnorm_grad_add), which adds it as dx is stored;
 *   - with tp_comm_overlap (--tp-comm-overlap), sequence parallelism's collectives join their
 *     matmuls: a norm's all-gathered output and its first reader, a plain matmul of it (q, k, v
 *     or the MLP's up/gate), become one all_gather_matmul, where on the GPU the other ranks' rows
 *     arrive while this rank's own rows are multiplied; a plain matmul whose only reader is a
 *     reduce_scatter_seq becomes one matmul_reduce_scatter, and one whose product is added to
 *     the residual stream (attention's and the MLP's output projections, whose sum is then
 *     reduce-scattered, with nothing else reading it in between) one matmul_add_reduce_scatter,
 *     where on the GPU the other ranks' rows are multiplied first and sent while this rank's
 *     own are; only where no weight gradient is written since the collective before (the
 *     forward): in the backward, comm_overlap runs the reduce-scatter beside those GEMMs;
 *   - an fp8_amax (FP8's scale, tensorwise, or delayed scaling's amax for the history) of a value
 *     that an op with an amax attribute makes (ir.h's ir_amax_results: a norm's output, SwiGLU's,
 *     and in the backward a norm gradient's dx, with its residual's gradient added or not, and
 *     swiglu_grad's dgate and dup) becomes that instruction's extra result: the kernel takes the
 *     max as it stores the value, so the value is not read again for it (the max is exact: the
 *     same bits). Not with --unfused-fp8-amax (mcc_pass_options), the check that says so.
 * Rewrites every function into a new one; the fused op sits where its consumer was, where all
 * its operands exist. */
#include "passes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int *uses;                      /* per source value: how many instructions read it */
    int *fused_matmul;              /* per source instruction (a bias_add or an accumulate): the matmul
                                       instruction folded into it, or -1 */
    int *folded_copy;               /* per source adamw: the copy instruction folded into it, or -1 */
    int *folded_ce_grad;            /* per source cross_entropy: the cross_entropy_grad folded into it, or -1 */
    int *folded_swiglu_grad;        /* per source swiglu: the swiglu_grad folded into it, or -1 */
    int *folded_gelu;               /* per source bias_add fused with its matmul: the gelu of its result folded
                                       into it, or -1 */
    int *folded_dgelu;              /* per source matmul: the gelu_grad of its product folded into it, or -1 */
    int *folded_bgrad;              /* per source matmul with folded_dgelu: the sum_rows of that gradient */
    int *add_product;               /* per source add: which operand (0, 1) is a product folded into it, or -1 */
    int *norm_add;                  /* per source layernorm_grad / rmsnorm_grad: the add of its dx folded into it, or -1 */
    int *gathered;                  /* per source matmul: the all_gather_seq folded into it, or -1 */
    int *scattered;                 /* per source reduce_scatter_seq: the matmul, or the add of a matmul's
                                       product, folded into it, or -1 */
    int *amaxes;                    /* per source instruction with an amax attribute: the amax results it
                                       makes (its amax=), 0: none */
    bool *amax_made;                /* per source fp8_amax: its value's producer makes it (amaxes) */
    bool tp_comm_overlap;           /* plan gathered and scattered matmuls */
    bool unfused_fp8_amax;          /* --unfused-fp8-amax: no amaxes planned */
} fusion_plan;

/* The first instruction after i of op `op` whose operand `arg` is value v, or -1. */
static int first_use_after(const ir_func *f, int i, ir_op op, int arg, int v)
{
    for (int j = i + 1; j < f->ninstrs; j++)
        if (f->instrs[j].op == op && f->instrs[j].nargs > arg && f->instrs[j].args[arg] == v)
            return j;
    return -1;
}

/* Matmul instruction i's product: read only by a gelu_grad whose gradient is summed by a sum_rows,
 * and the gelu_grad's input made before i (the fused op, emitted at i, reads it: a backward that
 * recomputes that input after i keeps the three apart)? Then sets that pair as folded into i. */
static void plan_dgelu(const ir_func *f, fusion_plan *fp, int i)
{
    int product = f->instrs[i].res[0];
    if (fp->uses[product] != 1)
        return;
    int grad = first_use_after(f, i, IR_OP_GELU_GRAD, 0, product);
    int bgrad = grad >= 0 ? first_use_after(f, grad, IR_OP_SUM_ROWS, 0, f->instrs[grad].res[0]) : -1;
    if (bgrad >= 0 && f->vals[f->instrs[grad].args[1]].def < i)
        fp->folded_dgelu[i] = grad, fp->folded_bgrad[i] = bgrad;
}

/* The cross_entropy_grad of cross_entropy instruction i's logits and targets whose dloss is a
 * fill (a constant the fused op can take where the loss is computed), or -1. */
static int ce_grad_of(const ir_func *f, int i)
{
    const ir_instr *ce = &f->instrs[i];
    for (int j = i + 1; j < f->ninstrs; j++) {
        const ir_instr *g = &f->instrs[j];
        if (g->op == IR_OP_CROSS_ENTROPY_GRAD && g->args[1] == ce->args[0] && g->args[2] == ce->args[1])
            return f->instrs[f->vals[g->args[0]].def].op == IR_OP_FILL ? j : -1;
    }
    return -1;
}

/* The swiglu_grad of swiglu instruction i's gate and up when its dy is made before i (a swiglu the
 * backward recomputes, the fused op emitted at i: the forward's own swiglu comes before its dy), or
 * -1. */
static int swiglu_grad_of(const ir_func *f, int i)
{
    const ir_instr *sw = &f->instrs[i];
    for (int j = i + 1; j < f->ninstrs; j++) {
        const ir_instr *g = &f->instrs[j];
        if (g->op == IR_OP_SWIGLU_GRAD && g->args[1] == sw->args[0] && g->args[2] == sw->args[1])
            return f->vals[g->args[0]].def < i ? j : -1;
    }
    return -1;
}

static bool names_global(const ir_func *f, const ir_instr *in, int g)
{
    for (int a = 0; a < in->nargs; a++)
        if (ir_global_of(f, in->args[a]) == g)
            return true;
    return false;
}

/* The adamw before copy instruction j (dst := src, both globals) that updates src, when no
 * instruction between them names src or dst: that adamw may write the copy itself. */
static int adamw_feeding_copy(const ir_func *f, int j)
{
    const ir_instr *cp = &f->instrs[j];
    int dst = ir_global_of(f, cp->args[0]), src = ir_global_of(f, cp->args[1]);
    if (dst < 0 || src < 0)
        return -1;
    for (int k = j - 1; k >= 0; k--) {
        const ir_instr *in = &f->instrs[k];
        if (in->op == IR_OP_ADAMW && in->nargs == 7 && ir_global_of(f, in->args[0]) == src)
            return k;
        if (names_global(f, in, src) || names_global(f, in, dst))
            return -1;
    }
    return -1;
}

/* The matmul defining value v when v's only use is the consumer being fused, else -1. */
static int sole_use_matmul(const ir_func *f, const fusion_plan *fp, int v)
{
    int def = f->vals[v].def;
    return f->instrs[def].op == IR_OP_MATMUL && fp->uses[v] == 1 ? def : -1;
}

/* The matmul, fp8_matmul, moe_grouped_wgrad or fp8_grouped_wgrad defining value v when v's only use
 * is the accumulate or copy into a global being fused, else -1. */
static int sole_use_product(const ir_func *f, const fusion_plan *fp, int v)
{
    int def = f->vals[v].def;
    ir_op op = f->instrs[def].op;
    bool product = op == IR_OP_MOE_GROUPED_WGRAD || op == IR_OP_FP8_MATMUL || op == IR_OP_FP8_GROUPED_WGRAD;
    return product && fp->uses[v] == 1 ? def : sole_use_matmul(f, fp, v);
}

/* The instruction making value v when it is a product an add may fold (a matmul or fp8_matmul, or a
 * bias_add of a matmul, fused below into a matmul_bias) and v's only use is that add; else -1. */
static int foldable_product(const ir_func *f, const fusion_plan *fp, int v)
{
    int def = f->vals[v].def;
    if (fp->uses[v] != 1)
        return -1;
    if (f->instrs[def].op == IR_OP_MATMUL || f->instrs[def].op == IR_OP_FP8_MATMUL)
        return def;
    if (f->instrs[def].op == IR_OP_BIAS_ADD && fp->fused_matmul[def] >= 0)
        return def;
    return -1;
}

/* A per-instruction plan entry of f, every one -1 (nothing folded). */
static int *none_per_instr(const ir_func *f)
{
    int *a = malloc(sizeof(int) * ((size_t)f->ninstrs + 1));
    for (int i = 0; i < f->ninstrs; i++)
        a[i] = -1;
    return a;
}

/* Claims, for each add, an operand that is a foldable product (the later one when both are):
 * its matmul (and bias_add) are then emitted as one matmul_add (matmul_bias_add) at the add. */
static void plan_add_products(const ir_func *f, fusion_plan *fp)
{
    fp->add_product = none_per_instr(f);
    for (int i = 0; i < f->ninstrs; i++) {
        const ir_instr *in = &f->instrs[i];
        if (in->op != IR_OP_ADD)
            continue;
        int p0 = foldable_product(f, fp, in->args[0]), p1 = foldable_product(f, fp, in->args[1]);
        if (p0 >= 0 || p1 >= 0)
            fp->add_product[i] = p1 > p0 ? 1 : 0;
    }
}

/* For each add no product claimed, of a norm gradient's dx that nothing else reads and of a value
 * made before that norm gradient: folds the add into the norm gradient. */
static void plan_norm_adds(const ir_func *f, fusion_plan *fp)
{
    fp->norm_add = none_per_instr(f);
    for (int i = 0; i < f->ninstrs; i++) {
        const ir_instr *in = &f->instrs[i];
        if (in->op != IR_OP_ADD || fp->add_product[i] >= 0)
            continue;
        for (int k = 0; k < 2; k++) {
            int dx = in->args[k], g = f->vals[dx].def, other = f->vals[in->args[1 - k]].def;
            ir_op op = f->instrs[g].op;
            if ((op == IR_OP_LAYERNORM_GRAD || op == IR_OP_RMSNORM_GRAD) && f->instrs[g].res[0] == dx &&
                fp->uses[dx] == 1 && other < g && fp->norm_add[g] < 0) {
                fp->norm_add[g] = i;
                break;
            }
        }
    }
}

/* Whether matmul instruction j is folded into another fused op (its product's reader). */
static bool matmul_taken(const ir_func *f, const fusion_plan *fp, int j)
{
    if (fp->folded_dgelu[j] >= 0)
        return true;
    for (int i = 0; i < f->ninstrs; i++)
        if (fp->fused_matmul[i] == j ||
            (fp->add_product[i] >= 0 && f->vals[f->instrs[i].args[fp->add_product[i]]].def == j))
            return true;
    return false;
}

/* all_gather_matmul: an all_gather_seq (either split) of a norm's output, whose first reader is
 * a plain matmul of it (ta = 0) that no other fusion takes. */
static void plan_gathered_matmuls(const ir_func *f, fusion_plan *fp)
{
    fp->gathered = none_per_instr(f);
    for (int i = 0; i < f->ninstrs; i++) {
        const ir_instr *in = &f->instrs[i];
        if (in->op != IR_OP_ALL_GATHER_SEQ || !fp->tp_comm_overlap)
            continue;
        ir_op norm = f->instrs[f->vals[in->args[0]].def].op;
        if (norm != IR_OP_LAYERNORM && norm != IR_OP_RMSNORM)
            continue;
        int j = ir_first_reader(f, i, in->res[0]);
        const ir_instr *mm = j < f->ninstrs ? &f->instrs[j] : NULL;
        if (mm && mm->op == IR_OP_MATMUL && mm->args[0] == in->res[0] && mm->args[1] != in->res[0] &&
            mm->attr[IR_ATTR_MATMUL_TA] == 0 && !matmul_taken(f, fp, j))
            fp->gathered[j] = i;
    }
}

/* Whether instruction j is a plain matmul (ta = 0) of a 3-D operand that no fusion takes. */
static bool plain_matmul(const ir_func *f, const fusion_plan *fp, int j)
{
    const ir_instr *mm = &f->instrs[j];
    return mm->op == IR_OP_MATMUL && mm->attr[IR_ATTR_MATMUL_TA] == 0 && f->vals[mm->args[0]].type.ndim < IR_MAX_DIMS &&
           !matmul_taken(f, fp, j);
}

/* Whether a weight gradient is written (accumulated, or copied as the step's first write, into
 * a global) since the collective before instruction i: in the backward, where comm_overlap
 * hides the collective beside those GEMMs instead. */
static bool weight_grads_before(const ir_func *f, int i)
{
    for (int k = i - 1; k >= 0 && !ir_op_has(f->instrs[k].op, IR_OPF_COLLECTIVE); k--)
        if (ir_writes_global(f, &f->instrs[k]))
            return true;
    return false;
}

/* matmul_reduce_scatter and matmul_add_reduce_scatter: a reduce_scatter_seq (either split) of a
 * plain matmul's product that nothing else reads, or of its sum with another
 * value (planned as matmul_add, which this replaces) that nothing reads before it; not where
 * weight gradients could hide it (weight_grads_before). */
static void plan_scattered_matmuls(const ir_func *f, fusion_plan *fp)
{
    fp->scattered = none_per_instr(f);
    for (int i = 0; i < f->ninstrs; i++) {
        const ir_instr *in = &f->instrs[i];
        if (in->op != IR_OP_REDUCE_SCATTER_SEQ || !fp->tp_comm_overlap || weight_grads_before(f, i))
            continue;
        int j = f->vals[in->args[0]].def;
        if (fp->uses[in->args[0]] == 1 && plain_matmul(f, fp, j)) {
            fp->scattered[i] = j;
            continue;
        }
        const ir_instr *add = &f->instrs[j];
        int k = add->op == IR_OP_ADD ? fp->add_product[j] : -1;
        if (k < 0 || ir_first_reader(f, j, in->args[0]) < i)
            continue;
        fp->add_product[j] = -1; /* so that plain_matmul does not count this add as taking the matmul */
        if (plain_matmul(f, fp, f->vals[add->args[k]].def))
            fp->scattered[i] = j; /* the add stays planned with its product k: skipped, emitted here */
        fp->add_product[j] = k;
    }
}

/* The instruction that writes value v with its amax in the same pass, and which of its results v is
 * (*k), or -1: an op with an amax attribute whose results 0..k are shaped as v (ir_infer_results),
 * emitted as it is, with the add of its dx folded in (norm_add: v is that sum), or a swiglu_grad
 * as the swiglu_grad_product it is folded into (which takes its amaxes); not a swiglu so folded. */
static int amax_producer(const ir_func *f, const fusion_plan *fp, int v, int *k)
{
    int p = f->vals[v].def;
    const ir_instr *in = &f->instrs[p];
    if (in->op == IR_OP_ADD)
        for (int a = 0; a < 2; a++) {
            int g = f->vals[in->args[a]].def;
            if (fp->norm_add[g] == p && f->instrs[g].res[0] == in->args[a])
                return *k = 0, g;
        }
    if (ir_ops[in->op].amax_attr < 0 || (in->op == IR_OP_SWIGLU && fp->folded_swiglu_grad[p] >= 0))
        return -1;
    for (*k = 0; *k < ir_ops[in->op].nres; (*k)++) {
        if (!ir_type_eq(&f->vals[in->res[*k]].type, &f->vals[in->res[0]].type))
            return -1; /* past the results shaped as the first: a norm gradient's dw */
        if (in->res[*k] == v)
            return p;
    }
    return -1;
}

/* fp8_amax instructions whose values' producers make their amaxes (amax_producer), each producer as
 * many amax results as its last such value needs. */
static void plan_amaxes(const ir_func *f, fusion_plan *fp)
{
    fp->amaxes = calloc((size_t)f->ninstrs + 1, sizeof(int));
    fp->amax_made = calloc((size_t)f->ninstrs + 1, sizeof(bool));
    for (int i = 0; i < f->ninstrs && !fp->unfused_fp8_amax; i++) {
        int k, p = f->instrs[i].op == IR_OP_FP8_AMAX ? amax_producer(f, fp, f->instrs[i].args[0], &k) : -1;
        if (p >= 0) {
            fp->amax_made[i] = true;
            fp->amaxes[p] = k + 1 > fp->amaxes[p] ? k + 1 : fp->amaxes[p];
        }
    }
}

static void plan_fusions(const ir_func *f, fusion_plan *fp)
{
    fp->uses = calloc((size_t)f->nvals + 1, sizeof(int));
    fp->fused_matmul = none_per_instr(f);
    for (int i = 0; i < f->ninstrs; i++)
        for (int a = 0; a < f->instrs[i].nargs; a++)
            fp->uses[f->instrs[i].args[a]]++;
    for (int i = 0; i < f->ninstrs; i++) {
        const ir_instr *in = &f->instrs[i];
        if (in->op == IR_OP_BIAS_ADD)
            fp->fused_matmul[i] = sole_use_matmul(f, fp, in->args[0]);
        else if (in->op == IR_OP_ACCUMULATE || (in->op == IR_OP_COPY && ir_global_of(f, in->args[0]) >= 0))
            fp->fused_matmul[i] = sole_use_product(f, fp, in->args[1]);
    }
    fp->folded_copy = none_per_instr(f);
    fp->folded_ce_grad = none_per_instr(f);
    fp->folded_swiglu_grad = none_per_instr(f);
    for (int i = 0; i < f->ninstrs; i++)
        if (f->instrs[i].op == IR_OP_CROSS_ENTROPY)
            fp->folded_ce_grad[i] = ce_grad_of(f, i);
        else if (f->instrs[i].op == IR_OP_SWIGLU)
            fp->folded_swiglu_grad[i] = swiglu_grad_of(f, i);
    for (int j = 0; j < f->ninstrs; j++) {
        int k = f->instrs[j].op == IR_OP_COPY ? adamw_feeding_copy(f, j) : -1;
        if (k >= 0)
            fp->folded_copy[k] = j;
    }
    plan_add_products(f, fp);
    plan_norm_adds(f, fp);
    plan_amaxes(f, fp);
    fp->folded_gelu = none_per_instr(f);
    fp->folded_dgelu = none_per_instr(f);
    fp->folded_bgrad = none_per_instr(f);
    for (int i = 0; i < f->ninstrs; i++) {
        const ir_instr *in = &f->instrs[i];
        if (in->op == IR_OP_BIAS_ADD && fp->fused_matmul[i] >= 0)
            fp->folded_gelu[i] = first_use_after(f, i, IR_OP_GELU, 0, in->res[0]);
        else if (in->op == IR_OP_MATMUL)
            plan_dgelu(f, fp, i);
    }
    plan_gathered_matmuls(f, fp);
    plan_scattered_matmuls(f, fp);
}

/* The attributes {axis, tb, batch} of a GEMM fused with sequence collective seq: seq's axis and
 * batch, matmul mm's tb */
static void seq_gemm_attrs(const ir_instr *seq, const ir_instr *mm, double attrs[IR_MAX_ATTRS])
{
    attrs[IR_ATTR_AXIS] = seq->attr[IR_ATTR_AXIS];
    attrs[IR_ATTR_TB] = mm->attr[IR_ATTR_TB];
    attrs[IR_ATTR_BATCH] = seq->attr[IR_ATTR_BATCH];
}

/* add instruction `in` with its folded product: matmul_add(a, b, other), fp8_matmul_add(qa, sa, qb,
 * sb, other) or, for a bias_add of a matmul, matmul_bias_add(a, b, bias, other). */
static int emit_add_product(ir_module *m, ir_func *dst, const ir_func *src, const fusion_plan *fp,
                            const ir_instr *in, const int *map)
{
    int k = fp->add_product[in - src->instrs], other = map[in->args[1 - k]];
    const ir_instr *def = &src->instrs[src->vals[in->args[k]].def];
    if (def->op == IR_OP_MATMUL) {
        int args[3] = {map[def->args[0]], map[def->args[1]], other};
        return ir_emit(m, dst, IR_OP_MATMUL_ADD, args, 3, def->attr, NULL, NULL);
    }
    if (def->op == IR_OP_FP8_MATMUL) { /* its dy history (the gradient rule's) is read no more */
        int args[5] = {map[def->args[0]], map[def->args[1]], map[def->args[2]], map[def->args[3]], other};
        return ir_emit(m, dst, IR_OP_FP8_MATMUL_ADD, args, 5, def->attr, NULL, NULL);
    }
    const ir_instr *mm = &src->instrs[fp->fused_matmul[def - src->instrs]];
    int args[4] = {map[mm->args[0]], map[mm->args[1]], map[def->args[1]], other};
    return ir_emit(m, dst, IR_OP_MATMUL_BIAS_ADD, args, 4, mm->attr, NULL, NULL);
}

/* Instruction `in` of src emitted as it is but for its amax attribute, amaxes (the plan's) */
static int emit_with_amaxes(ir_module *m, ir_func *dst, const ir_instr *in, int amaxes, const int *map)
{
    int args[in->nargs];
    double attrs[IR_MAX_ATTRS];
    for (int a = 0; a < in->nargs; a++)
        args[a] = map[in->args[a]];
    memcpy(attrs, in->attr, sizeof attrs);
    attrs[ir_ops[in->op].amax_attr] = amaxes;
    return ir_emit(m, dst, in->op, args, in->nargs, attrs, NULL, NULL);
}

/* The amax result of dst that its producer made for value x of dst (amax_producer's): the result
 * nres + k of the instruction whose result k x is */
static int amax_result_of(const ir_func *dst, int x)
{
    const ir_instr *p = &dst->instrs[dst->vals[x].def];
    int k = 0;
    while (p->res[k] != x)
        k++;
    return p->res[ir_ops[p->op].nres + k];
}

static void fuse_func(ir_module *m, int fi, const mcc_pass_options *opts)
{
    const ir_func *src = m->funcs[fi];
    fusion_plan fp = {.tp_comm_overlap = ir_cfg_bool(m, IR_CFG_TP_COMM_OVERLAP),
                      .unfused_fp8_amax = opts->unfused_fp8_amax};
    plan_fusions(src, &fp);
    ir_func *dst = ir_func_new(m, src->name, src->kind);
    int *map = malloc(sizeof(int) * ((size_t)src->nvals + 1));
    bool *skip = calloc((size_t)src->ninstrs + 1, sizeof(bool));
    for (int i = 0; i < src->ninstrs; i++) {
        if (fp.fused_matmul[i] >= 0)
            skip[fp.fused_matmul[i]] = true;
        if (fp.folded_copy[i] >= 0)
            skip[fp.folded_copy[i]] = true;
        if (fp.folded_gelu[i] >= 0)
            skip[fp.folded_gelu[i]] = true;
        if (fp.folded_swiglu_grad[i] >= 0)
            skip[fp.folded_swiglu_grad[i]] = true;
        if (fp.folded_dgelu[i] >= 0)
            skip[fp.folded_dgelu[i]] = skip[fp.folded_bgrad[i]] = true;
        if (fp.add_product[i] >= 0)
            skip[src->vals[src->instrs[i].args[fp.add_product[i]]].def] = true; /* a matmul, or a bias_add */
        if (fp.norm_add[i] >= 0)
            skip[fp.norm_add[i]] = true;
        if (fp.gathered[i] >= 0)
            skip[fp.gathered[i]] = true;
        if (fp.scattered[i] >= 0) /* the matmul, or the add (its matmul is skipped as its product, above) */
            skip[fp.scattered[i]] = true;
        if (fp.folded_ce_grad[i] >= 0) {
            int seed = src->instrs[fp.folded_ce_grad[i]].args[0];
            skip[fp.folded_ce_grad[i]] = true;
            skip[src->vals[seed].def] |= fp.uses[seed] == 1; /* the fused op takes its own copy */
        }
    }
    for (int i = 0; i < src->ninstrs; i++) {
        const ir_instr *in = &src->instrs[i];
        if (skip[i])
            continue;
        int r;
        const ir_instr *mm = fp.fused_matmul[i] >= 0 ? &src->instrs[fp.fused_matmul[i]] : NULL;
        if (mm && in->op == IR_OP_BIAS_ADD && fp.folded_gelu[i] >= 0) {
            int fused[3] = {map[mm->args[0]], map[mm->args[1]], map[in->args[1]]};
            int y = ir_emit(m, dst, IR_OP_MATMUL_BIAS_GELU, fused, 3, mm->attr, NULL, NULL);
            map[src->instrs[fp.folded_gelu[i]].res[0]] = y;
            r = y + 1; /* the pre-activation, the bias_add's result */
        } else if (mm && in->op == IR_OP_BIAS_ADD) {
            int fused[3] = {map[mm->args[0]], map[mm->args[1]], map[in->args[1]]};
            r = ir_emit(m, dst, IR_OP_MATMUL_BIAS, fused, 3, mm->attr, NULL, NULL);
        } else if (fp.norm_add[i] >= 0) {
            const ir_instr *add = &src->instrs[fp.norm_add[i]];
            int other = add->args[0] == in->res[0] ? add->args[1] : add->args[0];
            int args[4] = {map[in->args[0]], map[in->args[1]], map[in->args[2]], map[other]};
            ir_op fused = in->op == IR_OP_LAYERNORM_GRAD ? IR_OP_LAYERNORM_GRAD_ADD : IR_OP_RMSNORM_GRAD_ADD;
            double attrs[IR_MAX_ATTRS];
            memcpy(attrs, in->attr, sizeof attrs);
            attrs[ir_ops[fused].amax_attr] = fp.amaxes[i];
            r = ir_emit(m, dst, fused, args, 4, attrs, NULL, NULL);
            map[add->res[0]] = r; /* dx + dr is the add's result; dx alone is never read */
            for (int k = 1; k < in->nres; k++)
                map[in->res[k]] = r + k;
            continue;
        } else if (fp.add_product[i] >= 0) {
            r = emit_add_product(m, dst, src, &fp, in, map);
        } else if (fp.scattered[i] >= 0 && src->instrs[fp.scattered[i]].op == IR_OP_MATMUL) {
            const ir_instr *mm = &src->instrs[fp.scattered[i]];
            int args[2] = {map[mm->args[0]], map[mm->args[1]]};
            double attrs[IR_MAX_ATTRS];
            seq_gemm_attrs(in, mm, attrs);
            r = ir_emit(m, dst, IR_OP_MATMUL_REDUCE_SCATTER, args, 2, attrs, NULL, NULL) + 1; /* after the scratch */
        } else if (fp.scattered[i] >= 0) {
            const ir_instr *add = &src->instrs[fp.scattered[i]];
            int k = fp.add_product[fp.scattered[i]]; /* the product's operand */
            const ir_instr *mm = &src->instrs[src->vals[add->args[k]].def];
            int args[3] = {map[mm->args[0]], map[mm->args[1]], map[add->args[1 - k]]};
            double attrs[IR_MAX_ATTRS];
            seq_gemm_attrs(in, mm, attrs);
            int g = ir_emit(m, dst, IR_OP_MATMUL_ADD_REDUCE_SCATTER, args, 3, attrs, NULL, NULL);
            ir_map_results(dst, src, add, g, map); /* the sum: the residual stream, read on */
            r = g + 2;
        } else if (fp.gathered[i] >= 0) {
            const ir_instr *ag = &src->instrs[fp.gathered[i]];
            int args[2] = {map[ag->args[0]], map[in->args[1]]};
            double attrs[IR_MAX_ATTRS];
            seq_gemm_attrs(ag, in, attrs);
            int g = ir_emit(m, dst, IR_OP_ALL_GATHER_MATMUL, args, 2, attrs, NULL, NULL);
            ir_map_results(dst, src, ag, g, map); /* the gathered rows, read by the other matmuls */
            r = g + 1;
        } else if (fp.folded_dgelu[i] >= 0) {
            const ir_instr *grad = &src->instrs[fp.folded_dgelu[i]];
            int fused[3] = {map[in->args[0]], map[in->args[1]], map[grad->args[1]]};
            int d = ir_emit(m, dst, IR_OP_MATMUL_DGELU_BGRAD, fused, 3, in->attr, NULL, NULL);
            map[grad->res[0]] = d;
            map[src->instrs[fp.folded_bgrad[i]].res[0]] = d + 1;
            continue; /* the matmul's own product is never read */
        } else if (mm && mm->op == IR_OP_MOE_GROUPED_WGRAD) { /* an accumulate or copy, as below */
            int fused[4] = {map[in->args[0]], map[mm->args[0]], map[mm->args[1]], map[mm->args[2]]};
            double assign = in->op == IR_OP_COPY;
            r = ir_emit(m, dst, IR_OP_MOE_GROUPED_WGRAD_ACCUMULATE, fused, 4, &assign, NULL, NULL);
        } else if (mm && mm->op == IR_OP_FP8_GROUPED_WGRAD) { /* an accumulate or copy, as below */
            int fused[6] = {map[in->args[0]]};
            for (int a = 0; a < 5; a++)
                fused[1 + a] = map[mm->args[a]];
            double assign = in->op == IR_OP_COPY;
            r = ir_emit(m, dst, IR_OP_FP8_GROUPED_WGRAD_ACCUMULATE, fused, 6, &assign, NULL, NULL);
        } else if (mm && mm->op == IR_OP_FP8_MATMUL) { /* an accumulate or copy, as below */
            int fused[5] = {map[in->args[0]], map[mm->args[0]], map[mm->args[1]], map[mm->args[2]], map[mm->args[3]]};
            double attrs[IR_NATTRS_FP8_MATMUL_ACCUMULATE] = {[IR_ATTR_TA] = mm->attr[IR_ATTR_TA],
                                                             [IR_ATTR_TB] = mm->attr[IR_ATTR_TB],
                                                             [IR_ATTR_FP8_MATMUL_ACCUMULATE_ASSIGN] = in->op == IR_OP_COPY};
            r = ir_emit(m, dst, IR_OP_FP8_MATMUL_ACCUMULATE, fused, 5, attrs, NULL, NULL);
        } else if (mm && (in->op == IR_OP_ACCUMULATE || in->op == IR_OP_COPY)) {
            int fused[3] = {map[in->args[0]], map[mm->args[0]], map[mm->args[1]]};
            double attrs[IR_NATTRS_MATMUL_ACCUMULATE] = {[IR_ATTR_TA] = mm->attr[IR_ATTR_TA],
                                                         [IR_ATTR_TB] = mm->attr[IR_ATTR_TB],
                                                         [IR_ATTR_MATMUL_ACCUMULATE_ASSIGN] = in->op == IR_OP_COPY};
            r = ir_emit(m, dst, IR_OP_MATMUL_ACCUMULATE, fused, 3, attrs, NULL, NULL);
        } else if (fp.folded_ce_grad[i] >= 0) {
            const ir_instr *grad = &src->instrs[fp.folded_ce_grad[i]];
            const ir_instr *seed = &src->instrs[src->vals[grad->args[0]].def];
            int dloss = ir_emit(m, dst, IR_OP_FILL, NULL, 0, seed->attr, NULL, &src->vals[seed->res[0]].type);
            int args[3] = {map[in->args[0]], map[in->args[1]], dloss};
            int fused = ir_emit(m, dst, IR_OP_CROSS_ENTROPY_WITH_GRAD, args, 3, NULL, NULL, NULL);
            map[grad->res[0]] = fused; /* the gradient's later uses read the fused op's */
            r = fused + 1;             /* the loss */
        } else if (fp.folded_swiglu_grad[i] >= 0) {
            const ir_instr *grad = &src->instrs[fp.folded_swiglu_grad[i]];
            int args[3] = {map[grad->args[0]], map[in->args[0]], map[in->args[1]]};
            double amaxes = fp.amaxes[fp.folded_swiglu_grad[i]]; /* of dgate, dup: the swiglu_grad's */
            int fused = ir_emit(m, dst, IR_OP_SWIGLU_GRAD_PRODUCT, args, 3, &amaxes, NULL, NULL);
            ir_map_results(dst, src, grad, fused, map); /* dgate, dup */
            r = fused + 2;                              /* the product */
        } else if (fp.folded_copy[i] >= 0) {
            const ir_instr *cp = &src->instrs[fp.folded_copy[i]];
            int args[8];
            for (int a = 0; a < 7; a++)
                args[a] = map[in->args[a]];
            args[7] = ir_global_ref(m, dst, ir_global_of(src, cp->args[0]));
            r = ir_emit(m, dst, IR_OP_ADAMW, args, 8, in->attr, NULL, NULL);
        } else if (fp.amaxes[i] > 0) {
            r = emit_with_amaxes(m, dst, in, fp.amaxes[i], map);
        } else if (fp.amax_made[i]) {
            map[in->res[0]] = amax_result_of(dst, map[in->args[0]]);
            continue;
        } else {
            ir_copy_instr(m, dst, src, in, map);
            continue;
        }
        ir_map_results(dst, src, in, r, map);
    }
    free(map);
    free(skip);
    free(fp.uses);
    free(fp.fused_matmul);
    free(fp.folded_copy);
    free(fp.folded_ce_grad);
    free(fp.folded_swiglu_grad);
    free(fp.folded_gelu);
    free(fp.folded_dgelu);
    free(fp.folded_bgrad);
    free(fp.add_product);
    free(fp.norm_add);
    free(fp.gathered);
    free(fp.scattered);
    free(fp.amaxes);
    free(fp.amax_made);
    ir_func_replace(m, fi, dst);
}

bool pass_fusion(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen)
{
    for (int f = 0; f < m->nfuncs; f++)
        if (m->funcs[f]->kind != IR_FUNC_HOST_OPTIMIZER) /* the host's copies move data between memories */
            fuse_func(m, f, opts);
    return true;
}
