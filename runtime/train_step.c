/* train_step.c — one iteration of train_rank and one validation: the plan's train and eval
 * programs step by step, each micro-batch's rows bound to its inputs, and the host's policy
 * around the optimizer call (the loss's mean, the non-finite checks, the update's inputs). */
#include "train.h"

#include "common/os.h"
#include "host_optimizer.h"
#include "trace.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int train_io(const train_run *r, int func, ir_op op, ir_role_kind kind)
{
    return rt_program_find(r->p, func, op, ir_role_of(kind));
}

/* ---- the batches --------------------------------------------------------------------------- */

/* Binds input instr [B,T] of func from the micro-batch's whole rows: the rank's part of them
 * where the input's type splits them (context parallelism's chunks of the sequence: its layout
 * record, ir_layout_index). */
static void set_batch_input(train_run *r, int func, int instr, const int32_t *whole)
{
    const ir_type *t;
    rt_program_tensor(r->p, func, instr, &t);
    if (!ir_shard_any(t)) {
        rt_program_set_input(r->p, func, instr, whole, ir_bytes(&r->bt_type));
        return;
    }
    ir_layout layout = ir_layout_of_type(t);
    int degree[IR_NUM_AXES];
    ir_axis_degrees(r->m, degree);
    int64_t n = ir_numel(t);
    int32_t *part = malloc(ir_bytes(t));
    for (int64_t i = 0; i < n; i++)
        part[i] = whole[ir_layout_index(&layout, &r->bt_type, degree, r->par.coord, i)];
    rt_program_set_input(r->p, func, instr, part, ir_bytes(t));
    free(part);
}

/* Loads the rows at positions first .. first+B-1 of split (the samples its sampler gives them,
 * sampler.h) as the inputs of roles tokens and targets of func, and tells a function with dropout
 * the first row's position (role first_sample: its masks are drawn from it; with
 * --tp-comm-interleave also first_sample index 1, the second half's). Dropout's per-sample identity is the consumed
 * position, not the dataset sample read there: the same masks under either --dataloader-type,
 * and a sample read again in a later cyclic epoch gets new ones. */
static void load_batch(train_run *r, int func, int split, int64_t first)
{
    int64_t start[2] = {first, first + r->B / 2}; /* the first sample of the micro-batch, of its second half */
    for (int h = 0; h < 2; h++) {
        int in = rt_program_find(r->p, func, IR_OP_INPUT, ir_role_at(IR_ROLE_FIRST_SAMPLE, h));
        if (in >= 0)
            rt_program_set_input(r->p, func, in, &start[h], sizeof start[h]);
    }
    /* a pipeline's first stage reads the tokens, its last the targets; its other functions
     * (middle stages, backwards) neither, and sample nothing */
    int tokens = train_io(r, func, IR_OP_INPUT, IR_ROLE_TOKENS);
    int targets = train_io(r, func, IR_OP_INPUT, IR_ROLE_TARGETS);
    if (tokens < 0 && targets < 0)
        return;
    int T = r->T;
    for (int b = 0; b < r->B; b++) {
        rt_gpt_data_sample(r->data, split, rt_sampler_sample(&r->sampler[split], first + b), r->sample);
        memcpy(r->tokens + (size_t)b * T, r->sample, sizeof(int32_t) * (size_t)T);
        memcpy(r->targets + (size_t)b * T, r->sample + 1, sizeof(int32_t) * (size_t)T);
    }
    if (tokens >= 0)
        set_batch_input(r, func, tokens, r->tokens);
    if (targets >= 0)
        set_batch_input(r, func, targets, r->targets);
}

/* Runs func (a step or eval function, a pipeline stage's forward or backward) on the micro-batch
 * of split starting at position first, its stash globals on buffers slot[span] (-1: none), and
 * where host >= 0 starts host function `host` beside it once it is queued (before its loss is read
 * back, which waits for it). Its loss, or 0 for a function without one (a stage other than the
 * last, a backward). */
static float run_micro_batch(train_run *r, int func, int split, int64_t first, const int *slot, int host)
{
    load_batch(r, func, split, first);
    rt_program_bind_slot(r->p, func, slot);
    rt_program_run(r->p, func);
    if (host >= 0)
        rt_host_start(r->p, host);
    float loss = 0;
    int out = train_io(r, func, IR_OP_OUTPUT, IR_ROLE_LOSS);
    if (out >= 0)
        rt_program_get_output(r->p, func, out, &loss, sizeof loss);
    return loss;
}

