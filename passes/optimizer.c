/* optimizer.c — builds the `optimizer` function run once per step after the micro-batches:
 * global gradient norm, clipping coefficient, AdamW on every parameter (decoupled weight decay,
 * none on 1-D parameters; at input @lr, the word embedding and output layer at @decoupled_lr where
 * config decoupled_lr gives them a schedule of their own), then the gradient accumulators are
 * zeroed for the next step (with one micro-batch per step, only those micro_step does not
 * overwrite: its first write of a gradient becomes a copy, see assign_first_writes). Also
 * `grad_norm` (the norm alone, output @grad_norm) and `zero_grads` (the zeroing alone): with
 * --skip-nan-steps train_rank checks the norm before the update and drops a bad step's gradients.
 *
 * The distributed optimizer (ZeRO-1, pass_zero_on) is the same optimizer over 1/dp blocks (1/(dp cp)
 * under context parallelism, over the dp x cp axis dp_cp, as Megatron's; an expert weight's, under
 * expert parallelism, 1/edp of this rank's experts: the ranks holding the same experts share them;
 * pass_replica_axis picks the axis from each parameter's layout, and its blocks' layout is
 * [ep:dim0, edp:flat]), so it is built here rather than by a pass of its own. Each rank keeps, as flat f32[N/dp] {shard=[dp]}
 * globals, its block of the fp32 master (@<p>.master_shard), of Adam's m and v (@<p>.adam_m/.adam_v)
 * and of the reduced gradient (@<p>.grad_shard, which data_parallel.c's reduce_grads reduce-scatters
 * into). The blocks hold the parameter: @<p> itself has no storage (ir_param_stored), train_rank
 * initialises, loads, saves and dumps the blocks, and the step reads the working copy (precision.c's
 * bf16 one, or @<p>.f32 where param_dtype is f32), which `setup` and each step's update all-gather
 * from the blocks, converting as they copy. So a rank holds no whole fp32 master (Megatron's
 * distributed optimizer's memory: the working copy, the gradient and 1/dp of the rest). The norm is
 * the square root of the all-reduced sum of the blocks' squares; optimizer state is 1/dp per rank
 * (1/(dp cp) under cp; experts' 1/(ep x edp)). A parameter whose replicas are one rank (an expert
 * weight at edp 1) is not sharded (pass_zero_param): its blocks would be the whole and its reduced
 * gradient's block a second copy of its gradient, so it keeps the plain optimizer's fp32 master,
 * gradient and moments, and the distributed optimizer never holds more than the plain one.
 *
 * CPU offload (config optimizer_cpu_offload, the first optimizer_offload_fraction of the parameters'
 * elements in declaration order): an offloaded parameter's fp32 value lives on the host only. The
 * parameter global @<p> itself is `host` (initialised, checkpointed and dumped there), and so are
 * Adam's m and v (no host copy of the whole gradient: the host streams it); the device keeps the working copy
 * the step reads (precision.c's bf16 one, or an f32 @<p>.f32 made here where param_dtype is f32) and
 * the gradient. Its update leaves `optimizer` (which still takes the norm over every gradient, and
 * outputs the clipping coefficient) for two functions the schedule calls after it: `host_optimizer`,
 * run by the host (AdamW on @<p> reading the device's gradient, which the host streams down chunk by
 * chunk, then @<p> copied up into the working copy with it, converted to the working dtype on the
 * host so that only those bytes cross), then
 * `param_sync` on the device (the zeroing). Under ZeRO the host master is the block
 * (@<p>.master_shard, host, holding the parameter as above): it goes up as fp32 into the reduced
 * gradient's block, dead by then, and param_sync all-gathers the blocks into the working copy
 * (`setup` likewise, at start-up and after a load).
 *
 * FP8 delayed scaling: the optimizer rolls each FP8_HISTORY's step amax (max-reduced over dp, whose
 * ranks quantized other micro-batches) into its history; zero_grads (a skipped step) only resets
 * the step amax, leaving the history as it was. MoE expert bias likewise: each EXPERT_BIAS's
 * step counts, sum-reduced over dp, move its bias (expert_biases). */
