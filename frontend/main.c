/* main.c — the mcc command line: the whole pipeline in order.
 *   mcc compile SPEC.json [--field value ...] -o train_rank   spec -> IR -> passes -> executable
 *   mcc ir SPEC.json [--after PASS] [--rank R]                 print the IR after a pass
 *   mcc ir --list-passes
 *   mcc opt IN.ir --pass NAME [--rank R] [--target T]          one pass on IR text, verified, printed
 *   mcc data preprocess --input FILE --output-prefix P        text -> Megatron indexed dataset
 *   mcc plot METRICS.jsonl -o OUT.svg                         train_rank's metrics -> curves
 *   mcc schedule SPEC.json [--<field> VALUE ...] [--svg OUT]  the pipeline schedule, timed and drawn
 *   mcc convert --to hf CKPT OUT --spec SPEC.json             checkpoint -> Hugging Face directory
 *   mcc convert --from hf IN CKPT                             Hugging Face directory -> checkpoint + spec
 *   mcc help fields|megatron-flags [--markdown]               a table of the docs/ pages
 *   mcc --version; `mcc COMMAND --help` (or -h anywhere after it) prints that command's usage */
#include "codegen/codegen.h"
#include "common/cli.h"
#include "common/knobs.h"
#include "common/os.h"
#include "frontend/convert.h"
#include "frontend/data_preprocess.h"
#include "frontend/megatron_flags.h"
#include "frontend/plan.h"
#include "frontend/plot.h"
#include "frontend/schedule_cmd.h"
#include "frontend/spec.h"
#include "frontend/tune.h"
#include "passes/passes.h"
#include "passes/step_cost.h"
#include "runtime/train_flags.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The CUDA target is the default where mcc was built with the CUDA toolkit. */
#ifdef MCC_HAVE_CUDA
#define DEFAULT_TARGET "cuda"
#else
#define DEFAULT_TARGET "cpu"
#endif

static int fail(const char *msg)
{
    fprintf(stderr, "mcc: error: %s\n", msg);
    return 2;
}

/* The options of compile/ir that are not spec fields. */
typedef struct {
    const char *out, *after, *target, *comm_lanes, *cost_table;
    long long rank;
    bool keep_logits, memory_report;
    double gpu_memory_gib;
    double host_memory_gib;         /* one machine's, which its ranks share (0: this machine's) */
    mcc_pass_options passes;        /* --target's description, handed to every pass */
    bool side_lane, copy_lane;      /* --comm-lanes against the target: config comm_side_lane, comm_copy_lane */
    char *train_rank_args;          /* train_rank's flags given, one a line (config train_rank_args; malloc'd) */
} cli_opts;

typedef enum { OPT_TEXT, OPT_SWITCH, OPT_RANK, OPT_GIB } opt_kind;

/* Every option of compile and ir that is not a spec field: parsing, --help and "did you mean"
 * all read this table. */
static const struct {
    const char *flag, *value; /* value: what it takes, NULL for a switch */
    opt_kind kind;
    size_t off;               /* its member of cli_opts */
    const char *help;
} cli_options[] = {
    {"-o", "OUT", OPT_TEXT, offsetof(cli_opts, out), "compile: the train_rank executable to write"},
    {"--target", "NAME", OPT_TEXT, offsetof(cli_opts, target),
     "the machine (passes/target.c): h200, h100 (SXM, 80 GB) or h100-pcie (the CUDA backend), cpu, or cuda = h200 "
     "(default " DEFAULT_TARGET ")"},
    {"--gpu-memory", "GIB", OPT_GIB, offsetof(cli_opts, gpu_memory_gib),
     "compile for a GPU: the memory the plan must fit in (default the target's: an H200's 140.4 GiB)"},
    {"--host-memory", "GIB", OPT_GIB, offsetof(cli_opts, host_memory_gib),
     "compile: the host memory of one machine, which its ranks' offloaded optimizer state must fit in "
     "(--optimizer-cpu-offload; default this machine's physical memory)"},
    {"--comm-lanes", "copy|side|side,copy|none", OPT_TEXT, offsetof(cli_opts, comm_lanes),
     "compile: the communicators that carry collectives beside computation, baked into the plan (copy: the copy "
     "engines, with the exchange buffers the memory report counts; side: MCC_SIDE_NCCL_CTAS CTAs; none: the "
     "group's own; default copy where the target's copy engines serve collectives, else none)"},
    {"--keep-logits", NULL, OPT_SWITCH, offsetof(cli_opts, keep_logits),
     "keep the logits for train_rank --dump-dir (they stay alive through the backward)"},
    {"--memory-report", NULL, OPT_SWITCH, offsetof(cli_opts, memory_report),
     "compile: what is live at the memory peak, by the op that made it"},
    {"--cost-table", "FILE", OPT_TEXT, offsetof(cli_opts, cost_table),
     "compile: every instruction's class, work and predicted time, tab-separated (passes/step_cost.h; "
     "bench/calibrate.py joins it with a measured profile)"},
    {"--unfused-fp8-amax", NULL, OPT_SWITCH, offsetof(cli_opts, passes.unfused_fp8_amax),
     "compile: FP8's amaxes as instructions of their own, each a pass over its tensor, instead of made by the norm, "
     "SwiGLU or gradient kernel that writes the tensor (the fused program's check: both compute the same bits)"},
    {"--after", "PASS", OPT_TEXT, offsetof(cli_opts, after), "ir: print the IR after this pass (default the last)"},
    {"--rank", "R", OPT_RANK, offsetof(cli_opts, rank), "ir: print the plan as rank R runs it, its rank terms (64*tp) resolved (default: as compiled)"},
};
enum { NOPTIONS = sizeof cli_options / sizeof cli_options[0] };

/* train_rank's flags (runtime/train_flags.def), which mcc compile bakes into the plan as the
 * compiled train_rank's defaults: how many values each takes and what they must be. */
static const struct {
    const char *flag, *value;
    train_flag_kind kind;
    int min;
} run_flags[] = {
#define RT_FLAG(flag, value, kind, member, min, help) {flag, value, TRAIN_FLAG_##kind, min},
#include "runtime/train_flags.def"
#undef RT_FLAG
};
enum { NRUN_FLAGS = sizeof run_flags / sizeof run_flags[0] };

