/* plan_check.c — what a training plan must hold beyond the IR's well-formedness (ir/verify.c,
 * which hand-written modules also meet): from autodiff on, micro_step (a pipeline stage: its
 * backward) writes every parameter's gradient. mcc_run_passes checks it after each pass, so it guards every compile. */
#include "passes.h"

#include <stdio.h>
#include <stdlib.h>

/* Once autodiff has made gradients, micro_step writes every parameter's gradient (its kind=grad
 * companion; += or, the first write of a step with one micro-batch, :=; ir_writes_global): a
 * parameter whose gradient nothing writes keeps its initial value while the loss still falls, so
 * no other check sees it. */
bool pass_check_gradients(const ir_module *m, char *err, size_t errlen)
{
    int fi = ir_func_of_kind(m, IR_FUNC_STEP);
    if (fi < 0)
        fi = ir_func_of_kind(m, IR_FUNC_BACKWARD);
    bool any = false;
    for (int g = 0; g < m->nglobals; g++)
        any |= m->globals[g].kind == IR_GLOBAL_GRAD;
    if (fi < 0 || !any)
        return true;
    const ir_func *f = m->funcs[fi];
    bool *written = calloc((size_t)m->nglobals + 1, sizeof(bool)), ok = true;
    for (int k = 0; k < m->nfuncs; k++) { /* the step, or a stage's backwards and wgrads (one a chunk) */
        const ir_func *w = m->funcs[k];
        if (w->kind != IR_FUNC_STEP && w->kind != IR_FUNC_BACKWARD && w->kind != IR_FUNC_WGRAD)
            continue;
        for (int i = 0; i < w->ninstrs; i++) {
            int g = ir_writes_global(w, &w->instrs[i]) ? ir_global_of(w, w->instrs[i].args[0]) : -1;
            if (g >= 0)
                written[g] = true;
        }
    }
    for (int p = 0; p < m->nglobals && ok; p++) {
        if (m->globals[p].kind != IR_GLOBAL_PARAM)
            continue;
        int g = ir_global_companion(m, p, IR_GLOBAL_GRAD);
        ok = g >= 0 && written[g];
        if (g < 0)
            snprintf(err, errlen, "parameter @%s has no gradient global (kind=grad, of=@%s): autodiff makes one for "
                     "every parameter", m->globals[p].name, m->globals[p].name);
        else if (!ok)
            snprintf(err, errlen, "func %s writes nothing into @%s (an accumulate, matmul_accumulate or "
                     "copy): parameter @%s would never train", f->name, m->globals[g].name, m->globals[p].name);
    }
    free(written);
    return ok;
}
