/* schedule_cmd.c — `mcc schedule SPEC.json [--<field> VALUE ...] [--svg OUT.svg] [--target T]
 * [--columns N]`: the pipeline a spec asks for, before compiling it. The stage split and each
 * rank's order of passes (passes/pp_schedule.c), timed by a cost model of the target, printed as
 * one text row per rank beside the bubble and the ideal, each schedule compared, and drawn as SVG.
 *
 * The cost model, per virtual stage and micro-batch: F = its layers' forward FLOPs
 * (2 x parameters x tokens + attention's 4 B T^2 H per layer, an MoE layer's parameters the active
 * ones, a token's top-k experts, the output head's 2 V H tokens on the last stage) / tp over the
 * target's GEMM rate, an MoE layer's plus its dispatch and combine all-to-all at ep (each sends
 * the micro-batch's B T k rows of H bf16, balanced: (ep-1)/ep of them over the target's link);
 * B = 2F, split under ZB into B = F (the input
 * gradient) and W = F (the weight gradient), B plus the forward of the layers full recompute
 * replays. p2p: one micro-batch's activations (bf16, over tp with
 * sequence parallelism) over the target's link. The memory per rank is the plan's: the chosen
 * schedule's program planned as `mcc compile` plans it (frontend/plan.c), its memory report. */
#include "frontend/schedule_cmd.h"

#include "common/cli.h"
#include "frontend/plan.h"
#include "frontend/spec.h"
#include "passes/pp_schedule.h"
#include "passes/target.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *svg, *target;
    long long columns; /* 0: every pass's label fits */
} sched_opts;

/* What `mcc schedule` needs of the spec and target, for every schedule it compares. */
typedef struct {
    const mcc_spec *s;
    const mcc_target *t;
    int p, m;
    double layer_fwd_s, head_fwd_s; /* one micro-batch's forward through a layer, through the head */
    double layer_flops, moe_flops;  /* a dense layer's forward FLOPs, an MoE layer's (active parameters) */
    double a2a_bytes, moe_fwd_s;    /* an MoE layer's dispatch + combine bytes a rank sends; its forward */
    double p2p_s;
} sched_model;

/* One schedule laid out: its split, costs, programs and timeline. */
typedef struct {
    pp_schedule sched;
    pp_timeline tl;
    int *layers;           /* [p*v] */
    pp_stage_cost *cost;   /* [p*v] */
} sched_plan;

static int sched_fail(const char *msg)
{
    fprintf(stderr, "mcc schedule: error: %s\n", msg);
    return 2;
}

static void sched_model_init(sched_model *sm, const mcc_spec *s, const mcc_target *t)
{
    double tp = s->tensor_model_parallel_size, B = s->micro_batch_size, T = s->seq_length, H = s->hidden_size;
    double tokens = B * T, rate = t->gemm_bf16_flops * tp;
    *sm = (sched_model){.s = s, .t = t, .p = s->pipeline_model_parallel_size, .m = mcc_spec_accum_steps(s)};
    sm->layer_flops = 2 * mcc_spec_layer_params(s) * tokens + 4 * B * T * T * H;
    sm->layer_fwd_s = sm->layer_flops / rate;
    if (s->num_experts > 0) {
        double ep = s->expert_model_parallel_size, link = t->link_bytes_per_s;
        sm->moe_flops = 2 * mcc_spec_moe_layer_params(s, true) * tokens + 4 * B * T * T * H;
        sm->a2a_bytes = ep > 1 ? 2 * tokens * s->moe_router_topk * H * 2 : 0;
        sm->moe_fwd_s = sm->moe_flops / rate + (link > 0 ? sm->a2a_bytes * (ep - 1) / ep / link : 0);
    }
    sm->head_fwd_s = 2.0 * s->padded_vocab_size * H * tokens / rate;
    bool sp = s->sequence_parallel && tp > 1;
    sm->p2p_s = t->link_bytes_per_s > 0 ? 2 * tokens * H / (sp ? tp : 1) / t->link_bytes_per_s : 0;
}

