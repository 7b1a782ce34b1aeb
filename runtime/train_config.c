/* train_config.c — the plan's config values train_rank uses, range-checked (train_config.h). */
#include "train_config.h"

#include "common/cli.h"

#include <limits.h>
#include <stdio.h>

#define NOWHERE ((size_t)-1)

/* Every integer config value libmccrt reads with ir_config_int, its default when absent, its
 * range, and where rt_train_config keeps it (the lr schedule's are read by lr_schedule.c: checked
 * here with the rest, kept nowhere). */
static const struct {
    const char *key;
    long long dflt, min, max;
    size_t at;
    bool wide; /* a long long field, else an int */
} train_config_fields[] = {
#define INT_FIELD(key, dflt, min) {#key, dflt, min, INT_MAX, offsetof(rt_train_config, key), false}
#define WIDE_FIELD(key, dflt) {#key, dflt, 0, LLONG_MAX, offsetof(rt_train_config, key), true}
    INT_FIELD(micro_batch_size, 1, 1),
    INT_FIELD(seq_length, 1, 1),
    INT_FIELD(accum_steps, 1, 1),
    INT_FIELD(vocab_size, 1, 1),
    INT_FIELD(train_iters, 1, 1),
    INT_FIELD(log_interval, 1, 1),
    INT_FIELD(eval_interval, 1000, 1),
    INT_FIELD(eval_iters, 100, 0),
    {"tensor_model_parallel_size", 1, 1, INT_MAX, offsetof(rt_train_config, tp), false},
    {"data_parallel_size", 1, 1, INT_MAX, offsetof(rt_train_config, dp), false},
    INT_FIELD(tp_rank, 0, 0),
    WIDE_FIELD(seed, 1234),
    WIDE_FIELD(num_params, 0),
    WIDE_FIELD(num_position_params, 0),
    WIDE_FIELD(num_layers, 0),
    WIDE_FIELD(hidden_size, 0),
    {"lr_decay_iters", 0, 0, INT_MAX, NOWHERE, false},
    {"lr_wsd_decay_iters", 0, 0, INT_MAX, NOWHERE, false},
    {"lr_warmup_iters", 0, 0, INT_MAX, NOWHERE, false},
#undef INT_FIELD
#undef WIDE_FIELD
};

bool rt_train_config_read(const ir_module *m, rt_train_config *c, char *err, size_t errlen)
{
    *c = (rt_train_config){0};
    char why[512];
    for (size_t i = 0; i < sizeof train_config_fields / sizeof train_config_fields[0]; i++) {
        const char *key = train_config_fields[i].key, *text = ir_config_get(m, key);
        long long v = train_config_fields[i].dflt;
        if (text && !cli_parse_int(key, text, train_config_fields[i].min, train_config_fields[i].max, &v, why,
                                   sizeof why))
            return snprintf(err, errlen, "config value %s", why), false;
        if (train_config_fields[i].at == NOWHERE)
            continue;
        char *at = (char *)c + train_config_fields[i].at;
        if (train_config_fields[i].wide)
            *(long long *)at = v;
        else
            *(int *)at = (int)v;
    }
    if (c->tp_rank >= c->tp)
        return snprintf(err, errlen, "config value tp_rank %d is out of range: give an integer in 0..%d "
                        "(tensor_model_parallel_size %d)", c->tp_rank, c->tp - 1, c->tp), false;
    return true;
}
