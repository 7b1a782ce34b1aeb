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

// Where token t of a rank's `local` tokens lies in the whole sequence when the rank at coordinate r
// of cp holds balanced chunks r and 2cp-1-r (ir/ir.h's ir_cp_position); cp <= 1: t.
__device__ __forceinline__ long long mcc_cp_position(long long t, long long local, long long cp, long long r)
{
    if (cp <= 1)
        return t;
    long long chunk = local / 2;
    return t < chunk ? r * chunk + t : (2 * cp - 1 - r) * chunk + t - chunk;
}

// An fp32 master held as its bf16 high half and an i16 remainder (store_param_remainders): the high
// half is x's bits + 0x8000 shifted (ties away from zero), the remainder x's low 16 bits, negative
// exactly when that carried; join gives x back bit for bit (runtime/bf16.h's rt_master_* on the host).
__device__ __forceinline__ void mcc_master_split(float x, unsigned short &hi, short &rem)
{
    unsigned u = __float_as_uint(x), low = u & 0xffffu;
    hi = (unsigned short)((u >> 16) + (low >= 0x8000u));
    rem = (short)low;
}
__device__ __forceinline__ float mcc_master_join(unsigned short hi, short rem)
{
    return __uint_as_float(((unsigned)(unsigned short)(hi - (rem < 0)) << 16) | (unsigned short)rem);
}
// Stores x as an fp32 parameter w[i], or where w is NULL as the pair (hi[i], rem[i]).
__device__ __forceinline__ void mcc_st_master(float *w, unsigned short *hi, short *rem, long long i, float x)
{
    if (w)
        w[i] = x;
    else
        mcc_master_split(x, hi[i], rem[i]);
}

// Vector access: MCC_VEC elements per thread, one 16-byte load of bf16 or two of f32, so operands of
// different dtypes stay in step. mcc_ldn/mcc_stn move W = MCC_VEC (p + i 16-byte aligned) or
// W = 1 elements; bodies written once for a width W serve both the vector path and its tail.
#define MCC_VEC 8
template <int W> struct mcc_width {
    static const int value = W;
};

__device__ __forceinline__ void mcc_ldn(float (&v)[1], const float *p, long long i) { v[0] = p[i]; }
__device__ __forceinline__ void mcc_ldn(float (&v)[1], const mcc_bf16 *p, long long i) { v[0] = mcc_ld(p, i); }
__device__ __forceinline__ void mcc_stn(float *p, long long i, const float (&v)[1]) { p[i] = v[0]; }
__device__ __forceinline__ void mcc_stn(mcc_bf16 *p, long long i, const float (&v)[1]) { mcc_st(p, i, v[0]); }

