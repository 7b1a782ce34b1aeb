// optimizer.cuh — the fused AdamW step and the gradient-clipping coefficient. Learning rate, step
// and clip coefficient are device scalars written by earlier kernels or the host before the
// step, read here: no host round trip. The step is fp32 math on 4 floats per thread (16-byte
// accesses: it only moves memory); only the bias corrections 1 - b^step are taken in double.
#pragma once

// sumsq[] -> r[] = min(1, max_norm / (sqrt(sumsq) + 1e-6)); max_norm = 0 turns clipping off.
extern "C" __global__ void mcc_clip_coef_f32(float *r, const float *sumsq, double max_norm)
{
    r[0] = max_norm != 0.0 ? (float)fmin(1.0, max_norm / (sqrt((double)sumsq[0]) + 1e-6)) : 1.0f;
}

// In place on p, m, v [n] (f32): g' = g coef; m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2;
// p -= lr (m/(1-b1^step) / (sqrt(v/(1-b2^step)) + eps) + wd p), the CPU oracle's formula. A
// step below 1 (which the host never passes: it counts from 1) would divide by zero.
struct mcc_adamw_step {
    float b1, b2, eps, wd, lr, coef, bc1, bc2;
    __device__ void operator()(float &p, float g, float &m, float &v) const
    {
        g *= coef;
        m = b1 * m + (1.0f - b1) * g;
        v = b2 * v + (1.0f - b2) * g * g;
        p = p - lr * (m / bc1 / (__fsqrt_rn(v / bc2) + eps) + wd * p);
    }
};

// Four masters from their high halves (bf16) and remainders at element 4k, and back.
__device__ __forceinline__ float4 mcc_master_join4(const mcc_bf16 *hi, const short *rem, long long k)
{
    uint2 h = ((const uint2 *)hi)[k], r = ((const uint2 *)rem)[k];
    return make_float4(mcc_master_join((unsigned short)h.x, (short)r.x), mcc_master_join((unsigned short)(h.x >> 16), (short)(r.x >> 16)),
                       mcc_master_join((unsigned short)h.y, (short)r.y), mcc_master_join((unsigned short)(h.y >> 16), (short)(r.y >> 16)));
}
__device__ __forceinline__ void mcc_master_split4(float4 x, mcc_bf16 *hi, short *rem, long long k)
{
    unsigned short h[4];
    short r[4];
    mcc_master_split(x.x, h[0], r[0]), mcc_master_split(x.y, h[1], r[1]);
    mcc_master_split(x.z, h[2], r[2]), mcc_master_split(x.w, h[3], r[3]);
    ((uint2 *)hi)[k] = make_uint2(h[0] | (unsigned)h[1] << 16, h[2] | (unsigned)h[3] << 16);
    ((uint2 *)rem)[k] = make_uint2((unsigned short)r[0] | (unsigned)(unsigned short)r[1] << 16,
                                   (unsigned short)r[2] | (unsigned)(unsigned short)r[3] << 16);
}

// copy (or NULL): the parameter's bf16 working copy, written from the updated p in the same pass.
// rem (or NULL): p is NULL and the master is held as (copy, rem) (store_param_remainders): joined,
// updated, and split back (mcc_master_split: the copy rounds ties away from zero then).
// g is TG (f32, or bf16 under --grad-reduce-in-bf16: loaded to fp32); m and v are TM and TV (f32,
// or bf16 under --use-precision-aware-optimizer: loaded to fp32, the step in fp32, the new moments
// rounded when stored); mcc_adamw_<TG>_<TM>_<TV>. Four floats a thread where all three are f32.
template <typename TG, typename TM, typename TV>
__device__ void mcc_adamw(float *p, const TG *g, TM *m, TV *v, const float *lr_p, const float *step_p,
                          const float *coef_p, long long n, double b1, double b2, double eps, double wd,
                          mcc_bf16 *copy, short *rem)
{
    double step = step_p[0];
    mcc_adamw_step f = {(float)b1, (float)b2, (float)eps, (float)wd, lr_p[0], coef_p[0],
                        (float)(1.0 - pow(b1, step)), (float)(1.0 - pow(b2, step))};
    bool vector = sizeof(TG) == 4 && sizeof(TM) == 4 && sizeof(TV) == 4 &&
                  mcc_aligned(p, (const float *)(const void *)g, (float *)(void *)m, (float *)(void *)v) &&
                  (!copy || (unsigned long long)copy % 8 == 0) && (!rem || (unsigned long long)rem % 8 == 0);
    long long tid = blockIdx.x * (long long)blockDim.x + threadIdx.x, stride = (long long)gridDim.x * blockDim.x;
    for (long long k = tid; vector && k < n / 4; k += stride) {
        float4 *m4 = (float4 *)(void *)m, *v4 = (float4 *)(void *)v;
        float4 pk = rem ? mcc_master_join4(copy, rem, k) : ((float4 *)p)[k];
        float4 gk = ((const float4 *)(const void *)g)[k], mk = m4[k], vk = v4[k];
        f(pk.x, gk.x, mk.x, vk.x);
        f(pk.y, gk.y, mk.y, vk.y);
        f(pk.z, gk.z, mk.z, vk.z);
        f(pk.w, gk.w, mk.w, vk.w);
        m4[k] = mk, v4[k] = vk;
        if (rem) {
            mcc_master_split4(pk, copy, rem, k);
            continue;
        }
        ((float4 *)p)[k] = pk;
        if (copy) {
            __nv_bfloat162 lo = __floats2bfloat162_rn(pk.x, pk.y), hi = __floats2bfloat162_rn(pk.z, pk.w);
            ((uint2 *)copy)[k] = make_uint2(*(unsigned *)&lo, *(unsigned *)&hi);
        }
    }
    for (long long i = (vector ? n / 4 * 4 : 0) + tid; i < n; i += stride) {
        float mi = mcc_ld(m, i), vi = mcc_ld(v, i);
        float pi = rem ? mcc_master_join(__bfloat16_as_ushort(copy[i]), rem[i]) : p[i];
        f(pi, mcc_ld(g, i), mi, vi);
        mcc_st(m, i, mi);
        mcc_st(v, i, vi);
        if (rem) {
            unsigned short h;
            mcc_master_split(pi, h, rem[i]);
            copy[i] = __ushort_as_bfloat16(h);
            continue;
        }
        p[i] = pi;
        if (copy)
            mcc_st(copy, i, p[i]);
    }
}

#define MCC_ADAMW(sg, TG, sm, TM, sv, TV)                                                                    \
    extern "C" __global__ void mcc_adamw_##sg##_##sm##_##sv(float *p, const TG *g, TM *m, TV *v, const float *lr_p, \
                                                            const float *step_p, const float *coef_p, long long n, \
                                                            double b1, double b2, double eps, double wd,          \
                                                            mcc_bf16 *copy, short *rem)                          \
    {                                                                                                        \
        mcc_adamw(p, g, m, v, lr_p, step_p, coef_p, n, b1, b2, eps, wd, copy, rem);                          \
    }
#define MCC_ADAMW_MOMENTS(sg, TG)                                                                            \
    MCC_ADAMW(sg, TG, f32, float, f32, float)                                                                \
    MCC_ADAMW(sg, TG, f32, float, bf16, mcc_bf16)                                                            \
    MCC_ADAMW(sg, TG, bf16, mcc_bf16, f32, float)                                                            \
    MCC_ADAMW(sg, TG, bf16, mcc_bf16, bf16, mcc_bf16)
MCC_ADAMW_MOMENTS(f32, float)
MCC_ADAMW_MOMENTS(bf16, mcc_bf16)