static void sched_plan_free(sched_plan *pl)
{
    pp_schedule_free(&pl->sched);
    pp_timeline_free(&pl->tl);
    free(pl->layers);
    free(pl->cost);
    memset(pl, 0, sizeof *pl);
}

/* Of a virtual stage's `layers`, those whose forward its backward replays under full recompute:
 * every one (uniform), the first recompute_num_layers (block: counted from the stage's first
 * layer, passes/recompute.c); none otherwise (selective's single ops are not timed). */
static int replayed_layers(const mcc_spec *s, int layers)
{
    if (s->recompute_granularity != MCC_RECOMPUTE_FULL)
        return 0;
    if (s->recompute_method == MCC_RECOMPUTE_BLOCK)
        return s->recompute_num_layers < layers ? s->recompute_num_layers : layers;
    return layers;
}

/* Splits, builds and simulates `kind` at v virtual stages per rank. */
static bool sched_plan_make(const sched_model *sm, pp_sched_kind kind, int v, sched_plan *pl, char *err, size_t n)
{
    const mcc_spec *s = sm->s;
    int stages = sm->p * v;
    pp_split_flags split = mcc_spec_split_flags(s);
    split.p = sm->p, split.v = v;
    memset(pl, 0, sizeof *pl);
    pl->layers = malloc(sizeof(int) * stages);
    pl->cost = malloc(sizeof(pp_stage_cost) * stages);
    if (!pl->layers || !pl->cost) return snprintf(err, n, "out of memory"), false;
    if (!pp_split_layers(&split, pl->layers, err, n))
        return false;
    for (int g = 0, l0 = 0; g < stages; l0 += pl->layers[g++]) {
        double f = g == stages - 1 ? sm->head_fwd_s : 0, replay = 0; /* B needs the forward's values */
        for (int l = l0; l < l0 + pl->layers[g]; l++) {
            double layer = mcc_spec_moe_layer(s, l) ? sm->moe_fwd_s : sm->layer_fwd_s;
            f += layer;
            replay += l - l0 < replayed_layers(s, pl->layers[g]) ? layer : 0;
        }
        pl->cost[g] = (pp_stage_cost){.f = f, .b = f + replay, .w = f}; /* B = 2F: under ZB B = F and W = F */
    }
    return pp_schedule_build(kind, sm->p, sm->m, v, &pl->sched, err, n) &&
           pp_schedule_simulate(&pl->sched, pl->cost, sm->p2p_s, &pl->tl, err, n);
}

static int sched_peak_slots(const sched_plan *pl)
{
    int peak = 0;
    for (int r = 0; r < pl->sched.p; r++) peak = pl->tl.peak_slots[r] > peak ? pl->tl.peak_slots[r] : peak;
    return peak;
}

/* ---- text ------------------------------------------------------------------------------------- */

/* One row per rank: a column per time unit, each pass a box "F12 " (kind, micro-batch; "F12.1" on
 * chunk 1 with virtual stages) from its
 * start to its end, idle time '.'. With columns 0 the unit is the shortest pass over the widest
 * label, so every label fits; else the makespan over that many columns, labels cut to fit. */
