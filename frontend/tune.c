/* tune.c — `mcc tune [SPEC.json] [--<field> VALUE ...] --world-size N`: the layouts of a model on N
 * GPUs that fit, fastest first, with the mcc compile command of each. Every candidate (tp within a
 * node, pp, cp, dp = N / (tp x pp x cp), ep for an MoE model, the micro-batch size, recompute) is
 * planned exactly as mcc compile plans it (the passes through memory_plan), so a candidate is
 * kept or pruned by the memory its plan really takes, not by an estimate. Its step time is the
 * busiest stage's compute as mcc compile predicts it (passes/step_cost.h: every instruction by the
 * target's calibrated rows, measured on one GPU; a target without a calibration by its roofline),
 * stretched by the pipeline's fill and drain ((pp - 1) / micro-batches, 1F1B's bubble), plus every
 * byte its collectives send at the target's link rate as if none were hidden: the collectives'
 * share is not calibrated (that needs two GPUs and more), so multi-GPU milliseconds are an upper
 * bound's order, the one-GPU compute a measurement's. */
#include "frontend/tune.h"

#include "common/cli.h"
#include "frontend/plan.h"
#include "frontend/spec.h"
#include "passes/passes.h"
#include "passes/step_cost.h"
#include "passes/target.h"

#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { TUNE_MAX_ARGS = 256, TUNE_MAX_KEPT = 4096 };

/* The memory levers tried in turn, each taking less memory and more time than the one before:
 * recompute (selective, full), then the optimizer's state and step on the host as well. */
typedef enum { RC_NONE, RC_SELECTIVE, RC_FULL, RC_OFFLOAD, RC_COUNT } tune_recompute;
static const char *const tune_recompute_names[RC_COUNT] = {"none", "selective", "full", "offload"};
static const char *const tune_recompute_flags[RC_COUNT] = {
    "", "--recompute-granularity selective",
    "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1",
    "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1 --optimizer-cpu-offload"};

/* A pipeline split of num_layers over pp: even, or with the embedding (and the loss) counted as a
 * layer of the first (last) stage, Megatron's way to split 126 layers over 8 stages (LLaMA-3 405B). */
typedef enum { SPLIT_EVEN, SPLIT_EMBEDDING, SPLIT_EMBEDDING_LOSS } tune_split;
static const char *const tune_split_flags[] = {"", " --account-for-embedding-in-pipeline-split",
                                               " --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split"};

typedef struct {
    int tp, pp, cp, dp, ep, mbs;
    tune_recompute rc;
    tune_split split;
    int vp;                        /* virtual stages a pipeline rank (interleaved 1F1B), 1: none */
} tune_layout;

typedef struct {
    tune_layout l;
    double gib, step_s, compute_s, comm_s, bubble;
} tune_result;

/* A layout family (tp, pp, cp, ep over the world) and what became of it: its best fitting
 * candidate's step, or why none was kept (--explain). */
typedef struct {
    tune_layout l;                 /* mbs and recompute: the last tried */
    int kept;                      /* candidates of it that fit */
    double best_s;                 /* its fastest kept step */
    double least_gib;              /* the least memory a plan of it took (0: none planned) */
    char why[200];                 /* the spec's refusal, or a divisibility, where none was planned */
} tune_family;

enum { TUNE_MAX_FAMILIES = 1024 };

typedef struct {
    const char *spec_path;         /* NULL: the model from the flags alone */
    char **base;                   /* the flags given, less tune's own */
    int nbase;
    int world, gpus_per_node, top;
    tune_layout fix;               /* --fix key=value: a degree held (0: searched; rc -1: searched) */
    const mcc_target *target;
    double gpu_gib;                /* what a plan may take: the target's memory less the runtime's */
    int planned, refused, too_big;
    bool explain, json;            /* --explain: why each family is not first; --json: the table as JSON */
    tune_family *families;         /* every family the search met (divisible or not) */
    int nfamilies;
    char refusal[200];             /* the last candidate's refusal by the spec or the planner */
} tune_ctx;

