/* verify.c — checks a module's invariants: names, SSA order, operand and result counts, types
 * (re-inferred through the op table and compared with the recorded ones), function kinds, the
 * schedule programs, and the memory plan, independently of the planner. Runs after every pass
 * in tests and debug. */
#include "ir_internal.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Values stay far below this, so sizes and offsets never overflow int64. */
#define MAX_NUMEL ((int64_t)1 << 56)

typedef struct {
    const ir_module *m;
    const ir_func *f;   /* the function being checked, NULL for module-level checks */
    char *err;
    size_t errlen;
    int *slots;         /* [function * IR_NUM_STASH_SPANS + span]: the stash buffers its calls may name in
                           that span, 0 for a span it does not touch (verify_schedule's) */
} verifier;

/* Writes "func F, instr I (DESC): WHAT", "func F: WHAT" (i < 0), or WHAT outside functions. */
static bool report(verifier *v, int i, const char *desc, const char *fmt, va_list ap)
{
    char what[768];
    vsnprintf(what, sizeof what, fmt, ap);
    if (!v->err || !v->errlen)
        return false;
    if (!v->f)
        snprintf(v->err, v->errlen, "%s", what);
    else if (i < 0)
        snprintf(v->err, v->errlen, "func %s: %s", v->f->name, what);
    else
        snprintf(v->err, v->errlen, "func %s, instr %d (%s): %s", v->f->name, i, desc, what);
    return false;
}

#define PRINTF(fmt_arg) __attribute__((format(printf, fmt_arg, fmt_arg + 1)))

/* About the module or the current function as a whole. */
static bool PRINTF(2) vfail(verifier *v, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    report(v, -1, NULL, fmt, ap);
    va_end(ap);
    return false;
}

/* About instruction i before it is known to be well formed: named by its op only. */
static bool PRINTF(3) sfail(verifier *v, int i, const char *fmt, ...)
{
    const ir_op op = v->f->instrs[i].op;
    va_list ap;
    va_start(ap, fmt);
    report(v, i, (unsigned)op < IR_NUM_OPS ? ir_ops[op].name : "unknown op", fmt, ap);
    va_end(ap);
    return false;
}

/* About well-formed instruction i: shown as printed, `%3 = gelu %2 : f32[4,64]`. */
static bool PRINTF(3) ifail(verifier *v, int i, const char *fmt, ...)
{
    ir_buf line = {0};
    ir_buf_printf(&line, "`");
    ir_print_instr_to(&line, v->f, &v->f->instrs[i]);
    ir_buf_printf(&line, "`");
    va_list ap;
    va_start(ap, fmt);
    report(v, i, line.s, fmt, ap);
    va_end(ap);
    free(line.s);
    return false;
}

/* Why a type cannot be printed or sized, or NULL when it is fine. */
static const char *type_problem(const ir_type *t)
{
    if ((unsigned)t->dtype >= IR_NUM_DTYPES)
        return "an unknown dtype";
    if (t->ndim < 0 || t->ndim > IR_MAX_DIMS)
        return "a rank outside 0..4";
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (t->dims[i] < 1)
            return "a dimension below 1";
        if (t->dims[i] > MAX_NUMEL / n)
            return "more than 2^56 elements";
        n *= t->dims[i];
    }
    unsigned axes = ((1u << IR_NUM_AXES) - 1) & ~(1u << IR_AXIS_NONE), split = 0;
    if (t->partial & ~axes)
        return "an unknown partial axis";
    for (int i = 0; i < t->ndim; i++) {
        ir_axis over[IR_MAX_SHARD_AXES];
        for (int k = ir_shard_axes(t, i, over) - 1; k >= 0; k--) {
            if (over[k] >= IR_NUM_AXES)
                return "an unknown shard axis";
            if (split & (1u << over[k]))
                return "a mesh axis that splits it twice (an axis splits at most one dimension, once)";
            split |= 1u << over[k];
        }
    }
    if (split & t->partial)
        return "a mesh axis it is both split over and partial over (a block of the whole is not a pending sum)";
    return NULL;
}

/* --- module level ----------------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* A name that occurs twice among names[0..n), or NULL. */
static const char *duplicate_name(const char **names, int n)
{
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (int i = 1; i < n; i++)
        if (strcmp(names[i - 1], names[i]) == 0)
            return names[i];
    return NULL;
}

/* Why global g's role (owner, placement, layer) is inconsistent, into why; false if it is fine. */
static bool role_problem(const ir_module *m, const ir_global *g, char *why, size_t len)
{
    const char *kind = ir_global_kind_names[g->kind];
    bool own = g->kind == IR_GLOBAL_PARAM || g->kind == IR_GLOBAL_STASH || g->kind == IR_GLOBAL_FP8_HISTORY ||
               g->kind == IR_GLOBAL_EXPERT_BIAS; /* no companions */
    if (own && g->owner >= 0)
        return snprintf(why, len, "is a %s but names an owner (of=): drop of=",
                        g->kind == IR_GLOBAL_PARAM ? "parameter" : "stash"), true;
    if (g->slots != 1 && (g->kind != IR_GLOBAL_STASH || g->slots < 1))
        return snprintf(why, len, "has slots=%d: only a stash has buffers (slots >= 1)", g->slots), true;
    if ((unsigned)g->span >= IR_NUM_STASH_SPANS || (g->span != IR_STASH_FB && g->kind != IR_GLOBAL_STASH))
        return snprintf(why, len, "has span %d: only a stash has a span other than fb", (int)g->span), true;
    if (!own && (g->owner < 0 || g->owner >= m->nglobals))
        return snprintf(why, len, "(kind=%s) needs of=@<its parameter>: every companion names the parameter it "
                        "belongs to", kind), true;
    const ir_global *o = g->owner >= 0 ? &m->globals[g->owner] : NULL;
    if (o && o->kind != IR_GLOBAL_PARAM)
        return snprintf(why, len, "is of=@%s, which is a %s, not a parameter: name the parameter", o->name,
                        ir_global_kind_names[o->kind]), true;
    if ((unsigned)g->placement >= IR_NUM_PLACEMENTS || (o && g->placement != IR_PLACE_REPLICATED))
        return snprintf(why, len, "has a placement but is not a parameter: its parameter's placement is its own"), true;
    int dim = ir_placement_dim(g->placement, g->type.ndim);
    if (g->placement != IR_PLACE_REPLICATED && (dim < 0 || dim >= g->type.ndim))
        return snprintf(why, len, "is placement=%s, which splits dimension %d, but has %d: row-parallel is for "
                        "[.., out, in] weights, column and vocab for tensors of at least one dimension",
                        ir_placement_names[g->placement], dim, g->type.ndim), true;
    if (o && g->layer != o->layer)
        return snprintf(why, len, "has layer=%d but its parameter @%s has %d: a companion is in its parameter's "
                        "layer", g->layer, o->name, o->layer), true;
    return false;
}

