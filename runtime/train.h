/* train.h — train_rank's shared types (its flags, the run, a step's result, a log line's window)
 * and the entry points of its files: train_flags.c (the flags), train_step.c (an iteration and a
 * validation), train_log.c (the log lines, metrics and TensorBoard), train_dumps.c (--dump-dir
 * and the non-finite checks); train_main.c sets the run up and loops. */
#ifndef MCC_RT_TRAIN_H
#define MCC_RT_TRAIN_H

#include "checkpoint_io.h"
#include "gpt_dataset.h"
#include "lr_schedule.h"
#include "mcct.h"
#include "metrics.h"
#include "moe_stats.h"
#include "parallel.h"
#include "program.h"
#include "sampler.h"
#include "tensorboard.h"
#include "train_config.h"

#include <stdio.h>

/* The plan object `mcc compile` wrote: the planned IR, the device it targets and that device's
 * kernel image (a cubin for CUDA; empty for the CPU). */
extern const char mcc_plan_text[]; /* the plan every rank runs, its rank terms unresolved */
extern const uint64_t mcc_plan_size;
extern const rt_device *const mcc_plan_device;
extern const char mcc_plan_image[];
extern const uint64_t mcc_plan_image_size;

/* train_rank's settings, runtime/train_flags.def's members. */
typedef struct {
    rt_gpt_data_config data;
    const char *dump_dir, *metrics_file, *tensorboard_dir;
    int dataloader_type;            /* an rt_sampler_kind: --dataloader-type's choice */
    int train_iters, log_interval, eval_interval, eval_iters; /* -1: the spec's value */
    bool skip_nan_steps, no_data_sharding;
    rt_ckpt_args ckpt;              /* --save, --load, ... */
} train_args;

/* Multi-token prediction's losses (frontend/model.c's mtp_block: the step function's outputs of role
 * mtp_loss, one a depth), unscaled, for the log line as Megatron's "mtp_k loss". */
typedef struct {
    int depths;
    int func;                       /* the step function */
    int *out;                       /* [depths]: depth k's output instruction */
    double *step;                   /* [depths]: the step's sums over its micro-batches */
    double *window;                 /* [depths]: the dp means of the steps applied since the last log line */
    char (*names)[24];              /* [depths]: the metrics' names, mtp_K_loss */
} train_mtp_losses;

/* One rank's run: the plan, its values and layout, the data, the sinks, the counters. */
typedef struct {
    rt_program *p;
    const ir_module *m;
    rt_train_config cfg;            /* the plan's values, range-checked */
    rt_parallel par;
    bool writer;                    /* rank 0: logs, metrics and dump files */
    bool stage_writer;              /* the first rank of its pipeline stage (rank 0 without one): its
                                       stage's tensors in the dumps */
    train_args a;
    int B, T, accum, iters, eval_interval, eval_iters, evals_done, steps_applied;
    int start;                      /* the iteration a loaded checkpoint ended (0: a fresh run) */
    int norm, zero;                 /* the functions of kinds grad_norm and zero_grads (--skip-nan-steps) */
    rt_lr_schedule lr;
    rt_gpt_data *data;
    rt_sampler sampler[RT_SPLIT_VALID + 1]; /* the train and valid splits' (--dataloader-type) */
    int32_t *tokens, *targets, *sample; /* [B,T], [B,T], [T+1] */
    ir_type bt_type;
    double flops_per_token;         /* 6N + 12 L d T: matmul work forward and backward */
    rt_metrics metrics;             /* open when metrics.path is set */
    rt_tb *tb;                      /* --tensorboard-dir, or NULL */
    rt_mcct batches;                /* --dump-dir */
    rt_ckpt_writer *ckpt;           /* the saves (checkpoint_io.c), NULL before the first */
    double t_start;                 /* the process's start: --exit-duration-in-mins counts from it */
    FILE *steps;
    char steps_path[4096];
    rt_moe_stats moe;               /* an MoE model's router statistics (moe false: none) */
    train_mtp_losses mtp;           /* multi-token prediction's losses (depths 0: none) */
    double host_logged[4];          /* rt_program.host_times at the last log line */
    char **args, *args_text;        /* the plan's baked flags, then the command line's (train_with_baked_flags) */
} train_run;

