/* lr_schedule.h — the learning rate at each iteration: linear warmup, then constant, linear or
 * cosine decay to min_lr at train_iters (Megatron's styles). */
#ifndef MCC_RT_LR_SCHEDULE_H
#define MCC_RT_LR_SCHEDULE_H

typedef enum { RT_LR_CONSTANT, RT_LR_LINEAR, RT_LR_COSINE } rt_lr_style;

typedef struct {
    rt_lr_style style;
    double lr, min_lr;
    int warmup_iters, train_iters;
} rt_lr_schedule;

/* it is 1-based: the first step trains at lr * 1/warmup when warming up. */
double rt_lr_at(const rt_lr_schedule *s, int it);

#endif