/* A send or recv step: the tensor of the step's function to or from the neighbouring pipeline
 * stage (comm.h: a send never waits, so the compiled order cannot deadlock). */
static void pipeline_transfer(train_run *r, const ir_sched_step *c)
{
    bool send = c->op == IR_STEP_SEND;
    const ir_type *t;
    int io = rt_program_find(r->p, c->func, send ? IR_OP_OUTPUT : IR_OP_INPUT, c->role);
    void *buf = rt_program_tensor(r->p, c->func, io, &t);
    int pp_size = r->par.mesh.degree[IR_AXIS_PP]; /* interleaved: the last rank's next is the first */
    int peer = (r->par.coord[IR_AXIS_PP] + c->peer + pp_size) % pp_size;
    rt_comm *pp = rt_parallel_comm(IR_AXIS_PP);
    if (send)
        rt_send(pp, buf, (size_t)ir_numel(t), t->dtype, peer, r->p->dev->queue(r->p));
    else
        rt_recv(pp, buf, (size_t)ir_numel(t), t->dtype, peer, r->p->dev->queue(r->p));
}

/* ---- one iteration ------------------------------------------------------------------------- */

/* Whether the host's update runs beside the last micro-batch's backward: the plan marks when each
 * offloaded gradient is ready (passes/grad_ready.c, --clip-grad 0), and no step may be dropped after
 * the backward (--skip-nan-steps checks the gradient norm first: the host then runs after it). */
static bool host_beside(const train_run *r) { return rt_host_beside(r->p) && !r->a.skip_nan_steps; }

/* The scalar inputs of an update, the optimizer function's or the host's (func): @lr, @step and,
 * where the plan gives the embedding and output layer their own (--decoupled-lr: the stages
 * holding them), @decoupled_lr. Megatron's scheduler and Adam count only the steps that updated
 * the weights. */
static void set_update_inputs(train_run *r, int func)
{
    int next = r->steps_applied + 1;
    float lr = (float)rt_lr_at(&r->lr, RT_LR_DEFAULT, next), step = (float)next;
    rt_program_set_input(r->p, func, train_io(r, func, IR_OP_INPUT, IR_ROLE_LR), &lr, sizeof lr);
    rt_program_set_input(r->p, func, train_io(r, func, IR_OP_INPUT, IR_ROLE_STEP), &step, sizeof step);
    int decoupled_in = train_io(r, func, IR_OP_INPUT, IR_ROLE_DECOUPLED_LR);
    if (decoupled_in >= 0) {
        float decoupled = (float)rt_lr_at(&r->lr, RT_LR_DECOUPLED, next);
        rt_program_set_input(r->p, func, decoupled_in, &decoupled, sizeof decoupled);
    }
}

/* The position of this rank's micro-batch mb of iteration it (rt_parallel_position); row b
 * takes the next ones, and the train sampler maps them to samples (load_batch), so the data a
 * step sees does not depend on the layout. */
static int64_t train_position(const train_run *r, int it, int mb)
{
    return rt_parallel_position(&r->par, it, r->accum, mb, r->B, 0);
}

/* Call c of the train program, on this rank's micro-batch c->mb of iteration it: its loss joins
 * the step's mean over the micro-batches; *finite turns false at the step's first non-finite loss
 * (train_non_finite stops the run there, or with --skip-nan-steps skips the update). host >= 0:
 * the host function to start beside it (train_step: the last micro-batch's). */
static void train_micro_batch(train_run *r, int it, const ir_sched_step *c, train_step_result *s, bool *finite, int host)
{
    char range[32];
    snprintf(range, sizeof range, "micro-batch %d", c->mb);
    rt_trace_push(r->p, range);
    if (host >= 0)
        set_update_inputs(r, host);
    float loss = run_micro_batch(r, c->func, RT_SPLIT_TRAIN, train_position(r, it, c->mb), c->slot, host);
    rt_trace_pop(r->p);
    ir_func_kind kind = r->m->funcs[c->func]->kind;
    if (r->a.dump_dir && kind != IR_FUNC_BACKWARD && kind != IR_FUNC_WGRAD) /* a stage's forward has it */
        train_dump_batch(r, c->func, it, c->mb);
    if (*finite)
        *finite = train_loss_finite(r, it, c->mb, loss);
    s->loss += loss / r->accum;
    if (r->moe.moe)
        rt_moe_stats_add(&r->moe, r->p, c->func);
    for (int k = 0; c->func == r->mtp.func && k < r->mtp.depths && r->mtp.out[k] >= 0; k++) {
        float v;
        rt_program_get_output(r->p, c->func, r->mtp.out[k], &v, sizeof v);
        r->mtp.step[k] += v;
    }
}

