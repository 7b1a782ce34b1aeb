/* dropout.c — the dropout ops' attributes as kernel parameters (see dropout.h). */
#include "dropout.h"

mcc_dropout rt_dropout_of(const ir_instr *in, const void *first_sample)
{
    double p = in->attr[RT_DROPOUT_P];
    return (mcc_dropout){first_sample, (unsigned int)in->attr[RT_DROPOUT_SEED], (unsigned int)in->attr[RT_DROPOUT_SITE],
                         mcc_dropout_threshold(p), mcc_dropout_scale(p)};
}

/* x[B, d1 .. dn] with dimension k = dim split: row (b, o) runs over dims k..n, o over dims 1..k-1;
 * in the sample, dimension k is extent long and this block starts offset into it. Split along the
 * batch (dim 0), a row is a whole sample, and this block's first is sample offset of the batch. */
mcc_dropout_rows rt_dropout_rows_of(const ir_instr *in, const ir_type *x)
{
    int dim = (int)in->attr[RT_DROPOUT_DIM];
    long long inner = 1, outer = 1;
    for (int i = dim + 1; i < x->ndim; i++)
        inner *= x->dims[i];
    if (dim == 0)
        return (mcc_dropout_rows){1, inner, inner, 0, (long long)in->attr[RT_DROPOUT_OFFSET]};
    for (int i = 1; i < dim; i++)
        outer *= x->dims[i];
    long long extent = (long long)in->attr[RT_DROPOUT_EXTENT], offset = (long long)in->attr[RT_DROPOUT_OFFSET];
    return (mcc_dropout_rows){outer, x->dims[dim] * inner, extent * inner, offset * inner, 0};
}
