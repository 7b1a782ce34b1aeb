/* tune_estimate.c — what `mcc tune` ranks every layout by before it plans the best exactly: the
 * busiest stage's memory and step time, composed from exact plans of the model cut short.
 *
 * A shape (tp, cp, ep, micro-batch size, recompute, ZeRO or not, FP8 or not, bf16 gradients or not) is planned as mcc
 * compile plans it but with the model cut short: two and three layers of each kind the model has
 * (dense, MoE: moe_layer_freq says which layer is which) on one stage, and, for pipelines, three
 * layers over three stages under each kind of schedule (the backward whole or split). The
 * difference of the first two is a layer: its weights, gradients and optimizer state, the values a
 * micro-batch saves for its backward, its step time per micro-batch and once a step, the bytes it
 * sends. What the others hold beside their layers is the ends' (embedding, head, loss, the arena's
 * transients, a stage's buffers), each stash span's slot bytes a layer and beside the layers. Any
 * pipeline split, schedule (its stash slots from pp_schedule_build), virtual stages, block recompute
 * (the recomputed shape's layers and the kept shape's) and data-parallel degree is then arithmetic:
 * the state ZeRO shards scales with dp x cp, the rest with the layers a stage holds.
 *
 * An estimate, not a plan: the arena's packing, padding and a stage's boundary buffers are the
 * reduced plans', not the layout's. mcc tune plans its first rows exactly before it lists them. */
#include "frontend/tune.h"

#include "passes/passes.h"
#include "passes/step_cost.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What one stage of a reduced plan holds and costs (bytes, seconds). */
typedef struct {
    double stat;                   /* parameters, gradients, optimizer state */
    double zero;                   /* of them, what ZeRO shards over the data-parallel ranks */
    double saved, act, stash, total;
    double slot[PP_NUM_SPANS];     /* a pipeline stage's stash: one slot's bytes of each span (ORDER pp_span) */
    double micro_s, once_s;        /* its step: one micro-batch's, and once a step */
    double sent_micro, sent_once;  /* bytes its collectives send: a micro-batch's, and once a step (dp's, tied) */
} tune_stage;

/* The two kinds of layer a model may mix (moe_layer_freq): each costed from plans of its own kind. */
enum { LAYER_DENSE, LAYER_MOE, LAYER_KINDS };

/* A pipeline's stages under a schedule that keeps the backward whole (1F1B, interleaved) or splits
 * it (ZB-H1): from the three-stage plan under it, a period of layers a stage. */
enum { END_FIRST, END_MIDDLE, END_LAST, END_COUNT };
typedef struct {
    bool made, ok;
    tune_stage end[END_COUNT];     /* the first, a middle and the last stage beside their layers' state and
                                      stash; slot[]: a stash slot's bytes beside its layers' (the head's) */
    double slot[PP_NUM_SPANS];     /* a stash slot's bytes a layer, each span's (what a micro-batch in flight
                                      keeps), a middle stage's: the first's B is empty (ZB-H1: nothing to send) */
    tune_stage layer[LAYER_KINDS]; /* a layer in a stage: the one-stage plans' but its time a micro-batch, a
                                      middle stage's (its stash copies and the schedule's kernels with it) */
} tune_piped;

/* A shape's layer and ends, per layer of the model (a period's over its layers). */
typedef struct {
    int tp, cp, ep, mbs, rc;
    bool zero, fp8, grad_bf16;
    bool ok;                       /* its one-stage plans made */
    char why[200];
    int zref;                      /* dp x cp of its plans */
    tune_stage layer[LAYER_KINDS]; /* a layer of each kind the model has */
    tune_stage one;                /* a whole-model stage beside its layers */
    int main_kind;                 /* the kind the pipeline plans are made of: MoE where the model has it */
    tune_piped piped[2];           /* a pipeline's, by its schedule's splits_w */
} tune_unit;

struct tune_units {
    tune_unit *u;
    int n, cap, planned;
};

