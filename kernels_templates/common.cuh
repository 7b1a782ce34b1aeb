// common.cuh — what every mcc kernel shares: loads that widen bf16/f32 to float, stores that round
// back to the tensor's dtype, grid-stride loops, warp/block reductions, and the macros that
// instantiate one kernel body for every dtype (so f32 and bf16 never drift apart).
#pragma once
#include <cuda_bf16.h>

typedef __nv_bfloat16 mcc_bf16;

// Every kernel computes in fp32 (or double) and rounds once, on store.
__device__ __forceinline__ float mcc_ld(const float *p, long long i) { return p[i]; }
__device__ __forceinline__ float mcc_ld(const mcc_bf16 *p, long long i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void mcc_st(float *p, long long i, float v) { p[i] = v; }
__device__ __forceinline__ void mcc_st(mcc_bf16 *p, long long i, float v) { p[i] = __float2bfloat16_rn(v); }

// Grid-stride loop over [0, n): launchers cap the grid, so any n works.
#define MCC_FOR_EACH(i, n)                                                                                  \
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)

// Instantiation lists: X(suffix, C type). MCC_FOR_FLOATS gives mcc_<op>_f32 and mcc_<op>_bf16;
// MCC_FOR_FLOAT_PAIRS gives the four mcc_<op>_<a>_<b> of ops whose two operands may differ.
#define MCC_FOR_FLOATS(X) X(f32, float) X(bf16, mcc_bf16)
#define MCC_FOR_FLOAT_PAIRS(X)                                                                              \
    X(f32_f32, float, float) X(f32_bf16, float, mcc_bf16) X(bf16_f32, mcc_bf16, float) X(bf16_bf16, mcc_bf16, mcc_bf16)

// Reductions. Blocks are 1-D with a multiple of 32 threads (at most 1024).
__device__ __forceinline__ float mcc_shfl_xor(float v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
__device__ __forceinline__ double mcc_shfl_xor(double v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
__device__ __forceinline__ float2 mcc_shfl_xor(float2 v, int m)
{
    return make_float2(__shfl_xor_sync(0xffffffffu, v.x, m), __shfl_xor_sync(0xffffffffu, v.y, m));
}

struct mcc_sum_op {
    __device__ float operator()(float a, float b) const { return a + b; }
    __device__ double operator()(double a, double b) const { return a + b; }
    __device__ float2 operator()(float2 a, float2 b) const { return make_float2(a.x + b.x, a.y + b.y); }
};

// Butterfly: every lane ends with the same value, combined in the same order on every run.
template <class T, class Op> __device__ __forceinline__ T mcc_warp_reduce(T v, Op op)
{
    for (int m = 16; m > 0; m >>= 1)
        v = op(v, mcc_shfl_xor(v, m));
    return v;
}

// Every thread of the block gets the reduction. `identity` fills lanes past the last warp.
// Ends with a barrier, so it can be called again at once (the shared slots are reused).
template <class T, class Op> __device__ T mcc_block_reduce(T v, Op op, T identity)
{
    __shared__ T partial[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = mcc_warp_reduce(v, op);
    if (lane == 0)
        partial[warp] = v;
    __syncthreads();
    v = mcc_warp_reduce(lane < nwarps ? partial[lane] : identity, op);
    __syncthreads();
    return v;
}

__device__ __forceinline__ float mcc_block_sum(float v) { return mcc_block_reduce(v, mcc_sum_op(), 0.0f); }
__device__ __forceinline__ double mcc_block_sum(double v) { return mcc_block_reduce(v, mcc_sum_op(), 0.0); }
__device__ __forceinline__ float2 mcc_block_sum(float2 v)
{
    return mcc_block_reduce(v, mcc_sum_op(), make_float2(0.0f, 0.0f));
}


// -inf without math.h (NVRTC has no host headers).
#define MCC_NEG_INF __int_as_float(0xff800000u)
