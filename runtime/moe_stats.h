/* moe_stats.h — an MoE model's router statistics, for train_rank's log line and metrics: the
 * training functions' outputs (frontend/model.c) gathered over a step's micro-batches. Under
 * pipeline parallelism each stage holds its own MoE layers' (in its forward functions, one a
 * chunk); train_rank combines the stages' shares (rt_parallel_mean_of). */
#ifndef MCC_MOE_STATS_H
#define MCC_MOE_STATS_H

#include "program.h"

/* An output of a training function: the step function, or a pipeline stage's forward. */
typedef struct {
    int func;
    char name[48];
} rt_moe_output;

typedef struct {
    bool moe, has_aux, has_z, has_kept; /* the model's (on one stage: train_rank ORs them over pp): an
                                         * MoE model, with @moe_aux_loss, @moe_z_loss, a capacity factor */
    int nlayers, experts;           /* this stage's MoE layers, the experts of each */
    rt_moe_output *counts;          /* @moe_tokens_per_expert.L, one an MoE layer */
    int aux_func, z_func;           /* the function outputting @moe_aux_loss / @moe_z_loss (the losses'
                                     * means over the model's layers); -1: not on this stage */
    double aux, z;                  /* summed over the step's micro-batches */
    int aux_calls, z_calls;         /* the micro-batches summed */
    int64_t *tokens;                /* [nlayers, experts]: the step's tokens per expert, summed */
    int32_t *buf;                   /* one layer's counts as the output holds them */
    int nkept;                      /* with a capacity factor: @moe_kept_weights.L, the MoE layers' */
    rt_moe_output *kept;
    int64_t pairs;                  /* the (token, slot) pairs of one, N k */
    float *weights;
    int64_t dropped, routed;        /* the step's pairs dropped, and all of them */
} rt_moe_stats;

/* A step's statistics on this rank: its stage's shares. */
typedef struct {
    double aux, z;        /* the load-balancing and z losses' means over the micro-batches and the
                           * model's MoE layers; 0 where this stage outputs none (another does) */
    double imbalance;     /* the largest over this stage's layers of max/mean tokens per expert (1:
                           * even; 0: no MoE layer here) */
    double dropped, routed; /* this stage's (token, slot) pairs dropped over the experts' capacity,
                             * and all its pairs (0: dropless) */
} rt_moe_step;

/* The statistics of p's training functions (kind step or forward); s->moe false when this stage
 * has no MoE layer. */
void rt_moe_stats_open(rt_moe_stats *s, const rt_program *p);
/* Adds the outputs of the micro-batch function func just ran (nothing when it has none). */
void rt_moe_stats_add(rt_moe_stats *s, rt_program *p, int func);
/* The step's shares (rt_moe_step); starts the next step's sums. */
void rt_moe_stats_step(rt_moe_stats *s, rt_moe_step *out);
void rt_moe_stats_free(rt_moe_stats *s);

#endif
