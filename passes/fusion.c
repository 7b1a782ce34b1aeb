/* fusion.c — merges instructions that a fused kernel runs in one pass over memory. For now:
 * a matmul whose only use is a bias_add becomes one matmul_bias (on the GPU, cuBLASLt adds the
 * bias in the GEMM's epilogue instead of a separate read and write of the output). Rewrites
 * every function into a new one; the fused op sits where the bias_add was, where all its
 * operands exist. */
#include "passes.h"

#include <stdlib.h>

typedef struct {
    int *uses;                      /* per source value: how many instructions read it */
    int *fused_matmul;              /* per source value: the matmul instruction folded into it, or -1 */
} fusion_plan;

/* Source matmul i is fusable when its result's only use is bias_add's first operand. */
static int fusable_bias_add(const ir_func *f, const fusion_plan *fp, int i)
{
    const ir_instr *mm = &f->instrs[i];
    return mm->op == IR_OP_MATMUL && fp->uses[mm->res[0]] == 1 ? mm->res[0] : -1;
}

static void plan_fusions(const ir_func *f, fusion_plan *fp)
{
    fp->uses = calloc((size_t)f->nvals + 1, sizeof(int));
    fp->fused_matmul = malloc(sizeof(int) * ((size_t)f->nvals + 1));
    for (int v = 0; v < f->nvals; v++)
        fp->fused_matmul[v] = -1;
    for (int i = 0; i < f->ninstrs; i++)
        for (int a = 0; a < f->instrs[i].nargs; a++)
            fp->uses[f->instrs[i].args[a]]++;
    for (int i = 0; i < f->ninstrs; i++) {
        const ir_instr *in = &f->instrs[i];
        if (in->op != IR_OP_BIAS_ADD)
            continue;
        int def = f->vals[in->args[0]].def;
        if (fusable_bias_add(f, fp, def) == in->args[0])
            fp->fused_matmul[in->res[0]] = def;
    }
}

static void fuse_func(ir_module *m, int fi)
{
    const ir_func *src = m->funcs[fi];
    fusion_plan fp;
    plan_fusions(src, &fp);
    ir_func *dst = ir_func_new(m, src->name);
    int *map = malloc(sizeof(int) * ((size_t)src->nvals + 1));
    bool *skip = calloc((size_t)src->ninstrs + 1, sizeof(bool));
    for (int v = 0; v < src->nvals; v++)
        if (fp.fused_matmul[v] >= 0)
            skip[fp.fused_matmul[v]] = true;
    for (int i = 0; i < src->ninstrs; i++) {
        const ir_instr *in = &src->instrs[i];
        if (skip[i])
            continue;
        int r;
        if (in->op == IR_OP_BIAS_ADD && fp.fused_matmul[in->res[0]] >= 0) {
            const ir_instr *mm = &src->instrs[fp.fused_matmul[in->res[0]]];
            int fused[3] = {map[mm->args[0]], map[mm->args[1]], map[in->args[1]]};
            r = ir_emit(m, dst, IR_OP_MATMUL_BIAS, fused, 3, mm->attr, NULL, NULL);
        } else {
            int args[in->nargs ? in->nargs : 1]; /* sum_squares takes every gradient */
            for (int a = 0; a < in->nargs; a++)
                args[a] = map[in->args[a]];
            const ir_type *explicit_type = in->nres ? &src->vals[in->res[0]].type : NULL;
            r = ir_emit(m, dst, in->op, args, in->nargs, in->attr, in->sym, explicit_type);
        }
        for (int k = 0; k < in->nres; k++) { /* keep the source's sharding annotations */
            map[in->res[k]] = r + k;
            ir_type *t = &dst->vals[r + k].type;
            const ir_type *s = &src->vals[in->res[k]].type;
            for (int d = 0; d < t->ndim && d < s->ndim; d++)
                t->shard[d] = s->shard[d];
            t->partial = s->partial;
        }
    }
    free(map);
    free(skip);
    free(fp.uses);
    free(fp.fused_matmul);
    ir_func_replace(m, fi, dst);
}

bool pass_fusion(ir_module *m, char *err, size_t errlen)
{
    for (int f = 0; f < m->nfuncs; f++)
        fuse_func(m, f);
    return true;
}
