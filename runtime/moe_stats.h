/* moe_stats.h — an MoE model's router statistics, for train_rank's log line and metrics: the
 * step function's outputs (frontend/model.c) gathered over a step's micro-batches. */
#ifndef MCC_MOE_STATS_H
#define MCC_MOE_STATS_H

#include "program.h"

typedef struct {
    int func;                       /* the step function; -1: not an MoE model */
    int nlayers, experts;           /* the MoE layers, the experts of each */
    char (*names)[48];              /* @moe_tokens_per_expert.L, one an MoE layer */
    bool has_aux, has_z;            /* @moe_aux_loss, @moe_z_loss: the losses' means over the layers */
    double aux, z;                  /* summed over the step's micro-batches */
    int micro_batches;
    int64_t *tokens;                /* [nlayers, experts]: the step's tokens per expert, summed */
    int32_t *buf;                   /* one layer's counts as the output holds them */
    int nkept;                      /* with a capacity factor: @moe_kept_weights.L, the MoE layers' */
    char (*kept)[48];
    int64_t pairs;                  /* the (token, slot) pairs of one, N k */
    float *weights;
    int64_t dropped, routed;        /* the step's pairs dropped, and all of them */
} rt_moe_stats;

/* The statistics of step function func of p (s->func = -1 when it has no MoE layer). */
void rt_moe_stats_open(rt_moe_stats *s, const rt_program *p, int func);
/* Adds the outputs of the micro-batch func just ran. */
void rt_moe_stats_add(rt_moe_stats *s, rt_program *p);
/* The step's: the load-balancing and z losses' means (over the micro-batches and the MoE layers;
 * NAN where the plan has none), the load imbalance, the largest over the layers of max/mean
 * tokens per expert (1: even), and the fraction of the (token, slot) pairs dropped over the
 * experts' capacity (NAN: dropless). Starts the next step's sums. */
void rt_moe_stats_step(rt_moe_stats *s, double *aux, double *z, double *imbalance, double *dropped);
void rt_moe_stats_free(rt_moe_stats *s);

#endif
