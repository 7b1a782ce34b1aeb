/* train_main.c — the train_rank main: loads the plan compiled into the executable, opens the
 * Megatron GPT datasets (train and valid splits), initialises parameters and runs the plan's
 * schedule programs, `train` for each of --train-iters iterations and `eval` for validation,
 * with the host's policy around them: a log line in Megatron's fields (and a JSONL metrics
 * record) every --log-interval, validation every --eval-interval, a stop (or a skipped step) on a
 * non-finite loss or gradient norm, a clean stop after the iteration in flight on SIGTERM/SIGINT,
 * checkpoints (--save, --load: checkpoint_io.c). `--dump-dir` writes what the numerics tests
 * compare. Under a parallel layout each rank runs the
 * plan of its tensor-parallel rank on its share of every batch; rank 0 logs and writes the dumps,
 * with split tensors gathered whole. */
#include "common/cli.h"
#include "common/knobs.h"
#include "common/os.h"
#include "checkpoint_io.h"
#include "gpt_dataset.h"
#include "launch.h"
#include "parallel.h"
#include "lr_schedule.h"
#include "mcct.h"
#include "metrics.h"
#include "moe_stats.h"
#include "program.h"
#include "sampler.h"
#include "tensorboard.h"
#include "trace.h"
#include "train_config.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The plan object `mcc compile` wrote: the planned IR, the device it targets and that device's
 * kernel image (a cubin for CUDA; empty for the CPU). */
extern const char mcc_plan_text[]; /* the plan every rank runs, its rank terms unresolved */
extern const uint64_t mcc_plan_size;
extern const rt_device *const mcc_plan_device;
extern const char mcc_plan_image[];
extern const uint64_t mcc_plan_image_size;

typedef struct {
    rt_gpt_data_config data;
    const char *dump_dir, *metrics_file, *tensorboard_dir, *dataloader_type;
    int train_iters, log_interval, eval_interval, eval_iters; /* -1: the spec's value */
    bool skip_nan_steps, no_data_sharding;
    rt_ckpt_args ckpt;              /* --save, --load, ... */
} train_args;

/* train_rank's flags (runtime/train_flags.def): its parser, --help, and mcc compile's baking. */
typedef enum { FLAG_TEXT, FLAG_INT, FLAG_NUM, FLAG_SWITCH, FLAG_ASYNC_ON, FLAG_ASYNC_OFF, FLAG_PATHS } flag_kind;
static const struct {
    const char *flag, *value;
    flag_kind kind;
    size_t off;
    int min;
    const char *help;
} train_flags[] = {
#define RT_FLAG(flag, value, kind, member, min, help) {flag, value, FLAG_##kind, offsetof(train_args, member), min, help},
#include "train_flags.def"
#undef RT_FLAG
};
enum { NFLAGS = sizeof train_flags / sizeof train_flags[0] };

/* A flag train_rank does not take: a setting compiled into the plan (a key of ir/config.def, as
 * --lr is lr) gets the recompile hint; any other, the pointer to --help. Exits 2. */
static _Noreturn void unknown_flag(const char *flag)
{
    char key[128];
    snprintf(key, sizeof key, "%s", flag + strspn(flag, "-"));
    for (char *c = key; *c; c++)
        *c = *c == '-' ? '_' : *c;
    if (ir_cfg_find(key) >= 0) {
        fprintf(stderr, "train_rank: error: %s is compiled into the plan (its config %s, which `train_rank "
                        "--print-plan` shows): recompile with `mcc compile SPEC %s VALUE ...`\n", flag, key, flag);
        exit(2);
    }
    fprintf(stderr, "train_rank: error: unknown or incomplete flag '%s' (train_rank --help lists its flags)\n", flag);
    exit(2);
}

/* Prints text wrapped at 100 columns from column col, every line after the first indented by indent. */
static void print_wrapped(FILE *out, const char *text, int col, int indent)
{
    while (*text) {
        int room = 100 - col, n = (int)strlen(text);
        if (n > room) {
            n = room;
            while (n > 0 && text[n] != ' ') n--;
            if (n == 0) n = room;
        }
        fprintf(out, "%.*s\n", n, text);
        text += n + (text[n] == ' ');
        if (*text) fprintf(out, "%*s", indent, "");
        col = indent;
    }
}

static void usage(FILE *out)
{
    fprintf(out, "usage: train_rank [flags]   (the flags mcc compile was given are the defaults: --print-plan shows "
                 "them as train_rank_args)\n");
    for (int i = 0; i < NFLAGS; i++) {
        char head[64];
        snprintf(head, sizeof head, "  %s%s%s", train_flags[i].flag, *train_flags[i].value ? " " : "",
                 train_flags[i].value);
        if (strlen(head) < 24) /* the help beside a short flag, under a long one */
            fprintf(out, "%-24s ", head);
        else
            fprintf(out, "%s\n%25s", head, "");
        print_wrapped(out, train_flags[i].help, 25, 25);
    }
    fprintf(out,
            "  --print-plan            print the compiled plan (IR) and exit\n"
            "  --version               print the version of the mcc that compiled this train_rank and exit\n"
            "  --nproc-per-node N      start N local ranks of this executable, like torchrun (also spelt\n"
            "                          --nproc_per_node; or launch with torchrun, srun or mpirun: ranks come from\n"
            "                          their environment)\n"
            "Every flag also takes its value as --flag=value. SIGTERM or SIGINT stops the run after the\n"
            "iteration in flight, its log line and metrics record written (exit status 128 + the signal).\n");
}

/* Flag row f at argv[*i] into a, its values consumed through *i; false with the message in err. */
static bool parse_flag(train_args *a, int f, int argc, char **argv, int *i, char *err, size_t errlen)
{
    void *slot = (char *)a + train_flags[f].off;
    const char *flag = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    int consumed;
    long long n;
    switch (train_flags[f].kind) {
    case FLAG_SWITCH: *(bool *)slot = true; return true;
    case FLAG_ASYNC_ON: case FLAG_ASYNC_OFF: *(int *)slot = train_flags[f].kind == FLAG_ASYNC_ON; return true;
    case FLAG_PATHS:
        if (!rt_gpt_data_parse_paths(argc - *i - 1, argv + *i + 1, &consumed, &a->data, err, errlen)) return false;
        *i += consumed;
        return true;
    case FLAG_INT:
        ++*i;
        if (!cli_parse_int(flag, v, train_flags[f].min, 1000000000, &n, err, errlen)) return false;
        *(int *)slot = (int)n;
        return true;
    case FLAG_NUM: ++*i; return cli_parse_num(flag, v, 0, true, 1e9, (double *)slot, err, errlen);
    case FLAG_TEXT:
        if (!v || !strncmp(v, "--", 2))
            return snprintf(err, errlen, "%s needs a value: %s", flag, train_flags[f].value), false;
        if (!cli_value_fits(train_flags[f].value, v))
            return snprintf(err, errlen, "%s %s: it takes %s (--help says what each means)", flag, v,
                            train_flags[f].value), false;
        *(const char **)slot = argv[++*i];
        return true;
    }
    return false;
}

/* The plan's train_rank_args (the flags mcc compile was given, one a line) as arguments, then the
 * command line's: a flag given both ways takes the command line's value, which comes later. */
static char **with_baked_flags(const ir_module *m, int argc, char **argv, int *nout, char **text)
{
    *text = strdup(ir_cfg_text(m, IR_CFG_TRAIN_RANK_ARGS));
    int n = **text ? 1 : 0;
    for (const char *c = *text; *c; c++) n += *c == '\n';
    char **args = calloc((size_t)(n + argc + 1), sizeof(char *));
    if (!*text || !args) {
        fprintf(stderr, "train_rank: error: out of memory reading the flags\n");
        exit(2);
    }
    args[0] = argv[0];
    int k = 1;
    for (char *c = *text, *end; n && c; c = end ? end + 1 : NULL) {
        args[k++] = c;
        if ((end = strchr(c, '\n'))) *end = '\0';
    }
    for (int i = 1; i < argc; i++) args[k++] = argv[i];
    *nout = k;
    return args;
}

