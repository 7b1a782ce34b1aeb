/* train_config.c — the plan's config values train_rank uses, range-checked (train_config.h). */
#include "train_config.h"

#include "common/cli.h"

#include <limits.h>
#include <stdio.h>

#define NOWHERE ((size_t)-1)

/* Every integer config value train_rank and libmccrt read (ir_cfg_int), its range, and where
 * rt_train_config keeps it (the lr schedule's are read by lr_schedule.c: checked here with the
 * rest, kept nowhere). Names and defaults are ir/config.def's. */
static const struct {
    ir_cfg key;
    long long min, max;
    size_t at;
    bool wide; /* a long long field, else an int */
} train_config_fields[] = {
#define INT_AT(key, min, field) {key, min, INT_MAX, offsetof(rt_train_config, field), false}
#define WIDE_AT(key, field) {key, 0, LLONG_MAX, offsetof(rt_train_config, field), true}
    INT_AT(IR_CFG_MICRO_BATCH_SIZE, 1, micro_batch_size),
    INT_AT(IR_CFG_SEQ_LENGTH, 1, seq_length),
    INT_AT(IR_CFG_ACCUM_STEPS, 1, accum_steps),
    INT_AT(IR_CFG_VOCAB_SIZE, 1, vocab_size),
    INT_AT(IR_CFG_TRAIN_ITERS, 1, train_iters),
    INT_AT(IR_CFG_LOG_INTERVAL, 1, log_interval),
    INT_AT(IR_CFG_EVAL_INTERVAL, 1, eval_interval),
    INT_AT(IR_CFG_EVAL_ITERS, 0, eval_iters),
    INT_AT(IR_CFG_TENSOR_MODEL_PARALLEL_SIZE, 1, tp),
    INT_AT(IR_CFG_DATA_PARALLEL_SIZE, 1, dp),
    WIDE_AT(IR_CFG_SEED, seed),
    WIDE_AT(IR_CFG_NUM_PARAMS, num_params),
    WIDE_AT(IR_CFG_NUM_ACTIVE_PARAMS, num_active_params),
    WIDE_AT(IR_CFG_NUM_POSITION_PARAMS, num_position_params),
    WIDE_AT(IR_CFG_NUM_LAYERS, num_layers),
    WIDE_AT(IR_CFG_HIDDEN_SIZE, hidden_size),
    INT_AT(IR_CFG_NUM_ATTENTION_HEADS, 0, num_attention_heads),
    INT_AT(IR_CFG_QK_HEAD_DIM, 0, qk_head_dim),
    INT_AT(IR_CFG_QK_POS_EMB_HEAD_DIM, 0, qk_pos_emb_head_dim),
    INT_AT(IR_CFG_V_HEAD_DIM, 0, v_head_dim),
    {IR_CFG_LR_DECAY_ITERS, 0, INT_MAX, NOWHERE, false},
    {IR_CFG_LR_WSD_DECAY_ITERS, 0, INT_MAX, NOWHERE, false},
    {IR_CFG_LR_WARMUP_ITERS, 0, INT_MAX, NOWHERE, false},
    {IR_CFG_TRAIN_SAMPLES, 0, INT_MAX, NOWHERE, false},
    {IR_CFG_LR_DECAY_SAMPLES, 0, INT_MAX, NOWHERE, false},
    {IR_CFG_LR_WSD_DECAY_SAMPLES, 0, INT_MAX, NOWHERE, false},
    {IR_CFG_LR_WARMUP_SAMPLES, 0, INT_MAX, NOWHERE, false},
    {IR_CFG_GLOBAL_BATCH_SIZE, 1, INT_MAX, NOWHERE, false}, /* the sample-based schedule's step */
#undef INT_AT
#undef WIDE_AT
};

bool rt_train_config_read(const ir_module *m, rt_train_config *c, char *err, size_t errlen)
{
    *c = (rt_train_config){0};
    char why[512];
    for (size_t i = 0; i < sizeof train_config_fields / sizeof train_config_fields[0]; i++) {
        ir_cfg key = train_config_fields[i].key;
        long long v;
        if (!cli_parse_int(ir_cfgs[key].key, ir_cfg_value(m, key), train_config_fields[i].min,
                           train_config_fields[i].max, &v, why, sizeof why))
            return snprintf(err, errlen, "config value %s", why), false;
        if (train_config_fields[i].at == NOWHERE)
            continue;
        char *at = (char *)c + train_config_fields[i].at;
        if (train_config_fields[i].wide)
            *(long long *)at = v;
        else
            *(int *)at = (int)v;
    }
    return true;
}
