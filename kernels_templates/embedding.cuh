// embedding.cuh — token embedding lookup and its deterministic scatter-add gradient (the learned
// position embedding add is mcc_bias_add over [B, T d]). Out-of-range token ids (which the CPU
// path rejects when it validates the data) are skipped, not trapped: their output rows are zero
// and they add no gradient.
#pragma once

#define MCC_NO_TOKEN 0x7fffffff

// r[n,d] := table[ids[i], :]; block per row (grid-strided).
#define MCC_EMBEDDING(sfx, T)                                                                              \
    extern "C" __global__ void mcc_embedding_##sfx(T *r, const T *table, const int *ids, long long n,    \
                                                   long long V, long long d)                              \
    {                                                                                                      \
        for (long long i = blockIdx.x; i < n; i += gridDim.x) {                                            \
            int id = ids[i];                                                                               \
            bool ok = id >= 0 && id < V;                                                                   \
            for (long long j = threadIdx.x; j < d; j += blockDim.x)                                        \
                mcc_st(r, i * d + j, ok ? mcc_ld(table, id * d + j) : 0.0f);                               \
        }                                                                                                  \
    }
MCC_FOR_FLOATS(MCC_EMBEDDING)

// The gradient in two launches. First: first[v] := the smallest i with ids[i] == v, or
// MCC_NO_TOKEN (first must hold MCC_NO_TOKEN everywhere before; mcc_fill_i32 does that).
// atomicMin on integers is order-independent, so this is deterministic.
extern "C" __global__ void mcc_fill_i32(int *r, long long n, int value)
{
    MCC_FOR_EACH(i, n)
    r[i] = value;
}

extern "C" __global__ void mcc_embedding_first_i32(int *first, const int *ids, long long n, long long V)
{
    MCC_FOR_EACH(i, n)
    {
        int id = ids[i];
        if (id >= 0 && id < V)
            atomicMin(&first[id], (int)i);
    }
}

// Then r[V,d]: block (v, column chunk) owns vocabulary row v and one column per thread; it adds
// the dy rows of the tokens equal to v in ascending token order (the CPU's order), each warp
// finding them 32 ids at a time by ballot from first[v] on. Rows no token hit become zero.
template <class T>
__device__ void mcc_embedding_grad(T *r, const T *dy, const int *ids, const int *first, long long n, long long d)
{
    long long v = blockIdx.x, col = blockIdx.y * (long long)blockDim.x + threadIdx.x;
    int lane = threadIdx.x & 31;
    float acc = 0.0f;
    if (first[v] != MCC_NO_TOKEN)
        for (long long j0 = first[v]; j0 < n; j0 += 32) { // uniform per warp: every lane reaches the ballot
            bool hit = j0 + lane < n && ids[j0 + lane] == v;
            for (unsigned m = __ballot_sync(0xffffffffu, hit); m; m &= m - 1)
                if (col < d)
                    acc += mcc_ld(dy, (j0 + __ffs(m) - 1) * d + col);
        }
    if (col < d)
        mcc_st(r, v * d + col, acc);
}

#define MCC_EMBEDDING_GRAD(sfx, T)                                                                         \
    extern "C" __global__ void mcc_embedding_grad_##sfx(T *r, const T *dy, const int *ids, const int *first, \
                                                        long long n, long long d)                         \
    {                                                                                                      \
        mcc_embedding_grad(r, dy, ids, first, n, d);                                                       \
    }
MCC_FOR_FLOATS(MCC_EMBEDDING_GRAD)
