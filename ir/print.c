/* print.c — writes a module as text (config, globals, functions, schedule programs); parse.c reads it back. */
#include "ir_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const ir_global_kind_names[IR_NUM_GLOBAL_KINDS] = {"param", "grad", "adam_m", "adam_v", "copy", "grad_shard",
                                                                "master_shard", "stash", "fp8_history", "expert_bias",
                                                                "remainder"};
const char *const ir_placement_names[IR_NUM_PLACEMENTS] = {"replicated", "column", "row", "vocab"};
const char *const ir_stash_span_names[IR_NUM_STASH_SPANS] = {"fb", "fw", "bw"};
const char *const ir_stash_slot_keys[IR_NUM_STASH_SPANS] = {"slot", "slot_fw", "slot_bw"};
const char *const ir_init_names[IR_NUM_INITS] = {"zeros", "ones", "normal"};
const char *const ir_prog_names[IR_NUM_PROGS] = {"train", "eval"};
const char *const ir_step_op_names[IR_NUM_STEP_OPS] = {"call", "send", "recv"};

void ir_buf_printf(ir_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t n = (size_t)vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        b->s = realloc(b->s, cap);
        if (!b->s) {
            fprintf(stderr, "mcc: out of host memory printing the IR (%zu bytes)\n", cap);
            abort();
        }
        b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += n;
}

static char *buf_take(ir_buf *b) { return b->s ? b->s : strdup(""); }

/* The shortest %g form that reads back as the same double, so attributes round-trip exactly
 * and still read as written (eps=1e-05, not 1.0000000000000001e-05). */
static void print_double(ir_buf *b, double v)
{
    char s[40];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(s, sizeof s, "%.*g", prec, v);
        if (strtod(s, NULL) == v)
            break;
    }
    ir_buf_printf(b, "%s", s);
}

/* An attribute: its value, or with a rank term `base+step*axis...` (a term per axis with a step,
 * in ir_axis order; the base left out when 0). */
static void print_attr(ir_buf *b, double v, const ir_rank_term *t)
{
    bool first = v == 0 && ir_rank_term_any(t);
    if (!first)
        print_double(b, v);
    for (int a = IR_AXIS_NONE + 1; a < IR_NUM_AXES; a++) {
        if (t->step[a] == 0)
            continue;
        if (!first && t->step[a] >= 0)
            ir_buf_printf(b, "+");
        print_double(b, t->step[a]);
        ir_buf_printf(b, "*%s", ir_axis_name((ir_axis)a));
        first = false;
    }
}

static void print_type(ir_buf *b, const ir_type *t)
{
    char s[256];
    ir_type_str(t, s, sizeof s);
    ir_buf_printf(b, "%s", s);
}

static void print_mem(ir_buf *b, const ir_value *v)
{
    switch (v->mem) {
    case IR_MEM_ARENA: ir_buf_printf(b, " @%+lld", (long long)v->offset); break;
    case IR_MEM_VIEW: ir_buf_printf(b, " @view"); break;
    case IR_MEM_GLOBAL: ir_buf_printf(b, " @global"); break;
    case IR_MEM_NONE: break;
    }
}

/* Config values are quoted; \" \\ and \n are the only escapes. */
static void print_string(ir_buf *b, const char *s)
{
    ir_buf_printf(b, "\"");
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            ir_buf_printf(b, "\\%c", *s);
        else if (*s == '\n')
            ir_buf_printf(b, "\\n");
        else
            ir_buf_printf(b, "%c", *s);
    }
    ir_buf_printf(b, "\"");
}

/* An input's or output's role: {role=R[, stage=S][, index=K]}; none unprinted. */
static void print_role(ir_buf *b, const ir_role *r)
{
    const ir_role_info *info = &ir_roles[r->kind];
    if (r->kind == IR_ROLE_NONE)
        return;
    ir_buf_printf(b, " {role=%s", info->name);
    if (info->staged)
        ir_buf_printf(b, ", stage=%d", r->stage);
    if (info->indexed)
        ir_buf_printf(b, ", index=%d", r->index);
    ir_buf_printf(b, "}");
}

