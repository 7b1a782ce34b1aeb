/* train_main.c — the train_rank main: loads the plan compiled into the executable, opens the
 * Megatron GPT datasets (train and valid splits), initialises parameters and runs the step
 * schedule for --train-iters iterations: a log line (and a JSONL metrics record) every
 * --log-interval, validation every --eval-interval, a stop (or a skipped step) on a non-finite
 * loss or gradient norm. `--dump-dir` writes what the numerics tests compare. Under a parallel
 * layout each rank runs the plan of its tensor-parallel rank on its share of every batch; rank 0
 * logs and writes the dumps, with split tensors gathered whole. */
#include "gpt_dataset.h"
#include "launch.h"
#include "parallel.h"
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
extern const char mcc_plan_text[]; /* one plan per tensor-parallel rank, each NUL-terminated */
extern const uint64_t mcc_plan_size;
extern const uint64_t mcc_plan_count;
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
            "  --print-plan         print the compiled plan (IR) and exit\n"
            "  --nproc-per-node N   start N local ranks of this executable, like torchrun (or launch with\n"
            "                       torchrun, srun or mpirun: ranks come from their environment)\n");
}

/* min: 0 or 1 */
static int parse_int_flag(const char *flag, const char *v, int min)
{
    char *end;
    long n = v ? strtol(v, &end, 10) : 0;
    if (!v || *end || n < min || n > 1000000000) {
        fprintf(stderr, "train_rank: error: %s needs a %s integer, got '%s'\n", flag, min ? "positive" : "non-negative",
                v ? v : "(nothing)");
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
    rt_parallel par;
    bool writer;                    /* rank 0: logs, metrics and dump files */
    int reduce;                     /* the `reduce_grads` function (data parallel), or -1 */
    train_args a;
    int B, T, accum, iters, eval_interval, eval_iters, evals_done, steps_applied;
    int micro, eval, opt, norm, zero; /* function indices */
    rt_lr_schedule lr;
    rt_gpt_data *data;
    int32_t *tokens, *targets, *sample; /* [B,T], [B,T], [T+1] */
    ir_type bt_type;
    double flops_per_token;         /* 6N + 12 L d T: matmul work forward and backward */
    FILE *metrics;
    rt_mcct batches;                /* --dump-dir */
    FILE *steps;
} train_run;

/* Loads rows first .. first+B-1 of split as @tokens/@targets of func, and tells a function with
 * dropout the first sample's global index (@first_sample: its masks are drawn from it; with
 * --tp-comm-interleave also @first_sample.half1, the second half's). */
static void load_batch(train_run *r, int func, int split, int64_t first)
{
    if (rt_program_find(r->p, func, IR_OP_INPUT, "first_sample") >= 0)
        rt_program_set_input(r->p, func, "first_sample", &first, sizeof first);
    int64_t half = first + r->B / 2;
    if (rt_program_find(r->p, func, IR_OP_INPUT, "first_sample.half1") >= 0)
        rt_program_set_input(r->p, func, "first_sample.half1", &half, sizeof half);
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

/* Global g as the single-rank program holds it: gathered over tp when split there. Under ZeRO the
 * reduced gradient is @<p>.grad_shard's blocks, gathered over dp. Collective: every rank calls. */
static void *whole_global(train_run *r, int g, ir_type *whole)
{
    const ir_global *gl = &r->m->globals[g];
    char shard_name[300];
    snprintf(shard_name, sizeof shard_name, "%s_shard", gl->name); /* "<p>.grad" -> "<p>.grad_shard" */
    int shard = gl->kind == IR_GLOBAL_GRAD ? ir_global_find(r->m, shard_name) : -1;
    size_t bytes = ir_bytes(&gl->type);
    void *local = malloc(bytes);
    if (shard >= 0) {
        void *block = malloc(ir_bytes(&r->m->globals[shard].type));
        rt_program_read_global(r->p, shard, block);
        rt_parallel_gather_dp(&r->par, r->p, block, ir_bytes(&r->m->globals[shard].type), local);
        free(block);
    } else {
        rt_program_read_global(r->p, g, local);
    }
    *whole = gl->type;
    for (int i = 0; i < whole->ndim; i++)
        if (whole->shard[i] == IR_AXIS_TP)
            whole->dims[i] *= r->par.tp;
    memset(whole->shard, 0, sizeof whole->shard);
    void *full = malloc(ir_bytes(whole));
    rt_parallel_gather_tp(&r->par, r->p, &gl->type, local, full);
    free(local);
    return full;
}

/* All parameters (fp32 masters), or all gradient accumulators, named by their parameter. */
static void dump_globals(train_run *r, ir_global_kind kind, const char *file)
{
    rt_mcct w;
    if (r->writer)
        dump_open(&r->a, file, &w);
    for (int g = 0; g < r->m->nglobals; g++) {
        const ir_global *gl = &r->m->globals[g];
        size_t len = strlen(gl->name);
        if (gl->kind != kind || (kind == IR_GLOBAL_GRAD && (len < 5 || strcmp(gl->name + len - 5, ".grad"))))
            continue;
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(kind == IR_GLOBAL_GRAD ? len - 5 : len), gl->name);
        ir_type whole;
        void *host = whole_global(r, g, &whole);
        if (r->writer)
            rt_mcct_add(&w, name, &whole, host);
        free(host);
    }
    if (r->writer)
        rt_mcct_close(&w);
}

static void dump_logits(train_run *r)
{
    const ir_func *f = r->m->funcs[r->micro];
    int i = rt_program_find(r->p, r->micro, IR_OP_OUTPUT, "logits");
    if (i < 0)
        return;
    const ir_type *t = ir_vtype(f, f->instrs[i].args[0]);
    ir_type whole = *t;
    for (int d = 0; d < whole.ndim; d++)
        if (whole.shard[d] == IR_AXIS_TP)
            whole.dims[d] *= r->par.tp;
    memset(whole.shard, 0, sizeof whole.shard);
    void *host = malloc(ir_bytes(t)), *full = malloc(ir_bytes(&whole));
    rt_program_get_output(r->p, r->micro, "logits", host, ir_bytes(t));
    rt_parallel_gather_tp(&r->par, r->p, t, host, full);
    if (r->writer) {
        rt_mcct w;
        dump_open(&r->a, "logits_step1.mcct", &w);
        rt_mcct_add(&w, "logits", &whole, full);
        rt_mcct_close(&w);
    }
    free(host);
    free(full);
}

static void dump_batch(train_run *r, int it, int mb)
{
    if (it == 1 && mb == 0)
        dump_logits(r); /* collective: every rank */
    if (!r->writer)
        return;
    char name[64];
    snprintf(name, sizeof name, "tokens.%d.%d", it, mb);
    rt_mcct_add(&r->batches, name, &r->bt_type, r->tokens);
    snprintf(name, sizeof name, "targets.%d.%d", it, mb);
    rt_mcct_add(&r->batches, name, &r->bt_type, r->targets);
}

/* ---- one iteration ------------------------------------------------------------------------- */

typedef struct {
    double loss, lr, grad_norm;
    bool skipped;
} step_result;

/* Stops the run, or with --skip-nan-steps warns; what names the bad value. Returns false: the
 * step must not be applied. */
static bool non_finite(train_run *r, int it, const char *what, double v)
{
    const char *bad = isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf";
    if (!r->a.skip_nan_steps) {
        fprintf(stderr, "train_rank: error: iteration %d: %s is %s, the step's first non-finite value; stopping "
                        "(lower --lr or check the data; --skip-nan-steps skips such steps instead)\n", it, what, bad);
        exit(1);
    }
    fprintf(stderr, "train_rank: warning: iteration %d: %s is %s; skipping the optimizer step\n", it, what, bad);
    return false;
}

/* The first sample of this rank's micro-batch mb of iteration it; row b takes the next ones, in
 * Megatron's sampler order (rt_parallel_sample), so the data a step sees does not depend on the
 * layout. */
static int64_t train_sample(const train_run *r, int it, int mb)
{
    return rt_parallel_sample(&r->par, it, r->accum, mb, r->B, 0);
}

static step_result train_step(train_run *r, int it)
{
    /* Megatron's scheduler and Adam count only the steps that updated the weights. */
    int step = r->steps_applied + 1;
    step_result s = {.lr = rt_lr_at(&r->lr, step)};
    bool finite = true;
    for (int mb = 0; mb < r->accum; mb++) {
        float loss = run_micro_batch(r, r->micro, RT_SPLIT_TRAIN, train_sample(r, it, mb));
        if (r->a.dump_dir)
            dump_batch(r, it, mb);
        if (finite && !isfinite(loss)) {
            char what[64];
            snprintf(what, sizeof what, "the loss of micro-batch %d", mb);
            finite = non_finite(r, it, what, loss);
        }
        s.loss += loss / r->accum;
    }
    if (r->reduce >= 0)
        rt_program_run(r->p, r->reduce);
    s.loss = rt_parallel_mean(&r->par, r->p, (float)s.loss);
    if (r->a.dump_dir && it == 1)
        dump_globals(r, IR_GLOBAL_GRAD, "grads_step1.mcct");
    float norm = 0;
    if (finite && r->a.skip_nan_steps) { /* the update must not see a bad gradient: check first */
        rt_program_run(r->p, r->norm);
        rt_program_get_output(r->p, r->norm, "grad_norm", &norm, sizeof norm);
        finite = isfinite(norm) || non_finite(r, it, "the gradient norm", norm);
    }
    if (!finite) { /* drop the step: its gradients must not leak into the next one */
        rt_program_run(r->p, r->zero);
        return s.skipped = true, s;
    }
    float lr_now = (float)s.lr, step_now = (float)step;
    rt_program_set_input(r->p, r->opt, "lr", &lr_now, sizeof lr_now);
    rt_program_set_input(r->p, r->opt, "step", &step_now, sizeof step_now);
    rt_program_run(r->p, r->opt);
    rt_program_get_output(r->p, r->opt, "grad_norm", &norm, sizeof norm);
    if (!isfinite(norm))
        non_finite(r, it, "the gradient norm", norm);
    s.grad_norm = norm;
    r->steps_applied++;
    if (r->steps)
        fprintf(r->steps, "%d %.9g %.9g %.9g\n", it, s.loss, s.lr, s.grad_norm);
    return s;
}

/* ---- validation ---------------------------------------------------------------------------- */

/* eval_iters global batches of the valid split through eval_step (forward only: the weights and
 * gradients are untouched). Like Megatron's, the valid samples continue from one validation to
 * the next. */
static void evaluate(train_run *r, int it)
{
    double t0 = now_s(), loss = 0;
    int n = r->eval_iters * r->accum, dp = r->par.dp;
    for (int k = 0; k < n; k++) {
        int64_t micro = ((int64_t)r->evals_done * n + k) * dp + r->par.dp_rank;
        loss += run_micro_batch(r, r->eval, RT_SPLIT_VALID, micro * r->B) / n;
    }
    loss = rt_parallel_mean(&r->par, r->p, (float)loss);
    r->evals_done++;
    double ppl = exp(loss < 700 ? loss : 700);
    printf("validation loss at iteration %d | lm loss value: %.6E | lm loss PPL: %.6E | %.1f s\n", it, loss, ppl,
           now_s() - t0);
    if (r->metrics)
        fprintf(r->metrics, "{\"iteration\": %d, \"valid_loss\": %.9g, \"valid_ppl\": %.9g}\n", it, loss, ppl);
}

/* ---- logging ------------------------------------------------------------------------------- */

/* What a log line averages over: the iterations since the last one. */
typedef struct {
    double loss, seconds;
    int iters, skipped;
} log_window;

/* Bytes of device memory in use; on the CPU the process's resident set. */
static double memory_gib(const train_run *r)
{
    size_t used = r->p->dev->memory_in_use(r->p);
    long pages = 0, rss = 0;
    FILE *f = used ? NULL : fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &rss) == 2)
            used = (size_t)rss * (size_t)sysconf(_SC_PAGESIZE);
        fclose(f);
    }
    return used / 1073741824.0;
}