/* Why global g's layout record disagrees with its type (or its owner's), into why; false if fine. */
static bool layout_problem(const ir_module *m, const ir_global *g, char *why, size_t len)
{
    const ir_layout *l = &g->layout;
    const ir_global *o = g->owner >= 0 ? &m->globals[g->owner] : NULL;
    const ir_type *base = o ? &o->type : &g->type; /* the shape the splits' dimensions index */
    char text[128];
    ir_layout_str(l, text, sizeof text);
    bool flat = false;
    for (int k = 0; k < l->nsplits; k++) {
        const ir_split *sp = &l->splits[k];
        if (sp->axis == IR_AXIS_NONE || sp->axis >= IR_NUM_AXES || sp->kind > IR_SPLIT_BALANCED)
            return snprintf(why, len, "has a malformed layout record"), true;
        if (flat)
            return snprintf(why, len, "has layout=[%s]: a flat split is the last", text), true;
        flat = sp->kind == IR_SPLIT_FLAT;
        if (!flat && (sp->dim < 0 || sp->dim >= base->ndim))
            return snprintf(why, len, "has layout=[%s], splitting dimension %d of a %d-dimensional tensor", text,
                            sp->dim, base->ndim), true;
        for (int j = 0; j < k; j++)
            if (l->splits[j].axis == sp->axis)
                return snprintf(why, len, "has layout=[%s], splitting over %s twice", text,
                                ir_axis_name((ir_axis)sp->axis)), true;
    }
    if (o) { /* a companion is split as its parameter is, and maybe further */
        bool prefix = o->layout.nsplits <= l->nsplits;
        for (int k = 0; prefix && k < o->layout.nsplits; k++)
            prefix = !memcmp(&o->layout.splits[k], &l->splits[k], sizeof(ir_split));
        if (!prefix) {
            char own[128];
            return snprintf(why, len, "has layout=[%s] but its parameter @%s has layout=[%s]: a companion's layout "
                            "begins with its parameter's", text, o->name, ir_layout_str(&o->layout, own, sizeof own)), true;
        }
    }
    if (flat) { /* this rank's block of the flattened part the earlier splits left: f32[n/ranks] {shard=[axis]} */
        ir_axis axis = (ir_axis)l->splits[l->nsplits - 1].axis;
        int degree[IR_NUM_AXES];
        ir_axis_degrees(m, degree);
        int64_t part = ir_numel(base); /* the owner's type is its part after the dimension splits */
        ir_axis axes[IR_MAX_SHARD_AXES];
        if (g->type.ndim != 1 || ir_shard_axes(&g->type, 0, axes) != 1 || axes[0] != axis)
            return snprintf(why, len, "has layout=[%s] but is not a 1-D block {shard=[%s]}", text, ir_axis_name(axis)), true;
        if (part != g->type.dims[0] * degree[axis])
            return snprintf(why, len, "has layout=[%s]: %s's %d ranks hold %lld elements of @%s's %lld, which do not "
                            "make it whole", text, ir_axis_name(axis), degree[axis], (long long)g->type.dims[0],
                            o ? o->name : g->name, (long long)part), true;
        return false;
    }
    if (g->type.ndim != base->ndim)
        return snprintf(why, len, "has %d dimensions but its parameter @%s has %d", g->type.ndim, o->name, base->ndim), true;
    for (int d = 0; d < g->type.ndim; d++) { /* the axes splitting d, outer to inner, in both */
        ir_axis typed[IR_MAX_SHARD_AXES];
        int n = ir_shard_axes(&g->type, d, typed), same = 0, recorded = 0;
        for (int k = 0; k < l->nsplits; k++)
            if (l->splits[k].kind != IR_SPLIT_FLAT && l->splits[k].dim == d) {
                same += recorded < n && typed[recorded] == (ir_axis)l->splits[k].axis;
                recorded++;
            }
        if (recorded != n || same != n) {
            char axes[32] = "";
            for (int k = 0; k < n; k++)
                snprintf(axes + strlen(axes), sizeof axes - strlen(axes), "%s%s", k ? "." : "", ir_axis_name(typed[k]));
            return snprintf(why, len, "has layout=[%s] but its type splits dimension %d over %s: the layout record "
                            "and the type's {shard=[...]} say the same", text, d,
                            n ? axes : ir_axis_name(IR_AXIS_NONE)), true;
        }
    }
    return false;
}