static void sched_print_rows(const sched_plan *pl, long long columns, FILE *out)
{
    const pp_schedule *s = &pl->sched;
    const pp_timeline *t = &pl->tl;
    char label[16];
    int width = snprintf(label, sizeof label, s->v > 1 ? "F%d.%d" : "F%d", s->m - 1, s->v - 1) + 1;
    double shortest = INFINITY;
    for (int k = 0; k < t->first[s->p]; k++)
        if (t->end[k] > t->start[k]) shortest = fmin(shortest, t->end[k] - t->start[k]);
    double unit = columns > 0 ? t->makespan / columns : isfinite(shortest) ? shortest / width : 1;
    size_t ncols = (size_t)ceil(t->makespan / unit - 1e-9);
    char *row = malloc(ncols + 1);
    if (!row) return;
    fprintf(out, "timeline, one column per %.3g ms (F forward, B backward%s, then the micro-batch%s; . idle):\n",
            unit * 1e3, pp_scheds[s->kind].splits_w ? " input gradient, W weight gradient" : "",
            s->v > 1 ? ".chunk" : "");
    for (int r = 0; r < s->p; r++) {
        memset(row, '.', ncols);
        row[ncols] = '\0';
        for (int i = 0; i < s->rank[r].n; i++) {
            const pp_action *a = &s->rank[r].a[i];
            size_t c0 = (size_t)floor(t->start[t->first[r] + i] / unit + 0.5);
            size_t c1 = (size_t)floor(t->end[t->first[r] + i] / unit + 0.5);
            if (c1 > ncols) c1 = ncols;
            int len = snprintf(label, sizeof label, s->v > 1 ? "%c%d.%d" : "%c%d", "FBW"[a->kind], a->mb, a->chunk);
            for (size_t c = c0; c < c1; c++) row[c] = c - c0 < (size_t)len ? label[c - c0] : ' ';
        }
        fprintf(out, "rank %-3d |%s|\n", r, row);
    }
    free(row);
}

static void sched_print_split(const sched_plan *pl, FILE *out)
{
    const pp_schedule *s = &pl->sched;
    fprintf(out, "stage split (layers per virtual stage g = chunk * p + rank):");
    for (int r = 0; r < s->p; r++) {
        fprintf(out, "%s rank %d:", r ? ";" : "", r);
        for (int c = 0; c < s->v; c++) fprintf(out, " %d", pl->layers[pp_virtual_stage(s, r, c)]);
    }
    fprintf(out, "\n");
}

/* The memory of every rank, the plan's own: the spec under the chosen schedule planned as `mcc
 * compile` plans it for the target, each stage's memory report as compile prints it. */
static bool sched_print_memory(const mcc_spec *spec, const mcc_target *t, const sched_plan *pl, FILE *out, char *err,
                               size_t n)
{
    mcc_spec s = *spec;
    s.pipeline_schedule = mcc_pp_sched_of(pl->sched.kind);
    mcc_plan_options o = {.passes = {.target = t}};
    mcc_program prog;
    if (!mcc_target_parse_lanes(t, NULL, &o.side_lane, &o.copy_lane, err, n) || !mcc_plan_build(&s, &o, NULL, &prog, err, n))
        return false;
    fprintf(out, "memory per rank, the plan's (mcc compile --target %s plans the same):\n", t->name);
    for (int r = 0; r < prog.n; r++) {
        mcc_memory_breakdown mem = mcc_memory_of(prog.stage[r]);
        mcc_memory_print(&mem, out);
    }
    mcc_program_free(&prog);
    return true;
}

static void sched_print_summary(const sched_plan *pl, FILE *out)
{
    const pp_schedule *s = &pl->sched;
    fprintf(out, "bubble: %.4f of the step (1 - busy / (p x makespan)); idle/compute %.5f, ideal %s = %.5f; "
                 "makespan %.4g s\n", pl->tl.bubble, pl->tl.idle_ratio, pp_scheds[s->kind].ideal_text,
            pp_ideal_bubble(s), pl->tl.makespan);
}

/* ---- SVG ---------------------------------------------------------------------------------------- */