/* argv's flags (the actions done at once). The data flags are checked where the whole list is
 * read (complete: the plan's baked flags before argv's). */
static train_args parse_args(int argc, char **argv, bool complete)
{
    train_args a = {.data = {.split = "969,30,1"}, .dataloader_type = "single", .train_iters = -1,
                    .log_interval = -1, .eval_interval = -1, .eval_iters = -1, .ckpt = {.async_save = -1}};
    char err[1024];
    for (int i = 1; i < argc; i++) {
        int f = 0;
        while (f < NFLAGS && strcmp(argv[i], train_flags[f].flag) != 0) f++;
        if (f < NFLAGS) {
            if (!parse_flag(&a, f, argc, argv, &i, err, sizeof err)) {
                fprintf(stderr, "train_rank: error: %s\n", err);
                exit(2);
            }
        } else if (!strcmp(argv[i], "--print-plan")) {
            fwrite(mcc_plan_text, 1, mcc_plan_size, stdout);
            exit(0);
        } else if (!strcmp(argv[i], "--version")) {
            printf("train_rank (mcc %s)\n", MCC_VERSION); /* the mcc that compiled it: its libmccrt's */
            exit(0);
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            exit(0);
        } else {
            unknown_flag(argv[i]);
        }
    }
    if (complete && !a.data.n && !a.data.mock) {
        fprintf(stderr, "train_rank: error: --data-path is required (make a dataset with `mcc data preprocess`), "
                        "or --mock-data for synthetic tokens\n");
        exit(2);
    }
    return a;
}

/* A flag given on the command line, else the plan's value of the spec field. */
static int flag_or_plan(int flag, int plan) { return flag >= 0 ? flag : plan; }

/* ---- the run ------------------------------------------------------------------------------ */

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
    double host_logged[4];          /* rt_program.host_times at the last log line */
    char **args, *args_text;        /* the plan's baked flags, then the command line's (with_baked_flags) */
} train_run;

/* The instruction of func's input or output (op) of role kind (index 0), or -1. */
static int io_of(const train_run *r, int func, ir_op op, ir_role_kind kind)
{
    return rt_program_find(r->p, func, op, ir_role_of(kind));
}

/* Binds input instr [B,T] of func from the micro-batch's whole rows: the rank's part of them
 * where the input's type splits them (context parallelism's chunks of the sequence: its layout
 * record, ir_layout_index). */
static void set_batch_input(train_run *r, int func, int instr, const int32_t *whole)
{
    const ir_type *t;
    rt_program_tensor(r->p, func, instr, &t);
    if (!ir_shard_any(t)) {
        rt_program_set_input(r->p, func, instr, whole, ir_bytes(&r->bt_type));
        return;
    }
    ir_layout layout = ir_layout_of_type(t);
    int degree[IR_NUM_AXES];
    ir_axis_degrees(r->m, degree);
    int64_t n = ir_numel(t);
    int32_t *part = malloc(ir_bytes(t));
    for (int64_t i = 0; i < n; i++)
        part[i] = whole[ir_layout_index(&layout, &r->bt_type, degree, r->par.coord, i)];
    rt_program_set_input(r->p, func, instr, part, ir_bytes(t));
    free(part);
}

/* Loads the rows at positions first .. first+B-1 of split (the samples its sampler gives them,
 * sampler.h) as the inputs of roles tokens and targets of func, and tells a function with dropout
 * the first row's position (role first_sample: its masks are drawn from it; with
 * --tp-comm-interleave also first_sample index 1, the second half's). Dropout's per-sample identity is the consumed
 * position, not the dataset sample read there: the same masks under either --dataloader-type,
 * and a sample read again in a later cyclic epoch gets new ones. */
static void load_batch(train_run *r, int func, int split, int64_t first)
{
    int64_t start[2] = {first, first + r->B / 2}; /* the first sample of the micro-batch, of its second half */
    for (int h = 0; h < 2; h++) {
        int in = rt_program_find(r->p, func, IR_OP_INPUT, ir_role_at(IR_ROLE_FIRST_SAMPLE, h));
        if (in >= 0)
            rt_program_set_input(r->p, func, in, &start[h], sizeof start[h]);
    }
    /* a pipeline's first stage reads the tokens, its last the targets; its other functions
     * (middle stages, backwards) neither, and sample nothing */
    int tokens = io_of(r, func, IR_OP_INPUT, IR_ROLE_TOKENS), targets = io_of(r, func, IR_OP_INPUT, IR_ROLE_TARGETS);
    if (tokens < 0 && targets < 0)
        return;
    int T = r->T;
    for (int b = 0; b < r->B; b++) {
        rt_gpt_data_sample(r->data, split, rt_sampler_sample(&r->sampler[split], first + b), r->sample);
        memcpy(r->tokens + (size_t)b * T, r->sample, sizeof(int32_t) * (size_t)T);
        memcpy(r->targets + (size_t)b * T, r->sample + 1, sizeof(int32_t) * (size_t)T);
    }
    if (tokens >= 0)
        set_batch_input(r, func, tokens, r->tokens);
    if (targets >= 0)
        set_batch_input(r, func, targets, r->targets);
}

/* Runs func (a step or eval function, a pipeline stage's forward or backward) on the micro-batch
 * of split starting at position first, its stash globals on buffers slot[span] (-1: none). Its
 * loss, or 0 for a function without one (a stage other than the last, a backward). */
static float run_micro_batch(train_run *r, int func, int split, int64_t first, const int *slot)
{
    load_batch(r, func, split, first);
    rt_program_bind_slot(r->p, func, slot);
    rt_program_run(r->p, func);
    float loss = 0;
    int out = io_of(r, func, IR_OP_OUTPUT, IR_ROLE_LOSS);
    if (out >= 0)
        rt_program_get_output(r->p, func, out, &loss, sizeof loss);
    return loss;
}

/* A send or recv step: the tensor of the step's function to or from the neighbouring pipeline
 * stage (comm.h: a send never waits, so the compiled order cannot deadlock). */
static void pipeline_transfer(train_run *r, const ir_sched_step *c)
{
    bool send = c->op == IR_STEP_SEND;
    const ir_type *t;
    int io = rt_program_find(r->p, c->func, send ? IR_OP_OUTPUT : IR_OP_INPUT, c->role);
    void *buf = rt_program_tensor(r->p, c->func, io, &t);
    int pp_size = r->par.mesh.degree[IR_AXIS_PP]; /* interleaved: the last rank's next is the first */
    int peer = (r->par.coord[IR_AXIS_PP] + c->peer + pp_size) % pp_size;
    rt_comm *pp = rt_parallel_comm(IR_AXIS_PP);
    if (send)
        rt_send(pp, buf, (size_t)ir_numel(t), t->dtype, peer, r->p->dev->queue(r->p));
    else
        rt_recv(pp, buf, (size_t)ir_numel(t), t->dtype, peer, r->p->dev->queue(r->p));
}

/* ---- --dump-dir ---------------------------------------------------------------------------- */

/* A dump file could not be written whole: the run stops, naming it, so a partial dump never
 * passes for a whole one. */
static void dump_failed(const char *path, int error)
{
    fprintf(stderr, "train_rank: error: --dump-dir: cannot write %s: %s\n", path, strerror(error));
    exit(1);
}