/* The axes ZeRO shards the optimizer's state over. */
static bool replica_axis(ir_axis a) { return a == IR_AXIS_DP || a == IR_AXIS_DP_CP || a == IR_AXIS_EDP; }

/* A reduced plan's stage figures. */
typedef struct {
    const tune_ctx *t;
    tune_stage s[END_COUNT];
} tune_collect;

static void collect_stage(void *ctx, const ir_module *m, int index)
{
    tune_collect *c = ctx;
    if (index >= END_COUNT)
        return;
    tune_stage *s = &c->s[index];
    mcc_memory_breakdown b = mcc_memory_of(m);
    s->stat = (double)(b.params + b.grads + b.optimizer_state);
    s->saved = (double)b.saved, s->act = (double)b.activations, s->stash = (double)b.stash;
    s->total = (double)mcc_memory_total(&b);
    for (int g = 0; g < m->nglobals; g++) {
        const ir_global *gl = &m->globals[g];
        if (gl->kind == IR_GLOBAL_STASH && gl->slots > 0)
            s->slot[gl->span] += (double)ir_global_slab_bytes(m, g) / gl->slots;
        bool sharded = false;
        for (int d = 0; !gl->host && d < gl->type.ndim; d++)
            for (int a = IR_AXIS_DP; a < IR_NUM_AXES; a++)
                sharded |= replica_axis((ir_axis)a) && ir_shard_splits(&gl->type, d, (ir_axis)a);
        s->zero += sharded ? (double)ir_global_slab_bytes(m, g) : 0;
    }
    int micro = (int)ir_cfg_int(m, IR_CFG_ACCUM_STEPS);
    mcc_step_cost c0 = mcc_step_cost_of(m, c->t->target);
    s->micro_s = c0.micro_batch_seconds;
    s->once_s = c0.seconds - micro * c0.micro_batch_seconds;
    double all = 0;
    for (int a = 0; a < IR_NUM_AXES; a++) all += b.sent_bytes[a];
    s->sent_micro = b.sent_micro_batch_bytes;
    s->sent_once = all - micro * b.sent_micro_batch_bytes;
}

/* x - y, field by field, over n layers: a layer's share. */
static tune_stage stage_minus(tune_stage x, tune_stage y, double n)
{
    double *a = (double *)&x;
    const double *b = (const double *)&y;
    for (size_t i = 0; i < sizeof x / sizeof(double); i++) a[i] = (a[i] - b[i]) / n;
    return x;
}

/* x less n layers of l. */
static tune_stage stage_less(tune_stage x, tune_stage l, double n)
{
    double *a = (double *)&x;
    const double *b = (const double *)&l;
    for (size_t i = 0; i < sizeof x / sizeof(double); i++) a[i] -= n * b[i];
    return x;
}

/* Which kinds of layer the model has (bit LAYER_DENSE, LAYER_MOE). */
static unsigned tune_kinds(const mcc_spec *s)
{
    unsigned kinds = 0;
    for (int l = 0; l < s->num_layers; l++) kinds |= 1u << (s->num_experts && mcc_spec_moe_layer(s, l));
    return kinds;
}

/* The flag that makes every layer of a cut model of `kind` (none for a model without experts). */
static const char *kind_flag(const mcc_spec *s, int kind, int layers)
{
    static const char *const dense[] = {"", " --moe-layer-freq [0]", " --moe-layer-freq [0,0]", " --moe-layer-freq [0,0,0]"};
    if (!s->num_experts) return "";
    return kind == LAYER_MOE ? " --moe-layer-freq 1" : dense[layers < 4 ? layers : 0];
}

/* Plans shape u's model cut to `layers` (of `kind`: kind_flag; dense layers without ep, which has no
 * experts to split there) on `pp` stages (as many each) under sched, m micro-batches a step; each
 * stage's figures into out; false with u->why. */
