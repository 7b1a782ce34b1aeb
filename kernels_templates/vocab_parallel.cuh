// vocab_parallel.cuh — cross entropy over logits split along the vocabulary across tensor-
// parallel ranks (ops.def: ce_row_max, ce_row_stats, ce_loss, ce_grad_sharded). Each rank holds
// V columns starting at vocabulary id `start`; the row max and (sum of exp, target logit) are
// combined over the ranks by all_reduce between these kernels. One block per row, fp32.
#pragma once

struct mcc_max_op {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// m[row] := max over the row's local logits
#define MCC_CE_ROW_MAX(sfx, T)                                                                             \
    extern "C" __global__ void mcc_ce_row_max_##sfx(float *m, const T *x, long long N, long long V)        \
    {                                                                                                      \
        for (long long row = blockIdx.x; row < N; row += gridDim.x) {                                      \
            float mx = MCC_NEG_INF;                                                                        \
            for (long long j = threadIdx.x; j < V; j += blockDim.x)                                        \
                mx = fmaxf(mx, mcc_ld(x, row * V + j));                                                    \
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
            float s = 0.0f, g = gmax[row];                                                                 \
            for (long long j = threadIdx.x; j < V; j += blockDim.x)                                        \
                s += expf(mcc_ld(x, row * V + j) - g);                                                     \
            s = mcc_block_sum(s);                                                                          \
            if (threadIdx.x == 0) {                                                                        \
                long long t = (long long)targets[row] - start;                                             \
                st[2 * row] = s;                                                                           \
                st[2 * row + 1] = t >= 0 && t < V ? mcc_ld(x, row * V + t) : 0.0f;                         \
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
            float g = gmax[row], inv = 1.0f / st[2 * row];                                                 \
            long long t = (long long)targets[row] - start;                                                 \
            for (long long j = threadIdx.x; j < V; j += blockDim.x)                                        \
                mcc_st(dx, row * V + j,                                                                    \
                       scale * (expf(mcc_ld(x, row * V + j) - g) * inv - (j == t ? 1.0f : 0.0f)));         \
        }                                                                                                  \
    }
MCC_FOR_FLOATS(MCC_CE_GRAD_SHARDED)
