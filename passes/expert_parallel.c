/* expert_parallel.c — expert parallelism (config expert_model_parallel_size = ep > 1): each MoE
 * layer's E experts are split over the ep ranks, E/ep a rank, its expert weights [E, ...] along
 * dimension 0 (layout [ep:dim0]), in every function that reads them. The pass is the placements
 * (the grouped GEMMs' weights and their working copies, found by use, not by name), then the shard
 * pass's propagation over ep with the experts split (pass_shard_axis, pass_axis_split's
 * `experts`), whose rules (passes/shard.c) make Megatron's all-to-all token dispatcher in the step
 * and eval functions: after the sort by expert and the permute the routed rows go to their
 * expert's rank by all_to_all_v, are put expert by expert for the grouped GEMMs (moe_sort_runs),
 * and come back before the combine (moe_unsort_runs, all_to_all_v). It runs before autodiff, whose
 * rules give the backward the transposed all-to-alls. The expert weights' gradients are then whole
 * on their rank for the tokens of all ep ranks; data_parallel sums them over the expert
 * data-parallel group (edp = dp cp / ep: Megatron carves ep from dp x cp; under context
 * parallelism the rank's rows are its tokens' and the shard rule over cp scales the all-to-alls'
 * room by 1/cp) and the dense ones over cp and dp (with the distributed optimizer,
 * reduce-scattered into edp blocks, and with --overlap-grad-reduce in buckets of their own), and
 * the gradient norm sums the experts' squares over ep. */
#include "passes.h"

#include <stdio.h>
#include <stdlib.h>

/* The global an FP8 experts' operand q quantizes from (fp8_grouped_quantize's source, or blockwise
 * fp8_block_quantize's), or -1 */
static int fp8_source_global(const ir_func *f, int q)
{
    const ir_instr *def = &f->instrs[f->vals[q].def];
    bool quantize = def->op == IR_OP_FP8_GROUPED_QUANTIZE || def->op == IR_OP_FP8_BLOCK_QUANTIZE;
    return quantize ? ir_global_of(f, def->args[0]) : -1;
}

/* Marks the FP8 delayed-scaling histories of the experts' GEMM `in` (fp8_grouped_matmul: its rows',
 * its weight's and, as its last operand, its output gradient's, each f32[E, 1 + len], a row an
 * expert), which split with the experts */
static void mark_fp8_histories(const ir_module *m, const ir_func *f, const ir_instr *in, bool *split)
{
    for (int a = 0; a < 4; a += 2) {
        const ir_instr *q = &f->instrs[f->vals[in->args[a]].def];
        if (q->op != IR_OP_FP8_GROUPED_QUANTIZE) /* blockwise: no amax, no history */
            continue;
        const ir_instr *amax = &f->instrs[f->vals[q->args[1]].def];
        if (amax->op == IR_OP_FP8_HISTORY_AMAX)
            split[ir_global_of(f, amax->args[0])] = true;
    }
    if (in->nargs == 6)
        split[ir_global_of(f, in->args[5])] = true;
}

/* Marks in split[] the parameters whose weights the grouped GEMMs of f read ([E, ...]; under FP8
 * the weights fp8_grouped_matmul's quantized operand came from) and their FP8 histories; false when
 * one is no global or its experts do not divide by ep. */
static bool find_expert_weights(const ir_module *m, const ir_func *f, int ep, bool *split, char *err, size_t errlen)
{
    for (int i = 0; i < f->ninstrs; i++) {
        const ir_instr *in = &f->instrs[i];
        if (in->op != IR_OP_MOE_GROUPED_MATMUL && in->op != IR_OP_FP8_GROUPED_MATMUL)
            continue;
        bool fp8 = in->op == IR_OP_FP8_GROUPED_MATMUL;
        int g = fp8 ? fp8_source_global(f, in->args[2]) : ir_global_of(f, in->args[1]);
        if (g < 0)
            return snprintf(err, errlen, "%s: grouped matmul %%%d's weights are no global: expert parallelism splits "
                            "the expert weights themselves", f->name, in->res[0]), false;
        const ir_global *gl = &m->globals[g];
        if (gl->type.dims[0] % ep)
            return snprintf(err, errlen, "@%s has %lld experts, which --expert-model-parallel-size %d does not divide: "
                            "choose an ep that divides num_experts", gl->name, (long long)gl->type.dims[0], ep), false;
        split[ir_global_param(m, g)] = true;
        if (fp8)
            mark_fp8_histories(m, f, in, split);
    }
    return true;
}

/* Every global of a marked parameter (it and its working copies) holds E/ep experts: this rank's. */
static void split_expert_globals(ir_module *m, const bool *split, int ep)
{
    for (int g = 0; g < m->nglobals; g++) {
        ir_global *gl = &m->globals[g];
        if (!split[ir_global_param(m, g)])
            continue;
        gl->type.dims[0] /= ep;
        ir_shard_push(&gl->type, 0, IR_AXIS_EP);
        ir_layout_add(&gl->layout, IR_AXIS_EP, IR_SPLIT_DIM, 0);
    }
}

bool pass_expert_parallel(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen)
{
    int ep = (int)ir_cfg_int(m, IR_CFG_EXPERT_MODEL_PARALLEL_SIZE);
    if (ep <= 1)
        return true;
    bool *split = calloc((size_t)m->nglobals + 1, sizeof(bool)), ok = true;
    ir_func_kind kinds[2] = {IR_FUNC_STEP, IR_FUNC_EVAL};
    for (int k = 0; k < 2 && ok; k++)
        if (ir_func_of_kind(m, kinds[k]) >= 0)
            ok = find_expert_weights(m, m->funcs[ir_func_of_kind(m, kinds[k])], ep, split, err, errlen);
    bool any = false;
    for (int g = 0; g < m->nglobals; g++)
        any |= split[g];
    if (ok && !any) {
        snprintf(err, errlen, "--expert-model-parallel-size %d: the model has no experts (set num_experts)", ep);
        ok = false;
    }
    if (ok)
        split_expert_globals(m, split, ep);
    free(split);
    /* every function: the step's and eval's dispatches and combines, and in all (setup's working
     * copies, made by the precision pass before this one) the split weights' references */
    return ok && pass_shard_axis(m, IR_AXIS_EP, ep, (pass_axis_split){.seq_dim = -1, .experts = true}, err, errlen);
}
