/* data_parallel.c — gradients summed over the ranks holding parts of them. Under sequence
 * parallelism a replicated parameter's gradient is a partial sum over tp (shard.c marks the
 * global): `reduce_grads` first all-reduces those over tp, in one bucket. Then data parallelism
 * over the replicas' mesh axis (pass_replica_axis): dp (config data_parallel_size > 1), or under
 * context parallelism dp_cp, the dp x cp ranks (Megatron's data_parallel_group_with_cp: each cp
 * rank's gradient is a sum over its own tokens, so one collective over dp x cp sums the whole
 * sequence's and every replica's): every rank runs the same micro_step on its own micro-batches
 * (or tokens), and a `reduce_grads` function, scheduled between the micro-batches and the
 * optimizer, sums the gradient accumulators over that axis, a bucket of them per collective (or,
 * with overlap_grad_reduce, micro_step does so inside the backward). (autodiff scales the loss by
 * 1/(accum_steps * dp * cp), so the sum is the global mean.)
 * Under expert parallelism the expert weights' gradients are summed over edp instead (the ranks
 * holding the same experts; expert_parallel.c).
 * With the distributed optimizer (ZeRO-1, see optimizer.c) each rank only updates its block of
 * every parameter it shards (1/dp, 1/(dp cp) under cp, an expert weight's 1/edp: pass_replica_axis,
 * pass_zero_param), so it needs only that block of the sum: reduce_scatter over that axis into
 * @<p>.grad_shard. The gradients are in pass_grad_dtype (bf16 under grad_reduce_in_bf16), and so
 * are their collectives and blocks. */
#include "passes.h"

#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* @<p>.grad_shard := this rank's block of the sum of @<p>.grad over its replicas' axis
 * (pass_replica_axis: dp or dp_cp, or edp for an expert weight); grad is a GRAD global. The block is a
 * GRAD_SHARD companion of <p>, laid out as the gradient, then <axis>:flat. */
static bool reduce_scatter_grad(ir_module *m, ir_func *f, int grad, char *err, size_t errlen)
{
    ir_global g = m->globals[grad]; /* ir_global_add below may move m->globals */
    ir_axis over = pass_replica_axis(m, grad);
    long long n = ir_module_mesh(m).degree[over], numel = (long long)ir_numel(&g.type);
    if (numel % n)
        return snprintf(err, errlen, "--use-distributed-optimizer splits every parameter into %s = %lld equal blocks, "
                        "but @%s has %lld elements here: choose a --data-parallel-size%s that divides it or drop "
                        "--use-distributed-optimizer", over == IR_AXIS_EDP ? "data_parallel_size x cp / ep (edp)"
                        : over == IR_AXIS_DP_CP ? "data_parallel_size x context_parallel_size (dp_cp)"
                        : "data_parallel_size", n, g.name, numel,
                        over == IR_AXIS_EDP ? " (or --expert-model-parallel-size)"
                        : over == IR_AXIS_DP_CP ? " (or --context-parallel-size)" : ""), false;
    double axis = over;
    int whole = ir_global_ref(m, f, grad);
    int block = ir_emit(m, f, IR_OP_REDUCE_SCATTER, &whole, 1, &axis, NULL, NULL); /* f32[numel/n] {shard=[axis]} */
    char name[256];
    snprintf(name, sizeof name, "%s_shard", g.name);
    int shard = ir_global_add_companion(m, name, *ir_vtype(f, block), IR_GLOBAL_GRAD_SHARD, g.owner);
    ir_layout_add(&m->globals[shard].layout, over, IR_SPLIT_FLAT, 0); /* after the gradient's own splits */
    int args[2] = {ir_global_ref(m, f, shard), block};
    ir_emit(m, f, IR_OP_COPY, args, 2, NULL, NULL, NULL);
    return true;
}

/* Splits grads[n] (gradient globals, in the order they are to be reduced) into buckets of at least
 * ddp_bucket_size elements (Megatron's --ddp-bucket-size; default 40M), the last one whatever is
 * left: bucket b is grads[end[b-1], end[b]). Returns the number of buckets. last_alone (grads in
 * the order the backward finishes them): the last gradient is a bucket of its own. Nothing after
 * it in the backward hides its reduction, so the gradients before it are reduced at once, beside
 * the work that finishes it (the embedding's gradient, made after the last GEMM), instead of
 * waiting to go with it. */
static int fill_buckets(ir_module *m, const int *grads, int n, bool last_alone, int *end)
{
    long long bucket = ir_cfg_int(m, IR_CFG_DDP_BUCKET_SIZE), filled = 0;
    int nb = 0;
    for (int k = 0; k < n; k++) {
        filled += (long long)ir_numel(&m->globals[grads[k]].type);
        if (filled >= bucket || k == n - 1 || (last_alone && k == n - 2))
            end[nb++] = k + 1, filled = 0;
    }
    return nb;
}

