/* pp_schedule.c — pipeline schedules as each rank's list of F/B/W passes (1F1B and interleaved
 * 1F1B as Megatron-LM orders them, ZB-H1 as Qi et al.'s "Zero Bubble Pipeline Parallelism"), the
 * stage split (Megatron's get_num_layers_to_build), and an event simulation of the lists, which
 * times them and proves them deadlock-free. Hand-written: no C library builds these. */
#include "passes/pp_schedule.h"

#include "ir/ir.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const *const pp_sched_names = &ir_pp_sched_words[IR_PP_1F1B];
_Static_assert(IR_PP_1F1B + PP_SCHED_ZB_H1 == IR_PP_ZB_H1 && IR_PP_1F1B + PP_SCHED_INTERLEAVED == IR_PP_INTERLEAVED,
               "pp_sched_kind follows ir_pp_sched after auto");
const uint8_t pp_span_take[PP_NUM_SPANS] = {PP_ACT_F, PP_ACT_F, PP_ACT_B}; /* ORDER pp_span */
const uint8_t pp_span_free[PP_NUM_SPANS] = {PP_ACT_B, PP_ACT_W, PP_ACT_W};

/* Whether pass kind touches span under this schedule: the spans reaching W exist where W does. */
static bool pp_span_used(int span, int kind, bool splits_w)
{
    return (span == PP_SPAN_FB || splits_w) && kind >= pp_span_take[span] && kind <= pp_span_free[span];
}

/* More passes than this per rank are refused (the programs are built and simulated whole). */
enum { PP_MAX_ACTIONS = 1 << 24 };

static bool pp_fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return false;
}

/* ---- building the programs ---------------------------------------------------------------- */

static void pp_push(pp_rank_program *r, pp_act_kind kind, int mb, int chunk)
{
    r->a[r->n++] = (pp_action){.kind = (uint8_t)kind, .mb = mb, .chunk = chunk, .slot = {-1, -1, -1}};
}

/* Megatron's non-interleaved 1F1B: min(p-r-1, m) warm-up forwards, then one forward and one
 * backward at a time, then the backwards left (the cool-down). */
static void pp_build_1f1b(pp_rank_program *rp, int p, int m, int v, int r)
{
    int warm = p - r - 1 < m ? p - r - 1 : m;
    for (int i = 0; i < warm; i++) pp_push(rp, PP_ACT_F, i, 0);
    for (int i = 0; i < m - warm; i++) {
        pp_push(rp, PP_ACT_F, warm + i, 0);
        pp_push(rp, PP_ACT_B, i, 0);
    }
    for (int i = m - warm; i < m; i++) pp_push(rp, PP_ACT_B, i, 0);
}

/* Megatron's forward_backward_pipelining_with_interleaving: the k-th forward of a rank runs chunk
 * (k mod pv) / p on micro-batch (k / pv) p + k mod p (groups of p micro-batches go through each
 * chunk in turn); the k-th backward the same micro-batch through the chunks in reverse. Warm-up:
 * 2 (p-r-1) + (v-1) p forwards (all of them when m = p). */
static void pp_build_interleaved(pp_rank_program *rp, int p, int m, int v, int r)
{
    int total = m * v, pv = p * v;
    int warm = m == p ? total : 2 * (p - r - 1) + (v - 1) * p;
    if (warm > total) warm = total;
#define PP_MB(k) ((k) / pv * p + (k) % p)
#define PP_CHUNK_F(k) ((k) % pv / p)
    for (int k = 0; k < warm; k++) pp_push(rp, PP_ACT_F, PP_MB(k), PP_CHUNK_F(k));
    for (int k = 0; k < total - warm; k++) {
        pp_push(rp, PP_ACT_F, PP_MB(k + warm), PP_CHUNK_F(k + warm));
        pp_push(rp, PP_ACT_B, PP_MB(k), v - 1 - PP_CHUNK_F(k));
    }
    for (int k = total - warm; k < total; k++) pp_push(rp, PP_ACT_B, PP_MB(k), v - 1 - PP_CHUNK_F(k));
#undef PP_MB
#undef PP_CHUNK_F
}

/* ZB-H1 (Qi et al., figure 3): 1F1B's warm-up, then r pairs F B whose W passes wait, then F B W
 * steps, then B W, then the r waiting W passes in the cool-down bubble. In flight at once (F done,
 * W not): at most p on every rank, 1F1B's peak on its first rank. */
static void pp_build_zb_h1(pp_rank_program *rp, int p, int m, int v, int r)
{
    int nf = 0, nb = 0, nw = 0;
    int warm = p - r - 1 < m ? p - r - 1 : m;
    while (nf < warm) pp_push(rp, PP_ACT_F, nf++, 0);
    for (int i = 0; i < r && nf < m; i++) {
        pp_push(rp, PP_ACT_F, nf++, 0);
        pp_push(rp, PP_ACT_B, nb++, 0);
    }
    while (nf < m) {
        pp_push(rp, PP_ACT_F, nf++, 0);
        pp_push(rp, PP_ACT_B, nb++, 0);
        pp_push(rp, PP_ACT_W, nw++, 0);
    }
    while (nb < m) {
        pp_push(rp, PP_ACT_B, nb++, 0);
        pp_push(rp, PP_ACT_W, nw++, 0);
    }
    while (nw < m) pp_push(rp, PP_ACT_W, nw++, 0);
}

/* Stash slots in program order, per span: its taking pass takes the lowest free slot of the
 * chunk, its freeing pass frees it. */
