/* tune.c — `mcc tune [SPEC.json] [--<field> VALUE ...] --world-size N`: the layouts of a model on N
 * GPUs that fit, fastest first, with the mcc compile command of each.
 *
 * Every layout the model's sizes admit (tp within a node, pp with the even split or, where pp does
 * not divide the layers, Megatron's uneven ones (tune_splits), cp, dp = N / (tp x pp x cp), ep for
 * an MoE model over dp x cp, virtual stages, the schedule: 1F1B, ZB-H1 or interleaved, the
 * micro-batch size, recompute and offload, and bf16 gradients where f32's fit nothing) is first
 * estimated (tune_estimate.c: composed from a few exact plans of the model cut short), then the
 * most promising are planned exactly as mcc compile plans them (the passes through memory_plan), in
 * the order of their estimated step, until --top of them fit: what it lists is what mcc compile
 * plans, so a listed layout fits. A step is the busiest stage's compute as mcc compile predicts it
 * (passes/step_cost.h: every instruction by the target's calibrated rows, measured on one GPU; a
 * target without a calibration by its roofline), stretched by the schedule's ideal bubble
 * (pp_scheds), plus every byte its collectives send at the target's link rate as if none were
 * hidden: the collectives' share is not calibrated (that needs two GPUs and more), so multi-GPU
 * milliseconds are an upper bound's order, the one-GPU compute a measurement's. */
#include "frontend/tune.h"

#include "common/cli.h"
#include "frontend/plan.h"
#include "passes/passes.h"
#include "passes/step_cost.h"

#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { TUNE_MAX_ARGS = 256, TUNE_MAX_FAMILIES = 4096, TUNE_MAX_MBS = 16 };

/* How far above the memory an estimate may be and still be planned exactly: the estimate's error
 * against the exact plans (bench/RESULTS.md, `mcc tune --exhaustive`) with room to spare. */
#define TUNE_MEMORY_MARGIN 0.05

static const char *const tune_recompute_names[RC_COUNT] = {"none", "selective", "blocks", "full", "offload"};
static const char *const tune_recompute_flags[RC_COUNT] = {
    "", "--recompute-granularity selective", "--recompute-granularity selective --recompute-modules ",
    "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1",
    "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1 --optimizer-cpu-offload"};

/* RC_BLOCKS' modules for model s: the default ones (core_attn, layernorm, mlp_act) and the regions of
 * the blocks it has (passes/recompute.c): the dense MLP, the routed and shared experts, multi-latent
 * attention's up projections; Megatron's DeepSeek-V3 recipe recomputes such a set. */
static void tune_block_modules(const mcc_spec *s, char *buf, size_t n)
{
    bool dense = s->num_experts == 0;
    for (int l = 0; !dense && l < s->num_layers; l++) dense = !mcc_spec_moe_layer(s, l);
    snprintf(buf, n, "core_attn,layernorm,mlp_act%s%s%s%s", dense ? ",mlp" : "", s->num_experts ? ",moe" : "",
             s->moe_shared_expert_intermediate_size > 0 ? ",shared_experts" : "",
             s->multi_latent_attention ? ",mla_up_proj" : "");
}

/* Layout l's memory lever as the table prints it: its name, or block:N for block recompute. */
static const char *tune_recompute_text(const tune_layout *l, char *buf, size_t n)
{
    if (!l->rc_block) return tune_recompute_names[l->rc];
    snprintf(buf, n, "block:%d", l->rc_block);
    return buf;
}

