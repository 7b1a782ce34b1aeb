// elementwise.cuh — fill, add, mul, scale, bias_add, gelu, silu, squared relu, swiglu and their gradients, sqrt, and the
// dtype-converting accumulate and copy: MCC_VEC elements per thread by 16-byte loads and stores
// (these kernels only move memory). Math in fp32, one rounding on store. The maps of one or two
// operands and swiglu_grad take a row bound (mcc_row_bound: the rows an expert-parallel dispatch
// received, counted on the device); past it they neither read nor write. Last, the moves of
// split_last_dim and concat_last_dim (an element a thread).
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
// relu(x)^2 (Nemotron-4's MLP); x > 0 as the CPU's kernel tests it
struct mcc_squared_relu_fn {
    __device__ float operator()(float x) const { return x > 0.0f ? x * x : 0.0f; }
};
// (dy, x) -> dy 2 relu(x)
struct mcc_squared_relu_grad_fn {
    __device__ float operator()(float dy, float x) const { return x > 0.0f ? dy * (2.0f * x) : 0.0f; }
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
    mcc_for_each_vec(n, mcc_aligned(r, a), [&](auto w, long long i) {
        float v[decltype(w)::value];
        mcc_ldn(v, a, i);
        for (int k = 0; k < decltype(w)::value; k++)
            v[k] = f(v[k]);
        mcc_stn(r, i, v);
    });
}

// r[n] := f(a, b); a and b may differ in dtype from r (accumulate's f32 += bf16). absmax (not
// null): the max |r| as stored, as mcc_absmax_stored takes it (swiglu's amax result).
template <class T, class A, class B, class F>
__device__ void mcc_map2(T *r, const A *a, const B *b, long long n, F f, unsigned *absmax = nullptr)
{
    mcc_for_each_vec(n, mcc_aligned(r, a, b), [&](auto w, long long i) {
        float va[decltype(w)::value], vb[decltype(w)::value];
        mcc_ldn(va, a, i);
        mcc_ldn(vb, b, i);
        for (int k = 0; k < decltype(w)::value; k++)
            va[k] = f(va[k], vb[k]);
        mcc_stn(r, i, va);
        if (absmax)
            mcc_absmax_stored(*absmax, r, va);
    });
}

#define MCC_UNARY(op, F)                                                                                   \
    MCC_UNARY_AS(op, F, f32, float)                                                                        \
    MCC_UNARY_AS(op, F, bf16, mcc_bf16)
#define MCC_UNARY_AS(op, F, sfx, T)                                                                        \
    extern "C" __global__ void mcc_##op##_##sfx(T *r, const T *a, long long n, mcc_row_bound rb)         \
    {                                                                                                      \
        mcc_map1(r, a, mcc_bounded(n, rb), F());                                                           \
    }
#define MCC_BINARY(op, F)                                                                                  \
    MCC_BINARY_AS(op, F, f32, float)                                                                       \
    MCC_BINARY_AS(op, F, bf16, mcc_bf16)
#define MCC_BINARY_AS(op, F, sfx, T)                                                                       \
    extern "C" __global__ void mcc_##op##_##sfx(T *r, const T *a, const T *b, long long n, mcc_row_bound rb) \
    {                                                                                                      \
        mcc_map2(r, a, b, mcc_bounded(n, rb), F());                                                        \
    }

MCC_UNARY(gelu, mcc_gelu_fn)
MCC_UNARY(silu, mcc_silu_fn)
MCC_UNARY(sqrt, mcc_sqrt_fn)
MCC_BINARY(add, mcc_add_fn)
MCC_BINARY(mul, mcc_mul_fn)
MCC_BINARY(gelu_grad, mcc_gelu_grad_fn) // (r, dy, x)
MCC_BINARY(silu_grad, mcc_silu_grad_fn) // (r, dy, x)
MCC_UNARY(squared_relu, mcc_squared_relu_fn)
MCC_BINARY(squared_relu_grad, mcc_squared_relu_grad_fn) // (r, dy, x)

// (r, gate, up): silu(gate) up; amax (not null: the instruction's amax result) the max |r| as stored
struct mcc_swiglu_fn {
    __device__ float operator()(float gate, float up) const { return gate * mcc_sigmoid(gate) * up; }
};
#define MCC_SWIGLU(sfx, T)                                                                                 \
    extern "C" __global__ void mcc_swiglu_##sfx(T *r, const T *g, const T *u, long long n, mcc_row_bound rb, \
                                                unsigned *amax)                                           \
    {                                                                                                      \
        unsigned m = 0;                                                                                    \
        mcc_map2(r, g, u, mcc_bounded(n, rb), mcc_swiglu_fn(), amax ? &m : nullptr);                       \
        mcc_amax_commit(amax, m);                                                                          \
    }