static void dump_open(const train_args *a, const char *name, rt_mcct *w)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", a->dump_dir, name);
    if (!rt_mcct_open(w, path))
        dump_failed(w->path, w->error);
}

/* A dump of tensors, NAME.mcct: under pipeline parallelism each stage's first rank writes its own
 * stage's, NAME.stageS.mcct (tests/compare_dumps.py reads them as one). */
static void dump_open_stage(const train_run *r, const char *name, rt_mcct *w)
{
    char file[256];
    int pp = r->par.mesh.degree[IR_AXIS_PP];
    if (pp > 1)
        snprintf(file, sizeof file, "%.*s.stage%d.mcct", (int)strlen(name) - 5, name, r->par.coord[IR_AXIS_PP]);
    else
        snprintf(file, sizeof file, "%s", name);
    dump_open(&r->a, file, w);
}

static void dump_add(rt_mcct *w, const char *name, const ir_type *t, const void *data)
{
    if (!rt_mcct_add(w, name, t, data))
        dump_failed(w->path, w->error);
}

static void dump_close(rt_mcct *w)
{
    if (!rt_mcct_close(w))
        dump_failed(w->path, w->error);
}

/* Global g as the single-rank program holds it, reassembled from every rank's part as its layout
 * record says. The reduced gradient is the gradient's GRAD_SHARD companion where ZeRO made one, a
 * parameter's value its MASTER_SHARD (ir_param_value). Collective: every rank calls. */
static void *whole_global(train_run *r, int g, ir_type *whole)
{
    const ir_global *gl = &r->m->globals[g];
    int shard = gl->kind == IR_GLOBAL_GRAD ? ir_global_companion(r->m, gl->owner, IR_GLOBAL_GRAD_SHARD) : -1;
    int held = gl->kind == IR_GLOBAL_PARAM ? ir_param_value(r->m, g) : shard >= 0 ? shard : g, degree[IR_NUM_AXES];
    ir_axis_degrees(r->m, degree);
    *whole = ir_global_whole(r->m, held, degree);
    void *local = malloc(ir_bytes(&r->m->globals[held].type)), *full = malloc(ir_bytes(whole));
    rt_program_read_global(r->p, held, local);
    rt_parallel_gather(r->p, &r->m->globals[held].layout, whole, local, full);
    free(local);
    return full;
}

/* All parameters (fp32 masters), or all gradient accumulators, named by their parameter. */
static void dump_globals(train_run *r, ir_global_kind kind, const char *file)
{
    rt_mcct w;
    if (r->stage_writer)
        dump_open_stage(r, file, &w);
    for (int g = 0; g < r->m->nglobals; g++) {
        const ir_global *gl = &r->m->globals[g];
        if (gl->kind != kind)
            continue;
        ir_type whole;
        void *host = whole_global(r, g, &whole);
        if (r->stage_writer)
            dump_add(&w, r->m->globals[ir_global_param(r->m, g)].name, &whole, host);
        free(host);
    }
    if (r->stage_writer)
        dump_close(&w);
}

static void dump_logits(train_run *r, int func)
{
    const ir_func *f = r->m->funcs[func];
    int i = io_of(r, func, IR_OP_OUTPUT, IR_ROLE_LOGITS);
    if (i < 0)
        return;
    const ir_type *t = ir_vtype(f, f->instrs[i].args[0]);
    ir_layout layout = ir_layout_of_type(t);
    int degree[IR_NUM_AXES];
    ir_axis_degrees(r->m, degree);
    ir_type whole = ir_layout_whole(&layout, *t, degree);
    void *host = malloc(ir_bytes(t)), *full = malloc(ir_bytes(&whole));
    rt_program_get_output(r->p, func, i, host, ir_bytes(t));
    rt_parallel_gather(r->p, &layout, &whole, host, full);
    if (r->stage_writer) {
        rt_mcct w;
        dump_open_stage(r, "logits_step1.mcct", &w);
        dump_add(&w, "logits", &whole, full);
        dump_close(&w);
    }
    free(host);
    free(full);
}

static void dump_batch(train_run *r, int func, int it, int mb)
{
    if (it == 1 && mb == 0)
        dump_logits(r, func); /* collective: every rank */
    if (!r->writer)
        return;
    char name[64];
    snprintf(name, sizeof name, "tokens.%d.%d", it, mb);
    dump_add(&r->batches, name, &r->bt_type, r->tokens);
    snprintf(name, sizeof name, "targets.%d.%d", it, mb);
    dump_add(&r->batches, name, &r->bt_type, r->targets);
}

/* ---- one iteration ------------------------------------------------------------------------- */

typedef struct {
    double loss, lr, grad_norm;
    double moe_aux, moe_z, moe_imbalance, moe_dropped; /* an MoE model's (moe_stats.h): stages combined, dp mean */
    bool skipped;
} step_result;

/* The scalar inputs of an update, the optimizer function's or the host's (func): @lr, @step and,
 * where the plan gives the embedding and output layer their own (--decoupled-lr: the stages
 * holding them), @decoupled_lr. Megatron's scheduler and Adam count only the steps that updated
 * the weights. */
static void set_update_inputs(train_run *r, int func)
{
    int next = r->steps_applied + 1;
    float lr = (float)rt_lr_at(&r->lr, RT_LR_DEFAULT, next), step = (float)next;
    rt_program_set_input(r->p, func, io_of(r, func, IR_OP_INPUT, IR_ROLE_LR), &lr, sizeof lr);
    rt_program_set_input(r->p, func, io_of(r, func, IR_OP_INPUT, IR_ROLE_STEP), &step, sizeof step);
    int decoupled_in = io_of(r, func, IR_OP_INPUT, IR_ROLE_DECOUPLED_LR);
    if (decoupled_in >= 0) {
        float decoupled = (float)rt_lr_at(&r->lr, RT_LR_DECOUPLED, next);
        rt_program_set_input(r->p, func, decoupled_in, &decoupled, sizeof decoupled);
    }
}

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

/* FP8 delayed scaling: this rank's first FP8_HISTORY global (declaration order: the earliest
 * layer's) whose step amax so far, [0], is NaN or infinite, or -1; *v its value. */
static int fp8_bad_amax(const train_run *r, float *v)
{
    for (int g = 0; g < r->m->nglobals; g++) {
        const ir_global *gl = &r->m->globals[g];
        if (gl->kind != IR_GLOBAL_FP8_HISTORY)
            continue;
        float *h = malloc(ir_bytes(&gl->type));
        rt_program_read_global(r->p, g, h);
        *v = h[0];
        free(h);
        if (!isfinite(*v))
            return g;
    }
    return -1;
}

/* MoE aux-loss-free balancing: the min and max over every EXPERT_BIAS global's bias row (ir.h;
 * replicated, so every rank's are the same); false when the model has none. */
static bool expert_bias_range(const train_run *r, double *lo, double *hi)
{
    bool any = false;
    *lo = INFINITY, *hi = -INFINITY;
    for (int g = 0; g < r->m->nglobals; g++) {
        const ir_global *gl = &r->m->globals[g];
        if (gl->kind != IR_GLOBAL_EXPERT_BIAS)
            continue;
        int64_t E = gl->type.dims[1];
        float *h = malloc(ir_bytes(&gl->type));
        rt_program_read_global(r->p, g, h);
        for (int64_t e = 0; e < E; e++)
            *lo = fmin(*lo, h[E + e]), *hi = fmax(*hi, h[E + e]);
        free(h);
        any = true;
    }
    return any;
}

/* What names a non-finite FP8 amax g (of value v) for non_finite, into what. */
static const char *fp8_amax_what(const train_run *r, int g, char *what, size_t len)
{
    snprintf(what, len, "the FP8 amax of @%s (this step's amax of the tensor it scales)", r->m->globals[g].name);
    return what;
}