/* Appends a problem to the list in err (one a line), so that a command line's every problem is
 * said in one run. */
static void add_problem(char *err, size_t errlen, const char *fmt, ...)
{
    size_t used = strlen(err);
    if (used + 2 >= errlen) return;
    if (used) err[used++] = '\n';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + used, errlen - used, fmt, ap);
    va_end(ap);
}

/* "unknown flag", with the nearest flag of compile/ir (spec fields, options, Megatron's, train_rank's). */
static void unknown_flag(const char *flag, char *err, size_t errlen)
{
    const char *names[NOPTIONS + NRUN_FLAGS + 1];
    int n = 0;
    for (int i = 0; i < NOPTIONS; i++)
        names[n++] = cli_options[i].flag;
    for (int i = 0; i < NRUN_FLAGS; i++) /* NOPTIONS + NRUN_FLAGS within mcc_spec_flag_near's 64 extra */
        names[n++] = run_flags[i].flag;
    names[n] = NULL;
    const char *near = mcc_spec_flag_near(flag, names);
    if (near)
        add_problem(err, errlen, "unknown flag '%s': did you mean %s? (`mcc compile --help` lists every flag)", flag,
                    near);
    else if (strncmp(flag, "--", 2) != 0)
        add_problem(err, errlen, "'%s' is not a flag and follows no flag that takes it: a stray value, or a second "
                                 "spec file (the spec file comes first, alone)", flag);
    else
        add_problem(err, errlen, "unknown flag '%s' (spec fields use their names with '-': --hidden-size; "
                                 "`mcc compile --help` lists every flag)", flag);
}

/* train_rank flag r given to mcc compile, with its nv values at v: checked and written to run,
 * one argument a line; the values it took. */
static int bake_run_flag(int r, const char *const *v, int nv, FILE *run, char *err, size_t errlen)
{
    const char *flag = run_flags[r].flag;
    int take = run_flags[r].kind == TRAIN_FLAG_PATHS ? nv
               : run_flags[r].kind == TRAIN_FLAG_SWITCH || run_flags[r].kind == TRAIN_FLAG_ASYNC_ON ||
                       run_flags[r].kind == TRAIN_FLAG_ASYNC_OFF ? 0 : 1;
    char why[256];
    long long i;
    double x;
    if (take > nv || (run_flags[r].kind == TRAIN_FLAG_PATHS && nv == 0)) {
        add_problem(err, errlen, "%s needs a value: %s", flag, run_flags[r].value);
        return nv;
    }
    if ((run_flags[r].kind == TRAIN_FLAG_INT && !cli_parse_int(flag, v[0], run_flags[r].min, 1000000000, &i, why, sizeof why)) ||
        (run_flags[r].kind == TRAIN_FLAG_NUM && !cli_parse_num(flag, v[0], 0, true, 1e9, &x, why, sizeof why))) {
        add_problem(err, errlen, "%s", why);
        return take;
    }
    bool worded = run_flags[r].kind == TRAIN_FLAG_TEXT || run_flags[r].kind == TRAIN_FLAG_CHOICE;
    if (worded && !cli_value_fits(run_flags[r].value, v[0])) {
        add_problem(err, errlen, "%s %s: it takes %s (`train_rank --help` says what each means)", flag, v[0],
                    run_flags[r].value);
        return take;
    }
    for (int k = -1; k < take; k++) {
        if (strchr(k < 0 ? flag : v[k], '\n'))
            return add_problem(err, errlen, "%s: a value holds a newline", flag), take;
        fprintf(run, "%s%s", ftell(run) ? "\n" : "", k < 0 ? flag : v[k]);
    }
    fprintf(stderr, "mcc: %s: baked into train_rank as its default (a flag given to it overrides it)\n", flag);
    return take;
}

/* compile/ir's own option i with its nv values at v into o; the values it took. */
static int read_option(int i, const char *const *v, int nv, cli_opts *o, char *err, size_t errlen)
{
    const char *flag = cli_options[i].flag;
    void *slot = (char *)o + cli_options[i].off;
    char why[256];
    if (cli_options[i].kind == OPT_SWITCH) {
        *(bool *)slot = true;
        return 0;
    }
    if (!nv) {
        add_problem(err, errlen, "%s needs a value: %s", flag, cli_options[i].value);
        return 0;
    }
    if (cli_options[i].kind == OPT_TEXT)
        *(const char **)slot = v[0];
    else if ((cli_options[i].kind == OPT_RANK && !cli_parse_int(flag, v[0], 0, LLONG_MAX, slot, why, sizeof why)) ||
             (cli_options[i].kind == OPT_GIB && !cli_parse_num(flag, v[0], 0, true, INFINITY, slot, why, sizeof why)))
        add_problem(err, errlen, "%s", why);
    return 1;
}

/* The flags mcc_spec_load left (argv[rest[k]]): compile/ir's options, train_rank's flags (baked),
 * and every other one a problem added to err. */
static bool parse_opts(char **argv, const int *rest, int nrest, cli_opts *o, char *err, size_t errlen)
{
    size_t given = strlen(err), run_len = 0;
    char why[512];
    FILE *run = open_memstream(&o->train_rank_args, &run_len);
    if (!run) return add_problem(err, errlen, "out of memory reading the flags"), false;
    for (int k = 0; k < nrest; k++) {
        const char *flag = argv[rest[k]], *v[64];
        int nv = 0; /* the words right after it that are no flag: its values */
        while (k + 1 + nv < nrest && nv < 64 && rest[k + 1 + nv] == rest[k] + 1 + nv &&
               strncmp(argv[rest[k + 1 + nv]], "--", 2) != 0)
            v[nv] = argv[rest[k + 1 + nv]], nv++;
        int i = 0, r = 0;
        while (i < NOPTIONS && strcmp(cli_options[i].flag, flag) != 0) i++;
        while (r < NRUN_FLAGS && strcmp(run_flags[r].flag, flag) != 0) r++;
        if (i < NOPTIONS)
            k += read_option(i, v, nv, o, err, errlen);
        else if (r < NRUN_FLAGS)
            k += bake_run_flag(r, v, nv, run, err, errlen);
        else
            unknown_flag(flag, err, errlen), k += nv;
    }
    fclose(run);
    if (o->after && mcc_pass_index(o->after) < 0)
        add_problem(err, errlen, "--after %s: no such pass (mcc ir --list-passes names them)", o->after);
    if (!o->target)
        o->target = DEFAULT_TARGET;
    if (!(o->passes.target = mcc_target_by_name(o->target)))
        add_problem(err, errlen, "--target %s: choose %s", o->target, mcc_target_names());
    else if (!mcc_target_parse_lanes(o->passes.target, o->comm_lanes, &o->side_lane, &o->copy_lane, why, sizeof why))
        add_problem(err, errlen, "%s", why);
    return strlen(err) == given;
}

