/* optimizer.c — builds the `optimizer` function run once per step after the micro-batches:
 * global gradient norm, clipping coefficient, AdamW on every parameter (decoupled weight decay,
 * none on 1-D parameters), then the gradient accumulators are zeroed for the next step. Also
 * `grad_norm` (the norm alone, output @grad_norm) and `zero_grads` (the zeroing alone): with
 * --skip-nan-steps train_rank checks the norm before the update and drops a bad step's gradients. */
#include "passes.h"

#include <stdio.h>
#include <string.h>

/* Declares @<param>.<suffix> as optimizer state and returns a reference to it. */
static int state_ref(ir_module *m, ir_func *f, const ir_global *p, const char *suffix, ir_global_kind kind)
{
    char name[256];
    snprintf(name, sizeof name, "%s.%s", p->name, suffix);
    if (ir_global_find(m, name) < 0)
        ir_global_add(m, name, p->type, kind, IR_INIT_ZEROS, 0, false);
    return ir_global_ref(m, f, name);
}

/* A reference in f to @<param>.grad of parameter global g, or -1 when autodiff made none. */
static int grad_ref(ir_module *m, ir_func *f, int g)
{
    char name[256];
    snprintf(name, sizeof name, "%s.grad", m->globals[g].name);
    return ir_global_find(m, name) < 0 ? -1 : ir_global_ref(m, f, name);
}

/* output @grad_norm: the global norm of the n gradients; returns their sum of squares. */
static int emit_grad_norm(ir_module *m, ir_func *f, int *grads, int n)
{
    int sumsq = ir_emit(m, f, IR_OP_SUM_SQUARES, grads, n, NULL, NULL, NULL);
    ir_output(m, f, "grad_norm", ir_op1(m, f, IR_OP_SQRT, sumsq));
    return sumsq;
}

static void zero_all(ir_module *m, ir_func *f, int *grads, int n)
{
    for (int j = 0; j < n; j++)
        ir_emit(m, f, IR_OP_ZERO, &grads[j], 1, NULL, NULL, NULL);
}

/* A function of its own over every gradient: name is "grad_norm" or "zero_grads". */
static void grads_func(ir_module *m, const char *name, const int *params, int n)
{
    ir_func *f = ir_func_new(m, name);
    int grads[n];
    for (int j = 0; j < n; j++)
        grads[j] = grad_ref(m, f, params[j]);
    if (!strcmp(name, "grad_norm"))
        emit_grad_norm(m, f, grads, n);
    else
        zero_all(m, f, grads, n);
}

bool pass_optimizer(ir_module *m, char *err, size_t errlen)
{
    ir_func *f = ir_func_new(m, "optimizer");
    int lr = ir_input(m, f, "lr", ir_scalar(IR_F32));
    int step = ir_input(m, f, "step", ir_scalar(IR_F32));

    int nparams = 0;
    for (int i = 0; i < m->nglobals; i++)
        nparams += m->globals[i].kind == IR_GLOBAL_PARAM;
    if (nparams == 0)
        return snprintf(err, errlen, "the model has no parameters"), false;
    int params[nparams], grads[nparams], k = 0;
    for (int i = 0; i < m->nglobals && k < nparams; i++) {
        if (m->globals[i].kind != IR_GLOBAL_PARAM)
            continue;
        params[k] = i;
        if ((grads[k++] = grad_ref(m, f, i)) < 0)
            return snprintf(err, errlen, "parameter @%s has no gradient (run autodiff first)", m->globals[i].name), false;
    }
    int sumsq = emit_grad_norm(m, f, grads, nparams);
    double clip = ir_config_real(m, "clip_grad", 1.0);
    int coef = ir_emit(m, f, IR_OP_CLIP_COEF, &sumsq, 1, &clip, NULL, NULL);

    for (int j = 0; j < nparams; j++) {
        /* state_ref may grow m->globals: copy the parameter's description first */
        ir_global p = m->globals[params[j]];
        int args[7] = {ir_global_ref(m, f, p.name), grads[j], state_ref(m, f, &p, "adam_m", IR_GLOBAL_ADAM_M),
                       state_ref(m, f, &p, "adam_v", IR_GLOBAL_ADAM_V), lr, step, coef};
        double attrs[4] = {ir_config_real(m, "adam_beta1", 0.9), ir_config_real(m, "adam_beta2", 0.999),
                           ir_config_real(m, "adam_eps", 1e-8), p.no_decay ? 0 : ir_config_real(m, "weight_decay", 0.01)};
        ir_emit(m, f, IR_OP_ADAMW, args, 7, attrs, NULL, NULL);
    }
    zero_all(m, f, grads, nparams);
    for (int c = 0; c < m->nglobals; c++) /* refresh the working copies from the updated masters */
        if (m->globals[c].kind == IR_GLOBAL_COPY) {
            int args[2] = {ir_global_ref(m, f, m->globals[c].name), ir_global_ref(m, f, m->globals[m->globals[c].copy_of].name)};
            ir_emit(m, f, IR_OP_COPY, args, 2, NULL, NULL, NULL);
        }
    grads_func(m, "grad_norm", params, nparams);
    grads_func(m, "zero_grads", params, nparams);
    return true;
}