void tune_layout_flags(const tune_layout *l, int world, char *buf, size_t n)
{
    char block[96];
    snprintf(block, sizeof block, "--recompute-granularity full --recompute-method block --recompute-num-layers %d",
             l->rc_block);
    const char *rc = l->rc_block ? block : tune_recompute_flags[l->rc];
    snprintf(buf, n, "--tp %d --pp %d --cp %d --world-size %d%s%s --micro-batch-size %d%s%s%s", l->tp, l->pp, l->cp,
             world, l->tp > 1 ? " --sequence-parallel" : "", l->dp * l->cp > 1 ? " --use-distributed-optimizer" : "",
             l->mbs, *rc ? " " : "", rc, l->rc == RC_BLOCKS && !l->rc_block && l->blocks ? l->blocks : "");
    size_t used = strlen(buf);
    if (l->first_layers && used < n)
        used += (size_t)snprintf(buf + used, n - used,
                                 " --decoder-first-pipeline-num-layers %d --decoder-last-pipeline-num-layers %d",
                                 l->first_layers, l->last_layers);
    if (l->pp > 1)
        used += (size_t)snprintf(buf + used, n - used, " --pipeline-schedule %s", pp_sched_names[l->sched]);
    if (l->vp > 1 && used < n)
        used += (size_t)snprintf(buf + used, n - used, " --num-virtual-stages-per-pipeline-rank %d", l->vp);
    if (l->ep > 1 && used < n)
        used += (size_t)snprintf(buf + used, n - used, " --expert-model-parallel-size %d", l->ep);
    if (l->fp8 && used < n)
        used += (size_t)snprintf(buf + used, n - used, " --fp8-format hybrid --fp8-recipe tensorwise");
    if (l->grad_bf16 && used < n)
        snprintf(buf + used, n - used, " --grad-reduce-in-bf16");
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

/* stderr silenced, and given back: the spec's and the passes' notes, said once per plan as mcc
 * compile says them, would drown the table. */
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

bool tune_spec_text(tune_ctx *t, const char *text, mcc_spec *spec)
{
    char copy[1024], *args[TUNE_MAX_ARGS], err[2048] = "";
    int rest[TUNE_MAX_ARGS], nrest = 0;
    snprintf(copy, sizeof copy, "%s", text);
    int n = tune_argv(t, copy, args), saved = tune_silence();
    bool ok = mcc_spec_load(t->spec_path, n, args, spec, rest, &nrest, err, sizeof err);
    tune_restore(saved);
    if (!ok) snprintf(t->refusal, sizeof t->refusal, "%.190s", err);
    return ok;
}

bool tune_plan_text(tune_ctx *t, const char *text, tune_stage_fn each, void *ctx, tune_plan_figures *out)
{
    char err[2048] = "";
    mcc_spec spec;
    if (!tune_spec_text(t, text, &spec))
        return false;
    /* the target's default lanes, as mcc compile plans without --comm-lanes (their exchange buffers) */
    mcc_plan_options o = {.passes = {.target = t->target}, .unverified = true};
    mcc_program prog;
    int saved = tune_silence();
    bool ok = mcc_target_parse_lanes(t->target, NULL, &o.side_lane, &o.copy_lane, err, sizeof err) &&
              mcc_plan_build(&spec, &o, "memory_plan", &prog, err, sizeof err);
    tune_restore(saved);
    if (!ok) {
        snprintf(t->refusal, sizeof t->refusal, "%.190s", err);
        return false;
    }
    *out = (tune_plan_figures){.stages = prog.n,
                               .micro_batches = spec.global_batch_size / (spec.micro_batch_size * spec.data_parallel_size)};
    for (int s = 0; s < prog.n; s++) {
        mcc_memory_breakdown mem = mcc_memory_of(prog.stage[s]);
        double gib = (double)mcc_memory_total(&mem) / 0x1p30, bytes = 0;
        for (int a = 0; a < IR_NUM_AXES; a++) bytes += mem.sent_bytes[a];
        double step = mcc_step_cost_of(prog.stage[s], t->target).seconds;
        out->gib = gib > out->gib ? gib : out->gib;
        out->compute_s = step > out->compute_s ? step : out->compute_s;
        out->sent_bytes = bytes > out->sent_bytes ? bytes : out->sent_bytes;
        if (each) each(ctx, prog.stage[s], s);
    }
    mcc_program_free(&prog);
    return true;
}

/* Plans layout l exactly into r (its memory whether it fits or not); false where the spec refuses
 * it or its plan does not fit (counted). */
static bool tune_exact(tune_ctx *t, const tune_layout *l, tune_result *r)
{
    char text[768];
    tune_layout_flags(l, t->world, text, sizeof text);
    tune_plan_figures f;
    if (!tune_plan_text(t, text, NULL, NULL, &f)) {
        t->refused++;
        return false;
    }
    t->planned++;
    *r = (tune_result){.l = *l, .gib = f.gib, .compute_s = f.compute_s, .exact = true};
    r->bubble = l->pp > 1 ? pp_scheds[l->sched].ideal_bubble(l->pp, f.micro_batches, l->vp) : 0;
    r->comm_s = t->target->link_bytes_per_s > 0 ? f.sent_bytes / t->target->link_bytes_per_s : 0;
    r->step_s = r->compute_s * (1 + r->bubble) + r->comm_s;
    if (f.gib > t->gpu_gib) {
        t->too_big++;
        return false;
    }
    return true;
}

static int tune_by_time(const void *a, const void *b)
{
    double x = ((const tune_result *)a)->step_s, y = ((const tune_result *)b)->step_s;
    return (x > y) - (x < y);
}

/* ---- the candidates ------------------------------------------------------------------------ */

typedef struct {
    tune_result *r;
    int n, cap;
} tune_list;

static bool tune_push(tune_list *v, const tune_result *r)
{
    if (v->n == v->cap) {
        int cap = v->cap ? 2 * v->cap : 1024;
        tune_result *grown = realloc(v->r, (size_t)cap * sizeof *grown);
        if (!grown) return false;
        v->r = grown, v->cap = cap;
    }
    v->r[v->n++] = *r;
    return true;
}

/* A candidate whose estimate is over the memory by more than the margin: never planned; the
 * TUNE_REJECTED nearest the memory are kept (--json's "rejected": mcc compile refuses each). */
static void tune_reject(tune_ctx *t, const tune_result *r)
{
    int worst = 0;
    if (t->nrejected < TUNE_REJECTED) {
        t->rejected[t->nrejected++] = *r;
        return;
    }
    for (int i = 1; i < TUNE_REJECTED; i++)
        if (t->rejected[i].gib > t->rejected[worst].gib) worst = i;
    if (r->gib < t->rejected[worst].gib) t->rejected[worst] = *r;
}

/* A family met by the search (--explain says what became of each), with why it was not estimated
 * if a size does not divide. */
static tune_family *tune_family_add(tune_ctx *t, const tune_layout *l, const char *why)
{
    if (t->nfamilies >= TUNE_MAX_FAMILIES)
        return NULL;
    tune_family *f = &t->families[t->nfamilies++];
    *f = (tune_family){.l = *l};
    snprintf(f->why, sizeof f->why, "%s", why ? why : "");
    return f;
}

/* The schedules a family's pipeline may run: 1F1B alone without a pipeline; with virtual stages
 * the rows that run them; else each row that runs one chunk a rank (1F1B, ZB-H1). */
static int tune_schedules(const tune_layout *l, pp_sched_kind *out)
{
    int n = 0;
    for (int k = 0; k < PP_NUM_SCHEDS; k++)
        if (l->pp == 1 ? k == PP_SCHED_1F1B : pp_scheds[k].virtual_stages == (l->vp > 1)) out[n++] = (pp_sched_kind)k;
    return n;
}

/* What became of a candidate's estimate. */
typedef enum { TUNE_REFUSED, TUNE_OVER, TUNE_NEAR } tune_outcome;

/* Candidate l of family fam estimated, counted and kept in all (or among the rejected): refused
 * (by the spec or the planner), over the memory by more than the margin (never planned), or near
 * it or under (kept). */
static tune_outcome tune_consider(tune_ctx *t, tune_family *fam, const tune_layout *l, tune_list *all, int *estimated)
{
    tune_result r;
    if (!tune_estimate(t, l, &r)) return TUNE_REFUSED;
    ++*estimated;
    t->candidates++;
    if (fam->least_gib == 0 || r.gib < fam->least_gib) fam->least_gib = r.gib;
    if (r.gib > t->gpu_gib) {
        if (t->exhaustive) tune_push(all, &r);
        if (r.gib <= t->gpu_gib * (1 + TUNE_MEMORY_MARGIN)) return TUNE_NEAR;
        tune_reject(t, &r);
        return TUNE_OVER;
    }
    fam->fit++;
    if (fam->best_s == 0 || r.step_s < fam->best_s) fam->best_s = r.step_s;
    tune_push(all, &r);
    return TUNE_NEAR;
}

/* Every candidate of family fam with bf16 gradients or not estimated (schedules, micro-batch sizes,
 * memory levers: full recompute of every layer, and by Megatron's block method of the first N of
 * each stage), each kept in all; the family's best and least memory noted. The levers go from the
 * least memory (offload) to the most (none, block recompute of fewer layers), and the micro-batch
 * from 1 up: past the first whose estimate is over the memory and its margin the rest take more,
 * so they are not estimated (their reduced plans, most of an MoE model's search, never made), but
 * under --exhaustive, which estimates and plans them all. A micro-batch size at which every lever
 * is refused or over ends the family: a larger one has fewer micro-batches a step and more memory
 * (DeepSeek-V3's cp families, which its attention refuses on the GPU, tried once, not five times). */
static void tune_family_levers(tune_ctx *t, const mcc_spec *s, tune_family *fam, tune_list *all, bool grad_bf16,
                               int *estimated)
{
    const tune_layout *f = &t->fix;
    pp_sched_kind scheds[PP_NUM_SCHEDS];
    int nsched = tune_schedules(&fam->l, scheds);
    int stages = fam->l.pp * fam->l.vp, most = (s->num_layers + stages - 1) / stages; /* a stage's layers, at most */
    for (int fp8 = 0; fp8 <= t->try_fp8; fp8++)
    for (int k = 0; k < nsched; k++)
        for (int mbs = 1; mbs <= TUNE_MAX_MBS && s->global_batch_size % (mbs * fam->l.dp) == 0; mbs *= 2) {
            if (f->mbs && mbs != f->mbs) continue;
            bool within = false; /* a lever at this micro-batch within the memory's margin */
            for (int rc = RC_COUNT - 1; rc >= RC_NONE; rc--) {
                if ((int)f->rc >= 0 && rc != (int)f->rc) continue;
                tune_layout l = fam->l;
                l.mbs = mbs, l.rc = (tune_recompute)rc, l.sched = scheds[k], l.fp8 = fp8, l.grad_bf16 = grad_bf16;
                l.blocks = t->block_modules;
                tune_outcome o = tune_consider(t, fam, &l, all, estimated);
                for (l.rc_block = most - 1; o == TUNE_NEAR && rc == RC_FULL && l.rc_block >= 1; l.rc_block--)
                    if (tune_consider(t, fam, &l, all, estimated) == TUNE_OVER && !t->exhaustive) break;
                within |= o == TUNE_NEAR;
                if (o == TUNE_OVER && !t->exhaustive) break;
            }
            if (!within && !t->exhaustive) break;
        }
}

/* Family fam's candidates with f32 gradients, and where none of them fits, with bf16 ones
 * (--grad-reduce-in-bf16: half the gradients' bytes and dp's reduction of them, the sum rounded;
 * DeepSeek-V3 fits its own PP16 x EP64 only so): the last lever, taken only where nothing else fits
 * the family, as it changes the numerics; not where the given flags ask for it already. */
static void tune_family_estimate(tune_ctx *t, const mcc_spec *s, tune_family *fam, tune_list *all)
{
    int estimated = 0;
    t->refusal[0] = 0;
    tune_family_levers(t, s, fam, all, false, &estimated);
    if (!fam->fit && estimated && !s->grad_reduce_in_bf16)
        tune_family_levers(t, s, fam, all, true, &estimated);
    if (!estimated)
        snprintf(fam->why, sizeof fam->why, "%s", t->refusal[0] ? t->refusal : "no micro-batch divides the global batch");
}

enum { TUNE_MAX_SPLITS = 3 };

/* The pipeline splits of `layers` over pp the search tries, as (first, last) layers of the end
 * ranks (0 0: the even split, which mcc compile balances itself against the head where that
 * helps): the even one where pp divides the layers; else Megatron's recipes' uneven ones, every
 * middle rank ceil(layers / pp) layers and the end ranks fewer: the remainder on the last rank
 * (Megatron-Bridge's DeepSeek-V3 layouts: 16 16 16 13, 8 x 7 + 5, 4 x 15 + 1; the last rank also
 * runs the head, the loss and any multi-token depths), on the first (the embedding's: the
 * 1,024-GPU TP8 x PP16 layout of models/deepseek-v3.json, 1 + 15 x 4), or shared by both, the last
 * taking the fewer (61 = 3 + 14 x 4 + 2; LLaMA-3 405B's 126 = 15 + 6 x 16 + 15 on 8, as its
 * embedding and loss counted as layers split it). The count (0: no split leaves each end a layer). */
static int tune_splits(int layers, int pp, int first[TUNE_MAX_SPLITS], int last[TUNE_MAX_SPLITS])
{
    if (pp == 1 || layers % pp == 0) return first[0] = last[0] = 0, 1;
    int m = (layers + pp - 1) / pp, rest = layers - m * (pp - 2), n = 0;
    int f[TUNE_MAX_SPLITS] = {m, rest - m, rest - rest / 2}, l[TUNE_MAX_SPLITS] = {rest - m, m, rest / 2};
    for (int k = 0; k < TUNE_MAX_SPLITS; k++) {
        bool seen = false;
        for (int j = 0; j < n; j++) seen |= first[j] == f[k] && last[j] == l[k];
        if (f[k] >= 1 && l[k] >= 1 && f[k] <= m && l[k] <= m && !seen)
            first[n] = f[k], last[n] = l[k], n++;
    }
    return n;
}

/* Whether vp virtual stages a rank divide every rank's layers of l's split, as mcc compile's
 * pp_split_layers takes them. */
static bool tune_vp_divides(const tune_layout *l, int layers, int vp)
{
    int per[PP_MAX_V * 64];
    char err[512];
    pp_split_flags split = {.num_layers = layers, .p = l->pp, .v = vp, .first = l->first_layers ? l->first_layers : -1,
                            .last = l->last_layers ? l->last_layers : -1};
    return l->pp * vp <= (int)(sizeof per / sizeof per[0]) && pp_split_layers(&split, per, err, sizeof err);
}

/* Layout l's split as the table prints it: - (even), or first + middle ranks x their layers + last. */
static const char *tune_split_text(const tune_layout *l, int layers, char *buf, size_t n)
{
    if (!l->first_layers) return "-";
    if (l->pp == 2) snprintf(buf, n, "%d+%d", l->first_layers, l->last_layers);
    else snprintf(buf, n, "%d+%dx%d+%d", l->first_layers, l->pp - 2, (layers - l->first_layers - l->last_layers) / (l->pp - 2),
                  l->last_layers);
    return buf;
}

/* Every layout of the world that the model's sizes admit: tp within a node, pp, cp, dp = the rest,
 * ep (MoE) over dp x cp, virtual stages; each family's candidates estimated into all. */
static void tune_search(tune_ctx *t, const mcc_spec *s, tune_list *all)
{
    const tune_layout *f = &t->fix;
    char why[200];
    for (int tp = 1; tp <= t->gpus_per_node && tp <= 8; tp *= 2) {
        if (f->tp && tp != f->tp) continue;
        if (s->num_attention_heads % tp || s->num_query_groups % tp) {
            snprintf(why, sizeof why, "tp %d does not divide num_attention_heads %d and num_query_groups %d", tp,
                     s->num_attention_heads, s->num_query_groups);
            tune_family_add(t, &(tune_layout){.tp = tp}, why);
            continue;
        }
        for (int pp = 1; pp <= s->num_layers && pp <= t->world / tp; pp++) {
            int first[TUNE_MAX_SPLITS], last[TUNE_MAX_SPLITS], nsplits = tune_splits(s->num_layers, pp, first, last);
            if (f->pp && pp != f->pp) continue;
            for (int split = 0; split < nsplits; split++)
            for (int cp = 1; cp <= 8; cp *= 2) {
                if ((f->cp && cp != f->cp) || t->world % (tp * pp * cp)) continue;
                int dp = t->world / (tp * pp * cp);
                tune_layout l = {.tp = tp, .pp = pp, .cp = cp, .dp = dp, .ep = 1, .first_layers = first[split],
                                 .last_layers = last[split], .vp = 1};
                if (s->seq_length % (2 * cp)) { /* the world divides: the sequence does not */
                    snprintf(why, sizeof why, "cp %d: seq_length %d does not cut into 2 x %d chunks", cp, s->seq_length, cp);
                    tune_family_add(t, &l, why);
                    continue;
                }
                for (int ep = 1; ep <= (s->num_experts ? s->num_experts : 1); ep *= 2) {
                    if ((f->ep && ep != f->ep) || (dp * cp) % ep || (s->num_experts && s->num_experts % ep)) continue;
                    /* interleaved virtual stages where every rank's layers divide again */
                    for (int vp = 1; vp <= 4; vp *= 2) {
                        if (vp > 1 && (pp == 1 || !tune_vp_divides(&l, s->num_layers, vp))) break;
                        if (f->vp && vp != f->vp) continue;
                        l.ep = ep, l.vp = vp;
                        tune_family *fam = tune_family_add(t, &l, NULL);
                        if (fam) tune_family_estimate(t, s, fam, all);
                    }
                    if (isatty(2) && !t->json) /* progress where someone watches */
                        fprintf(stderr, "\rmcc tune: %d layouts estimated (%d reduced plans)", t->candidates,
                                tune_units_planned(t));
                }
            }
        }
    }
    if (isatty(2) && !t->json) fprintf(stderr, "\n");
}

/* A listed layout: its exact plan's figures and the estimate that ranked it. */
typedef struct {
    tune_result plan, estimate;
    bool fits;
} tune_row;

/* Fitting rows first, fastest first. */
static int tune_by_fit_and_time(const void *a, const void *b)
{
    const tune_row *x = a, *y = b;
    if (x->fits != y->fits) return x->fits ? -1 : 1;
    return tune_by_time(&x->plan, &y->plan);
}

/* The estimated candidates planned exactly, fastest estimate first, until --top of them fit (every
 * one under --exhaustive, fitting or not); the count of rows, fitting first, fastest first. */
static int tune_verify(tune_ctx *t, tune_list *all, tune_row *rows)
{
    qsort(all->r, (size_t)all->n, sizeof *all->r, tune_by_time);
    int nrows = 0, fit = 0;
    for (int i = 0; i < all->n && (t->exhaustive || fit < t->top); i++) {
        const tune_result *e = &all->r[i];
        if (!t->exhaustive && e->gib > t->gpu_gib * (1 + TUNE_MEMORY_MARGIN)) continue;
        tune_row row = {.estimate = *e};
        row.fits = tune_exact(t, &e->l, &row.plan);
        if (row.fits || (t->exhaustive && row.plan.exact)) rows[nrows++] = row;
        fit += row.fits;
        if (isatty(2) && !t->json)
            fprintf(stderr, "\rmcc tune: %d planned exactly, %d fit", t->planned, fit);
    }
    if (isatty(2) && !t->json) fprintf(stderr, "\n");
    qsort(rows, (size_t)nrows, sizeof *rows, tune_by_fit_and_time);
    return nrows;
}

/* ---- output -------------------------------------------------------------------------------- */

/* --explain: what became of each family the search met: its best estimate beside the first's
 * step, or why none is listed. */
static void tune_explain(const tune_ctx *t, const mcc_spec *s, const tune_row *rows, int nrows)
{
    char split[32];
    printf("\nEvery layout family (tp within a node of %d, pp, cp, dp = the rest, ep), by its estimates:\n",
           t->gpus_per_node);
    double first = nrows ? rows[0].plan.step_s : 0;
    for (int i = 0; i < t->nfamilies; i++) {
        const tune_family *f = &t->families[i];
        printf("  tp %d", f->l.tp);
        if (f->l.pp) printf(" pp %d cp %d dp %d", f->l.pp, f->l.cp, f->l.dp);
        if (f->l.ep) printf(" ep %d", f->l.ep);
        if (f->l.vp > 1) printf(" vp %d", f->l.vp);
        if (f->l.first_layers) printf(" split %s", tune_split_text(&f->l, s->num_layers, split, sizeof split));
        if (f->fit)
            printf(": %d fit; its best ~%.0f ms, %+.1f%% of the first's\n", f->fit, 1e3 * f->best_s,
                   100 * (f->best_s - first) / first);
        else if (f->least_gib > 0)
            printf(": does not fit: its least estimate takes %.1f GiB a GPU (micro-batch 1, full recompute%s) of the %.1f "
                   "allowed\n", f->least_gib, (int)t->fix.rc < 0 || t->fix.rc == RC_OFFLOAD ? " and offload" : "",
                   t->gpu_gib);
        else
            printf(": not planned: %s\n", f->why);
    }
}

/* --json: the listed layouts fastest first, each with its compile flags and its estimate. */
static void tune_json(const tune_ctx *t, const mcc_spec *s, const tune_row *rows, int nrows)
{
    double tokens = (double)s->global_batch_size * s->seq_length;
    printf("{\"target\": \"%s\", \"world_size\": %d, \"calibrated\": %s, \"candidates\": %d, \"reduced_plans\": %d, "
           "\"planned\": %d, \"did_not_fit\": %d, \"refused\": %d, \"layouts\": [", t->target->name, t->world,
           t->target->ncost_rows ? "true" : "false", t->candidates, tune_units_planned(t), t->planned, t->too_big,
           t->refused);
    for (int i = 0; i < nrows && (t->exhaustive || i < t->top); i++) {
        const tune_result *r = &rows[i].plan, *e = &rows[i].estimate;
        char flags[768], rc[32];
        tune_layout_flags(&r->l, t->world, flags, sizeof flags);
        printf("%s\n  {\"tp\": %d, \"pp\": %d, \"vp\": %d, \"cp\": %d, \"dp\": %d, \"ep\": %d, \"micro_batch_size\": %d, "
               "\"recompute\": \"%s\", \"schedule\": \"%s\", \"gib\": %.3f, \"step_ms\": %.3f, \"compute_ms\": %.3f, "
               "\"comm_ms\": %.3f, \"bubble\": %.4f, \"tokens_per_s_per_gpu\": %.1f, \"estimated_gib\": %.3f, "
               "\"estimated_step_ms\": %.3f, \"fits\": %s, \"fp8\": %s, \"grad_reduce_in_bf16\": %s, "
               "\"decoder_first_pipeline_num_layers\": %d, \"decoder_last_pipeline_num_layers\": %d, \"flags\": \"%s\"}",
               i ? "," : "", r->l.tp, r->l.pp, r->l.vp, r->l.cp, r->l.dp, r->l.ep, r->l.mbs, tune_recompute_text(&r->l, rc, sizeof rc),
               pp_sched_names[r->l.sched], r->gib, 1e3 * r->step_s, 1e3 * r->compute_s, 1e3 * r->comm_s, r->bubble,
               tokens / r->step_s / t->world, e->gib, 1e3 * e->step_s, rows[i].fits ? "true" : "false",
               r->l.fp8 ? "true" : "false", r->l.grad_bf16 || s->grad_reduce_in_bf16 ? "true" : "false",
               r->l.first_layers, r->l.last_layers, flags);
    }
    printf("\n], \"rejected\": [");
    for (int i = 0; i < t->nrejected; i++) { /* estimated over the memory: never planned */
        char flags[768];
        tune_layout_flags(&t->rejected[i].l, t->world, flags, sizeof flags);
        printf("%s\n  {\"estimated_gib\": %.3f, \"flags\": \"%s\"}", i ? "," : "", t->rejected[i].gib, flags);
    }
    printf("\n]}\n");
}

static void tune_print(const tune_ctx *t, const mcc_spec *s, const tune_row *rows, int nrows)
{
    double tokens = (double)s->global_batch_size * s->seq_length;
    double model_flops = 6.0 * (double)mcc_spec_num_active_params(s) * tokens;
    printf("%d layouts ranked by their estimate (from %d plans of the model cut short), %d within %.1f GiB a GPU "
           "(%s target, less 1 GiB for the runtime);\nthe first planned exactly as mcc compile plans them: %d planned, "
           "%d fit, %d did not, %d refused.\n"
           "Step time: the busiest stage's compute as mcc compile predicts it (%s), the schedule's bubble, and the\n"
           "collectives' bytes at the link rate as if none were hidden (not calibrated: an upper bound's order).\n\n",
           t->candidates, tune_units_planned(t), t->estimated_fit, t->gpu_gib, t->target->name, t->planned, nrows,
           t->too_big, t->refused, t->target->ncost_rows ? "calibrated on one GPU" : "the target's roofline, uncalibrated");
    printf("%4s %3s %3s %3s %4s %3s %4s %-9s %8s %9s %9s %6s %7s %7s %3s %-11s %-3s %-11s %s\n", "rank", "tp", "pp", "cp",
           "dp", "ep", "mbs", "recompute", "GiB", "step ms", "tok/s/GPU", "MFU", "bubble", "comm ms", "vp", "schedule",
           "fp8", "split", "grads");
    for (int i = 0; i < nrows && i < t->top; i++) {
        const tune_result *r = &rows[i].plan;
        char rc[32], split[32];
        double mfu = t->target->peak_bf16_flops > 0 ? model_flops / r->step_s / t->world / t->target->peak_bf16_flops : 0;
        printf("%4d %3d %3d %3d %4d %3d %4d %-9s %8.1f %9.0f %9.0f %5.1f%% %6.1f%% %7.0f %3d %-11s %-3s %-11s %s\n", i + 1,
               r->l.tp, r->l.pp, r->l.cp, r->l.dp, r->l.ep, r->l.mbs, tune_recompute_text(&r->l, rc, sizeof rc), r->gib,
               1e3 * r->step_s, tokens / r->step_s / t->world, 100 * mfu, 100 * r->bubble, 1e3 * r->comm_s, r->l.vp,
               r->l.pp > 1 ? pp_sched_names[r->l.sched] : "-", r->l.fp8 ? "fp8" : "-",
               tune_split_text(&r->l, s->num_layers, split, sizeof split),
               r->l.grad_bf16 || s->grad_reduce_in_bf16 ? "bf16" : "f32");
    }
    if (!nrows) {
        printf("No layout fits: more GPUs (--world-size), a shorter --seq-length, or --optimizer-cpu-offload.\n");
        return;
    }
    char flags[768];
    tune_layout_flags(&rows[0].plan.l, t->world, flags, sizeof flags);
    printf("\nThe first, compiled:\n  mcc compile %s", t->spec_path ? t->spec_path : "");
    for (int i = 0; i < t->nbase; i++) printf(" %s", t->base[i]);
    printf(" %s --target %s -o train_rank\n", flags, t->target->name);
}

/* ---- the command line ---------------------------------------------------------------------- */

/* --fix KEY=VALUE: tp, pp, cp, ep, mbs, vp (a number) or recompute (none|selective|blocks|full|offload) held, not searched. */
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
                                 "(none|selective|blocks|full|offload)", text ? text : ""), false;
}