static bool verify_globals(verifier *v)
{
    const ir_module *m = v->m;
    const char **names = malloc(sizeof(char *) * (size_t)(m->nglobals + 1));
    bool ok = true;
    for (int i = 0; i < m->nglobals && ok; i++) {
        const ir_global *g = &m->globals[i];
        const char *bad = type_problem(&g->type);
        names[i] = g->name;
        if (!ir_name_ok(g->name))
            ok = vfail(v, "global `%s`: names are a letter or '_' then letters, digits, '_', '.', '-'", g->name ? g->name : "");
        else if (bad)
            ok = vfail(v, "global @%s has a malformed type: %s", g->name, bad);
        else if ((unsigned)g->kind >= IR_NUM_GLOBAL_KINDS || (unsigned)g->init >= IR_NUM_INITS)
            ok = vfail(v, "global @%s has an unknown kind or init", g->name);
        else if (g->init == IR_INIT_NORMAL && !(g->std >= 0 && isfinite(g->std)))
            ok = vfail(v, "global @%s: init=normal needs a finite std >= 0, got %g", g->name, g->std);
        char why[512];
        if (ok && (role_problem(m, g, why, sizeof why) || layout_problem(m, g, why, sizeof why)))
            ok = vfail(v, "global @%s %s", g->name, why);
    }
    const char *dup = ok ? duplicate_name(names, m->nglobals) : NULL;
    if (dup)
        ok = vfail(v, "global @%s is declared twice", dup);
    free(names);
    return ok;
}

static bool verify_func_names(verifier *v)
{
    const ir_module *m = v->m;
    const char **names = malloc(sizeof(char *) * (size_t)(m->nfuncs + 1));
    bool ok = true;
    for (int i = 0; i < m->nfuncs && ok; i++) {
        names[i] = m->funcs[i]->name;
        if (!ir_name_ok(names[i]))
            ok = vfail(v, "function `%s`: names are a letter or '_' then letters, digits, '_', '.', '-'",
                       names[i] ? names[i] : "");
    }
    const char *dup = ok ? duplicate_name(names, m->nfuncs) : NULL;
    if (dup)
        ok = vfail(v, "function %s is defined twice", dup);
    free(names);
    return ok;
}

/* Each function has a kind, and the kinds the passes and the runtime look up (ir_func_of_kind) one
 * function each. */
static bool verify_func_kinds(verifier *v)
{
    const ir_module *m = v->m;
    for (int i = 0; i < m->nfuncs; i++) {
        const ir_func *f = m->funcs[i];
        if ((unsigned)f->kind >= IR_NUM_FUNC_KINDS)
            return vfail(v, "function %s has an unknown kind %d", f->name, (int)f->kind);
        int first = ir_func_of_kind(m, f->kind);
        if (ir_func_kinds[f->kind].unique && first != i)
            return vfail(v, "functions %s and %s are both of kind %s: a module has at most one (passes and train_rank "
                         "find it by its kind)", m->funcs[first]->name, f->name, ir_func_kinds[f->kind].name);
    }
    return true;
}

/* A host global (ir_global.host) is touched by the host_optimizer function, whose globals are all
 * host ones but for the copies that move data between the two memories and an AdamW's gradient
 * (which the host streams down through its staging buffer, ir_host_staging_of), elsewhere by a copy, and by
 * `setup`, which runs once (the ZeRO block of an offloaded parameter cut from it: a GPU's kernel
 * reads the page-locked host memory through its mapping, over the link): a device kernel of the
 * step reads no host memory. */
static bool verify_host_placement(verifier *v)
{
    const ir_module *m = v->m;
    for (int i = 0; i < m->nfuncs; i++) {
        const ir_func *f = m->funcs[i];
        bool host_func = f->kind == IR_FUNC_HOST_OPTIMIZER;
        for (int k = 0; k < f->ninstrs; k++) {
            const ir_instr *in = &f->instrs[k];
            if (in->op == IR_OP_GLOBAL || in->op == IR_OP_COPY || f->kind == IR_FUNC_SETUP)
                continue;
            for (int a = 0; a < in->nargs; a++) {
                int g = ir_global_of(f, in->args[a]);
                bool streamed = host_func && in->op == IR_OP_ADAMW && a == 1;
                if (g >= 0 && m->globals[g].host != host_func && !streamed)
                    return vfail(v, "%s in %s (instruction %d) reads %s global @%s: %s", ir_ops[in->op].name, f->name, k,
                                 host_func ? "the device" : "the host", m->globals[g].name,
                                 host_func ? "the host function reads device memory only through a copy or as AdamW's gradient"
                                           : "only host_optimizer and copies touch host memory");
            }
        }
    }
    return true;
}

/* Instruction i of v->f: a `global` holds the index of the global its @name names (passes and
 * train_rank read the index, the text the name); no other op holds one. */
static bool verify_global_ref(verifier *v, int i)
{
    const ir_instr *in = &v->f->instrs[i];
    const ir_module *m = v->m;
    if (in->op != IR_OP_GLOBAL)
        return in->global == -1 || ifail(v, i, "%s holds a global's index (%d): only `global` does",
                                          ir_ops[in->op].name, in->global);
    if (!in->sym) /* verify_operands: it needs an @name */
        return true;
    if (in->global < 0 || in->global >= m->nglobals)
        return ifail(v, i, "unknown global @%s", in->sym);
    if (strcmp(m->globals[in->global].name, in->sym) != 0)
        return ifail(v, i, "global @%s holds the index of global %d, @%s: a pass left the two apart", in->sym,
                     in->global, m->globals[in->global].name);
    return true;
}

/* Every function's global references, before the module-level checks that read their indices. */
static bool verify_global_refs(verifier *v)
{
    bool ok = true;
    for (int i = 0; i < v->m->nfuncs && ok; i++) {
        v->f = v->m->funcs[i];
        for (int k = 0; k < v->f->ninstrs && ok; k++)
            ok = verify_global_ref(v, k);
    }
    v->f = NULL;
    return ok;
}