static bool pp_assign_slots(pp_rank_program *rp, int m, int v, bool splits_w)
{
    int *slot_of = malloc(sizeof(int) * (size_t)m * v);
    char *busy = calloc((size_t)v * (m + 1), 1);
    if (!slot_of || !busy) return free(slot_of), free(busy), false;
    for (int span = 0; span < PP_NUM_SPANS; span++) {
        memset(busy, 0, (size_t)v * (m + 1));
        for (int i = 0; i < rp->n; i++) {
            pp_action *a = &rp->a[i];
            char *b = busy + (size_t)a->chunk * (m + 1);
            if (!pp_span_used(span, a->kind, splits_w)) continue;
            if (a->kind == pp_span_take[span]) {
                int s = 0;
                while (b[s]) s++;
                b[s] = 1;
                slot_of[(size_t)a->chunk * m + a->mb] = s;
                if (s + 1 > rp->nslots[span][a->chunk]) rp->nslots[span][a->chunk] = s + 1;
            }
            a->slot[span] = slot_of[(size_t)a->chunk * m + a->mb];
            if (a->kind == pp_span_free[span]) b[a->slot[span]] = 0;
        }
    }
    free(slot_of);
    free(busy);
    return true;
}

/* ---- the table -------------------------------------------------------------------------------- */

/* The ideal bubbles, idle over compute at equal pass times: 1F1B's p-1 warm-up waits over its m
 * micro-batches; interleaved's v times shorter chunks; ZB-H1's W passes filling 2/3 of 1F1B's. */
static double pp_ideal_1f1b(int p, int m, int v) { return (p - 1.0) / m; }
static double pp_ideal_interleaved(int p, int m, int v) { return (p - 1.0) / ((double)v * m); }
static double pp_ideal_zb_h1(int p, int m, int v) { return (p - 1.0) / (3.0 * m); }

const pp_sched_desc pp_scheds[PP_NUM_SCHEDS] = {
    /*                       build                 splits_w virtual_stages mb_multiple_of_p ideal_text    ideal_bubble */
    [PP_SCHED_1F1B]        = {pp_build_1f1b,        false,   false,         false,          "(p-1)/m",     pp_ideal_1f1b},
    [PP_SCHED_INTERLEAVED] = {pp_build_interleaved, false,   true,          true,           "(p-1)/(v m)", pp_ideal_interleaved},
    [PP_SCHED_ZB_H1]       = {pp_build_zb_h1,       true,    false,         false,          "(p-1)/(3m)",  pp_ideal_zb_h1},
};

pp_sched_kind pp_sched_find(int v, bool splits_w)
{
    int k = 0;
    while (k < PP_NUM_SCHEDS && (pp_scheds[k].virtual_stages != (v > 1) || pp_scheds[k].splits_w != splits_w))
        k++;
    return (pp_sched_kind)k;
}

/* The passes each rank runs: every micro-batch's F .. last pass on each of its v chunks. */
static long long pp_passes_per_rank(pp_sched_kind kind, int m, int v)
{
    return (long long)m * v * (pp_sched_last_pass(kind) + 1);
}

bool pp_schedule_check(pp_sched_kind kind, int p, int m, int v, char *err, size_t errlen)
{
    if ((unsigned)kind >= PP_NUM_SCHEDS) return pp_fail(err, errlen, "pipeline schedule %d: no such schedule", kind);
    const char *name = pp_sched_names[kind];
    const pp_sched_desc *d = &pp_scheds[kind];
    if (p < 1 || m < 1 || v < 1)
        return pp_fail(err, errlen, "pipeline schedule %s: pipeline ranks (%d), micro-batches (%d) and virtual stages "
                                    "per rank (%d) must all be at least 1", name, p, m, v);
    if (d->virtual_stages && v < 2)
        return pp_fail(err, errlen, "--pipeline-schedule %s needs at least 2 virtual stages per pipeline rank "
                                    "(got %d): pass --num-virtual-stages-per-pipeline-rank 2 or "
                                    "--num-layers-per-virtual-pipeline-stage, or choose 1f1b or zb-h1", name, v);
    if (d->mb_multiple_of_p && m % p)
        return pp_fail(err, errlen, "--pipeline-schedule %s: the number of micro-batches (%d) must be divisible "
                                    "by --pipeline-model-parallel-size (%d), as in Megatron-LM: change "
                                    "--global-batch-size or --micro-batch-size", name, m, p);
    if (!d->virtual_stages && v != 1)
        return pp_fail(err, errlen, "--pipeline-schedule %s runs one stage per pipeline rank, but %d virtual stages per "
                                    "rank are given: choose interleaved, or drop the virtual stages", name, v);
    if (v > PP_MAX_V)
        return pp_fail(err, errlen, "%d virtual stages per pipeline rank: at most %d", v, PP_MAX_V);
    long long n = pp_passes_per_rank(kind, m, v);
    if (n > PP_MAX_ACTIONS)
        return pp_fail(err, errlen, "pipeline schedule %s: %d micro-batches x %d virtual stages is %lld passes per rank, "
                                    "more than %d", name, m, v, n, PP_MAX_ACTIONS);
    return true;
}

