/* autodiff.c — reverse-mode differentiation of `micro_step`: walks the forward instructions
 * backwards applying each op's gradient rule (ir/grad.c) and accumulates every parameter's
 * gradient into the persistent global @<param>.grad (summed over the step's micro-batches; f32, or
 * bf16 under grad_reduce_in_bf16: pass_grad_dtype). */
#include "passes.h"

#include "ir/grad.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* @<param>.grad for every parameter, of its shape in pass_grad_dtype (f32, or bf16 under
 * grad_reduce_in_bf16). */
static void add_grad_globals(ir_module *m)
{
    int nglobals = m->nglobals;
    for (int i = 0; i < nglobals; i++) {
        if (m->globals[i].kind != IR_GLOBAL_PARAM)
            continue;
        char name[256];
        snprintf(name, sizeof name, "%s.grad", m->globals[i].name);
        ir_type t = m->globals[i].type;
        t.dtype = pass_grad_dtype(m);
        ir_global_add_companion(m, name, t, IR_GLOBAL_GRAD, i);
    }
}

/* A parameter reference whose gradient is known: dst @<param>.grad += grad (for a working copy,
 * the gradient of its fp32 master). */
static void accumulate_param_grad(ir_grad_ctx *g, int param, int dv)
{
    int args[2] = {ir_global_ref(g->m, g->f, ir_global_companion(g->m, param, IR_GLOBAL_GRAD)), dv};
    ir_emit(g->m, g->f, IR_OP_ACCUMULATE, args, 2, NULL, NULL, NULL);
}

bool pass_autodiff(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen)
{
    int fi = ir_func_of_kind(m, IR_FUNC_STEP);
    if (fi < 0)
        return snprintf(err, errlen, "no step function (kind=step)"), false;
    ir_func *f = m->funcs[fi];
    int at = ir_find_role(f, IR_OP_OUTPUT, ir_role_of(IR_ROLE_LOSS)), loss = at < 0 ? -1 : f->instrs[at].args[0];
    if (loss < 0)
        return snprintf(err, errlen, "%s has no `output @loss {role=loss}`", f->name), false;
    add_grad_globals(m);

    /* The step minimises the mean of the losses of its N micro-batches on each of dp ranks (whose
     * gradients data_parallel sums), each the mean of cp ranks' equal shares of the tokens (summed
     * over cp too): d(objective)/d(loss) = 1/(N dp cp). */
    double micro_batches = (double)ir_cfg_int(m, IR_CFG_ACCUM_STEPS) * (double)ir_cfg_int(m, IR_CFG_DATA_PARALLEL_SIZE) *
                           (double)ir_cfg_int(m, IR_CFG_CONTEXT_PARALLEL_SIZE);
    ir_grad_ctx g = {m, f, malloc(sizeof(int) * (size_t)f->nvals), f->nvals, 1.0 / micro_batches};
    for (int v = 0; v < g.nfwd; v++)
        g.grad[v] = -1;
    g.grad[loss] = ir_fill(m, f, g.loss_scale, ir_scalar(IR_F32));

    for (int i = f->ninstrs - 1; i >= 0; i--) {
        ir_instr in = f->instrs[i]; /* a copy: rules append to f->instrs */
        if (in.op >= IR_NUM_OPS || in.nres == 0 || in.res[0] >= g.nfwd || g.grad[in.res[0]] < 0)
            continue;
        if (in.op == IR_OP_FILL) /* a constant (multi-token prediction's under cp): nothing to pass on */
            continue;
        if (in.op == IR_OP_GLOBAL) {
            int k = in.global;
            if (m->globals[k].kind == IR_GLOBAL_PARAM || m->globals[k].kind == IR_GLOBAL_COPY)
                accumulate_param_grad(&g, ir_global_param(m, k), g.grad[in.res[0]]);
            continue;
        }
        ir_ops[in.op].grad(&g, f, &in);
    }
    free(g.grad);
    return true;
}