/* The candidate's flags after the given ones, as one mcc compile line would carry them. */
static void tune_layout_flags(const tune_ctx *t, const tune_layout *l, char *buf, size_t n)
{
    snprintf(buf, n, "--tp %d --pp %d%s --cp %d --world-size %d%s%s --micro-batch-size %d%s%s", l->tp, l->pp,
             tune_split_flags[l->split], l->cp, t->world, l->tp > 1 ? " --sequence-parallel" : "",
             l->dp * l->cp > 1 ? " --use-distributed-optimizer" : "", l->mbs, *tune_recompute_flags[l->rc] ? " " : "",
             tune_recompute_flags[l->rc]);
    if (l->vp > 1) {
        size_t used = strlen(buf);
        snprintf(buf + used, n - used, " --num-virtual-stages-per-pipeline-rank %d", l->vp);
    }
    if (l->ep > 1) {
        size_t used = strlen(buf);
        snprintf(buf + used, n - used, " --expert-model-parallel-size %d", l->ep);
    }
}

/* Splits text at blanks into args after the given ones; the count. */
static int tune_argv(const tune_ctx *t, char *text, char **args)
{
    int n = 0;
    for (int i = 0; i < t->nbase && n < TUNE_MAX_ARGS - 1; i++) args[n++] = t->base[i];
    for (char *w = strtok(text, " "); w && n < TUNE_MAX_ARGS - 1; w = strtok(NULL, " ")) args[n++] = w;
    args[n] = NULL;
    return n;
}

/* stderr silenced, and given back: the spec's and the passes' notes, said once per candidate as
 * mcc compile says them, would drown the table. */
static int tune_silence(void)
{
    fflush(stderr);
    int saved = dup(2), null = open("/dev/null", O_WRONLY);
    if (saved >= 0 && null >= 0) dup2(null, 2);
    if (null >= 0) close(null);
    return saved;
}

static void tune_restore(int saved)
{
    fflush(stderr);
    if (saved >= 0) dup2(saved, 2), close(saved);
}

/* Plans layout l exactly; false where the spec refuses it or its plan does not fit (counted). */
static bool tune_plan(tune_ctx *t, const tune_layout *l, tune_result *r)
{
    char text[512], *args[TUNE_MAX_ARGS], err[2048] = "";
    int rest[TUNE_MAX_ARGS], nrest = 0;
    tune_layout_flags(t, l, text, sizeof text);
    int n = tune_argv(t, text, args);
    mcc_spec spec;
    if (!mcc_spec_load(t->spec_path, n, args, &spec, rest, &nrest, err, sizeof err)) {
        t->refused++;
        snprintf(t->refusal, sizeof t->refusal, "%.190s", err);
        return false;
    }
    mcc_plan_options o = {.passes = {.target = t->target}};
    mcc_program prog;
    if (!mcc_plan_build(&spec, &o, "memory_plan", &prog, err, sizeof err)) {
        snprintf(t->refusal, sizeof t->refusal, "%.190s", err);
        t->refused++;
        return false;
    }
    double compute = 0, sent = 0, most = 0;
    for (int s = 0; s < prog.n; s++) {
        mcc_memory_breakdown mem = mcc_memory_of(prog.stage[s]);
        double gib = (double)mcc_memory_total(&mem) / 0x1p30, bytes = 0;
        for (int a = 0; a < IR_NUM_AXES; a++) bytes += mem.sent_bytes[a];
        most = gib > most ? gib : most;
        double stage = mcc_step_cost_of(prog.stage[s], t->target).seconds;
        compute = stage > compute ? stage : compute;
        sent = bytes > sent ? bytes : sent;
    }
    mcc_program_free(&prog);
    t->planned++;
    r->gib = most; /* what it took, kept or not (the family's least: --explain) */
    if (most > t->gpu_gib) {
        t->too_big++;
        return false;
    }
    int micro = spec.global_batch_size / (spec.micro_batch_size * spec.data_parallel_size);
    r->l = *l;
    r->gib = most;
    r->compute_s = compute;
    r->bubble = l->pp > 1 ? (double)(l->pp - 1) / (l->vp * micro) : 0; /* interleaving divides the fill and drain */
    r->comm_s = t->target->link_bytes_per_s > 0 ? sent / t->target->link_bytes_per_s : 0;
    r->step_s = r->compute_s * (1 + r->bubble) + r->comm_s;
    return true;
}