/* A parameter held elsewhere (!ir_param_stored: as its bf16 copy and an i16 remainder, or by ZeRO's
 * blocks) has no storage of its own: no function names it; a REMAINDER is a pair with a bf16 COPY
 * of its shape. */
static bool verify_unstored_params(verifier *v)
{
    const ir_module *m = v->m;
    for (int g = 0; g < m->nglobals; g++) {
        const ir_global *r = &m->globals[g];
        if (r->kind != IR_GLOBAL_REMAINDER)
            continue;
        int c = ir_global_companion(m, r->owner, IR_GLOBAL_COPY);
        if (r->type.dtype != IR_I16 || c < 0 || m->globals[c].type.dtype != IR_BF16 ||
            ir_numel(&m->globals[c].type) != ir_numel(&r->type))
            return vfail(v, "global @%s (kind=remainder) must be i16 beside a bf16 copy of @%s of its shape: the "
                         "pair is the fp32 master", r->name, m->globals[r->owner].name);
    }
    for (int i = 0; i < m->nfuncs; i++) {
        const ir_func *f = m->funcs[i];
        for (int k = 0; k < f->ninstrs; k++) {
            int g = f->instrs[k].global;
            if (g >= 0 && !ir_param_stored(m, g))
                return vfail(v, "%s (instruction %d) names @%s, which has no storage: it is held %s", f->name, k,
                             m->globals[g].name, ir_param_remainder(m, g) >= 0
                                 ? "as its bf16 copy and remainder (store_param_remainders): name those"
                                 : "by ZeRO's blocks (@<param>.master_shard): name those, or the working copy");
        }
    }
    return true;
}

static bool verify_module_tables(verifier *v)
{
    const ir_module *m = v->m;
    for (int i = 0; i < m->nconfig; i++)
        if (!ir_name_ok(m->config[i].key) || !m->config[i].value)
            return vfail(v, "config key `%s` is not a name, or has no value", m->config[i].key ? m->config[i].key : "");
    return true;
}

/* The mesh's degrees, as the config gives them: shape inference divides by each, and ir_mesh_of
 * multiplies them in int; ep must divide cp x dp (expert data parallelism is their quotient). */
static bool verify_mesh(verifier *v)
{
    static const ir_cfg keys[] = {IR_CFG_TENSOR_MODEL_PARALLEL_SIZE, IR_CFG_CONTEXT_PARALLEL_SIZE,
                                  IR_CFG_DATA_PARALLEL_SIZE, IR_CFG_PIPELINE_MODEL_PARALLEL_SIZE,
                                  IR_CFG_EXPERT_MODEL_PARALLEL_SIZE};
    long long ranks = 1;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        long long d = ir_cfg_int(v->m, keys[i]);
        ranks *= d >= 1 && d <= INT_MAX ? d : 1;
        if (d < 1 || ranks > INT_MAX)
            return vfail(v, "config %s = %lld: each mesh degree must be at least 1, and their product at most %d",
                         ir_cfgs[keys[i]].key, d, INT_MAX);
    }
    if (ir_module_mesh(v->m).degree[IR_AXIS_EDP] < 1)
        return vfail(v, "config: expert_model_parallel_size does not divide context_parallel_size x data_parallel_size");
    return true;
}

/* --- the schedule ------------------------------------------------------------------------ */

/* Writes "schedule P, step I (`STEP`): WHAT" (i < 0: "schedule P: WHAT"). */
static bool PRINTF(4) step_fail(verifier *v, ir_prog p, int i, const char *fmt, ...)
{
    char what[512], step[400] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (i >= 0)
        ir_sched_step_str(v->m, &v->m->progs[p].steps[i], step, sizeof step);
    if (i >= 0)
        return vfail(v, "schedule %s, step %d (`%s`): %s", ir_prog_names[p], i, step, what);
    return vfail(v, "schedule %s: %s", ir_prog_names[p], what);
}

/* Whether f's input or output (op) of the step's role is the one the step names (@sym). */
static bool has_step_io(const ir_func *f, ir_op op, const ir_sched_step *s)
{
    int i = ir_find_role(f, op, s->role);
    return s->role.kind != IR_ROLE_NONE && i >= 0 && s->sym && !strcmp(f->instrs[i].sym, s->sym);
}

/* Per span, the fewest buffers among the stash globals of that span f references (0: none): the
 * slots a call may name. */
static void stash_slots(const ir_module *m, const ir_func *f, int *slots)
{
    for (int k = 0; k < IR_NUM_STASH_SPANS; k++)
        slots[k] = 0;
    for (int i = 0; i < f->ninstrs; i++) {
        int g = f->instrs[i].global;
        const ir_global *gl = g >= 0 ? &m->globals[g] : NULL;
        if (gl && gl->kind == IR_GLOBAL_STASH && (!slots[gl->span] || gl->slots < slots[gl->span]))
            slots[gl->span] = gl->slots;
    }
}

/* The step of program p that calls func on micro-batch mb, or -1. */
static int call_step(const ir_program *prog, int func, int mb)
{
    for (int i = 0; i < prog->nsteps; i++)
        if (prog->steps[i].op == IR_STEP_CALL && prog->steps[i].func == func && prog->steps[i].mb == mb)
            return i;
    return -1;
}

/* One step on its own: a function the program may run, on a micro-batch when its kind runs on
 * one, within the n micro-batches; a send or recv names a tensor its function has. */
