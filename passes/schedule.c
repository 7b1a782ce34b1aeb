/* schedule.c — the step schedule: gradient accumulation runs `micro_step` once per micro-batch
 * of this rank's share of the global batch, then `reduce_grads` (data parallel), then
 * `optimizer` once. */
#include "passes.h"

#include <stdio.h>

bool pass_schedule(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen)
{
    int micro = ir_func_index(m, "micro_step"), opt = ir_func_index(m, "optimizer");
    if (micro < 0 || opt < 0)
        return snprintf(err, errlen, "needs the micro_step and optimizer functions"), false;
    long long accum = ir_cfg_int(m, IR_CFG_ACCUM_STEPS);
    if (accum < 1)
        return snprintf(err, errlen, "accum_steps must be >= 1, got %lld", accum), false;
    m->nsched = 0;
    ir_sched_add(m, micro, (int)accum);
    int reduce = ir_func_index(m, "reduce_grads");
    if (reduce >= 0)
        ir_sched_add(m, reduce, 1);
    ir_sched_add(m, opt, 1);
    return true;
}
