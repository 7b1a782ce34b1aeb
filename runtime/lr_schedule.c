/* lr_schedule.c — learning-rate schedules (see lr_schedule.h); the formulas of Megatron-LM's
 * optimizer_param_scheduler.py get_lr. */
#include "lr_schedule.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The index of name in the NULL-terminated names, or -1. */
static int lr_lookup(const char *const *names, const char *name)
{
    for (int i = 0; name && names[i]; i++)
        if (!strcmp(names[i], name))
            return i;
    return -1;
}

bool rt_lr_from_config(const ir_module *m, int train_iters, rt_lr_schedule *s, char *err, size_t errlen)
{
    /* The spec's names (frontend/spec.c), ORDER rt_lr_style and rt_wsd_style. */
    static const char *const styles[] = {"constant", "linear", "cosine", "inverse-square-root", "WSD", NULL};
    static const char *const wsd[] = {"exponential", "linear", "cosine", "minus_sqrt", NULL};
    const char *style = ir_cfg_text(m, IR_CFG_LR_DECAY_STYLE), *wsd_style = ir_cfg_text(m, IR_CFG_LR_WSD_DECAY_STYLE);
    int st = lr_lookup(styles, style), ws = lr_lookup(wsd, wsd_style);
    if (st < 0 || ws < 0)
        return snprintf(err, errlen, "lr_decay_style \"%s\" / lr_wsd_decay_style \"%s\" unknown; recompile with this mcc",
                        style, wsd_style), false;
    int decay = (int)ir_cfg_int(m, IR_CFG_LR_DECAY_ITERS);
    *s = (rt_lr_schedule){.style = (rt_lr_style)st, .wsd_style = (rt_wsd_style)ws, .lr = ir_cfg_num(m, IR_CFG_LR),
                          .min_lr = ir_cfg_num(m, IR_CFG_MIN_LR), .decay_iters = decay ? decay : train_iters,
                          .wsd_decay_iters = (int)ir_cfg_int(m, IR_CFG_LR_WSD_DECAY_ITERS)};
    double fraction = ir_cfg_num(m, IR_CFG_LR_WARMUP_FRACTION);
    s->warmup_iters = fraction > 0 ? fraction * s->decay_iters : (double)ir_cfg_int(m, IR_CFG_LR_WARMUP_ITERS);
    if (s->warmup_iters > s->decay_iters)
        return snprintf(err, errlen, "the lr warmup (%g iterations) is longer than the decay (%d iterations, "
                        "lr_decay_iters or --train-iters): raise --train-iters, or recompile with a shorter "
                        "--lr-warmup-iters (or --lr-warmup-fraction)",
                        s->warmup_iters, s->decay_iters), false;
    if (s->style == RT_LR_WSD && !(s->wsd_decay_iters > 0 && s->wsd_decay_iters <= s->decay_iters))
        return snprintf(err, errlen, "WSD needs 0 < lr_wsd_decay_iters (%d) <= the decay iterations (%d); recompile "
                        "with --lr-wsd-decay-iters N", s->wsd_decay_iters, s->decay_iters), false;
    return true;
}

/* WSD's factor in [0, 1] over its final decay, ratio from 0 to 1. */
static double lr_wsd_coeff(rt_wsd_style style, double ratio)
{
    switch (style) {
    case RT_WSD_LINEAR: return 1 - ratio;
    case RT_WSD_COSINE: return 0.5 * (cos(M_PI * ratio) + 1);
    case RT_WSD_MINUS_SQRT: return 1 - sqrt(ratio);
    default: return 2 * pow(0.5, ratio) - 1; /* exponential */
    }
}

double rt_lr_at(const rt_lr_schedule *s, int it)
{
    if (s->warmup_iters > 0 && it <= s->warmup_iters)
        return s->lr * it / s->warmup_iters;
    if (s->style == RT_LR_CONSTANT)
        return s->lr;
    if (it > s->decay_iters)
        return s->min_lr;
    if (s->style == RT_LR_INVERSE_SQRT) {
        double lr = s->lr * sqrt(s->warmup_iters > 1 ? s->warmup_iters : 1) / sqrt(it > 1 ? it : 1);
        return lr > s->min_lr ? lr : s->min_lr;
    }
    double span = s->decay_iters - s->warmup_iters, ratio = span > 0 ? (it - s->warmup_iters) / span : 1, coeff;
    switch (s->style) {
    case RT_LR_LINEAR: coeff = 1 - ratio; break;
    case RT_LR_COSINE: coeff = 0.5 * (cos(M_PI * ratio) + 1); break;
    default: { /* WSD: stable until the final wsd_decay_iters */
        int start = s->decay_iters - s->wsd_decay_iters;
        coeff = it <= start ? 1 : lr_wsd_coeff(s->wsd_style, (double)(it - start) / s->wsd_decay_iters);
    }
    }
    return s->min_lr + coeff * (s->lr - s->min_lr);
}
