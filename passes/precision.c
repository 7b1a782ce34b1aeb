/* precision.c — mixed precision (config param_dtype = bf16, the CUDA target's default): every
 * parameter keeps its fp32 master (what is initialised, updated and checkpointed) and gains a
 * working copy @<param>.bf16 that micro_step and eval_step read, so activations and their
 * gradients are bf16 while gradient accumulators (unless grad_reduce_in_bf16: pass_grad_dtype),
 * optimizer state and the loss stay fp32. A `setup` function fills
 * the copies from the masters once at start-up; the optimizer pass refreshes them each step.
 *
 * store_param_remainders (Megatron's, with use_precision_aware_optimizer; bf16 only, and not yet
 * under the distributed optimizer or CPU offload, whose masters are blocks or host memory): the
 * fp32 master is not stored whole. Its high 16 bits are the bf16 copy and its low 16 a REMAINDER
 * companion @<param>.remainder (i16), so a parameter costs 4 bytes here instead of 6. Rounding the
 * master to the copy adds 0x8000 to its bits (ties away from zero, where the copy otherwise rounds
 * ties to even); the remainder's sign says whether that carried into the high half, which makes
 * the pair exact (runtime/bf16.h rt_master_split / rt_master_join). No function names such a
 * parameter: the runtime fills and reads it through the pair, and AdamW updates the pair.
 * Under the distributed optimizer the copies are not filled here: the optimizer pass's setup
 * gathers them from ZeRO's blocks of the master, which hold the parameter's value (or, for a
 * parameter it does not shard, fills them as here: optimizer.c's fill_copy). */
#include "passes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Re-derives every result type after operands changed dtype; explicit types keep their shape. */
static bool retype(ir_module *m, ir_func *f, char *err, size_t errlen)
{
    for (int i = 0; i < f->ninstrs; i++) {
        ir_instr *in = &f->instrs[i];
        bool explicit_type = ir_op_has(in->op, IR_OPF_EXPLICIT_TYPE);
        if (in->nres == 0 || (explicit_type && in->nargs == 0)) /* input, fill: nothing to follow */
            continue;
        ir_type args[in->nargs ? in->nargs : 1], res[IR_MAX_RES];
        for (int a = 0; a < in->nargs; a++)
            args[a] = f->vals[in->args[a]].type;
        for (int r = 0; r < in->nres; r++)
            res[r] = f->vals[in->res[r]].type;
        if (explicit_type) /* reshape: its own shape, its operand's dtype */
            res[0].dtype = args[0].dtype;
        char why[256];
        if (!ir_ops[in->op].infer(m, in, args, res, why, sizeof why))
            return snprintf(err, errlen, "%s in %s: %s", ir_ops[in->op].name, f->name, why), false;
        for (int r = 0; r < in->nres; r++)
            f->vals[in->res[r]].type = res[r];
    }
    return true;
}

/* Points f's parameter references at their working copies and retypes f. */
static bool use_copies(ir_module *m, ir_func *f, char *err, size_t errlen)
{
    for (int i = 0; i < f->ninstrs; i++) {
        ir_instr *in = &f->instrs[i];
        int g = in->global;
        if (g >= 0 && m->globals[g].kind == IR_GLOBAL_PARAM)
            ir_global_retarget(m, in, ir_global_companion(m, g, IR_GLOBAL_COPY));
    }
    return retype(m, f, err, errlen);
}

bool pass_precision(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen)
{
    ir_dtype low = (ir_dtype)ir_cfg_choice(m, IR_CFG_PARAM_DTYPE); /* f32, bf16 or f16 */
    if (low == IR_F32)
        return true;
    int micro = ir_func_of_kind(m, IR_FUNC_STEP);
    if (micro < 0)
        return snprintf(err, errlen, "no step function (kind=step)"), false;

    ir_func *setup = ir_func_new(m, "setup", IR_FUNC_SETUP);
    bool zero = pass_zero_on(m); /* the copies are gathered from ZeRO's blocks (optimizer.c), not copied */
    bool remainders = low == IR_BF16 && ir_cfg_bool(m, IR_CFG_STORE_PARAM_REMAINDERS) && !zero &&
                      !ir_cfg_bool(m, IR_CFG_OPTIMIZER_CPU_OFFLOAD);
    int nglobals = m->nglobals;
    for (int g = 0; g < nglobals; g++) {
        if (m->globals[g].kind != IR_GLOBAL_PARAM)
            continue;
        char copy[256];
        snprintf(copy, sizeof copy, "%s.%s", m->globals[g].name, ir_dtype_name(low));
        ir_type t = m->globals[g].type;
        t.dtype = low;
        int c = ir_global_add_companion(m, copy, t, IR_GLOBAL_COPY, g);
        m->globals[c].no_decay = m->globals[g].no_decay;
        if (remainders) { /* the master is the pair (copy, remainder): nothing to copy */
            snprintf(copy, sizeof copy, "%s.remainder", m->globals[g].name);
            t.dtype = IR_I16;
            int r = ir_global_add_companion(m, copy, t, IR_GLOBAL_REMAINDER, g);
            m->globals[r].no_decay = m->globals[g].no_decay;
            continue;
        }
        if (zero)
            continue;
        int args[2] = {ir_global_ref(m, setup, c), ir_global_ref(m, setup, g)};
        ir_emit(m, setup, IR_OP_COPY, args, 2, NULL, NULL, NULL);
    }
    /* The step and eval functions read the copies; eval is absent only in hand-written modules. */
    int eval = ir_func_of_kind(m, IR_FUNC_EVAL);
    return use_copies(m, m->funcs[micro], err, errlen) && (eval < 0 || use_copies(m, m->funcs[eval], err, errlen));
}
