// norms.cuh — LayerNorm and RMSNorm (RMSNorm is LayerNorm without centring or bias), forward and
// backward. A group of `tpr` threads (whole warps) owns a row of x[R,d] and keeps it in registers,
// MCC_NORM_REGS floats per thread, so x and dy are read from memory once; a block holds
// blockDim.x / tpr such groups. Statistics in fp32 by two passes over the registers (mean, then
// the variance about it). The backward's dw/db are summed per group in registers, one partial
// row per group, and reduced by mcc_colsum_final: deterministic, no atomics. amax (not null: the
// instruction's amax result, ops.def) gets the max |y| (|dx|) as stored, one atomic a block.
// Launchers pick width = MCC_VEC (d % MCC_VEC == 0 and aligned operands) or 1 (the _w1
// kernels), and tpr >= d / MCC_NORM_REGS. Kernels are named mcc_<op>_<x dtype>_<w dtype>[_w1].
#pragma once

#define MCC_NORM_REGS 16

// Sum over the tpr threads of this thread's group; every thread of the group gets it, added in
// the same order on every run. Called by every thread of the block (it has barriers).
__device__ float mcc_group_sum(float v, int tpr)
{
    __shared__ float part[32];
    int warp = threadIdx.x >> 5, gw = tpr >> 5, first = warp - warp % gw;
    v = mcc_warp_reduce(v, mcc_sum_op());
    if (gw == 1)
        return v;
    if ((threadIdx.x & 31) == 0)
        part[warp] = v;
    __syncthreads();
    v = part[first];
    for (int k = 1; k < gw; k++)
        v += part[first + k];
    __syncthreads();
    return v;
}

// This thread's share of a row: chunk c is columns [j, j + W), j = (lane + c tpr) W, when j < d.
template <int W> struct mcc_norm_row {
    static const int CH = MCC_NORM_REGS / W;
    float v[CH][W];
    __device__ static long long col(int c, int lane, int tpr) { return ((long long)c * tpr + lane) * W; }
    template <class T> __device__ void load(const T *p, long long d, int lane, int tpr)
    {
        for (int c = 0; c < CH; c++)
            if (col(c, lane, tpr) < d)
                mcc_ldn(v[c], p, col(c, lane, tpr));
    }
};

struct mcc_row_stats {
    float mean, rstd; // mean is 0 without centring; var is then mean(x^2)
};

template <bool CENTER, int W>
__device__ mcc_row_stats mcc_norm_stats(const mcc_norm_row<W> &x, long long d, float eps, int lane, int tpr)
{
    mcc_row_stats st = {0.0f, 0.0f};
    if (CENTER) {
        float s = 0.0f;
        for (int c = 0; c < x.CH; c++)
            if (x.col(c, lane, tpr) < d)
                for (int k = 0; k < W; k++)
                    s += x.v[c][k];
        st.mean = mcc_group_sum(s, tpr) / (float)d;
    }
    float var = 0.0f;
    for (int c = 0; c < x.CH; c++)
        if (x.col(c, lane, tpr) < d)
            for (int k = 0; k < W; k++)
                var += (x.v[c][k] - st.mean) * (x.v[c][k] - st.mean);
    st.rstd = __frcp_rn(__fsqrt_rn(mcc_group_sum(var, tpr) / (float)d + eps));
    return st;
}

// y[R,d] := (x - mean) rstd (w + shift) (+ b when CENTER); shift is the op's one_p (its weight
// stored zero-centred). Every group runs the same number of iterations (rows past R
// are skipped inside), so the barriers of mcc_group_sum line up.
template <bool CENTER, int W, class T, class Wt>
__device__ void mcc_norm_forward(T *y, const T *x, const Wt *w, const Wt *b, long long R, long long d, float eps,
                                 float shift, int tpr, unsigned *amax)
{
    int lane = threadIdx.x % tpr, groups = blockDim.x / tpr, slot = threadIdx.x / tpr;
    unsigned m = 0;
    for (long long base = blockIdx.x * (long long)groups; base < R; base += (long long)gridDim.x * groups) {
        long long row = min(base + slot, R - 1); // a spare group recomputes the last row, unstored
        mcc_norm_row<W> xr;
        xr.load(x + row * d, d, lane, tpr);
        mcc_row_stats st = mcc_norm_stats<CENTER>(xr, d, eps, lane, tpr);
        if (base + slot >= R)
            continue;
        for (int c = 0; c < xr.CH; c++) {
            long long j = xr.col(c, lane, tpr);
            if (j >= d)
                continue;
            float wv[W], bv[W];
            mcc_ldn(wv, w, j);
            if (CENTER)
                mcc_ldn(bv, b, j);
            for (int k = 0; k < W; k++)
                xr.v[c][k] = (xr.v[c][k] - st.mean) * st.rstd * (wv[k] + shift) + (CENTER ? bv[k] : 0.0f);
            mcc_stn(y, row * d + j, xr.v[c]);
            mcc_absmax_stored(m, y, xr.v[c]);
        }
    }
    mcc_amax_commit(amax, m);
}