static bool unit_plan(tune_ctx *t, tune_unit *u, int layers, const char *kind, int pp, pp_sched_kind sched, int m,
                      tune_stage *out)
{
    int dp = u->zref / u->cp;
    tune_layout l = {.tp = u->tp, .pp = pp, .cp = u->cp, .dp = dp, .ep = strstr(kind, "[0") ? 1 : u->ep, .mbs = u->mbs,
                     .rc = (tune_recompute)u->rc, .vp = 1, .sched = sched, .fp8 = u->fp8,
                     .grad_bf16 = u->grad_bf16, .blocks = t->block_modules};
    char text[768];
    tune_layout_flags(&l, u->tp * u->cp * dp * pp, text, sizeof text);
    size_t used = strlen(text);
    snprintf(text + used, sizeof text - used, " --num-layers %d --global-batch-size %d%s", layers, m * u->mbs * dp, kind);
    if (pp > 1) {
        used = strlen(text);
        snprintf(text + used, sizeof text - used,
                 " --decoder-first-pipeline-num-layers %d --decoder-last-pipeline-num-layers %d", layers / pp, layers / pp);
    }
    tune_collect c = {.t = t};
    tune_plan_figures f;
    t->units->planned++;
    if (!tune_plan_text(t, text, collect_stage, &c, &f)) {
        snprintf(u->why, sizeof u->why, "%s", t->refusal);
        return false;
    }
    for (int k = 0; k < pp; k++) out[k] = c.s[k];
    return true;
}

/* The one-stage plans of a shape, two and three layers of each kind the model has (one is too few:
 * its arena peaks at the head's transients, not at what the layers save): a layer of each kind, and
 * the ends (from the main kind's). */
static void unit_make(tune_ctx *t, tune_unit *u, const mcc_spec *s)
{
    unsigned kinds = tune_kinds(s);
    u->main_kind = kinds & (1u << LAYER_MOE) ? LAYER_MOE : LAYER_DENSE;
    for (int k = 0; k < LAYER_KINDS; k++) {
        tune_stage two[1], three[1];
        if (!(kinds & (1u << k))) continue;
        if (!unit_plan(t, u, 2, kind_flag(s, k, 2), 1, PP_SCHED_1F1B, 2, two) ||
            !unit_plan(t, u, 3, kind_flag(s, k, 3), 1, PP_SCHED_1F1B, 2, three))
            return;
        u->layer[k] = stage_minus(three[0], two[0], 1);
        if (k == u->main_kind) u->one = stage_less(two[0], u->layer[k], 2);
    }
    u->ok = true;
}

/* What rank r's chunk c stashes under schedule s: each span's slots times a slot's bytes of its
 * `layers` layers and of what its end holds beside them (END_COUNT: none). */
static double stash_bytes(const pp_schedule *s, const tune_piped *p, int r, int c, double layers, int end)
{
    double bytes = 0;
    for (int span = 0; span < PP_NUM_SPANS; span++)
        bytes += s->rank[r].nslots[span][c] * (layers * p->slot[span] + (end < END_COUNT ? p->end[end].slot[span] : 0));
    return bytes;
}

/* The three-stage plan under schedule kind (three micro-batches, a layer of the main kind a stage):
 * the first, a middle and the last stage beside their layer and their stash, and a stash slot's bytes
 * a layer; the other kind's layer scaled from it by the values it saves and its time alone. */
static void unit_pipe(tune_ctx *t, tune_unit *u, const mcc_spec *s, pp_sched_kind kind)
{
    tune_piped *p = &u->piped[pp_scheds[kind].splits_w];
    const tune_stage *main = &u->layer[u->main_kind];
    tune_stage three[END_COUNT];
    p->made = true;
    if (!unit_plan(t, u, END_COUNT, kind_flag(s, u->main_kind, END_COUNT), END_COUNT, kind, END_COUNT, three))
        return;
    for (int span = 0; span < PP_NUM_SPANS; span++) p->slot[span] = three[END_MIDDLE].slot[span];
    double pp_time = main->micro_s > 0 ? three[END_MIDDLE].micro_s / main->micro_s : 1; /* a stage's own kernels */
    for (int k = 0; k < LAYER_KINDS; k++) {
        p->layer[k] = u->layer[k];
        p->layer[k].micro_s *= pp_time;
    }
    for (int e = 0; e < END_COUNT; e++) {
        p->end[e] = stage_less(three[e], p->layer[u->main_kind], 1);
        p->end[e].total -= three[e].stash;
        for (int span = 0; span < PP_NUM_SPANS; span++) p->end[e].slot[span] = three[e].slot[span] - p->slot[span];
    }
    p->ok = true;
}

