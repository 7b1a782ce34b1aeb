/* train_main.c — the train_rank main: loads the plan compiled into the executable, opens the
 * Megatron GPT datasets (train and valid splits), initialises parameters and runs the step
 * schedule for --train-iters iterations: a log line (and a JSONL metrics record) every
 * --log-interval, validation every --eval-interval, a stop (or a skipped step) on a non-finite
 * loss or gradient norm. `--dump-dir` writes what the numerics tests compare. */
#include "gpt_dataset.h"
#include "lr_schedule.h"
#include "mcct.h"
#include "program.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The plan object `mcc compile` wrote: the planned IR, the device it targets and that device's
 * kernel image (a cubin for CUDA; empty for the CPU). */
extern const char mcc_plan_text[];
extern const uint64_t mcc_plan_size;
extern const rt_device *const mcc_plan_device;
extern const char mcc_plan_image[];
extern const uint64_t mcc_plan_image_size;

/* Dense bf16 peak of an H100/H200 SXM, the GPUs MFU is quoted against. */
#define TRAIN_PEAK_FLOPS 989e12

typedef struct {
    rt_gpt_data_config data;
    const char *dump_dir, *metrics_file;
    int train_iters, log_interval, eval_interval, eval_iters; /* -1: the spec's value */
    bool skip_nan_steps;
} train_args;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: train_rank --data-path [W1] PREFIX1 [W2 PREFIX2 ...] [flags]\n"
            "  --data-path ...      Megatron indexed datasets PREFIX.bin/.idx (mcc data preprocess writes them),\n"
            "                       blended by weight when several are given: --data-path 0.3 A 0.7 B\n"
            "  --split A,B,C        train,valid,test shares of every dataset's documents (default 969,30,1)\n"
            "  --train-iters N      iterations to run (default: the spec's train_iters)\n"
            "  --log-interval N     a log line (and metrics record) every N iterations (default: the spec's, 1)\n"
            "  --eval-interval N    validate every N iterations and at the end (default: the spec's, 1000)\n"
            "  --eval-iters N       global batches of the valid split per validation; 0: none (default: the spec's, 100)\n"
            "  --metrics-file PATH  append one JSON object per log line and per validation (`mcc plot` draws them)\n"
            "  --skip-nan-steps     skip the optimizer step of an iteration whose loss or grad norm is NaN/Inf\n"
            "                       instead of stopping the run\n"
            "  --dump-dir DIR       write initial parameters, step-1 gradients and logits, batches and\n"
            "                       per-step loss/lr/grad norm for the numerics tests\n"
            "  --print-plan         print the compiled plan (IR) and exit\n");
}

static int parse_int_flag(const char *flag, const char *v, int min)
{
    char *end;
    long n = v ? strtol(v, &end, 10) : 0;
    if (!v || *end || n < min || n > 1000000000) {
        fprintf(stderr, "train_rank: error: %s needs an integer >= %d, got '%s'\n", flag, min, v ? v : "(nothing)");
        exit(2);
    }
    return (int)n;
}

static train_args parse_args(int argc, char **argv)
{
    train_args a = {.data = {.split = "969,30,1"}, .train_iters = -1, .log_interval = -1, .eval_interval = -1,
                    .eval_iters = -1};
    char err[1024];
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int consumed;
        if (!strcmp(argv[i], "--data-path")) {
            if (!rt_gpt_data_parse_paths(argc - i - 1, argv + i + 1, &consumed, &a.data, err, sizeof err)) {
                fprintf(stderr, "train_rank: error: %s\n", err);
                exit(2);
            }
            i += consumed;
        } else if (!strcmp(argv[i], "--split") && v)
            a.data.split = argv[++i];
        else if (!strcmp(argv[i], "--dump-dir") && v)
            a.dump_dir = argv[++i];
        else if (!strcmp(argv[i], "--metrics-file") && v)
            a.metrics_file = argv[++i];
        else if (!strcmp(argv[i], "--train-iters"))
            a.train_iters = parse_int_flag(argv[i], v, 1), i++;
        else if (!strcmp(argv[i], "--log-interval"))
            a.log_interval = parse_int_flag(argv[i], v, 1), i++;
        else if (!strcmp(argv[i], "--eval-interval"))
            a.eval_interval = parse_int_flag(argv[i], v, 1), i++;
        else if (!strcmp(argv[i], "--eval-iters"))
            a.eval_iters = parse_int_flag(argv[i], v, 0), i++;
        else if (!strcmp(argv[i], "--skip-nan-steps"))
            a.skip_nan_steps = true;
        else if (!strcmp(argv[i], "--print-plan")) {
            fwrite(mcc_plan_text, 1, mcc_plan_size, stdout);
            exit(0);
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            exit(0);
        } else {
            fprintf(stderr, "train_rank: error: unknown or incomplete flag '%s'\n", argv[i]);
            usage(stderr);
            exit(2);
        }
    }
    if (!a.data.n) {
        fprintf(stderr, "train_rank: error: --data-path is required (make a dataset with `mcc data preprocess`)\n");
        exit(2);
    }
    return a;
}