static bool on_gpu(const train_run *r) { return strcmp(r->p->dev->name, "cpu") != 0; }

/* v as a JSON number; null for NaN/Inf (JSON has neither) or when absent. */
static const char *json_num(char buf[32], double v, bool present)
{
    if (!present || !isfinite(v))
        return "null";
    snprintf(buf, 32, "%.9g", v);
    return buf;
}

static void log_line(train_run *r, int it, const step_result *last, const log_window *w)
{
    int done = w->iters - w->skipped;
    double loss = done ? w->loss / done : NAN, ms = w->seconds * 1e3 / w->iters;
    /* each dp rank's tokens, shared by its tp ranks */
    double tok_s = (double)r->B * r->T * r->accum / r->par.tp / (ms / 1e3), flops = tok_s * r->flops_per_token;
    double mfu = flops / TRAIN_PEAK_FLOPS, mem = memory_gib(r);
    long long samples = (long long)it * r->B * r->accum * r->par.dp;
    char mfu_text[32] = "-";
    if (on_gpu(r))
        snprintf(mfu_text, sizeof mfu_text, "%.1f%%", 100 * mfu);
    printf("iter %6d/%d | samples %9lld | loss %8.4f | lr %.3e | grad norm %8.4f | %8.1f ms | %9.0f tok/s/GPU | "
           "%7.2f TFLOP/s/GPU | MFU %s | mem %.2f GiB", it, r->iters, samples, loss, last->lr, last->grad_norm, ms,
           tok_s, flops / 1e12, mfu_text, mem);
    if (w->skipped)
        printf(" | skipped %d", w->skipped);
    printf("\n");
    if (!r->metrics)
        return;
    char b[3][32];
    fprintf(r->metrics, "{\"iteration\": %d, \"consumed_samples\": %lld, \"loss\": %s, \"lr\": %.9g, \"grad_norm\": %s, "
                        "\"ms_per_iter\": %.6g, \"tokens_per_s_per_gpu\": %.6g, \"tflops_per_gpu\": %.6g, \"mfu\": %s, "
                        "\"memory_gib\": %.6g, \"skipped\": %d}\n",
            it, samples, json_num(b[0], loss, true), last->lr, json_num(b[1], last->grad_norm, !last->skipped), ms,
            tok_s, flops / 1e12, json_num(b[2], mfu, on_gpu(r)), mem, w->skipped);
}