bool pp_schedule_build(pp_sched_kind kind, int p, int m, int v, pp_schedule *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!pp_schedule_check(kind, p, m, v, err, errlen)) return false;
    long long n = pp_passes_per_rank(kind, m, v);
    *out = (pp_schedule){.p = p, .m = m, .v = v, .kind = kind, .rank = calloc((size_t)p, sizeof(pp_rank_program))};
    if (!out->rank) return pp_fail(err, errlen, "out of memory building the pipeline schedule");
    for (int r = 0; r < p; r++) {
        pp_rank_program *rp = &out->rank[r];
        if (!(rp->a = malloc(sizeof(pp_action) * (size_t)n))) {
            pp_schedule_free(out);
            return pp_fail(err, errlen, "out of memory building the pipeline schedule");
        }
        pp_scheds[kind].build(rp, p, m, v, r);
        if (!pp_assign_slots(rp, m, v, pp_scheds[kind].splits_w)) {
            pp_schedule_free(out);
            return pp_fail(err, errlen, "out of memory building the pipeline schedule");
        }
    }
    return true;
}

void pp_schedule_free(pp_schedule *s)
{
    if (s->rank)
        for (int r = 0; r < s->p; r++) free(s->rank[r].a);
    free(s->rank);
    s->rank = NULL;
}

double pp_ideal_bubble(const pp_schedule *s) { return pp_scheds[s->kind].ideal_bubble(s->p, s->m, s->v); }

/* ---- the stage split ------------------------------------------------------------------------ */

/* ---- Megatron's --pipeline-model-parallel-layout ---------------------------------------------- */

enum { PP_LAYOUT_MAX = 1 << 20 }; /* letters after the repeats are unrolled */

#define LAYOUT_FLAG "--pipeline-model-parallel-layout"
#define LAYOUT_GRAMMAR "E (embedding), t (a decoder layer), m (a multi-token prediction depth), L (the loss), '|' " \
                       "between stages, x*N and (...)*N repeat, ',' is ignored: e.g. \"Et|(tt|)*30mL\""

/* Where c stands in the layout text, counted from 1 as a reader counts characters. */
static int layout_char(const char *text, const char *c) { return (int)(c - text) + 1; }

/* A repeat count after '*' at *at: its digits, *at moved past them. */
static bool layout_count(const char *text, const char **at, long *n, char *err, size_t errlen)
{
    const char *d = *at;
    if (*d < '0' || *d > '9')
        return pp_fail(err, errlen, LAYOUT_FLAG " \"%.64s\": the '*' at character %d needs a count, e.g. t*3 or "
                       "(tt|)*30", text, layout_char(text, d - 1));
    *n = 0;
    for (; *d >= '0' && *d <= '9'; d++)
        if ((*n = *n * 10 + (*d - '0')) > PP_LAYOUT_MAX)
            return pp_fail(err, errlen, LAYOUT_FLAG " \"%.64s\": the count at character %d is above %d", text,
                           layout_char(text, *at), PP_LAYOUT_MAX);
    *at = d;
    return true;
}

/* Appends `len` letters of `from`, `times` over, to out[*n]. */
static bool layout_append(const char *text, char *out, long *n, const char *from, long len, long times, char *err,
                          size_t errlen)
{
    if (*n + len * times > PP_LAYOUT_MAX)
        return pp_fail(err, errlen, LAYOUT_FLAG " \"%.64s\": more than %d letters once the repeats are unrolled", text,
                       PP_LAYOUT_MAX);
    for (long r = 0; r < times; r++, *n += len) memcpy(out + *n, from, (size_t)len);
    return true;
}

/* The layout with its repeats unrolled and commas dropped (Megatron's parse_str_to_list): only
 * E, t, m, L and '|' left. The caller frees it. */
static char *layout_expand(const char *text, char *err, size_t errlen)
{
    char *out = malloc(PP_LAYOUT_MAX + 1);
    long n = 0, times;
    bool ok = out != NULL;
    if (!ok) pp_fail(err, errlen, "out of memory reading " LAYOUT_FLAG);
    for (const char *c = text; ok && *c;) {
        const char *item = c, *end;
        long len;
        char group[4096]; /* a group's letters, its commas dropped */
        if (*c == ',') {
            c++;
            continue;
        }
        if (*c == '(') {
            end = strchr(c, ')');
            const char *inner = strchr(c + 1, '(');
            if (!end)
                ok = pp_fail(err, errlen, LAYOUT_FLAG " \"%.64s\": the '(' at character %d is not closed", text,
                             layout_char(text, c));
            else if (inner && inner < end)
                ok = pp_fail(err, errlen, LAYOUT_FLAG " \"%.64s\": groups do not nest (the '(' at character %d): "
                             "write the inner one out", text, layout_char(text, inner));
            else if (end[1] != '*')
                ok = pp_fail(err, errlen, LAYOUT_FLAG " \"%.64s\": the group at character %d needs a count, e.g. "
                             "(tt|)*30", text, layout_char(text, c));
            len = 0;
            for (const char *g = c + 1; ok && g < end; g++)
                if (*g != ',' && len < (long)sizeof group) group[len++] = *g;
            if (ok && len == (long)sizeof group)
                ok = pp_fail(err, errlen, LAYOUT_FLAG " \"%.64s\": the group at character %d is longer than %zu "
                             "letters", text, layout_char(text, c), sizeof group - 1);
            c = ok ? end + 2 : c;
            ok = ok && layout_count(text, &c, &times, err, errlen) &&
                 layout_append(text, out, &n, group, len, times, err, errlen);
            /* the group's own letters are checked below, unrolled */
            continue;
        }
        if (!strchr("EtmL|", *c))
            ok = pp_fail(err, errlen, LAYOUT_FLAG " \"%.64s\": '%c' at character %d is not one of " LAYOUT_GRAMMAR,
                         text, *c, layout_char(text, c));
        times = 1;
        c++;
        if (ok && *c == '*') c++, ok = layout_count(text, &c, &times, err, errlen);
        ok = ok && layout_append(text, out, &n, item, 1, times, err, errlen);
    }
    for (long k = 0; ok && k < n; k++)
        if (!strchr("EtmL|", out[k]))
            ok = pp_fail(err, errlen, LAYOUT_FLAG " \"%.64s\": '%c' inside a group is not one of " LAYOUT_GRAMMAR,
                         text, out[k]);
    if (!ok) {
        free(out);
        return NULL;
    }
    out[n] = 0;
    return out;
}

