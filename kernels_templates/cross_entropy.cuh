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

// log(sum(exp(x[V]))) of one row, the same in every thread of the block, in one pass: each
// thread folds W elements at a time into its (max, sum) pair (one rescale per chunk).
template <int W, class T> __device__ float mcc_row_logsumexp(const T *x, long long V)
{
    float2 ms = make_float2(MCC_NEG_INF, 0.0f);
    for (long long j = threadIdx.x * (long long)W; j < V; j += blockDim.x * (long long)W) {
        float v[W], m = ms.x, s = 0.0f;
        mcc_ldn(v, x, j);
        for (int k = 0; k < W; k++)
            m = fmaxf(m, v[k]);
        if (m == MCC_NEG_INF)
            continue;
        for (int k = 0; k < W; k++)
            s += expf(v[k] - m);
        ms = make_float2(m, ms.y * expf(ms.x - m) + s);
    }
    ms = mcc_block_reduce(ms, mcc_lse_op(), make_float2(MCC_NEG_INF, 0.0f));
    return ms.x + logf(ms.y);
}

// loss[N] := logsumexp(row) - row[target]
template <int W, class T>
__device__ void mcc_cross_entropy_rows(float *loss, const T *logits, const int *targets, long long N, long long V)
{
    for (long long row = blockIdx.x; row < N; row += gridDim.x) {
        const T *x = logits + row * V;
        float lse = mcc_row_logsumexp<W>(x, V);
        int t = targets[row];
        if (threadIdx.x == 0)
            loss[row] = t >= 0 && t < V ? lse - mcc_ld(x, t) : 0.0f;
    }
}

// dlogits[N,V] := dloss (softmax - onehot(target)) / N; reads each row twice (the second time
// mostly from L2). With loss (cross_entropy_with_grad) also loss[row] as mcc_cross_entropy_rows,
// the row's target logit read before any thread writes the row: dlogits may be the logits.
template <int W, class T>
__device__ void mcc_cross_entropy_grad(T *dlogits, float *loss, const float *dloss, const T *logits, const int *targets,
                                       long long N, long long V)
{
    float f = dloss[0] / (float)N;
    for (long long row = blockIdx.x; row < N; row += gridDim.x) {
        const T *x = logits + row * V;
        float lse = mcc_row_logsumexp<W>(x, V);
        int t = targets[row];
        bool ok = t >= 0 && t < V;
        if (loss) { // the same for the whole block
            float xt = threadIdx.x == 0 && ok ? mcc_ld(x, t) : 0.0f;
            __syncthreads();
            if (threadIdx.x == 0)
                loss[row] = ok ? lse - xt : 0.0f;
        }
        for (long long j = threadIdx.x * (long long)W; j < V; j += blockDim.x * (long long)W) {
            float v[W];
            mcc_ldn(v, x, j);
            for (int k = 0; k < W; k++)
                v[k] = ok ? f * (expf(v[k] - lse) - (j + k == t ? 1.0f : 0.0f)) : 0.0f;
            mcc_stn(dlogits + row * V, j, v);
        }
    }
}

// Rows start 16-byte aligned when V is a multiple of MCC_VEC and the buffers are.
#define MCC_CROSS_ENTROPY(sfx, T)                                                                          \
    extern "C" __global__ void mcc_cross_entropy_rows_##sfx(float *loss, const T *logits, const int *targets, \
                                                            long long N, long long V)                     \
    {                                                                                                      \
        if (V % MCC_VEC == 0 && mcc_aligned(logits))                                                       \
            mcc_cross_entropy_rows<MCC_VEC>(loss, logits, targets, N, V);                                  \
        else                                                                                               \
            mcc_cross_entropy_rows<1>(loss, logits, targets, N, V);                                        \
    }                                                                                                      \
    extern "C" __global__ void mcc_cross_entropy_grad_##sfx(T *dlogits, const float *dloss, const T *logits, \
                                                            const int *targets, long long N, long long V) \
    {                                                                                                      \
        if (V % MCC_VEC == 0 && mcc_aligned(dlogits, logits))                                              \
            mcc_cross_entropy_grad<MCC_VEC>(dlogits, (float *)nullptr, dloss, logits, targets, N, V);      \
        else                                                                                               \
            mcc_cross_entropy_grad<1>(dlogits, (float *)nullptr, dloss, logits, targets, N, V);            \
    }                                                                                                      \
    extern "C" __global__ void mcc_cross_entropy_with_grad_##sfx(float *loss, T *dlogits, const T *logits, \
                                                                 const int *targets, const float *dloss,   \
                                                                 long long N, long long V)                 \
    {                                                                                                      \
        if (V % MCC_VEC == 0 && mcc_aligned(dlogits, logits))                                              \
            mcc_cross_entropy_grad<MCC_VEC>(dlogits, loss, dloss, logits, targets, N, V);                  \
        else                                                                                               \
            mcc_cross_entropy_grad<1>(dlogits, loss, dloss, logits, targets, N, V);                        \
    }
MCC_FOR_FLOATS(MCC_CROSS_ENTROPY)
