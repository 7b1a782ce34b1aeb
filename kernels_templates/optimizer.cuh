// optimizer.cuh — the fused AdamW step and the gradient-clipping coefficient. Learning rate, step
// and clip coefficient are device scalars written by earlier kernels or the host before the
// step, read here: no host round trip. Math in double, as the CPU oracle.
#pragma once

// sumsq[] -> r[] = min(1, max_norm / (sqrt(sumsq) + 1e-6)); max_norm = 0 turns clipping off.
extern "C" __global__ void mcc_clip_coef_f32(float *r, const float *sumsq, double max_norm)
{
    r[0] = max_norm != 0.0 ? (float)fmin(1.0, max_norm / (sqrt((double)sumsq[0]) + 1e-6)) : 1.0f;
}

// In place on p, m, v [n] (f32): g' = g coef; m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2;
// p -= lr (m/(1-b1^step) / (sqrt(v/(1-b2^step)) + eps) + wd p). A step below 1 (which the
// host never passes: it counts from 1) would divide by zero.
extern "C" __global__ void mcc_adamw_f32(float *p, const float *g, float *m, float *v, const float *lr_p,
                                         const float *step_p, const float *coef_p, long long n, double b1,
                                         double b2, double eps, double wd)
{
    double lr = lr_p[0], step = step_p[0], coef = coef_p[0];
    double bc1 = 1.0 - pow(b1, step), bc2 = 1.0 - pow(b2, step);
    MCC_FOR_EACH(i, n)
    {
        double gi = (double)g[i] * coef, pi = p[i];
        double mi = b1 * m[i] + (1.0 - b1) * gi, vi = b2 * v[i] + (1.0 - b2) * gi * gi;
        p[i] = (float)(pi - lr * (mi / bc1 / (sqrt(vi / bc2) + eps) + wd * pi));
        m[i] = (float)mi;
        v[i] = (float)vi;
    }
}
