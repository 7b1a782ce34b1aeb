/* pipeline.c — pipeline parallelism: the pass that cuts the planned micro-batch step into
 * pipeline_model_parallel_size stages, one module a stage.
 *
 * It runs after the shard pass, on the one function `micro_step` (kind step: the forward, the
 * loss, then autodiff's backward) and on `eval_step`, so every value already has the type this
 * rank holds (a shard crosses a stage boundary, not the whole tensor). Each instruction gets a
 * stage from the layers of the parameters it reads:
 *
 *   - a leaf (an instruction of no operands: a global, an input, a constant) belongs to no stage
 *     and is repeated in each function that uses it; a global of layer L says stage(L);
 *   - a forward instruction is in the latest stage among its operands' (a layer's first op reads
 *     the previous stage's output and this layer's weights); a parameter of no layer read beside a
 *     value a layer made (the final norm's, the output head's: not the embedding's) says the last
 *     stage, where Megatron's layout puts the loss L, in the forward and in the backward: a last
 *     stage of only multi-token depths (`...|mL`) runs the head too;
 *   - a backward instruction is in the stage of the layer whose parameters it reads, else in the
 *     earliest stage among its operands' (a layer's backward reads the gradient coming from the
 *     later stage and this stage's saved values); one that reads no gradient (nothing made from
 *     the loss's seed) is a recomputed forward instruction (passes/recompute.c), placed as the
 *     forward places it;
 *   - one that neither says (the embedding: its operands are leaves) is in the earliest stage that
 *     uses it (the forward's) or the latest (the backward's).
 *
 * Stage s then gets `forward` (kind forward), `backward` (kind backward) and `eval_forward` (kind
 * eval). Values crossing a boundary become `output @stage<s+1>.act.<k>` in stage s's forward and
 * `input @stage<s+1>.act.<k>` in stage s+1's (the schedule sends one to the other), and going back
 * `output @stage<s>.grad.<k>` in stage s's backward, `input` in stage s-1's. A forward value the
 * backward reads is copied into a stash global (kind stash, `@stage<s>.stash.<k>`), which the
 * backward reads: the schedule pass gives it one buffer per micro-batch in flight and each call
 * its slot. Under the zero-bubble cut a stash global's span says which part reads it: fb (B
 * only: free after B), fw (W reads it: it lives until W); B's values for W are wstash (bw), a
 * sequence-parallel all-gather among them kept as its shard and gathered again by W. A value
 * that would skip a stage, or flow against the pipeline, is refused (internal error: the model
 * builder's graph is layered, so it does not happen).
 *
 * Each stage's module holds the globals its functions read and their companions (a parameter
 * read by two stages, as tied embeddings are, is in both, its gradients summed between them:
 * tie_shared_parameters), the setup function cut to them, and the config with pipeline_stage = s. */
#include "passes.h"
#include "passes/pp_schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool pass_pipeline_layer_stages(const ir_module *m, int p, int v, int *stage_of, int nlayers, char *err,
                                size_t errlen)
{
    int *per = malloc(sizeof(int) * (size_t)(p * v));
    int first = (int)ir_cfg_int(m, IR_CFG_DECODER_FIRST_PIPELINE_NUM_LAYERS);
    int last = (int)ir_cfg_int(m, IR_CFG_DECODER_LAST_PIPELINE_NUM_LAYERS);
    int decoder = (int)ir_cfg_int(m, IR_CFG_NUM_LAYERS); /* the layers after it: multi-token prediction's */
    if (decoder <= 0 || decoder > nlayers)
        decoder = nlayers;
    for (int l = decoder; l < nlayers; l++) /* on the last stage, as Megatron's mtp_in_last_stage */
        stage_of[l] = p * v - 1;
    pp_split_flags flags = {.num_layers = decoder, .mtp_layers = nlayers - decoder, .p = p, .v = v,
                            .first = first > 0 ? first : -1, .last = last > 0 ? last : -1,
                            .account_embedding = ir_cfg_bool(m, IR_CFG_ACCOUNT_FOR_EMBEDDING_IN_PIPELINE_SPLIT),
                            .account_loss = ir_cfg_bool(m, IR_CFG_ACCOUNT_FOR_LOSS_IN_PIPELINE_SPLIT),
                            .layout = ir_cfg_text(m, IR_CFG_PIPELINE_MODEL_PARALLEL_LAYOUT)};
    bool ok = per && pp_split_layers(&flags, per, err, errlen);
    for (int g = 0, l = 0; ok && g < p * v; g++)
        for (int k = 0; k < per[g]; k++)
            stage_of[l++] = g;
    free(per);
    return ok;
}

