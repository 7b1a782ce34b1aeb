// embedding.cuh — token embedding lookup and its deterministic scatter-add gradient (the learned
// position embedding add is mcc_bias_add over [B, T d]). Out-of-range token ids (which the CPU
// path rejects when it validates the data) are skipped, not trapped: their output rows are zero
// and they add no gradient.
#pragma once

#define MCC_NO_TOKEN 0x7fffffff

// r[n,d] := table[ids[i], :]; block per row (grid-strided).
#define MCC_EMBEDDING(sfx, T)                                                                              \
    extern "C" __global__ void mcc_embedding_##sfx(T *r, const T *table, const int *ids, long long n,    \
                                                   long long V, long long d, long long start)             \
    {                                                                                                      \
        for (long long i = blockIdx.x; i < n; i += gridDim.x) {                                            \
            long long row = (long long)ids[i] - start; /* the table holds rows start.. (vocab-parallel) */ \
            bool ok = row >= 0 && row < V;                                                                 \
            for (long long j = threadIdx.x; j < d; j += blockDim.x)                                        \
                mcc_st(r, i * d + j, ok ? mcc_ld(table, row * d + j) : 0.0f);                              \
        }                                                                                                  \
    }
MCC_FOR_FLOATS(MCC_EMBEDDING)

// The gradient, r[V,d] := sum over tokens i with ids[i] = vocab_start + v of dy[i,:], by a
// counting sort of the token positions by id, so every row is summed in token order by one
// thread per column: deterministic, and O(tokens + V) however the ids repeat. Tokens are taken
// in chunks of MCC_EMB_CHUNK (one block each); ids outside [vocab_start, vocab_start+V) (other
// vocabulary shards, or bad data) are skipped.
#define MCC_EMB_CHUNK 1024

__device__ __forceinline__ int mcc_emb_row(const int *ids, long long i, long long start, long long V)
{
    long long row = (long long)ids[i] - start;
    return row >= 0 && row < V ? (int)row : -1;
}

// count[c*V + row] := tokens of chunk c with that row (count zeroed first); rank[i] := tokens
// before i in its chunk with the same row.
extern "C" __global__ void mcc_embedding_count_i32(int *count, int *rank, const int *ids, long long n,
                                                   long long start, long long V)
{
    __shared__ int rows[MCC_EMB_CHUNK];
    long long base = (long long)blockIdx.x * MCC_EMB_CHUNK;
    int len = (int)(n - base < MCC_EMB_CHUNK ? n - base : MCC_EMB_CHUNK);
    for (int k = threadIdx.x; k < len; k += blockDim.x)
        rows[k] = mcc_emb_row(ids, base + k, start, V);
    __syncthreads();
    for (int k = threadIdx.x; k < len; k += blockDim.x) {
        int row = rows[k], before = 0;
        if (row < 0)
            continue;
        for (int j = 0; j < k; j++)
            before += rows[j] == row;
        rank[base + k] = before;
        atomicAdd(&count[(long long)blockIdx.x * V + row], 1); // integer: the total is order-free
    }
}

// Per row: count[c*V + row] becomes the tokens of that row in chunks before c; total[row] all.
extern "C" __global__ void mcc_embedding_prefix_i32(int *count, int *total, long long chunks, long long V)
{
    MCC_FOR_EACH(row, V)
    {
        int run = 0;
        for (long long c = 0; c < chunks; c++) {
            int k = count[c * V + row];
            count[c * V + row] = run;
            run += k;
        }
        total[row] = run;
    }
}

// offset[row] := exclusive prefix sum of total over rows; one block of 1024 threads, each
// scanning a contiguous slice.
extern "C" __global__ void mcc_embedding_offsets_i32(int *offset, const int *total, long long V)
{
    __shared__ int partial[1024];
    long long per = (V + blockDim.x - 1) / blockDim.x, lo = threadIdx.x * per, hi = lo + per < V ? lo + per : V;
    int sum = 0;
    for (long long r = lo; r < hi; r++)
        sum += total[r];
    partial[threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.x == 0)
        for (int t = 0, run = 0; t < (int)blockDim.x; t++) {
            int k = partial[t];
            partial[t] = run;
            run += k;
        }
    __syncthreads();
    int run = partial[threadIdx.x];
    for (long long r = lo; r < hi; r++) {
        offset[r] = run;
        run += total[r];
    }
}

// order[offset[row] + before-chunks + rank] := i: the positions of each row, in token order.
extern "C" __global__ void mcc_embedding_scatter_i32(int *order, const int *offset, const int *count,
                                                     const int *rank, const int *ids, long long n, long long start,
                                                     long long V)
{
    MCC_FOR_EACH(i, n)
    {
        int row = mcc_emb_row(ids, i, start, V);
        if (row >= 0)
            order[offset[row] + count[(i / MCC_EMB_CHUNK) * V + row] + rank[i]] = (int)i;
    }
}

// r[row, col] := sum of dy[order[s], col] over the row's slots; block (row, column chunk).
template <class T>
__device__ void mcc_embedding_grad(T *r, const T *dy, const int *order, const int *offset, const int *total,
                                   long long d)
{
    long long row = blockIdx.x, col = blockIdx.y * (long long)blockDim.x + threadIdx.x;
    if (col >= d)
        return;
    float acc = 0.0f;
    for (int s = offset[row], e = s + total[row]; s < e; s++)
        acc += mcc_ld(dy, (long long)order[s] * d + col);
    mcc_st(r, row * d + col, acc);
}

#define MCC_EMBEDDING_GRAD(sfx, T)                                                                         \
    extern "C" __global__ void mcc_embedding_grad_##sfx(T *r, const T *dy, const int *order, const int *offset, \
                                                        const int *total, long long d)                    \
    {                                                                                                      \
        mcc_embedding_grad(r, dy, order, offset, total, d);                                                \
    }
MCC_FOR_FLOATS(MCC_EMBEDDING_GRAD)