// (dy, x, w) -> dx[R,d], and partial[groups in grid, NACC d]: each group's dw (sum dy xhat), then
// db (sum dy) when CENTER. With xhat = (x - mean) rstd and g = dy (w + shift):
// dx = rstd (g - mean(g) - xhat mean(g xhat)), the mean(g) term only when centred. dr (null, or
// a residual's gradient, ops.def's *_grad_add) is added as dx is stored; it may be dx itself.
template <bool CENTER, int W, class T, class Wt>
__device__ void mcc_norm_backward(T *dx, float *partial, const T *dy, const T *x, const Wt *w, const T *dr, long long R,
                                  long long d, float eps, float shift, int tpr, unsigned *amax)
{
    const int NACC = CENTER ? 2 : 1;
    int lane = threadIdx.x % tpr, groups = blockDim.x / tpr, slot = threadIdx.x / tpr;
    unsigned m = 0;
    mcc_norm_row<W> dw = {}, db = {};
    for (long long base = blockIdx.x * (long long)groups; base < R; base += (long long)gridDim.x * groups) {
        long long row = min(base + slot, R - 1);
        bool mine = base + slot < R; // a spare group recomputes the last row, unstored
        mcc_norm_row<W> xr, gr;
        xr.load(x + row * d, d, lane, tpr);
        gr.load(dy + row * d, d, lane, tpr);
        mcc_row_stats st = mcc_norm_stats<CENTER>(xr, d, eps, lane, tpr);
        float sg = 0.0f, sgx = 0.0f; // sum g, sum g xhat
        for (int c = 0; c < xr.CH; c++) {
            long long j = xr.col(c, lane, tpr);
            if (j >= d)
                continue;
            float wv[W];
            mcc_ldn(wv, w, j);
            for (int k = 0; k < W; k++) {
                wv[k] += shift;
                xr.v[c][k] = (xr.v[c][k] - st.mean) * st.rstd; // xhat from here on
                sg += gr.v[c][k] * wv[k];
                sgx += gr.v[c][k] * wv[k] * xr.v[c][k];
            }
        }
        float mean_g = CENTER ? mcc_group_sum(sg, tpr) / (float)d : 0.0f, mean_gx = mcc_group_sum(sgx, tpr) / (float)d;
        if (!mine)
            continue;
        for (int c = 0; c < xr.CH; c++) {
            long long j = xr.col(c, lane, tpr);
            if (j >= d)
                continue;
            float wv[W], out[W], rv[W] = {};
            mcc_ldn(wv, w, j);
            if (dr)
                mcc_ldn(rv, dr, row * d + j);
            for (int k = 0; k < W; k++) {
                out[k] = st.rstd * (gr.v[c][k] * (wv[k] + shift) - mean_g - xr.v[c][k] * mean_gx) + rv[k];
                dw.v[c][k] += gr.v[c][k] * xr.v[c][k];
                db.v[c][k] += gr.v[c][k];
            }
            mcc_stn(dx, row * d + j, out);
            mcc_absmax_stored(m, dx, out);
        }
    }
    mcc_amax_commit(amax, m);
    float *part = partial + (blockIdx.x * (long long)groups + slot) * NACC * d;
    for (int c = 0; c < dw.CH; c++) {
        long long j = dw.col(c, lane, tpr);
        if (j >= d)
            continue;
        mcc_stn(part, j, dw.v[c]);
        if (CENTER)
            mcc_stn(part + d, j, db.v[c]);
    }
}

// One kernel per width: mcc_<op>_<x dtype>_<w dtype> moves MCC_VEC elements a load (the launcher
// checked d and the pointers' alignment), mcc_<op>_<x dtype>_<w dtype>_w1 one. Apart, the vector
// kernels keep their registers (83 for rmsnorm_grad against 188 with both widths in one kernel,
// which held one 256-thread block per SM).
#define MCC_NORMS_OF_WIDTH(sfx, T, W, WIDTH)                                                               \
    extern "C" __global__ void mcc_layernorm_##sfx(T *y, const T *x, const W *w, const W *b, long long R,  \
                                                   long long d, float eps, float shift, int tpr,           \
                                                   unsigned *amax)                                         \
    {                                                                                                      \
        mcc_norm_forward<true, WIDTH>(y, x, w, b, R, d, eps, shift, tpr, amax);                            \
    }                                                                                                      \
    extern "C" __global__ void mcc_rmsnorm_##sfx(T *y, const T *x, const W *w, long long R, long long d,   \
                                                 float eps, float shift, int tpr, unsigned *amax)          \
    {                                                                                                      \
        mcc_norm_forward<false, WIDTH>(y, x, w, (const W *)0, R, d, eps, shift, tpr, amax);                \
    }                                                                                                      \
    extern "C" __global__ void mcc_layernorm_grad_##sfx(T *dx, float *partial, const T *dy, const T *x,    \
                                                        const W *w, const T *dr, long long R, long long d, \
                                                        float eps, float shift, int tpr, unsigned *amax)   \
    {                                                                                                      \
        mcc_norm_backward<true, WIDTH>(dx, partial, dy, x, w, dr, R, d, eps, shift, tpr, amax);            \
    }                                                                                                      \
    extern "C" __global__ void mcc_rmsnorm_grad_##sfx(T *dx, float *partial, const T *dy, const T *x,      \
                                                      const W *w, const T *dr, long long R, long long d,   \
                                                      float eps, float shift, int tpr, unsigned *amax)     \
    {                                                                                                      \
        mcc_norm_backward<false, WIDTH>(dx, partial, dy, x, w, dr, R, d, eps, shift, tpr, amax);           \
    }
#define MCC_NORMS(sfx, T, W) MCC_NORMS_OF_WIDTH(sfx, T, W, MCC_VEC) MCC_NORMS_OF_WIDTH(sfx##_w1, T, W, 1)
MCC_FOR_FLOAT_PAIRS(MCC_NORMS)