/* A flag given on the command line, else the plan's config value of the spec field. */
static int flag_or_config(int flag, const ir_module *m, const char *key, int dflt)
{
    return flag >= 0 ? flag : (int)ir_config_int(m, key, dflt);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- the run ------------------------------------------------------------------------------ */

typedef struct {
    rt_program *p;
    const ir_module *m;
    train_args a;
    int B, T, accum, iters, eval_interval, eval_iters, evals_done;
    int micro, eval, opt, zero;     /* function indices */
    rt_lr_schedule lr;
    rt_gpt_data *data;
    int32_t *tokens, *targets, *sample; /* [B,T], [B,T], [T+1] */
    ir_type bt_type;
    double flops_per_token;         /* 6N + 12 L d T: matmul work forward and backward */
    FILE *metrics;
    rt_mcct batches;                /* --dump-dir */
    FILE *steps;
} train_run;

/* Loads rows first .. first+B-1 of split as @tokens/@targets of func. */
static void load_batch(train_run *r, int func, int split, int64_t first)
{
    int T = r->T;
    for (int b = 0; b < r->B; b++) {
        rt_gpt_data_sample(r->data, split, first + b, r->sample);
        memcpy(r->tokens + (size_t)b * T, r->sample, sizeof(int32_t) * (size_t)T);
        memcpy(r->targets + (size_t)b * T, r->sample + 1, sizeof(int32_t) * (size_t)T);
    }
    size_t bytes = ir_bytes(&r->bt_type);
    rt_program_set_input(r->p, func, "tokens", r->tokens, bytes);
    rt_program_set_input(r->p, func, "targets", r->targets, bytes);
}

/* Runs func (micro_step or eval_step) on the micro-batch of split starting at sample first. */
static float run_micro_batch(train_run *r, int func, int split, int64_t first)
{
    load_batch(r, func, split, first);
    rt_program_run(r->p, func);
    float loss;
    rt_program_get_output(r->p, func, "loss", &loss, sizeof loss);
    return loss;
}

/* ---- --dump-dir ---------------------------------------------------------------------------- */

static FILE *dump_open(const train_args *a, const char *name, rt_mcct *w)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", a->dump_dir, name);
    if (w) {
        if (!rt_mcct_open(w, path))
            goto fail;
        return w->f;
    }
    FILE *f = fopen(path, "w");
    if (f)
        return f;
fail:
    fprintf(stderr, "train_rank: error: cannot write %s (does --dump-dir exist and is it writable?)\n", path);
    exit(1);
}

/* All globals of one kind, named by the parameter they belong to. */
static void dump_globals(const train_args *a, rt_program *p, ir_global_kind kind, const char *file)
{
    rt_mcct w;
    dump_open(a, file, &w);
    for (int g = 0; g < p->m->nglobals; g++) {
        const ir_global *gl = &p->m->globals[g];
        if (gl->kind != kind)
            continue;
        char name[256];
        snprintf(name, sizeof name, "%s", gl->name);
        char *suffix = kind == IR_GLOBAL_GRAD ? strrchr(name, '.') : NULL;
        if (suffix)
            *suffix = 0; /* "<param>.grad" -> "<param>" */
        void *host = malloc(ir_bytes(&gl->type));
        rt_program_read_global(p, g, host);
        rt_mcct_add(&w, name, &gl->type, host);
        free(host);
    }
    rt_mcct_close(&w);
}