/* --cost-perturbation F: each calibrated row's times scaled by its own factor in [1 - F, 1 + F] (a
 * fixed sequence): how much the ranking leans on the calibration's last per cent (tests/tune.sh). */
static bool tune_perturb(tune_ctx *t, double f)
{
    t->perturbed = *t->target;
    t->perturbed_rows = malloc((size_t)(t->target->ncost_rows + 1) * sizeof *t->perturbed_rows);
    if (!t->perturbed_rows) return false;
    unsigned x = 12345;
    for (int i = 0; i < t->target->ncost_rows; i++) {
        x = x * 1103515245u + 12345u; /* a linear congruential sequence: the same perturbation every run */
        double k = 1 + f * (2.0 * ((x >> 8) & 0xffff) / 0xffff - 1);
        mcc_cost_row r = t->target->cost_rows[i];
        r.t0_us *= k, r.us_per_gflop *= k, r.us_per_gb *= k;
        t->perturbed_rows[i] = r;
    }
    t->perturbed.cost_rows = t->perturbed_rows;
    t->target = &t->perturbed;
    return true;
}

/* A layout fixes what tune searches: refused, from a flag or the spec file. */
static const char tune_no_layout[] =
    "pipeline_model_parallel_layout (--pipeline-model-parallel-layout) fixes pp and every stage's layers, which mcc "
    "tune searches (it tries the even split and uneven first/last ranks, not layouts): drop it here, and check that "
    "layout with mcc compile or mcc schedule";