static bool verify_step(verifier *v, ir_prog p, int i, long long n)
{
    const ir_sched_step *s = &v->m->progs[p].steps[i];
    if ((unsigned)s->op >= IR_NUM_STEP_OPS)
        return step_fail(v, p, i, "unknown step op %d", (int)s->op);
    if (s->func < 0 || s->func >= v->m->nfuncs)
        return step_fail(v, p, i, "names function #%d, but the module has %d", s->func, v->m->nfuncs);
    const ir_func *f = v->m->funcs[s->func];
    const ir_func_kind_info *k = &ir_func_kinds[f->kind];
    if (!k->progs)
        return step_fail(v, p, i, "%s (kind %s) is run by train_rank itself (at start-up, or for --skip-nan-steps), "
                         "not by a schedule", f->name, k->name);
    if (!(k->progs & (1u << p)))
        return step_fail(v, p, i, "%s (kind %s) runs in schedule %s, not %s", f->name, k->name,
                         ir_prog_names[__builtin_ctz(k->progs)], ir_prog_names[p]);
    if (k->per_micro_batch && s->mb < 0)
        return step_fail(v, p, i, "%s (kind %s) runs on a micro-batch: give mb=0..%lld", f->name, k->name, n - 1);
    if (!k->per_micro_batch && s->mb >= 0)
        return step_fail(v, p, i, "%s (kind %s) runs once a program, not on a micro-batch: drop mb=", f->name, k->name);
    if (s->mb >= n)
        return step_fail(v, p, i, "micro-batch %d is out of range: accum_steps is %lld (micro-batches 0..%lld)", s->mb,
                         n, n - 1);
    for (int span = 0; span < IR_NUM_STASH_SPANS; span++) {
        int slots = v->slots[s->func * IR_NUM_STASH_SPANS + span], slot = s->slot[span];
        const char *key = ir_stash_slot_keys[span], *name = ir_stash_span_names[span];
        if (s->op == IR_STEP_CALL && slots && slot < 0)
            return step_fail(v, p, i, "%s reads or writes stash globals of span %s: give their buffer, %s=0..%d",
                             f->name, name, key, slots - 1);
        if (slot >= 0 && (s->op != IR_STEP_CALL || !slots))
            return step_fail(v, p, i, "%s= names a stash buffer, but %s", key, s->op != IR_STEP_CALL
                             ? "this is not a call" : "the function touches no stash global of that span");
        if (slot >= slots && slots)
            return step_fail(v, p, i, "%s %d is out of range: %s's stash globals of span %s have %d buffers", key, slot,
                             f->name, name, slots);
    }
    if (s->op == IR_STEP_CALL)
        return true;
    bool send = s->op == IR_STEP_SEND;
    if (!has_step_io(f, send ? IR_OP_OUTPUT : IR_OP_INPUT, s))
        return step_fail(v, p, i, "%s has no `%s @%s` with a role to %s", f->name, send ? "output" : "input",
                         s->sym ? s->sym : "?", send ? "send" : "receive into");
    if (s->peer != 1 && s->peer != -1)
        return step_fail(v, p, i, "the peer must be the next or the previous pipeline stage, got %d", s->peer);
    int call = call_step(&v->m->progs[p], s->func, s->mb);
    if (send ? call > i : call < i)
        return step_fail(v, p, i, "%s the call of %s on micro-batch %d (step %d)", send ? "comes before" : "comes after",
                         f->name, s->mb, call);
    return true;
}

/* The program as a whole: every function whose kind it runs is called once on each of the n
 * micro-batches, or once; the once-a-program calls (reduce, optimizer) follow every micro-batch
 * call, in kind order: the update sees every micro-batch's gradients, reduced. */
static bool verify_program(verifier *v, ir_prog p, long long n)
{
    const ir_module *m = v->m;
    const ir_program *prog = &m->progs[p];
    for (int i = 0; i < prog->nsteps; i++)
        if (!verify_step(v, p, i, n))
            return false;
    for (int fi = 0; fi < m->nfuncs; fi++) {
        const ir_func_kind_info *k = &ir_func_kinds[m->funcs[fi]->kind];
        if (!(k->progs & (1u << p)))
            continue;
        long long want = k->per_micro_batch ? n : 1, calls = 0;
        for (int i = 0; i < prog->nsteps; i++)
            calls += prog->steps[i].op == IR_STEP_CALL && prog->steps[i].func == fi;
        if (calls != want)
            return step_fail(v, p, -1, "calls %s (kind %s) %lld times: it runs %s", m->funcs[fi]->name, k->name, calls,
                             k->per_micro_batch ? "once on each micro-batch (accum_steps of them)" : "once a program");
        for (int mb = 0; k->per_micro_batch && mb < n; mb++) /* n calls, n micro-batches: none missing is none twice */
            if (call_step(prog, fi, mb) < 0)
                return step_fail(v, p, -1, "calls %s on no micro-batch %d: it runs once on each of 0..%lld",
                                 m->funcs[fi]->name, mb, n - 1);
    }
    int last_mb = -1, last_once = -1;
    for (int i = 0; i < prog->nsteps; i++)
        if (prog->steps[i].mb >= 0)
            last_mb = i;
    for (int i = 0; i < prog->nsteps; i++) {
        const ir_sched_step *s = &prog->steps[i];
        if (s->op != IR_STEP_CALL || s->mb >= 0)
            continue;
        if (i < last_mb)
            return step_fail(v, p, i, "comes before the micro-batch step %d: a once-a-program call follows them all",
                             last_mb);
        if (last_once >= 0 && m->funcs[s->func]->kind < m->funcs[prog->steps[last_once].func]->kind)
            return step_fail(v, p, i, "comes after step %d: kind %s runs before kind %s", last_once,
                             ir_func_kinds[m->funcs[s->func]->kind].name,
                             ir_func_kinds[m->funcs[prog->steps[last_once].func]->kind].name);
        last_once = i;
    }
    return true;
}

/* Each program that is there (pass_schedule writes them; a module before it has none). */
static bool verify_programs(verifier *v);
static bool verify_schedule(verifier *v)
{
    v->slots = malloc(sizeof(int) * IR_NUM_STASH_SPANS * ((size_t)v->m->nfuncs + 1));
    for (int f = 0; f < v->m->nfuncs; f++)
        stash_slots(v->m, v->m->funcs[f], &v->slots[f * IR_NUM_STASH_SPANS]);
    bool ok = verify_programs(v);
    free(v->slots);
    v->slots = NULL;
    return ok;
}