MCC_FOR_FLOATS(MCC_SWIGLU)

// (dgate, dup, h, dy, gate, up): dgate = dy up silu'(gate), dup = dy silu(gate), in one pass that
// recomputes silu(gate), and where h is not null the forward's product silu(gate) up
// (swiglu_grad_product: the backward's recomputation of it); every operand element is read before
// its results are written (the memory plan may give dgate dy's bytes). amax_dg, amax_du (not null:
// the instruction's amax results) the max |dgate|, |dup| as stored.
template <class T>
__device__ void mcc_swiglu_grad(T *dg, T *du, T *h, const T *dy, const T *g, const T *u, long long n, unsigned *amax_dg,
                                unsigned *amax_du)
{
    unsigned mg = 0, mu = 0;
    mcc_for_each_vec(n, mcc_aligned(dg, du, h, dy, g, u), [&](auto w, long long i) {
        constexpr int W = decltype(w)::value;
        float vy[W], vg[W], vu[W], vh[W];
        mcc_ldn(vy, dy, i);
        mcc_ldn(vg, g, i);
        mcc_ldn(vu, u, i);
        for (int k = 0; k < W; k++) {
            float s = mcc_sigmoid(vg[k]), silu = vg[k] * s;
            vh[k] = silu * vu[k];
            vg[k] = vy[k] * vu[k] * s * (1.0f + vg[k] * (1.0f - s));
            vu[k] = vy[k] * silu;
        }
        mcc_stn(dg, i, vg);
        mcc_stn(du, i, vu);
        if (h)
            mcc_stn(h, i, vh);
        if (amax_dg)
            mcc_absmax_stored(mg, dg, vg);
        if (amax_du)
            mcc_absmax_stored(mu, du, vu);
    });
    mcc_amax_commit(amax_dg, mg);
    mcc_amax_commit(amax_du, mu);
}
#define MCC_SWIGLU_GRAD(sfx, T)                                                                            \
    extern "C" __global__ void mcc_swiglu_grad_##sfx(T *dg, T *du, T *h, const T *dy, const T *g,        \
                                                     const T *u, long long n, mcc_row_bound rb,            \
                                                     unsigned *amax_dg, unsigned *amax_du)                 \
    {                                                                                                      \
        mcc_swiglu_grad(dg, du, h, dy, g, u, mcc_bounded(n, rb), amax_dg, amax_du);                        \
    }
MCC_FOR_FLOATS(MCC_SWIGLU_GRAD)

#define MCC_SCALE(sfx, T)                                                                                  \
    extern "C" __global__ void mcc_scale_##sfx(T *r, const T *a, long long n, float factor,              \
                                               mcc_row_bound rb)                                           \
    {                                                                                                      \
        mcc_map1(r, a, mcc_bounded(n, rb), mcc_scale_fn{factor});                                          \
    }
MCC_FOR_FLOATS(MCC_SCALE)

// r[n] := value
#define MCC_FILL(sfx, T)                                                                                   \
    extern "C" __global__ void mcc_fill_##sfx(T *r, long long n, float value)                             \
    {                                                                                                      \
        mcc_for_each_vec(n, mcc_aligned(r), [&](auto w, long long i) {                                     \
            float v[decltype(w)::value];                                                                              \
            for (int k = 0; k < decltype(w)::value; k++)                                                              \
                v[k] = value;                                                                              \
            mcc_stn(r, i, v);                                                                              \
        });                                                                                                \
    }
MCC_FOR_FLOATS(MCC_FILL)

// r[R,N] := x[R,N] + b[N] (bias_add; pos_add as x[B, T d] + table[T d]). Grid (column chunks,
// row groups): a thread keeps its MCC_VEC bias values in registers down the rows, so there is
// no per-element modulo. Named mcc_bias_add_<x>_<b>.
template <int W, class T, class B>
__device__ void mcc_bias_add_cols(T *r, const T *x, const B *b, long long R, long long N)
{
    for (long long c = (blockIdx.x * (long long)blockDim.x + threadIdx.x) * W; c < N;
         c += (long long)gridDim.x * blockDim.x * W) {
        float bv[W];
        mcc_ldn(bv, b, c);
        for (long long row = blockIdx.y; row < R; row += gridDim.y) {
            float v[W];
            mcc_ldn(v, x, row * N + c);
            for (int k = 0; k < W; k++)
                v[k] += bv[k];
            mcc_stn(r, row * N + c, v);
        }
    }
}
#define MCC_BIAS_ADD(sfx, T, B)                                                                            \
    extern "C" __global__ void mcc_bias_add_##sfx(T *r, const T *x, const B *b, long long R, long long N) \
    {                                                                                                      \
        if (N % MCC_VEC == 0 && mcc_aligned(r, x, b))                                                      \
            mcc_bias_add_cols<MCC_VEC>(r, x, b, R, N);                                                     \
        else                                                                                               \
            mcc_bias_add_cols<1>(r, x, b, R, N);                                                           \
    }