/* %r[, ...] = op [@sym] [%a, ...] [{attr=v, ...}] [{role=...}] [: type [mem], ...] */
void ir_print_instr_to(ir_buf *b, const ir_func *f, const ir_instr *in)
{
    const ir_op_info *info = &ir_ops[in->op];
    for (int r = 0; r < in->nres; r++)
        ir_buf_printf(b, "%s%%%d", r ? ", " : "", in->res[r]);
    ir_buf_printf(b, "%s%s", in->nres ? " = " : "", info->name);
    if (in->sym)
        ir_buf_printf(b, " @%s", in->sym);
    for (int a = 0; a < in->nargs; a++)
        ir_buf_printf(b, "%s%%%d", a ? ", " : " ", in->args[a]);
    bool opened = false;
    for (int k = 0; k < info->nattrs; k++) {
        double v = in->attr[k];
        if (info->printed_when_set >> k & 1 && v == 0 && !ir_rank_term_any(&in->per_rank[k]))
            continue;
        ir_buf_printf(b, "%s%s=", opened ? ", " : " {", info->attr_names[k]);
        opened = true;
        bool axis = k == info->axis_attr && v > IR_AXIS_NONE && v < IR_NUM_AXES && v == (int)v &&
                    !ir_rank_term_any(&in->per_rank[k]);
        if (axis)
            ir_buf_printf(b, "%s", ir_axis_name((ir_axis)v)); /* {axis=tp}: a number where it is none */
        else
            print_attr(b, v, &in->per_rank[k]);
    }
    if (opened)
        ir_buf_printf(b, "}");
    print_role(b, &in->role);
    for (int r = 0; r < in->nres; r++) {
        ir_buf_printf(b, "%s", r ? ", " : " : ");
        print_type(b, &f->vals[in->res[r]].type);
        print_mem(b, &f->vals[in->res[r]]);
    }
}

static void print_func(ir_buf *b, const ir_func *f)
{
    const char *kind = (unsigned)f->kind < IR_NUM_FUNC_KINDS ? ir_func_kinds[f->kind].name : "?";
    ir_buf_printf(b, "func %s {kind=%s, arena=%lld} {\n", f->name, kind, (long long)f->arena_bytes);
    for (int i = 0; i < f->ninstrs; i++) {
        ir_buf_printf(b, "  ");
        ir_print_instr_to(b, f, &f->instrs[i]);
        ir_buf_printf(b, "\n");
    }
    ir_buf_printf(b, "}\n");
}

char *ir_print_func(const ir_module *m, const ir_func *f)
{
    ir_ops_init();
    ir_buf b = {0};
    print_func(&b, f);
    return buf_take(&b);
}

static void print_global(ir_buf *b, const ir_module *m, const ir_global *g)
{
    ir_buf_printf(b, "global @%s : ", g->name);
    print_type(b, &g->type);
    ir_buf_printf(b, " {kind=%s, init=%s", ir_global_kind_names[g->kind], ir_init_names[g->init]);
    if (g->init == IR_INIT_NORMAL) {
        ir_buf_printf(b, ", std=");
        print_double(b, g->std);
    }
    if (g->owner >= 0)
        ir_buf_printf(b, ", of=@%s", m->globals[g->owner].name);
    if (g->placement != IR_PLACE_REPLICATED)
        ir_buf_printf(b, ", placement=%s", ir_placement_names[g->placement]);
    if (g->layer >= 0)
        ir_buf_printf(b, ", layer=%d", g->layer);
    if (g->kind == IR_GLOBAL_STASH)
        ir_buf_printf(b, ", slots=%d", g->slots);
    if (g->span != IR_STASH_FB)
        ir_buf_printf(b, ", span=%s", (unsigned)g->span < IR_NUM_STASH_SPANS ? ir_stash_span_names[g->span] : "?");
    char layout[128];
    if (g->layout.nsplits)
        ir_buf_printf(b, ", layout=[%s]", ir_layout_str(&g->layout, layout, sizeof layout));
    ir_buf_printf(b, "%s%s}\n", g->no_decay ? ", no_decay" : "", g->host ? ", host" : "");
}