static bool check_layout(const mcc_spec *spec, const cli_opts *o, char *err, size_t errlen)
{
    int tp = spec->tensor_model_parallel_size, cp = spec->context_parallel_size;
    int world = tp * cp * spec->data_parallel_size * spec->pipeline_model_parallel_size;
    if (o->rank >= world) {
        snprintf(err, errlen, "--rank %lld: the layout has %d ranks (tp %d x cp %d x dp %d x pp %d): give 0..%d", o->rank,
                 world, tp, cp, spec->data_parallel_size, spec->pipeline_model_parallel_size, world - 1);
        return false;
    }
    return true;
}

/* Every problem in err (one a line) on stderr, and how many. */
static void print_problems(const char *err)
{
    int n = 0;
    for (const char *line = err; line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL, n++)
        fprintf(stderr, "mcc: error: %.*s\n", (int)strcspn(line, "\n"), line);
    if (n > 1)
        fprintf(stderr, "mcc: %d problems in this command line; nothing was compiled\n", n);
}

/* Reads the spec (SPEC.json and its flags, or the flags alone) and the other options; false after
 * printing every problem. */
static bool load(int argc, char **argv, cli_opts *o, mcc_spec *spec)
{
    enum { ERRLEN = 32768 };
    if (argc < 1) {
        fail("expected a spec file (SPEC.json) or the model's flags (--num-layers N --hidden-size N ...)");
        return false;
    }
    const char *path = argv[0][0] != '-' ? argv[0] : NULL;
    int first = path ? 1 : 0, *rest = malloc(sizeof(int) * (size_t)argc), nrest = 0;
    char *err = calloc(1, ERRLEN);
    bool ok = rest && err;
    if (ok) {
        bool spec_ok = mcc_spec_load(path, argc - first, argv + first, spec, rest, &nrest, err, ERRLEN);
        for (int k = 0; k < nrest; k++)
            rest[k] += first; /* indices into argv+first -> argv */
        ok = parse_opts(argv, rest, nrest, o, err, ERRLEN) && spec_ok && check_layout(spec, o, err, ERRLEN);
    }
    if (!ok)
        err ? print_problems(err) : (void)fail("out of memory reading the command line");
    free(rest);
    free(err);
    if (!ok)
        return false;
    /* Megatron's line, word for word, so logs compare */
    fprintf(stderr, "mcc: padded vocab (size: %d) with %d dummy tokens (new size: %d)\n", spec->vocab_size,
            spec->padded_vocab_size - spec->vocab_size, spec->padded_vocab_size);
    return true;
}

/* The planned program, through pass `last` (NULL: all): one plan for every rank of a pipeline
 * stage (the pipeline pass cuts it into one module a stage), the attributes that differ between
 * ranks written as rank terms (ir_rank_term). False after saying why. */
static bool build_as(const char *path, const mcc_spec *spec, const cli_opts *o, const char *last, mcc_program *prog)
{
    char err[2048];
    double t0 = os_now_s();
    mcc_plan_options plan = {.passes = o->passes, .side_lane = o->side_lane, .copy_lane = o->copy_lane,
                             .keep_logits = o->keep_logits, .train_rank_args = o->train_rank_args};
    if (!mcc_plan_build(spec, &plan, last, prog, err, sizeof err))
        return fail(err), false;
    fprintf(stderr, "mcc: built and verified %s through pass %s in %.2f s\n", path,
            last ? last : mcc_passes[mcc_npasses - 1].name, os_now_s() - t0);
    return true;
}

/* What the CUDA context, cuBLASLt's workspace and kernel scratch take besides the plan. */
#define RUNTIME_OVERHEAD_GIB 1.0

/* The target's memory for the plan in GiB (--gpu-memory GIB instead, when given); 0: not checked
 * (a target without a memory figure, the CPU's: the host's). */
static double gpu_gib(const cli_opts *o)
{
    if (!o->passes.target->memory_bytes)
        return 0;
    return o->gpu_memory_gib ? o->gpu_memory_gib : o->passes.target->memory_bytes / 1073741824.0;
}

/* The GiB the program's largest stage needs with the runtime's, and which stage that is. */
static double program_gib(const mcc_program *prog, int *stage)
{
    double most = 0;
    for (int s = 0; s < prog->n; s++) {
        mcc_memory_breakdown mem = mcc_memory_of(prog->stage[s]);
        double gib = mcc_memory_total(&mem) / 1073741824.0 + RUNTIME_OVERHEAD_GIB;
        if (gib > most)
            most = gib, *stage = s;
    }
    return most;
}

/* The program, its pipeline schedule chosen where the spec says auto: the first of pp_scheds that
 * splits the backward at the spec's virtual stages (ZB-H1 without them) when its plan fits the
 * target's memory (its simulated bubble is below 1F1B's at any micro-batch count,
 * passes/pp_schedule.c), else the first that keeps it whole (1F1B), whose stash is the smaller (W
 * keeps B's gradients); where none splits it (virtual stages) the pipeline pass's auto
 * (interleaved 1F1B, pass_pipeline_schedule). The choice needs the whole plan's memory: the passes
 * run to the end, and again to `last` when asked for less. */