MCC_FOR_FLOAT_PAIRS(MCC_BIAS_ADD)

// dst[n] += src[n]; mcc_accumulate_<dst>_<src> (f32 gradients gather bf16 micro-batch grads).
#define MCC_ACCUMULATE(sfx, D, S)                                                                          \
    extern "C" __global__ void mcc_accumulate_##sfx(D *dst, const S *src, long long n)                    \
    {                                                                                                      \
        mcc_map2(dst, dst, src, n, mcc_add_fn());                                                          \
    }
MCC_FOR_FLOAT_PAIRS(MCC_ACCUMULATE)

// dst[n] := src[n] converted; mcc_copy_<dst>_<src> (bf16 working copies of f32 master weights; the
// convert op's r := a, the f32 router of --moe-router-dtype fp32).
#define MCC_COPY(sfx, D, S)                                                                                \
    extern "C" __global__ void mcc_copy_##sfx(D *dst, const S *src, long long n)                          \
    {                                                                                                      \
        mcc_for_each_vec(n, mcc_aligned(dst, src), [&](auto w, long long i) {                              \
            float v[decltype(w)::value];                                                                              \
            mcc_ldn(v, src, i);                                                                            \
            mcc_stn(dst, i, v);                                                                            \
        });                                                                                                \
    }
MCC_FOR_FLOAT_PAIRS(MCC_COPY)

// split_last_dim's part r[O,Hr,w] of x[O,H,N]: channels [first, first + w) of each head (Hr = H),
// or with sum (Hr = 1) their sum over the H heads in fp32. One thread an element of r.
#define MCC_TAKE_LAST_DIM(sfx, T)                                                                          \
    extern "C" __global__ void mcc_take_last_dim_##sfx(T *r, const T *x, long long O, long long H,        \
                                                        long long N, long long first, long long w, int sum) \
    {                                                                                                      \
        long long hr = sum ? 1 : H, n = O * hr * w;                                                        \
        for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;                        \
             i += (long long)gridDim.x * blockDim.x) {                                                      \
            long long j = i % w, h = (i / w) % hr, o = i / (w * hr);                                       \
            float v = 0.0f;                                                                                \
            for (long long k = sum ? 0 : h; k < (sum ? H : h + 1); k++)                                    \
                v += mcc_ld(x, (o * H + k) * N + first + j);                                               \
            mcc_st(r, i, v);                                                                               \
        }                                                                                                  \
    }
MCC_FOR_FLOATS(MCC_TAKE_LAST_DIM)

// concat_last_dim: r[O,H,Da+Db] of a[O,Ha,Da], b[O,Hb,Db], an operand of one head (Ha or Hb 1) read
// for every head. One thread an element of r.
#define MCC_CONCAT_LAST_DIM(sfx, T)                                                                        \
    extern "C" __global__ void mcc_concat_last_dim_##sfx(T *r, const T *a, const T *b, long long O,       \
                                                          long long H, long long Ha, long long Da,          \
                                                          long long Hb, long long Db)                       \
    {                                                                                                      \
        long long w = Da + Db, n = O * H * w;                                                              \
        for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;                        \
             i += (long long)gridDim.x * blockDim.x) {                                                      \
            long long j = i % w, h = (i / w) % H, o = i / (w * H);                                         \
            float v = j < Da ? mcc_ld(a, (o * Ha + (Ha == 1 ? 0 : h)) * Da + j)                            \
                             : mcc_ld(b, (o * Hb + (Hb == 1 ? 0 : h)) * Db + j - Da);                      \
            mcc_st(r, i, v);                                                                               \
        }                                                                                                  \
    }
MCC_FOR_FLOATS(MCC_CONCAT_LAST_DIM)

// shift_seq: r[B,n,w] of x[B,T,w] in 2-byte units (w a position's: f32 and i32 two, bf16 one),
// r[b,t] = x[b,t+by] where 0 <= t+by < T, else 0. One thread a unit of r.
extern "C" __global__ void mcc_shift_seq(unsigned short *r, const unsigned short *x, long long B, long long T,
                                         long long n, long long by, long long w)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < B * n * w;
         i += (long long)gridDim.x * blockDim.x) {
        long long j = i % w, t = (i / w) % n, b = i / (w * n), from = t + by;
        r[i] = from >= 0 && from < T ? x[(b * T + from) * w + j] : (unsigned short)0;
    }
}
