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

// copy (or NULL): the parameter's bf16 working copy, written from the updated p in the same pass.
extern "C" __global__ void mcc_adamw_f32(float *p, const float *g, float *m, float *v, const float *lr_p,
                                         const float *step_p, const float *coef_p, long long n, double b1,
                                         double b2, double eps, double wd, mcc_bf16 *copy)
{
    double step = step_p[0];
    mcc_adamw_step f = {(float)b1, (float)b2, (float)eps, (float)wd, lr_p[0], coef_p[0],
                        (float)(1.0 - pow(b1, step)), (float)(1.0 - pow(b2, step))};
    bool vector = mcc_aligned(p, g, m, v) && (!copy || (unsigned long long)copy % 8 == 0);
    long long tid = blockIdx.x * (long long)blockDim.x + threadIdx.x, stride = (long long)gridDim.x * blockDim.x;
    for (long long k = tid; vector && k < n / 4; k += stride) {
        float4 pk = ((float4 *)p)[k], gk = ((const float4 *)g)[k], mk = ((float4 *)m)[k], vk = ((float4 *)v)[k];
        f(pk.x, gk.x, mk.x, vk.x);
        f(pk.y, gk.y, mk.y, vk.y);
        f(pk.z, gk.z, mk.z, vk.z);
        f(pk.w, gk.w, mk.w, vk.w);
        ((float4 *)p)[k] = pk, ((float4 *)m)[k] = mk, ((float4 *)v)[k] = vk;
        if (copy) {
            __nv_bfloat162 lo = __floats2bfloat162_rn(pk.x, pk.y), hi = __floats2bfloat162_rn(pk.z, pk.w);
            ((uint2 *)copy)[k] = make_uint2(*(unsigned *)&lo, *(unsigned *)&hi);
        }
    }
    for (long long i = (vector ? n / 4 * 4 : 0) + tid; i < n; i += stride) {
        f(p[i], g[i], m[i], v[i]);
        if (copy)
            mcc_st(copy, i, p[i]);
    }
}