/* The position of this rank's micro-batch mb of iteration it (rt_parallel_position); row b
 * takes the next ones, and the train sampler maps them to samples (load_batch), so the data a
 * step sees does not depend on the layout. */
static int64_t train_position(const train_run *r, int it, int mb)
{
    return rt_parallel_position(&r->par, it, r->accum, mb, r->B, 0);
}

/* Call c of the train program, on this rank's micro-batch c->mb of iteration it: its loss joins
 * the step's mean over the micro-batches; *finite turns false at the step's first non-finite loss
 * (non_finite stops the run there, or with --skip-nan-steps skips the update). */
static void train_micro_batch(train_run *r, int it, const ir_sched_step *c, step_result *s, bool *finite)
{
    char range[32];
    snprintf(range, sizeof range, "micro-batch %d", c->mb);
    rt_trace_push(r->p, range);
    float loss = run_micro_batch(r, c->func, RT_SPLIT_TRAIN, train_position(r, it, c->mb), c->slot);
    rt_trace_pop(r->p);
    ir_func_kind kind = r->m->funcs[c->func]->kind;
    if (r->a.dump_dir && kind != IR_FUNC_BACKWARD && kind != IR_FUNC_WGRAD) /* a stage's forward has it */
        dump_batch(r, c->func, it, c->mb);
    if (*finite && !isfinite(loss)) { /* named by the FP8 amax it came from, where one of this rank's is bad */
        char what[512];
        float amax;
        int g = fp8_bad_amax(r, &amax);
        if (g >= 0)
            *finite = non_finite(r, it, fp8_amax_what(r, g, what, sizeof what), amax);
        else {
            snprintf(what, sizeof what, "the loss of micro-batch %d", c->mb);
            *finite = non_finite(r, it, what, loss);
        }
    }
    s->loss += loss / r->accum;
    if (r->moe.moe)
        rt_moe_stats_add(&r->moe, r->p, c->func);
}

/* The train program's optimizer call with the host's policy around it: first the loss's mean over
 * dp and (--dump-dir) the step-1 gradients, as reduced; with --skip-nan-steps the gradient norm,
 * checked before the update could see a bad gradient. A non-finite step is dropped, its gradients
 * zeroed so that they do not leak into the next one: returns false. */
/* Whether the plan's FP8 GEMMs scale by amax histories (fp8_recipe delayed). */
static bool fp8_delayed(const ir_module *m)
{
    return ir_cfg_choice(m, IR_CFG_FP8_FORMAT) != IR_FP8_FORMAT_NONE &&
           ir_cfg_choice(m, IR_CFG_FP8_RECIPE) == IR_FP8_DELAYED;
}

static bool train_update(train_run *r, int it, int opt, step_result *s, bool finite)
{
    rt_comm *pp = rt_parallel_comm(IR_AXIS_PP);
    if (pp) /* every activation and gradient sent this iteration has arrived */
        rt_p2p_flush(pp, r->p->dev->queue(r->p));
    s->loss = rt_parallel_mean(&r->par, r->p, (float)s->loss);
    if (r->moe.moe) { /* each stage's share of its own MoE layers, added (the largest imbalance) over pp */
        rt_moe_step m;
        rt_moe_stats_step(&r->moe, &m);
        s->moe_aux = r->moe.aux_layers ? rt_parallel_mean(&r->par, r->p, (float)m.aux) / r->moe.aux_layers : NAN;
        s->moe_z = r->moe.z_layers ? rt_parallel_mean(&r->par, r->p, (float)m.z) / r->moe.z_layers : NAN;
        s->moe_imbalance = rt_parallel_mean_of(&r->par, r->p, (float)m.imbalance, RT_MAX); /* of each rank's tokens */
        double dropped = r->moe.has_kept ? rt_parallel_mean(&r->par, r->p, (float)m.dropped) : 0;
        double routed = r->moe.has_kept ? rt_parallel_mean(&r->par, r->p, (float)m.routed) : 0;
        s->moe_dropped = routed > 0 ? dropped / routed : NAN;
    }
    if (pp && finite && !isfinite(s->loss)) /* the last stage's, which the others now see */
        finite = non_finite(r, it, "the loss", s->loss);
    if (r->a.dump_dir && it == 1)
        dump_globals(r, IR_GLOBAL_GRAD, "grads_step1.mcct");
    if (finite && fp8_delayed(r->m)) { /* every rank: an amax of the backward's too */
        float amax = NAN;
        int g = fp8_bad_amax(r, &amax);
        if (rt_parallel_world(&r->par, r->p, g >= 0 ? 1.0f : 0.0f, RT_MAX) != 0.0f) {
            char what[512];
            finite = non_finite(r, it, g >= 0 ? fp8_amax_what(r, g, what, sizeof what) : "an FP8 amax of another rank",
                                amax);
        }
    }
    float norm = 0;
    if (finite && r->a.skip_nan_steps) {
        rt_program_run(r->p, r->norm);
        rt_program_get_output(r->p, r->norm, io_of(r, r->norm, IR_OP_OUTPUT, IR_ROLE_GRAD_NORM), &norm, sizeof norm);
        finite = isfinite(norm) || non_finite(r, it, "the gradient norm", norm);
    }
    if (!finite) {
        rt_program_run(r->p, r->zero);
        return false;
    }
    set_update_inputs(r, opt);
    rt_program_run(r->p, opt);
    int host = ir_func_of_kind(r->m, IR_FUNC_HOST_OPTIMIZER);
    if (host >= 0) { /* --optimizer-cpu-offload: the host's update, the schedule's next call, takes the same */
        float coef;
        rt_program_get_output(r->p, opt, io_of(r, opt, IR_OP_OUTPUT, IR_ROLE_CLIP_COEF), &coef, sizeof coef);
        set_update_inputs(r, host);
        rt_program_set_input(r->p, host, io_of(r, host, IR_OP_INPUT, IR_ROLE_CLIP_COEF), &coef, sizeof coef);
    }
    rt_program_get_output(r->p, opt, io_of(r, opt, IR_OP_OUTPUT, IR_ROLE_GRAD_NORM), &norm, sizeof norm);
    if (!isfinite(norm))
        non_finite(r, it, "the gradient norm", norm);
    s->grad_norm = norm;
    r->steps_applied++;
    if (r->steps && fprintf(r->steps, "%d %.9g %.9g %.9g\n", it, s->loss, s->lr, s->grad_norm) < 0)
        dump_failed(r->steps_path, errno);
    return true;
}

/* Iteration it: the plan's train program, step by step. A skipped update ends it. */
static step_result train_step(train_run *r, int it)
{
    step_result s = {.lr = rt_lr_at(&r->lr, RT_LR_DEFAULT, r->steps_applied + 1)};
    bool finite = true;
    const ir_program *prog = &r->m->progs[IR_PROG_TRAIN];
    for (int i = 0; i < prog->nsteps; i++) {
        const ir_sched_step *c = &prog->steps[i];
        if (c->op != IR_STEP_CALL)
            pipeline_transfer(r, c);
        else if (c->mb >= 0)
            train_micro_batch(r, it, c, &s, &finite);
        else if (r->m->funcs[c->func]->kind != IR_FUNC_OPTIMIZER)
            rt_program_run(r->p, c->func);
        else if (!train_update(r, it, c->func, &s, finite))
            return s.skipped = true, s;
    }
    return s;
}

/* ---- records ------------------------------------------------------------------------------- */

/* The metrics file's keys as Megatron's TensorBoard tags (its training_log and
 * evaluate_and_print_results), in Megatron's units; our own tags where it has none. Keys not
 * here (consumed_samples, skipped) are not plotted. */