static void dump_logits(train_run *r)
{
    const ir_func *f = r->m->funcs[r->micro];
    int i = rt_program_find(r->p, r->micro, IR_OP_OUTPUT, "logits");
    if (i < 0)
        return;
    rt_mcct w;
    dump_open(&r->a, "logits_step1.mcct", &w);
    const ir_type *t = ir_vtype(f, f->instrs[i].args[0]);
    void *host = malloc(ir_bytes(t));
    rt_program_get_output(r->p, r->micro, "logits", host, ir_bytes(t));
    rt_mcct_add(&w, "logits", t, host);
    free(host);
    rt_mcct_close(&w);
}

static void dump_batch(train_run *r, int it, int mb)
{
    char name[64];
    snprintf(name, sizeof name, "tokens.%d.%d", it, mb);
    rt_mcct_add(&r->batches, name, &r->bt_type, r->tokens);
    snprintf(name, sizeof name, "targets.%d.%d", it, mb);
    rt_mcct_add(&r->batches, name, &r->bt_type, r->targets);
    if (it == 1 && mb == 0)
        dump_logits(r);
}

/* ---- one iteration ------------------------------------------------------------------------- */

typedef struct {
    double loss, lr, grad_norm;
    bool skipped;
} step_result;

/* Stops the run, or (--skip-nan-steps) drops the step's gradients; what names the bad value. */
static bool non_finite(train_run *r, int it, const char *what, double v)
{
    if (!r->a.skip_nan_steps) {
        fprintf(stderr, "train_rank: error: iteration %d: %s is %g, the first non-finite value of the step; "
                        "stopping (lower --lr, raise --clip-grad's effect with a smaller value, check the data, or "
                        "pass --skip-nan-steps to skip such steps)\n", it, what, v);
        exit(1);
    }
    fprintf(stderr, "train_rank: warning: iteration %d: %s is %g; skipping the optimizer step\n", it, what, v);
    rt_program_run(r->p, r->zero);
    return false;
}

/* Sample of row b of micro-batch mb of iteration it: fixed by the global batch order, so the
 * data a step sees does not depend on how the batch is laid out. */
static int64_t train_sample(const train_run *r, int it, int mb, int b)
{
    return ((int64_t)(it - 1) * r->accum + mb) * r->B + b;
}

static step_result train_step(train_run *r, int it)
{
    step_result s = {.lr = rt_lr_at(&r->lr, it)};
    bool finite = true;
    for (int mb = 0; mb < r->accum; mb++) {
        float loss = run_micro_batch(r, r->micro, RT_SPLIT_TRAIN, train_sample(r, it, mb, 0));
        if (r->a.dump_dir)
            dump_batch(r, it, mb);
        if (finite && !isfinite(loss)) {
            char what[64];
            snprintf(what, sizeof what, "the loss of micro-batch %d", mb);
            finite = non_finite(r, it, what, loss);
        }
        s.loss += loss / r->accum;
    }
    if (r->a.dump_dir && it == 1)
        dump_globals(&r->a, r->p, IR_GLOBAL_GRAD, "grads_step1.mcct");
    if (!finite)
        return s.skipped = true, s;
    float lr_now = (float)s.lr, step_now = (float)it, norm;
    rt_program_set_input(r->p, r->opt, "lr", &lr_now, sizeof lr_now);
    rt_program_set_input(r->p, r->opt, "step", &step_now, sizeof step_now);
    rt_program_run(r->p, r->opt);
    rt_program_get_output(r->p, r->opt, "grad_norm", &norm, sizeof norm);
    s.grad_norm = norm;
    /* A non-finite norm makes the clip coefficient 0 (or NaN): with --skip-nan-steps the step
     * must not have applied, so the norm is checked by the optimizer's clipping; see README. */
    if (!isfinite(norm))
        non_finite(r, it, "the gradient norm", norm), s.skipped = true;
    if (r->steps)
        fprintf(r->steps, "%d %.9g %.9g %.9g\n", it, s.loss, s.lr, s.grad_norm);
    return s;
}
