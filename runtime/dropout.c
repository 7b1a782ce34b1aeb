/* dropout.c — the dropout ops' attributes as kernel parameters (see dropout.h). */
#include "dropout.h"

mcc_dropout rt_dropout_of(const ir_instr *in, const void *first_sample)
{
    double p = in->attr[IR_ATTR_DROPOUT_P];
    unsigned int seed = (unsigned int)in->attr[IR_ATTR_DROPOUT_SEED];
    unsigned int site = (unsigned int)in->attr[IR_ATTR_DROPOUT_SITE];
    return (mcc_dropout){first_sample, seed, site, mcc_dropout_threshold(p), mcc_dropout_scale(p),
                         in->attr[IR_ATTR_DROPOUT_NORMAL] != 0};
}

/* x[B, d1 .. dn] with dimension k = dim split: row (b, o) runs over dims k..n, o over dims 1..k-1;
 * in the sample, dimension k is extent long and this block starts offset into it. Split along the
 * batch (dim 0), a row is a whole sample, and this block's first is sample offset of the batch.
 * Under context parallelism (dim 0 or 1), a block per run of the sequence's positions: its rows
 * the batch's, each the run's tokens at their place in the whole sample. */
int rt_dropout_blocks(const ir_instr *in, const ir_type *x, rt_dropout_block block[2])
{
    int dim = (int)in->attr[IR_ATTR_DROPOUT_DIM], cp = (int)in->attr[IR_ATTR_DROPOUT_CP];
    long long inner = 1, outer = 1, offset = (long long)in->attr[IR_ATTR_DROPOUT_OFFSET];
    for (int i = dim + 1; i < x->ndim; i++)
        inner *= x->dims[i];
    if (cp > 1) { /* [B, T, inner]: tokens [first, first + T) of the rank's `local` (dim 1) */
        long long T = x->dims[1], tok = ir_numel(x) / (x->dims[0] * T), first = dim == 1 ? offset : 0,
                  local = dim == 1 ? (long long)in->attr[IR_ATTR_DROPOUT_EXTENT] : T, first_row = dim == 0 ? offset : 0;
        ir_cp_run run[2];
        int n = ir_cp_runs(first, T, local, cp, (int)in->attr[IR_ATTR_DROPOUT_CP_RANK], run);
        for (int k = 0; k < n; k++)
            block[k] = (rt_dropout_block){{1, run[k].n * tok, 0, run[k].pos * tok, first_row, T * tok}, x->dims[0],
                                          run[k].t * tok};
        return n;
    }
    mcc_dropout_rows l;
    if (dim == 0)
        l = (mcc_dropout_rows){1, inner, inner, 0, offset, inner};
    else {
        for (int i = 1; i < dim; i++)
            outer *= x->dims[i];
        long long extent = (long long)in->attr[IR_ATTR_DROPOUT_EXTENT];
        l = (mcc_dropout_rows){outer, x->dims[dim] * inner, extent * inner, offset * inner, 0, x->dims[dim] * inner};
    }
    block[0] = (rt_dropout_block){l, l.C ? ir_numel(x) / l.C : 0, 0};
    return 1;
}
