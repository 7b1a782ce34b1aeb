/* tune.h — `mcc tune`: the layouts of a model on N GPUs that fit, fastest first. tune.c enumerates
 * the layouts, plans the most promising exactly and prints them; tune_estimate.c ranks every
 * layout first, from a few exact plans of the model cut short. */
#ifndef MCC_TUNE_H
#define MCC_TUNE_H

#include "frontend/spec.h"
#include "ir/ir.h"
#include "passes/pp_schedule.h"
#include "passes/target.h"

#include <stdbool.h>

/* argv: [SPEC.json] [--<field> VALUE ...] --world-size N [--gpus-per-node G] [--target T] [--top K]
 * [--gpu-memory GIB] [--fix KEY=VALUE ...]. Exit status 0 with a table on stdout, 1 when no layout fits, 2 on bad input. */
int mcc_tune_main(int argc, char **argv);

/* ---- shared by tune.c and tune_estimate.c --------------------------------------------------- */

/* The memory levers tried in turn, each taking less memory and more time than the one before:
 * recompute (selective: the default modules' ops; blocks: selective of the MLP blocks too, the
 * regions of mlp, moe, shared_experts and mla_up_proj the model has; full), then the optimizer's
 * state and step on the host as well. */
typedef enum { RC_NONE, RC_SELECTIVE, RC_BLOCKS, RC_FULL, RC_OFFLOAD, RC_COUNT } tune_recompute;

typedef struct {
    int tp, pp, cp, dp, ep, mbs;
    tune_recompute rc;
    int rc_block;                  /* RC_FULL by Megatron's block method: the first rc_block layers of each
                                      (virtual) stage recomputed, the others kept; 0: every layer (uniform) */
    int first_layers, last_layers; /* the pipeline's split where pp does not divide num_layers: the first
                                      and last ranks' layers (Megatron's --decoder-first/last-pipeline-
                                      num-layers), the middle ranks' as many each; 0: the even split */
    int vp;                        /* virtual stages a pipeline rank (interleaved 1F1B), 1: none */
    pp_sched_kind sched;           /* the pipeline's schedule (1F1B where pp is 1) */
    bool fp8;                      /* the layers' matmuls in FP8 (hybrid, tensorwise scaling) */
    const char *blocks;            /* RC_BLOCKS: its --recompute-modules words (tune_ctx's block_modules) */
    bool grad_bf16;                /* gradients held and reduced in bf16 (--grad-reduce-in-bf16: half their
                                      bytes, their sum over dp rounded): tried where f32's fit nothing */
} tune_layout;

typedef struct {
    tune_layout l;
    double gib, step_s, compute_s, comm_s, bubble;
    bool exact;                    /* planned as mcc compile plans it; else estimated (tune_estimate) */
} tune_result;

typedef struct tune_units tune_units; /* tune_estimate.c's measured shapes */

enum { TUNE_REJECTED = 4 };

/* A layout family (tp, pp, cp, ep, the pipeline's split, vp over the world) and what became of it: its best
 * candidate's step, or why none was listed (--explain). */
typedef struct {
    tune_layout l;                 /* mbs, recompute and schedule: the last tried */
    int fit;                       /* its candidates whose estimate fits */
    double best_s;                 /* its fastest such candidate's estimated step */
    double least_gib;              /* the least memory an estimate of it took (0: none made) */
    char why[200];                 /* the spec's refusal, or a divisibility, where none was estimated */
} tune_family;

typedef struct {
    const char *spec_path;         /* NULL: the model from the flags alone */
    char **base;                   /* the flags given, less tune's own */
    int nbase;
    int world, gpus_per_node, top;
    tune_layout fix;               /* --fix key=value: a degree held (0: searched; rc -1: searched) */
    const mcc_target *target;
    double gpu_gib;                /* what a plan may take: the target's memory less the runtime's */
    bool explain, json, exhaustive; /* --explain, --json; --exhaustive: every candidate planned exactly */
    bool try_fp8;                  /* --fp8: every layout also with its layers' matmuls in FP8 */
    char block_modules[128];       /* RC_BLOCKS' recompute_modules for this model (tune_block_modules) */
    mcc_target perturbed;          /* --cost-perturbation: the target with its rows scaled (target points here) */
    mcc_cost_row *perturbed_rows;
    int candidates, estimated_fit; /* layouts ranked; of them, estimated to fit */
    int planned, too_big, refused; /* exact plans of candidates: made, over the memory, refused */
    tune_result rejected[TUNE_REJECTED]; /* estimated over the memory (and the margin) the nearest it */
    int nrejected;
    tune_family *families;         /* every family the search met (divisible or not) */
    int nfamilies;
    char refusal[200];             /* the last plan's refusal by the spec or the planner */
    tune_units *units;
} tune_ctx;

/* The flags of layout l after the given ones, as one mcc compile line carries them, on `world` GPUs. */
void tune_layout_flags(const tune_layout *l, int world, char *buf, size_t n);

/* A plan's figures: each stage's memory and step time, the most of each. */
typedef struct {
    int stages;
    double gib;                    /* the stage that takes the most */
    double compute_s;              /* the busiest stage's step (mcc_step_cost_of) */
    double sent_bytes;             /* the most a stage's collectives send a step */
    int micro_batches;             /* a step's, on each rank */
} tune_plan_figures;

/* The spec of the flags `text` after the given ones (stderr silenced); false with t->refusal. */
bool tune_spec_text(tune_ctx *t, const char *text, mcc_spec *spec);

/* Plans the flags `text` after the given ones exactly (the passes through memory_plan, unverified;
 * stderr silenced), handing each stage's module to `each` (may be NULL) before it is freed; false
 * with t->refusal where the spec or the planner refuses it. */
typedef void (*tune_stage_fn)(void *ctx, const ir_module *stage, int index);
bool tune_plan_text(tune_ctx *t, const char *text, tune_stage_fn each, void *ctx, tune_plan_figures *out);

/* The estimate of layout l (tune_estimate.c): its busiest stage's memory and step, from the
 * shape's reduced plans (made on first use); false where they are refused (t->refusal). */
bool tune_estimate(tune_ctx *t, const tune_layout *l, tune_result *r);
void tune_units_free(tune_ctx *t);
/* How many reduced plans the estimate made. */
int tune_units_planned(const tune_ctx *t);

#endif
