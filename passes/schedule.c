/* schedule.c — the schedule programs a rank runs (ir.h's ir_program). `train`, one iteration:
 * the step function on each of the accum_steps micro-batches of this rank's share of the global
 * batch, then the reduce function (data parallel; when there is one), then the optimizer.
 * `eval`, one global batch of validation: the eval function on each micro-batch. */
#include "passes.h"

#include <stdio.h>

/* Program p calls function f (when the module has one) on micro-batches 0..n-1. */
static void call_per_micro_batch(ir_module *m, ir_prog p, int f, long long n)
{
    for (int mb = 0; f >= 0 && mb < n; mb++)
        ir_sched_call(m, p, f, mb);
}

bool pass_schedule(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen)
{
    int step = ir_func_of_kind(m, IR_FUNC_STEP), opt = ir_func_of_kind(m, IR_FUNC_OPTIMIZER);
    if (step < 0 || opt < 0)
        return snprintf(err, errlen, "needs a step function (kind=step) and an optimizer (kind=optimizer)"), false;
    long long accum = ir_cfg_int(m, IR_CFG_ACCUM_STEPS);
    if (accum < 1)
        return snprintf(err, errlen, "accum_steps must be >= 1, got %lld", accum), false;
    for (int p = 0; p < IR_NUM_PROGS; p++)
        if (m->progs[p].nsteps)
            return snprintf(err, errlen, "the module already has a schedule"), false;
    call_per_micro_batch(m, IR_PROG_TRAIN, step, accum);
    int reduce = ir_func_of_kind(m, IR_FUNC_REDUCE);
    if (reduce >= 0)
        ir_sched_call(m, IR_PROG_TRAIN, reduce, -1);
    ir_sched_call(m, IR_PROG_TRAIN, opt, -1);
    call_per_micro_batch(m, IR_PROG_EVAL, ir_func_of_kind(m, IR_FUNC_EVAL), accum);
    return true;
}
