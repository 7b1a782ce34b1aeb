/* schedule.c — the schedule programs a rank runs (ir.h's ir_program). `train`, one iteration:
 * the step function on each of the accum_steps micro-batches of this rank's share of the global
 * batch, then the reduce function (data parallel; when there is one), then the optimizer.
 * `eval`, one global batch of validation: the eval function on each micro-batch.
 *
 * A pipeline stage's module (passes/pipeline.c) has a forward and a backward instead of the step:
 * its train program is this stage's part of a pipeline schedule (1F1B: warm-up forwards, then one
 * forward and one backward in turn, then the cool-down backwards; interleaved 1F1B over virtual
 * stages: passes/pp_schedule.c computes the orders), each forward after the receives
 * of its boundary inputs from the previous stage and before the sends of its outputs to the next,
 * each backward between the receives of the gradients from the next stage and the sends of its
 * own to the previous. Each call names the stash slot of its micro-batch in each span it touches
 * (ir_stash_span), and the stash globals get as many buffers as micro-batches are in flight in
 * their span on this stage. */
#include "passes.h"
#include "passes/pp_schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert((int)IR_STASH_FB == (int)PP_SPAN_FB && (int)IR_STASH_FW == (int)PP_SPAN_FW &&
                   (int)IR_STASH_BW == (int)PP_SPAN_BW && (int)IR_NUM_STASH_SPANS == (int)PP_NUM_SPANS,
               "ir_stash_span and pp_span name the same spans in the same order");

/* Program p calls function f (when the module has one) on micro-batches 0..n-1. */
static void call_per_micro_batch(ir_module *m, ir_prog p, int f, long long n)
{
    for (int mb = 0; f >= 0 && mb < n; mb++)
        ir_sched_call(m, p, f, mb);
}

/* The receives (recv) or sends (send) around a call of f on micro-batch mb: one for each of its
 * boundary inputs or outputs (the pipeline pass's roles pp_act and pp_grad). */
static void boundary_steps(ir_module *m, ir_prog p, int fi, int mb, ir_step_op op)
{
    const ir_func *f = m->funcs[fi];
    ir_op want = op == IR_STEP_RECV ? IR_OP_INPUT : IR_OP_OUTPUT;
    for (int i = 0; i < f->ninstrs; i++) {
        const ir_instr *in = &f->instrs[i];
        bool grad = in->role.kind == IR_ROLE_PP_GRAD;
        if (in->op != want || (!grad && in->role.kind != IR_ROLE_PP_ACT))
            continue;
        /* activations go down the pipeline, gradients up */
        int peer = (grad ? -1 : 1) * (op == IR_STEP_SEND ? 1 : -1);
        ir_sched_add(m, p, (ir_sched_step){.op = op, .func = fi, .mb = mb, .sym = in->sym, .role = in->role,
                                           .peer = peer,
                                           .slot = {-1, -1, -1}});
    }
}

/* The stash spans function fi reads or writes, as a bitmask of (1 << span). */
static unsigned stash_spans(const ir_module *m, int fi)
{
    const ir_func *f = m->funcs[fi];
    unsigned spans = 0;
    for (int i = 0; i < f->ninstrs; i++) {
        int g = f->instrs[i].global;
        if (g >= 0 && m->globals[g].kind == IR_GLOBAL_STASH)
            spans |= 1u << m->globals[g].span;
    }
    return spans;
}

/* A call of fi on micro-batch mb between its receives and sends; slot: per span, the buffer the
 * schedule gave the micro-batch (NULL: none), named for the spans fi touches (stash_spans). */
static void pipeline_call(ir_module *m, ir_prog p, int fi, int mb, const int *slot, unsigned spans)
{
    boundary_steps(m, p, fi, mb, IR_STEP_RECV);
    ir_sched_step call = {.op = IR_STEP_CALL, .func = fi, .mb = mb, .slot = {-1, -1, -1}};
    for (int k = 0; slot && k < IR_NUM_STASH_SPANS; k++)
        call.slot[k] = spans & (1u << k) ? slot[k] : -1;
    ir_sched_add(m, p, call);
    boundary_steps(m, p, fi, mb, IR_STEP_SEND);
}

/* The gradients of the parameters this stage shares with its neighbour on the pipeline's ring
 * (tied embeddings: the first stage's is the last, its previous; the last's the first, its next):
 * sent, then the neighbour's received and added. */