/* dp x cp of a shape's reduced plans: ZeRO's (2 at least) where the layout shards, the least that
 * expert parallelism's ep divides. */
static int unit_zref(int cp, int ep, bool zero)
{
    for (int dp = 1;; dp++)
        if ((dp * cp) % ep == 0 && (!zero || dp * cp >= 2)) return dp * cp;
}

/* The unit of layout l's shape, made on first use. The array may grow: a pointer held across a
 * second call is stale (tune_estimate takes both it needs after both calls, by index). */
static int unit_of(tune_ctx *t, const tune_layout *l, const mcc_spec *s)
{
    tune_units *us = t->units;
    bool zero = l->dp * l->cp > 1;
    for (int i = 0; i < us->n; i++) {
        tune_unit *u = &us->u[i];
        if (u->tp == l->tp && u->cp == l->cp && u->ep == l->ep && u->mbs == l->mbs && u->rc == (int)l->rc &&
            u->zero == zero && u->fp8 == l->fp8 && u->grad_bf16 == l->grad_bf16)
            return i;
    }
    if (us->n == us->cap) {
        int cap = us->cap ? 2 * us->cap : 64;
        tune_unit *grown = realloc(us->u, (size_t)cap * sizeof *grown);
        if (!grown) return -1;
        us->u = grown, us->cap = cap;
    }
    tune_unit *u = &us->u[us->n++];
    *u = (tune_unit){.tp = l->tp, .cp = l->cp, .ep = l->ep, .mbs = l->mbs, .rc = (int)l->rc, .zero = zero, .fp8 = l->fp8,
                     .grad_bf16 = l->grad_bf16};
    u->zref = unit_zref(l->cp, l->ep, zero);
    unit_make(t, u, s);
    return us->n - 1;
}

/* What ZeRO leaves of x on dp x cp = z ranks, measured on zref. */
static double zero_scaled(double bytes, double zero, int zref, int z)
{
    return bytes - zero + zero * zref / z;
}

/* A ring's share of a collective's bytes that leaves the rank, on z ranks. */
static double ring_share(int z) { return z > 1 ? (z - 1.0) / z : 0; }

/* A rank's estimate: the layers it holds, plus the ends where it holds them. */
typedef struct {
    double bytes, micro_s, once_s, sent;
} tune_rank;

/* A rank's layers of each kind. */
typedef struct {
    double n[LAYER_KINDS];
} tune_count;

/* Layers first .. first+count-1 by kind. */
static tune_count count_of(const mcc_spec *s, int first, int count)
{
    tune_count c = {{0}};
    for (int l = first; l < first + count; l++) c.n[s->num_experts && mcc_spec_moe_layer(s, l)]++;
    return c;
}

/* A rank's layers: c of the layout's own, and (block recompute) kept of those it keeps whole. */
typedef struct {
    const tune_stage *layer, *kept_layer; /* [LAYER_KINDS] each; kept_layer NULL: none */
    tune_count c, kept;
} tune_layers;

