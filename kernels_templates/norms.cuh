// norms.cuh — LayerNorm and RMSNorm (RMSNorm is LayerNorm without centring or bias), forward and
// backward. A block owns whole rows of x[R,d]; statistics in fp32 by two passes (mean, then the
// variance about it). The backward's dw/db are summed per block in shared memory, one partial
// per block, and reduced by mcc_colsum_final: deterministic, no atomics.
// Kernels are named mcc_<op>_<x dtype>_<w dtype>.
#pragma once

struct mcc_row_stats {
    float mean, rstd; // mean is 0 without centring; var is then mean(x^2)
};

template <bool CENTER, class T> __device__ mcc_row_stats mcc_norm_stats(const T *x, long long d, float eps)
{
    mcc_row_stats st = {0.0f, 0.0f};
    if (CENTER) {
        float s = 0.0f;
        for (long long j = threadIdx.x; j < d; j += blockDim.x)
            s += mcc_ld(x, j);
        st.mean = mcc_block_sum(s) / (float)d;
    }
    float v = 0.0f;
    for (long long j = threadIdx.x; j < d; j += blockDim.x) {
        float c = mcc_ld(x, j) - st.mean;
        v += c * c;
    }
    st.rstd = __frcp_rn(__fsqrt_rn(mcc_block_sum(v) / (float)d + eps));
    return st;
}

// y[R,d] := (x - mean) rstd w (+ b when CENTER); block per row.
template <bool CENTER, class T, class W>
__device__ void mcc_norm_forward(T *y, const T *x, const W *w, const W *b, long long R, long long d, float eps)
{
    for (long long row = blockIdx.x; row < R; row += gridDim.x) {
        const T *xr = x + row * d;
        mcc_row_stats st = mcc_norm_stats<CENTER>(xr, d, eps);
        for (long long j = threadIdx.x; j < d; j += blockDim.x) {
            float out = (mcc_ld(xr, j) - st.mean) * st.rstd * mcc_ld(w, j);
            mcc_st(y + row * d, j, CENTER ? out + mcc_ld(b, j) : out);
        }
    }
}

// (dy, x, w) -> dx[R,d], and partial[gridDim.x, NACC d] of this block's rows: dw (sum dy xhat),
// then db (sum dy) when CENTER. With xhat = (x - mean) rstd and g = dy w:
// dx = rstd (g - mean(g) - xhat mean(g xhat)), the mean(g) term only when centred.
// Dynamic shared memory: NACC d floats, thread-private columns (j = tid + k blockDim), so the
// rows of a block add up without barriers.
template <bool CENTER, class T, class W>
__device__ void mcc_norm_backward(T *dx, float *partial, const T *dy, const T *x, const W *w, long long R, long long d,
                                  float eps)
{
    const int NACC = CENTER ? 2 : 1;
    extern __shared__ float mcc_norm_acc[]; // [NACC, d]
    for (long long j = threadIdx.x; j < NACC * d; j += blockDim.x)
        mcc_norm_acc[j] = 0.0f;
    for (long long row = blockIdx.x; row < R; row += gridDim.x) {
        const T *xr = x + row * d, *dyr = dy + row * d;
        mcc_row_stats st = mcc_norm_stats<CENTER>(xr, d, eps);
        float2 s = make_float2(0.0f, 0.0f); // sum g, sum g xhat
        for (long long j = threadIdx.x; j < d; j += blockDim.x) {
            float xhat = (mcc_ld(xr, j) - st.mean) * st.rstd, g = mcc_ld(dyr, j) * mcc_ld(w, j);
            s.x += g;
            s.y += g * xhat;
        }
        s = mcc_block_sum(s);
        float mean_g = CENTER ? s.x / (float)d : 0.0f, mean_gx = s.y / (float)d;
        for (long long j = threadIdx.x; j < d; j += blockDim.x) {
            float xhat = (mcc_ld(xr, j) - st.mean) * st.rstd, dyj = mcc_ld(dyr, j);
            mcc_st(dx + row * d, j, st.rstd * (dyj * mcc_ld(w, j) - mean_g - xhat * mean_gx));
            mcc_norm_acc[j] += dyj * xhat;
            if (CENTER)
                mcc_norm_acc[d + j] += dyj;
        }
    }
    for (long long j = threadIdx.x; j < NACC * d; j += blockDim.x)
        partial[blockIdx.x * NACC * d + j] = mcc_norm_acc[j];
}

#define MCC_NORMS(sfx, T, W)                                                                               \
    extern "C" __global__ void mcc_layernorm_##sfx(T *y, const T *x, const W *w, const W *b, long long R,  \
                                                   long long d, float eps)                               \
    {                                                                                                      \
        mcc_norm_forward<true>(y, x, w, b, R, d, eps);                                                     \
    }                                                                                                      \
    extern "C" __global__ void mcc_rmsnorm_##sfx(T *y, const T *x, const W *w, long long R, long long d,   \
                                                 float eps)                                               \
    {                                                                                                      \
        mcc_norm_forward<false>(y, x, w, (const W *)0, R, d, eps);                                         \
    }                                                                                                      \
    extern "C" __global__ void mcc_layernorm_grad_##sfx(T *dx, float *partial, const T *dy, const T *x,    \
                                                        const W *w, long long R, long long d, float eps)  \
    {                                                                                                      \
        mcc_norm_backward<true>(dx, partial, dy, x, w, R, d, eps);                                         \
    }                                                                                                      \
    extern "C" __global__ void mcc_rmsnorm_grad_##sfx(T *dx, float *partial, const T *dy, const T *x,      \
                                                      const W *w, long long R, long long d, float eps)    \
    {                                                                                                      \
        mcc_norm_backward<false>(dx, partial, dy, x, w, R, d, eps);                                        \
    }
MCC_FOR_FLOAT_PAIRS(MCC_NORMS)