static void tied_transfers(ir_module *m, int send, int sum)
{
    int peer = ir_cfg_int(m, IR_CFG_PIPELINE_STAGE) == 0 ? -1 : 1;
    ir_sched_call(m, IR_PROG_TRAIN, send, -1);
    for (int i = 0; i < m->funcs[send]->ninstrs; i++)
        if (m->funcs[send]->instrs[i].op == IR_OP_OUTPUT)
            ir_sched_add(m, IR_PROG_TRAIN, (ir_sched_step){.op = IR_STEP_SEND, .func = send, .mb = -1,
                                                           .sym = m->funcs[send]->instrs[i].sym,
                                                           .role = m->funcs[send]->instrs[i].role, .peer = peer,
                                                           .slot = {-1, -1, -1}});
    for (int i = 0; i < m->funcs[sum]->ninstrs; i++)
        if (m->funcs[sum]->instrs[i].op == IR_OP_INPUT)
            ir_sched_add(m, IR_PROG_TRAIN, (ir_sched_step){.op = IR_STEP_RECV, .func = sum, .mb = -1,
                                                           .sym = m->funcs[sum]->instrs[i].sym,
                                                           .role = m->funcs[sum]->instrs[i].role, .peer = peer,
                                                           .slot = {-1, -1, -1}});
    ir_sched_call(m, IR_PROG_TRAIN, sum, -1);
}

/* The i-th function of kind k in module order (a rank's chunk i), or -1. */
static int nth_of_kind(const ir_module *m, ir_func_kind k, int i)
{
    for (int f = 0; f < m->nfuncs; f++)
        if (m->funcs[f]->kind == k && i-- == 0)
            return f;
    return -1;
}

/* Rank a's messages to rank b in a's order (to_b) or b's receives from a in b's order (!to_b), each
 * as its (kind, micro-batch, virtual stage) number, into out; their count. */
static int messages(const pp_schedule *s, int a, int b, bool sent, long *out)
{
    int n = 0, P = s->p * s->v, me = sent ? a : b;
    const pp_rank_program *prog = &s->rank[me];
    for (int i = 0; i < prog->n; i++) {
        const pp_action *x = &prog->a[i];
        int g = x->chunk * s->p + me;
        if (x->kind == PP_ACT_W)
            continue;
        bool fwd = x->kind == PP_ACT_F;
        /* a forward sends to g+1 and receives from g-1; a backward the other way */
        int to = fwd ? g + 1 : g - 1, from = fwd ? g - 1 : g + 1;
        int other = sent ? to : from, src_g = sent ? g : from;
        if (other < 0 || other >= P || other % s->p != (sent ? b : a))
            continue;
        out[n++] = ((long)fwd * s->m + x->mb) * P + src_g; /* the message: who made it, of which micro-batch */
    }
    return n;
}

/* Between two ranks messages are matched in the order sent (comm.h): every rank receives what
 * each neighbour sends in the order it was sent, or a micro-batch would get another's tensor. A
 * rank sends only to the ranks before and after it (virtual stage g's neighbours are g - 1 and
 * g + 1, on the ring of ranks). */
static bool transfers_in_order(const pp_schedule *s, char *err, size_t errlen)
{
    int most = 0;
    for (int r = 0; r < s->p; r++)
        most += s->rank[r].n;
    long *sent = malloc(sizeof(long) * ((size_t)most + 1)), *got = malloc(sizeof(long) * ((size_t)most + 1));
    bool ok = true;
    for (int a = 0; ok && a < s->p; a++)
        for (int side = 0; ok && side < 2; side++) {
            int b = (a + (side ? s->p - 1 : 1)) % s->p;
            int ns = messages(s, a, b, true, sent), ng = messages(s, a, b, false, got);
            ok = ns == ng && !memcmp(sent, got, sizeof(long) * (size_t)ns);
            if (!ok)
                snprintf(err, errlen, "internal error: the %s schedule's transfers from pipeline rank %d to %d are "
                         "received in another order than sent", pp_sched_names[s->kind], a, b);
        }
    free(sent);
    free(got);
    return ok;
}

/* This pipeline rank's part of the schedule pp_schedule_build computes for every rank (1F1B,
 * interleaved 1F1B): each action a call of its chunk's forward or backward with the boundary
 * transfers around it, on the stash slot the schedule gave its micro-batch; each chunk's stash
 * globals get the slots its schedule uses at once. */