static int tune_by_time(const void *a, const void *b)
{
    double x = ((const tune_result *)a)->step_s, y = ((const tune_result *)b)->step_s;
    return (x > y) - (x < y);
}

/* A family met by the search (--explain says what became of each), with why it was not planned if
 * a size does not divide. */
static tune_family *tune_family_add(tune_ctx *t, int tp, int pp, int cp, int dp, int ep, tune_split split, int vp,
                                    const char *why)
{
    if (t->nfamilies >= TUNE_MAX_FAMILIES)
        return NULL;
    tune_family *f = &t->families[t->nfamilies++];
    *f = (tune_family){.l = {tp, pp, cp, dp, ep, 0, RC_NONE, split, vp}};
    snprintf(f->why, sizeof f->why, "%s", why ? why : "");
    return f;
}

/* The micro-batches of family f's layout from 1 up, each at the first memory lever that fits (no
 * recompute, selective, full, full with the optimizer offloaded to the host: memory falls and time
 * rises along them; the host's memory is not checked here, mcc compile's --host-memory does),
 * raised until even the last no longer fits. */
static int tune_family_search(tune_ctx *t, const mcc_spec *s, tune_family *fam, tune_result *kept, int nkept)
{
    const tune_layout *f = &t->fix;
    int first = nkept;
    t->refusal[0] = 0;
    for (int mbs = 1; mbs <= 8 && s->global_batch_size % (mbs * fam->l.dp) == 0; mbs *= 2) {
        if (f->mbs && mbs != f->mbs) continue;
        bool fits = false;
        for (int rc = RC_NONE; rc < RC_COUNT && !fits && nkept < TUNE_MAX_KEPT; rc++) {
            if ((int)f->rc >= 0 && rc != (int)f->rc) continue;
            tune_layout l = fam->l;
            l.mbs = mbs, l.rc = (tune_recompute)rc;
            int saved = tune_silence();
            tune_result r = {0};
            fits = tune_plan(t, &l, &r);
            tune_restore(saved);
            if (r.gib > 0 && (fam->least_gib == 0 || r.gib < fam->least_gib))
                fam->least_gib = r.gib;
            if (fits) kept[nkept++] = r;
        }
        if (!fits) break; /* a larger micro-batch takes more still */
    }
    fam->kept = nkept - first;
    for (int i = first; i < nkept; i++)
        if (fam->best_s == 0 || kept[i].step_s < fam->best_s) fam->best_s = kept[i].step_s;
    if (!fam->kept && !fam->least_gib)
        snprintf(fam->why, sizeof fam->why, "%s", t->refusal[0] ? t->refusal : "no micro-batch divides the global batch");
    return nkept;
}

/* Every layout of the world that the model's sizes admit: tp within a node, pp, cp, dp = the rest,
 * ep (MoE) over dp x cp; each family's micro-batches and recompute (tune_family_search). */