/* The step's MoE router statistics: each stage's share of its own MoE layers, added (the largest
 * imbalance) over pp, the mean over dp. */
static void step_moe_stats(train_run *r, train_step_result *s)
{
    rt_moe_step m;
    rt_moe_stats_step(&r->moe, &m);
    s->moe_aux = r->moe.aux_layers ? rt_parallel_mean(&r->par, r->p, (float)m.aux) / r->moe.aux_layers : NAN;
    s->moe_z = r->moe.z_layers ? rt_parallel_mean(&r->par, r->p, (float)m.z) / r->moe.z_layers : NAN;
    s->moe_imbalance = rt_parallel_mean_of(&r->par, r->p, (float)m.imbalance, RT_MAX); /* of each rank's tokens */
    double dropped = r->moe.has_kept ? rt_parallel_mean(&r->par, r->p, (float)m.dropped) : 0;
    double routed = r->moe.has_kept ? rt_parallel_mean(&r->par, r->p, (float)m.routed) : 0;
    s->moe_dropped = routed > 0 ? dropped / routed : NAN;
}

/* --skip-nan-steps: whether the gradient norm is finite, checked before the update could see a
 * bad gradient. */
static bool grad_norm_finite(train_run *r, int it)
{
    float norm = 0;
    rt_program_run(r->p, r->norm);
    rt_program_get_output(r->p, r->norm, train_io(r, r->norm, IR_OP_OUTPUT, IR_ROLE_GRAD_NORM), &norm, sizeof norm);
    return isfinite(norm) || train_non_finite(r, it, "the gradient norm", norm);
}

/* The optimizer call opt (and the host's update, the schedule's next call, given the same
 * inputs), its gradient norm into s. */
static void apply_update(train_run *r, int it, int opt, train_step_result *s)
{
    set_update_inputs(r, opt);
    rt_program_run(r->p, opt);
    int host = ir_func_of_kind(r->m, IR_FUNC_HOST_OPTIMIZER);
    if (host >= 0 && !host_beside(r)) { /* --optimizer-cpu-offload: the host's update, the schedule's next call, takes the same */
        set_update_inputs(r, host);
        int coef_in = train_io(r, host, IR_OP_INPUT, IR_ROLE_CLIP_COEF); /* none under --clip-grad 0: a constant 1 */
        if (coef_in >= 0) {
            float coef;
            rt_program_get_output(r->p, opt, train_io(r, opt, IR_OP_OUTPUT, IR_ROLE_CLIP_COEF), &coef, sizeof coef);
            rt_program_set_input(r->p, host, coef_in, &coef, sizeof coef);
        }
    }
    float norm = 0;
    rt_program_get_output(r->p, opt, train_io(r, opt, IR_OP_OUTPUT, IR_ROLE_GRAD_NORM), &norm, sizeof norm);
    if (!isfinite(norm))
        train_non_finite(r, it, "the gradient norm", norm);
    s->grad_norm = norm;
    r->steps_applied++;
    train_dump_step(r, it, s);
}

/* The train program's optimizer call with the host's policy around it: first the loss's mean over
 * dp and (--dump-dir) the step-1 gradients, as reduced; under FP8 delayed scaling every rank's
 * amaxes, and with --skip-nan-steps the gradient norm, checked. A non-finite step is dropped, its
 * gradients zeroed so that they do not leak into the next one: returns false. */