/* The stages of an unrolled layout: one more than its '|'s. */
static int layout_stages_of(const char *unrolled)
{
    int stages = 1;
    for (const char *c = unrolled; *c; c++) stages += *c == '|';
    return stages;
}

int pp_layout_stages(const char *layout, char *err, size_t errlen)
{
    char *x = layout_expand(layout, err, errlen);
    int stages = x ? layout_stages_of(x) : -1;
    free(x);
    return stages;
}

static bool has_layout(const pp_split_flags *f) { return f->layout && *f->layout; }

/* The layout's stages must be whole virtual stages of every rank: false, saying so, where they are not. */
static bool layout_over_ranks(const char *text, int stages, int p, char *err, size_t errlen)
{
    if (p >= 1 && stages % p == 0)
        return true;
    return pp_fail(err, errlen, LAYOUT_FLAG " \"%.64s\" has %d stages: give a multiple of "
                   "--pipeline-model-parallel-size (%d), one a virtual stage of each rank, stage i on rank i mod %d",
                   text, stages, p, p);
}

/* The layout's letters tallied per stage: the decoder layers into per[], each letter's rules checked
 * against the model (Megatron's validate_layer_layout), with what mcc builds: the embedding opens
 * virtual stage 0, the loss closes the last, the depths sit on the last stage after its decoder
 * layers (Megatron's mtp_in_last_stage; it also lets them close another rank's last chunk). */
static bool layout_split(const pp_split_flags *f, int *per, char *err, size_t errlen)
{
    const char *text = f->layout;
    if (f->first >= 0 || f->last >= 0 || f->account_embedding || f->account_loss)
        return pp_fail(err, errlen, LAYOUT_FLAG " gives every stage's layers: drop %s (Megatron-LM refuses the two "
                       "together)", f->first >= 0 ? "--decoder-first-pipeline-num-layers"
                                    : f->last >= 0 ? "--decoder-last-pipeline-num-layers"
                                    : f->account_embedding ? "--account-for-embedding-in-pipeline-split"
                                                           : "--account-for-loss-in-pipeline-split");
    char *x = layout_expand(text, err, errlen);
    if (!x) return false;
    int stages = layout_stages_of(x), g = 0, decoder = 0, depths = 0, embeddings = 0, losses = 0;
    bool ok = layout_over_ranks(text, stages, f->p, err, errlen);
    if (ok && stages != f->p * f->v)
        ok = pp_fail(err, errlen, LAYOUT_FLAG " \"%.64s\" has %d stages, %d virtual stages on each of the %d "
                     "pipeline ranks, not %d", text, stages, stages / f->p, f->p, f->v);
    for (int k = 0; ok && k < stages; k++) per[k] = 0;
    for (const char *c = x; ok && *c; c++) {
        int rank = g % f->p, chunk = g / f->p;
        bool opens = c == x, closes = c[1] == 0;
        switch (*c) {
        case '|': g++; continue;
        case 'E':
        case 'L': { /* each once, the embedding opening the layout, the loss closing it */
            bool embedding = *c == 'E';
            int seen = embedding ? ++embeddings : ++losses;
            if (seen > 1 || !(embedding ? opens : closes))
                ok = pp_fail(err, errlen, LAYOUT_FLAG " \"%.64s\": the %s %c must come once, %s, found %s on stage %d "
                             "(rank %d, chunk %d)", text, embedding ? "embedding" : "loss", *c,
                             embedding ? "first (mcc builds it on virtual stage 0)" : "last (it closes the last stage)",
                             seen > 1 ? "another" : "one", g, rank, chunk);
            break;
        }
        case 't':
            if (depths)
                ok = pp_fail(err, errlen, LAYOUT_FLAG " \"%.64s\": a decoder layer t on stage %d after a multi-token "
                             "depth m: the depths follow every decoder layer", text, g);
            per[g]++, decoder++;
            break;
        case 'm':
            if (g != stages - 1)
                ok = pp_fail(err, errlen, LAYOUT_FLAG " \"%.64s\": a multi-token depth m on stage %d (rank %d, chunk "
                             "%d): mcc builds the depths on the last virtual stage (%d), before the loss: move every "
                             "m there, e.g. ...|mL", text, g, rank, chunk, stages - 1);
            depths++;
            break;
        }
    }
    free(x);
    if (ok && !embeddings)
        ok = pp_fail(err, errlen, LAYOUT_FLAG " \"%.64s\" has no embedding: begin it with E", text);
    if (ok && !losses)
        ok = pp_fail(err, errlen, LAYOUT_FLAG " \"%.64s\" has no loss: end it with L", text);
    if (ok && decoder != f->num_layers)
        ok = pp_fail(err, errlen, LAYOUT_FLAG " \"%.64s\" has %d decoder layers t: num_layers is %d", text, decoder,
                     f->num_layers);
    if (ok && depths != f->mtp_layers)
        ok = pp_fail(err, errlen, LAYOUT_FLAG " \"%.64s\" has %d multi-token depths m: mtp_num_layers is %d", text,
                     depths, f->mtp_layers);
    return ok;
}

