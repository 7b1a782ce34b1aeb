/* plan_check.c — what a training plan must hold beyond the IR's well-formedness (ir/verify.c,
 * which hand-written modules also meet): from autodiff on, micro_step writes every parameter's
 * gradient. mcc_run_passes checks it after each pass, so it guards every compile. */
#include "passes.h"

#include <stdio.h>
#include <stdlib.h>

/* Once autodiff has made gradients, micro_step writes every parameter's @<p>.grad (+= or, the
 * first write of a step with one micro-batch, :=; ir_writes_global): a parameter whose gradient
 * nothing writes keeps its initial value while the loss still falls, so no other check sees it. */
bool pass_check_gradients(const ir_module *m, char *err, size_t errlen)
{
    int fi = ir_func_of_kind(m, IR_FUNC_STEP);
    bool any = false;
    for (int g = 0; g < m->nglobals; g++)
        any |= m->globals[g].kind == IR_GLOBAL_GRAD;
    if (fi < 0 || !any)
        return true;
    const ir_func *f = m->funcs[fi];
    bool *written = calloc((size_t)m->nglobals + 1, sizeof(bool)), ok = true;
    for (int i = 0; i < f->ninstrs; i++) {
        int g = ir_writes_global(f, &f->instrs[i]) ? ir_global_index_of(m, f, f->instrs[i].args[0]) : -1;
        if (g >= 0)
            written[g] = true;
    }
    for (int p = 0; p < m->nglobals && ok; p++) {
        if (m->globals[p].kind != IR_GLOBAL_PARAM)
            continue;
        char name[256];
        snprintf(name, sizeof name, "%s.grad", m->globals[p].name);
        int g = ir_global_find(m, name);
        ok = g >= 0 && m->globals[g].kind == IR_GLOBAL_GRAD && written[g];
        if (g < 0 || m->globals[g].kind != IR_GLOBAL_GRAD)
            snprintf(err, errlen, "parameter @%s has no gradient global @%s (kind=grad): autodiff makes one for "
                     "every parameter", m->globals[p].name, name);
        else if (!ok)
            snprintf(err, errlen, "func %s writes nothing into @%s (an accumulate, matmul_accumulate or "
                     "copy): parameter @%s would never train", f->name, name, m->globals[p].name);
    }
    free(written);
    return ok;
}