/* Sections are separated by one blank line. */
static void section_break(ir_buf *b)
{
    if (b->len)
        ir_buf_printf(b, "\n");
}

/* call F [mb=I] [slot=K] [slot_fw=K] [slot_bw=K] | send F @x mb=I to=next|prev | recv F @x mb=I from=next|prev. Out-of-range
 * fields print as `?`, so the verifier can quote a broken step. */
static void print_step(ir_buf *b, const ir_module *m, const ir_sched_step *s)
{
    bool op_ok = (unsigned)s->op < IR_NUM_STEP_OPS, p2p = op_ok && s->op != IR_STEP_CALL;
    ir_buf_printf(b, "%s %s", op_ok ? ir_step_op_names[s->op] : "?",
                  s->func >= 0 && s->func < m->nfuncs ? m->funcs[s->func]->name : "?");
    if (p2p)
        ir_buf_printf(b, " @%s", s->sym ? s->sym : "?");
    if (s->mb >= 0)
        ir_buf_printf(b, " mb=%d", s->mb);
    for (int k = 0; k < IR_NUM_STASH_SPANS; k++)
        if (s->slot[k] >= 0)
            ir_buf_printf(b, " %s=%d", ir_stash_slot_keys[k], s->slot[k]);
    if (p2p)
        ir_buf_printf(b, " %s=%s", s->op == IR_STEP_SEND ? "to" : "from", s->peer > 0 ? "next" : s->peer < 0 ? "prev" : "?");
}

void ir_sched_step_str(const ir_module *m, const ir_sched_step *s, char *buf, size_t len)
{
    ir_buf b = {0};
    print_step(&b, m, s);
    snprintf(buf, len, "%s", b.s);
    free(b.s);
}

char *ir_print_module(const ir_module *m)
{
    ir_ops_init();
    ir_buf b = {0};
    if (m->nconfig) {
        ir_buf_printf(&b, "config {\n");
        for (int i = 0; i < m->nconfig; i++) {
            ir_buf_printf(&b, "  %s = ", m->config[i].key);
            print_string(&b, m->config[i].value);
            ir_buf_printf(&b, "\n");
        }
        ir_buf_printf(&b, "}\n");
    }
    if (m->nglobals)
        section_break(&b);
    for (int i = 0; i < m->nglobals; i++)
        print_global(&b, m, &m->globals[i]);
    for (int i = 0; i < m->nfuncs; i++) {
        section_break(&b);
        print_func(&b, m->funcs[i]);
    }
    for (int p = 0; p < IR_NUM_PROGS; p++) {
        if (!m->progs[p].nsteps)
            continue;
        section_break(&b);
        ir_buf_printf(&b, "schedule %s {\n", ir_prog_names[p]);
        for (int i = 0; i < m->progs[p].nsteps; i++) {
            ir_buf_printf(&b, "  ");
            print_step(&b, m, &m->progs[p].steps[i]);
            ir_buf_printf(&b, "\n");
        }
        ir_buf_printf(&b, "}\n");
    }
    return buf_take(&b);
}


char *ir_print_stages(ir_module *const *stages, int n)
{
    if (n == 1)
        return ir_print_module(stages[0]);
    ir_buf b = {0};
    for (int s = 0; s < n; s++) {
        char *text = ir_print_module(stages[s]);
        ir_buf_printf(&b, "%s; stage %d of %d\n%s", s ? "\n" : "", s, n, text);
        free(text);
    }
    return buf_take(&b);
}
