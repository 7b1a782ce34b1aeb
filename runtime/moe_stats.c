/* moe_stats.c — an MoE model's router statistics (moe_stats.h). */
#include "moe_stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COUNTS_PREFIX "moe_tokens_per_expert."
#define KEPT_PREFIX "moe_kept_weights."

/* Whether output instruction in is named prefix.L; then its name is appended to *names (*n of them). */
static bool take_output(const ir_instr *in, const char *prefix, char (**names)[48], int *n)
{
    if (in->op != IR_OP_OUTPUT || strncmp(in->sym, prefix, strlen(prefix)) != 0)
        return false;
    *names = realloc(*names, sizeof **names * (size_t)(*n + 1));
    snprintf((*names)[(*n)++], sizeof **names, "%s", in->sym);
    return true;
}

void rt_moe_stats_open(rt_moe_stats *s, const rt_program *p, int func)
{
    *s = (rt_moe_stats){.func = -1};
    const ir_func *f = p->m->funcs[func];
    for (int i = 0; i < f->ninstrs; i++) {
        const ir_instr *in = &f->instrs[i];
        if (take_output(in, COUNTS_PREFIX, &s->names, &s->nlayers))
            s->experts = (int)ir_vtype(f, in->args[0])->dims[0];
        else if (take_output(in, KEPT_PREFIX, &s->kept, &s->nkept))
            s->pairs = ir_numel(ir_vtype(f, in->args[0]));
    }
    if (!s->nlayers)
        return;
    s->func = func;
    s->has_aux = rt_program_find(p, func, IR_OP_OUTPUT, "moe_aux_loss") >= 0;
    s->has_z = rt_program_find(p, func, IR_OP_OUTPUT, "moe_z_loss") >= 0;
    s->tokens = calloc((size_t)s->nlayers * (size_t)s->experts, sizeof *s->tokens);
    s->buf = calloc((size_t)s->experts, sizeof *s->buf);
    s->weights = calloc((size_t)s->pairs + 1, sizeof *s->weights);
}

void rt_moe_stats_add(rt_moe_stats *s, rt_program *p)
{
    float v;
    if (s->has_aux)
        rt_program_get_output(p, s->func, "moe_aux_loss", &v, sizeof v), s->aux += v;
    if (s->has_z)
        rt_program_get_output(p, s->func, "moe_z_loss", &v, sizeof v), s->z += v;
    for (int l = 0; l < s->nlayers; l++) {
        rt_program_get_output(p, s->func, s->names[l], s->buf, sizeof *s->buf * (size_t)s->experts);
        for (int e = 0; e < s->experts; e++)
            s->tokens[(size_t)l * s->experts + e] += s->buf[e];
    }
    for (int l = 0; l < s->nkept; l++) {
        rt_program_get_output(p, s->func, s->kept[l], s->weights, sizeof *s->weights * (size_t)s->pairs);
        for (int64_t q = 0; q < s->pairs; q++)
            s->dropped += s->weights[q] == 0;
        s->routed += s->pairs;
    }
    s->micro_batches++;
}

void rt_moe_stats_step(rt_moe_stats *s, double *aux, double *z, double *imbalance, double *dropped)
{
    int n = s->micro_batches ? s->micro_batches : 1;
    *aux = s->has_aux ? s->aux / n : NAN;
    *z = s->has_z ? s->z / n : NAN;
    *dropped = s->nkept && s->routed ? (double)s->dropped / (double)s->routed : NAN;
    s->dropped = s->routed = 0;
    *imbalance = 0;
    for (int l = 0; l < s->nlayers; l++) {
        const int64_t *t = s->tokens + (size_t)l * s->experts;
        double max = 0, sum = 0;
        for (int e = 0; e < s->experts; e++)
            max = fmax(max, (double)t[e]), sum += (double)t[e];
        if (sum > 0)
            *imbalance = fmax(*imbalance, max / (sum / s->experts));
    }
    memset(s->tokens, 0, sizeof *s->tokens * (size_t)s->nlayers * (size_t)s->experts);
    s->aux = s->z = 0;
    s->micro_batches = 0;
}

void rt_moe_stats_free(rt_moe_stats *s)
{
    free(s->names);
    free(s->tokens);
    free(s->buf);
    free(s->kept);
    free(s->weights);
    *s = (rt_moe_stats){.func = -1};
}
