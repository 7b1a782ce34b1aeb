/* lr_schedule.h — the learning rate at each iteration, Megatron's OptimizerParamScheduler: linear
 * warmup, then constant, linear, cosine, inverse-square-root or WSD (warmup-stable-decay) to
 * min_lr at decay_iters, and min_lr after it. */
#ifndef MCC_RT_LR_SCHEDULE_H
#define MCC_RT_LR_SCHEDULE_H

#include <stddef.h>

#include "ir/ir.h"

typedef enum { RT_LR_CONSTANT, RT_LR_LINEAR, RT_LR_COSINE, RT_LR_INVERSE_SQRT, RT_LR_WSD } rt_lr_style;
typedef enum { RT_WSD_EXPONENTIAL, RT_WSD_LINEAR, RT_WSD_COSINE, RT_WSD_MINUS_SQRT } rt_wsd_style;

typedef struct {
    rt_lr_style style;
    rt_wsd_style wsd_style;  /* the shape of WSD's final decay */
    double lr, min_lr;
    double warmup_iters;     /* fractional when given as lr_warmup_fraction of decay_iters */
    int decay_iters;         /* > warmup_iters, or the decay is a step to min_lr */
    int wsd_decay_iters;     /* WSD: decays over (decay_iters - wsd_decay_iters, decay_iters] */
} rt_lr_schedule;

/* The schedule the plan's config gives (lr, min_lr, lr_decay_style, lr_warmup_iters or
 * lr_warmup_fraction, lr_decay_iters (0: train_iters), lr_wsd_decay_style,
 * lr_wsd_decay_iters) for a run of train_iters. false with a message on a config it cannot use. */
bool rt_lr_from_config(const ir_module *m, int train_iters, rt_lr_schedule *s, char *err, size_t errlen);

/* The lr of iteration it (1-based; Megatron's scheduler after `it` steps): with warmup, the
 * first iteration trains at lr / warmup_iters rather than Megatron's 0. */
double rt_lr_at(const rt_lr_schedule *s, int it);

#endif