static bool sched_write_svg(const sched_plan *pl, const char *path, const char *title, char *err, size_t n)
{
    const pp_schedule *s = &pl->sched;
    const pp_timeline *t = &pl->tl;
    enum { LEFT = 70, TOP = 46, ROW = 26, GAP = 6, MIN_WIDTH = 1400, MAX_WIDTH = 60000 };
    /* wide enough that the shortest pass is 14 px, its label readable when zoomed */
    double shortest = INFINITY;
    for (int k = 0; k < t->first[s->p]; k++)
        if (t->end[k] > t->start[k]) shortest = fmin(shortest, t->end[k] - t->start[k]);
    double want = isfinite(shortest) ? 14 * t->makespan / shortest : MIN_WIDTH;
    int WIDTH = want < MIN_WIDTH ? MIN_WIDTH : want > MAX_WIDTH ? MAX_WIDTH : (int)want;
    static const char *const fill[] = {"#4e79a7", "#59a14f", "#f28e2b"}; /* F, B, W */
    FILE *fp = fopen(path, "w");
    if (!fp) return snprintf(err, n, "--svg %s: cannot write: %s", path, strerror(errno)), false;
    int height = TOP + s->p * (ROW + GAP) + 30;
    fprintf(fp, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\">\n"
                "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
                "<text x=\"%d\" y=\"18\" font-size=\"13\">%s</text>\n"
                "<text x=\"%d\" y=\"36\" font-size=\"11\">bubble %.4f of the step; idle/compute %.5f, ideal %s = %.5f; "
                "makespan %.4g s</text>\n", LEFT + WIDTH + 20, height, LEFT, title, LEFT, t->bubble, t->idle_ratio,
            pp_scheds[s->kind].ideal_text, pp_ideal_bubble(s), t->makespan);
    for (int r = 0; r < s->p; r++) {
        int y = TOP + r * (ROW + GAP);
        fprintf(fp, "<text x=\"6\" y=\"%d\" font-size=\"11\">rank %d</text>\n"
                    "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#eeeeee\"/>\n",
                y + ROW / 2 + 4, r, LEFT, y, WIDTH, ROW);
        for (int i = 0; i < s->rank[r].n; i++) {
            const pp_action *a = &s->rank[r].a[i];
            double x0 = LEFT + WIDTH * t->start[t->first[r] + i] / t->makespan;
            double w = WIDTH * (t->end[t->first[r] + i] - t->start[t->first[r] + i]) / t->makespan;
            /* odd chunks lighter: a virtual stage's passes told from its rank's other chunks */
            fprintf(fp, "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\"%s%s><title>%c mb %d "
                        "chunk %d</title></rect>\n", x0, y, w, ROW, fill[a->kind], a->chunk % 2 ? " fill-opacity=\"0.7\"" : "",
                    w >= 4 ? " stroke=\"white\" stroke-width=\"0.5\"" : "", "FBW"[a->kind], a->mb, a->chunk);
            if (w >= 10)
                fprintf(fp, "<text x=\"%.2f\" y=\"%d\" font-size=\"%d\" fill=\"white\" text-anchor=\"middle\">%d</text>\n",
                        x0 + w / 2, y + ROW / 2 + 3, w >= 16 ? 9 : 7, a->mb);
        }
    }
    int y = TOP + s->p * (ROW + GAP) + 12;
    const char *names[] = {"F forward", pp_scheds[s->kind].splits_w ? "B input gradient" : "B backward",
                           "W weight gradient"};
    for (int k = 0; k <= pp_sched_last_pass(s->kind); k++)
        fprintf(fp, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%d\" y=\"%d\" "
                    "font-size=\"11\">%s</text>\n", LEFT + 150 * k, y, fill[k], LEFT + 150 * k + 16, y + 10, names[k]);
    fprintf(fp, "</svg>\n");
    if (fclose(fp) != 0) return snprintf(err, n, "--svg %s: write failed: %s", path, strerror(errno)), false;
    return true;
}

/* ---- the command ---------------------------------------------------------------------------------- */