/* tune's own options out of argv (the rest are the spec's flags); false with the message in err. */
static bool tune_options(tune_ctx *t, int argc, char **argv, char *err, size_t errlen)
{
    const char *target = "h100";
    t->gpus_per_node = 8, t->top = 10, t->fix.rc = (tune_recompute)-1;
    t->base = calloc((size_t)argc + 1, sizeof *t->base);
    if (!t->base) return snprintf(err, errlen, "out of memory"), false;
    long long v;
    double gib = 0, perturbation = 0;
    for (int i = 0; i < argc; i++) {
        const char *f = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(f, "--gpus-per-node") || !strcmp(f, "--top") || !strcmp(f, "--world-size")) {
            if (!cli_parse_int(f, val, 1, 1 << 20, &v, err, errlen)) return false;
            *(!strcmp(f, "--top") ? &t->top : !strcmp(f, "--world-size") ? &t->world : &t->gpus_per_node) = (int)v;
            i++;
        } else if (!strcmp(f, "--fix")) {
            if (!tune_fix(t, val, err, errlen)) return false;
            i++;
        } else if (!strcmp(f, "--explain") || !strcmp(f, "--json") || !strcmp(f, "--exhaustive") || !strcmp(f, "--fp8")) {
            *(!strcmp(f, "--json")      ? &t->json
              : !strcmp(f, "--explain") ? &t->explain
              : !strcmp(f, "--fp8")     ? &t->try_fp8
                                        : &t->exhaustive) = true;
        } else if (!strcmp(f, "--target") && val) {
            target = argv[++i];
        } else if (!strcmp(f, "--gpu-memory") || !strcmp(f, "--cost-perturbation")) {
            if (!cli_parse_num(f, val, 0, true, INFINITY, !strcmp(f, "--gpu-memory") ? &gib : &perturbation, err, errlen))
                return false;
            i++;
        } else if (!strcmp(f, "--pipeline-model-parallel-layout")) {
            return snprintf(err, errlen, "%s", tune_no_layout), false;
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
    if (perturbation > 0 && !tune_perturb(t, perturbation)) return snprintf(err, errlen, "out of memory"), false;
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
    if (*s.pipeline_model_parallel_layout) {
        fprintf(stderr, "mcc: error: %s\n", tune_no_layout);
        free(t.base);
        return 2;
    }
    tune_block_modules(&s, t.block_modules, sizeof t.block_modules);
    tune_list all = {0};
    t.families = calloc(TUNE_MAX_FAMILIES, sizeof *t.families);
    if (!t.families) return free(t.base), fprintf(stderr, "mcc: error: out of memory\n"), 2;
    tune_search(&t, &s, &all);
    for (int i = 0; i < all.n; i++) t.estimated_fit += all.r[i].gib <= t.gpu_gib;
    tune_row *rows = calloc((size_t)all.n + 1, sizeof *rows);
    int nrows = rows ? tune_verify(&t, &all, rows) : 0, fit = 0;
    for (int i = 0; i < nrows; i++) fit += rows[i].fits;
    if (t.json) {
        tune_json(&t, &s, rows, nrows);
    } else {
        tune_print(&t, &s, rows, fit);
        if (t.explain) tune_explain(&t, &s, rows, fit);
    }
    free(rows), free(all.r), free(t.families), free(t.base), free(t.perturbed_rows);
    tune_units_free(&t);
    return fit ? 0 : 1;
}