__device__ __forceinline__ void mcc_ldn(float (&v)[8], const float *p, long long i)
{
    float4 a = ((const float4 *)(p + i))[0], b = ((const float4 *)(p + i))[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void mcc_ldn(float (&v)[8], const mcc_bf16 *p, long long i)
{
    uint4 u = *(const uint4 *)(p + i);
    unsigned w[4] = {u.x, u.y, u.z, u.w};
    for (int k = 0; k < 4; k++) { // bf16 -> f32 is a 16-bit shift
        v[2 * k] = __uint_as_float(w[k] << 16);
        v[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
    }
}
__device__ __forceinline__ void mcc_stn(float *p, long long i, const float (&v)[8])
{
    ((float4 *)(p + i))[0] = make_float4(v[0], v[1], v[2], v[3]);
    ((float4 *)(p + i))[1] = make_float4(v[4], v[5], v[6], v[7]);
}
__device__ __forceinline__ void mcc_stn(mcc_bf16 *p, long long i, const float (&v)[8])
{
    __nv_bfloat162 h[4];
    for (int k = 0; k < 4; k++)
        h[k] = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
    *(uint4 *)(p + i) = *(const uint4 *)h;
}

// Whether every pointer is 16-byte aligned (arena offsets are 64-byte aligned; views may not be).
template <class... P> __device__ __forceinline__ bool mcc_aligned(const P *...p)
{
    return ((((unsigned long long)p) & 15u) | ...) == 0;
}

// Calls body(mcc_width<W>(), i) on [i, i + W) for the whole of [0, n): vector chunks when
// `vector`, then single elements for the tail. Launchers size the grid for n / MCC_VEC threads.
template <class Body> __device__ __forceinline__ void mcc_for_each_vec(long long n, bool vector, Body body)
{
    long long tid = blockIdx.x * (long long)blockDim.x + threadIdx.x, stride = (long long)gridDim.x * blockDim.x;
    long long nvec = vector ? n / MCC_VEC : 0;
    for (long long k = tid; k < nvec; k += stride)
        body(mcc_width<MCC_VEC>(), k * MCC_VEC);
    for (long long i = nvec * MCC_VEC + tid; i < n; i += stride)
        body(mcc_width<1>(), i);
}

// An elementwise op's row bound (ir_row_bound): counts[0..S) sum to the leading rows of `width`
// elements that hold data, read on the device (behind expert parallelism's dispatch a buffer has
// room for the dropless worst case, and the rows received are known only there); counts null: the
// whole buffer. Passed by value (the launchers' mcc_row_bound twin, launchers.c).
struct mcc_row_bound {
    const int *counts;
    long long S, width;
};
// The elements of the n that the bound leaves: those of its rows, at most n. Every thread sums the
// counts (a dispatch's local experts, a few) rather than waiting on a block's sum.
__device__ __forceinline__ long long mcc_bounded(long long n, mcc_row_bound b)
{
    if (!b.counts)
        return n;
    long long rows = 0;
    for (long long s = 0; s < b.S; s++)
        rows += b.counts[s];
    return rows * b.width < n ? rows * b.width : n;
}

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

// The block's max of every thread's v, in its thread 0 (blockDim a multiple of 32).
__device__ __forceinline__ unsigned mcc_block_max_u32(unsigned v)
{
    __shared__ unsigned partial[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = __reduce_max_sync(0xffffffffu, v);
    if (lane == 0)
        partial[warp] = v;
    __syncthreads();
    return warp == 0 ? __reduce_max_sync(0xffffffffu, lane < nwarps ? partial[lane] : 0u) : v;
}

// FP8's amax made by the kernel that stores the value (an op's amax attribute, ops.def: the fusion
// pass's, in place of fp8_amax's pass over it). |v| as p's dtype stores it (bf16: rounded first) as
// uint bits: the bits fp8_amax would read back, which order as the values (a NaN's above inf's).
__device__ __forceinline__ unsigned mcc_abs_bits_as_stored(const float *, float v)
{
    return __float_as_uint(v) & 0x7fffffffu;
}
__device__ __forceinline__ unsigned mcc_abs_bits_as_stored(const mcc_bf16 *, float v)
{
    return __float_as_uint(__bfloat162float(__float2bfloat16_rn(v))) & 0x7fffffffu;
}
// m := max(m, |v[k]| as stored at p) over the W values of a store
template <class T, int W> __device__ __forceinline__ void mcc_absmax_stored(unsigned &m, const T *p, const float (&v)[W])
{
    for (int k = 0; k < W; k++)
        m = max(m, mcc_abs_bits_as_stored(p, v[k]));
}
// amax[0] := max(amax[0], the block's m) by one atomic a block (amax null: the instruction has no
// such amax result; the launcher zeroed it). Every thread of the block calls it after its last
// store (a barrier first: the block's earlier reductions are done with the shared slots).
__device__ __forceinline__ void mcc_amax_commit(unsigned *amax, unsigned m)
{
    if (!amax)
        return;
    __syncthreads();
    m = mcc_block_max_u32(m);
    if (threadIdx.x == 0 && m != 0)
        atomicMax(amax, m);
}

// -inf without math.h (NVRTC has no host headers).
#define MCC_NEG_INF __int_as_float(0xff800000u)