static bool build(const char *path, const mcc_spec *spec, const cli_opts *o, const char *last, mcc_program *prog)
{
    int v = spec->virtual_pipeline_model_parallel_size;
    pp_sched_kind split = pp_sched_find(v, true), whole = pp_sched_find(v, false);
    if (spec->pipeline_model_parallel_size < 2 || spec->pipeline_schedule != MCC_PP_SCHED_AUTO ||
        split == PP_NUM_SCHEDS)
        return build_as(path, spec, o, last, prog);
    mcc_spec s = *spec;
    s.pipeline_schedule = mcc_pp_sched_of(split);
    if (!build_as(path, &s, o, NULL, prog))
        return false;
    int stage = 0;
    double need = program_gib(prog, &stage), have = gpu_gib(o);
    bool fits = !have || need <= have;
    if (fits) {
        fprintf(stderr, "mcc: pipeline schedule %s (auto: the zero-bubble schedule fits)\n", pp_sched_names[split]);
    } else {
        fprintf(stderr, "mcc: pipeline schedule %s (auto: %s would need %.1f GiB on stage %d, the GPU has %.1f)\n",
                pp_sched_names[whole], pp_sched_names[split], need, stage, have);
        s.pipeline_schedule = mcc_pp_sched_of(whole);
    }
    if (!last && fits)
        return true;
    mcc_program_free(prog);
    return build_as(path, &s, o, last, prog);
}

/* One "To fit" hint: the flags that change the spec, and why the plan is smaller with them. One
 * line each, flags first, so that a reader (and tests/fit_hints.sh, which re-plans with each and
 * checks that the memory does not grow) takes them as they are. */
static void fit_hint(const char *flags, const char *why) { fprintf(stderr, "    %s: %s\n", flags, why); }

/* The flags of a layout hint, tp and pp ranks (one of them doubled) into flags[n], as the spec takes
 * them: false where the heads, kv heads, sequence (sequence parallelism) or layers do not divide.
 * A given world_size keeps its ranks (dp shrinks) where it divides into tp x cp x pp and ep into
 * the dp x cp left, else doubles (dp kept). */
static bool fit_layout(const mcc_spec *s, int tp, int pp, char *flags, size_t n)
{
    int split = tp * s->context_parallel_size * pp, len;
    if (s->num_attention_heads % tp || s->num_query_groups % tp || s->seq_length % tp || s->num_layers % pp)
        return false;
    if (tp != s->tensor_model_parallel_size)
        len = snprintf(flags, n, "--tensor-model-parallel-size %d --sequence-parallel", tp);
    else
        len = snprintf(flags, n, "--pipeline-model-parallel-size %d", pp);
    bool kept = s->world_size % split == 0 &&
                s->world_size / split * s->context_parallel_size % s->expert_model_parallel_size == 0;
    if (s->world_size && !kept)
        snprintf(flags + len, n - (size_t)len, " --world-size %d", 2 * s->world_size);
    return true;
}

/* "--world-size W" (or "--data-parallel-size N" where the world is not given) with twice the
 * data-parallel ranks, in flags[n]; false where the global batch does not divide over them. */
static bool fit_more_replicas(const mcc_spec *s, char *flags, size_t n)
{
    int dp = 2 * s->data_parallel_size;
    if (s->global_batch_size % (s->micro_batch_size * dp))
        return false;
    if (s->world_size)
        snprintf(flags, n, "--world-size %d", 2 * s->world_size);
    else
        snprintf(flags, n, "--data-parallel-size %d", dp);
    return true;
}

/* The GPU memory's "To fit" hints: the changes of spec s that lower its plan's memory (none raises
 * it), each where it changes something: what is already on is not proposed again. */
static void gpu_fit_hints(const mcc_spec *s)
{
    char flags[128];
    bool moments = s->use_precision_aware_optimizer && s->exp_avg_dtype == MCC_MOMENT_BF16 &&
                   s->exp_avg_sq_dtype == MCC_MOMENT_BF16;
    fprintf(stderr, "  To fit, add any of these (each lowers this plan's memory):\n");
    if (!s->grad_reduce_in_bf16)
        fit_hint("--grad-reduce-in-bf16", "the gradients held and reduced in bf16, half their bytes");
    if (!s->use_distributed_optimizer && s->data_parallel_size * s->context_parallel_size > 1)
        fit_hint("--use-distributed-optimizer", "fp32 masters and Adam state sharded over the data-parallel ranks");
    if (!moments)
        fit_hint("--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16",
                 "Adam's moments in bf16, half their bytes (and without ZeRO each fp32 master as its bf16 copy and a "
                 "remainder)");
    if (s->recompute_granularity == MCC_RECOMPUTE_NONE)
        fit_hint("--recompute-granularity selective", "norm and activation outputs recomputed in the backward");
    if (s->recompute_granularity != MCC_RECOMPUTE_FULL)
        fit_hint("--recompute-granularity full --recompute-method uniform --recompute-num-layers 1",
                 "each layer keeps only its input for the backward");
    if (s->micro_batch_size > 1)
        fit_hint("--micro-batch-size 1", "activations scale with it (the accumulation grows instead)");
    /* passes/loss_chunks.c chunks a whole head (not tp's vocabulary-parallel one, nor a pipeline's);
     * under full recompute a replayed layer can be the peak, which the chunks leave as it is (or a
     * placement a few MiB apart) */
    int tokens = s->micro_batch_size * s->seq_length / s->context_parallel_size;
    if (s->cross_entropy_chunks == 1 && tokens % 4 == 0 && s->tensor_model_parallel_size == 1 &&
        s->pipeline_model_parallel_size == 1 && s->recompute_granularity != MCC_RECOMPUTE_FULL)
        fit_hint("--cross-entropy-chunks 4", "the output head and its cross entropy over 4 chunks of the tokens: one "
                 "chunk's logits live at a time");
    if (fit_layout(s, 2 * s->tensor_model_parallel_size, s->pipeline_model_parallel_size, flags, sizeof flags))
        fit_hint(flags, "the layers' weights, gradients, optimizer state and activations over twice the ranks");
    if (fit_layout(s, s->tensor_model_parallel_size, 2 * s->pipeline_model_parallel_size, flags, sizeof flags))
        fit_hint(flags, "a stage holds half the layers (and the activations of its micro-batches in flight)");
    if (s->use_distributed_optimizer && fit_more_replicas(s, flags, sizeof flags))
        fit_hint(flags, "twice the data-parallel ranks, over which the distributed optimizer shards its state");
    fprintf(stderr, "  or shorten --seq-length (activations scale with it).\n");
}

