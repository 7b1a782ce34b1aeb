// vocab_parallel.cuh — cross entropy over logits split along the vocabulary across tensor-
// parallel ranks (ops.def: ce_row_max, ce_row_stats, ce_loss, ce_grad_sharded). Each rank holds
// V columns starting at vocabulary id `start`; the row max and (sum of exp, target logit) are
// combined over the ranks by all_reduce between these kernels. One block per row, fp32, reading
// the row 16 bytes at a time where it can.
#pragma once

struct mcc_max_op {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Calls body(mcc_width<W>(), j) on columns [j, j + W) of a row of V, the block's threads taking
// MCC_VEC at a time when `vector` (V a multiple of it, the row's buffers 16-byte aligned), then
// one at a time for the rest: the logits of a rank's vocabulary shard read at full bandwidth.
template <class Body> __device__ __forceinline__ void mcc_row_for_each_vec(long long V, bool vector, Body body)
{
    long long nvec = vector ? V / MCC_VEC : 0;
    for (long long k = threadIdx.x; k < nvec; k += blockDim.x)
        body(mcc_width<MCC_VEC>(), k * MCC_VEC);
    for (long long j = nvec * MCC_VEC + threadIdx.x; j < V; j += blockDim.x)
        body(mcc_width<1>(), j);
}

// m[row] := max over the row's local logits
#define MCC_CE_ROW_MAX(sfx, T)                                                                             \
    extern "C" __global__ void mcc_ce_row_max_##sfx(float *m, const T *x, long long N, long long V)        \
    {                                                                                                      \
        for (long long row = blockIdx.x; row < N; row += gridDim.x) {                                      \
            const T *xr = x + row * V;                                                                     \
            float mx = MCC_NEG_INF;                                                                        \
            mcc_row_for_each_vec(V, V % MCC_VEC == 0 && mcc_aligned(xr), [&](auto w, long long j) {        \
                float v[decltype(w)::value];                                                               \
                mcc_ldn(v, xr, j);                                                                         \
                for (int k = 0; k < decltype(w)::value; k++)                                               \
                    mx = fmaxf(mx, v[k]);                                                                  \
            });                                                                                            \
            mx = mcc_block_reduce(mx, mcc_max_op(), MCC_NEG_INF);                                          \
            if (threadIdx.x == 0)                                                                          \
                m[row] = mx;                                                                               \
        }                                                                                                  \
    }
MCC_FOR_FLOATS(MCC_CE_ROW_MAX)

// st[row] := (sum of exp(x - gmax[row]) over the local logits, the target's logit if it is local)
#define MCC_CE_ROW_STATS(sfx, T)                                                                           \
    extern "C" __global__ void mcc_ce_row_stats_##sfx(float *st, const T *x, const int *targets,           \
                                                      const float *gmax, long long N, long long V,         \
                                                      long long start)                                     \
    {                                                                                                      \
        for (long long row = blockIdx.x; row < N; row += gridDim.x) {                                      \
            const T *xr = x + row * V;                                                                     \
            float s = 0.0f, g = gmax[row];                                                                 \
            mcc_row_for_each_vec(V, V % MCC_VEC == 0 && mcc_aligned(xr), [&](auto w, long long j) {        \
                float v[decltype(w)::value];                                                               \
                mcc_ldn(v, xr, j);                                                                         \
                for (int k = 0; k < decltype(w)::value; k++)                                               \
                    s += expf(v[k] - g);                                                                   \
            });                                                                                            \
            s = mcc_block_sum(s);                                                                          \
            if (threadIdx.x == 0) {                                                                        \
                long long t = (long long)targets[row] - start;                                             \
                st[2 * row] = s;                                                                           \
                st[2 * row + 1] = t >= 0 && t < V ? mcc_ld(xr, t) : 0.0f;                                  \
            }                                                                                              \
        }                                                                                                  \
    }
MCC_FOR_FLOATS(MCC_CE_ROW_STATS)

// loss := mean over rows of gmax + log(s0) - s1; one block, in a fixed order (deterministic)
extern "C" __global__ void mcc_ce_loss_f32(float *loss, const float *st, const float *gmax, long long N)
{
    double acc = 0.0;
    for (long long row = threadIdx.x; row < N; row += blockDim.x)
        acc += (double)gmax[row] + log((double)st[2 * row]) - (double)st[2 * row + 1];
    acc = mcc_block_sum(acc);
    if (threadIdx.x == 0)
        loss[0] = (float)(acc / (double)N);
}

// dx := dloss/N (exp(x - gmax)/s0 - onehot(target - start)) in the logits' dtype
#define MCC_CE_GRAD_SHARDED(sfx, T)                                                                        \
    extern "C" __global__ void mcc_ce_grad_sharded_##sfx(T *dx, const float *dloss, const T *x,            \
                                                         const int *targets, const float *gmax,            \
                                                         const float *st, long long N, long long V,        \
                                                         long long start)                                  \
    {                                                                                                      \
        float scale = dloss[0] / (float)N;                                                                 \
        for (long long row = blockIdx.x; row < N; row += gridDim.x) {                                      \
            const T *xr = x + row * V;                                                                     \
            T *dr = dx + row * V;                                                                          \
            float g = gmax[row], inv = 1.0f / st[2 * row];                                                 \
            long long t = (long long)targets[row] - start;                                                 \
            mcc_row_for_each_vec(V, V % MCC_VEC == 0 && mcc_aligned(xr, dr), [&](auto w, long long j) {    \
                float v[decltype(w)::value];                                                               \
                mcc_ldn(v, xr, j);                                                                         \
                for (int k = 0; k < decltype(w)::value; k++)                                               \
                    v[k] = scale * (expf(v[k] - g) * inv - (j + k == t ? 1.0f : 0.0f));                    \
                mcc_stn(dr, j, v);                                                                         \
            });                                                                                            \
        }                                                                                                  \
    }
MCC_FOR_FLOATS(MCC_CE_GRAD_SHARDED)
