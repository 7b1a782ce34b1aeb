/* moe_stats.c — an MoE model's router statistics (moe_stats.h). */
#include "moe_stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether instruction i of func is an output of role kind (a layer's); then it is appended to *outs. */
static bool take_output(const ir_func *f, int i, int func, ir_role_kind kind, rt_moe_outputs *outs)
{
    if (f->instrs[i].op != IR_OP_OUTPUT || f->instrs[i].role.kind != kind)
        return false;
    outs->at = realloc(outs->at, sizeof *outs->at * (size_t)(outs->n + 1));
    outs->at[outs->n++] = (rt_moe_output){func, i};
    return true;
}

void rt_moe_stats_open(rt_moe_stats *s, const rt_program *p)
{
    *s = (rt_moe_stats){.first = -1};
    for (int func = 0; func < p->m->nfuncs; func++) {
        const ir_func *f = p->m->funcs[func];
        if (f->kind != IR_FUNC_STEP && f->kind != IR_FUNC_FORWARD)
            continue;
        if (s->first < 0)
            s->first = func;
        for (int i = 0; i < f->ninstrs; i++) {
            const ir_instr *in = &f->instrs[i];
            if (take_output(f, i, func, IR_ROLE_MOE_TOKENS_PER_EXPERT, &s->counts))
                s->experts = (int)ir_vtype(f, in->args[0])->dims[0];
            else if (take_output(f, i, func, IR_ROLE_MOE_KEPT_WEIGHTS, &s->kept))
                s->pairs = ir_numel(ir_vtype(f, in->args[0])), s->kept_dtype = ir_vtype(f, in->args[0])->dtype;
            else if (!take_output(f, i, func, IR_ROLE_MOE_AUX_LOSS, &s->aux))
                take_output(f, i, func, IR_ROLE_MOE_Z_LOSS, &s->z);
        }
    }
    s->moe = s->counts.n > 0;
    s->aux_layers = s->aux.n, s->z_layers = s->z.n, s->has_kept = s->kept.n > 0;
    s->tokens = calloc((size_t)s->counts.n * (size_t)s->experts + 1, sizeof *s->tokens);
    s->buf = calloc((size_t)s->experts + 1, sizeof *s->buf);
    s->weights = calloc((size_t)s->pairs + 1, sizeof *s->weights);
}

/* The sum of func's scalar outputs among outs. */
static double sum_outputs(rt_program *p, const rt_moe_outputs *outs, int func)
{
    double sum = 0;
    for (int l = 0; l < outs->n; l++) {
        float v;
        if (outs->at[l].func == func)
            rt_program_get_output(p, func, outs->at[l].instr, &v, sizeof v), sum += v;
    }
    return sum;
}

void rt_moe_stats_add(rt_moe_stats *s, rt_program *p, int func)
{
    s->micro_batches += func == s->first;
    s->aux_sum += sum_outputs(p, &s->aux, func);
    s->z_sum += sum_outputs(p, &s->z, func);
    for (int l = 0; l < s->counts.n; l++) {
        if (s->counts.at[l].func != func)
            continue;
        rt_program_get_output(p, func, s->counts.at[l].instr, s->buf, sizeof *s->buf * (size_t)s->experts);
        for (int e = 0; e < s->experts; e++)
            s->tokens[(size_t)l * s->experts + e] += s->buf[e];
    }
    for (int l = 0; l < s->kept.n; l++) {
        if (s->kept.at[l].func != func)
            continue;
        bool bf16 = s->kept_dtype == IR_BF16;
        size_t bytes = ir_dtype_size(s->kept_dtype) * (size_t)s->pairs;
        rt_program_get_output(p, func, s->kept.at[l].instr, s->weights, bytes);
        for (int64_t q = 0; q < s->pairs; q++) /* a zero weight (of either sign) is a dropped pair */
            s->dropped += bf16 ? (((const uint16_t *)s->weights)[q] & 0x7fffu) == 0 : s->weights[q] == 0;
        s->routed += s->pairs;
    }
}

void rt_moe_stats_step(rt_moe_stats *s, rt_moe_step *out)
{
    int n = s->micro_batches ? s->micro_batches : 1;
    *out = (rt_moe_step){.aux = s->aux_sum / n, .z = s->z_sum / n, .dropped = (double)s->dropped,
                         .routed = (double)s->routed};
    for (int l = 0; l < s->counts.n; l++) {
        const int64_t *t = s->tokens + (size_t)l * s->experts;
        double max = 0, sum = 0;
        for (int e = 0; e < s->experts; e++)
            max = fmax(max, (double)t[e]), sum += (double)t[e];
        if (sum > 0)
            out->imbalance = fmax(out->imbalance, max / (sum / s->experts));
    }
    memset(s->tokens, 0, sizeof *s->tokens * (size_t)s->counts.n * (size_t)s->experts);
    s->aux_sum = s->z_sum = 0;
    s->micro_batches = 0;
    s->dropped = s->routed = 0;
}

void rt_moe_stats_free(rt_moe_stats *s)
{
    free(s->counts.at);
    free(s->aux.at);
    free(s->z.at);
    free(s->kept.at);
    free(s->tokens);
    free(s->buf);
    free(s->weights);
    *s = (rt_moe_stats){.first = -1};
}