static int tune_search(tune_ctx *t, const mcc_spec *s, tune_result *kept)
{
    int nkept = 0;
    const tune_layout *f = &t->fix;
    char why[200];
    for (int tp = 1; tp <= t->gpus_per_node && tp <= 8; tp *= 2) {
        if (f->tp && tp != f->tp) continue;
        if (s->num_attention_heads % tp || s->num_query_groups % tp) {
            snprintf(why, sizeof why, "tp %d does not divide num_attention_heads %d and num_query_groups %d", tp,
                     s->num_attention_heads, s->num_query_groups);
            tune_family_add(t, tp, 0, 0, 0, 0, SPLIT_EVEN, 1, why);
            continue;
        }
        for (int pp = 1; pp <= s->num_layers && pp <= t->world / tp; pp++) {
            if (f->pp && pp != f->pp) continue;
            /* an even split, else the embedding (and the loss) counted as layers of the end stages */
            tune_split split = s->num_layers % pp == 0         ? SPLIT_EVEN
                               : (s->num_layers + 1) % pp == 0 ? SPLIT_EMBEDDING
                               : (s->num_layers + 2) % pp == 0 ? SPLIT_EMBEDDING_LOSS
                                                               : (tune_split)-1;
            if ((int)split < 0) continue;
            for (int cp = 1; cp <= 8; cp *= 2) {
                if (f->cp && cp != f->cp) continue;
                if (s->seq_length % (2 * cp) || t->world % (tp * pp * cp)) {
                    if (t->world % (tp * pp * cp) == 0) { /* the world divides: the sequence does not */
                        snprintf(why, sizeof why, "cp %d: seq_length %d does not cut into 2 x %d chunks", cp,
                                 s->seq_length, cp);
                        tune_family_add(t, tp, pp, cp, t->world / (tp * pp * cp), 0, split, 1, why);
                    }
                    continue;
                }
                int dp = t->world / (tp * pp * cp);
                for (int ep = 1; ep <= (s->num_experts ? s->num_experts : 1); ep *= 2) {
                    if (f->ep && ep != f->ep) continue;
                    if ((dp * cp) % ep || s->num_experts % ep) continue;
                    /* interleaved virtual stages where an even split's stages divide again */
                    for (int vp = 1; vp <= 4; vp *= 2) {
                        if (vp > 1 && (pp == 1 || split != SPLIT_EVEN || (s->num_layers / pp) % vp)) break;
                        if (f->vp && vp != f->vp) continue;
                        tune_family *fam = tune_family_add(t, tp, pp, cp, dp, ep, split, vp, NULL);
                        if (!fam) break;
                        nkept = tune_family_search(t, s, fam, kept, nkept);
                    }
                    if (isatty(2) && !t->json) /* progress where someone watches */
                        fprintf(stderr, "\rmcc tune: %d plans made, %d fit", t->planned, nkept);
                }
            }
        }
    }
    if (isatty(2) && !t->json) fprintf(stderr, "\n");
    return nkept;
}

/* --explain: what became of each family the search met: its best candidate's place beside the
 * first's, or why none is listed. */
static void tune_explain(const tune_ctx *t, const tune_result *kept, int nkept)
{
    printf("\nEvery layout family (tp within a node of %d, pp, cp, dp = the rest, ep):\n", t->gpus_per_node);
    double first = nkept ? kept[0].step_s : 0;
    for (int i = 0; i < t->nfamilies; i++) {
        const tune_family *f = &t->families[i];
        printf("  tp %d", f->l.tp);
        if (f->l.pp) printf(" pp %d cp %d dp %d", f->l.pp, f->l.cp, f->l.dp);
        if (f->l.ep) printf(" ep %d", f->l.ep);
        if (f->l.vp > 1) printf(" vp %d", f->l.vp);
        if (f->l.split) printf(" (%s counted in the split)", f->l.split == SPLIT_EMBEDDING ? "embedding" : "embedding, loss");
        if (f->kept)
            printf(": %d fit; its best %.0f ms, %+.1f%% of the first's\n", f->kept, 1e3 * f->best_s,
                   100 * (f->best_s - first) / first);
        else if (f->least_gib > 0)
            printf(": does not fit: its least plan takes %.1f GiB a GPU (micro-batch 1, full recompute%s) of the %.1f "
                   "allowed\n", f->least_gib, (int)t->fix.rc < 0 || t->fix.rc == RC_OFFLOAD ? " and offload" : "",
                   t->gpu_gib);
        else
            printf(": not planned: %s\n", f->why);
    }
}

/* --json: the fitting layouts fastest first, each with its compile flags. */
static void tune_json(const tune_ctx *t, const mcc_spec *s, const tune_result *kept, int nkept)
{
    double tokens = (double)s->global_batch_size * s->seq_length;
    printf("{\"target\": \"%s\", \"world_size\": %d, \"calibrated\": %s, \"planned\": %d, \"did_not_fit\": %d, "
           "\"refused\": %d, \"layouts\": [", t->target->name, t->world, t->target->ncost_rows ? "true" : "false",
           t->planned, t->too_big, t->refused);
    for (int i = 0; i < nkept && i < t->top; i++) {
        const tune_result *r = &kept[i];
        char flags[512];
        tune_layout_flags(t, &r->l, flags, sizeof flags);
        printf("%s\n  {\"tp\": %d, \"pp\": %d, \"vp\": %d, \"cp\": %d, \"dp\": %d, \"ep\": %d, \"micro_batch_size\": %d, "
               "\"recompute\": \"%s\", \"gib\": %.3f, \"step_ms\": %.3f, \"compute_ms\": %.3f, \"comm_ms\": %.3f, "
               "\"bubble\": %.4f, \"tokens_per_s_per_gpu\": %.1f, \"flags\": \"%s\"}", i ? "," : "", r->l.tp, r->l.pp,
               r->l.vp, r->l.cp, r->l.dp, r->l.ep, r->l.mbs, tune_recompute_names[r->l.rc], r->gib, 1e3 * r->step_s,
               1e3 * r->compute_s, 1e3 * r->comm_s, r->bubble, tokens / r->step_s / t->world, flags);
    }
    printf("\n]}\n");
}