static bool schedule_stage(ir_module *m, int r, int p, int v, long long n, char *err, size_t errlen)
{
    pp_sched_kind kind = pass_pipeline_schedule(m, v);
    pp_schedule sched;
    if (!pp_schedule_build(kind, p, (int)n, v, &sched, err, errlen))
        return false;
    if (r == 0 && !transfers_in_order(&sched, err, errlen)) { /* every rank's the same schedule: checked once */
        pp_schedule_free(&sched);
        return false;
    }
    const pp_rank_program *prog = &sched.rank[r];
    static const ir_func_kind of_act[] = {[PP_ACT_F] = IR_FUNC_FORWARD, [PP_ACT_B] = IR_FUNC_BACKWARD,
                                          [PP_ACT_W] = IR_FUNC_WGRAD};
    for (int c = 0; c < v; c++) /* a chunk's stashes hold the slots their span uses at once */
        for (int k = 0; k < 3; k++) {
            int fi = nth_of_kind(m, of_act[k], c);
            const ir_func *f = fi >= 0 ? m->funcs[fi] : NULL;
            for (int i = 0; f && i < f->ninstrs; i++) {
                int g = f->instrs[i].global;
                if (g >= 0 && m->globals[g].kind == IR_GLOBAL_STASH) {
                    int n = prog->nslots[m->globals[g].span][c];
                    m->globals[g].slots = n > 0 ? n : 1;
                }
            }
        }
    bool zb = ir_func_of_kind(m, IR_FUNC_WGRAD) >= 0;
    if (zb != pp_scheds[kind].splits_w) {
        pp_schedule_free(&sched);
        return snprintf(err, errlen, "internal error: the %s schedule on a stage %s weight-gradient functions",
                        pp_sched_names[kind], zb ? "with" : "without"), false;
    }
    unsigned spans[m->nfuncs]; /* once a function: a step names the spans its function touches */
    for (int fi = 0; fi < m->nfuncs; fi++)
        spans[fi] = stash_spans(m, fi);
    for (int i = 0; i < prog->n; i++) {
        const pp_action *a = &prog->a[i];
        int fi = nth_of_kind(m, of_act[a->kind], a->chunk);
        if (fi < 0) {
            pp_schedule_free(&sched);
            return snprintf(err, errlen, "internal error: pipeline rank %d has no function of kind %s for chunk %d", r,
                            ir_func_kinds[of_act[a->kind]].name, a->chunk), false;
        }
        pipeline_call(m, IR_PROG_TRAIN, fi, a->mb, a->slot, spans[fi]);
    }
    pp_schedule_free(&sched);
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
    int v = (int)ir_cfg_int(m, IR_CFG_NUM_VIRTUAL_STAGES_PER_PIPELINE_RANK);
    if (stage && !schedule_stage(m, (int)ir_cfg_int(m, IR_CFG_PIPELINE_STAGE),
                                 (int)ir_cfg_int(m, IR_CFG_PIPELINE_MODEL_PARALLEL_SIZE), v < 1 ? 1 : v, accum, err, errlen))
        return false;
    call_per_micro_batch(m, IR_PROG_TRAIN, step, accum);
    int tied_send = ir_func_of_kind(m, IR_FUNC_TIED_SEND), tied_sum = ir_func_of_kind(m, IR_FUNC_TIED_SUM);
    if (tied_send >= 0 && tied_sum >= 0) /* the shared parameters' gradients, to and from the other end */
        tied_transfers(m, tied_send, tied_sum);
    int reduce = ir_func_of_kind(m, IR_FUNC_REDUCE);
    if (reduce >= 0)
        ir_sched_call(m, IR_PROG_TRAIN, reduce, -1);
    ir_sched_call(m, IR_PROG_TRAIN, opt, -1);
    int host_opt = ir_func_of_kind(m, IR_FUNC_HOST_OPTIMIZER), sync = ir_func_of_kind(m, IR_FUNC_PARAM_SYNC);
    if (host_opt >= 0 && sync >= 0) /* CPU offload: the host's share of the update, then its parameters' sync */
        ir_sched_call(m, IR_PROG_TRAIN, host_opt, -1), ir_sched_call(m, IR_PROG_TRAIN, sync, -1);
    int eval = ir_func_of_kind(m, IR_FUNC_EVAL);
    for (int mb = 0; stage && mb < accum; mb++) /* chunk by chunk: a chunk's input is the rank before's */
        for (int c = 0; nth_of_kind(m, IR_FUNC_EVAL, c) >= 0; c++)
            pipeline_call(m, IR_PROG_EVAL, nth_of_kind(m, IR_FUNC_EVAL, c), mb, NULL, 0);
    if (!stage)
        call_per_micro_batch(m, IR_PROG_EVAL, eval, accum);
    return true;
}