typedef struct {
    const ir_module *m;
    const ir_func *f;
    int p;
    const int *layer_stage;
    int bwd;                        /* the first backward instruction (f->ninstrs: none) */
    int *stage;                     /* per instruction; -1: a leaf, or not yet known */
    char *err;
    size_t errlen;
} split;

static bool is_leaf(const ir_instr *in) { return in->nargs == 0 && in->nres == 1; }

/* The stage a global reference says: its layer's, or -1 (no layer). */
static int global_stage(const split *c, const ir_instr *in)
{
    if (in->op != IR_OP_GLOBAL)
        return -1;
    int g = in->global;
    return g >= 0 && c->m->globals[g].layer >= 0 ? c->layer_stage[c->m->globals[g].layer] : -1;
}

/* The parameter of no layer (the embedding's, the final norm's, the output head's) whose value leaf
 * d reads, itself or its working copy (param_dtype bf16); -1 for any other leaf. */
static int layerless_param(const split *c, const ir_instr *d)
{
    if (d->op != IR_OP_GLOBAL || d->global < 0)
        return -1;
    const ir_global *g = &c->m->globals[d->global];
    int param = g->kind == IR_GLOBAL_COPY ? g->owner : g->kind == IR_GLOBAL_PARAM ? d->global : -1;
    return param >= 0 && c->m->globals[param].layer < 0 ? param : -1;
}

/* The stage of value v's definition (-1: a leaf or not known). */
static int value_stage(const split *c, int v)
{
    int d = c->f->vals[v].def;
    return is_leaf(&c->f->instrs[d]) ? -1 : c->stage[d];
}

/* The stage of every non-leaf instruction, by the rules above. */
static bool assign_stages(split *c)
{
    const ir_func *f = c->f;
    bool *grad = calloc((size_t)f->ninstrs + 1, sizeof(bool)); /* made from the loss's seed */
    bool *head = calloc((size_t)c->m->nglobals + 1, sizeof(bool)); /* per global: the head's (its forward's rule) */
    for (int i = 0; i < f->ninstrs; i++) {
        const ir_instr *in = &f->instrs[i];
        c->stage[i] = -1;
        if (is_leaf(in))
            continue;
        for (int a = 0; i >= c->bwd && a < in->nargs; a++) {
            int d = f->vals[in->args[a]].def;
            grad[i] |= d >= c->bwd && (is_leaf(&f->instrs[d]) ? f->instrs[d].op != IR_OP_GLOBAL : grad[d]);
        }
        bool backward = i >= c->bwd && grad[i], staged = false; /* staged: reads a value a layer made */
        for (int a = 0; a < in->nargs; a++)
            staged |= value_stage(c, in->args[a]) >= 0;
        int s = -1, layered = -1;
        for (int a = 0; a < in->nargs; a++) {
            const ir_instr *d = &f->instrs[f->vals[in->args[a]].def];
            int t = is_leaf(d) ? global_stage(c, d) : c->stage[f->vals[in->args[a]].def];
            int param = t < 0 ? layerless_param(c, d) : -1;
            if (param >= 0 && (backward ? head[param] : staged))
                t = c->p - 1, head[param] = true; /* the head and its backward: the loss's stage, the last */
            if (is_leaf(d) && t >= 0) {
                if (layered >= 0 && layered != t)
                    return free(grad), free(head), snprintf(c->err, c->errlen, "internal error: %s's instruction %d (%s) reads parameters "
                                    "of stages %d and %d", f->name, i, ir_ops[in->op].name, layered, t), false;
                layered = t;
            }
            if (t >= 0)
                s = s < 0 ? t : backward ? (t < s ? t : s) : (t > s ? t : s);
        }
        c->stage[i] = backward && layered >= 0 ? layered : s;
    }
    free(grad);
    free(head);
    /* the rest: the earliest stage using a forward value, the latest using a backward one */
    for (int i = f->ninstrs - 1; i >= 0; i--) {
        if (c->stage[i] >= 0 || is_leaf(&f->instrs[i]))
            continue;
        bool backward = i >= c->bwd;
        int s = -1;
        for (int j = i + 1; j < f->ninstrs; j++)
            for (int a = 0; a < f->instrs[j].nargs; a++)
                if (f->vals[f->instrs[j].args[a]].def == i && c->stage[j] >= 0)
                    s = s < 0 ? c->stage[j] : backward ? (c->stage[j] > s ? c->stage[j] : s)
                                                       : (c->stage[j] < s ? c->stage[j] : s);
        c->stage[i] = s >= 0 ? s : backward ? c->p - 1 : 0;
    }
    return true;
}