static void tune_print(const tune_ctx *t, const mcc_spec *s, tune_result *kept, int nkept)
{
    double tokens = (double)s->global_batch_size * s->seq_length;
    double model_flops = 6.0 * (double)mcc_spec_num_active_params(s) * tokens;
    printf("%d layouts of %d planned fit %.1f GiB a GPU (%s target, less 1 GiB for the runtime); %d did not fit, %d "
           "were refused.\n"
           "Step time: the busiest stage's compute as mcc compile predicts it (%s), 1F1B's bubble, and the\n"
           "collectives' bytes at the link rate as if none were hidden (not calibrated: an upper bound's order).\n\n",
           nkept, t->planned, t->gpu_gib, t->target->name, t->too_big, t->refused,
           t->target->ncost_rows ? "calibrated on one GPU" : "the target's roofline, uncalibrated");
    printf("%4s %3s %3s %3s %4s %3s %4s %-9s %8s %9s %9s %6s %7s %7s %3s\n", "rank", "tp", "pp", "cp", "dp", "ep", "mbs",
           "recompute", "GiB", "step ms", "tok/s/GPU", "MFU", "bubble", "comm ms", "vp");
    for (int i = 0; i < nkept && i < t->top; i++) {
        const tune_result *r = &kept[i];
        double mfu = t->target->peak_bf16_flops > 0 ? model_flops / r->step_s / t->world / t->target->peak_bf16_flops : 0;
        printf("%4d %3d %3d %3d %4d %3d %4d %-9s %8.1f %9.0f %9.0f %5.1f%% %6.1f%% %7.0f %3d\n", i + 1, r->l.tp, r->l.pp,
               r->l.cp, r->l.dp, r->l.ep, r->l.mbs, tune_recompute_names[r->l.rc], r->gib, 1e3 * r->step_s,
               tokens / r->step_s / t->world, 100 * mfu, 100 * r->bubble, 1e3 * r->comm_s, r->l.vp);
    }
    if (!nkept) {
        printf("No layout fits: more GPUs (--world-size), a shorter --seq-length, or --optimizer-cpu-offload.\n");
        return;
    }
    char flags[512];
    tune_layout_flags(t, &kept[0].l, flags, sizeof flags);
    printf("\nThe first, compiled:\n  mcc compile %s", t->spec_path ? t->spec_path : "");
    for (int i = 0; i < t->nbase; i++) printf(" %s", t->base[i]);
    printf(" %s --target %s -o train_rank\n", flags, t->target->name);
}

/* --fix KEY=VALUE: tp, pp, cp, ep, mbs, vp (a number) or recompute (none|selective|full|offload) held, not searched. */
static bool tune_fix(tune_ctx *t, const char *text, char *err, size_t errlen)
{
    static const char *const keys[] = {"tp", "pp", "cp", "ep", "mbs", "vp"};
    int *slots[] = {&t->fix.tp, &t->fix.pp, &t->fix.cp, &t->fix.ep, &t->fix.mbs, &t->fix.vp};
    const char *eq = text ? strchr(text, '=') : NULL;
    if (eq && !strncmp(text, "recompute=", 10)) {
        for (int rc = 0; rc < RC_COUNT; rc++)
            if (!strcmp(eq + 1, tune_recompute_names[rc])) return t->fix.rc = (tune_recompute)rc, true;
    }
    for (size_t k = 0; eq && k < sizeof keys / sizeof keys[0]; k++) {
        long long v;
        if (strlen(keys[k]) == (size_t)(eq - text) && !strncmp(text, keys[k], (size_t)(eq - text)))
            return cli_parse_int("--fix", eq + 1, 1, 1 << 20, &v, err, errlen) && (*slots[k] = (int)v, true);
    }
    return snprintf(err, errlen, "--fix %s: give KEY=VALUE with KEY tp, pp, cp, ep, mbs, vp (a number) or recompute "
                                 "(none|selective|full|offload)", text ? text : ""), false;
}