/* Whether the plan fits the target's memory (--gpu-memory GIB instead, when given), said either
 * way, with spec s's hints where it does not; a target without a memory figure (the CPU's: the
 * host's) is not checked. */
static bool fits_gpu(const mcc_memory_breakdown *mem, const mcc_spec *s, const cli_opts *o)
{
    const mcc_target *t = o->passes.target;
    double gib = mcc_memory_total(mem) / 1073741824.0, have = gpu_gib(o);
    if (!have)
        return true;
    char whose[96];
    if (o->gpu_memory_gib)
        snprintf(whose, sizeof whose, "--gpu-memory");
    else
        snprintf(whose, sizeof whose, "the %s target's; --gpu-memory GIB overrides it", t->name);
    if (gib + RUNTIME_OVERHEAD_GIB <= have) {
        fprintf(stderr, "mcc: the plan fits: %.2f GiB per GPU (+%.1f GiB runtime) of the %.1f GiB the GPU has (%s)\n",
                gib, RUNTIME_OVERHEAD_GIB, have, whose);
        return true;
    }
    fprintf(stderr, "mcc: error: the plan needs %.2f GiB per GPU (+%.1f GiB runtime) but the GPU has %.1f GiB (%s).\n",
            gib, RUNTIME_OVERHEAD_GIB, have, whose);
    gpu_fit_hints(s);
    return false;
}

/* The step's compute on a rank as planned (recomputation included) and its time at the target's
 * GEMM rate, and what it sends over each mesh axis, beside the memory. */
static void print_compute(const mcc_memory_breakdown *mem, const cli_opts *o)
{
    fprintf(stderr, "compute a step: %.6g GFLOP per rank, ~%.3g ms at the %s target's GEMM rate\n", mem->step_flops / 1e9,
            1e3 * mcc_target_compute_seconds(o->passes.target, mem->step_flops), o->passes.target->name);
    if (mem->recompute_flops > 0)
        fprintf(stderr, "  of which recompute: the backward replays %.6g GFLOP of forward a micro-batch (the whole "
                        "model's, before tensor and pipeline splits)\n", mem->recompute_flops / 1e9);
    if (mem->a2a_exchanges) {
        double off = mem->a2a_sent_bytes * (mem->ep - 1) / mem->ep, link = o->passes.target->link_bytes_per_s;
        fprintf(stderr, "expert all-to-all a micro-batch: %d exchanges send %.0f bytes per rank (balanced routing), "
                        "%.0f of them to the other %d ep ranks, ~%.3g ms over the %s target's link\n",
                mem->a2a_exchanges, mem->a2a_sent_bytes, off, mem->ep - 1, link > 0 ? 1e3 * off / link : 0,
                o->passes.target->name);
    }
    double total = 0, link = o->passes.target->link_bytes_per_s;
    for (int a = 0; a < IR_NUM_AXES; a++)
        total += mem->sent_bytes[a];
    if (total == 0)
        return;
    fprintf(stderr, "communication a step: %.6g GiB sent per rank, ~%.3g ms over the %s target's link:", total / 0x1p30,
            link > 0 ? 1e3 * total / link : 0, o->passes.target->name);
    for (int a = 0; a < IR_NUM_AXES; a++)
        if (mem->sent_bytes[a] > 0)
            fprintf(stderr, " %s %.4g GiB", ir_axis_name((ir_axis)a), mem->sent_bytes[a] / 0x1p30);
    fprintf(stderr, " (ring algorithms)\n");
}

/* Ranks that share one machine's host memory: a node of up to 8 GPUs. */
#define RANKS_PER_HOST 8

/* The host memory's "To fit" hints (fit_hint's lines), each lowering what one machine's ranks hold:
 * offloading half as much (the GPU's memory holds the rest); sharding the state over dp; and, where
 * a machine's ranks are already all its GPUs, twice the data-parallel ranks over which it is
 * sharded (with fewer, more ranks would share the machine, and each rank's share would shrink as
 * their number grew). */
static void host_fit_hints(const mcc_spec *s, long long world)
{
    char flags[128];
    fprintf(stderr, "  To fit, add any of these (each lowers the host memory of a machine's ranks):\n");
    snprintf(flags, sizeof flags, "--optimizer-offload-fraction %g", s->optimizer_offload_fraction / 2);
    fit_hint(flags, "half as many parameters' optimizer state offloaded (the GPU holds the others')");
    if (!s->use_distributed_optimizer && s->data_parallel_size * s->context_parallel_size > 1)
        fit_hint("--use-distributed-optimizer", "the offloaded state sharded over the data-parallel ranks");
    if (s->use_distributed_optimizer && world >= RANKS_PER_HOST && fit_more_replicas(s, flags, sizeof flags))
        fit_hint(flags, "twice the data-parallel ranks, over which the offloaded state is sharded");
    fprintf(stderr, "  or give the training machine's memory with --host-memory GIB.\n");
}

/* Whether the ranks of one machine fit their host memory (--optimizer-cpu-offload's page-locked
 * state) in --host-memory GIB, by default this machine's physical memory: the compile machine is
 * taken for the training machine, as the GPU's memory is the target's. */