static const struct {
    const char *key, *tag;
    double scale;
} tb_tags[] = {
    {"loss", "lm loss", 1},
    {"lr", "learning-rate", 1},
    {"grad_norm", "grad-norm", 1},
    {"ms_per_iter", "iteration-time", 1e-3}, /* seconds */
    {"tflops_per_gpu", "throughput", 1},     /* TFLOP/s/GPU */
    {"memory_gib", "mem-allocated-bytes", 1073741824.0},
    {"tokens_per_s_per_gpu", "tokens-per-sec-per-gpu", 1},
    {"mfu", "mfu", 1},
    {"valid_loss", "lm loss validation", 1},
    {"valid_ppl", "lm loss validation ppl", 1},
    {"moe_load_balancing_loss", "load_balancing_loss", 1}, /* Megatron's MoE tags */
    {"moe_z_loss", "z_loss", 1},
    {"moe_load_imbalance", "load_imbalance", 1},
    {"moe_dropped_fraction", "dropped_fraction", 1},
};

static bool tb_record(rt_tb *tb, int it, const rt_scalar *s, int n, char *err, size_t errlen)
{
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < sizeof tb_tags / sizeof tb_tags[0]; k++)
            if (!strcmp(s[i].key, tb_tags[k].key) && isfinite(s[i].value) && /* absent: as Megatron, no point */
                !rt_tb_scalar(tb, tb_tags[k].tag, it, s[i].value * tb_tags[k].scale, err, errlen))
                return false;
    return true;
}

/* One record's scalars to every sink: the metrics file and TensorBoard. A write error stops the
 * run, naming the file: records missing from a run that exits 0 would pass for a whole run. */
static void emit_record(train_run *r, int it, const rt_scalar *s, int n)
{
    char err[1024];
    if ((r->metrics.path && !rt_metrics_record(&r->metrics, it, s, n, err, sizeof err)) ||
        (r->tb && !tb_record(r->tb, it, s, n, err, sizeof err))) {
        fprintf(stderr, "train_rank: error: %s; stopping\n", err);
        exit(1);
    }
}

/* ---- validation ---------------------------------------------------------------------------- */

/* eval_iters global batches of the valid split, each through the plan's eval program (forward
 * only: the weights and gradients are untouched). Like Megatron's, the valid positions continue
 * from one validation to the next, read through the valid split's sampler. */
static void evaluate(train_run *r, int it)
{
    double t0 = os_now_s(), loss = 0;
    const ir_program *prog = &r->m->progs[IR_PROG_EVAL];
    int n = r->eval_iters * r->accum, dp = r->par.mesh.degree[IR_AXIS_DP];
    for (int e = 0; e < r->eval_iters; e++)
        for (int i = 0; i < prog->nsteps; i++) { /* calls on micro-batches (ir_verify), a pipeline's transfers */
            const ir_sched_step *c = &prog->steps[i];
            if (c->op != IR_STEP_CALL) {
                pipeline_transfer(r, c);
                continue;
            }
            int64_t micro = ((int64_t)r->evals_done * n + (int64_t)e * r->accum + c->mb) * dp + r->par.coord[IR_AXIS_DP];
            loss += run_micro_batch(r, c->func, RT_SPLIT_VALID, micro * r->B, c->slot) / n;
        }
    if (rt_parallel_comm(IR_AXIS_PP))
        rt_p2p_flush(rt_parallel_comm(IR_AXIS_PP), r->p->dev->queue(r->p));
    loss = rt_parallel_mean(&r->par, r->p, (float)loss);
    r->evals_done++;
    double ppl = exp(loss < 700 ? loss : 700);
    /* Megatron's line, then our field */
    printf(" validation loss at iteration %d | lm loss value: %.6E | lm loss PPL: %.6E | elapsed time (s): %.1f |\n",
           it, loss, ppl, os_now_s() - t0);
    const rt_scalar rec[] = {{"valid_loss", loss}, {"valid_ppl", ppl}};
    emit_record(r, it, rec, 2);
}

/* ---- logging ------------------------------------------------------------------------------- */

/* What a log line averages over: the iterations since the last one. */
typedef struct {
    double loss, seconds;
    double moe_aux, moe_z, moe_imbalance, moe_dropped; /* summed over the steps applied */
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

/* Megatron's training log line, field for field (names, order and formats of its training_log,
 * so scripts that scrape Megatron logs read ours; bf16 has no loss scaling: 1.0; every skipped
 * step is one with a NaN or Inf), then our fields (with --optimizer-cpu-offload, the host step's
 * split last). And the step's metrics record. */
static void log_line(train_run *r, int it, const step_result *last, const log_window *w)
{
    int done = w->iters - w->skipped;
    long long global_batch = (long long)r->B * r->accum * r->par.mesh.degree[IR_AXIS_DP];
    double loss = done ? w->loss / done : NAN, ms = w->seconds * 1e3 / w->iters;
    /* each dp rank's tokens, shared by its tp ranks and pipeline stages */
    double tok_s = (double)r->B * r->T * r->accum / r->par.mesh.degree[IR_AXIS_TP] / r->par.mesh.degree[IR_AXIS_PP] /
                   (ms / 1e3), flops = tok_s * r->flops_per_token;
    double peak = ir_cfg_num(r->m, IR_CFG_PEAK_FLOPS); /* the target's, as mcc compile planned for it */
    double mfu = on_gpu(r) && peak > 0 ? flops / peak : NAN, mem = memory_gib(r);
    long long samples = it * global_batch;
    char mfu_text[32] = "-", when[32];
    if (isfinite(mfu))
        snprintf(mfu_text, sizeof mfu_text, "%.1f%%", 100 * mfu);
    time_t now = time(NULL);
    struct tm local;
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime_r(&now, &local));
    printf(" [%s] iteration %8d/%8d | consumed samples: %12lld | elapsed time per iteration (ms): %.1f | "
           "throughput per GPU (TFLOP/s/GPU): %.1f | learning rate: %.6E | global batch size: %5lld | lm loss: %.6E | "
           "loss scale: 1.0 | grad norm: %.3f | number of skipped iterations: %3d | number of nan iterations: %3d | "
           "tokens/s/GPU: %.0f | MFU: %s | memory (GiB): %.2f |", when, it, r->iters, samples, ms, flops / 1e12,
           last->lr, global_batch, loss, last->grad_norm, w->skipped, w->skipped, tok_s, mfu_text, mem);
    /* MoE: Megatron's names for the router losses (its tracker's, unscaled, means over the layers) */
    double aux = done ? w->moe_aux / done : NAN, z = done ? w->moe_z / done : NAN;
    double imbalance = done ? w->moe_imbalance / done : NAN, dropped = done ? w->moe_dropped / done : NAN;
    if (r->moe.aux_layers)
        printf(" load_balancing_loss: %.6E |", aux);
    if (r->moe.z_layers)
        printf(" z_loss: %.6E |", z);
    if (r->moe.moe)
        printf(" expert load imbalance (max/mean): %.3f |", imbalance);
    if (r->moe.has_kept)
        printf(" dropped fraction: %.4f |", dropped);
    double bias_lo = NAN, bias_hi = NAN;
    bool biased = expert_bias_range(r, &bias_lo, &bias_hi);
    if (rt_parallel_comm(IR_AXIS_PP)) { /* each stage holds its own layers' biases (the same over dp) */
        biased = rt_parallel_mean_of(&r->par, r->p, biased ? 1.0f : 0.0f, RT_MAX) > 0;
        bias_lo = -rt_parallel_mean_of(&r->par, r->p, (float)-bias_lo, RT_MAX);
        bias_hi = rt_parallel_mean_of(&r->par, r->p, (float)bias_hi, RT_MAX);
    }
    if (biased)
        printf(" expert bias (min/max): %.4E/%.4E |", bias_lo, bias_hi);
    /* --optimizer-cpu-offload: the host step a iteration, split into waiting for gradient chunks,
     * AdamW and the copies up (runtime/host_optimizer.c; the rest is its other instructions) */
    bool offload = ir_func_of_kind(r->m, IR_FUNC_HOST_OPTIMIZER) >= 0;
    double host[4];
    for (int k = 0; k < 4; k++) {
        host[k] = (r->p->host_times[k] - r->host_logged[k]) * 1e3 / w->iters;
        r->host_logged[k] = r->p->host_times[k];
    }
    if (offload)
        printf(" host step (ms): %.1f (copies down %.1f, adam %.1f, up %.1f) |", host[RT_HOST_TIME_ALL],
               host[RT_HOST_TIME_DOWN], host[RT_HOST_TIME_ADAM], host[RT_HOST_TIME_UP]);
    printf("\n");
    enum { BASE = 10 }; /* every record's; then an MoE model's and the offloaded host step's */
    rt_scalar all[BASE + 10] = {
        {"consumed_samples", (double)samples}, {"loss", loss}, {"lr", last->lr},
        {"grad_norm", last->skipped ? NAN : last->grad_norm}, {"ms_per_iter", ms}, {"tokens_per_s_per_gpu", tok_s},
        {"tflops_per_gpu", flops / 1e12}, {"mfu", mfu}, {"memory_gib", mem}, {"skipped", w->skipped},
    };
    int n = BASE;
    if (r->moe.moe) { /* an MoE model's */
        all[n++] = (rt_scalar){"moe_load_balancing_loss", aux};
        all[n++] = (rt_scalar){"moe_z_loss", z};
        all[n++] = (rt_scalar){"moe_load_imbalance", imbalance};
        if (r->moe.has_kept)
            all[n++] = (rt_scalar){"moe_dropped_fraction", dropped};
        if (biased) {
            all[n++] = (rt_scalar){"moe_expert_bias_min", bias_lo};
            all[n++] = (rt_scalar){"moe_expert_bias_max", bias_hi};
        }
    }
    if (offload) {
        all[n++] = (rt_scalar){"host_step_ms", host[RT_HOST_TIME_ALL]};
        all[n++] = (rt_scalar){"host_copies_down_ms", host[RT_HOST_TIME_DOWN]};
        all[n++] = (rt_scalar){"host_adam_ms", host[RT_HOST_TIME_ADAM]};
        all[n++] = (rt_scalar){"host_up_ms", host[RT_HOST_TIME_UP]};
    }
    emit_record(r, it, all, n);
}

