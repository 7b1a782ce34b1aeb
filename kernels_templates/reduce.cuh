// reduce.cuh — deterministic reductions, no float atomics: column sums in two stages (sum_rows,
// pos_add_grad, the dw/db of the norms), the multi-tensor sum of squares (the global grad norm),
// and the mean of a vector (the cross-entropy loss). Every partial is combined in a fixed order.
#pragma once

// Column `col` of x (row stride `stride`) summed over rows [r0, r1) by a block of NWARPS warps:
// warp w takes rows r0 + w, r0 + w + NWARPS, ..., then the warps add up in warp order. Valid in
// warp 0. NWARPS is a constant so that the compiler unrolls the loop and keeps loads in flight.
template <int NWARPS, class T>
__device__ float mcc_colsum_block(const T *x, long long r0, long long r1, long long stride, long long col, bool ok)
{
    __shared__ float acc[NWARPS][32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float s = 0.0f;
    if (ok)
        for (long long r = r0 + warp; r < r1; r += NWARPS)
            s += mcc_ld(x, r * stride + col);
    acc[warp][lane] = s;
    __syncthreads();
    if (warp == 0)
        for (int w = 1; w < NWARPS; w++)
            s += acc[w][lane];
    return s;
}

// Stage 1 of a column sum of x[R,N]: block (blockIdx.x, blockIdx.y) sums rows
// [y chunk_rows, (y+1) chunk_rows) of 32 W columns, each thread W adjacent ones (one 16-byte load
// a row when W = MCC_VEC), in mcc_colsum_block's order: the sums do not depend on W.
// partial[gridDim.y, N] (f32). Blocks have 8 warps.
template <int W, class T>
__device__ void mcc_colsum_partial(const T *x, long long R, long long N, long long chunk_rows, float *partial)
{
    __shared__ float acc[8][32 * W];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const long long col = (blockIdx.x * 32LL + lane) * W, r0 = blockIdx.y * chunk_rows, r1 = min(R, r0 + chunk_rows);
    float s[W];
    for (int k = 0; k < W; k++)
        s[k] = 0.0f;
    if (col < N)
        for (long long r = r0 + warp; r < r1; r += 8) {
            float v[W];
            mcc_ldn(v, x, r * N + col);
            for (int k = 0; k < W; k++)
                s[k] += v[k];
        }
    for (int k = 0; k < W; k++)
        acc[warp][lane * W + k] = s[k];
    __syncthreads();
    if (warp == 0 && col < N) {
        for (int w = 1; w < 8; w++)
            for (int k = 0; k < W; k++)
                s[k] += acc[w][lane * W + k];
        mcc_stn(partial + blockIdx.y * N, col, s);
    }
}

// width: MCC_VEC when N is a multiple of it and x is 16-byte aligned (the launcher's grid
// assumes the same choice), else 1.
#define MCC_COLSUM_PARTIAL(sfx, T)                                                                         \
    extern "C" __global__ void mcc_colsum_partial_##sfx(const T *x, long long R, long long N,            \
                                                        long long chunk_rows, float *partial, int width)  \
    {                                                                                                      \
        if (width == MCC_VEC)                                                                              \
            mcc_colsum_partial<MCC_VEC>(x, R, N, chunk_rows, partial);                                     \
        else                                                                                               \
            mcc_colsum_partial<1>(x, R, N, chunk_rows, partial);                                           \
    }
MCC_FOR_FLOATS(MCC_COLSUM_PARTIAL)

// Stage 2: r[c] := sum over s < S of partial[s stride + c] for c < N; then r[c] := 0 for
// N <= c < n_out (pos_add_grad's positions past T). Block of 32 columns, 1024 threads: 32 warps
// share the S rows, so a long partial (the norms' per-group rows) is not one thread's loop.
#define MCC_COLSUM_FINAL(sfx, T)                                                                           \
    extern "C" __global__ void mcc_colsum_final_##sfx(T *r, const float *partial, int S, long long stride, \
                                                      long long N, long long n_out)                      \
    {                                                                                                      \
        long long c = blockIdx.x * 32LL + (threadIdx.x & 31);                                              \
        float s = mcc_colsum_block<32>(partial, 0, S, stride, c, c < N);                                       \
        if (threadIdx.x < 32 && c < n_out)                                                                 \
            mcc_st(r, c, s);                                                                               \
    }
MCC_FOR_FLOATS(MCC_COLSUM_FINAL)

// Up to MCC_SUMSQ_TENSORS tensors per launch, passed by value (no host-to-device copy, so a CUDA
// graph can capture it). Launchers mirror this layout (runtime/cuda/launchers.c: ORDER SUMSQ).
#define MCC_SUMSQ_TENSORS 48
struct mcc_sumsq_chunk {
    const void *ptr[MCC_SUMSQ_TENSORS];
    long long numel[MCC_SUMSQ_TENSORS];
    int is_bf16[MCC_SUMSQ_TENSORS];
    int count;
};

// This block's grid-stride share of the sum of squares of x[n], in double (a norm over billions
// of elements).
template <class T> __device__ double mcc_sumsq_share(const void *p, long long n)
{
    const T *x = (const T *)p;
    double s = 0.0;
    const long long nv = mcc_aligned(x) ? n / MCC_VEC : 0; // 16-byte loads, then the tail one by one
    MCC_FOR_EACH(i, nv)
    {
        float v[MCC_VEC];
        mcc_ldn(v, x, i * MCC_VEC);
        for (int k = 0; k < MCC_VEC; k++)
            s += (double)v[k] * v[k];
    }
    MCC_FOR_EACH(i, n - nv * MCC_VEC)
    {
        double v = mcc_ld(x, nv * MCC_VEC + i);
        s += v * v;
    }
    return s;
}

// partial[blockIdx.x] := this block's share of the sum of squares of every tensor of the chunk.
extern "C" __global__ void mcc_sum_squares_partial(mcc_sumsq_chunk chunk, double *partial)
{
    double s = 0.0;
    for (int t = 0; t < chunk.count; t++)
        s += chunk.is_bf16[t] ? mcc_sumsq_share<mcc_bf16>(chunk.ptr[t], chunk.numel[t])
                              : mcc_sumsq_share<float>(chunk.ptr[t], chunk.numel[t]);
    s = mcc_block_sum(s);
    if (threadIdx.x == 0)
        partial[blockIdx.x] = s;
}

// r[0] := (sum of x[n]) * scale, by one block in a fixed order. X is double (sum_squares
// partials) or float (per-row losses).
template <class X> __device__ void mcc_sum_one_block(float *r, const X *x, long long n, double scale)
{
    double s = 0.0;
    for (long long i = threadIdx.x; i < n; i += blockDim.x)
        s += (double)x[i];
    s = mcc_block_sum(s);
    if (threadIdx.x == 0)
        r[0] = (float)(s * scale);
}

extern "C" __global__ void mcc_sum_squares_final(float *r, const double *partial, long long n)
{
    mcc_sum_one_block(r, partial, n, 1.0);
}

extern "C" __global__ void mcc_mean_f32(float *r, const float *x, long long n)
{
    mcc_sum_one_block(r, x, n, 1.0 / (double)n);
}