/* A list of value ids, each once. */
typedef struct {
    int *v;
    int n;
} vlist;

static int vlist_find(const vlist *l, int v)
{
    for (int k = 0; k < l->n; k++)
        if (l->v[k] == v)
            return k;
    return -1;
}

static void vlist_add(vlist *l, int v, int cap)
{
    if (vlist_find(l, v) < 0 && l->n < cap)
        l->v[l->n++] = v;
}

/* What crosses: act[s] the forward values entering stage s, grad[s] the backward values leaving
 * stage s+1 into s, stash[s] the forward values (stage s's, or entering it) its backward reads.
 * Under a zero-bubble schedule the backward is cut in two: in_w[i] marks the instructions of the
 * weight gradients (W: those the gradients sent to the previous stage do not need), wstash[s]
 * the input-gradient part's values (B's) that W reads, and per stashed value b_reads / w_reads
 * say which part reads it: one W reads lives until W (span fw), one only B reads is free after B
 * (span fb). Without the cut B is the whole backward and reads every stashed value. */
typedef struct {
    vlist *act, *grad, *stash, *wstash;
    bool *in_w, *b_reads, *w_reads;
    bool *regather;                 /* per value: a B value W reads that W gathers again (see below) */
} crossings;

static bool find_crossings(const split *c, crossings *x)
{
    const ir_func *f = c->f;
    int cap = f->nvals;
    for (int i = 0; i < f->ninstrs; i++) {
        const ir_instr *in = &f->instrs[i];
        if (is_leaf(in))
            continue;
        int s = c->stage[i];
        bool backward = i >= c->bwd;
        for (int a = 0; a < in->nargs; a++) {
            int v = in->args[a], d = f->vals[v].def, t = value_stage(c, v);
            if (t < 0)
                continue;
            bool from_backward = d >= c->bwd;
            bool ok = true;
            if (!backward) {
                ok = t == s || t == s - 1;
                if (t == s - 1)
                    vlist_add(&x->act[s], v, cap);
            } else if (!from_backward) {
                ok = t == s || t == s - 1;
                if (t == s - 1)
                    vlist_add(&x->act[s], v, cap);
                if (ok)
                    vlist_add(&x->stash[s], v, cap);
            } else {
                ok = t == s || t == s + 1;
                if (t == s + 1)
                    vlist_add(&x->grad[s], v, cap);
            }
            if (!ok)
                return snprintf(c->err, c->errlen, "internal error: %s's instruction %d (%s, stage %d) reads %%%d of "
                                "stage %d: a value crosses only to the next stage (forward) or the previous "
                                "(backward)", f->name, i, ir_ops[in->op].name, s, v, t), false;
        }
    }
    return true;
}

/* Building one function of a stage: map takes the source's value ids to the new function's. */
typedef struct {
    ir_module *sm;                  /* the stage's module */
    ir_func *g;
    const ir_func *f;
    int *map;
    const int *globals;             /* per global of f's module: its index in sm, or -1 */
    const int *stash_at, *wstash_at; /* per virtual stage: its first stash, wstash global in sm (the k-th
                                       at +k: add_stash_globals); NULL building an eval forward */
} builder;

/* Copies instruction `in` of f (of the whole module) into g (of the stage's sm), operands through
 * map: a `global` names sm's copy of its global. */
static int copy_into(ir_module *sm, ir_func *g, const ir_func *f, const ir_instr *in, int *map, const int *globals)
{
    if (in->op != IR_OP_GLOBAL)
        return ir_copy_instr(sm, g, f, in, map);
    int r = ir_global_ref(sm, g, globals[in->global]);
    ir_map_results(g, f, in, r, map);
    return r;
}

/* v in the new function: mapped already, or a leaf repeated here. */
static int use(builder *b, int v)
{
    if (b->map[v] < 0) {
        const ir_instr *d = &b->f->instrs[b->f->vals[v].def];
        if (!is_leaf(d)) {
            fprintf(stderr, "mcc: internal error: pipeline: %%%d used before its stage has it\n", v);
            abort();
        }
        copy_into(b->sm, b->g, b->f, d, b->map, b->globals);
    }
    return b->map[v];
}

static void copy_instr(builder *b, const ir_instr *in)
{
    for (int a = 0; a < in->nargs; a++)
        use(b, in->args[a]);
    copy_into(b->sm, b->g, b->f, in, b->map, b->globals);
}

static void boundary_name(char *buf, size_t len, int stage, const char *what, int k)
{
    snprintf(buf, len, "stage%d.%s.%d", stage, what, k);
}

