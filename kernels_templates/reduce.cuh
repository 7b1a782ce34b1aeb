// reduce.cuh — deterministic reductions, no float atomics: column sums in two stages (sum_rows,
// pos_add_grad, the dw/db of the norms), the multi-tensor sum of squares (the global grad norm),
// and the mean of a vector (the cross-entropy loss). Every partial is combined in a fixed order.
#pragma once

// Stage 1 of a column sum of x[R,N]: block (blockIdx.x, blockIdx.y) sums rows
// [y chunk_rows, (y+1) chunk_rows) of 32 columns; its 8 warps take every 8th row, then add up
// in warp order. partial[gridDim.y, N] (f32). Blocks have 256 threads.
template <class T>
__device__ void mcc_colsum_partial(const T *x, long long R, long long N, long long chunk_rows, float *partial)
{
    __shared__ float acc[8][32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    long long col = blockIdx.x * 32LL + lane, r0 = blockIdx.y * chunk_rows;
    long long r1 = min(R, r0 + chunk_rows);
    float s = 0.0f;
    if (col < N)
        for (long long r = r0 + warp; r < r1; r += 8)
            s += mcc_ld(x, r * N + col);
    acc[warp][lane] = s;
    __syncthreads();
    if (warp == 0 && col < N) {
        for (int w = 1; w < 8; w++)
            s += acc[w][lane];
        partial[blockIdx.y * N + col] = s;
    }
}

#define MCC_COLSUM_PARTIAL(sfx, T)                                                                         \
    extern "C" __global__ void mcc_colsum_partial_##sfx(const T *x, long long R, long long N,            \
                                                        long long chunk_rows, float *partial)             \
    {                                                                                                      \
        mcc_colsum_partial(x, R, N, chunk_rows, partial);                                                  \
    }
MCC_FOR_FLOATS(MCC_COLSUM_PARTIAL)

// Stage 2: r[c] := sum over s < S of partial[s stride + c] for c < N, in order of s; then
// r[c] := 0 for N <= c < n_out (pos_add_grad's positions past T).
#define MCC_COLSUM_FINAL(sfx, T)                                                                           \
    extern "C" __global__ void mcc_colsum_final_##sfx(T *r, const float *partial, int S, long long stride, \
                                                      long long N, long long n_out)                      \
    {                                                                                                      \
        MCC_FOR_EACH(c, n_out)                                                                             \
        {                                                                                                  \
            float s = 0.0f;                                                                                \
            if (c < N)                                                                                     \
                for (int k = 0; k < S; k++)                                                                \
                    s += partial[k * stride + c];                                                          \
            mcc_st(r, c, s);                                                                               \
        }                                                                                                  \
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
    MCC_FOR_EACH(i, n)
    {
        double v = mcc_ld(x, i);
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