/* One iteration's outcome: its loss (dp mean), lr and gradient norm, whether it was skipped. */
typedef struct {
    double loss, lr, grad_norm;
    double moe_aux, moe_z, moe_imbalance, moe_dropped; /* an MoE model's (moe_stats.h): stages combined, dp mean */
    bool skipped;
} train_step_result;

/* What a log line averages over: the iterations since the last one. */
typedef struct {
    double loss, seconds;
    double moe_aux, moe_z, moe_imbalance, moe_dropped; /* summed over the steps applied */
    int iters, skipped;
} train_log_window;

/* ---- train_flags.c: the flags -------------------------------------------------------------- */

/* argv's flags (the actions done at once: --help, --version, --print-plan). The data flags are
 * checked where the whole list is read (complete: the plan's baked flags before argv's). Exits 2
 * naming a bad flag. */
train_args train_parse_args(int argc, char **argv, bool complete);
/* The plan's train_rank_args (the flags mcc compile was given, one a line) as arguments, then the
 * command line's: a flag given both ways takes the command line's value, which comes later. */
char **train_with_baked_flags(const ir_module *m, int argc, char **argv, int *nout, char **text);

/* ---- train_step.c: an iteration, a validation --------------------------------------------- */

/* The instruction of func's input or output (op) of role kind (index 0), or -1. */
int train_io(const train_run *r, int func, ir_op op, ir_role_kind kind);
/* Iteration it: the plan's train program, step by step. A skipped update ends it. */
train_step_result train_step(train_run *r, int it);
/* eval_iters global batches of the valid split through the plan's eval program, logged. */
void train_evaluate(train_run *r, int it);

/* ---- train_log.c: the log lines, metrics records and TensorBoard --------------------------- */

/* The boxed table of the run's configuration, then the datasets'. */
void train_print_config(const train_run *r);
/* The step's line after the run's first iteration: the time from start-up, the memory in use. */
void train_log_first_step(const train_run *r, double t_start);
/* Adds iteration s, seconds long, to the window of the next log line. */
void train_log_add(train_log_window *w, const train_step_result *s, double seconds);
/* Megatron's training log line for the window ending at iteration it (last: its step), and its
 * metrics record. Collective under pipeline parallelism: every rank calls. */
void train_log_line(train_run *r, int it, const train_step_result *last, const train_log_window *w);
/* Megatron's validation line and its metrics record. */
void train_log_validation(train_run *r, int it, double loss, double seconds);
/* MoE aux-loss-free balancing: the min and max over every EXPERT_BIAS global's bias row; false
 * when the model has none. */
bool train_expert_bias_range(const train_run *r, double *lo, double *hi);

/* ---- train_dumps.c: --dump-dir, and the non-finite checks ---------------------------------- */

/* The dump directory, batches.mcct and steps.txt opened, the initial parameters written. */
void train_dumps_start(train_run *r);
/* All globals of kind (parameters: fp32 masters; gradients: as reduced), whole, named by their
 * parameter, into file. Collective: every rank calls. */
void train_dump_globals(train_run *r, ir_global_kind kind, const char *file);
/* Micro-batch mb of iteration it of func: its tokens and targets (and step 1's first logits). */
void train_dump_batch(train_run *r, int func, int it, int mb);
/* The step's line of steps.txt: iteration, loss, lr, grad norm. */
void train_dump_step(const train_run *r, int it, const train_step_result *s);
/* The final parameters (FP8 histories, expert biases), the batch and step files closed. */
void train_dumps_finish(train_run *r);

/* Stops the run, or with --skip-nan-steps warns; what names the bad value v. Returns false: the
 * step must not be applied. */
bool train_non_finite(const train_run *r, int it, const char *what, double v);
/* Whether micro-batch mb's loss is finite; a bad one goes to train_non_finite, named by the FP8
 * amax it came from where one of this rank's is bad. */
bool train_loss_finite(const train_run *r, int it, int mb, float loss);
/* FP8 delayed scaling: whether every rank's step amaxes are finite (a bad one, named, goes to
 * train_non_finite). Collective: every rank calls. */
bool train_fp8_amaxes_finite(train_run *r, int it);
/* Whether the plan's FP8 GEMMs scale by amax histories (fp8_recipe delayed). */
bool train_fp8_delayed(const ir_module *m);

#endif
