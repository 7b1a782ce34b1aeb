/* data_parallel.c — data parallelism over the mesh axis dp (config data_parallel_size > 1):
 * every rank runs the same micro_step on its own micro-batches, and a `reduce_grads` function,
 * scheduled between the micro-batches and the optimizer, sums the gradient accumulators over the
 * dp ranks, a bucket of them per collective. (autodiff scales the loss by 1/(accum_steps * dp), so the sum is the global mean.)
 * With the distributed optimizer (ZeRO-1, see optimizer.c) each rank only updates its 1/dp block
 * of every parameter, so it needs only that block of the sum: reduce_scatter into @<p>.grad_shard. */
#include "passes.h"

#include <stdio.h>
#include <stdlib.h>

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
    double axis = IR_AXIS_DP;
    int *refs = malloc(sizeof(int) * (size_t)(m->nglobals + 1)), n = 0;
    for (int g = 0; g < m->nglobals; g++) {
        if (m->globals[g].kind != IR_GLOBAL_GRAD)
            continue;
        refs[n++] = ir_global_ref(m, f, m->globals[g].name);
        filled += (long long)ir_numel(&m->globals[g].type);
        if (filled >= bucket) {
            ir_emit(m, f, IR_OP_ALL_REDUCE_INPLACE, refs, n, &axis, NULL, NULL);
            n = 0, filled = 0;
        }
    }
    if (n)
        ir_emit(m, f, IR_OP_ALL_REDUCE_INPLACE, refs, n, &axis, NULL, NULL);
    free(refs);
}

bool pass_data_parallel(ir_module *m, char *err, size_t errlen)
{
    if (ir_config_int(m, "data_parallel_size", 1) <= 1)
        return true;
    if (ir_func_index(m, "reduce_grads") >= 0)
        return snprintf(err, errlen, "the module already has a reduce_grads function"), false;
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
