/* driver.c — the pass driver: the list of passes in order, and running a prefix of it over the
 * program (one module, or one per pipeline stage once the pipeline pass has cut it). */
#include "passes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const pass_info mcc_passes[] = {
    {"precision", pass_precision, "bf16 working copies of the fp32 parameters (param_dtype = bf16)", NULL},
    {"fp8", pass_fp8, "FP8 linear layers: their matmuls on E4M3 operands, differentiated into FP8 GEMMs", NULL},
    {"expert_parallel", pass_expert_parallel, "expert parallelism: experts placed over ep, then the shard propagation over ep (rows dispatched and combined by all-to-all)", NULL},
    {"autodiff", pass_autodiff, "reverse-mode gradients of the loss, accumulated into @<param>.grad", NULL},
    {"recompute", pass_recompute, "activation recompute: full (layers replay their forward) or selective (single ops)", NULL},
    {"context_parallel", pass_context_parallel, "context parallelism: tokens placed over cp in balanced chunks, then the shard propagation over cp (attention by cp_comm_type)", NULL},
    {"shard", pass_shard, "tensor parallelism: this rank's local graph with its tp collectives", NULL},
    {"pipeline", NULL, "pipeline parallelism: one module a stage, each with its forward, backward and stash", pass_pipeline},
    {"data_parallel", pass_data_parallel, "data parallelism: `reduce_grads` sums gradients over dp ranks", NULL},
    {"optimizer", pass_optimizer, "the `optimizer` function: global grad norm, clipping, AdamW, zeroing", NULL},
    {"schedule", pass_schedule, "the schedule programs: train (the step on each micro-batch, reduce, optimizer), eval", NULL},
    {"fusion", pass_fusion, "fused kernels: a matmul and its bias add become matmul_bias", NULL},
    {"loss_chunks", pass_loss_chunks, "the output head and its cross entropy over chunks of the tokens (cross_entropy_chunks)", NULL},
    {"row_bounds", pass_row_bounds, "the elementwise ops over expert parallelism's receive buffers bounded by the rows received", NULL},
    {"comm_overlap", pass_comm_overlap, "sequence-parallel collectives beside work that does not need them (two chains with --tp-comm-interleave)", NULL},
    {"grad_ready", pass_grad_ready, "--optimizer-cpu-offload --clip-grad 0: each offloaded gradient's ready mark in the step, the host's updates in that order", NULL},
    {"memory_plan", pass_memory_plan, "arena offsets for every activation by liveness", NULL},
};
const int mcc_npasses = sizeof mcc_passes / sizeof mcc_passes[0];

int mcc_pass_index(const char *name)
{
    for (int i = 0; i < mcc_npasses; i++)
        if (strcmp(mcc_passes[i].name, name) == 0)
            return i;
    return -1;
}

mcc_program mcc_program_of(ir_module *m)
{
    mcc_program p = {malloc(sizeof(ir_module *)), 1};
    p.stage[0] = m;
    return p;
}

void mcc_program_free(mcc_program *p)
{
    for (int s = 0; s < p->n; s++)
        ir_module_free(p->stage[s]);
    free(p->stage);
    *p = (mcc_program){0};
}

static bool verify_module(const ir_module *m, int stage, int n, bool plan, const char *when, char *err, size_t errlen)
{
    char why[1024], where[48] = "";
    if (n > 1)
        snprintf(where, sizeof where, " (pipeline stage %d)", stage);
    if (!ir_verify(m, why, sizeof why) || (plan && !pass_check_gradients(m, why, sizeof why))) {
        snprintf(err, errlen, "%s%s: %s", when, where, why);
        return false;
    }
    return true;
}

/* Runs pass i with the options on every stage (a cutting pass: on the one module, replacing it),
 * then (when `verify`) the verifier and the plan's own check on its output. */
static bool run_pass(mcc_program *prog, const mcc_pass_options *opts, int i, bool verify, char *err, size_t errlen)
{
    char why[1024];
    const pass_info *pi = &mcc_passes[i];
    if (pi->cut) {
        ir_module **out;
        int n;
        if (prog->n != 1)
            return snprintf(err, errlen, "pass %s: the program is cut into stages already", pi->name), false;
        if (!pi->cut(prog->stage[0], opts, &out, &n, why, sizeof why))
            return snprintf(err, errlen, "pass %s: %s", pi->name, why), false;
        if (out) {
            ir_module_free(prog->stage[0]);
            free(prog->stage);
            prog->stage = out;
            prog->n = n;
        }
    } else {
        for (int s = 0; s < prog->n; s++)
            if (!pi->run(prog->stage[s], opts, why, sizeof why)) {
                if (prog->n > 1)
                    snprintf(err, errlen, "pass %s (pipeline stage %d): %s", pi->name, s, why);
                else
                    snprintf(err, errlen, "pass %s: %s", pi->name, why);
                return false;
            }
    }
    char when[128];
    snprintf(when, sizeof when, "internal error: IR fails verification after pass %s", pi->name);
    for (int s = 0; verify && s < prog->n; s++)
        if (!verify_module(prog->stage[s], s, prog->n, true, when, err, errlen))
            return false;
    return true;
}

bool mcc_run_passes(mcc_program *prog, const mcc_pass_options *opts, const char *last, bool verify, char *err,
                    size_t errlen)
{
    int stop = last ? mcc_pass_index(last) : mcc_npasses - 1;
    for (int s = 0; verify && s < prog->n; s++)
        if (!verify_module(prog->stage[s], s, prog->n, false, "internal error: the frontend's graph fails verification",
                           err, errlen))
            return false;
    for (int s = 0; s < prog->n; s++)
        if (!pass_target_check(prog->stage[s], opts, err, errlen))
            return false;
    for (int i = 0; i <= stop; i++)
        if (!run_pass(prog, opts, i, verify, err, errlen))
            return false;
    return true;
}

bool mcc_run_pass(mcc_program *prog, const mcc_pass_options *opts, const char *name, char *err, size_t errlen)
{
    int i = mcc_pass_index(name);
    if (i < 0) {
        snprintf(err, errlen, "--pass %s: no such pass (mcc ir --list-passes names them)", name);
        return false;
    }
    char when[128];
    /* a hand-trimmed input that does not verify would otherwise be blamed on the pass */
    snprintf(when, sizeof when, "the input fails verification (before pass %s)", name);
    for (int s = 0; s < prog->n; s++)
        if (!verify_module(prog->stage[s], s, prog->n, false, when, err, errlen) ||
            !pass_target_check(prog->stage[s], opts, err, errlen))
            return false;
    return run_pass(prog, opts, i, true, err, errlen);
}