/* ---- start-up ------------------------------------------------------------------------------ */

/* The validations of iterations start+1 .. iters: every --eval-interval and the last. */
static int evals_ahead(const train_run *r)
{
    if (r->start >= r->iters)
        return 0;
    return r->iters / r->eval_interval - r->start / r->eval_interval + (r->iters % r->eval_interval != 0);
}

/* The train and valid splits the run consumes, built after the load as Megatron builds its
 * datasets: the valid positions continue from the checkpoint's validations (evaluate), and those
 * need not be the ones iterations 1 .. start would have made (each run also validates at its own
 * last iteration, so a finished run extended with a longer --train-iters has one more), so the
 * valid split holds the checkpoint's validations and this run's. Validation needs a valid split
 * with documents: when --split leaves it none, the run trains without validation and says why. */
static rt_gpt_data *open_data(train_run *r)
{
    rt_gpt_data_config *c = &r->a.data;
    int64_t batch = (int64_t)r->B * r->accum * r->par.mesh.degree[IR_AXIS_DP];
    int ahead = evals_ahead(r), evals = ahead ? r->evals_done + ahead : 0;
    c->seq_length = r->T;
    c->seed = r->cfg.seed;
    c->mock_vocab = r->cfg.vocab_size;
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
    if (!rt_gpt_data_check_tokens(d, r->cfg.vocab_size, err, sizeof err)) {
        fprintf(stderr, "train_rank: error: --data-path %s\n", err);
        exit(1);
    }
    return d;
}

static int func_of_kind(const ir_module *m, ir_func_kind k)
{
    int i = ir_func_of_kind(m, k);
    if (i < 0) {
        fprintf(stderr, "train_rank: error: the compiled plan has no function of kind %s; recompile with this mcc\n",
                ir_func_kinds[k].name);
        exit(1);
    }
    return i;
}

/* The plan's schedule programs as this train_rank runs them: both there. */
static void check_schedule(const ir_module *m)
{
    for (int p = 0; p < IR_NUM_PROGS; p++)
        if (!m->progs[p].nsteps) {
            fprintf(stderr, "train_rank: error: the compiled plan has no `schedule %s` program; recompile with this "
                            "mcc\n", ir_prog_names[p]);
            exit(1);
        }
}

static void setup_run(train_run *r, int argc, char **argv)
{
    train_args given = parse_args(argc, argv, false); /* its errors and actions before the device starts */
    rt_gpt_data_config_free(&given.data);
    char err[1024];
    r->p = rt_program_load(mcc_plan_text, mcc_plan_device, mcc_plan_image_size ? mcc_plan_image : NULL,
                           rt_rank_env_or_exit().rank, err, sizeof err);
    if (!r->p || !rt_train_config_read(r->p->m, &r->cfg, err, sizeof err)) {
        fprintf(stderr, "train_rank: error: the compiled plan is invalid (%s); recompile with this mcc\n", err);
        exit(1);
    }
    int nargs;
    r->args = with_baked_flags(r->p->m, argc, argv, &nargs, &r->args_text);
    r->a = parse_args(nargs, r->args, true);
    r->a.ckpt.plan_text = mcc_plan_text;
    const ir_module *m = r->m = r->p->m;
    rt_parallel_init(&r->par, r->p);
    r->writer = rt_parallel_is_root(&r->par);
    r->stage_writer = !r->par.coord[IR_AXIS_TP] && !r->par.coord[IR_AXIS_CP] && !r->par.coord[IR_AXIS_DP];
    if (!r->writer && !freopen("/dev/null", "w", stdout)) /* rank 0 logs for all */
        exit(1);
    r->B = r->cfg.micro_batch_size;
    r->T = r->cfg.seq_length;
    r->accum = r->cfg.accum_steps;
    r->iters = flag_or_plan(r->a.train_iters, r->cfg.train_iters);
    r->eval_interval = flag_or_plan(r->a.eval_interval, r->cfg.eval_interval);
    r->eval_iters = flag_or_plan(r->a.eval_iters, r->cfg.eval_iters);
    r->a.log_interval = flag_or_plan(r->a.log_interval, r->cfg.log_interval);
    check_schedule(m);
    r->norm = func_of_kind(m, IR_FUNC_GRAD_NORM);
    r->zero = func_of_kind(m, IR_FUNC_ZERO_GRADS);
    if (!rt_lr_from_config(m, r->iters, &r->lr, err, sizeof err)) {
        fprintf(stderr, "train_rank: error: %s\n", err);
        exit(1);
    }
    double L = (double)r->cfg.num_layers, d = (double)r->cfg.hidden_size;
    /* an MoE model's tokens each multiply by their top-k experts only: MFU counts those */
    double N = (double)((r->cfg.num_active_params ? r->cfg.num_active_params : r->cfg.num_params) -
                        r->cfg.num_position_params);
    r->flops_per_token = 6 * N + 12 * L * d * r->T;
    rt_moe_stats_open(&r->moe, r->p);
    if (rt_parallel_comm(IR_AXIS_PP)) { /* the model's, whichever stages hold its MoE layers */
        bool *any[] = {&r->moe.moe, &r->moe.has_kept};
        for (size_t k = 0; k < sizeof any / sizeof any[0]; k++)
            *any[k] = rt_parallel_mean_of(&r->par, r->p, *any[k] ? 1.0f : 0.0f, RT_MAX) > 0;
        int *layers[] = {&r->moe.aux_layers, &r->moe.z_layers};
        for (size_t k = 0; k < sizeof layers / sizeof layers[0]; k++)
            *layers[k] = (int)lrintf(rt_parallel_mean(&r->par, r->p, (float)*layers[k]));
    }
    const int64_t bt[2] = {r->B, r->T};
    r->bt_type = ir_tensor(IR_I32, 2, bt);
    r->tokens = malloc(ir_bytes(&r->bt_type));
    r->targets = malloc(ir_bytes(&r->bt_type));
    r->sample = malloc(sizeof(int32_t) * (size_t)(r->T + 1));
    if (r->writer && r->a.metrics_file && !rt_metrics_open(&r->metrics, r->a.metrics_file, err, sizeof err)) {
        fprintf(stderr, "train_rank: error: %s\n", err);
        exit(1);
    }
    if (r->writer && r->a.tensorboard_dir && !(r->tb = rt_tb_open(r->a.tensorboard_dir, err, sizeof err))) {
        fprintf(stderr, "train_rank: error: --tensorboard-dir: %s\n", err);
        exit(1);
    }
}

