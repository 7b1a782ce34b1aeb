// rope.cuh — rotary position embedding, rotate-half form, as the CPU oracle (cpu_ROPE): for
// i < D/2 the pair (x[i], x[i+D/2]) at position t turns by t theta^(-2i/D), by the negative angle
// when inverse (the gradient). The angle and its cos/sin are computed in double: at t ~ 8k an fp32
// angle would be off by ~1e-3 rad.
#pragma once

// x, r [B,T,H,D]; one thread per pair; npairs = B T H D/2; sign = -1 for the inverse rotation.
template <class T>
__device__ void mcc_rope(T *r, const T *x, long long npairs, long long T_, long long H, long long D, double theta,
                         double sign)
{
    long long half = D / 2;
    MCC_FOR_EACH(p, npairs)
    {
        long long row = p / half, i = p % half, t = (row / H) % T_;
        double s, c;
        sincos(sign * (double)t * pow(theta, -2.0 * (double)i / (double)D), &s, &c);
        float cf = (float)c, sf = (float)s;
        float x1 = mcc_ld(x, row * D + i), x2 = mcc_ld(x, row * D + i + half);
        mcc_st(r, row * D + i, x1 * cf - x2 * sf);
        mcc_st(r, row * D + i + half, x2 * cf + x1 * sf);
    }
}

#define MCC_ROPE(sfx, T)                                                                                   \
    extern "C" __global__ void mcc_rope_##sfx(T *r, const T *x, long long npairs, long long T_, long long H, \
                                              long long D, double theta, double sign)                    \
    {                                                                                                      \
        mcc_rope(r, x, npairs, T_, H, D, theta, sign);                                                     \
    }
MCC_FOR_FLOATS(MCC_ROPE)