#include "passes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parameter param's companion in role kind: @<param>.<suffix> of type t, laid out as `layout`
 * (its own, or the ZeRO block's it is updated with), declared when absent. */
static int companion(ir_module *m, int param, ir_global_kind kind, const char *suffix, ir_type t, ir_layout layout)
{
    int g = ir_global_companion(m, param, kind);
    if (g < 0) {
        char name[256];
        snprintf(name, sizeof name, "%s.%s", m->globals[param].name, suffix);
        g = ir_global_add_companion(m, name, t, kind, param);
        m->globals[g].layout = layout;
    }
    return g;
}

/* Adam's m and v of a master of type t, in the dtypes of config exp_avg_dtype and exp_avg_sq_dtype
 * (--use-precision-aware-optimizer; a MOMENT_DTYPE choice: f32 or bf16, an ir_dtype). */
static ir_type moment_type(const ir_module *m, ir_type t, ir_cfg key)
{
    t.dtype = (ir_dtype)ir_cfg_choice(m, key);
    return t;
}

/* A reference in f to the gradient the update reads: @<param>.grad, or its reduced block
 * @<param>.grad_shard under ZeRO; -1 when the earlier passes made none. */
static int grad_ref(ir_module *m, ir_func *f, int g, bool shard)
{
    int grad = ir_global_companion(m, g, shard ? IR_GLOBAL_GRAD_SHARD : IR_GLOBAL_GRAD);
    return grad >= 0 ? ir_global_ref(m, f, grad) : -1;
}

/* The `setup` function run once after initialisation (precision.c may have made it). */
static ir_func *setup_func(ir_module *m)
{
    int i = ir_func_of_kind(m, IR_FUNC_SETUP);
    return i >= 0 ? m->funcs[i] : ir_func_new(m, "setup", IR_FUNC_SETUP);
}

static int working_copy(ir_module *m, int p, bool fill);
static void gather_param(ir_module *m, ir_func *f, int g, int master);

/* @<param>.master_shard, the fp32 master ZeRO's update writes: this rank's block of parameter g over
 * its replicas' axis (pass_replica_axis: dp or dp_cp, an expert weight's edp; its layout the
 * parameter's, then <axis>:flat), of the reduced gradient's block's type. It holds g's value: g
 * itself takes no storage (ir_param_stored), the runtime initialises and loads the block, and
 * `setup` gathers the working copy from the blocks (an offloaded one's, a host block, through
 * the gradient's block: the device gathers device memory). Returns its index. */
static int master_shard(ir_module *m, int g, bool offloaded)
{
    int shard = ir_global_companion(m, g, IR_GLOBAL_MASTER_SHARD);
    if (shard >= 0)
        return shard;
    int grad = ir_global_companion(m, g, IR_GLOBAL_GRAD_SHARD);
    ir_type t = m->globals[grad].type; /* f32[N/n] {shard=[axis]}: the reduce-scatter's block */
    t.dtype = IR_F32;
    ir_layout layout = m->globals[g].layout;
    ir_layout_add(&layout, pass_replica_axis(m, g), IR_SPLIT_FLAT, 0);
    shard = companion(m, g, IR_GLOBAL_MASTER_SHARD, "master_shard", t, layout);
    m->globals[shard].no_decay = m->globals[g].no_decay;
    m->globals[shard].host = offloaded;
    ir_func *setup = setup_func(m);
    int block = ir_global_ref(m, setup, shard);
    if (offloaded) { /* up into the gradient's block first */
        int args[2] = {ir_global_ref(m, setup, grad), block};
        ir_emit(m, setup, IR_OP_COPY, args, 2, NULL, NULL, NULL);
        block = args[0];
    }
    gather_param(m, setup, working_copy(m, g, false), block);
    return shard;
}

/* `setup` fills parameter p's working copy from p, where p has one that nothing in setup writes yet:
 * precision.c fills its copies itself, but under the distributed optimizer (pass_zero_on) leaves
 * them to ZeRO's gather, which a parameter ZeRO does not shard (pass_zero_param) has none of. */
static void fill_copy(ir_module *m, int p)
{
    int c = ir_global_companion(m, p, IR_GLOBAL_COPY);
    if (c < 0)
        return;
    ir_func *setup = setup_func(m);
    for (int i = 0; i < setup->ninstrs; i++)
        if (setup->instrs[i].op == IR_OP_COPY && ir_global_of(setup, setup->instrs[i].args[0]) == c)
            return;
    int args[2] = {ir_global_ref(m, setup, c), ir_global_ref(m, setup, p)};
    ir_emit(m, setup, IR_OP_COPY, args, 2, NULL, NULL, NULL);
}

/* The device's working copy of parameter p, which every function but setup and the host's reads in
 * its stead once p is a host global or held by ZeRO's blocks: precision.c's, else (param_dtype f32)
 * @<p>.f32, declared here, the references to p pointed at it, and with fill filled from p by `setup`. */
static int working_copy(ir_module *m, int p, bool fill)
{
    int c = ir_global_companion(m, p, IR_GLOBAL_COPY);
    if (c >= 0)
        return c;
    char name[256];
    snprintf(name, sizeof name, "%s.f32", m->globals[p].name);
    c = ir_global_add_companion(m, name, m->globals[p].type, IR_GLOBAL_COPY, p);
    m->globals[c].no_decay = m->globals[p].no_decay;
    for (int i = 0; i < m->nfuncs; i++) {
        ir_func *f = m->funcs[i];
        if (f->kind == IR_FUNC_SETUP || f->kind == IR_FUNC_HOST_OPTIMIZER)
            continue;
        for (int k = 0; k < f->ninstrs; k++)
            if (f->instrs[k].op == IR_OP_GLOBAL && f->instrs[k].global == p)
                ir_global_retarget(m, &f->instrs[k], c);
    }
    if (fill)
        fill_copy(m, p);
    return c;
}

/* ZeRO: @<g> (a parameter's working copy) := the concatenation of every rank's updated block
 * (master, a reference in f) over g's replicas' axis, converted to g's dtype. */
static void gather_param(ir_module *m, ir_func *f, int g, int master)
{
    double axis = pass_replica_axis(m, g);
    const ir_type *t = &m->globals[g].type;
    int whole = ir_emit(m, f, IR_OP_ALL_GATHER, &master, 1, &axis, NULL, NULL); /* f32[N] */
    int args[2] = {ir_global_ref(m, f, g), ir_reshape(m, f, whole, t->ndim, t->dims)};
    ir_emit(m, f, IR_OP_COPY, args, 2, NULL, NULL, NULL);
}

/* Whether gradient value v (a global reference) is split over `axis`: its layout says so. */
static bool split_over(const ir_module *m, const ir_func *f, int v, ir_axis axis)
{
    return ir_layout_split(&m->globals[ir_global_of(f, v)].layout, axis) != NULL;
}

/* Value v summed over `axis`'s ranks */
static int sum_over(ir_module *m, ir_func *f, int v, ir_axis axis)
{
    double attrs[IR_NATTRS_ALL_REDUCE] = {[IR_ATTR_AXIS] = axis, [IR_ATTR_ALL_REDUCE_MAX] = 0};
    return ir_emit(m, f, IR_OP_ALL_REDUCE, &v, 1, attrs, NULL, NULL);
}

/* sumsq + the sum over `axis`'s ranks of the squares of the n gradients split over it. */
static int add_split_squares(ir_module *m, ir_func *f, int sumsq, const int *split, int n, ir_axis axis)
{
    if (!n)
        return sumsq;
    int local = ir_emit(m, f, IR_OP_SUM_SQUARES, split, n, NULL, NULL, NULL);
    int total = sum_over(m, f, local, axis);
    return sumsq < 0 ? total : ir_op2(m, f, IR_OP_ADD, sumsq, total);
}

/* output @grad_norm: the global norm of the n gradients; returns their sum of squares. Squares of
 * gradients split over tp (the shard pass's) are summed over the tp ranks, those of expert weights
 * split over ep (expert_parallel.c) over the ep ranks (after the tp ranks where split over both), those of replicated ones, the same on every
 * such rank, counted once; ZeRO's blocks of every replica are summed too (the dense ones' over dp or
 * dp_cp, the experts' over edp, where ZeRO shards them: pass_zero_param), and under pipeline
 * parallelism every stage's. */
static int emit_grad_norm(ir_module *m, ir_func *f, int *grads, int n)
{
    int split[n], experts[n], experts_tp[n], whole[n], ns = 0, ne = 0, nt = 0, nw = 0;
    bool dense_blocks = false, expert_blocks = false;
    for (int j = 0; j < n; j++) {
        int g = ir_global_of(f, grads[j]);
        if (ir_param_held_elsewhere(m, g)) /* counted on the first stage */
            continue;
        bool tp = split_over(m, f, grads[j], IR_AXIS_TP), ep = split_over(m, f, grads[j], IR_AXIS_EP);
        bool block = m->globals[g].kind == IR_GLOBAL_GRAD_SHARD;
        expert_blocks |= ep && block;
        dense_blocks |= !ep && block;
        if (tp && ep)
            experts_tp[nt++] = grads[j];
        else if (tp)
            split[ns++] = grads[j];
        else if (ep)
            experts[ne++] = grads[j];
        else
            whole[nw++] = grads[j];
    }
    int sumsq = nw ? ir_emit(m, f, IR_OP_SUM_SQUARES, whole, nw, NULL, NULL, NULL) : -1;
    sumsq = add_split_squares(m, f, sumsq, split, ns, IR_AXIS_TP);
    /* experts split over tp too (expert tensor parallelism): over tp, then with the others over ep */
    int expert = add_split_squares(m, f, -1, experts_tp, nt, IR_AXIS_TP);
    if (ne) {
        int local = ir_emit(m, f, IR_OP_SUM_SQUARES, experts, ne, NULL, NULL, NULL);
        expert = expert < 0 ? local : ir_op2(m, f, IR_OP_ADD, expert, local);
    }
    if (expert >= 0)
        expert = sum_over(m, f, expert, IR_AXIS_EP);
    if (dense_blocks && sumsq >= 0)
        sumsq = sum_over(m, f, sumsq, pass_dense_replica_axis(m));
    if (expert_blocks && expert >= 0)
        expert = sum_over(m, f, expert, IR_AXIS_EDP);
    if (expert >= 0)
        sumsq = sumsq < 0 ? expert : ir_op2(m, f, IR_OP_ADD, sumsq, expert);
    if (ir_cfg_int(m, IR_CFG_PIPELINE_MODEL_PARALLEL_SIZE) > 1) /* each stage holds its own layers' */
        sumsq = sum_over(m, f, sumsq, IR_AXIS_PP);
    ir_output(m, f, ir_role_of(IR_ROLE_GRAD_NORM), "grad_norm", ir_op1(m, f, IR_OP_SQRT, sumsq));
    return sumsq;
}

static void zero_all(ir_module *m, ir_func *f, int *grads, int n)
{
    for (int j = 0; j < n; j++)
        ir_emit(m, f, IR_OP_ZERO, &grads[j], 1, NULL, NULL, NULL);
}

/* One micro-batch per step (accum_steps = 1): a gradient's first write in micro_step needs no
 * zeroed accumulator, so that accumulate becomes a copy (the fusion pass then has the GEMM write
 * it, beta = 0) and the optimizer need not zero the gradient. assigned[g]: global g is one. */
static void assign_first_writes(ir_module *m, bool *assigned)
{
    int fi = ir_func_of_kind(m, IR_FUNC_STEP);
    if (fi < 0 || ir_cfg_int(m, IR_CFG_ACCUM_STEPS) != 1)
        return;
    ir_func *f = m->funcs[fi];
    bool *touched = calloc((size_t)m->nglobals + 1, sizeof(bool));
    for (int i = 0; i < f->ninstrs; i++) {
        ir_instr *in = &f->instrs[i];
        int g = in->op == IR_OP_ACCUMULATE ? ir_global_of(f, in->args[0]) : -1;
        if (g >= 0 && m->globals[g].kind == IR_GLOBAL_GRAD && !touched[g]) {
            in->op = IR_OP_COPY; /* (dst global, x) either way: dst := x instead of dst += x */
            assigned[g] = true;
        }
        for (int a = 0; in->op != IR_OP_GLOBAL && a < in->nargs; a++) {
            int t = ir_global_of(f, in->args[a]);
            if (t >= 0)
                touched[t] = true;
        }
    }
    free(touched);
}

/* Which of the n parameters are offloaded (config optimizer_cpu_offload): the first whose elements
 * make optimizer_offload_fraction of them all, in declaration order (a parameter is offloaded while
 * the elements before it are below that share). */
static void choose_offloaded(const ir_module *m, const int *params, int n, bool *offloaded)
{
    bool on = ir_cfg_bool(m, IR_CFG_OPTIMIZER_CPU_OFFLOAD);
    double total = 0, before = 0, fraction = ir_cfg_num(m, IR_CFG_OPTIMIZER_OFFLOAD_FRACTION);
    for (int j = 0; j < n; j++)
        total += (double)ir_numel(&m->globals[params[j]].type);
    for (int j = 0; j < n; j++) {
        offloaded[j] = on && before < fraction * total;
        before += (double)ir_numel(&m->globals[params[j]].type);
    }
}

/* AdamW's attributes for parameter p: the config's betas and eps, and its weight decay (none where
 * p takes none) */
static void adamw_attrs(const ir_module *m, int p, double attrs[IR_NATTRS_ADAMW])
{
    attrs[IR_ATTR_ADAMW_BETA1] = ir_cfg_num(m, IR_CFG_ADAM_BETA1);
    attrs[IR_ATTR_ADAMW_BETA2] = ir_cfg_num(m, IR_CFG_ADAM_BETA2);
    attrs[IR_ATTR_ADAMW_EPS] = ir_cfg_num(m, IR_CFG_ADAM_EPS);
    attrs[IR_ATTR_ADAMW_WEIGHT_DECAY] = m->globals[p].no_decay ? 0 : ir_cfg_num(m, IR_CFG_WEIGHT_DECAY);
}

/* Whether parameter p trains at the decoupled lr (config decoupled_lr): Megatron's
 * is_embedding_or_output_parameter, the word embedding and the output layer, which are the
 * parameters whose rows are the vocabulary (placement vocab; a tied one both). */
static bool decoupled(const ir_module *m, int p)
{
    return ir_cfg_num(m, IR_CFG_DECOUPLED_LR) >= 0 && m->globals[p].placement == IR_PLACE_VOCAB;
}

/* Input @decoupled_lr of f, the learning rate of the decoupled parameters f updates (params[j]
 * with updated[j]), where there is one; else lr (the plan has one learning rate). */
static int decoupled_lr_input(ir_module *m, ir_func *f, const int *params, const bool *updated, int n, int lr)
{
    for (int j = 0; j < n; j++)
        if (updated[j] && decoupled(m, params[j]))
            return ir_input(m, f, ir_role_of(IR_ROLE_DECOUPLED_LR), "decoupled_lr", ir_scalar(IR_F32));
    return lr;
}

/* Companion `kind` of parameter p, made a host global. */
static int host_companion(ir_module *m, int p, ir_global_kind kind, const char *suffix, ir_type t, ir_layout layout)
{
    int g = companion(m, p, kind, suffix, t, layout);
    m->globals[g].host = true;
    return g;
}

/* host_optimizer (f): parameter p's update on the host. AdamW reads the gradient (or reduced
 * block) where the device holds it, a device global: the host executor streams it down in chunks
 * through its staging buffer, updating each chunk as it arrives (ir_host_staging_bytes), so that no
 * host copy of the whole gradient exists. It updates the host master (@p, or ZeRO's block) and
 * moments, and the master goes up into `up` (a device global of its shape: the working copy,
 * converted by the host, or ZeRO's gradient block), chunk by chunk with the update. inputs: f's
 * lr, step, clip coefficient and decoupled lr. */
static void host_update(ir_module *m, ir_func *f, int p, int master, int grad, int up, const int *inputs)
{
    const ir_global *mg = &m->globals[master];
    ir_type t = mg->type;
    ir_layout layout = mg->layout;
    int adam_m = host_companion(m, p, IR_GLOBAL_ADAM_M, "adam_m", moment_type(m, t, IR_CFG_EXP_AVG_DTYPE), layout);
    int adam_v = host_companion(m, p, IR_GLOBAL_ADAM_V, "adam_v", moment_type(m, t, IR_CFG_EXP_AVG_SQ_DTYPE), layout);
    int hm = ir_global_ref(m, f, master);
    int args[7] = {hm, ir_global_ref(m, f, grad), ir_global_ref(m, f, adam_m),
                   ir_global_ref(m, f, adam_v), decoupled(m, p) ? inputs[3] : inputs[0], inputs[1],
                   inputs[2]};
    double attrs[IR_NATTRS_ADAMW];
    adamw_attrs(m, p, attrs);
    ir_emit(m, f, IR_OP_ADAMW, args, 7, attrs, NULL, NULL);
    int upv[2] = {ir_global_ref(m, f, up), hm};
    ir_emit(m, f, IR_OP_COPY, upv, 2, NULL, NULL, NULL);
}

/* Zeroes the gradients of parameters params[j] with want[j] (the ones micro_step overwrites need
 * none: assigned), and with refresh, refreshes the working copies of those parameters from them
 * (not of those ZeRO shards: their blocks are gathered into them), in f. refs: f's references to the
 * gradients where it has them, else NULL. */
static void finish_params(ir_module *m, ir_func *f, const int *params, int n, const bool *want, const int *refs,
                          bool refresh)
{
    bool *assigned = calloc((size_t)m->nglobals + 1, sizeof(bool));
    assign_first_writes(m, assigned);
    int grads[n > 0 ? n : 1], nzero = 0;
    for (int j = 0; j < n; j++)
        if (want[j] && !assigned[ir_global_companion(m, params[j], IR_GLOBAL_GRAD)])
            grads[nzero++] = refs ? refs[j] : grad_ref(m, f, params[j], false);
    free(assigned);
    zero_all(m, f, grads, nzero);
    for (int c = 0; refresh && c < m->nglobals; c++) /* refresh the working copies from the updated masters */
        for (int j = 0; j < n; j++)
            if (want[j] && m->globals[c].kind == IR_GLOBAL_COPY && m->globals[c].owner == params[j] &&
                !pass_zero_param(m, params[j]) &&
                ir_param_remainder(m, params[j]) < 0) { /* a remainder's AdamW writes its copy itself */
                int args[2] = {ir_global_ref(m, f, c), ir_global_ref(m, f, params[j])};
                ir_emit(m, f, IR_OP_COPY, args, 2, NULL, NULL, NULL);
            }
}

/* A new function named name with references to the n parameters' gradients in grads (with blocks,
 * their ZeRO blocks where ZeRO shards them). */
static ir_func *grads_func(ir_module *m, const char *name, ir_func_kind kind, const int *params, int n, bool blocks,
                           int *grads)
{
    ir_func *f = ir_func_new(m, name, kind);
    for (int j = 0; j < n; j++)
        grads[j] = grad_ref(m, f, params[j], blocks && pass_zero_param(m, params[j]));
    return f;
}

/* Every FP8_HISTORY global's update in f: rolled (its step amax max-all-reduced over dp first; an
 * expert weight's history split over ep with its experts over edp, the ranks holding the same
 * experts), or with roll false its step amax reset alone. */
static void fp8_histories(ir_module *m, ir_func *f, bool roll)
{
    for (int g = 0; g < m->nglobals; g++) {
        if (m->globals[g].kind != IR_GLOBAL_FP8_HISTORY)
            continue;
        ir_axis replicas = ir_layout_split(&m->globals[g].layout, IR_AXIS_EP) ? IR_AXIS_EDP : IR_AXIS_DP;
        int h = ir_global_ref(m, f, g), args[2] = {h, h};
        double max_attrs[IR_NATTRS_ALL_REDUCE] = {[IR_ATTR_AXIS] = replicas, [IR_ATTR_ALL_REDUCE_MAX] = 1};
        double attr = roll;
        if (roll && ir_module_mesh(m).degree[replicas] > 1)
            args[1] = ir_emit(m, f, IR_OP_ALL_REDUCE, &h, 1, max_attrs, NULL, NULL);
        ir_emit(m, f, IR_OP_FP8_HISTORY_UPDATE, args, 2, &attr, NULL, NULL);
    }
}

/* Every EXPERT_BIAS global's update in f (Megatron's get_updated_expert_bias): the step's counts
 * sum-reduced over the bias's replicas, dp or dp x cp (each rank routed its own tokens to all the
 * experts, so ep ranks, carved from dp x cp, agree too), the bias moved by the config's rate; with
 * update false (zero_grads) the counts reset alone. */
static void expert_biases(ir_module *m, ir_func *f, bool update)
{
    double rate = update ? ir_cfg_num(m, IR_CFG_MOE_ROUTER_BIAS_UPDATE_RATE) : 0;
    for (int g = 0; g < m->nglobals; g++) {
        if (m->globals[g].kind != IR_GLOBAL_EXPERT_BIAS)
            continue;
        int h = ir_global_ref(m, f, g), args[2] = {h, h};
        ir_axis replicas = pass_replica_axis(m, g);
        if (update && ir_module_mesh(m).degree[replicas] > 1)
            args[1] = sum_over(m, f, args[1], replicas);
        ir_emit(m, f, IR_OP_MOE_BIAS_UPDATE, args, 2, &rate, NULL, NULL);
    }
}

bool pass_optimizer(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen)
{
    bool zero = pass_zero_on(m);
    ir_func *f = ir_func_new(m, "optimizer", IR_FUNC_OPTIMIZER);
    int lr = ir_input(m, f, ir_role_of(IR_ROLE_LR), "lr", ir_scalar(IR_F32));
    int step = ir_input(m, f, ir_role_of(IR_ROLE_STEP), "step", ir_scalar(IR_F32));

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
        bool sharded = pass_zero_param(m, i);
        if ((grads[k++] = grad_ref(m, f, i, sharded)) < 0)
            return snprintf(err, errlen, "parameter @%s has no %s (run autodiff%s first)", m->globals[i].name,
                            sharded ? "reduced gradient block" : "gradient", sharded ? " and data_parallel" : ""),
                   false;
    }
    int sumsq = emit_grad_norm(m, f, grads, nparams);
    double clip = ir_cfg_num(m, IR_CFG_CLIP_GRAD);
    int coef = ir_emit(m, f, IR_OP_CLIP_COEF, &sumsq, 1, &clip, NULL, NULL);

    bool offloaded[nparams], device[nparams], any_offloaded = false;
    choose_offloaded(m, params, nparams, offloaded);
    for (int j = 0; j < nparams; j++) {
        device[j] = !offloaded[j];
        any_offloaded |= offloaded[j];
    }
    ir_func *host = NULL, *sync = NULL;
    int host_inputs[4] = {0};
    if (any_offloaded) {
        ir_output(m, f, ir_role_of(IR_ROLE_CLIP_COEF), "clip_coef", coef);
        host = ir_func_new(m, "host_optimizer", IR_FUNC_HOST_OPTIMIZER);
        host_inputs[0] = ir_input(m, host, ir_role_of(IR_ROLE_LR), "lr", ir_scalar(IR_F32));
        host_inputs[1] = ir_input(m, host, ir_role_of(IR_ROLE_STEP), "step", ir_scalar(IR_F32));
        host_inputs[2] = ir_input(m, host, ir_role_of(IR_ROLE_CLIP_COEF), "clip_coef", ir_scalar(IR_F32));
        host_inputs[3] = decoupled_lr_input(m, host, params, offloaded, nparams, host_inputs[0]);
        sync = ir_func_new(m, "param_sync", IR_FUNC_PARAM_SYNC);
    }
    int dlr = decoupled_lr_input(m, f, params, device, nparams, lr);
    for (int j = 0; j < nparams; j++) {
        bool sharded = pass_zero_param(m, params[j]); /* ZeRO's blocks of it (zero: of any parameter) */
        if (zero && !sharded) /* its copy is filled from it, not gathered */
            fill_copy(m, params[j]);
        if (offloaded[j]) { /* the host's update (into the working copy, or ZeRO's block), then param_sync's */
            m->globals[params[j]].host = !sharded; /* under ZeRO the (host) block holds it */
            int copy = working_copy(m, params[j], !sharded);
            if (!sharded && m->globals[copy].type.dtype != IR_F32 && m->globals[copy].type.dtype != IR_BF16)
                return snprintf(err, errlen, "--optimizer-cpu-offload: the host converts the working copy @%s to bf16 "
                                "or f32 only, not %s (param_dtype: use --bf16, or offload under "
                                "--use-distributed-optimizer, whose device converts)", m->globals[copy].name,
                                ir_dtype_name(m->globals[copy].type.dtype)), false;
            int master = sharded ? master_shard(m, params[j], true) : params[j];
            m->globals[master].host = true;
            int grad = ir_global_companion(m, params[j], sharded ? IR_GLOBAL_GRAD_SHARD : IR_GLOBAL_GRAD);
            host_update(m, host, params[j], master, grad, sharded ? grad : copy, host_inputs);
            if (sharded)
                gather_param(m, sync, copy, ir_global_ref(m, sync, grad));
            continue;
        }
        int held = sharded ? master_shard(m, params[j], false) : params[j]; /* may grow m->globals: index it after */
        const ir_global *mg = &m->globals[held];
        ir_type t = mg->type;
        ir_layout layout = mg->layout;
        int remainder = ir_param_remainder(m, params[j]); /* the master is (copy, remainder): AdamW updates both */
        int master = ir_global_ref(m, f, remainder >= 0 ? remainder : held);
        int adam_m = companion(m, params[j], IR_GLOBAL_ADAM_M, "adam_m", moment_type(m, t, IR_CFG_EXP_AVG_DTYPE), layout);
        int adam_v = companion(m, params[j], IR_GLOBAL_ADAM_V, "adam_v", moment_type(m, t, IR_CFG_EXP_AVG_SQ_DTYPE), layout);
        int args[8] = {master, grads[j], ir_global_ref(m, f, adam_m),
                       ir_global_ref(m, f, adam_v), decoupled(m, params[j]) ? dlr : lr, step, coef,
                       remainder >= 0 ? ir_global_ref(m, f, working_copy(m, params[j], true)) : -1};
        double attrs[IR_NATTRS_ADAMW];
        adamw_attrs(m, params[j], attrs);
        ir_emit(m, f, IR_OP_ADAMW, args, remainder >= 0 ? 8 : 7, attrs, NULL, NULL);
        if (sharded) /* the blocks, gathered, are the working copy */
            gather_param(m, f, working_copy(m, params[j], false), master);
    }
    /* the accumulators (ZeRO: not the blocks) restart from 0; offloaded ones after their copy down;
     * the working copies from the updated masters (ZeRO's: gathered above) */
    finish_params(m, f, params, nparams, device, zero ? NULL : grads, true);
    if (sync)
        finish_params(m, sync, params, nparams, offloaded, NULL, false);
    fp8_histories(m, f, true);
    expert_biases(m, f, true);
    emit_grad_norm(m, grads_func(m, "grad_norm", IR_FUNC_GRAD_NORM, params, nparams, true, grads), grads, nparams);
    ir_func *zero_grads = grads_func(m, "zero_grads", IR_FUNC_ZERO_GRADS, params, nparams, false, grads);
    zero_all(m, zero_grads, grads, nparams);
    fp8_histories(m, zero_grads, false);
    expert_biases(m, zero_grads, false);
    return true;
}