pp_sched_kind pass_pipeline_schedule(const ir_module *m, int v)
{
    int sched = ir_cfg_choice(m, IR_CFG_PIPELINE_SCHEDULE);
    if (sched == IR_PP_AUTO)
        return pp_sched_find(v, false);
    return (pp_sched_kind)(sched - IR_PP_1F1B); /* pp_schedule.c: pp_sched_kind follows ir_pp_sched */
}

/* A copy of value v into the stash list l's k-th global (first + k: @stage<s>.<what>.<k>), if v is
 * in it: a forward's value its backward reads (stash), a backward's value its wgrad reads (wstash). */
static void stash_into(builder *b, const vlist *l, int first, int v)
{
    int k = vlist_find(l, v);
    if (k < 0)
        return;
    int args[2] = {ir_global_ref(b->sm, b->g, first + k), use(b, v)};
    ir_emit(b->sm, b->g, IR_OP_COPY, args, 2, NULL, NULL, NULL);
}

static void stash_value(builder *b, const crossings *x, int s, int v, bool train)
{
    if (train)
        stash_into(b, &x->stash[s], b->stash_at[s], v);
}

/* Stage s's forward (train: stashing what its backward reads as soon as it is made) or its eval
 * forward. */
static void build_forward(builder *b, const split *c, const crossings *x, int s, bool train)
{
    char name[64];
    for (int k = 0; k < x->act[s].n; k++) {
        int v = x->act[s].v[k];
        boundary_name(name, sizeof name, s, "act", k);
        b->map[v] = ir_input(b->sm, b->g, (ir_role){IR_ROLE_PP_ACT, s, k}, name, b->f->vals[v].type);
        stash_value(b, x, s, v, train);
    }
    for (int i = 0; i < c->bwd; i++) {
        const ir_instr *in = &b->f->instrs[i];
        if (is_leaf(in) || c->stage[i] != s)
            continue;
        copy_instr(b, in);
        for (int r = 0; r < in->nres; r++)
            stash_value(b, x, s, in->res[r], train);
    }
    for (int k = 0; s + 1 < c->p && k < x->act[s + 1].n; k++) {
        boundary_name(name, sizeof name, s + 1, "act", k);
        ir_output(b->sm, b->g, (ir_role){IR_ROLE_PP_ACT, s + 1, k}, name, use(b, x->act[s + 1].v[k]));
    }
}

static void wstash_value(builder *b, const crossings *x, int s, int v)
{
    stash_into(b, &x->wstash[s], b->wstash_at[s], v);
}

/* The stashed values of stage s that this part of its backward reads (reads[v]), from their
 * globals: a part references only its own, so each stash lives only as long as its readers. */
static void map_stash(builder *b, const crossings *x, int s, const bool *reads)
{
    for (int k = 0; k < x->stash[s].n; k++)
        if (reads[x->stash[s].v[k]])
            b->map[x->stash[s].v[k]] = ir_global_ref(b->sm, b->g, b->stash_at[s] + k);
}

/* Stage s's backward: all of it, or under a zero-bubble cut its input gradients (B), which copy
 * what W reads into the wstash. */
static void build_backward(builder *b, const split *c, const crossings *x, int s)
{
    char name[64];
    for (int k = 0; k < x->grad[s].n; k++) {
        int v = x->grad[s].v[k];
        boundary_name(name, sizeof name, s + 1, "grad", k);
        b->map[v] = ir_input(b->sm, b->g, (ir_role){IR_ROLE_PP_GRAD, s + 1, k}, name, b->f->vals[v].type);
        wstash_value(b, x, s, v);
    }
    map_stash(b, x, s, x->b_reads);
    for (int i = c->bwd; i < b->f->ninstrs; i++) {
        const ir_instr *in = &b->f->instrs[i];
        if (is_leaf(in) || c->stage[i] != s || x->in_w[i])
            continue;
        copy_instr(b, in);
        for (int r = 0; r < in->nres; r++)
            wstash_value(b, x, s, in->res[r]);
    }
    for (int k = 0; s > 0 && k < x->grad[s - 1].n; k++) {
        boundary_name(name, sizeof name, s, "grad", k);
        ir_output(b->sm, b->g, (ir_role){IR_ROLE_PP_GRAD, s, k}, name, use(b, x->grad[s - 1].v[k]));
    }
}

