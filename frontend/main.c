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
 *   mcc --version; `mcc COMMAND --help` (or -h anywhere after it) prints that command's usage */
#include "codegen/codegen.h"
#include "common/cli.h"
#include "common/knobs.h"
#include "common/os.h"
#include "frontend/convert.h"
#include "frontend/data_preprocess.h"
#include "frontend/plan.h"
#include "frontend/plot.h"
#include "frontend/schedule_cmd.h"
#include "frontend/spec.h"
#include "passes/passes.h"

#include <errno.h>
#include <limits.h>
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
    const char *out, *after, *target, *comm_lanes;
    long long rank;
    bool keep_logits, memory_report;
    double gpu_memory_gib;
    double host_memory_gib;         /* one machine's, which its ranks share (0: this machine's) */
    mcc_pass_options passes;        /* --target's description, handed to every pass */
    bool side_lane, copy_lane;      /* --comm-lanes against the target: config comm_side_lane, comm_copy_lane */
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
    {"--after", "PASS", OPT_TEXT, offsetof(cli_opts, after), "ir: print the IR after this pass (default the last)"},
    {"--rank", "R", OPT_RANK, offsetof(cli_opts, rank), "ir: print the plan as rank R runs it, its rank terms (64*tp) resolved (default: as compiled)"},
};
enum { NOPTIONS = sizeof cli_options / sizeof cli_options[0] };

/* "unknown flag", with the nearest flag of compile/ir (spec fields, options, Megatron's). */
static bool unknown_flag(const char *flag, char *err, size_t errlen)
{
    const char *names[NOPTIONS + 1];
    for (int i = 0; i < NOPTIONS; i++)
        names[i] = cli_options[i].flag;
    names[NOPTIONS] = NULL;
    const char *near = mcc_spec_flag_near(flag, names);
    if (near)
        snprintf(err, errlen, "unknown flag '%s': did you mean %s? (`mcc compile --help` lists every flag)", flag,
                 near);
    else
        snprintf(err, errlen, "unknown flag '%s' (spec fields use their names with '-': --hidden-size; "
                              "`mcc compile --help` lists every flag)", flag);
    return false;
}