static bool sched_parse_opts(char **argv, const int *rest, int nrest, sched_opts *o, char *err, size_t n)
{
    static const char *const own[] = {"--svg", "--target", "--columns", NULL};
    for (int k = 0; k < nrest; k++) {
        const char *flag = argv[rest[k]];
        bool has_value = k + 1 < nrest && rest[k + 1] == rest[k] + 1;
        const char *v = has_value ? argv[rest[k + 1]] : NULL;
        int i = 0;
        while (own[i] && strcmp(own[i], flag) != 0) i++;
        if (!own[i]) {
            const char *near = mcc_spec_flag_near(flag, own);
            return snprintf(err, n, "unknown flag '%s'%s%s (`mcc schedule --help` lists the flags)", flag,
                            near ? ": did you mean " : "", near ? near : ""), false;
        }
        if (!v && i < 2) return snprintf(err, n, "%s needs a value", flag), false;
        k++;
        if (i == 0) o->svg = v;
        else if (i == 1) o->target = v;
        else if (!cli_parse_int(flag, v, 1, 100000, &o->columns, err, n)) return false;
    }
    if (!o->target) o->target = "h200";
    return true;
}

/* Builds every schedule the spec's virtual stages allow to compare them, and picks the one asked
 * for (auto: the shortest makespan; ZB-H1 holds 1F1B's peak, interleaved's own v is the user's). */
static bool sched_compare(const sched_model *sm, int v, mcc_pp_sched asked, sched_plan *chosen, FILE *out, char *err,
                          size_t n)
{
    fprintf(out, "schedules compared:\n  %-12s %3s %10s %14s %10s %10s %12s\n", "schedule", "v", "bubble",
            "idle/compute", "ideal", "makespan", "peak slots");
    int best = -1, want = asked == MCC_PP_SCHED_AUTO ? -1 : (int)mcc_pp_sched_kind(asked); /* -1: the fastest */
    sched_plan plans[PP_NUM_SCHEDS];
    bool built[PP_NUM_SCHEDS] = {false};
    for (int k = 0; k < PP_NUM_SCHEDS; k++) {
        int kv = pp_scheds[k].virtual_stages ? (v > 1 ? v : 2) : 1;
        char why[512];
        if (!(built[k] = sched_plan_make(sm, (pp_sched_kind)k, kv, &plans[k], why, sizeof why))) {
            fprintf(out, "  %-12s %3d  not possible: %s\n", pp_sched_names[k], kv, why);
            sched_plan_free(&plans[k]);
            if (want == k) snprintf(err, n, "%s", why);
            continue;
        }
        const sched_plan *pl = &plans[k];
        fprintf(out, "  %-12s %3d %10.4f %14.5f %10.5f %9.4gs %12d\n", pp_sched_names[k], kv, pl->tl.bubble,
                pl->tl.idle_ratio, pp_ideal_bubble(&pl->sched), pl->tl.makespan, sched_peak_slots(pl));
        bool fits_v = pp_scheds[k].virtual_stages == (v > 1);
        if (want < 0 && fits_v && (best < 0 || pl->tl.makespan < plans[best].tl.makespan)) best = k;
    }
    if (want >= 0) best = want;
    for (int k = 0; k < PP_NUM_SCHEDS; k++)
        if (k != best && built[k]) sched_plan_free(&plans[k]);
    if (best < 0 || !built[best]) return snprintf(err, n, "no pipeline schedule can be built for this layout"), false;
    *chosen = plans[best];
    return true;
}

static const char sched_usage[] =
    "usage: mcc schedule SPEC.json [--<field> VALUE ...] [--svg OUT.svg] [--target T] [--columns N]\n"
    "  The pipeline's stage split and each rank's passes, timed by the target's cost model: a text row per rank,\n"
    "  the bubble beside the ideal, 1f1b, interleaved and zb-h1 compared, and the chosen schedule's plan memory per\n"
    "  rank (the plan mcc compile makes for the target).\n"
    "  --svg OUT.svg   draw the chosen schedule: ranks as rows, F/B/W boxes labelled by micro-batch\n"
    "  --target T      the costs of T (passes/target.c: h200|h100|h100-pcie|cpu|cuda; default h200)\n"
    "  --columns N     fit each text row in N columns (default: one column per unit, every label fits)\n";