/* ---- start-up ------------------------------------------------------------------------------ */

/* The train and valid splits the run consumes. Validation needs a valid split with documents:
 * when --split leaves it none, the run trains without validation and says why. */
static rt_gpt_data *open_data(train_run *r)
{
    rt_gpt_data_config *c = &r->a.data;
    int64_t batch = (int64_t)r->B * r->accum * r->par.dp;
    int evals = r->iters / r->eval_interval + (r->iters % r->eval_interval != 0);
    c->seq_length = r->T;
    c->seed = ir_config_int(r->m, "seed", 1234);
    c->log = r->writer ? stderr : NULL; /* the indices' memory and a long build's progress, once */
    c->num_samples[RT_SPLIT_TRAIN] = (int64_t)r->iters * batch;
    c->num_samples[RT_SPLIT_VALID] = (int64_t)evals * r->eval_iters * batch;
    char err[1024], why[1024];
    rt_gpt_data *d = rt_gpt_data_open(c, err, sizeof err);
    if (!d && r->eval_iters) {
        snprintf(why, sizeof why, "%s", err);
        c->num_samples[RT_SPLIT_VALID] = 0;
        if ((d = rt_gpt_data_open(c, err, sizeof err))) {
            fprintf(stderr, "train_rank: warning: no validation (%s); --eval-iters 0 silences this\n", why);
            r->eval_iters = 0;
        }
    }
    if (!d) {
        fprintf(stderr, "train_rank: error: %s\n", err);
        exit(1);
    }
    int max_token = rt_gpt_data_max_token(d), V = (int)ir_config_int(r->m, "vocab_size", 1);
    if (max_token >= V) {
        fprintf(stderr, "train_rank: error: --data-path holds token id %d but the model's vocab_size is %d; "
                        "recompile with --vocab-size %d or more\n", max_token, V, max_token + 1);
        exit(1);
    }
    return d;
}

