/* data_parallel.c — data parallelism over the mesh axis dp (config data_parallel_size > 1):
 * every rank runs the same micro_step on its own micro-batches, and a `reduce_grads` function,
 * scheduled between the micro-batches and the optimizer, sums the gradient accumulators over the
 * dp ranks, a bucket of them per collective (or, with overlap_grad_reduce, micro_step does so
 * inside the backward). (autodiff scales the loss by 1/(accum_steps * dp), so the sum is the global mean.)
 * With the distributed optimizer (ZeRO-1, see optimizer.c) each rank only updates its 1/dp block
 * of every parameter, so it needs only that block of the sum: reduce_scatter into @<p>.grad_shard. */
#include "passes.h"

#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* @<p>.grad_shard := this rank's block of the sum of @<p>.grad over dp; grad is a GRAD global. */
static bool reduce_scatter_grad(ir_module *m, ir_func *f, int grad, char *err, size_t errlen)
{
    ir_global g = m->globals[grad]; /* ir_global_add below may move m->globals */
    long long dp = ir_config_int(m, "data_parallel_size", 1), numel = (long long)ir_numel(&g.type);
    if (numel % dp)
        return snprintf(err, errlen, "--use-distributed-optimizer splits every parameter into data_parallel_size = %lld "
                        "equal blocks, but @%s has %lld elements: choose a data_parallel_size that divides it or "
                        "drop --use-distributed-optimizer", dp, g.name, numel), false;
    double axis = IR_AXIS_DP;
    int whole = ir_global_ref(m, f, g.name);
    int block = ir_emit(m, f, IR_OP_REDUCE_SCATTER, &whole, 1, &axis, NULL, NULL); /* f32[numel/dp] {shard=[dp]} */
    char name[256];
    snprintf(name, sizeof name, "%s_shard", g.name);
    ir_global_add(m, name, *ir_vtype(f, block), IR_GLOBAL_GRAD, IR_INIT_ZEROS, 0, false);
    int args[2] = {ir_global_ref(m, f, name), block};
    ir_emit(m, f, IR_OP_COPY, args, 2, NULL, NULL, NULL);
    return true;
}

/* Gradients, in declaration order, in buckets of at least ddp_bucket_size elements (Megatron's
 * --ddp-bucket-size; default 40M): one all_reduce_inplace per bucket, which the runtime issues as
 * one collective (the globals of a bucket lie back to back: runtime/program.c). */
static void all_reduce_buckets(ir_module *m, ir_func *f)
{
    long long bucket = ir_config_int(m, "ddp_bucket_size", 40000000), filled = 0;
    double attrs[2] = {IR_AXIS_DP, 0}; /* after the backward: nothing to overlap */
    int *refs = malloc(sizeof(int) * (size_t)(m->nglobals + 1)), n = 0;
    for (int g = 0; g < m->nglobals; g++) {
        if (m->globals[g].kind != IR_GLOBAL_GRAD)
            continue;
        refs[n++] = ir_global_ref(m, f, m->globals[g].name);
        filled += (long long)ir_numel(&m->globals[g].type);
        if (filled >= bucket) {
            ir_emit(m, f, IR_OP_ALL_REDUCE_INPLACE, refs, n, attrs, NULL, NULL);
            n = 0, filled = 0;
        }
    }
    if (n)
        ir_emit(m, f, IR_OP_ALL_REDUCE_INPLACE, refs, n, attrs, NULL, NULL);
    free(refs);
}

/* Gradient global g's position in the order micro_step finishes them: the index of its last
 * accumulate there (INT_MAX when micro_step never writes it). */
