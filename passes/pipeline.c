/* pipeline.c — the pass driver: the list of passes in order, and running a prefix of it. */
#include "passes.h"

#include <stdio.h>
#include <string.h>

const pass_info mcc_passes[] = {
    {"precision", pass_precision, "bf16 working copies of the fp32 parameters (param_dtype = bf16)"},
    {"autodiff", pass_autodiff, "reverse-mode gradients of the loss, accumulated into @<param>.grad"},
    {"recompute", pass_recompute, "selective recompute: the backward recomputes norm and activation outputs"},
    {"shard", pass_shard, "tensor parallelism: this rank's local graph with its tp collectives"},
    {"data_parallel", pass_data_parallel, "data parallelism: `reduce_grads` sums gradients over dp ranks"},
    {"optimizer", pass_optimizer, "the `optimizer` function: global grad norm, clipping, AdamW, zeroing"},
    {"schedule", pass_schedule, "the schedule programs: train (the step on each micro-batch, reduce, optimizer), eval"},
    {"fusion", pass_fusion, "fused kernels: a matmul and its bias add become matmul_bias"},
    {"comm_overlap", pass_comm_overlap, "sequence-parallel collectives beside work that does not need them (two chains with --tp-comm-interleave)"},
    {"memory_plan", pass_memory_plan, "arena offsets for every activation by liveness"},
};
const int mcc_npasses = sizeof mcc_passes / sizeof mcc_passes[0];

int mcc_pass_index(const char *name)
{
    for (int i = 0; i < mcc_npasses; i++)
        if (strcmp(mcc_passes[i].name, name) == 0)
            return i;
    return -1;
}

/* Runs pass i with the options, then (when `verify`) the verifier and the plan's own check on
 * its output. */
static bool run_pass(ir_module *m, const mcc_pass_options *opts, int i, bool verify, char *err, size_t errlen)
{
    char why[1024];
    if (!mcc_passes[i].run(m, opts, why, sizeof why)) {
        snprintf(err, errlen, "pass %s: %s", mcc_passes[i].name, why);
        return false;
    }
    if (verify && (!ir_verify(m, why, sizeof why) || !pass_check_gradients(m, why, sizeof why))) {
        snprintf(err, errlen, "internal error: IR fails verification after pass %s: %s", mcc_passes[i].name, why);
        return false;
    }
    return true;
}

bool mcc_run_passes(ir_module *m, const mcc_pass_options *opts, const char *last, bool verify, char *err,
                    size_t errlen)
{
    int stop = last ? mcc_pass_index(last) : mcc_npasses - 1;
    char why[1024];
    if (verify && !ir_verify(m, why, sizeof why)) {
        snprintf(err, errlen, "internal error: the frontend's graph fails verification: %s", why);
        return false;
    }
    for (int i = 0; i <= stop; i++)
        if (!run_pass(m, opts, i, verify, err, errlen))
            return false;
    return true;
}

bool mcc_run_pass(ir_module *m, const mcc_pass_options *opts, const char *name, char *err, size_t errlen)
{
    int i = mcc_pass_index(name);
    char why[1024];
    if (i < 0) {
        snprintf(err, errlen, "--pass %s: no such pass (mcc ir --list-passes names them)", name);
        return false;
    }
    /* a hand-trimmed input that does not verify would otherwise be blamed on the pass */
    if (!ir_verify(m, why, sizeof why)) {
        snprintf(err, errlen, "the input fails verification (before pass %s): %s", name, why);
        return false;
    }
    return run_pass(m, opts, i, true, err, errlen);
}