static bool train_update(train_run *r, int it, int opt, train_step_result *s, bool finite)
{
    rt_comm *pp = rt_parallel_comm(IR_AXIS_PP);
    if (pp) /* every activation and gradient sent this iteration has arrived */
        rt_p2p_flush(pp, r->p->dev->queue(r->p));
    s->loss = rt_parallel_mean(&r->par, r->p, (float)s->loss);
    if (r->moe.moe)
        step_moe_stats(r, s);
    for (int k = 0; k < r->mtp.depths; k++) /* each depth's mean over the micro-batches (the last stage's), over dp */
        r->mtp.step[k] = rt_parallel_mean(&r->par, r->p, (float)(r->mtp.step[k] / r->accum));
    if (pp && finite && !isfinite(s->loss)) /* the last stage's, which the others now see */
        finite = train_non_finite(r, it, "the loss", s->loss);
    if (r->a.dump_dir && it == 1)
        train_dump_globals(r, IR_GLOBAL_GRAD, "grads_step1.mcct");
    if (finite && train_fp8_delayed(r->m)) /* every rank: an amax of the backward's too */
        finite = train_fp8_amaxes_finite(r, it);
    if (finite && r->a.skip_nan_steps)
        finite = grad_norm_finite(r, it);
    for (int k = 0; k < r->mtp.depths; k++) { /* a step applied joins the log line's means */
        r->mtp.window[k] += finite ? r->mtp.step[k] : 0;
        r->mtp.step[k] = 0;
    }
    if (!finite) {
        rt_program_run(r->p, r->zero);
        return false;
    }
    apply_update(r, it, opt, s);
    return true;
}

train_step_result train_step(train_run *r, int it)
{
    train_step_result s = {.lr = rt_lr_at(&r->lr, RT_LR_DEFAULT, r->steps_applied + 1)};
    bool finite = true;
    const ir_program *prog = &r->m->progs[IR_PROG_TRAIN];
    int host = host_beside(r) ? ir_func_of_kind(r->m, IR_FUNC_HOST_OPTIMIZER) : -1, last_mb = -1;
    for (int i = 0; i < prog->nsteps; i++) /* the call the host starts beside */
        last_mb = prog->steps[i].op == IR_STEP_CALL && prog->steps[i].mb >= 0 ? i : last_mb;
    for (int i = 0; i < prog->nsteps; i++) {
        const ir_sched_step *c = &prog->steps[i];
        if (c->op != IR_STEP_CALL)
            pipeline_transfer(r, c);
        else if (c->mb >= 0)
            train_micro_batch(r, it, c, &s, &finite, i == last_mb ? host : -1);
        else if (c->func == host && host >= 0) /* started beside the backward: its copies up done */
            rt_host_join(r->p);
        else if (r->m->funcs[c->func]->kind != IR_FUNC_OPTIMIZER)
            rt_program_run(r->p, c->func);
        else if (!train_update(r, it, c->func, &s, finite))
            return s.skipped = true, s;
    }
    return s;
}

/* ---- validation ---------------------------------------------------------------------------- */

/* eval_iters global batches of the valid split, each through the plan's eval program (forward
 * only: the weights and gradients are untouched). Like Megatron's, the valid positions continue
 * from one validation to the next, read through the valid split's sampler. */
void train_evaluate(train_run *r, int it)
{
    double t0 = os_now_s(), loss = 0;
    const ir_program *prog = &r->m->progs[IR_PROG_EVAL];
    int n = r->eval_iters * r->accum, dp = r->par.mesh.degree[IR_AXIS_DP];
    for (int e = 0; e < r->eval_iters; e++)
        for (int i = 0; i < prog->nsteps; i++) { /* calls on micro-batches (ir_verify), a pipeline's transfers */
            const ir_sched_step *c = &prog->steps[i];
            if (c->op != IR_STEP_CALL) {
                pipeline_transfer(r, c);
                continue;
            }
            int64_t micro = ((int64_t)r->evals_done * n + (int64_t)e * r->accum + c->mb) * dp + r->par.coord[IR_AXIS_DP];
            loss += run_micro_batch(r, c->func, RT_SPLIT_VALID, micro * r->B, c->slot, -1) / n;
        }
    if (rt_parallel_comm(IR_AXIS_PP))
        rt_p2p_flush(rt_parallel_comm(IR_AXIS_PP), r->p->dev->queue(r->p));
    loss = rt_parallel_mean(&r->par, r->p, (float)loss);
    r->evals_done++;
    train_log_validation(r, it, loss, os_now_s() - t0);
}