static void print_config(const train_run *r)
{
    printf("+-----------------------+-----------------------+\n");
    printf("| parameters            | %21lld |\n", r->cfg.num_params);
    if (r->cfg.num_active_params)
        printf("| active parameters     | %21lld |\n", r->cfg.num_active_params);
    printf("| layers x hidden       | %13lld x %5lld |\n", r->cfg.num_layers, r->cfg.hidden_size);
    const int *d = r->par.mesh.degree; /* the layout compiled in, and the world it takes */
    char layout[64];
    snprintf(layout, sizeof layout, "%d %d %d %d %d %d", d[IR_AXIS_TP], d[IR_AXIS_PP],
             (int)ir_cfg_int(r->m, IR_CFG_NUM_VIRTUAL_STAGES_PER_PIPELINE_RANK), d[IR_AXIS_DP], d[IR_AXIS_CP],
             d[IR_AXIS_EP]);
    printf("| tp pp vp dp cp ep     | %21s |\n", layout);
    printf("| world size            | %21d |\n", d[IR_AXIS_TP] * d[IR_AXIS_CP] * d[IR_AXIS_DP] * d[IR_AXIS_PP]);
    printf("| micro batch x seq     | %13d x %5d |\n", r->B, r->T);
    printf("| micro-batches / step  | %21d |\n", r->accum);
    printf("| train iters           | %21d |\n", r->iters);
    printf("| lr decay              | %21s |\n", ir_cfg_text(r->m, IR_CFG_LR_DECAY_STYLE));
    char warmup[32];
    snprintf(warmup, sizeof warmup, "warmup %s", rt_lr_unit(&r->lr));
    printf("| %-21s | %21g |\n", warmup, r->lr.warmup);
    printf("| eval every / batches  | %13d / %5d |\n", r->eval_interval, r->eval_iters);
    printf("| FLOP per token        | %21.4g |\n", r->flops_per_token);
    printf("| plan memory, bytes    | %21zu |\n", rt_program_plan_bytes(r->p)); /* mcc compile's total */
    if (r->p->host_bytes) /* mcc compile's host memory line */
        printf("| host memory, bytes    | %21zu |\n", r->p->host_bytes);
    for (int k = 0; k < KNOB_COUNT; k++) /* the MCC_ variables set (the rest are at their defaults) */
        if (knob_shown((knob_id)k))
            printf("| %s=%-*s |\n", knob_table[k].name, 44 - (int)strlen(knob_table[k].name), knob_text((knob_id)k));
    printf("+-----------------------+-----------------------+\n");
    rt_gpt_data_print(r->data, stdout);
}

static void start_dumps(train_run *r)
{
    char err[4200];
    if (r->stage_writer && !os_mkdirs(r->a.dump_dir, err, sizeof err)) {
        fprintf(stderr, "train_rank: error: --dump-dir: %s\n", err);
        exit(1);
    }
    if (r->writer) {
        dump_open(&r->a, "batches.mcct", &r->batches);
        snprintf(r->steps_path, sizeof r->steps_path, "%s/steps.txt", r->a.dump_dir);
        if (!(r->steps = fopen(r->steps_path, "w")))
            dump_failed(r->steps_path, errno);
    }
    dump_globals(r, IR_GLOBAL_PARAM, "params_init.mcct");
}

static void finish_run(train_run *r)
{
    if (r->a.dump_dir)
        dump_globals(r, IR_GLOBAL_PARAM, "params_final.mcct");
    if (r->a.dump_dir && fp8_delayed(r->m))
        dump_globals(r, IR_GLOBAL_FP8_HISTORY, "fp8_histories_final.mcct");
    double lo, hi;
    if (r->a.dump_dir && expert_bias_range(r, &lo, &hi))
        dump_globals(r, IR_GLOBAL_EXPERT_BIAS, "expert_biases_final.mcct");
    if (r->a.dump_dir && r->writer) {
        dump_close(&r->batches);
        if (!rt_file_close_synced(r->steps))
            dump_failed(r->steps_path, errno);
    }
    char err[1024];
    if (r->metrics.path && !rt_metrics_close(&r->metrics, err, sizeof err)) {
        fprintf(stderr, "train_rank: error: %s\n", err);
        exit(1);
    }
    if (r->tb)
        rt_tb_close(r->tb);
    free(r->sample);
    for (int split = RT_SPLIT_TRAIN; split <= RT_SPLIT_VALID; split++)
        rt_sampler_free(&r->sampler[split]);
    free(r->tokens);
    rt_moe_stats_free(&r->moe);
    free(r->targets);
    rt_gpt_data_close(r->data);
    rt_gpt_data_config_free(&r->a.data);
    free(r->args);
    free(r->args_text);
    rt_parallel_finish(&r->par, r->p);
    rt_program_free(r->p);
}

/* ---- stopping on SIGTERM/SIGINT ----------------------------------------------------------- */

static volatile sig_atomic_t train_signal; /* the stop signal caught, or 0 */

static void train_on_signal(int sig) { train_signal = sig; }

/* From here on SIGTERM (a scheduler's preemption, a launcher's forwarded signal) and SIGINT
 * (Ctrl-C) stop the run after the iteration in flight, its records written, instead of killing
 * it mid-step. SA_RESTART: the step's I/O and collectives go on undisturbed. A signal ignored
 * when we started (SIGINT of a background job) stays ignored. */
static void catch_stop_signals(void)
{
    struct sigaction sa = {.sa_handler = train_on_signal, .sa_flags = SA_RESTART}, old;
    sigemptyset(&sa.sa_mask);
    const int sigs[] = {SIGTERM, SIGINT};
    for (int i = 0; i < 2; i++)
        if (sigaction(sigs[i], &sa, &old) == 0 && old.sa_handler == SIG_IGN)
            sigaction(sigs[i], &old, NULL);
}

/* The stop signal any rank caught, or 0. A forwarded signal reaches the ranks at different
 * points of a step, and every rank must stop after the same iteration (one that went on would
 * wait for the others in its next collective): so the ranks take the maximum over the world at
 * each step's end. Collective: every rank calls. */
static int stop_signal(train_run *r)
{
    return (int)rt_parallel_world(&r->par, r->p, (float)train_signal, RT_MAX);
}