static bool verify_programs(verifier *v)
{
    long long n = ir_cfg_int(v->m, IR_CFG_ACCUM_STEPS);
    for (int p = 0; p < IR_NUM_PROGS; p++) {
        if (!v->m->progs[p].nsteps)
            continue;
        if (n < 1)
            return step_fail(v, (ir_prog)p, -1, "accum_steps is %lld: the programs run on micro-batches 0..accum_steps-1, "
                             "so it must be >= 1", n);
        if (!verify_program(v, (ir_prog)p, n))
            return false;
    }
    return true;
}

/* --- instructions ------------------------------------------------------------------------- */

static bool verify_values(verifier *v)
{
    const ir_func *f = v->f;
    for (int x = 0; x < f->nvals; x++) {
        const ir_value *val = &f->vals[x];
        const char *bad = type_problem(&val->type);
        if (val->def < 0 || val->def >= f->ninstrs)
            return vfail(v, "value %%%d names instruction %d as its definition, but there are %d", x, val->def, f->ninstrs);
        if (bad)
            return vfail(v, "value %%%d (defined by instr %d) has a malformed type: %s", x, val->def, bad);
        if ((unsigned)val->mem > IR_MEM_VIEW)
            return vfail(v, "value %%%d has an unknown memory kind %d", x, (int)val->mem);
    }
    return true;
}

/* Op, counts, and SSA: results are this instruction's values, operands were defined earlier
 * (defined[] marks the values of instructions 0..i-1). Failures here cannot print the line. */
static bool verify_structure(verifier *v, int i, bool *defined)
{
    const ir_func *f = v->f;
    const ir_instr *in = &f->instrs[i];
    if ((unsigned)in->op >= IR_NUM_OPS)
        return sfail(v, i, "op number %d is not in the op table", (int)in->op);
    const ir_op_info *info = &ir_ops[in->op];
    if (!ir_op_nargs_ok(in->op, in->nargs))
        return sfail(v, i, "wrong operand count for %s: expected %s%d%s, got %d", info->name,
                     info->nargs < 0 ? "at least " : "", info->nargs < 0 ? 1 : info->nargs,
                     ir_op_has(in->op, IR_OPF_ROW_BOUND) ? " (and maybe a row bound)" : "", in->nargs);
    if (in->nres != ir_instr_nres(in->op, in->attr))
        return sfail(v, i, "wrong result count for %s: expected %d, got %d", info->name,
                     ir_instr_nres(in->op, in->attr), in->nres);
    for (int a = 0; a < in->nargs; a++) {
        int x = in->args[a];
        if (x < 0 || x >= f->nvals || !defined[x])
            return sfail(v, i, "operand %d (%%%d) is used before it is defined", a, x);
    }
    for (int r = 0; r < in->nres; r++) {
        int x = in->res[r];
        if (x < 0 || x >= f->nvals || f->vals[x].def != i || defined[x])
            return sfail(v, i, "result %d (%%%d) is not a value defined by this instruction", r, x);
        defined[x] = true;
    }
    return true;
}

/* Whether operand a of `in` must come from `global`: persistent state the op writes, or (grad_ready)
 * the gradient global whose readiness it marks (the host finds its copies' mark by that global). */
static bool global_operand(const ir_instr *in, int a)
{
    switch (in->op) {
    case IR_OP_GRAD_READY:
    case IR_OP_ACCUMULATE:
    case IR_OP_MATMUL_ACCUMULATE:
    case IR_OP_FP8_MATMUL_ACCUMULATE:
    case IR_OP_MOE_GROUPED_WGRAD_ACCUMULATE:
    case IR_OP_FP8_GROUPED_WGRAD_ACCUMULATE:
    case IR_OP_ZERO: return a == 0;
    case IR_OP_ADAMW: return a < 4 || a == 7; /* p, g, m, v, and the working copy it refreshes */
    default: return false;
    }
}

static bool verify_operands(verifier *v, int i)
{
    const ir_func *f = v->f;
    const ir_instr *in = &f->instrs[i];
    const char *name = ir_ops[in->op].name;
    if (ir_op_takes_sym(in->op) && !ir_name_ok(in->sym))
        return ifail(v, i, "%s needs an @name made of letters, digits, '_', '.', '-'", name);
    if (!ir_op_takes_sym(in->op) && in->sym)
        return ifail(v, i, "%s takes no @name", name);
    if (in->role.kind != IR_ROLE_NONE && in->op != IR_OP_INPUT && in->op != IR_OP_OUTPUT)
        return ifail(v, i, "%s takes no role (only input and output do)", name);
    if (in->role.kind != IR_ROLE_NONE && !ir_roles[in->role.kind].many && ir_find_role(f, in->op, in->role) != i)
        return ifail(v, i, "an earlier %s has this one's role %s (the runtime finds a value by its role)", name,
                     ir_roles[in->role.kind].name);
    double slot = in->op == IR_OP_GRAD_READY ? in->attr[IR_ATTR_GRAD_READY_SLOT] : 0;
    if (slot < 0 || slot != (int)slot)
        return ifail(v, i, "grad_ready's slot must be a whole number from 0 (a device event's index), got %g", slot);
    int bound = ir_row_bound(in);
    if (bound >= 0) {
        const ir_type *b = &f->vals[bound].type, *x = &f->vals[in->args[0]].type;
        char got[256];
        ir_type_str(b, got, sizeof got);
        if (b->dtype != IR_I32 || b->ndim != 1)
            return ifail(v, i, "%s's row bound %%%d must be i32[S] (a dispatch's local counts), got %s", name, bound,
                         got);
        if (x->ndim < 1)
            return ifail(v, i, "%s has a row bound but its operand %%%d has no rows", name, in->args[0]);
    }
    for (int a = 0; a < in->nargs; a++) {
        const ir_instr *def = &f->instrs[f->vals[in->args[a]].def];
        if (global_operand(in, a) && def->op != IR_OP_GLOBAL)
            return ifail(v, i, "operand %d (%%%d) of %s must be a `global @name` value, got the result of %s", a,
                         in->args[a], name, ir_ops[def->op].name);
    }
    return true;
}

