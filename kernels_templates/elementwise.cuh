// elementwise.cuh — one thread per element: fill, add, mul, scale, bias_add, gelu, silu and their
// gradients, sqrt, and the dtype-converting accumulate and copy. Math in fp32, one rounding on store.
#pragma once

// GPT-2's tanh approximation, gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
// tanh is written through exp: --use_fast_math may turn tanhf into a 2^-11-accurate
// instruction, while exp keeps ~1e-7, which the f32 comparison with the CPU oracle needs.
#define MCC_GELU_K 0.7978845608028654f
#define MCC_GELU_C 0.044715f

__device__ __forceinline__ float mcc_tanh(float u) { return 1.0f - 2.0f / (1.0f + expf(2.0f * u)); }
__device__ __forceinline__ float mcc_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

struct mcc_gelu_fn {
    __device__ float operator()(float x) const
    {
        return 0.5f * x * (1.0f + mcc_tanh(MCC_GELU_K * (x + MCC_GELU_C * x * x * x)));
    }
};
// (dy, x) -> dy (0.5 (1 + t) + 0.5 x (1 - t^2) du/dx)
struct mcc_gelu_grad_fn {
    __device__ float operator()(float dy, float x) const
    {
        float t = mcc_tanh(MCC_GELU_K * (x + MCC_GELU_C * x * x * x));
        float dudx = MCC_GELU_K * (1.0f + 3.0f * MCC_GELU_C * x * x);
        return dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * dudx);
    }
};
struct mcc_silu_fn {
    __device__ float operator()(float x) const { return x * mcc_sigmoid(x); }
};
// (dy, x) -> dy s (1 + x (1 - s)), s = sigmoid(x)
struct mcc_silu_grad_fn {
    __device__ float operator()(float dy, float x) const
    {
        float s = mcc_sigmoid(x);
        return dy * s * (1.0f + x * (1.0f - s));
    }
};
struct mcc_sqrt_fn {
    __device__ float operator()(float x) const { return __fsqrt_rn(x); }
};
struct mcc_add_fn {
    __device__ float operator()(float a, float b) const { return a + b; }
};
struct mcc_mul_fn {
    __device__ float operator()(float a, float b) const { return a * b; }
};
struct mcc_scale_fn {
    float factor;
    __device__ float operator()(float x) const { return x * factor; }
};

// r[n] := f(a)
template <class T, class F> __device__ void mcc_map1(T *r, const T *a, long long n, F f)
{
    MCC_FOR_EACH(i, n)
    mcc_st(r, i, f(mcc_ld(a, i)));
}

// r[n] := f(a, b)
template <class T, class F> __device__ void mcc_map2(T *r, const T *a, const T *b, long long n, F f)
{
    MCC_FOR_EACH(i, n)
    mcc_st(r, i, f(mcc_ld(a, i), mcc_ld(b, i)));
}

#define MCC_UNARY(op, F)                                                                                   \
    MCC_UNARY_AS(op, F, f32, float)                                                                        \
    MCC_UNARY_AS(op, F, bf16, mcc_bf16)
#define MCC_UNARY_AS(op, F, sfx, T)                                                                        \
    extern "C" __global__ void mcc_##op##_##sfx(T *r, const T *a, long long n) { mcc_map1(r, a, n, F()); }
#define MCC_BINARY(op, F)                                                                                  \
    MCC_BINARY_AS(op, F, f32, float)                                                                       \
    MCC_BINARY_AS(op, F, bf16, mcc_bf16)
#define MCC_BINARY_AS(op, F, sfx, T)                                                                       \
    extern "C" __global__ void mcc_##op##_##sfx(T *r, const T *a, const T *b, long long n)               \
    {                                                                                                      \
        mcc_map2(r, a, b, n, F());                                                                         \
    }

MCC_UNARY(gelu, mcc_gelu_fn)
MCC_UNARY(silu, mcc_silu_fn)
MCC_UNARY(sqrt, mcc_sqrt_fn)
MCC_BINARY(add, mcc_add_fn)
MCC_BINARY(mul, mcc_mul_fn)
MCC_BINARY(gelu_grad, mcc_gelu_grad_fn) // (r, dy, x)
MCC_BINARY(silu_grad, mcc_silu_grad_fn) // (r, dy, x)

#define MCC_SCALE(sfx, T)                                                                                  \
    extern "C" __global__ void mcc_scale_##sfx(T *r, const T *a, long long n, float factor)              \
    {                                                                                                      \
        mcc_map1(r, a, n, mcc_scale_fn{factor});                                                           \
    }
MCC_FOR_FLOATS(MCC_SCALE)

// r[n] := value
#define MCC_FILL(sfx, T)                                                                                   \
    extern "C" __global__ void mcc_fill_##sfx(T *r, long long n, float value)                             \
    {                                                                                                      \
        MCC_FOR_EACH(i, n)                                                                                 \
        mcc_st(r, i, value);                                                                               \
    }
MCC_FOR_FLOATS(MCC_FILL)

// r[R,N] := x[R,N] + b[N]; n = R N. Named mcc_bias_add_<x>_<b>.
#define MCC_BIAS_ADD(sfx, T, B)                                                                            \
    extern "C" __global__ void mcc_bias_add_##sfx(T *r, const T *x, const B *b, long long n, long long N) \
    {                                                                                                      \
        MCC_FOR_EACH(i, n)                                                                                 \
        mcc_st(r, i, mcc_ld(x, i) + mcc_ld(b, i % N));                                                     \
    }
MCC_FOR_FLOAT_PAIRS(MCC_BIAS_ADD)

// dst[n] += src[n]; mcc_accumulate_<dst>_<src> (f32 gradients gather bf16 micro-batch grads).
#define MCC_ACCUMULATE(sfx, D, S)                                                                          \
    extern "C" __global__ void mcc_accumulate_##sfx(D *dst, const S *src, long long n)                    \
    {                                                                                                      \
        MCC_FOR_EACH(i, n)                                                                                 \
        mcc_st(dst, i, mcc_ld(dst, i) + mcc_ld(src, i));                                                   \
    }
MCC_FOR_FLOAT_PAIRS(MCC_ACCUMULATE)

// dst[n] := src[n] converted; mcc_copy_<dst>_<src> (bf16 working copies of f32 master weights).
#define MCC_COPY(sfx, D, S)                                                                                \
    extern "C" __global__ void mcc_copy_##sfx(D *dst, const S *src, long long n)                          \
    {                                                                                                      \
        MCC_FOR_EACH(i, n)                                                                                 \
        mcc_st(dst, i, mcc_ld(src, i));                                                                    \
    }
MCC_FOR_FLOAT_PAIRS(MCC_COPY)