/* ---- the loop ------------------------------------------------------------------------------ */

/* Saves the checkpoint of iteration it, with the run's counters. */
static void save_checkpoint(train_run *r, int it)
{
    rt_ckpt_counters c = {it, (int64_t)it * r->B * r->accum * r->cfg.dp, r->steps_applied, r->evals_done};
    rt_ckpt_save(&r->a.ckpt, r->p, &r->par, &c, &r->ckpt);
}

/* Whether --exit-duration-in-mins has passed on rank 0's clock, agreed by every rank (one
 * collective a step while the flag is given, as Megatron's). */
static bool duration_passed(train_run *r)
{
    double mins = r->a.ckpt.exit_duration_mins;
    if (!mins)
        return false;
    bool passed = r->writer && (os_now_s() - r->t_start) / 60.0 > mins;
    return rt_parallel_world(&r->par, r->p, passed ? 1.0f : 0.0f, RT_MAX) > 0;
}

/* --load (between initialisation and the first step): the loop then starts after the loaded
 * iteration. */
static void load_checkpoint(train_run *r)
{
    rt_ckpt_counters c = {0};
    if (!r->a.ckpt.load || !rt_ckpt_load(&r->a.ckpt, r->p, &r->par, &c))
        return;
    r->start = (int)c.iteration;
    r->steps_applied = (int)c.steps_applied;
    r->evals_done = (int)c.evals_done;
    if (r->start >= r->iters && r->writer)
        fprintf(stderr, "train_rank: note: the checkpoint loaded is at iteration %d, --train-iters is %d: nothing to "
                        "train\n", r->start, r->iters);
}

/* The train and valid splits' samplers (--dataloader-type, --no-data-sharding), built where
 * Megatron builds its loaders: after the load, from the samples the loaded run consumed. */
static void open_samplers(train_run *r)
{
    rt_sampler_kind kind = strcmp(r->a.dataloader_type, "cyclic") ? RT_SAMPLER_SINGLE : RT_SAMPLER_CYCLIC;
    int dp = r->par.mesh.degree[IR_AXIS_DP];
    int64_t batch = (int64_t)r->B * r->accum * dp;
    const int64_t consumed[] = {[RT_SPLIT_TRAIN] = r->start * batch,
                                [RT_SPLIT_VALID] = (int64_t)r->evals_done * r->eval_iters * batch};
    for (int split = RT_SPLIT_TRAIN; split <= RT_SPLIT_VALID; split++) {
        int64_t total = rt_gpt_data_num_samples(r->data, split);
        char err[256];
        if (total && !rt_sampler_init(&r->sampler[split], kind, !r->a.no_data_sharding, total, consumed[split], r->B,
                                      dp, err, sizeof err)) {
            fprintf(stderr, "train_rank: error: %s\n", err);
            exit(1);
        }
    }
}

/* After iteration it: the commit of an asynchronous save whose writers are done; a checkpoint
 * every --save-interval, at --exit-interval or --exit-duration-in-mins, at the last iteration
 * and (--exit-signal-handler) on a stop signal, with --save. Returns whether the run stops here
 * for --exit-interval or --exit-duration-in-mins. */
static bool checkpoint_after(train_run *r, int it, int stop)
{
    const rt_ckpt_args *a = &r->a.ckpt;
    rt_ckpt_poll(r->p, &r->par, r->ckpt);
    bool exit_now = a->exit_interval && it % a->exit_interval == 0;
    if (duration_passed(r) && it < r->iters) {
        exit_now = true;
        if (r->writer)
            printf(" exiting program after %g minutes (--exit-duration-in-mins) at iteration %d\n", a->exit_duration_mins,
                   it);
    }
    if (a->save && ((a->save_interval && it % a->save_interval == 0) || it == r->iters || exit_now ||
                    (stop && a->exit_signal_handler)))
        save_checkpoint(r, it);
    return exit_now;
}

/* Iterations after the loaded one (start) to iters, or up to the one in flight when a stop signal
 * came or --exit-interval (*last: the last one run). Returns that signal, or 0. */
static int train_loop(train_run *r, double t_start, int *last)
{
    catch_stop_signals();
    log_window w = {0};
    *last = r->start;
    for (int it = r->start + 1; it <= r->iters; it++) {
        double t0 = os_now_s();
        char range[32];
        snprintf(range, sizeof range, "iteration %d", it);
        rt_trace_push(r->p, range);
        step_result s = train_step(r, it);
        rt_trace_pop(r->p);
        w.seconds += os_now_s() - t0;
        w.iters++;
        w.skipped += s.skipped;
        w.loss += s.skipped ? 0 : s.loss;
        w.moe_aux += s.skipped ? 0 : s.moe_aux;
        w.moe_z += s.skipped ? 0 : s.moe_z;
        w.moe_imbalance += s.skipped ? 0 : s.moe_imbalance;
        w.moe_dropped += s.skipped ? 0 : s.moe_dropped;
        if (it == r->start + 1) {
            size_t used = r->p->dev->memory_in_use(r->p);
            printf("time to first step: %.2f s", os_now_s() - t_start);
            if (used)
                printf(" | %s memory in use: %.3f GiB", r->p->dev->name, used / 1073741824.0);
            printf("\n");
        }
        int stop = stop_signal(r);
        if (it % r->a.log_interval == 0 || it == r->iters || stop) {
            log_line(r, it, &s, &w);
            w = (log_window){0};
        }
        /* a stop signal skips the validation due here (the stop is prompt) but passes over its
         * samples, so that a resume's validations read what the uninterrupted run's read */
        if (r->eval_iters && (it % r->eval_interval == 0 || it == r->iters)) {
            if (stop)
                r->evals_done++;
            else
                evaluate(r, it);
        }
        fflush(stdout);
        *last = it;
        if (checkpoint_after(r, it, stop) && !stop)
            return 0;
        if (stop)
            return stop;
    }
    return 0;
}

int main(int argc, char **argv)
{
    char err[1024];
    if (!knob_init(KNOB_TRAIN_RANK, err, sizeof err)) /* before the launcher: one message, not one a rank */
        return fprintf(stderr, "train_rank: error: %s\n", err), 2;
    int nargs;
    char **args = cli_split_equals(argc, argv, &nargs); /* --flag=value as --flag value */
    int nproc = rt_launch_nproc(nargs, args), code = 0;
    if (nproc) { /* this process starts N ranks of itself instead of training */
        code = rt_launch_local(nproc, nargs, args);
        cli_argv_free(args);
        return code;
    }
    /* A file size limit (ulimit -f) then fails the write, which names the file, instead of
     * killing the run without a word. */
    signal(SIGXFSZ, SIG_IGN);
    double t_start = os_now_s();
    train_run r = {0};
    setup_run(&r, nargs, args);
    rt_program_init_params(r.p, (uint64_t)r.cfg.seed);
    load_checkpoint(&r);
    r.data = open_data(&r);
    print_config(&r);
    open_samplers(&r);
    if (r.a.dump_dir)
        start_dumps(&r);
    r.t_start = t_start;
    int last = 0, sig = train_loop(&r, t_start, &last);
    rt_ckpt_finish(r.p, &r.par, &r.ckpt); /* the save in flight, written and committed */
    finish_run(&r);
    if (sig && r.writer) {
        fprintf(stderr, "train_rank: stopped by %s after iteration %d of %d", sig == SIGINT ? "SIGINT" : "SIGTERM", last,
                r.iters);
        if (r.a.metrics_file)
            fprintf(stderr, "; the metrics file %s has every record up to it", r.a.metrics_file);
        fprintf(stderr, "\n");
    }
    cli_argv_free(args);
    return sig ? 128 + sig : 0;
}