/* Stage s's weight gradients (W) under a zero-bubble cut: from the forward's stash and B's. */
static void build_wgrad(builder *b, const split *c, const crossings *x, int s)
{
    map_stash(b, x, s, x->w_reads);
    for (int k = 0; k < x->wstash[s].n; k++)
        b->map[x->wstash[s].v[k]] = ir_global_ref(b->sm, b->g, b->wstash_at[s] + k);
    for (int i = c->bwd; i < b->f->ninstrs; i++) {
        const ir_instr *in = &b->f->instrs[i];
        if (c->stage[i] != s || !x->in_w[i])
            continue;
        for (int a = 0; a < in->nargs; a++) /* B's gathers W redoes, before their first reader */
            if (x->regather[in->args[a]] && b->map[in->args[a]] < 0)
                copy_instr(b, &b->f->instrs[b->f->vals[in->args[a]].def]);
        copy_instr(b, in);
    }
}

/* The first backward instruction of a step: the one after the forward's last output (@loss, then
 * @logits when kept), which precedes the first gradient written. */
static int backward_start(const ir_func *f)
{
    int start = f->ninstrs;
    for (int i = 0; i < f->ninstrs && !ir_op_has(f->instrs[i].op, IR_OPF_STORES_GLOBAL); i++)
        if (f->instrs[i].op == IR_OP_OUTPUT)
            start = i + 1;
    return start;
}

typedef struct {
    split c;
    crossings x;
} cut;

/* Whether B's value v of stage s (B's own, need[], or received from stage s+1) is there for W. */
static bool from_b(const split *c, const bool *need, int v, int s)
{
    int d = c->f->vals[v].def;
    return d >= c->bwd && !is_leaf(&c->f->instrs[d]) && ((c->stage[d] == s && need[d]) || c->stage[d] == s + 1);
}

/* The zero-bubble cut of each stage's backward: B is what the gradients going to the previous
 * stage need (a reverse walk from them), W the rest (the weight gradients and their
 * accumulations); W reads B's values through wstash, B's received gradients included. A B value
 * that is the sequence-parallel all-gather of another (a row-parallel matmul's output gradient:
 * the whole sequence, tp times its shard) is not kept: W keeps the shard and gathers it again,
 * as Megatron's backward re-gathers its inputs, so the wstash holds tp times less of it. */
static void cut_weight_grads(const split *c, crossings *x)
{
    const ir_func *f = c->f;
    bool *need = calloc((size_t)f->ninstrs + 1, sizeof(bool));
    for (int s = 1; s < c->p; s++)
        for (int k = 0; k < x->grad[s - 1].n; k++)
            need[f->vals[x->grad[s - 1].v[k]].def] = true;
    for (int i = f->ninstrs - 1; i >= c->bwd; i--)
        for (int a = 0; need[i] && a < f->instrs[i].nargs; a++) {
            int d = f->vals[f->instrs[i].args[a]].def;
            if (d >= c->bwd && !is_leaf(&f->instrs[d]) && c->stage[d] == c->stage[i])
                need[d] = true;
        }
    for (int i = c->bwd; i < f->ninstrs; i++) {
        const ir_instr *in = &f->instrs[i];
        x->in_w[i] = !is_leaf(in) && !need[i];
        for (int a = 0; x->in_w[i] && a < in->nargs; a++) {
            int v = in->args[a], s = c->stage[i];
            const ir_instr *d = &f->instrs[f->vals[v].def];
            if (!from_b(c, need, v, s))
                continue;
            x->regather[v] = d->op == IR_OP_ALL_GATHER_SEQ && c->stage[f->vals[v].def] == s && from_b(c, need, d->args[0], s);
            vlist_add(&x->wstash[s], x->regather[v] ? d->args[0] : v, f->nvals);
        }
    }
    free(need);
}

/* Which part of its stage's backward reads each stashed value (b_reads, w_reads). */
static void mark_stash_readers(const split *c, crossings *x)
{
    const ir_func *f = c->f;
    for (int i = c->bwd; i < f->ninstrs; i++) {
        const ir_instr *in = &f->instrs[i];
        for (int a = 0; !is_leaf(in) && a < in->nargs; a++)
            if (vlist_find(&x->stash[c->stage[i]], in->args[a]) >= 0)
                (x->in_w[i] ? x->w_reads : x->b_reads)[in->args[a]] = true;
    }
}