static int bucket_first(const int *end, int b) { return b ? end[b - 1] : 0; }

static int by_index(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* One all_reduce_inplace of gradient globals grads[n] in f, listed in declaration order, in which
 * they lie back to back in memory (runtime/program.c), so the runtime reduces them with one
 * collective. overlap: the computation after it need not wait for it. */
static void emit_bucket(ir_module *m, ir_func *f, const int *grads, int n, ir_axis axis, bool overlap)
{
    int members[n], refs[n];
    memcpy(members, grads, sizeof members);
    qsort(members, (size_t)n, sizeof(int), by_index);
    for (int k = 0; k < n; k++)
        refs[k] = ir_global_ref(m, f, members[k]);
    double attrs[IR_NATTRS_ALL_REDUCE_INPLACE] = {[IR_ATTR_AXIS] = axis,
                                                  [IR_ATTR_ALL_REDUCE_INPLACE_OVERLAP] = overlap};
    ir_emit(m, f, IR_OP_ALL_REDUCE_INPLACE, refs, n, attrs, NULL, NULL);
}

/* The gradient globals of m, in declaration order; *n their count. */
static int *gradient_globals(const ir_module *m, int *n)
{
    int *grads = malloc(sizeof(int) * (size_t)(m->nglobals + 1));
    *n = 0;
    for (int g = 0; g < m->nglobals; g++)
        if (m->globals[g].kind == IR_GLOBAL_GRAD)
            grads[(*n)++] = g;
    return grads;
}

/* reduce_grads: every bucket of the gradients ZeRO does not shard, after the backward: the dense
 * gradients' over dp (dp_cp under cp), then the experts' over edp (none when ep = dp cp). */
static void all_reduce_buckets(ir_module *m, ir_func *f)
{
    int n, *all = gradient_globals(m, &n), *grads = malloc(sizeof(int) * (size_t)(n + 1)),
           *end = malloc(sizeof(int) * (size_t)(n + 1));
    const ir_axis axes[2] = {pass_dense_replica_axis(m), IR_AXIS_EDP};
    for (int a = 0; a < 2; a++) {
        int k = 0;
        for (int i = 0; i < n; i++)
            if (pass_replica_axis(m, all[i]) == axes[a] && !pass_zero_param(m, all[i]))
                grads[k++] = all[i];
        if (!k || ir_module_mesh(m).degree[axes[a]] <= 1)
            continue;
        for (int b = 0, nb = fill_buckets(m, grads, k, false, end); b < nb; b++)
            emit_bucket(m, f, grads + bucket_first(end, b), end[b] - bucket_first(end, b), axes[a], false);
    }
    free(all);
    free(grads);
    free(end);
}

/* Gradient global g's position in the order micro_step finishes them: the index of its last
 * accumulate there (INT_MAX when micro_step never writes it). */
static int *final_writes(ir_module *m, const ir_func *f)
{
    int *last = malloc(sizeof(int) * (size_t)(m->nglobals + 1));
    for (int g = 0; g < m->nglobals; g++)
        last[g] = INT_MAX;
    for (int i = 0; i < f->ninstrs; i++) {
        const ir_instr *in = &f->instrs[i];
        int g = in->op == IR_OP_ACCUMULATE ? ir_global_of(f, in->args[0]) : -1;
        if (g >= 0)
            last[g] = i;
    }
    return last;
}

static const int *sort_key;
static int by_key(const void *a, const void *b)
{
    int x = sort_key[*(const int *)a], y = sort_key[*(const int *)b];
    return x < y ? -1 : x > y;
}

/* --overlap-grad-reduce (one micro-batch per step): no reduce_grads; micro_step all-reduces each
 * bucket right after the backward finishes its last gradient, so on the GPU (where these
 * collectives run on their own stream) the reduction overlaps the rest of the backward. Buckets
 * fill in the order the gradients become final (the last layer's first), the dense gradients'
 * (over dp, dp_cp under cp) and the experts' (over edp, none at edp 1) apart: a bucket is one
 * collective over one group. */
static void overlap_buckets(ir_module *m)
{
    int fi = ir_func_of_kind(m, IR_FUNC_STEP);
    const ir_func *src = m->funcs[fi];
    int n, *all = gradient_globals(m, &n), *last = final_writes(m, src);
    sort_key = last;
    qsort(all, (size_t)n, sizeof(int), by_key);
    enum { NAXES = 2 };
    const ir_axis axes[NAXES] = {pass_dense_replica_axis(m), IR_AXIS_EDP};
    int *grads[NAXES], *end[NAXES], ng[NAXES] = {0}, nb[NAXES] = {0}, b[NAXES] = {0};
    for (int a = 0; a < NAXES; a++) {
        grads[a] = malloc(sizeof(int) * (size_t)(n + 1));
        end[a] = malloc(sizeof(int) * (size_t)(n + 1));
        for (int k = 0; k < n; k++)
            if (pass_replica_axis(m, all[k]) == axes[a])
                grads[a][ng[a]++] = all[k];
        if (ng[a] && ir_module_mesh(m).degree[axes[a]] > 1)
            nb[a] = fill_buckets(m, grads[a], ng[a], a == 0, end[a]);
    }
    ir_func *dst = ir_func_new(m, src->name, src->kind);
    int *map = malloc(sizeof(int) * ((size_t)src->nvals + 1));
    for (int i = 0; i <= src->ninstrs; i++) { /* i = ninstrs: gradients micro_step never writes */
        if (i < src->ninstrs)
            ir_copy_instr(m, dst, src, &src->instrs[i], map);
        for (int a = 0; a < NAXES; a++)
            for (; b[a] < nb[a] && (i == src->ninstrs || last[grads[a][end[a][b[a]] - 1]] <= i); b[a]++)
                emit_bucket(m, dst, grads[a] + bucket_first(end[a], b[a]), end[a][b[a]] - bucket_first(end[a], b[a]),
                            axes[a], true);
    }
    ir_func_replace(m, fi, dst);
    for (int a = 0; a < NAXES; a++) {
        free(grads[a]);
        free(end[a]);
    }
    free(last);
    free(all);
    free(map);
}

/* The gradient globals the shard pass left partial over tp (replicated parameters under sequence
 * parallelism), in declaration order; *n their count. */
static int *tp_partial_grads(const ir_module *m, int *n)
{
    int *grads = malloc(sizeof(int) * (size_t)(m->nglobals + 1));
    *n = 0;
    for (int g = 0; g < m->nglobals; g++)
        if (m->globals[g].kind == IR_GLOBAL_GRAD && (m->globals[g].type.partial & (1u << IR_AXIS_TP)))
            grads[(*n)++] = g;
    return grads;
}

static bool overlap_note_said; /* the note below, said once a process */

bool pass_data_parallel(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen)
{
    ir_mesh mesh = ir_module_mesh(m);
    int ntp, *tp_grads = tp_partial_grads(m, &ntp);
    bool dp = mesh.degree[pass_dense_replica_axis(m)] > 1 ||
              (ir_cfg_int(m, IR_CFG_EXPERT_MODEL_PARALLEL_SIZE) > 1 && mesh.degree[IR_AXIS_EDP] > 1),
         dp_done = !dp;
    if (dp_done && !ntp) {
        free(tp_grads);
        return true;
    }
    if (ir_func_of_kind(m, IR_FUNC_REDUCE) >= 0) {
        free(tp_grads);
        return snprintf(err, errlen, "the module already has a reduce function (kind=reduce)"), false;
    }
    if (dp && ir_cfg_bool(m, IR_CFG_OVERLAP_GRAD_REDUCE)) {
        if (ir_cfg_int(m, IR_CFG_ACCUM_STEPS) == 1 && !pass_zero_on(m) && ir_func_of_kind(m, IR_FUNC_STEP) >= 0) {
            overlap_buckets(m);
            dp_done = true;
        } else if (!overlap_note_said) {
            overlap_note_said = true; /* once: every stage's module and every schedule tried would say it */
            fprintf(stderr, "mcc: note: --overlap-grad-reduce needs one micro-batch per step (global batch = "
                            "micro-batch x dp), no --use-distributed-optimizer and no pipeline; this plan "
                            "all-reduces after the backward\n");
        }
    }
    if (dp_done && !ntp) {
        free(tp_grads);
        return true;
    }
    ir_func *f = ir_func_new(m, "reduce_grads", IR_FUNC_REDUCE);
    if (ntp) { /* first: the dp reduce-scatter below (ZeRO) takes the complete sums' blocks */
        emit_bucket(m, f, tp_grads, ntp, IR_AXIS_TP, false);
        for (int k = 0; k < ntp; k++)
            m->globals[tp_grads[k]].type.partial &= (uint8_t)~(1u << IR_AXIS_TP);
    }
    free(tp_grads);
    if (dp_done)
        return true;
    int nglobals = m->nglobals; /* the shards appended below are not reduced again */
    for (int g = 0; g < nglobals; g++)
        if (m->globals[g].kind == IR_GLOBAL_GRAD && pass_zero_param(m, g) && !reduce_scatter_grad(m, f, g, err, errlen))
            return false;
    all_reduce_buckets(m, f);
    return true;
}