static bool fits_host(const mcc_memory_breakdown *mem, const mcc_spec *spec, const cli_opts *o)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    double have = o->host_memory_gib ? o->host_memory_gib : pages > 0 && page > 0 ? (double)pages * page / 1073741824.0 : 0;
    long long world = (long long)spec->tensor_model_parallel_size * spec->pipeline_model_parallel_size *
                      spec->context_parallel_size * spec->data_parallel_size;
    int ranks = world < RANKS_PER_HOST ? (int)world : RANKS_PER_HOST;
    double per_rank = mem->host / 1073741824.0, need = per_rank * ranks;
    if (!mem->host || !have || need <= have)
        return true;
    fprintf(stderr, "mcc: error: the offloaded optimizer state needs %.3f GiB of host memory per rank, %.3f GiB for the "
                    "%d ranks of one machine, but it has %.3f GiB (%s).\n",
            per_rank, need, ranks, have, o->host_memory_gib ? "--host-memory" : "this machine's; --host-memory GIB overrides it");
    host_fit_hints(spec, world);
    return false;
}

/* One plan a pipeline stage in the executable: every rank of the stage runs it, resolving its rank
 * terms as it loads it. */
/* How to start the executable on the world it was compiled for (tp x cp x dp x pp ranks; a
 * launch of another size is refused by train_rank): GPU ranks by torchrun (--no-python: it is no
 * Python script), srun, mpirun or its own launcher on one node; CPU ranks by mpirun. */
static void print_launch(const mcc_spec *s, const cli_opts *o)
{
    int world = s->tensor_model_parallel_size * s->context_parallel_size * s->data_parallel_size *
                s->pipeline_model_parallel_size;
    bool baked = o->train_rank_args && (strstr(o->train_rank_args, "--data-path\n") ||
                                        strstr(o->train_rank_args, "--mock-data"));
    const char *dot = strchr(o->out, '/') ? "" : "./", *data = baked ? "" : "--data-path PREFIX ...";
    if (world == 1) {
        fprintf(stderr, "mcc: run it: %s%s %s\n", dot, o->out, data);
        return;
    }
    fprintf(stderr, "mcc: launch it on %d ranks (tp %d x cp %d x dp %d x pp %d), e.g.:\n", world,
            s->tensor_model_parallel_size, s->context_parallel_size, s->data_parallel_size,
            s->pipeline_model_parallel_size);
    if (strcmp(o->passes.target->backend, "cuda") == 0) {
        int per_node = s->nproc_per_node ? s->nproc_per_node
                       : world <= 8 ? world : world % 8 == 0 ? 8 : world % 4 == 0 ? 4 : world % 2 == 0 ? 2 : 1;
        int nodes = world / per_node; /* nodes of up to 8 GPUs, each as many ranks */
        fprintf(stderr, "  torchrun --nnodes %d --nproc-per-node %d%s --no-python %s%s %s\n", nodes, per_node,
                nodes > 1 ? " --rdzv-backend c10d --rdzv-endpoint HOST:29500" : "", dot, o->out, data);
        fprintf(stderr, "  srun --nodes %d --ntasks-per-node %d --gpus-per-node %d %s%s %s\n", nodes, per_node, per_node,
                dot, o->out, data);
        if (nodes == 1)
            fprintf(stderr, "  %s%s --nproc-per-node %d %s\n", dot, o->out, per_node, data);
    }
    fprintf(stderr, "  mpirun -np %d %s%s %s\n", world, dot, o->out, data);
}

/* The label of what was compiled: the spec file, or the flags' model. */
static const char *spec_label(int argc, char **argv) { return argc && argv[0][0] != '-' ? argv[0] : "the flags' model"; }


/* The step's predicted time (passes/step_cost.h), and with --cost-table its instructions' (a
 * pipeline's stage s into FILE.stageS). */
static void print_step_cost(const ir_module *m, const cli_opts *o, int stage)
{
    const mcc_target *t = o->passes.target;
    mcc_step_cost c = mcc_step_cost_of(m, t);
    char ms[32];
    snprintf(ms, sizeof ms, 1e3 * c.seconds >= 1000 ? "%.0f" : "%.4g", 1e3 * c.seconds);
    if (c.calibrated)
        fprintf(stderr, "step time (compute, no collectives): ~%s ms predicted by the %s target's calibration "
                        "(%.0f%% of it from calibrated rows: bench/calibrate.py)\n", ms, t->name, 100 * c.calibrated_share);
    else
        fprintf(stderr, "step time (compute, no collectives): ~%s ms by the %s target's roofline (uncalibrated)\n", ms,
                t->name);
    if (!o->cost_table)
        return;
    char path[4200];
    snprintf(path, sizeof path, stage < 0 ? "%s" : "%s.stage%d", o->cost_table, stage);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "mcc: warning: --cost-table %s: cannot write it\n", path);
        return;
    }
    mcc_step_cost_table(m, t, f);
    fclose(f);
}

static int compile_loaded(const char *label, const mcc_spec *spec, cli_opts *o)
{
    if (!o->out)
        return fail("-o OUT is required: the path of the train_rank executable to write");
    if (spec->num_experts > 0)
        fprintf(stderr, "parameters: %lld in all, %lld active (what one token multiplies by: the top-%d of %d experts "
                        "in each MoE layer; MFU counts these)\n", (long long)mcc_spec_num_params(spec),
                (long long)mcc_spec_num_active_params(spec), spec->moe_router_topk, spec->num_experts);
    mcc_program prog;
    if (!build(label, spec, o, NULL, &prog))
        return 2;
    bool fits = true;
    for (int s = 0; s < prog.n; s++) {
        mcc_memory_breakdown mem = mcc_memory_of(prog.stage[s]);
        mcc_memory_print(&mem, stderr);
        print_compute(&mem, o);
        print_step_cost(prog.stage[s], o, prog.n > 1 ? s : -1);
        if (o->memory_report)
            mcc_memory_report(prog.stage[s], stderr);
        fits = fits && fits_gpu(&mem, spec, o) && fits_host(&mem, spec, o);
    }
    if (!fits)
        return mcc_program_free(&prog), 2;
    char err[8192];
    bool ok = cg_write_executable(prog.stage, prog.n, o->out, err, sizeof err);
    mcc_program_free(&prog);
    if (!ok)
        return fail(err), 1;
    fprintf(stderr, "mcc: wrote %s\n", o->out);
    print_launch(spec, o);
    return 0;
}