static tune_rank rank_of(const tune_unit *u, tune_layers y, const tune_stage *fixed, double stash, int m, int z)
{
    tune_rank r = {0};
    double once_scale = u->zero ? (double)u->zref / z : 1; /* the update's work is ZeRO's share */
    double sent_scale = u->zero ? ring_share(z) / ring_share(u->zref) : 1;
    double total = fixed->total, zero = fixed->zero, micro = m * fixed->sent_micro, once = fixed->sent_once;
    r.micro_s = fixed->micro_s, r.once_s = fixed->once_s;
    for (int part = 0; part < 2; part++)
        for (int k = 0; k < LAYER_KINDS; k++) {
            const tune_stage *x = part ? (y.kept_layer ? &y.kept_layer[k] : NULL) : &y.layer[k];
            double n = part ? y.kept.n[k] : y.c.n[k];
            if (!x || !n) continue;
            total += n * (x->total - x->saved * (fixed != &u->one)); /* a pipeline's saved values: its stash */
            zero += n * x->zero;
            r.micro_s += n * x->micro_s;
            r.once_s += n * x->once_s;
            micro += m * n * x->sent_micro;
            once += n * x->sent_once;
        }
    r.bytes = zero_scaled(total, zero, u->zref, z) + stash;
    r.once_s *= once_scale;
    r.sent = micro + once * sent_scale;
    return r;
}

/* What layers c stash a slot, in the main kind's layers: the other kind's by the values it saves. */
static double stash_layers(const tune_unit *u, tune_count c)
{
    const tune_stage *main = &u->layer[u->main_kind], *other = &u->layer[!u->main_kind];
    return c.n[u->main_kind] + c.n[!u->main_kind] * (main->saved > 0 ? other->saved / main->saved : 1);
}

/* A layout's units: its own, and under block recompute the one without recompute for the layers
 * past the first rc_block of each virtual stage (NULL otherwise). */
typedef struct {
    const tune_unit *u, *kept;
    int block;                     /* layers recomputed at the start of each virtual stage (0: all) */
} tune_units_of;

/* Virtual stage g's layers [first, first + count) into y: the first `block` (all where 0) the
 * layout's own, the rest kept whole; its stash slot weight of each. */
static void chunk_layers(const mcc_spec *s, const tune_units_of *w, int first, int count, tune_layers *y,
                         double *own, double *kept)
{
    int own_n = w->block && w->block < count ? w->block : count;
    tune_count a = count_of(s, first, own_n), b = count_of(s, first + own_n, count - own_n);
    for (int k = 0; k < LAYER_KINDS; k++) y->c.n[k] += a.n[k], y->kept.n[k] += b.n[k];
    *own = stash_layers(w->u, a), *kept = w->kept ? stash_layers(w->kept, b) : 0;
}

/* The busiest pipeline rank of layout l (m micro-batches) into *most (bytes), *busiest (its step),
 * *sent (bytes); false with t->refusal. */
static bool pipeline_of(tune_ctx *t, const tune_units_of *w, bool splits_w, const tune_layout *l, const mcc_spec *s,
                        int m, double *most, double *busiest, double *sent)
{
    char err[1024];
    int v = l->vp, per[PP_MAX_V * 64];
    pp_schedule sched;
    pp_split_flags split = mcc_spec_split_flags(s);
    split.p = l->pp, split.v = v;
    if (l->pp * v > (int)(sizeof per / sizeof per[0]) || !pp_split_layers(&split, per, err, sizeof err) ||
        !pp_schedule_build(l->sched, l->pp, m, v, &sched, err, sizeof err)) {
        snprintf(t->refusal, sizeof t->refusal, "%.190s", err);
        return false;
    }
    const tune_piped *own = &w->u->piped[splits_w], *kept = w->kept ? &w->kept->piped[splits_w] : NULL;
    int first[PP_MAX_V * 64]; /* each virtual stage's first layer */
    for (int g = 0, at = 0; g < l->pp * v; at += per[g++]) first[g] = at;
    for (int rank = 0; rank < l->pp; rank++) {
        tune_layers y = {.layer = own->layer, .kept_layer = kept ? kept->layer : NULL};
        double stash = 0;
        for (int c = 0; c < v; c++) {
            int g = c * l->pp + rank, end = g == 0 ? END_FIRST : g == l->pp * v - 1 ? END_LAST : END_COUNT;
            double own_n, kept_n;
            chunk_layers(s, w, first[g], per[g], &y, &own_n, &kept_n);
            stash += stash_bytes(&sched, own, rank, c, own_n, end) + (kept ? stash_bytes(&sched, kept, rank, c, kept_n, END_COUNT) : 0);
        }
        const tune_stage *fixed = &own->end[rank == 0 ? END_FIRST : rank == l->pp - 1 ? END_LAST : END_MIDDLE];
        tune_rank k = rank_of(w->u, y, fixed, stash, m, l->dp * l->cp);
        double step = m * k.micro_s + k.once_s;
        *most = k.bytes > *most ? k.bytes : *most;
        *busiest = step > *busiest ? step : *busiest;
        *sent = k.sent > *sent ? k.sent : *sent;
    }
    pp_schedule_free(&sched);
    return true;
}