/* Re-infers the result types from the operands and compares them with the recorded ones. */
static bool verify_types(verifier *v, int i)
{
    const ir_func *f = v->f;
    const ir_instr *in = &f->instrs[i];
    ir_type *argt = malloc(sizeof(ir_type) * (size_t)in->nargs), res[IR_MAX_RES] = {0};
    for (int a = 0; a < in->nargs; a++)
        argt[a] = f->vals[in->args[a]].type;
    if (ir_op_has(in->op, IR_OPF_EXPLICIT_TYPE))
        res[0] = f->vals[in->res[0]].type;
    char why[256];
    bool ok = ir_infer_results(v->m, in, argt, res, why, sizeof why);
    free(argt);
    if (!ok)
        return ifail(v, i, "%s", why);
    for (int r = 0; r < in->nres; r++) {
        /* Shapes and dtypes come from the op; the sharding annotations are the shard pass's
         * (infer does not propagate them), so they are not compared here. */
        ir_type rec = f->vals[in->res[r]].type, got_t = res[r];
        ir_shard_clear(&rec);
        ir_shard_clear(&got_t);
        rec.partial = got_t.partial = 0;
        if (!ir_type_eq(&rec, &got_t)) {
            char want[256], got[256];
            ir_type_str(&res[r], want, sizeof want);
            ir_type_str(&f->vals[in->res[r]].type, got, sizeof got);
            return ifail(v, i, "result %%%d is recorded as %s but its operands give %s", in->res[r], got, want);
        }
    }
    return true;
}

/* --- memory plan -------------------------------------------------------------------------- */

/* An arena value: bytes [lo, hi) from instruction start to end, both included. */
typedef struct {
    int64_t lo, hi;
    int start, end;
    int value;
} span;

/* Where each result may live once planned: arena, a view of its operand (reshape), or a global's own storage. */
static bool verify_placement(verifier *v, int i, int x)
{
    const ir_func *f = v->f;
    const ir_value *val = &f->vals[x];
    ir_op op = f->instrs[i].op;
    int64_t bytes = (int64_t)ir_bytes(&val->type);
    if (val->mem == IR_MEM_NONE)
        return ifail(v, i, "%%%d has no memory placement (@+offset, @view or @global)", x);
    if ((op == IR_OP_GLOBAL) != (val->mem == IR_MEM_GLOBAL))
        return ifail(v, i, "%%%d: @global is the placement of global results, and only of them", x);
    if (val->mem == IR_MEM_VIEW && !ir_op_has(op, IR_OPF_VIEW))
        return ifail(v, i, "%%%d: only reshape and rows results can be @view", x);
    if (val->mem == IR_MEM_ARENA && (val->offset < 0 || val->offset % 64))
        return ifail(v, i, "%%%d: arena offset %lld is not a non-negative multiple of 64", x, (long long)val->offset);
    if (val->mem == IR_MEM_ARENA && val->offset > f->arena_bytes - bytes)
        return ifail(v, i, "%%%d: bytes [%lld, %lld) run past the end of the %lld-byte arena", x, (long long)val->offset,
                     (long long)(val->offset + bytes), (long long)f->arena_bytes);
    return true;
}

/* Live ranges of the arena values: from the definition to the last use, where a use of a view
 * is a use of the value it views, `output` keeps its operand to the end of the function, and an
 * overlapped collective its operands until it is joined (ir_reads_until).
 * Returns the spans in order of definition. */
static span *live_spans(const ir_func *f, int *nspans)
{
    int *root = malloc(sizeof(int) * (size_t)(f->nvals + 1)), *last = malloc(sizeof(int) * (size_t)(f->nvals + 1));
    for (int i = 0; i < f->ninstrs; i++) {
        const ir_instr *in = &f->instrs[i];
        for (int a = 0; a < in->nargs; a++) {
            int until = ir_reads_until(f, i); /* an overlapped collective reads until it is joined */
            int r = root[in->args[a]], end = in->op == IR_OP_OUTPUT || until >= f->ninstrs ? f->ninstrs - 1 : until;
            last[r] = end > last[r] ? end : last[r];
        }
        for (int r = 0; r < in->nres; r++) {
            int x = in->res[r];
            root[x] = f->vals[x].mem == IR_MEM_VIEW ? root[in->args[0]] : x;
            last[x] = i;
        }
    }
    span *s = malloc(sizeof(span) * (size_t)(f->nvals + 1));
    int n = 0;
    for (int i = 0; i < f->ninstrs; i++)
        for (int r = 0; r < f->instrs[i].nres; r++) {
            const ir_value *val = &f->vals[f->instrs[i].res[r]];
            if (val->mem == IR_MEM_ARENA)
                s[n++] = (span){val->offset, val->offset + (int64_t)ir_bytes(&val->type), i, last[f->instrs[i].res[r]],
                                f->instrs[i].res[r]};
        }
    free(root);
    free(last);
    *nspans = n;
    return s;
}

/* Position in active[0..n) (sorted by lo, pairwise disjoint) where lo belongs. */
static int active_pos(const span *const *active, int n, int64_t lo)
{
    int a = 0, b = n;
    while (a < b) {
        int mid = (a + b) / 2;
        if (active[mid]->lo < lo)
            a = mid + 1;
        else
            b = mid;
    }
    return a;
}