bool pp_virtual_stages(const pp_split_flags *f, int layers_per_virtual_stage, int stages_per_rank, int *v, char *err,
                       size_t errlen)
{
    int p = f->p;
    *v = 1;
    if (has_layout(f) && (layers_per_virtual_stage > 0 || stages_per_rank > 0))
        return pp_fail(err, errlen, LAYOUT_FLAG " gives the virtual stages (its stages over the pipeline ranks): drop "
                       "%s (Megatron-LM refuses the two together)", stages_per_rank > 0
                       ? "--num-virtual-stages-per-pipeline-rank" : "--num-layers-per-virtual-pipeline-stage");
    if (has_layout(f)) {
        int stages = pp_layout_stages(f->layout, err, errlen);
        if (stages < 0 || !layout_over_ranks(f->layout, stages, p, err, errlen)) return false;
        *v = stages / p;
    }
    if (layers_per_virtual_stage > 0 && stages_per_rank > 0)
        return pp_fail(err, errlen, "--num-layers-per-virtual-pipeline-stage (%d) and "
                                    "--num-virtual-stages-per-pipeline-rank (%d) are two ways of giving the same "
                                    "thing: give one", layers_per_virtual_stage, stages_per_rank);
    if (stages_per_rank > 0) *v = stages_per_rank;
    if (layers_per_virtual_stage > 0) {
        int n = f->num_layers + f->account_embedding + f->account_loss;
        if (n % p)
            return pp_fail(err, errlen, "--num-layers-per-virtual-pipeline-stage: num_layers%s%s = %d must be divisible "
                                        "by --pipeline-model-parallel-size (%d)", f->account_embedding ? " + 1 (embedding)" : "",
                           f->account_loss ? " + 1 (loss)" : "", n, p);
        if (n / p % layers_per_virtual_stage)
            return pp_fail(err, errlen, "--num-layers-per-virtual-pipeline-stage %d must divide the %d layers of each "
                                        "pipeline rank (%d layers over %d ranks)", layers_per_virtual_stage, n / p, n, p);
        *v = n / p / layers_per_virtual_stage;
    }
    if (*v > 1 && p < 2)
        return pp_fail(err, errlen, "virtual pipeline stages (%d per rank) need --pipeline-model-parallel-size above 1 "
                                    "(got %d)", *v, p);
    if (*v > PP_MAX_V)
        return pp_fail(err, errlen, "%d virtual stages per pipeline rank: at most %d", *v, PP_MAX_V);
    return true;
}

/* Rank r's `layers` over its v chunks, evenly (g = chunk * p + r). */
static bool pp_split_rank(int layers, int p, int v, int r, const char *which, int *out, char *err, size_t errlen)
{
    if (layers % v)
        return pp_fail(err, errlen, "the %d layers of the %s pipeline rank must be divisible by the %d virtual stages "
                                    "per rank", layers, which, v);
    for (int c = 0; c < v; c++) out[c * p + r] = layers / v;
    return true;
}

/* The split from first/last, or even (see pp_split_layers). */
static bool counted_split(const pp_split_flags *f, int *layers_per_virtual_stage, char *err, size_t errlen)
{
    int num_layers = f->num_layers, p = f->p, v = f->v, first = f->first, last = f->last;
    bool account_embedding = f->account_embedding, account_loss = f->account_loss;
    if (first < 0 && last < 0) {
        int n = num_layers + account_embedding + account_loss;
        const char *plus = account_embedding && account_loss ? " + 2 (embedding, loss)"
                           : account_embedding              ? " + 1 (embedding)"
                           : account_loss                   ? " + 1 (loss)"
                                                            : "";
        if (n % p)
            return pp_fail(err, errlen, "num_layers%s = %d must be divisible by --pipeline-model-parallel-size (%d): "
                                        "change it, or give --decoder-first-pipeline-num-layers / "
                                        "--decoder-last-pipeline-num-layers or --pipeline-model-parallel-layout",
                           plus, n, p);
        if (n / p % v)
            return pp_fail(err, errlen, "the %d layers of each pipeline rank (num_layers%s = %d over %d) must be "
                                        "divisible by the %d virtual stages per rank (--num-virtual-stages-per-pipeline-rank, or "
                                        "--num-layers-per-virtual-pipeline-stage)", n / p, plus, n, p, v);
        for (int g = 0; g < p * v; g++) layers_per_virtual_stage[g] = n / (p * v);
        layers_per_virtual_stage[0] -= account_embedding;
        layers_per_virtual_stage[p * v - 1] -= account_loss;
        if (layers_per_virtual_stage[0] < 0 || layers_per_virtual_stage[p * v - 1] < 0)
            return pp_fail(err, errlen, "%d layers over %d virtual stages leave none for the %s counted as a layer of "
                                        "the %s virtual stage: drop --account-for-%s-in-pipeline-split",
                           num_layers, p * v, layers_per_virtual_stage[0] < 0 ? "embedding" : "loss",
                           layers_per_virtual_stage[0] < 0 ? "first" : "last",
                           layers_per_virtual_stage[0] < 0 ? "embedding" : "loss");
        return true;
    }
    if (account_embedding || account_loss)
        return pp_fail(err, errlen, "--decoder-first/last-pipeline-num-layers give the stages' layers themselves: "
                                    "drop --account-for-%s-in-pipeline-split (Megatron-LM refuses the two together)",
                       account_embedding ? "embedding" : "loss");
    if (p < 2)
        return pp_fail(err, errlen, "--decoder-%s-pipeline-num-layers needs --pipeline-model-parallel-size above 1 (got %d)",
                       first >= 0 ? "first" : "last", p);
    if (first == 0 || last == 0)
        return pp_fail(err, errlen, "--decoder-%s-pipeline-num-layers must be at least 1 (leave it out for the even "
                                    "split)", first == 0 ? "first" : "last");
    int rest = num_layers - (first > 0 ? first : 0) - (last > 0 ? last : 0);
    int middle = p - (first > 0) - (last > 0);
    if (rest < 0 || (middle == 0 && rest != 0) || (middle > 0 && rest % middle))
        return pp_fail(err, errlen, "--decoder-first-pipeline-num-layers (%d) and --decoder-last-pipeline-num-layers "
                                    "(%d) leave %d of the %d layers for the %d other pipeline ranks: they must divide "
                                    "evenly", first > 0 ? first : 0, last > 0 ? last : 0, rest, num_layers, middle);
    for (int r = 0; r < p; r++) {
        bool is_first = r == 0 && first > 0, is_last = r == p - 1 && last > 0;
        int layers = is_first ? first : is_last ? last : rest / middle;
        if (!pp_split_rank(layers, p, v, r, is_first ? "first" : is_last ? "last" : "middle",
                           layers_per_virtual_stage, err, errlen))
            return false;
    }
    return true;
}