int mcc_schedule_main(int argc, char **argv)
{
    char err[1024];
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(sched_usage, stdout);
            mcc_spec_print_help(stdout);
            return 0;
        }
    if (argc < 1 || strncmp(argv[0], "--", 2) == 0)
        return sched_fail("expected the spec file: mcc schedule SPEC.json [--<field> VALUE ...] [--svg OUT.svg] "
                          "(`mcc schedule --help`)");
    mcc_spec s;
    int *rest = malloc(sizeof(int) * (size_t)argc), nrest = 0;
    sched_opts o = {0};
    bool ok = rest && mcc_spec_load(argv[0], argc - 1, argv + 1, &s, rest, &nrest, err, sizeof err) &&
              sched_parse_opts(argv + 1, rest, nrest, &o, err, sizeof err);
    free(rest);
    if (!ok) return sched_fail(err);
    const mcc_target *t = mcc_target_by_name(o.target);
    if (!t) {
        snprintf(err, sizeof err, "--target %s: choose %s", o.target, mcc_target_names());
        return sched_fail(err);
    }
    sched_model sm;
    sched_model_init(&sm, &s, t);
    int v = s.virtual_pipeline_model_parallel_size;
    printf("mcc schedule %s: pp %d x tp %d x dp %d, %d micro-batches of %d per step, %d virtual stage%s per rank, "
           "target %s\n", argv[0], sm.p, s.tensor_model_parallel_size, s.data_parallel_size, sm.m, s.micro_batch_size,
           v, v > 1 ? "s" : "", t->name);
    printf("cost of one micro-batch: a layer's forward %.3g ms, the head's %.3g ms, backward 2x forward (ZB: B = W = "
           "forward)%s, p2p %.3g ms\n", sm.layer_fwd_s * 1e3, sm.head_fwd_s * 1e3,
           s.recompute_granularity == MCC_RECOMPUTE_FULL ? ", B with the forward of the layers full recompute replays" : "",
           sm.p2p_s * 1e3);
    if (s.num_experts > 0) {
        printf("  an MoE layer's forward %.3g ms: %.0f FLOP (a dense layer's %.0f; active parameters, the top-%d of %d "
               "experts)", sm.moe_fwd_s * 1e3, sm.moe_flops, sm.layer_flops, s.moe_router_topk, s.num_experts);
        if (s.expert_model_parallel_size > 1)
            printf(", its dispatch + combine all-to-all %.0f bytes a rank sends at ep %d ((ep-1)/ep over the link)",
                   sm.a2a_bytes, s.expert_model_parallel_size);
        printf("\n");
    }
    sched_plan pl;
    if (!sched_compare(&sm, v, s.pipeline_schedule, &pl, stdout, err, sizeof err)) return sched_fail(err);
    printf("schedule %s%s:\n", pp_sched_names[pl.sched.kind],
           s.pipeline_schedule == MCC_PP_SCHED_AUTO ? " (auto: the shortest makespan for the virtual stages given)" : "");
    sched_print_split(&pl, stdout);
    sched_print_rows(&pl, o.columns, stdout);
    sched_print_summary(&pl, stdout);
    if (o.svg) {
        char title[256];
        snprintf(title, sizeof title, "%s: %s, pp %d x tp %d x dp %d, %d micro-batches, v %d", argv[0],
                 pp_sched_names[pl.sched.kind], sm.p, s.tensor_model_parallel_size, s.data_parallel_size, sm.m, v);
        ok = sched_write_svg(&pl, o.svg, title, err, sizeof err);
        if (ok) printf("wrote %s\n", o.svg);
    }
    fflush(stdout);
    ok = ok && sched_print_memory(&s, t, &pl, stdout, err, sizeof err); /* the passes: after the quick parts */
    sched_plan_free(&pl);
    return ok ? 0 : sched_fail(err);
}