/* tune's own options out of argv (the rest are the spec's flags); false with the message in err. */
static bool tune_options(tune_ctx *t, int argc, char **argv, char *err, size_t errlen)
{
    const char *target = "h100";
    t->gpus_per_node = 8, t->top = 10, t->fix.rc = (tune_recompute)-1;
    t->base = calloc((size_t)argc + 1, sizeof *t->base);
    if (!t->base) return snprintf(err, errlen, "out of memory"), false;
    long long v;
    double gib = 0;
    for (int i = 0; i < argc; i++) {
        const char *f = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(f, "--gpus-per-node") || !strcmp(f, "--top") || !strcmp(f, "--world-size")) {
            if (!cli_parse_int(f, val, 1, 1 << 20, &v, err, errlen)) return false;
            *(!strcmp(f, "--top") ? &t->top : !strcmp(f, "--world-size") ? &t->world : &t->gpus_per_node) = (int)v;
            i++;
        } else if (!strcmp(f, "--fix")) {
            if (!tune_fix(t, val, err, errlen)) return false;
            i++;
        } else if (!strcmp(f, "--explain") || !strcmp(f, "--json")) {
            *(!strcmp(f, "--json") ? &t->json : &t->explain) = true;
        } else if (!strcmp(f, "--target") && val) {
            target = argv[++i];
        } else if (!strcmp(f, "--gpu-memory")) {
            if (!cli_parse_num(f, val, 0, true, INFINITY, &gib, err, errlen)) return false;
            i++;
        } else {
            t->base[t->nbase++] = argv[i];
        }
    }
    if (!t->world) return snprintf(err, errlen, "--world-size N is required: the GPUs to lay the model over"), false;
    if (!(t->target = mcc_target_by_name(target)) || strcmp(t->target->backend, "cuda") != 0)
        return snprintf(err, errlen, "--target %s: choose a GPU target (%s)", target, mcc_target_names()), false;
    /* what mcc compile allows a plan: the GPU's memory less its 1 GiB for the runtime */
    double have = gib ? gib : (double)t->target->memory_bytes / 0x1p30;
    t->gpu_gib = have > 0 ? have - 1.0 : INFINITY;
    return true;
}

int mcc_tune_main(int argc, char **argv)
{
    tune_ctx t = {0};
    char err[2048] = "";
    t.spec_path = argc && argv[0][0] != '-' ? argv[0] : NULL;
    int first = t.spec_path ? 1 : 0;
    if (!tune_options(&t, argc - first, argv + first, err, sizeof err)) {
        fprintf(stderr, "mcc: error: %s\n", err);
        free(t.base);
        return 2;
    }
    /* the model as given (its layout flags are tune's to choose): sizes and batch for the search */
    mcc_spec s;
    char world[64], *args[TUNE_MAX_ARGS];
    snprintf(world, sizeof world, "--world-size %d --micro-batch-size 1", t.world); /* any batch of the world */
    int n = tune_argv(&t, world, args), rest[TUNE_MAX_ARGS], nrest = 0;
    int saved = tune_silence();
    bool ok = mcc_spec_load(t.spec_path, n, args, &s, rest, &nrest, err, sizeof err);
    tune_restore(saved);
    if (!ok) {
        fprintf(stderr, "mcc: error: %s\n", err);
        free(t.base);
        return 2;
    }
    tune_result *kept = calloc(TUNE_MAX_KEPT, sizeof *kept);
    t.families = calloc(TUNE_MAX_FAMILIES, sizeof *t.families);
    if (!kept || !t.families) return free(kept), free(t.families), free(t.base), fprintf(stderr, "mcc: error: out of memory\n"), 2;
    int nkept = tune_search(&t, &s, kept);
    qsort(kept, (size_t)nkept, sizeof *kept, tune_by_time);
    if (t.json) {
        tune_json(&t, &s, kept, nkept);
    } else {
        tune_print(&t, &s, kept, nkept);
        if (t.explain) tune_explain(&t, kept, nkept);
    }
    free(kept);
    free(t.families);
    free(t.base);
    return nkept ? 0 : 1;
}