static bool parse_opts(char **argv, const int *rest, int nrest, cli_opts *o, char *err, size_t errlen)
{
    for (int k = 0; k < nrest; k++) {
        const char *flag = argv[rest[k]];
        bool has_value = k + 1 < nrest && rest[k + 1] == rest[k] + 1;
        const char *v = has_value ? argv[rest[k + 1]] : NULL;
        int i = 0;
        while (i < NOPTIONS && strcmp(cli_options[i].flag, flag) != 0)
            i++;
        if (i == NOPTIONS)
            return unknown_flag(flag, err, errlen);
        void *slot = (char *)o + cli_options[i].off;
        if (cli_options[i].kind == OPT_SWITCH) {
            *(bool *)slot = true;
            continue;
        }
        if (!v && cli_options[i].kind == OPT_TEXT) {
            snprintf(err, errlen, "%s needs a value: %s", flag, cli_options[i].value);
            return false;
        }
        k++; /* the value (cli_parse_* say when it is missing) */
        if (cli_options[i].kind == OPT_TEXT)
            *(const char **)slot = v;
        else if (cli_options[i].kind == OPT_RANK && !cli_parse_int(flag, v, 0, LLONG_MAX, slot, err, errlen))
            return false;
        else if (cli_options[i].kind == OPT_GIB && !cli_parse_num(flag, v, 0, true, INFINITY, slot, err, errlen))
            return false;
    }
    if (o->after && mcc_pass_index(o->after) < 0) {
        snprintf(err, errlen, "--after %s: no such pass (mcc ir --list-passes names them)", o->after);
        return false;
    }
    if (!o->target)
        o->target = DEFAULT_TARGET;
    if (!(o->passes.target = mcc_target_by_name(o->target))) {
        snprintf(err, errlen, "--target %s: choose %s", o->target, mcc_target_names());
        return false;
    }
    return mcc_target_parse_lanes(o->passes.target, o->comm_lanes, &o->side_lane, &o->copy_lane, err, errlen);
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

/* Reads the spec and the non-spec options; false after printing the error. */
static bool load(int argc, char **argv, cli_opts *o, mcc_spec *spec)
{
    char err[2048];
    if (argc < 1 || argv[0][0] == '-') {
        fail("expected the spec file (SPEC.json) as the first argument");
        return false;
    }
    int *rest = malloc(sizeof(int) * (size_t)argc), nrest = 0;
    bool ok = mcc_spec_load(argv[0], argc - 1, argv + 1, spec, rest, &nrest, err, sizeof err);
    for (int k = 0; ok && k < nrest; k++)
        rest[k] += 1; /* indices into argv+1 -> argv */
    ok = ok && parse_opts(argv, rest, nrest, o, err, sizeof err);
    free(rest);
    if (ok)
        ok = check_layout(spec, o, err, sizeof err);
    if (!ok)
        return fail(err), false;
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
    mcc_plan_options plan = {o->passes, o->side_lane, o->copy_lane, o->keep_logits};
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

/* The program, its pipeline schedule chosen where the spec says auto: without virtual stages
 * ZB-H1 when its plan fits the target's memory (its simulated bubble is below 1F1B's at any
 * micro-batch count, passes/pp_schedule.c), else 1F1B, whose stash is the smaller (ZB-H1's W keeps
 * B's gradients); with virtual stages interleaved 1F1B (schedule.c). The choice needs the whole
 * plan's memory: the passes run to the end, and again to `last` when asked for less. */
static bool build(const char *path, const mcc_spec *spec, const cli_opts *o, const char *last, mcc_program *prog)
{
    if (spec->pipeline_model_parallel_size < 2 || spec->pipeline_schedule != MCC_PP_SCHED_AUTO ||
        spec->virtual_pipeline_model_parallel_size > 1)
        return build_as(path, spec, o, last, prog);
    mcc_spec s = *spec;
    s.pipeline_schedule = MCC_PP_SCHED_ZB_H1;
    if (!build_as(path, &s, o, NULL, prog))
        return false;
    int stage = 0;
    double need = program_gib(prog, &stage), have = gpu_gib(o);
    if (!have || need <= have) {
        fprintf(stderr, "mcc: pipeline schedule zb-h1 (auto: the zero-bubble schedule fits)\n");
    } else {
        fprintf(stderr, "mcc: pipeline schedule 1f1b (auto: zb-h1 would need %.1f GiB on stage %d, the GPU has %.1f)\n",
                need, stage, have);
        s.pipeline_schedule = MCC_PP_SCHED_1F1B;
    }
    if (!last && s.pipeline_schedule == MCC_PP_SCHED_ZB_H1)
        return true;
    mcc_program_free(prog);
    return build_as(path, &s, o, last, prog);
}

/* Whether the plan fits the target's memory (--gpu-memory GIB instead, when given); a target
 * without a memory figure (the CPU's: the host's) is not checked. */
static bool fits_gpu(const mcc_memory_breakdown *mem, const cli_opts *o)
{
    const mcc_target *t = o->passes.target;
    double gib = mcc_memory_total(mem) / 1073741824.0, have = gpu_gib(o);
    if (!have || gib + RUNTIME_OVERHEAD_GIB <= have)
        return true;
    char whose[96];
    if (o->gpu_memory_gib)
        snprintf(whose, sizeof whose, "--gpu-memory");
    else
        snprintf(whose, sizeof whose, "the %s target's; --gpu-memory GIB overrides it", t->name);
    fprintf(stderr, "mcc: error: the plan needs %.2f GiB per GPU (+%.1f GiB runtime) but the GPU has %.1f GiB (%s).\n"
                    "  To fit: split it over GPUs with --tensor-model-parallel-size N (parameters, gradients,\n"
                    "  optimizer state and most activations / N; add --sequence-parallel for the rest) or\n"
                    "  --data-parallel-size N --use-distributed-optimizer (optimizer state and fp32 masters / N);\n"
                    "  --use-precision-aware-optimizer (fp32 masters as bf16 copy + 16-bit remainder: 2 bytes a\n"
                    "  parameter less; with --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16, 4 more);\n"
                    "  lower --micro-batch-size (activations scale with it; raise the accumulation instead);\n"
                    "  --recompute-granularity selective (norm and activation outputs recomputed in the\n"
                    "  backward) or full --recompute-method uniform --recompute-num-layers 1 (each layer keeps\n"
                    "  only its input); shorten --seq-length; or --pipeline-model-parallel-size N (the\n"
                    "  layers / N; a stage stashes the activations of the micro-batches it has in flight).\n",
            gib, RUNTIME_OVERHEAD_GIB, have, whose);
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
                    "%d ranks of one machine, but it has %.3f GiB (%s).\n"
                    "  To fit: offload less (--optimizer-offload-fraction F, now %g); shard the state over dp\n"
                    "  (--data-parallel-size N --use-distributed-optimizer: / N per rank); or give the training\n"
                    "  machine's memory with --host-memory GIB.\n",
            per_rank, need, ranks, have, o->host_memory_gib ? "--host-memory" : "this machine's; --host-memory GIB overrides it",
            spec->optimizer_offload_fraction);
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
    const char *dot = strchr(o->out, '/') ? "" : "./", *data = "--data-path PREFIX ...";
    if (world == 1) {
        fprintf(stderr, "mcc: run it: %s%s %s\n", dot, o->out, data);
        return;
    }
    fprintf(stderr, "mcc: launch it on %d ranks (tp %d x cp %d x dp %d x pp %d), e.g.:\n", world,
            s->tensor_model_parallel_size, s->context_parallel_size, s->data_parallel_size,
            s->pipeline_model_parallel_size);
    if (strcmp(o->passes.target->backend, "cuda") == 0) {
        int per_node = world <= 8 ? world : world % 8 == 0 ? 8 : world % 4 == 0 ? 4 : world % 2 == 0 ? 2 : 1;
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

static int cmd_compile(int argc, char **argv)
{
    cli_opts o = {0};
    mcc_spec spec;
    if (!load(argc, argv, &o, &spec))
        return 2;
    if (!o.out)
        return fail("-o OUT is required: the path of the train_rank executable to write");
    if (spec.num_experts > 0)
        fprintf(stderr, "parameters: %lld in all, %lld active (what one token multiplies by: the top-%d of %d experts "
                        "in each MoE layer; MFU counts these)\n", (long long)mcc_spec_num_params(&spec),
                (long long)mcc_spec_num_active_params(&spec), spec.moe_router_topk, spec.num_experts);
    mcc_program prog;
    if (!build(argv[0], &spec, &o, NULL, &prog))
        return 2;
    bool fits = true;
    for (int s = 0; s < prog.n; s++) {
        mcc_memory_breakdown mem = mcc_memory_of(prog.stage[s]);
        mcc_memory_print(&mem, stderr);
        print_compute(&mem, &o);
        if (o.memory_report)
            mcc_memory_report(prog.stage[s], stderr);
        fits = fits && fits_gpu(&mem, &o) && fits_host(&mem, &spec, &o);
    }
    if (!fits)
        return mcc_program_free(&prog), 2;
    char err[8192];
    bool ok = cg_write_executable(prog.stage, prog.n, o.out, err, sizeof err);
    mcc_program_free(&prog);
    if (!ok)
        return fail(err), 1;
    fprintf(stderr, "mcc: wrote %s\n", o.out);
    print_launch(&spec, &o);
    return 0;
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
    if (!load(argc, argv, &o, &spec))
        return 2;
    mcc_program prog;
    if (!build(argv[0], &spec, &o, o.after, &prog))
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
    mcc_pass_options opt = {mcc_target_by_name(target ? target : ir_cfg_text(prog.stage[0], IR_CFG_TARGET))};
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
    {"convert", "mcc convert --to hf CKPT_DIR OUT_DIR --spec SPEC.json [--<field> VALUE ...] [--iteration N] "
                "[--max-shard-size BYTES]\n    a checkpoint -> config.json + model.safetensors (GPT2LMHeadModel, "
                "LlamaForCausalLM)\n  mcc convert --from hf IN_DIR CKPT_DIR [--spec-out SPEC.json]   a Hugging Face "
                "model directory -> a checkpoint of iteration 0 (train_rank --load CKPT_DIR --finetune) and its spec",
     mcc_convert_main, false, false},
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

/* Every command reads --flag=value as --flag value. */
int main(int argc, char **argv)
{
    char err[1024];
    if (!knob_init(KNOB_MCC, err, sizeof err))
        return fail(err);
    int n;
    char **args = cli_split_equals(argc, argv, &n);
    int rc = run_command(n, args);
    cli_argv_free(args);
    return rc;
}