static bool cut_func(const ir_module *m, const ir_func *f, int p, const int *layer_stage, bool train, bool zero_bubble,
                     cut *k, char *err, size_t errlen)
{
    k->c = (split){m, f, p, layer_stage, train ? backward_start(f) : f->ninstrs, calloc((size_t)f->ninstrs + 1, sizeof(int)),
                   err, errlen};
    k->x.act = calloc((size_t)p, sizeof(vlist));
    k->x.grad = calloc((size_t)p, sizeof(vlist));
    k->x.stash = calloc((size_t)p, sizeof(vlist));
    k->x.wstash = calloc((size_t)p, sizeof(vlist));
    k->x.in_w = calloc((size_t)f->ninstrs + 1, sizeof(bool));
    k->x.b_reads = calloc((size_t)f->nvals + 1, sizeof(bool));
    k->x.w_reads = calloc((size_t)f->nvals + 1, sizeof(bool));
    k->x.regather = calloc((size_t)f->nvals + 1, sizeof(bool));
    for (int s = 0; s < p; s++) {
        k->x.act[s].v = malloc(sizeof(int) * ((size_t)f->nvals + 1));
        k->x.grad[s].v = malloc(sizeof(int) * ((size_t)f->nvals + 1));
        k->x.stash[s].v = malloc(sizeof(int) * ((size_t)f->nvals + 1));
        k->x.wstash[s].v = malloc(sizeof(int) * ((size_t)f->nvals + 1));
    }
    if (!assign_stages(&k->c) || !find_crossings(&k->c, &k->x))
        return false;
    if (zero_bubble)
        cut_weight_grads(&k->c, &k->x);
    mark_stash_readers(&k->c, &k->x);
    return true;
}

static void cut_free(cut *k, int p)
{
    for (int s = 0; s < p && k->x.act; s++) {
        free(k->x.act[s].v);
        free(k->x.grad[s].v);
        free(k->x.stash[s].v);
        free(k->x.wstash[s].v);
    }
    free(k->x.wstash);
    free(k->x.in_w);
    free(k->x.b_reads);
    free(k->x.w_reads);
    free(k->x.regather);
    free(k->x.act);
    free(k->x.grad);
    free(k->x.stash);
    free(k->c.stage);
}

/* Marks the globals stage s's part of f reads or writes. */
static void mark_globals(const cut *k, int s, bool *used)
{
    const ir_func *f = k->c.f;
    for (int i = 0; i < f->ninstrs; i++) {
        const ir_instr *in = &f->instrs[i];
        if (is_leaf(in) || k->c.stage[i] != s)
            continue;
        for (int a = 0; a < in->nargs; a++) {
            const ir_instr *d = &f->instrs[f->vals[in->args[a]].def];
            if (d->global >= 0)
                used[d->global] = true;
        }
    }
}

/* Setup cut to the stage's globals (globals: per global of f's module, its index in sm or -1): an
 * instruction stays when every global it reads or writes is the stage's (and every operand stayed). */
static void copy_pruned(ir_module *sm, const ir_func *f, const int *globals)
{
    ir_func *g = ir_func_new(sm, f->name, f->kind);
    int *map = malloc(sizeof(int) * ((size_t)f->nvals + 1));
    for (int v = 0; v < f->nvals; v++)
        map[v] = -1;
    for (int i = 0; i < f->ninstrs; i++) {
        const ir_instr *in = &f->instrs[i];
        bool keep = in->op != IR_OP_GLOBAL || globals[in->global] >= 0;
        for (int a = 0; a < in->nargs; a++)
            keep &= map[in->args[a]] >= 0;
        if (keep)
            copy_into(sm, g, f, in, map, globals);
    }
    free(map);
}

/* The stash globals @stage<g>.<what>.<k> of the values in l (of f), one buffer each until the
 * schedule pass gives them slots; split as their values' types say. span: theirs, or for the
 * forward's stash (w_reads given) fw where W reads the value, else fb. Returns the index of the
 * first (the k-th at +k). */
static int add_stash_globals(ir_module *sm, const ir_func *f, const vlist *l, const char *what, int g,
                             ir_stash_span span, const bool *w_reads)
{
    int first = sm->nglobals;
    char name[64];
    for (int k = 0; k < l->n; k++) {
        boundary_name(name, sizeof name, g, what, k);
        const ir_type *t = &f->vals[l->v[k]].type;
        int st = ir_global_add(sm, name, *t, IR_GLOBAL_STASH, IR_INIT_ZEROS, 0, false);
        sm->globals[st].layout = ir_layout_of_type(t);
        sm->globals[st].span = w_reads && w_reads[l->v[k]] ? IR_STASH_FW : span;
    }
    return first;
}

/* A function of virtual stage g's chunk c: `forward` (one chunk a rank) or `forward.c1`. */
static ir_func *chunk_func(ir_module *sm, const char *what, ir_func_kind kind, int c, int v)
{
    char name[64];
    if (v > 1)
        snprintf(name, sizeof name, "%s.c%d", what, c);
    else
        snprintf(name, sizeof name, "%s", what);
    return ir_func_new(sm, name, kind);
}

