// cross_entropy.cuh — softmax cross-entropy over logits[N,V] with i32 targets, one block per row:
// an online (max, sum of exp) pass gives the row's log-sum-exp in fp32 without ever holding
// probabilities. The forward writes per-row losses that mcc_mean_f32 averages in a fixed order;
// the backward writes dlogits in the logits' dtype. Out-of-range targets (the CPU path rejects
// them when it validates the data) are skipped: the row's loss and gradient are zero.
#pragma once

// (max, sum of exp(x - max)) pairs; an empty side has max = -inf and sum 0.
struct mcc_lse_op {
    __device__ float2 operator()(float2 a, float2 b) const
    {
        float m = fmaxf(a.x, b.x);
        if (m == MCC_NEG_INF)
            return a;
        return make_float2(m, a.y * expf(a.x - m) + b.y * expf(b.x - m));
    }
};

// log(sum(exp(x[V]))) of one row, the same in every thread of the block.
template <class T> __device__ float mcc_row_logsumexp(const T *x, long long V)
{
    float2 ms = make_float2(MCC_NEG_INF, 0.0f);
    for (long long j = threadIdx.x; j < V; j += blockDim.x) {
        float v = mcc_ld(x, j);
        if (v > ms.x) {
            ms.y = ms.y * expf(ms.x - v) + 1.0f;
            ms.x = v;
        } else {
            ms.y += expf(v - ms.x);
        }
    }
    ms = mcc_block_reduce(ms, mcc_lse_op(), make_float2(MCC_NEG_INF, 0.0f));
    return ms.x + logf(ms.y);
}

// loss[N] := logsumexp(row) - row[target]
template <class T>
__device__ void mcc_cross_entropy_rows(float *loss, const T *logits, const int *targets, long long N, long long V)
{
    for (long long row = blockIdx.x; row < N; row += gridDim.x) {
        const T *x = logits + row * V;
        float lse = mcc_row_logsumexp(x, V);
        int t = targets[row];
        if (threadIdx.x == 0)
            loss[row] = t >= 0 && t < V ? lse - mcc_ld(x, t) : 0.0f;
    }
}

// dlogits[N,V] := dloss (softmax - onehot(target)) / N
template <class T>
__device__ void mcc_cross_entropy_grad(T *dlogits, const float *dloss, const T *logits, const int *targets, long long N,
                                       long long V)
{
    float f = dloss[0] / (float)N;
    for (long long row = blockIdx.x; row < N; row += gridDim.x) {
        const T *x = logits + row * V;
        float lse = mcc_row_logsumexp(x, V);
        int t = targets[row];
        bool ok = t >= 0 && t < V;
        for (long long j = threadIdx.x; j < V; j += blockDim.x)
            mcc_st(dlogits + row * V, j, ok ? f * (expf(mcc_ld(x, j) - lse) - (j == t ? 1.0f : 0.0f)) : 0.0f);
    }
}

#define MCC_CROSS_ENTROPY(sfx, T)                                                                          \
    extern "C" __global__ void mcc_cross_entropy_rows_##sfx(float *loss, const T *logits, const int *targets, \
                                                            long long N, long long V)                     \
    {                                                                                                      \
        mcc_cross_entropy_rows(loss, logits, targets, N, V);                                               \
    }                                                                                                      \
    extern "C" __global__ void mcc_cross_entropy_grad_##sfx(T *dlogits, const float *dloss, const T *logits, \
                                                            const int *targets, long long N, long long V) \
    {                                                                                                      \
        mcc_cross_entropy_grad(dlogits, dloss, logits, targets, N, V);                                     \
    }
MCC_FOR_FLOATS(MCC_CROSS_ENTROPY)