static int func_index(const ir_module *m, const char *name)
{
    int i = ir_func_index(m, name);
    if (i < 0) {
        fprintf(stderr, "train_rank: error: the compiled plan has no `%s` function; recompile with this mcc\n", name);
        exit(1);
    }
    return i;
}

static void setup_run(train_run *r, int argc, char **argv)
{
    r->a = parse_args(argc, argv);
    char err[1024];
    const char *plan = mcc_plan_text; /* the plan of this rank's tp rank */
    for (int k = rt_parallel_plan_index((int)mcc_plan_count); k > 0; k--)
        plan += strlen(plan) + 1;
    r->p = rt_program_load(plan, mcc_plan_device, mcc_plan_image_size ? mcc_plan_image : NULL, err, sizeof err);
    if (!r->p) {
        fprintf(stderr, "train_rank: error: the compiled plan is invalid (%s); recompile with this mcc\n", err);
        exit(1);
    }
    const ir_module *m = r->m = r->p->m;
    rt_parallel_init(&r->par, r->p);
    r->writer = rt_parallel_is_root(&r->par);
    if (!r->writer && !freopen("/dev/null", "w", stdout)) /* rank 0 logs for all */
        exit(1);
    r->reduce = ir_func_index(m, "reduce_grads");
    r->B = (int)ir_config_int(m, "micro_batch_size", 1);
    r->T = (int)ir_config_int(m, "seq_length", 1);
    r->accum = (int)ir_config_int(m, "accum_steps", 1);
    r->iters = flag_or_config(r->a.train_iters, m, "train_iters", 1);
    r->eval_interval = flag_or_config(r->a.eval_interval, m, "eval_interval", 1000);
    r->eval_iters = flag_or_config(r->a.eval_iters, m, "eval_iters", 100);
    r->a.log_interval = flag_or_config(r->a.log_interval, m, "log_interval", 1);
    r->micro = func_index(m, "micro_step");
    r->eval = func_index(m, "eval_step");
    r->opt = func_index(m, "optimizer");
    r->norm = func_index(m, "grad_norm");
    r->zero = func_index(m, "zero_grads");
    if (!rt_lr_from_config(m, r->iters, &r->lr, err, sizeof err)) {
        fprintf(stderr, "train_rank: error: %s\n", err);
        exit(1);
    }
    double L = (double)ir_config_int(m, "num_layers", 0), d = (double)ir_config_int(m, "hidden_size", 0);
    double N = (double)(ir_config_int(m, "num_params", 0) - ir_config_int(m, "num_position_params", 0));
    r->flops_per_token = 6 * N + 12 * L * d * r->T;
    r->data = open_data(r);
    const int64_t bt[2] = {r->B, r->T};
    r->bt_type = ir_tensor(IR_I32, 2, bt);
    r->tokens = malloc(ir_bytes(&r->bt_type));
    r->targets = malloc(ir_bytes(&r->bt_type));
    r->sample = malloc(sizeof(int32_t) * (size_t)(r->T + 1));
    if (r->writer && r->a.metrics_file && !(r->metrics = fopen(r->a.metrics_file, "w"))) {
        fprintf(stderr, "train_rank: error: --metrics-file %s: cannot write it\n", r->a.metrics_file);
        exit(1);
    }
}