static int *final_writes(ir_module *m, const ir_func *f)
{
    int *last = malloc(sizeof(int) * (size_t)(m->nglobals + 1));
    for (int g = 0; g < m->nglobals; g++)
        last[g] = INT_MAX;
    for (int i = 0; i < f->ninstrs; i++) {
        const ir_instr *in = &f->instrs[i], *def = in->nargs ? &f->instrs[f->vals[in->args[0]].def] : NULL;
        int g = in->op == IR_OP_ACCUMULATE && def->op == IR_OP_GLOBAL ? ir_global_find(m, def->sym) : -1;
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
static int by_index(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* --overlap-grad-reduce (one micro-batch per step): no reduce_grads; micro_step all-reduces each
 * bucket right after the backward finishes its last gradient, so on the GPU (where collectives
 * run on their own stream) the reduction overlaps the rest of the backward. Buckets fill in the
 * order the gradients become final (the last layer's first); a bucket lists its gradients in
 * declaration order, in which they lie back to back in memory. */
static void overlap_buckets(ir_module *m)
{
    int fi = ir_func_index(m, "micro_step");
    const ir_func *src = m->funcs[fi];
    int *last = final_writes(m, src), *grads = malloc(sizeof(int) * (size_t)(m->nglobals + 1)), n = 0;
    for (int g = 0; g < m->nglobals; g++)
        if (m->globals[g].kind == IR_GLOBAL_GRAD)
            grads[n++] = g;
    sort_key = last;
    qsort(grads, (size_t)n, sizeof(int), by_key);
    ir_func *dst = ir_func_new(m, "micro_step");
    int *map = malloc(sizeof(int) * ((size_t)src->nvals + 1)), next = 0;
    long long bucket = ir_config_int(m, "ddp_bucket_size", 40000000);
    double attrs[2] = {IR_AXIS_DP, 1}; /* overlap: the rest of the backward goes on */
    for (int i = 0; i <= src->ninstrs; i++) {
        if (i < src->ninstrs)
            ir_copy_instr(m, dst, src, &src->instrs[i], map);
        /* every bucket that is full, or holds the last gradients, and is final after instruction i */
        while (next < n && (last[grads[next]] <= i || i == src->ninstrs)) {
            int first = next;
            long long filled = 0;
            while (next < n && (last[grads[next]] <= i || i == src->ninstrs) && filled < bucket)
                filled += (long long)ir_numel(&m->globals[grads[next++]].type);
            if (filled < bucket && next < n && i < src->ninstrs) { /* not full: wait for more gradients */
                next = first;
                break;
            }
            int members[next - first], refs[next - first];
            memcpy(members, &grads[first], sizeof members);
            qsort(members, (size_t)(next - first), sizeof(int), by_index);
            for (int k = 0; k < next - first; k++)
                refs[k] = ir_global_ref(m, dst, m->globals[members[k]].name);
            ir_emit(m, dst, IR_OP_ALL_REDUCE_INPLACE, refs, next - first, attrs, NULL, NULL);
        }
    }
    ir_func_replace(m, fi, dst);
    free(last);
    free(grads);
    free(map);
}

bool pass_data_parallel(ir_module *m, char *err, size_t errlen)
{
    if (ir_config_int(m, "data_parallel_size", 1) <= 1)
        return true;
    if (ir_func_index(m, "reduce_grads") >= 0)
        return snprintf(err, errlen, "the module already has a reduce_grads function"), false;
    if (ir_config_int(m, "overlap_grad_reduce", 0)) {
        if (ir_config_int(m, "accum_steps", 1) == 1 && !pass_zero_on(m) && ir_func_index(m, "micro_step") >= 0) {
            overlap_buckets(m);
            return true;
        }
        fprintf(stderr, "mcc: note: --overlap-grad-reduce needs one micro-batch per step (global batch = micro-batch "
                        "x dp) and no --use-distributed-optimizer; this plan all-reduces after the backward\n");
    }
    ir_func *f = ir_func_new(m, "reduce_grads");
    bool zero = pass_zero_on(m);
    int nglobals = m->nglobals; /* the shards appended below are not reduced again */
    for (int g = 0; g < nglobals; g++)
        if (zero && m->globals[g].kind == IR_GLOBAL_GRAD && !reduce_scatter_grad(m, f, g, err, errlen))
            return false;
    if (!zero)
        all_reduce_buckets(m, f);
    return true;
}
