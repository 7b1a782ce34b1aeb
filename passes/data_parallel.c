/* data_parallel.c — data parallelism over the mesh axis dp (config data_parallel_size > 1):
 * every rank runs the same micro_step on its own micro-batches, and a `reduce_grads` function,
 * scheduled between the micro-batches and the optimizer, sums each gradient accumulator over the
 * dp ranks. (autodiff scales the loss by 1/(accum_steps * dp), so the sum is the global mean.) */
#include "passes.h"

#include <stdio.h>

bool pass_data_parallel(ir_module *m, char *err, size_t errlen)
{
    if (ir_config_int(m, "data_parallel_size", 1) <= 1)
        return true;
    if (ir_func_index(m, "reduce_grads") >= 0)
        return snprintf(err, errlen, "the module already has a reduce_grads function"), false;
    ir_func *f = ir_func_new(m, "reduce_grads");
    double axis = IR_AXIS_DP;
    for (int g = 0; g < m->nglobals; g++)
        if (m->globals[g].kind == IR_GLOBAL_GRAD) {
            int ref = ir_global_ref(m, f, m->globals[g].name);
            ir_emit(m, f, IR_OP_ALL_REDUCE, &ref, 1, &axis, NULL, NULL);
        }
    return true;
}
