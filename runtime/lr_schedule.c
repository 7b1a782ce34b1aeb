/* lr_schedule.c — learning-rate schedules (see lr_schedule.h); the formulas of Megatron-LM's
 * optimizer_param_scheduler.py get_lr. */
#include "lr_schedule.h"

#include <math.h>
#include <stdio.h>

/* Each unit's config keys for the schedule's spans, what it is called, and the flags that lengthen
 * the decay or shorten the warmup (ORDER by_samples). */
static const struct {
    const char *name;
    ir_cfg warmup, decay, wsd_decay;
    const char *decay_of, *fix;
} lr_units[2] = {
    {"iterations", IR_CFG_LR_WARMUP_ITERS, IR_CFG_LR_DECAY_ITERS, IR_CFG_LR_WSD_DECAY_ITERS,
     "lr_decay_iters or --train-iters", "raise --train-iters, or recompile with a shorter --lr-warmup-iters"},
    {"samples", IR_CFG_LR_WARMUP_SAMPLES, IR_CFG_LR_DECAY_SAMPLES, IR_CFG_LR_WSD_DECAY_SAMPLES,
     "lr_decay_samples or train_samples", "recompile with a shorter --lr-warmup-samples"},
};

const char *rt_lr_unit(const rt_lr_schedule *s) { return lr_units[s->by_samples].name; }

/* Group g's peak and final lr from the config: decoupled_lr's pair where the plan has one. */
static void lr_group(const ir_module *m, rt_lr_schedule *s, rt_lr_group g)
{
    bool own = g == RT_LR_DECOUPLED && ir_cfg_num(m, IR_CFG_DECOUPLED_LR) >= 0;
    s->max_lr[g] = ir_cfg_num(m, own ? IR_CFG_DECOUPLED_LR : IR_CFG_LR);
    s->min_lr[g] = ir_cfg_num(m, own ? IR_CFG_DECOUPLED_MIN_LR : IR_CFG_MIN_LR);
}

bool rt_lr_from_config(const ir_module *m, int train_iters, rt_lr_schedule *s, char *err, size_t errlen)
{
    long long samples = ir_cfg_int(m, IR_CFG_TRAIN_SAMPLES);
    bool by_samples = samples > 0;
    double decay = (double)ir_cfg_int(m, lr_units[by_samples].decay);
    *s = (rt_lr_schedule){.style = (ir_lr_style)ir_cfg_choice(m, IR_CFG_LR_DECAY_STYLE),
                          .wsd_style = (ir_wsd_style)ir_cfg_choice(m, IR_CFG_LR_WSD_DECAY_STYLE),
                          .init_lr = ir_cfg_num(m, IR_CFG_LR_WARMUP_INIT), .by_samples = by_samples,
                          .per_iteration = by_samples ? (int)ir_cfg_int(m, IR_CFG_GLOBAL_BATCH_SIZE) : 1,
                          .decay = decay ? decay : by_samples ? (double)samples : train_iters,
                          .wsd_decay = (double)ir_cfg_int(m, lr_units[by_samples].wsd_decay)};
    lr_group(m, s, RT_LR_DEFAULT);
    lr_group(m, s, RT_LR_DECOUPLED);
    double fraction = ir_cfg_num(m, IR_CFG_LR_WARMUP_FRACTION);
    s->warmup = fraction > 0 ? fraction * s->decay : (double)ir_cfg_int(m, lr_units[by_samples].warmup);
    const char *unit = rt_lr_unit(s);
    if (s->warmup > s->decay)
        return snprintf(err, errlen, "the lr warmup (%g %s) is longer than the decay (%g %s, %s): %s (or "
                        "--lr-warmup-fraction)", s->warmup, unit, s->decay, unit, lr_units[by_samples].decay_of,
                        lr_units[by_samples].fix), false;
    if (s->style == IR_LR_WSD && !(s->wsd_decay > 0 && s->wsd_decay <= s->decay))
        return snprintf(err, errlen, "WSD needs 0 < %s (%g) <= the decay %s (%g); recompile with --lr-wsd-decay-%s N",
                        ir_cfgs[lr_units[by_samples].wsd_decay].key, s->wsd_decay, unit, s->decay,
                        by_samples ? "samples" : "iters"), false;
    return true;
}

/* WSD's factor in [0, 1] over its final decay, ratio from 0 to 1. */
static double lr_wsd_coeff(ir_wsd_style style, double ratio)
{
    switch (style) {
    case IR_WSD_LINEAR: return 1 - ratio;
    case IR_WSD_COSINE: return 0.5 * (cos(M_PI * ratio) + 1);
    case IR_WSD_MINUS_SQRT: return 1 - sqrt(ratio);
    default: return 2 * pow(0.5, ratio) - 1; /* exponential */
    }
}

double rt_lr_at(const rt_lr_schedule *s, rt_lr_group g, int it)
{
    double n = (double)it * s->per_iteration, max_lr = s->max_lr[g], min_lr = s->min_lr[g];
    if (s->warmup > 0 && n <= s->warmup)
        return s->init_lr + (max_lr - s->init_lr) * n / s->warmup;
    if (s->style == IR_LR_CONSTANT)
        return max_lr;
    if (n > s->decay)
        return min_lr;
    if (s->style == IR_LR_INVERSE_SQRT) {
        double lr = max_lr * sqrt(s->warmup > 1 ? s->warmup : 1) / sqrt(n > 1 ? n : 1);
        return lr > min_lr ? lr : min_lr;
    }
    double span = s->decay - s->warmup, ratio = span > 0 ? (n - s->warmup) / span : 1, coeff;
    switch (s->style) {
    case IR_LR_LINEAR: coeff = 1 - ratio; break;
    case IR_LR_COSINE: coeff = 0.5 * (cos(M_PI * ratio) + 1); break;
    default: { /* WSD: stable until the final wsd_decay steps */
        double start = s->decay - s->wsd_decay;
        coeff = n <= start ? 1 : lr_wsd_coeff(s->wsd_style, (n - start) / s->wsd_decay);
    }
    }
    return min_lr + coeff * (max_lr - min_lr);
}