/* Pipeline rank r's module: its chunks c = 0..v-1, virtual stages g = c * p + r (Megatron's
 * interleaved placement), each a forward, a backward and an eval forward, in chunk order. */
static ir_module *stage_module(const ir_module *m, const cut *step, const cut *eval, int r, int p, int v,
                               bool zero_bubble)
{
    bool *used = calloc((size_t)m->nglobals + 1, sizeof(bool));
    for (int c = 0; c < v; c++) {
        mark_globals(step, c * p + r, used);
        if (eval)
            mark_globals(eval, c * p + r, used);
    }
    for (int g = 0; g < m->nglobals; g++) /* a parameter's companions come with it, and it with them */
        if (used[g] && m->globals[g].owner >= 0)
            used[m->globals[g].owner] = true;
    for (int g = 0; g < m->nglobals; g++)
        if (m->globals[g].owner >= 0 && used[m->globals[g].owner])
            used[g] = true;
    ir_module *sm = ir_module_new();
    for (int i = 0; i < m->nconfig; i++)
        ir_config_set(sm, m->config[i].key, m->config[i].value);
    ir_cfg_set_int(sm, IR_CFG_PIPELINE_STAGE, r);
    int *index = malloc(sizeof(int) * ((size_t)m->nglobals + 1));
    for (int g = 0; g < m->nglobals; g++) {
        index[g] = -1;
        if (!used[g])
            continue;
        const ir_global *o = &m->globals[g];
        index[g] = ir_global_add(sm, o->name, o->type, o->kind, o->init, o->std, o->no_decay);
        ir_global *n = &sm->globals[index[g]];
        n->owner = o->owner >= 0 ? index[o->owner] : -1;
        n->layer = o->layer;
        n->placement = o->placement;
        n->layout = o->layout;
    }
    const ir_func *f = step->c.f;
    int *stash_at = calloc((size_t)(p * v), sizeof(int)), *wstash_at = calloc((size_t)(p * v), sizeof(int));
    for (int c = 0; c < v; c++) {
        int g = c * p + r;
        stash_at[g] = add_stash_globals(sm, f, &step->x.stash[g], "stash", g, IR_STASH_FB, step->x.w_reads);
        wstash_at[g] = add_stash_globals(sm, f, &step->x.wstash[g], "wstash", g, IR_STASH_BW, NULL);
    }
    int *map = malloc(sizeof(int) * ((size_t)f->nvals + 1));
    for (int c = 0; c < v; c++) {
        int g = c * p + r;
        builder b = {sm, chunk_func(sm, "forward", IR_FUNC_FORWARD, c, v), f, map, index, stash_at, wstash_at};
        for (int k = 0; k < f->nvals; k++)
            map[k] = -1;
        build_forward(&b, &step->c, &step->x, g, true);
        for (int k = 0; k < f->nvals; k++)
            map[k] = -1;
        b.g = chunk_func(sm, "backward", IR_FUNC_BACKWARD, c, v);
        build_backward(&b, &step->c, &step->x, g);
        if (!zero_bubble)
            continue;
        for (int k = 0; k < f->nvals; k++)
            map[k] = -1;
        b.g = chunk_func(sm, "wgrad", IR_FUNC_WGRAD, c, v);
        build_wgrad(&b, &step->c, &step->x, g);
    }
    free(map);
    for (int c = 0; eval && c < v; c++) {
        const ir_func *e = eval->c.f;
        int *emap = malloc(sizeof(int) * ((size_t)e->nvals + 1));
        for (int k = 0; k < e->nvals; k++)
            emap[k] = -1;
        builder eb = {sm, chunk_func(sm, "eval_forward", IR_FUNC_EVAL, c, v), e, emap, index, NULL, NULL};
        build_forward(&eb, &eval->c, &eval->x, c * p + r, false);
        free(emap);
    }
    for (int i = 0; i < m->nfuncs; i++) {
        ir_func_kind kind = m->funcs[i]->kind;
        if (kind != IR_FUNC_STEP && kind != IR_FUNC_EVAL)
            copy_pruned(sm, m->funcs[i], index);
    }
    free(stash_at);
    free(wstash_at);
    free(index);
    free(used);
    return sm;
}

/* A parameter two ranks' modules hold (tied embeddings: the first stage's lookup, the last's
 * head): their gradients are summed between them before the update, so both apply the same one.
 * The two are neighbours on the pipeline's ring (the first and the last, or two adjacent ranks):
 * each sends its gradient (tied_send, outputs @tied.<k>) and adds what the other sent (tied_sum),
 * and the update's norm counts it on the first of the two only. Others are refused. */
