/* plan.c — a spec's planned program (plan.h): the model, the config the target fixes, the passes. */
#include "frontend/plan.h"

#include "frontend/model.h"
#include "passes/target.h"

/* What the target runs of the model only under a condition the compile cannot check, said once a
 * process (mcc tune plans many): on the cuda target, attention whose values are not as wide as its
 * queries and keys (multi-latent attention's) runs through cuDNN's fused attention alone, so
 * train_rank needs cuDNN 9.19 or newer (runtime/cuda/attention.c exits at the first step saying so
 * otherwise). What no runtime can run is refused by passes/target.c (pass_target_check). */
static void plan_target_note(const ir_module *m, int backend)
{
    static bool said;
    for (int f = 0; !said && backend == IR_BACKEND_CUDA && f < m->nfuncs; f++)
        for (int i = 0; !said && i < m->funcs[f]->ninstrs; i++) {
            const ir_func *fn = m->funcs[f];
            const ir_instr *in = &fn->instrs[i];
            if (in->op != IR_OP_ATTENTION && in->op != IR_OP_ATTENTION_DROPOUT)
                continue;
            int64_t d = fn->vals[in->args[0]].type.dims[3], dv = fn->vals[in->args[2]].type.dims[3];
            if (d != dv) {
                fprintf(stderr, "mcc: note: attention with values of %lld channels beside queries and keys of %lld "
                                "(multi-latent attention) runs on the cuda target through cuDNN's fused attention "
                                "alone: train_rank needs an mcc built with cuDNN and libcudnn 9.19 or newer at run "
                                "time (PyTorch's, first on LD_LIBRARY_PATH)\n", (long long)dv, (long long)d);
                said = true;
            }
        }
}

bool mcc_plan_build(const mcc_spec *spec, const mcc_plan_options *o, const char *last, mcc_program *prog, char *err,
                    size_t errlen)
{
    ir_module *m = mcc_build_model(spec, o->keep_logits);
    /* The CPU backend computes in fp32 (it is the numerical oracle); CUDA trains in bf16 with
     * fp32 master weights. */
    int backend = ir_choice_find(IR_CHOICE_BACKEND, o->passes.target->backend); /* the target registry's word */
    ir_cfg_set_int(m, IR_CFG_PLAN_VERSION, IR_PLAN_VERSION);
    ir_cfg_set_choice(m, IR_CFG_TARGET, backend);
    ir_cfg_set_choice(m, IR_CFG_PARAM_DTYPE, backend == IR_BACKEND_CUDA ? IR_BF16 : IR_F32);
    ir_cfg_set_int(m, IR_CFG_COMM_SIDE_LANE, o->side_lane);
    ir_cfg_set_int(m, IR_CFG_COMM_COPY_LANE, o->copy_lane);
    ir_cfg_set_num(m, IR_CFG_PEAK_FLOPS, o->passes.target->peak_bf16_flops);
    if (o->train_rank_args && *o->train_rank_args) ir_cfg_set(m, IR_CFG_TRAIN_RANK_ARGS, o->train_rank_args);
    plan_target_note(m, backend);
    *prog = mcc_program_of(m);
    if (mcc_run_passes(prog, &o->passes, last, !o->unverified, err, errlen))
        return true;
    mcc_program_free(prog);
    return false;
}