static void print_config(const train_run *r)
{
    const ir_module *m = r->m;
    printf("+-----------------------+-----------------------+\n");
    printf("| parameters            | %21lld |\n", ir_config_int(m, "num_params", 0));
    printf("| layers x hidden       | %13lld x %5lld |\n", ir_config_int(m, "num_layers", 0),
           ir_config_int(m, "hidden_size", 0));
    printf("| micro batch x seq     | %13d x %5d |\n", r->B, r->T);
    printf("| micro-batches / step  | %21d |\n", r->accum);
    printf("| train iters           | %21d |\n", r->iters);
    printf("| lr decay              | %21s |\n", ir_config_get(m, "lr_decay_style"));
    printf("| warmup iters          | %21g |\n", r->lr.warmup_iters);
    printf("| eval every / batches  | %13d / %5d |\n", r->eval_interval, r->eval_iters);
    printf("| FLOP per token        | %21.4g |\n", r->flops_per_token);
    printf("+-----------------------+-----------------------+\n");
    rt_gpt_data_print(r->data, stdout);
}

static void start_dumps(train_run *r)
{
    if (r->writer) {
        mkdir(r->a.dump_dir, 0755);
        dump_open(&r->a, "batches.mcct", &r->batches);
        r->steps = dump_open(&r->a, "steps.txt", NULL);
    }
    dump_globals(r, IR_GLOBAL_PARAM, "params_init.mcct");
}