static bool report_overlap(verifier *v, const span *s, const span *o)
{
    return ifail(v, s->start, "%%%d at bytes [%lld, %lld) shares bytes with %%%d at [%lld, %lld), which is live from instr %d to %d",
                 s->value, (long long)s->lo, (long long)s->hi, o->value, (long long)o->lo, (long long)o->hi, o->start, o->end);
}

/* Sweeps the instructions in order, keeping the live arena values sorted by offset. They never
 * overlap (the sweep stops at the first overlap), so a new value overlaps a live one exactly
 * when it overlaps its neighbour on either side. An instruction's results are placed while its
 * operands are still live, except one operand the op table lets result 0 overwrite. */
static bool verify_no_overlap(verifier *v, span *s, int n)
{
    const ir_func *f = v->f;
    /* spans by last use, so each instruction frees its dead values once */
    int *end_head = malloc(sizeof(int) * (size_t)(f->ninstrs + 1)), *end_next = malloc(sizeof(int) * (size_t)(n + 1));
    const span **active = malloc(sizeof(span *) * (size_t)(n + 1));
    bool *left = calloc((size_t)n + 1, sizeof(bool)); /* spans handed over to an in-place result */
    for (int i = 0; i < f->ninstrs; i++)
        end_head[i] = -1;
    for (int k = 0; k < n; k++) {
        end_next[k] = end_head[s[k].end];
        end_head[s[k].end] = k;
    }
    bool ok = true;
    int nactive = 0, k = 0;
    for (int i = 0; i < f->ninstrs && ok; i++) {
        /* An operand the op may overwrite (ops.def's inplace bits) that dies here leaves first,
         * when result 0 sits exactly on its bytes; never an input, which the host may read after
         * the call. */
        const ir_instr *in = &f->instrs[i];
        for (int a = 0; a < in->nargs && in->nres && ir_ops[in->op].inplace; a++) {
            int d = in->args[a];
            while (f->vals[d].mem == IR_MEM_VIEW)
                d = f->instrs[f->vals[d].def].args[0];
            int pos = active_pos(active, nactive, f->vals[in->res[0]].offset);
            if ((ir_ops[in->op].inplace & (1u << a)) && f->instrs[f->vals[d].def].op != IR_OP_INPUT &&
                f->vals[in->res[0]].mem == IR_MEM_ARENA && pos < nactive &&
                active[pos]->value == d && active[pos]->end == i && active[pos]->lo == f->vals[in->res[0]].offset) {
                left[active[pos] - s] = true;
                memmove(&active[pos], &active[pos + 1], sizeof(span *) * (size_t)(nactive - pos - 1));
                nactive--;
            }
        }
        for (; k < n && s[k].start == i && ok; k++) {
            int pos = active_pos(active, nactive, s[k].lo);
            if (pos > 0 && active[pos - 1]->hi > s[k].lo)
                ok = report_overlap(v, &s[k], active[pos - 1]);
            else if (pos < nactive && active[pos]->lo < s[k].hi)
                ok = report_overlap(v, &s[k], active[pos]);
            memmove(&active[pos + 1], &active[pos], sizeof(span *) * (size_t)(nactive - pos));
            active[pos] = &s[k];
            nactive++;
        }
        for (int e = end_head[i]; e >= 0 && ok; e = end_next[e]) {
            if (left[e])
                continue;
            int pos = active_pos(active, nactive, s[e].lo);
            memmove(&active[pos], &active[pos + 1], sizeof(span *) * (size_t)(nactive - pos - 1));
            nactive--;
        }
    }
    free(end_head);
    free(end_next);
    free(active);
    free(left);
    return ok;
}

static bool verify_memory(verifier *v)
{
    const ir_func *f = v->f;
    for (int i = 0; i < f->ninstrs; i++)
        for (int r = 0; r < f->instrs[i].nres; r++)
            if (!verify_placement(v, i, f->instrs[i].res[r]))
                return false;
    int n;
    span *s = live_spans(f, &n);
    bool ok = verify_no_overlap(v, s, n);
    free(s);
    return ok;
}

/* --- functions ----------------------------------------------------------------------------- */

static bool verify_func(verifier *v)
{
    const ir_func *f = v->f;
    if (!verify_values(v))
        return false;
    bool *defined = calloc((size_t)f->nvals + 1, sizeof(bool)), ok = true;
    for (int i = 0; i < f->ninstrs && ok; i++)
        ok = verify_structure(v, i, defined) && verify_operands(v, i) && verify_types(v, i);
    for (int x = 0; x < f->nvals && ok; x++)
        if (!defined[x])
            ok = vfail(v, "value %%%d is not a result of instr %d, which it names as its definition", x, f->vals[x].def);
    free(defined);
    if (ok && f->arena_bytes < 0)
        return vfail(v, "arena size %lld is negative", (long long)f->arena_bytes);
    return ok && (f->arena_bytes == 0 || verify_memory(v));
}

bool ir_verify(const ir_module *m, char *err, size_t errlen)
{
    ir_ops_init();
    verifier v = {.m = m, .err = err, .errlen = errlen};
    if (!verify_mesh(&v) || !verify_globals(&v) || !verify_func_names(&v) || !verify_func_kinds(&v) ||
        !verify_global_refs(&v) || !verify_host_placement(&v) || !verify_unstored_params(&v) ||
        !verify_module_tables(&v))
        return false;
    for (int i = 0; i < m->nfuncs; i++) {
        v.f = m->funcs[i];
        if (!verify_func(&v))
            return false;
    }
    v.f = NULL;
    if (!verify_schedule(&v))
        return false;
    if (err && errlen)
        err[0] = '\0';
    return true;
}