static bool tie_shared_parameters(const ir_module *m, ir_module **stages, int p, char *err, size_t errlen)
{
    int n = 0, pair[2] = {-1, -1};
    ir_func *send[2] = {NULL, NULL}, *sum[2] = {NULL, NULL};
    for (int g = 0; g < m->nglobals; g++) {
        if (m->globals[g].kind != IR_GLOBAL_PARAM)
            continue;
        int at[2] = {-1, -1}, k = 0;
        for (int r = 0; r < p; r++)
            if (ir_global_find(stages[r], m->globals[g].name) >= 0) {
                if (k == 2)
                    return snprintf(err, errlen, "parameter @%s is used by three pipeline stages or more: only two "
                                    "that are neighbours (the first and the last: tied embeddings) can share one",
                                    m->globals[g].name), false;
                at[k++] = r;
            }
        if (k < 2)
            continue;
        bool neighbours = at[1] - at[0] == 1 || (at[0] == 0 && at[1] == p - 1);
        if (!neighbours || (pair[0] >= 0 && (pair[0] != at[0] || pair[1] != at[1])))
            return snprintf(err, errlen, "parameter @%s is used by pipeline stages %d and %d: a parameter is shared "
                            "only between neighbouring stages (the first and the last: tied embeddings), all "
                            "between the same two", m->globals[g].name, at[0], at[1]), false;
        pair[0] = at[0], pair[1] = at[1];
        char name[64];
        snprintf(name, sizeof name, "tied.%d", n++);
        for (int e = 0; e < 2; e++) {
            ir_module *sm = stages[at[e]];
            if (!send[e]) {
                send[e] = ir_func_new(sm, "tied_send", IR_FUNC_TIED_SEND);
                sum[e] = ir_func_new(sm, "tied_sum", IR_FUNC_TIED_SUM);
            }
            int param = ir_global_find(sm, m->globals[g].name), grad = ir_global_companion(sm, param, IR_GLOBAL_GRAD);
            ir_role tied = ir_role_at(IR_ROLE_TIED_GRAD, n - 1);
            ir_output(sm, send[e], tied, name, ir_global_ref(sm, send[e], grad));
            int args[2] = {ir_global_ref(sm, sum[e], grad),
                           ir_input(sm, sum[e], tied, name, sm->globals[grad].type)};
            ir_emit(sm, sum[e], IR_OP_ACCUMULATE, args, 2, NULL, NULL, NULL);
        }
    }
    return true;
}

bool pass_pipeline(ir_module *m, const mcc_pass_options *opts, ir_module ***stages, int *nstages, char *err,
                   size_t errlen)
{
    (void)opts;
    int p = (int)ir_cfg_int(m, IR_CFG_PIPELINE_MODEL_PARALLEL_SIZE);
    int v = (int)ir_cfg_int(m, IR_CFG_NUM_VIRTUAL_STAGES_PER_PIPELINE_RANK);
    v = v < 1 ? 1 : v;
    *stages = NULL;
    *nstages = 1;
    if (p <= 1)
        return true;
    int step = ir_func_of_kind(m, IR_FUNC_STEP), eval = ir_func_of_kind(m, IR_FUNC_EVAL);
    if (step < 0)
        return snprintf(err, errlen, "no step function (kind=step) to cut into stages"), false;
    int nlayers = 0;
    for (int g = 0; g < m->nglobals; g++)
        nlayers = m->globals[g].layer + 1 > nlayers ? m->globals[g].layer + 1 : nlayers;
    int *layer_stage = malloc(sizeof(int) * ((size_t)nlayers + 1));
    cut sc = {0}, ec = {0};
    bool zb = pp_scheds[pass_pipeline_schedule(m, v)].splits_w;
    bool ok = pass_pipeline_layer_stages(m, p, v, layer_stage, nlayers, err, errlen) &&
              cut_func(m, m->funcs[step], p * v, layer_stage, true, zb, &sc, err, errlen) &&
              (eval < 0 || cut_func(m, m->funcs[eval], p * v, layer_stage, false, false, &ec, err, errlen));
    ir_module **out = ok ? calloc((size_t)p, sizeof *out) : NULL;
    for (int r = 0; ok && r < p; r++)
        out[r] = stage_module(m, &sc, eval >= 0 ? &ec : NULL, r, p, v, zb);
    if (ok && !tie_shared_parameters(m, out, p, err, errlen))
        ok = false;
    cut_free(&sc, p * v);
    cut_free(&ec, p * v);
    free(layer_stage);
    if (!ok) {
        for (int r = 0; out && r < p; r++)
            ir_module_free(out[r]);
        free(out);
        return false;
    }
    *stages = out;
    *nstages = p;
    return true;
}