bool pp_split_layers(const pp_split_flags *f, int *layers_per_virtual_stage, char *err, size_t errlen)
{
    int p = f->p, v = f->v;
    if (f->num_layers < 1 || p < 1 || v < 1)
        return pp_fail(err, errlen, "stage split: num_layers (%d), --pipeline-model-parallel-size (%d) and the "
                                    "virtual stages per rank (%d) must be at least 1", f->num_layers, p, v);
    if (!(has_layout(f) ? layout_split(f, layers_per_virtual_stage, err, errlen)
                        : counted_split(f, layers_per_virtual_stage, err, errlen)))
        return false;
    /* a stage is built from its layers' instructions (passes/pipeline.c): the last may hold only the depths */
    for (int g = 0; g < p * v; g++)
        if (layers_per_virtual_stage[g] < 1 && !(g == p * v - 1 && f->mtp_layers > 0))
            return has_layout(f)
                       ? pp_fail(err, errlen, LAYOUT_FLAG " \"%.64s\": stage %d (rank %d, chunk %d) holds no decoder "
                                 "layer: mcc builds a stage from its layers (only the last may hold only the "
                                 "multi-token depths m and the loss): give it a t", f->layout, g, g % p, g / p)
                       : pp_fail(err, errlen, "virtual pipeline stage %d of %d gets no layer (%d layers over %d ranks "
                                 "x %d virtual stages): use fewer stages, or move layers with "
                                 "--decoder-first/last-pipeline-num-layers or --pipeline-model-parallel-layout", g,
                                 p * v, f->num_layers, p, v);
    return true;
}

