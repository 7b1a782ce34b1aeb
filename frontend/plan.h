/* plan.h — a spec's planned program: the model builder's graph with the config the target fixes,
 * through the passes. What `mcc compile`, `mcc ir` and `mcc schedule` plan with (plan.c), so their
 * memory reports are one computation. */
#ifndef MCC_PLAN_H
#define MCC_PLAN_H

#include "frontend/spec.h"
#include "passes/passes.h"

typedef struct {
    mcc_pass_options passes;        /* the target's description, handed to every pass */
    bool side_lane, copy_lane;      /* --comm-lanes against the target (mcc_target_parse_lanes) */
    bool keep_logits;               /* --keep-logits */
    const char *train_rank_args;    /* train_rank's flags given to mcc compile, one a line (NULL: none) */
    bool unverified;                /* the verifier not run between passes: the same program sooner (mcc
                                       tune's thousands of plans of layouts mcc compile verifies) */
} mcc_plan_options;

/* The program of spec through pass `last` (NULL: every pass), verified after each; false with
 * the pass's error in err. */
bool mcc_plan_build(const mcc_spec *spec, const mcc_plan_options *o, const char *last, mcc_program *prog, char *err,
                    size_t errlen);

#endif
