/* moe_stats.h — an MoE model's router statistics, for train_rank's log line and metrics: the
 * training functions' outputs (frontend/model.c, one of each an MoE layer) gathered over a step's
 * micro-batches. Under pipeline parallelism each stage holds its own MoE layers' (in its forward
 * functions, one a chunk); train_rank combines the stages' shares (rt_parallel_mean_of). */
#ifndef MCC_MOE_STATS_H
#define MCC_MOE_STATS_H

#include "program.h"

/* An output of a training function: the step function, or a pipeline stage's forward. */
typedef struct {
    int func;
    int instr;                      /* its output instruction in func */
} rt_moe_output;

/* The outputs of one kind, one an MoE layer of this stage. */
typedef struct {
    int n;
    rt_moe_output *at;
} rt_moe_outputs;

typedef struct {
    bool moe;                       /* an MoE model (on one stage: train_rank ORs it over pp) */
    int aux_layers, z_layers;       /* the model's layers with the losses (train_rank sums them over pp) */
    bool has_kept;                  /* a capacity factor (train_rank ORs it over pp) */
    rt_moe_outputs counts;          /* role moe_tokens_per_expert, index L */
    rt_moe_outputs aux, z;          /* roles moe_aux_loss, moe_z_loss: layer L's unscaled losses */
    rt_moe_outputs kept;            /* role moe_kept_weights, with a capacity factor */
    int experts;                    /* of each MoE layer */
    double aux_sum, z_sum;          /* summed over the layers and the step's micro-batches */
    int micro_batches;              /* those summed: calls of the first training function */
    int first;                      /* that function */
    int64_t *tokens;                /* [counts.n, experts]: the step's tokens per expert, summed */
    int32_t *buf;                   /* one layer's counts as the output holds them */
    int64_t pairs;                  /* the (token, slot) pairs of one layer, N k */
    ir_dtype kept_dtype;            /* the kept weights': the working dtype (f32, or bf16 on CUDA) */
    float *weights;                 /* room for a layer's kept weights in either */
    int64_t dropped, routed;        /* the step's pairs dropped, and all of them */
} rt_moe_stats;

/* A step's statistics on this rank: its stage's shares. */
typedef struct {
    double aux, z;        /* the load-balancing and z losses summed over this stage's MoE layers,
                           * means over the micro-batches (the model's mean: their sum over pp over
                           * aux_layers, z_layers) */
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
