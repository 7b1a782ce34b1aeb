/* lr_schedule.c — learning-rate schedules (see lr_schedule.h). */
#include "lr_schedule.h"

#include <math.h>

double rt_lr_at(const rt_lr_schedule *s, int it)
{
    if (s->warmup_iters > 0 && it <= s->warmup_iters)
        return s->lr * it / s->warmup_iters;
    int decay = s->train_iters - s->warmup_iters;
    double progress = decay > 0 ? (double)(it - s->warmup_iters) / decay : 1.0;
    if (progress > 1)
        progress = 1;
    switch (s->style) {
    case RT_LR_LINEAR: return s->lr - (s->lr - s->min_lr) * progress;
    case RT_LR_COSINE: return s->min_lr + (s->lr - s->min_lr) * 0.5 * (1 + cos(M_PI * progress));
    default: return s->lr;
    }
}