static void finish_run(train_run *r)
{
    if (r->a.dump_dir)
        dump_globals(r, IR_GLOBAL_PARAM, "params_final.mcct");
    if (r->a.dump_dir && r->writer) {
        rt_mcct_close(&r->batches);
        fclose(r->steps);
    }
    if (r->metrics)
        fclose(r->metrics);
    free(r->sample);
    free(r->tokens);
    free(r->targets);
    rt_gpt_data_close(r->data);
    rt_gpt_data_config_free(&r->a.data);
    rt_parallel_finish(&r->par, r->p);
    rt_program_free(r->p);
}

/* `--nproc-per-node N`: this process starts N ranks of itself instead of training. */
static int nproc_per_node(int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--nproc-per-node"))
            return parse_int_flag(argv[i], argv[i + 1], 1);
    return 0;
}

int main(int argc, char **argv)
{
    int nproc = nproc_per_node(argc, argv);
    if (nproc)
        return rt_launch_local(nproc, argc, argv);
    double t_start = now_s();
    train_run r = {0};
    setup_run(&r, argc, argv);
    rt_program_init_params(r.p, (uint64_t)ir_config_int(r.m, "seed", 1234));
    print_config(&r);
    if (r.a.dump_dir)
        start_dumps(&r);

    log_window w = {0};
    for (int it = 1; it <= r.iters; it++) {
        double t0 = now_s();
        step_result s = train_step(&r, it);
        w.seconds += now_s() - t0;
        w.iters++;
        w.skipped += s.skipped;
        w.loss += s.skipped ? 0 : s.loss;
        if (it == 1) {
            size_t used = r.p->dev->memory_in_use(r.p);
            printf("time to first step: %.2f s", now_s() - t_start);
            if (used)
                printf(" | %s memory in use: %.3f GiB", r.p->dev->name, used / 1073741824.0);
            printf("\n");
        }
        if (it % r.a.log_interval == 0 || it == r.iters) {
            log_line(&r, it, &s, &w);
            w = (log_window){0};
        }
        if (r.eval_iters && (it % r.eval_interval == 0 || it == r.iters))
            evaluate(&r, it);
        fflush(stdout);
    }
    finish_run(&r);
    return 0;
}
