// init.cuh — parameter initialisation on the device, bit-compatible in intent with the CPU's
// rt_program_init_params: element i of a tensor is std * N(0,1) drawn from splitmix64 of
// (key, i) by Box-Muller in double, key = splitmix64(seed) ^ fnv1a(parameter name).
#pragma once

__device__ __forceinline__ unsigned long long mcc_splitmix64(unsigned long long x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// Uniform in (0, 1] from the top 53 bits.
__device__ __forceinline__ double mcc_unit(unsigned long long bits)
{
    return ((bits >> 11) + 1) * (1.0 / 9007199254740992.0);
}

// A shard, at each of three levels (runtime/device.h rt_shard_layout, from the rank's part out), is
// [outer, mid, inner] of [outer, full_mid, inner] holding middle rows from `offset` (an unused level:
// 1, 1, 1, 0): element i draws the number of its index in the whole parameter.
__device__ __forceinline__ long long mcc_shard_level(long long i, long long inner, long long mid, long long full_mid,
                                                     long long offset)
{
    long long j = i % inner, m = (i / inner) % mid, o = i / (inner * mid);
    return (o * full_mid + offset + m) * inner + j;
}

// w: the fp32 parameter, or NULL for one held as (hi, rem) (mcc_st_master).
extern "C" __global__ void mcc_init_normal_f32(float *w, long long n, unsigned long long key, float std,
                                               long long inner0, long long mid0, long long full_mid0, long long offset0,
                                               long long inner1, long long mid1, long long full_mid1, long long offset1,
                                               long long inner2, long long mid2, long long full_mid2, long long offset2,
                                               unsigned short *hi, short *rem)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        unsigned long long g = (unsigned long long)mcc_shard_level(
            mcc_shard_level(mcc_shard_level(i, inner0, mid0, full_mid0, offset0), inner1, mid1, full_mid1, offset1), inner2,
            mid2, full_mid2, offset2);
        unsigned long long a = mcc_splitmix64(key ^ mcc_splitmix64(g * 2));
        unsigned long long b = mcc_splitmix64(key ^ mcc_splitmix64(g * 2 + 1));
        double r = sqrt(-2.0 * log(mcc_unit(a))) * cos(2.0 * 3.14159265358979323846 * mcc_unit(b));
        mcc_st_master(w, hi, rem, i, (float)std * (float)r);
    }
}

extern "C" __global__ void mcc_init_const_f32(float *w, long long n, float value, unsigned short *hi, short *rem)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        mcc_st_master(w, hi, rem, i, value);
}
