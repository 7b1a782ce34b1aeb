/* train_config.h — the values train_rank reads from its plan's config: the sizes it allocates and
 * divides by, its flags' defaults (the spec's intervals), the parallel layout. Each is range-
 * checked when the plan is loaded, so a zero interval or a word in a plan is an error naming the
 * value, not a SIGFPE or a wrong run later. */
#ifndef MCC_RT_TRAIN_CONFIG_H
#define MCC_RT_TRAIN_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "ir/ir.h"

typedef struct {
    int micro_batch_size, seq_length, accum_steps, vocab_size;
    int train_iters, log_interval, eval_interval, eval_iters; /* defaults of train_rank's flags */
    int tp, dp;
    long long seed, num_params, num_position_params, num_layers, hidden_size;
    long long num_active_params;        /* MoE: the parameters one token multiplies by (0: num_params) */
    int num_attention_heads;
    int qk_head_dim, qk_pos_emb_head_dim, v_head_dim; /* multi-latent attention's head widths (0: standard) */
} rt_train_config;

/* Reads every config value train_rank and libmccrt use (an absent one takes its default), each
 * checked as a whole integer in its range. False with the key, its text and the range in err. */
bool rt_train_config_read(const ir_module *m, rt_train_config *c, char *err, size_t errlen);

#endif
