/* moe_stats.c — an MoE model's router statistics (moe_stats.h). */
#include "moe_stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COUNTS_PREFIX "moe_tokens_per_expert."
#define KEPT_PREFIX "moe_kept_weights."

/* Whether output instruction in of func is named prefix.L; then it is appended to *outs (*n of them). */
static bool take_output(const ir_instr *in, int func, const char *prefix, rt_moe_output **outs, int *n)
{
    if (in->op != IR_OP_OUTPUT || strncmp(in->sym, prefix, strlen(prefix)) != 0)
        return false;
    *outs = realloc(*outs, sizeof **outs * (size_t)(*n + 1));
    (*outs)[*n].func = func;
    snprintf((*outs)[(*n)++].name, sizeof (*outs)->name, "%s", in->sym);
    return true;
}

void rt_moe_stats_open(rt_moe_stats *s, const rt_program *p)
{
    *s = (rt_moe_stats){.aux_func = -1, .z_func = -1};
    for (int func = 0; func < p->m->nfuncs; func++) {
        const ir_func *f = p->m->funcs[func];
        if (f->kind != IR_FUNC_STEP && f->kind != IR_FUNC_FORWARD)
            continue;
        for (int i = 0; i < f->ninstrs; i++) {
            const ir_instr *in = &f->instrs[i];
            if (take_output(in, func, COUNTS_PREFIX, &s->counts, &s->nlayers))
                s->experts = (int)ir_vtype(f, in->args[0])->dims[0];
            else if (take_output(in, func, KEPT_PREFIX, &s->kept, &s->nkept))
                s->pairs = ir_numel(ir_vtype(f, in->args[0]));
        }
        if (rt_program_find(p, func, IR_OP_OUTPUT, "moe_aux_loss") >= 0)
            s->aux_func = func;
        if (rt_program_find(p, func, IR_OP_OUTPUT, "moe_z_loss") >= 0)
            s->z_func = func;
    }
    s->moe = s->nlayers > 0;
    s->has_aux = s->aux_func >= 0, s->has_z = s->z_func >= 0, s->has_kept = s->nkept > 0;
    s->tokens = calloc((size_t)s->nlayers * (size_t)s->experts + 1, sizeof *s->tokens);
    s->buf = calloc((size_t)s->experts + 1, sizeof *s->buf);
    s->weights = calloc((size_t)s->pairs + 1, sizeof *s->weights);
}

void rt_moe_stats_add(rt_moe_stats *s, rt_program *p, int func)
{
    float v;
    if (func == s->aux_func)
        rt_program_get_output(p, func, "moe_aux_loss", &v, sizeof v), s->aux += v, s->aux_calls++;
    if (func == s->z_func)
        rt_program_get_output(p, func, "moe_z_loss", &v, sizeof v), s->z += v, s->z_calls++;
    for (int l = 0; l < s->nlayers; l++) {
        if (s->counts[l].func != func)
            continue;
        rt_program_get_output(p, func, s->counts[l].name, s->buf, sizeof *s->buf * (size_t)s->experts);
        for (int e = 0; e < s->experts; e++)
            s->tokens[(size_t)l * s->experts + e] += s->buf[e];
    }
    for (int l = 0; l < s->nkept; l++) {
        if (s->kept[l].func != func)
            continue;
        rt_program_get_output(p, func, s->kept[l].name, s->weights, sizeof *s->weights * (size_t)s->pairs);
        for (int64_t q = 0; q < s->pairs; q++)
            s->dropped += s->weights[q] == 0;
        s->routed += s->pairs;
    }
}

void rt_moe_stats_step(rt_moe_stats *s, rt_moe_step *out)
{
    *out = (rt_moe_step){.aux = s->aux_calls ? s->aux / s->aux_calls : 0, .z = s->z_calls ? s->z / s->z_calls : 0,
                         .dropped = (double)s->dropped, .routed = (double)s->routed};
    for (int l = 0; l < s->nlayers; l++) {
        const int64_t *t = s->tokens + (size_t)l * s->experts;
        double max = 0, sum = 0;
        for (int e = 0; e < s->experts; e++)
            max = fmax(max, (double)t[e]), sum += (double)t[e];
        if (sum > 0)
            out->imbalance = fmax(out->imbalance, max / (sum / s->experts));
    }
    memset(s->tokens, 0, sizeof *s->tokens * (size_t)s->nlayers * (size_t)s->experts);
    s->aux = s->z = 0;
    s->aux_calls = s->z_calls = 0;
    s->dropped = s->routed = 0;
}

void rt_moe_stats_free(rt_moe_stats *s)
{
    free(s->counts);
    free(s->tokens);
    free(s->buf);
    free(s->kept);
    free(s->weights);
    *s = (rt_moe_stats){.aux_func = -1, .z_func = -1};
}
