// dropout.cuh — dropout (ops.def dropout): r = x * mask / (1-p), the mask of philox.cuh, so the
// CPU oracle draws the same bits. x is R rows of C elements S apart (mcc_dropout_rows): row (b, o)
// holds elements o*G + base + [0, C) of sample first_sample + first_row + b. Grid (column chunks, row groups): a
// thread takes MCC_VEC columns (16-byte loads, as elementwise.cuh) down the rows, so each element's
// index is its row's base plus its column, and four neighbours share one Philox block.
#pragma once
#include "philox.cuh"

template <int W, class T>
__device__ void mcc_dropout_cols(T *r, const T *x, long long R, mcc_dropout_rows l, mcc_dropout d)
{
    const long long first = *d.first_sample;
    for (long long c = (blockIdx.x * (long long)blockDim.x + threadIdx.x) * W; c < l.C;
         c += (long long)gridDim.x * blockDim.x * W) {
        for (long long row = blockIdx.y; row < R; row += gridDim.y) {
            const unsigned long long s = first + l.first_row + row / l.O, e = (row % l.O) * l.G + l.base + c;
            mcc_dropout_cursor cur = MCC_DROPOUT_CURSOR;
            float v[W];
            mcc_ldn(v, x, row * l.S + c);
            for (int k = 0; k < W; k++)
                v[k] = d.normal ? mcc_dropout_normal(d, s, e + k, &cur) : v[k] * mcc_dropout_factor(d, s, e + k, &cur);
            mcc_stn(r, row * l.S + c, v);
        }
    }
}

#define MCC_DROPOUT(sfx, T)                                                                                \
    extern "C" __global__ void mcc_dropout_##sfx(T *r, const T *x, long long R, mcc_dropout_rows l, mcc_dropout d) \
    {                                                                                                      \
        if (l.C % MCC_VEC == 0 && l.S % MCC_VEC == 0 && mcc_aligned(r, x))                                                       \
            mcc_dropout_cols<MCC_VEC>(r, x, R, l, d);                                                      \
        else                                                                                               \
            mcc_dropout_cols<1>(r, x, R, l, d);                                                            \
    }
MCC_FOR_FLOATS(MCC_DROPOUT)
