/* lr_schedule.h — the learning rate at each iteration, Megatron's OptimizerParamScheduler: linear
 * warmup from init_lr, then constant, linear, cosine, inverse-square-root or WSD
 * (warmup-stable-decay) to min_lr at the end of the decay, and min_lr after it. One schedule,
 * counted in steps of its unit: iterations, or samples (Megatron's sample-based training, each
 * iteration a global batch of them). Each parameter group (the embedding and output layer's under
 * --decoupled-lr) has its own peak and final lr on the same shape. */
#ifndef MCC_RT_LR_SCHEDULE_H
#define MCC_RT_LR_SCHEDULE_H

#include <stddef.h>

#include "ir/ir.h"

/* The parameter groups: every parameter but those of the other, and Megatron's
 * is_embedding_or_output_parameter ones, which config decoupled_lr gives a schedule of their own */
typedef enum { RT_LR_DEFAULT, RT_LR_DECOUPLED, RT_LR_GROUPS } rt_lr_group;

typedef struct {
    ir_lr_style style;
    ir_wsd_style wsd_style;      /* the shape of WSD's final decay */
    double max_lr[RT_LR_GROUPS], min_lr[RT_LR_GROUPS]; /* each group's peak and final lr */
    double init_lr;              /* where warmup starts, every group's (Megatron's lr_warmup_init) */
    bool by_samples;             /* the unit: samples, else iterations */
    int per_iteration;           /* units an iteration advances the schedule: 1, or the global batch */
    double warmup;               /* fractional when given as lr_warmup_fraction of decay */
    double decay;                /* > warmup, or the decay is a step to min_lr */
    double wsd_decay;            /* WSD: decays over (decay - wsd_decay, decay] */
} rt_lr_schedule;

/* "iterations" or "samples": what the schedule's spans count. */
const char *rt_lr_unit(const rt_lr_schedule *s);

/* The schedule the plan's config gives (lr, min_lr, decoupled_lr and decoupled_min_lr,
 * lr_warmup_init, lr_decay_style, lr_wsd_decay_style; with train_samples the sample spans
 * lr_warmup_samples or lr_warmup_fraction, lr_decay_samples (0: train_samples) and
 * lr_wsd_decay_samples, advanced by global_batch_size an iteration; else the _iters spans, an
 * lr_decay_iters of 0 standing for train_iters) for a run of train_iters. false with a message on
 * a config it cannot use. */
bool rt_lr_from_config(const ir_module *m, int train_iters, rt_lr_schedule *s, char *err, size_t errlen);

/* Group g's lr of iteration it (1-based): Megatron's scheduler after `it` steps, the lr it logs at
 * iteration it. With warmup, the first iteration trains at init_lr + (lr - init_lr) / warmup rather
 * than Megatron's init_lr. */
double rt_lr_at(const rt_lr_schedule *s, rt_lr_group g, int it);

#endif
