/* step_cost.h — how long a plan's step takes on its target, from the instructions the plan runs:
 * each costed by a calibrated row of its class (an op, with its operands' transposes where it
 * multiplies: "matmul.nt", "fp8_matmul.tn"), t = t0 + a * FLOPs / wave efficiency + b * bytes, the
 * rows fitted by bench/calibrate.py to every instruction's GPU time measured on the target
 * (MCC_PROFILE_DUMP over bench/calibrate.sh's configs: passes/step_cost_<target>.def). A class the
 * table lacks, or a target without one, is costed by the roofline of the target's figures. The
 * step is each function's instructions times its calls in the train schedule, scaled as the
 * calibration says (the dense stream's slowdown, a CUDA graph's saving a kernel, the host's share
 * of a step); an offloaded optimizer's host step adds its bytes at the host's rate (target.h, one
 * measurement, not per instruction), after the backward, or where the plan marks gradients ready
 * (--clip-grad 0: passes/grad_ready.c) less the device's time it runs beside (the last micro-batch's
 * backward after its first mark, and the optimizer function). Collectives are not in it: their
 * bytes are the memory report's. */
#ifndef MCC_STEP_COST_H
#define MCC_STEP_COST_H

#include "ir/ir.h"
#include "passes/target.h"

#include <stdbool.h>
#include <stdio.h>

/* What an instruction costs is computed from. */
typedef struct {
    char cls[48];                  /* its class: the op's name, ".nt" etc. after a multiplying op's transposes */
    char like[48];                 /* a class whose calibrated row stands in where cls has none ("": the
                                      roofline): values narrower than q and k (attention.d192.v128, cuDNN's)
                                      borrow the d128 kernel's rates, applied to their own FLOPs and bytes */
    double flops;                  /* 2 x ir_work_macs */
    double bytes;                  /* its operands' and results' */
    double wave_eff;               /* a GEMM's share of its last wave's tiles busy (1: none idle) */
    double peak_flops;             /* the target's datasheet rate for its dtype: no row costs it faster */
    bool costed;                   /* false: no kernel (a view, a global's pointer), or a collective */
} mcc_instr_work;

void mcc_instr_work_of(const ir_func *f, const ir_instr *in, const mcc_target *t, mcc_instr_work *w);
/* Its GPU seconds on t, and whether a calibrated row gave them (else the roofline's). */
double mcc_instr_seconds(const mcc_target *t, const mcc_instr_work *w, bool *calibrated);

typedef struct {
    double seconds;                /* the step's compute and the host's share */
    double micro_batch_seconds;    /* of them, one micro-batch's: one call of each function the
                                      schedule calls a micro-batch (forward, backward, ...), scaled
                                      as the step is; the rest is once a step (mcc tune's estimate
                                      splits the two) */
    double calibrated_share;       /* of the instructions' seconds, what calibrated rows gave */
    bool calibrated;               /* the target has a table */
} mcc_step_cost;

/* The step of module m (one rank's plan: a stage of a pipeline runs its own schedule) on t. */
mcc_step_cost mcc_step_cost_of(const ir_module *m, const mcc_target *t);

/* Every costed instruction of m's functions the train schedule calls: function, index, op, class,
 * calls a step, FLOPs, bytes, wave efficiency and predicted microseconds, tab-separated with a
 * header (mcc compile --cost-table FILE: what bench/calibrate.py joins with a profile). */
void mcc_step_cost_table(const ir_module *m, const mcc_target *t, FILE *out);

#endif