/* Unit index i made ready for a pipeline under splits_w; NULL with t->refusal where it cannot be. */
static const tune_unit *unit_ready(tune_ctx *t, int i, const mcc_spec *s, const tune_layout *l, bool splits_w)
{
    tune_unit *u = i >= 0 ? &t->units->u[i] : NULL;
    if (u && u->ok && l->pp > 1 && !u->piped[splits_w].made)
        unit_pipe(t, u, s, pp_sched_find(1, splits_w));
    if (!u || !u->ok || (l->pp > 1 && !u->piped[splits_w].ok)) {
        snprintf(t->refusal, sizeof t->refusal, "%s", u ? u->why : "out of memory");
        return NULL;
    }
    return u;
}

bool tune_estimate(tune_ctx *t, const tune_layout *l, tune_result *r)
{
    if (!t->units && !(t->units = calloc(1, sizeof *t->units)))
        return false;
    char text[768];
    tune_layout_flags(l, t->world, text, sizeof text);
    mcc_spec s;
    if (!tune_spec_text(t, text, &s))
        return false;
    bool splits_w = pp_scheds[l->sched].splits_w;
    tune_layout whole = *l;
    whole.rc = RC_NONE, whole.rc_block = 0;
    int own = unit_of(t, l, &s), kept = l->rc_block ? unit_of(t, &whole, &s) : -1; /* then pointers: see unit_of */
    tune_units_of w = {.u = unit_ready(t, own, &s, l, splits_w), .block = l->rc_block};
    if (l->rc_block && w.u) w.kept = unit_ready(t, kept, &s, l, splits_w);
    if (!w.u || (l->rc_block && !w.kept))
        return false;
    int m = s.global_batch_size / (s.micro_batch_size * s.data_parallel_size);
    double most = 0, busiest = 0, sent = 0;
    if (l->pp == 1) {
        tune_layers y = {.layer = w.u->layer, .kept_layer = w.kept ? w.kept->layer : NULL};
        double own_n, kept_n;
        chunk_layers(&s, &w, 0, s.num_layers, &y, &own_n, &kept_n);
        tune_rank k = rank_of(w.u, y, &w.u->one, 0, m, l->dp * l->cp);
        most = k.bytes, busiest = m * k.micro_s + k.once_s, sent = k.sent;
    } else if (!pipeline_of(t, &w, splits_w, l, &s, m, &most, &busiest, &sent)) {
        return false;
    }
    *r = (tune_result){.l = *l, .gib = most / 0x1p30, .compute_s = busiest};
    r->bubble = l->pp > 1 ? pp_scheds[l->sched].ideal_bubble(l->pp, m, l->vp) : 0;
    r->comm_s = t->target->link_bytes_per_s > 0 ? sent / t->target->link_bytes_per_s : 0;
    r->step_s = r->compute_s * (1 + r->bubble) + r->comm_s;
    return true;
}

int tune_units_planned(const tune_ctx *t) { return t->units ? t->units->planned : 0; }

void tune_units_free(tune_ctx *t)
{
    if (t->units) free(t->units->u);
    free(t->units);
    t->units = NULL;
}
