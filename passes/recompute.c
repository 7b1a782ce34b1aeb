/* recompute.c — selective recomputation (config recompute_granularity): outputs of cheap ops
 * that the backward reads are not kept from the forward; the backward recomputes each right
 * before its first use, from inputs it keeps anyway (a norm's input feeds the norm's gradient,
 * an activation's input its gradient). The forward copy then dies at its last forward use, and
 * the memory plan reuses its bytes. `activations` recomputes GELU/SiLU and the SwiGLU product;
 * `selective` the norms (and products) too. */
#include "passes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    ir_module *m;
    const ir_func *src;
    ir_func *dst;
    int *map;                       /* source value -> new value (the forward's) */
    int *again;                     /* source value -> its recomputation in the backward, or -1 */
    bool norms_too;                 /* selective: norms and products too, not only activations */
    int num_layers;                 /* recompute only in layers [0, num_layers); 0: every layer */
} recompute_ctx;

/* The layer `layers.<i>.` whose parameter instruction `in` reads, directly or through the
 * instruction making one of its operands (a norm reads its weight, an activation a matmul's
 * product); -1 if none (the final norm). */
static int layer_of(const ir_func *f, const ir_instr *in, int depth)
{
    int layer;
    if (in->op == IR_OP_GLOBAL)
        return sscanf(in->sym, "layers.%d.", &layer) == 1 ? layer : -1;
    for (int a = 0; depth > 0 && a < in->nargs; a++)
        if ((layer = layer_of(f, &f->instrs[f->vals[in->args[a]].def], depth - 1)) >= 0)
            return layer;
    return -1;
}

static bool recomputable(ir_op op, bool norms_too)
{
    return ir_op_has(op, IR_OPF_RECOMPUTE_ACTIVATION) || (norms_too && ir_op_has(op, IR_OPF_RECOMPUTE_SELECTIVE));
}

/* Whether instruction `in` lies in a layer recompute_num_layers covers (every layer when 0). */
static bool in_recomputed_layers(const recompute_ctx *c, const ir_instr *in)
{
    if (c->num_layers <= 0)
        return true;
    int layer = layer_of(c->src, in, 2);
    return layer >= 0 && layer < c->num_layers;
}

/* Source value v as the backward should read it: recomputed (once) when its op is cheap. */
static int backward_value(recompute_ctx *c, int v)
{
    const ir_instr *def = &c->src->instrs[c->src->vals[v].def];
    if (!recomputable(def->op, c->norms_too) || def->nres != 1 || !in_recomputed_layers(c, def))
        return c->map[v];
    if (c->again[v] < 0) {
        int args[IR_MAX_RES + 3];
        for (int a = 0; a < def->nargs; a++)
            args[a] = backward_value(c, def->args[a]);
        int r = ir_emit(c->m, c->dst, def->op, args, def->nargs, def->attr, NULL, NULL);
        c->again[v] = r;
    }
    return c->again[v];
}

static int loss_output(const ir_func *f)
{
    for (int i = 0; i < f->ninstrs; i++)
        if (f->instrs[i].op == IR_OP_OUTPUT && !strcmp(f->instrs[i].sym, "loss"))
            return i;
    return -1;
}

bool pass_recompute(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen)
{
    const char *g = ir_cfg_text(m, IR_CFG_RECOMPUTE_GRANULARITY);
    int fi = ir_func_of_kind(m, IR_FUNC_STEP);
    if ((strcmp(g, "selective") != 0 && strcmp(g, "activations") != 0) || fi < 0)
        return true;
    const ir_func *src = m->funcs[fi];
    int backward = loss_output(src); /* autodiff appends the backward after `output @loss` */
    recompute_ctx c = {m, src, ir_func_new(m, src->name, src->kind), malloc(sizeof(int) * ((size_t)src->nvals + 1)),
                       malloc(sizeof(int) * ((size_t)src->nvals + 1)), strcmp(g, "selective") == 0,
                       (int)ir_cfg_int(m, IR_CFG_RECOMPUTE_NUM_LAYERS)};
    for (int v = 0; v < src->nvals; v++)
        c.again[v] = -1;
    for (int i = 0; i < src->ninstrs; i++) {
        const ir_instr *in = &src->instrs[i];
        int args[in->nargs ? in->nargs : 1];
        for (int a = 0; a < in->nargs; a++)
            args[a] = i > backward && in->op != IR_OP_OUTPUT ? backward_value(&c, in->args[a]) : c.map[in->args[a]];
        const ir_type *explicit_type = in->nres ? &src->vals[in->res[0]].type : NULL;
        int r = ir_emit(m, c.dst, in->op, args, in->nargs, in->attr, in->sym, explicit_type);
        for (int k = 0; k < in->nres; k++)
            c.map[in->res[k]] = r + k;
    }
    free(c.map);
    free(c.again);
    ir_func_replace(m, fi, c.dst);
    return backward >= 0 || (snprintf(err, errlen, "%s has no `output @loss`", m->funcs[fi]->name), false);
}