static double max3(double a, double b, double c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

bool pp_balanced_split(int num_layers, int p, double layer, double first_extra, double last_extra, int *first,
                       int *last)
{
    *first = *last = -1;
    if (p < 2 || num_layers % p)
        return false;
    int even = num_layers / p, mid = p - 2, moved = 0; /* moved: layers off the even split, the tie-break */
    double best = max3(even * layer + first_extra, even * layer + last_extra, 0), even_cost = best;
    for (int f = 1; f < num_layers; f++)
        for (int l = 1; f + l <= num_layers; l++) {
            int rest = num_layers - f - l;
            if (mid == 0 ? rest != 0 : rest < mid || rest % mid)
                continue;
            double cost = max3(f * layer + first_extra, l * layer + last_extra, mid ? (double)(rest / mid) * layer : 0);
            int off = abs(f - even) + abs(l - even) + (mid ? mid * abs(rest / mid - even) : 0);
            bool better = cost < best * (1 - 1e-9), tie = cost <= best * (1 + 1e-9) && off < moved;
            if (cost < even_cost * (1 - 1e-9) && (better || (tie && *first > 0))) {
                best = cost;
                moved = off;
                *first = f, *last = l;
            }
        }
    return *first > 0;
}

/* ---- the simulation ------------------------------------------------------------------------- */

typedef struct {
    const pp_schedule *s;
    double *fend, *bend, *wend; /* [g * m + mb]; NAN until done */
    int *slot_of;               /* [(span * P + g) * m + mb]: the slot the span's taking pass took */
    int *owner;                 /* [(span * P + g) * m + slot]: the micro-batch holding it, -1 free */
} pp_sim;

static const char *pp_act_name(int kind) { return kind == PP_ACT_F ? "F" : kind == PP_ACT_B ? "B" : "W"; }

/* When a's dependencies are done (+ p2p across ranks), or NAN while one is not; *dep names it. */
static double pp_ready(const pp_sim *sim, int r, const pp_action *a, double p2p_s, char *dep, size_t n)
{
    const pp_schedule *s = sim->s;
    int p = s->p, m = s->m, g = pp_virtual_stage(s, r, a->chunk);
    double t = 0;
    if (a->kind == PP_ACT_F && g > 0) {
        t = sim->fend[(size_t)(g - 1) * m + a->mb] + ((g - 1) % p != r ? p2p_s : 0);
        snprintf(dep, n, "F(mb %d, stage %d)", a->mb, g - 1);
    }
    if (a->kind == PP_ACT_B) {
        t = sim->fend[(size_t)g * m + a->mb];
        snprintf(dep, n, "F(mb %d, stage %d)", a->mb, g);
        double next = g + 1 < p * s->v ? sim->bend[(size_t)(g + 1) * m + a->mb] : 0;
        if (!isnan(t) && isnan(next)) snprintf(dep, n, "B(mb %d, stage %d)", a->mb, g + 1);
        if (!isnan(t)) t = isnan(next) ? NAN : fmax(t, next + (g + 1 < p * s->v && (g + 1) % p != r ? p2p_s : 0));
    }
    if (a->kind == PP_ACT_W) {
        t = sim->bend[(size_t)g * m + a->mb];
        snprintf(dep, n, "B(mb %d, stage %d)", a->mb, g);
    }
    return t;
}

/* Records a's run; false (with the reason) for a pass out of range, repeated, or a slot misused. */
static bool pp_record(pp_sim *sim, int r, const pp_action *a, double end, char *err, size_t errlen)
{
    const pp_schedule *s = sim->s;
    int m = s->m, g = pp_virtual_stage(s, r, a->chunk);
    size_t at = (size_t)g * m + a->mb;
    double *ends = a->kind == PP_ACT_F ? sim->fend : a->kind == PP_ACT_B ? sim->bend : sim->wend;
    if (!isnan(ends[at]))
        return pp_fail(err, errlen, "rank %d runs %s(mb %d, stage %d) twice", r, pp_act_name(a->kind), a->mb, g);
    ends[at] = end;
    for (int span = 0; span < PP_NUM_SPANS; span++) {
        int slot = a->slot[span];
        if (!pp_span_used(span, a->kind, pp_scheds[s->kind].splits_w)) {
            if (slot != -1)
                return pp_fail(err, errlen, "rank %d: %s(mb %d, stage %d) names a slot of stash span %d, which it does "
                                            "not use", r, pp_act_name(a->kind), a->mb, g, span);
            continue;
        }
        if (slot < 0 || slot >= m)
            return pp_fail(err, errlen, "rank %d: %s(mb %d, stage %d) has stash slot %d, outside 0..%d", r,
                           pp_act_name(a->kind), a->mb, g, slot, m - 1);
        size_t cell = ((size_t)span * s->p * s->v + g) * m;
        int *owner = &sim->owner[cell + slot];
        if (a->kind == pp_span_take[span]) {
            if (*owner >= 0)
                return pp_fail(err, errlen, "rank %d: %s(mb %d, stage %d) takes stash slot %d, which mb %d still holds",
                               r, pp_act_name(a->kind), a->mb, g, slot, *owner);
            *owner = a->mb;
            sim->slot_of[cell + a->mb] = slot;
            continue;
        }
        if (sim->slot_of[cell + a->mb] != slot)
            return pp_fail(err, errlen, "rank %d: %s(mb %d, stage %d) reads stash slot %d, but its %s saved into slot %d",
                           r, pp_act_name(a->kind), a->mb, g, slot, pp_act_name(pp_span_take[span]),
                           sim->slot_of[cell + a->mb]);
        if (a->kind == pp_span_free[span]) *owner = -1;
    }
    return true;
}

/* Every pass of every (mb, virtual stage) ran: F and B, and W where the backward is split. */
static bool pp_all_ran(const pp_sim *sim, char *err, size_t errlen)
{
    const pp_schedule *s = sim->s;
    for (int g = 0; g < s->p * s->v; g++)
        for (int mb = 0; mb < s->m; mb++) {
            size_t at = (size_t)g * s->m + mb;
            const char *missing = isnan(sim->fend[at])                                 ? "F"
                                  : isnan(sim->bend[at])                               ? "B"
                                  : pp_scheds[s->kind].splits_w && isnan(sim->wend[at]) ? "W"
                                                                                         : NULL;
            if (missing)
                return pp_fail(err, errlen, "no rank runs %s(mb %d, stage %d) (rank %d's program lacks it)", missing, mb,
                               g, g % s->p);
        }
    return true;
}

static bool pp_check_action(const pp_schedule *s, int r, const pp_action *a, char *err, size_t errlen)
{
    if (a->kind > pp_sched_last_pass(s->kind) || a->mb < 0 || a->mb >= s->m || a->chunk < 0 ||
        a->chunk >= s->v)
        return pp_fail(err, errlen, "rank %d: a pass of kind %d on mb %d, chunk %d is outside this %s schedule (m %d, "
                                    "v %d)", r, a->kind, a->mb, a->chunk, pp_sched_names[s->kind], s->m, s->v);
    return true;
}

/* The rank r and action it waits at, for the deadlock message. */
static void pp_deadlock(const pp_sim *sim, const int *pos, double p2p_s, char *err, size_t errlen)
{
    const pp_schedule *s = sim->s;
    size_t used = (size_t)snprintf(err, errlen, "pipeline schedule %s deadlocks (its dependencies form a cycle):",
                                   pp_sched_names[s->kind]);
    for (int r = 0; r < s->p && used < errlen; r++) {
        if (pos[r] >= s->rank[r].n) continue;
        const pp_action *a = &s->rank[r].a[pos[r]];
        char dep[64] = "";
        pp_ready(sim, r, a, p2p_s, dep, sizeof dep);
        used += (size_t)snprintf(err + used, errlen - used, " rank %d waits at %s(mb %d, stage %d) for %s;", r,
                                 pp_act_name(a->kind), a->mb, pp_virtual_stage(s, r, a->chunk), dep);
    }
}

static void pp_sim_free(pp_sim *sim)
{
    free(sim->fend);
    free(sim->bend);
    free(sim->wend);
    free(sim->slot_of);
    free(sim->owner);
}

/* Runs every rank as far as its dependencies allow, round after round, until all are done or a
 * round moves none (a cycle). Each rank's passes run in its order, so its time only grows. */
static bool pp_run(pp_sim *sim, const pp_stage_cost *cost, double p2p_s, pp_timeline *t, char *err, size_t errlen)
{
    const pp_schedule *s = sim->s;
    int *pos = calloc((size_t)s->p, sizeof(int));
    double *free_at = calloc((size_t)s->p, sizeof(double));
    bool ok = pos && free_at, moved = true;
    if (!ok) pp_fail(err, errlen, "out of memory simulating the pipeline schedule");
    int left = t->first[s->p];
    while (ok && left > 0 && moved) {
        moved = false;
        for (int r = 0; ok && r < s->p; r++)
            for (; ok && pos[r] < s->rank[r].n; pos[r]++) {
                const pp_action *a = &s->rank[r].a[pos[r]];
                char dep[64];
                if (!(ok = pp_check_action(s, r, a, err, errlen))) break;
                double ready = pp_ready(sim, r, a, p2p_s, dep, sizeof dep);
                if (isnan(ready)) break;
                const pp_stage_cost *c = &cost[pp_virtual_stage(s, r, a->chunk)];
                double d = a->kind == PP_ACT_F ? c->f : a->kind == PP_ACT_W ? c->w
                           : pp_scheds[s->kind].splits_w ? c->b : c->b + c->w;
                int i = t->first[r] + pos[r];
                t->start[i] = fmax(ready, free_at[r]);
                t->end[i] = free_at[r] = t->start[i] + d;
                ok = pp_record(sim, r, a, t->end[i], err, errlen);
                moved = true;
                left--;
            }
    }
    if (ok && left > 0) ok = (pp_deadlock(sim, pos, p2p_s, err, errlen), false);
    free(pos);
    free(free_at);
    return ok;
}

int pp_rank_peak(const pp_schedule *s, int r)
{
    int in_use = 0, peak = 0;
    pp_act_kind frees = pp_sched_last_pass(s->kind);
    for (int i = 0; i < s->rank[r].n; i++) {
        const pp_action *a = &s->rank[r].a[i];
        if (a->kind == PP_ACT_F && ++in_use > peak) peak = in_use;
        if (a->kind == frees) in_use--;
    }
    return peak;
}

/* The timeline's summary: makespan, bubble, and each rank's peak stash slots. */
static void pp_summarize(const pp_schedule *s, pp_timeline *t)
{
    double busy = 0;
    t->makespan = 0;
    for (int r = 0; r < s->p; r++) {
        t->peak_slots[r] = pp_rank_peak(s, r);
        for (int k = t->first[r]; k < t->first[r + 1]; k++) {
            busy += t->end[k] - t->start[k];
            t->makespan = fmax(t->makespan, t->end[k]);
        }
    }
    double all = s->p * t->makespan;
    t->bubble = all > 0 ? 1 - busy / all : 0;
    t->idle_ratio = busy > 0 ? (all - busy) / busy : 0;
}

bool pp_schedule_simulate(const pp_schedule *s, const pp_stage_cost *cost, double p2p_s, pp_timeline *t, char *err,
                          size_t errlen)
{
    memset(t, 0, sizeof *t);
    size_t cells = (size_t)s->p * s->v * s->m, span_cells = cells * PP_NUM_SPANS;
    pp_sim sim = {.s = s, .fend = malloc(cells * sizeof(double)), .bend = malloc(cells * sizeof(double)),
                  .wend = malloc(cells * sizeof(double)), .slot_of = malloc(span_cells * sizeof(int)),
                  .owner = malloc(span_cells * sizeof(int))};
    t->first = malloc(sizeof(int) * (size_t)(s->p + 1));
    t->peak_slots = calloc((size_t)s->p, sizeof(int));
    bool ok = sim.fend && sim.bend && sim.wend && sim.slot_of && sim.owner && t->first && t->peak_slots;
    if (ok) {
        t->first[0] = 0;
        for (int r = 0; r < s->p; r++) t->first[r + 1] = t->first[r] + s->rank[r].n;
        ok = (t->start = malloc(sizeof(double) * (size_t)(t->first[s->p] + 1))) &&
             (t->end = malloc(sizeof(double) * (size_t)(t->first[s->p] + 1)));
    }
    if (!ok) {
        pp_sim_free(&sim);
        pp_timeline_free(t);
        return pp_fail(err, errlen, "out of memory simulating the pipeline schedule");
    }
    for (size_t i = 0; i < cells; i++) sim.fend[i] = sim.bend[i] = sim.wend[i] = NAN;
    for (size_t i = 0; i < span_cells; i++) sim.owner[i] = sim.slot_of[i] = -1;
    ok = pp_run(&sim, cost, p2p_s, t, err, errlen) && pp_all_ran(&sim, err, errlen);
    if (ok) pp_summarize(s, t);
    pp_sim_free(&sim);
    if (!ok) pp_timeline_free(t);
    return ok;
}

void pp_timeline_free(pp_timeline *t)
{
    free(t->first);
    free(t->start);
    free(t->end);
    free(t->peak_slots);
    memset(t, 0, sizeof *t);
}
