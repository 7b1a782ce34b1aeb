// rope.cuh — rotary position embedding, rotate-half form, as the CPU oracle (cpu_ROPE): over a
// head's first R = 2 half channels (R < D: a partial rotation, Megatron's --rotary-percent), for
// i < R/2 the pair (x[i], x[i+R/2]) at position t turns by t freq(i), by the negative angle when
// inverse (the gradient), channels R.. passed through; freq is ir/ir.c's ir_rope_freq (theta^(-2i/R), LLaMA 3.1's scaling when
// scaling > 0), transcribed in mcc_rope_freq. The angle is formed and reduced to [-pi, pi] in
// double (at t ~ 8k an fp32 angle would be off by ~1e-3 rad); its sine and cosine are then taken
// in float, whose error on [-pi, pi] is below 1e-6.
#pragma once

#define MCC_TWO_PI 6.283185307179586

// ir_rope_freq's twin (ir/ir.h: Megatron's constants low_freq_factor 1, high_freq_factor 4,
// original_max_position_embeddings 8192 for LLaMA 3.1's; YaRN's ramp over [yarn_low, yarn_high]
// when yarn_high > 0, the bounds ir_rope_scale_of's)
__device__ inline double mcc_rope_freq(double theta, double scaling, double yarn_low, double yarn_high, unsigned i,
                                       unsigned D)
{
    double freq = pow(theta, -2.0 * (double)i / (double)D);
    if (yarn_high > 0) {
        double ramp = fmin(fmax(((double)i - yarn_low) / (yarn_high - yarn_low), 0.0), 1.0);
        return freq / scaling * ramp + freq * (1 - ramp);
    }
    if (scaling <= 0)
        return freq;
    const double low = 1.0, high = 4.0, context = 8192.0;
    double wavelen = MCC_TWO_PI / freq;
    if (wavelen < context / high)
        return freq;
    if (wavelen > context / low)
        return freq / scaling;
    double smooth = (context / wavelen - low) / (high - low);
    return (1 - smooth) * freq / scaling + smooth * freq;
}

// x, r [B,T,H,D] as rows [B T H, D]. Thread (lane, group) of the block owns pairs
// [i0, i0 + W), i0 = lane W, lane < half / W, and the passed-through channels 2 half + lane + k
// lanes (copied unless r is x), and walks rows; its frequencies are computed once.
// Launch: blockDim.x a multiple of half / W; sign = -1 for the inverse rotation. cp > 1: row t of
// the rank's tokens is at ir_cp_position's place (rank cp_rank's balanced chunks of T_/2). cos and
// sin are multiplied by amplitude (YaRN's concentration; 1 otherwise).
template <int W, class T>
__device__ void mcc_rope_rows(T *r, const T *x, unsigned rows, unsigned T_, unsigned H, unsigned D, unsigned half,
                              double theta, double scaling, double yarn_low, double yarn_high, float amplitude,
                              double sign, int cp, int cp_rank)
{
    unsigned lanes = half / W, lane = threadIdx.x % lanes, i0 = lane * W;
    unsigned groups = blockDim.x / lanes, group = threadIdx.x / lanes;
    double freq[W];
    for (int k = 0; k < W; k++)
        freq[k] = sign * mcc_rope_freq(theta, scaling, yarn_low, yarn_high, i0 + k, 2 * half);
    for (unsigned row = blockIdx.x * groups + group; row < rows; row += gridDim.x * groups) {
        unsigned t = (unsigned)mcc_cp_position(row / H % T_, T_, cp, cp_rank); // the rank's token's position
        long long at = (long long)row * D + i0;
        float x1[W], x2[W], c[W], s[W];
        mcc_ldn(x1, x, at);
        mcc_ldn(x2, x, at + half);
        for (int k = 0; k < W; k++) {
            double a = (double)t * freq[k];
            sincosf((float)(a - MCC_TWO_PI * rint(a / MCC_TWO_PI)), &s[k], &c[k]);
            s[k] *= amplitude;
            c[k] *= amplitude;
            float y1 = x1[k] * c[k] - x2[k] * s[k];
            x2[k] = x2[k] * c[k] + x1[k] * s[k];
            x1[k] = y1;
        }
        mcc_stn(r, at, x1);
        mcc_stn(r, at + half, x2);
        for (unsigned j = 2 * half + lane; r != x && j < D; j += lanes) {
            float v[1];
            mcc_ldn(v, x, (long long)row * D + j);
            mcc_stn(r, (long long)row * D + j, v);
        }
    }
}

// W = MCC_VEC when half is a multiple of it and the buffers are aligned (the launcher sized the
// block for the same choice).
#define MCC_ROPE(sfx, T)                                                                                   \
    extern "C" __global__ void mcc_rope_##sfx(T *r, const T *x, unsigned rows, unsigned T_, unsigned H,    \
                                              unsigned D, unsigned half, double theta, double scaling,     \
                                              double yarn_low, double yarn_high, float amplitude,          \
                                              double sign, int width, int cp, int cp_rank)                 \
    {                                                                                                      \
        if (width == MCC_VEC)                                                                              \
            mcc_rope_rows<MCC_VEC>(r, x, rows, T_, H, D, half, theta, scaling, yarn_low, yarn_high,        \
                                   amplitude, sign, cp, cp_rank);                                          \
        else                                                                                               \
            mcc_rope_rows<1>(r, x, rows, T_, H, D, half, theta, scaling, yarn_low, yarn_high, amplitude,   \
                             sign, cp, cp_rank);                                                           \
    }
MCC_FOR_FLOATS(MCC_ROPE)
