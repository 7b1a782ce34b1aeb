/* schedule.c — the schedule programs a rank runs (ir.h's ir_program). `train`, one iteration:
 * the step function on each of the accum_steps micro-batches of this rank's share of the global
 * batch, then the reduce function (data parallel; when there is one), then the optimizer.
 * `eval`, one global batch of validation: the eval function on each micro-batch.
 *
 * A pipeline stage's module (passes/pipeline.c) has a forward and a backward instead of the step:
 * its train program is this stage's part of a pipeline schedule (1F1B: warm-up forwards, then one
 * forward and one backward in turn, then the cool-down backwards), each forward after the receives
 * of its boundary inputs from the previous stage and before the sends of its outputs to the next,
 * each backward between the receives of the gradients from the next stage and the sends of its
 * own to the previous. Each call names the stash slot of its micro-batch, and the stash globals get
 * as many buffers as micro-batches are in flight on this stage. */
#include "passes.h"

#include <stdio.h>
#include <string.h>

/* Program p calls function f (when the module has one) on micro-batches 0..n-1. */
static void call_per_micro_batch(ir_module *m, ir_prog p, int f, long long n)
{
    for (int mb = 0; f >= 0 && mb < n; mb++)
        ir_sched_call(m, p, f, mb);
}

/* The receives (recv) or sends (send) around a call of f on micro-batch mb: one for each of its
 * boundary inputs or outputs (the pipeline pass's `@stage<S>.act.<k>` / `@stage<S>.grad.<k>`). */
static void boundary_steps(ir_module *m, ir_prog p, int fi, int mb, ir_step_op op)
{
    const ir_func *f = m->funcs[fi];
    ir_op want = op == IR_STEP_RECV ? IR_OP_INPUT : IR_OP_OUTPUT;
    for (int i = 0; i < f->ninstrs; i++) {
        const ir_instr *in = &f->instrs[i];
        bool grad;
        if (in->op != want || !pass_pipeline_boundary(in->sym, &grad))
            continue;
        /* activations go down the pipeline, gradients up */
        int peer = (grad ? -1 : 1) * (op == IR_STEP_SEND ? 1 : -1);
        ir_sched_add(m, p, (ir_sched_step){.op = op, .func = fi, .mb = mb, .sym = in->sym, .peer = peer, .slot = -1});
    }
}

static void pipeline_call(ir_module *m, ir_prog p, int fi, int mb, int slot)
{
    boundary_steps(m, p, fi, mb, IR_STEP_RECV);
    ir_sched_add(m, p, (ir_sched_step){.op = IR_STEP_CALL, .func = fi, .mb = mb, .slot = slot});
    boundary_steps(m, p, fi, mb, IR_STEP_SEND);
}

/* Stage s of p's 1F1B over n micro-batches (Megatron's non-interleaved schedule): min(p - s - 1, n)
 * forwards, then forward and backward in turn, then the backwards left. The micro-batches in
 * flight (forward run, backward not yet) are at most min(p - s, n), first in first out, so
 * micro-batch i's stash is slot i mod that. */
static bool schedule_stage(ir_module *m, int fwd, int bwd, int s, int p, long long n, char *err, size_t errlen)
{
    long long warm = p - s - 1 < n ? p - s - 1 : n, slots = p - s < n ? p - s : n;
    for (int g = 0; g < m->nglobals; g++)
        if (m->globals[g].kind == IR_GLOBAL_STASH)
            m->globals[g].slots = (int)slots;
    int f_next = 0, b_next = 0;
    for (; f_next < warm; f_next++)
        pipeline_call(m, IR_PROG_TRAIN, fwd, f_next, (int)(f_next % slots));
    for (; f_next < n; f_next++, b_next++) {
        pipeline_call(m, IR_PROG_TRAIN, fwd, f_next, (int)(f_next % slots));
        pipeline_call(m, IR_PROG_TRAIN, bwd, b_next, (int)(b_next % slots));
    }
    for (; b_next < n; b_next++)
        pipeline_call(m, IR_PROG_TRAIN, bwd, b_next, (int)(b_next % slots));
    (void)err, (void)errlen;
    return true;
}

bool pass_schedule(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen)
{
    int step = ir_func_of_kind(m, IR_FUNC_STEP), opt = ir_func_of_kind(m, IR_FUNC_OPTIMIZER);
    int fwd = ir_func_of_kind(m, IR_FUNC_FORWARD), bwd = ir_func_of_kind(m, IR_FUNC_BACKWARD);
    bool stage = fwd >= 0 && bwd >= 0;
    if ((step < 0 && !stage) || opt < 0)
        return snprintf(err, errlen, "needs a step function (kind=step), or a pipeline stage's forward and backward, and "
                        "an optimizer (kind=optimizer)"), false;
    long long accum = ir_cfg_int(m, IR_CFG_ACCUM_STEPS);
    if (accum < 1)
        return snprintf(err, errlen, "accum_steps must be >= 1, got %lld", accum), false;
    for (int p = 0; p < IR_NUM_PROGS; p++)
        if (m->progs[p].nsteps)
            return snprintf(err, errlen, "the module already has a schedule"), false;
    if (stage && !schedule_stage(m, fwd, bwd, (int)ir_cfg_int(m, IR_CFG_PIPELINE_STAGE),
                                 (int)ir_cfg_int(m, IR_CFG_PIPELINE_MODEL_PARALLEL_SIZE), accum, err, errlen))
        return false;
    call_per_micro_batch(m, IR_PROG_TRAIN, step, accum);
    int reduce = ir_func_of_kind(m, IR_FUNC_REDUCE);
    if (reduce >= 0)
        ir_sched_call(m, IR_PROG_TRAIN, reduce, -1);
    ir_sched_call(m, IR_PROG_TRAIN, opt, -1);
    int eval = ir_func_of_kind(m, IR_FUNC_EVAL);
    for (int mb = 0; stage && eval >= 0 && mb < accum; mb++)
        pipeline_call(m, IR_PROG_EVAL, eval, mb, -1);
    if (!stage)
        call_per_micro_batch(m, IR_PROG_EVAL, eval, accum);
    return true;
}