static int cmd_compile(int argc, char **argv)
{
    cli_opts o = {0};
    mcc_spec spec;
    if (!load(argc, argv, &o, &spec))
        return free(o.train_rank_args), 2;
    int rc = compile_loaded(spec_label(argc, argv), &spec, &o);
    free(o.train_rank_args);
    return rc;
}

/* The program as text: every stage's module; with a rank (>= 0), that rank's stage as the rank runs
 * it, its rank terms resolved for its coordinates. */
static char *program_text(mcc_program *prog, long long rank)
{
    if (rank < 0)
        return ir_print_stages(prog->stage, prog->n);
    int coord[IR_NUM_AXES];
    ir_mesh mesh = ir_module_mesh(prog->stage[0]);
    ir_mesh_coords(&mesh, rank, coord);
    ir_module *m = prog->stage[prog->n > 1 ? coord[IR_AXIS_PP] : 0];
    ir_resolve_ranks(m, coord);
    return ir_print_module(m);
}

static int cmd_ir(int argc, char **argv)
{
    if (argc >= 1 && !strcmp(argv[0], "--list-passes")) {
        for (int i = 0; i < mcc_npasses; i++)
            printf("%-12s %s\n", mcc_passes[i].name, mcc_passes[i].what);
        return 0;
    }
    cli_opts o = {.rank = -1};
    mcc_spec spec;
    bool ok = load(argc, argv, &o, &spec);
    mcc_program prog;
    ok = ok && build(spec_label(argc, argv), &spec, &o, o.after, &prog);
    free(o.train_rank_args);
    if (!ok)
        return 2;
    char *text = program_text(&prog, o.rank);
    fputs(text, stdout);
    free(text);
    mcc_program_free(&prog);
    return 0;
}

/* mcc opt IN.ir --pass NAME [--rank R] [--target T]: one pass on a module read back from its text
 * (its config block carries the options the plan records), verified before and after, printed:
 * what the pass tests (tests/passes/) run. --rank R prints the result as rank R runs it, as `mcc ir
 * --rank R`; --target T hands the pass T's description (default: that of the config's target, cuda:
 * h200), as `mcc compile --target` does. */
static int cmd_opt(int argc, char **argv)
{
    char err[2048];
    const char *path = argc >= 1 ? argv[0] : "", *pass = NULL, *target = NULL;
    long long rank = -1;
    if (argc < 1 || path[0] == '-')
        return fail("expected the IR file as the first argument: mcc opt IN.ir --pass NAME (IN.ir from "
                    "`mcc ir SPEC.json --after PREVIOUS_PASS`)");
    for (int k = 1; k < argc; k++) {
        const char *v = k + 1 < argc ? argv[k + 1] : NULL;
        if (!strcmp(argv[k], "--pass") && v)
            pass = argv[++k];
        else if (!strcmp(argv[k], "--target") && v)
            target = argv[++k];
        else if (!strcmp(argv[k], "--rank")) {
            if (!cli_parse_int("--rank", v, 0, LLONG_MAX, &rank, err, sizeof err))
                return fail(err);
            k++;
        } else if (!strcmp(argv[k], "--pass"))
            return fail("--pass needs a value: the pass to run (mcc ir --list-passes names them)");
        else if (!strcmp(argv[k], "--target")) {
            snprintf(err, sizeof err, "--target needs a value: %s", mcc_target_names());
            return fail(err);
        } else {
            snprintf(err, sizeof err, "unknown flag '%s' for mcc opt (its flags: --pass NAME, --rank R, --target T)",
                     argv[k]);
            return fail(err);
        }
    }
    if (!pass)
        return fail("--pass NAME is required: the one pass to run (mcc ir --list-passes names them)");
    size_t bytes;
    char *text = os_read_file(path, &bytes, err, sizeof err);
    if (!text)
        return fail(err);
    char why[1024];
    int n = ir_text_stages(text);
    mcc_program prog = {calloc((size_t)n, sizeof(ir_module *)), n};
    bool ok = true;
    for (int s = 0; ok && s < n; s++)
        ok = (prog.stage[s] = ir_parse_stage(text, s, why, sizeof why)) && ir_plan_version_ok(prog.stage[s], why, sizeof why);
    free(text);
    if (!ok) {
        mcc_program_free(&prog);
        snprintf(err, sizeof err, "%s: %s", path, why);
        return fail(err);
    }
    ir_mesh mesh = ir_module_mesh(prog.stage[0]);
    long long world = 1;
    for (int a = 1; a < IR_NUM_AXES; a++)
        world *= a == IR_AXIS_EP || ir_axis_derived((ir_axis)a) ? 1 : mesh.degree[a];
    mcc_pass_options opt = {.target = mcc_target_by_name(target ? target : ir_cfg_text(prog.stage[0], IR_CFG_TARGET))};
    ok = rank < world;
    if (!ok)
        snprintf(err, sizeof err, "--rank %lld: %s's config has %lld ranks (tp x cp x dp x pp): give 0..%lld", rank,
                 path, world, world - 1);
    if (ok && !(ok = opt.target != NULL))
        snprintf(err, sizeof err, "%s %s: no such target: choose %s", target ? "--target" : "config target =",
                 target ? target : ir_cfg_text(prog.stage[0], IR_CFG_TARGET), mcc_target_names());
    if (ok && !(ok = mcc_run_pass(&prog, &opt, pass, why, sizeof why)))
        snprintf(err, sizeof err, "%s: %s", path, why);
    if (ok) {
        char *out = program_text(&prog, rank);
        fputs(out, stdout);
        free(out);
    }
    mcc_program_free(&prog);
    return ok ? 0 : fail(err);
}

static bool asks_help(int argc, char **argv)
{
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
            return true;
    return false;
}

/* `mcc data` has one command, preprocess; `mcc data --help` is its help. */
static int cmd_data(int argc, char **argv)
{
    if (argc >= 1 && !strcmp(argv[0], "preprocess"))
        return mcc_data_preprocess_main(argc, argv);
    char *help[] = {"preprocess", "--help", NULL};
    if (asks_help(argc, argv))
        return mcc_data_preprocess_main(2, help);
    fprintf(stderr, "mcc: error: `mcc data` has one command: mcc data preprocess --input FILE --output-prefix PREFIX "
                    "(`mcc data --help` for its flags)\n");
    return 2;
}

/* `mcc help fields|megatron-flags [--markdown]`: a table as --help lists it, or as the Markdown
 * of its docs/ page (docs/spec-fields.md, docs/megatron-flags.md; tests/docs_check.py). */
static int cmd_help(int argc, char **argv)
{
    bool markdown = argc == 2 && !strcmp(argv[1], "--markdown");
    const char *table = argc == 1 || markdown ? argv[0] : "";
    if (!strcmp(table, "fields"))
        return mcc_spec_print_fields(stdout, markdown), 0;
    if (!strcmp(table, "megatron-flags"))
        return mcc_megatron_print_help(stdout, markdown), 0;
    return fail("mcc help takes fields or megatron-flags, then --markdown for the docs/ page's text");
}

typedef struct {
    const char *name, *usage;
    int (*run)(int argc, char **argv);
    bool spec_flags; /* takes SPEC.json and its flags (--help lists them) */
    bool own_help;   /* prints its own --help */
} mcc_command;

static const mcc_command mcc_commands[] = {
    {"compile", "mcc compile SPEC.json [--<field> VALUE ...] -o OUT [--target NAME] [--gpu-memory GIB] "
                "[--host-memory GIB] [--comm-lanes L] [--keep-logits] [--memory-report]", cmd_compile, true, false},
    {"ir", "mcc ir SPEC.json [--<field> VALUE ...] [--after PASS] [--rank R]\n  mcc ir --list-passes", cmd_ir, true,
     false},
    {"opt", "mcc opt IN.ir --pass NAME [--rank R] [--target T]   run one pass on IR text (`mcc ir ... --after` the "
            "pass before), verify, print;\n    --rank R prints it as rank R runs it (its rank terms resolved); "
            "--target T hands the pass T's description (default the config's target's)", cmd_opt, false, false},
    /* its flags are data_preprocess.c's (`mcc data --help`), not repeated here */
    {"data", "mcc data preprocess --input FILE --output-prefix PREFIX [--tokenizer-type T ...]   text -> Megatron "
             "indexed dataset", cmd_data, false, true},
    {"plot", "mcc plot METRICS.jsonl -o OUT.svg   loss, lr and throughput curves of train_rank --metrics-file",
     mcc_plot_main, false, false},
    {"schedule", "mcc schedule SPEC.json [--<field> VALUE ...] [--svg OUT.svg] [--target T] [--columns N]   the "
                 "pipeline's stage split and schedules (1f1b, interleaved, zb-h1) timed by the cost model, drawn",
     mcc_schedule_main, false, true},
    {"tune", "mcc tune [SPEC.json] [--<field> VALUE ...] --world-size N [--gpus-per-node 8] [--target h100] "
             "[--fix tp=4 ...] [--top 10] [--gpu-memory GIB] [--explain] [--json]\n    the layouts (tp, pp, cp, dp, ep, "
             "micro-batch, recompute) that fit N GPUs, each planned exactly, fastest first by the step-time model "
             "(calibrated on one H100); --explain: what became of every layout family",
     mcc_tune_main, false, false},
    {"convert", "mcc convert --to hf CKPT_DIR OUT_DIR --spec SPEC.json [--<field> VALUE ...] [--iteration N] "
                "[--max-shard-size BYTES]\n    a checkpoint -> config.json + model.safetensors (GPT2LMHeadModel, "
                "LlamaForCausalLM)\n  mcc convert --from hf IN_DIR CKPT_DIR [--spec-out SPEC.json]   a Hugging Face "
                "model directory -> a checkpoint of iteration 0 (train_rank --load CKPT_DIR --finetune) and its spec",
     mcc_convert_main, false, false},
    {"help", "mcc help fields|megatron-flags [--markdown]   the spec fields' or the Megatron flags' table "
             "(--markdown: docs/spec-fields.md, docs/megatron-flags.md)", cmd_help, false, false},
};
enum { NCOMMANDS = sizeof mcc_commands / sizeof mcc_commands[0] };

static void usage(FILE *out)
{
    fprintf(out, "usage:\n");
    for (int i = 0; i < NCOMMANDS; i++)
        fprintf(out, "  %s\n", mcc_commands[i].usage);
    fprintf(out, "  mcc --version\n"
                 "Every spec field (model.*, parallel.*, training.*) can be set by its flag: --hidden-size 1024;\n"
                 "`mcc COMMAND --help` lists a command's flags. --flag=value is read as --flag value.\n");
}

static void command_help(const mcc_command *c)
{
    printf("usage:\n  %s\n", c->usage);
    if (!c->spec_flags)
        return;
    printf("Options:\n");
    for (int i = 0; i < NOPTIONS; i++) {
        char flag[64];
        snprintf(flag, sizeof flag, "%s%s%s", cli_options[i].flag, cli_options[i].value ? " " : "",
                 cli_options[i].value ? cli_options[i].value : "");
        printf("  %-38s %s\n", flag, cli_options[i].help);
    }
    mcc_spec_print_help(stdout);
}

static int run_command(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version"))
        return printf("mcc %s\n", MCC_VERSION), 0;
    for (int i = 0; i < NCOMMANDS; i++) {
        const mcc_command *c = &mcc_commands[i];
        if (strcmp(argv[1], c->name) != 0)
            continue;
        if (!c->own_help && asks_help(argc - 2, argv + 2))
            return command_help(c), 0;
        return c->run(argc - 2, argv + 2);
    }
    fprintf(stderr, "mcc: error: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}

/* Every command reads @FILE as the words FILE holds (a script's flags pasted into a file) and
 * --flag=value as --flag value. */
int main(int argc, char **argv)
{
    char err[1024];
    if (!knob_init(KNOB_MCC, err, sizeof err))
        return fail(err);
    int n, m;
    char **words = cli_expand_files(argc, argv, &n, err, sizeof err);
    if (!words)
        return fail(err);
    char **args = cli_split_equals(n, words, &m);
    int rc = run_command(m, args);
    cli_argv_free(args);
    cli_argv_free(words);
    return rc;
}
