// moe.cuh — mixture of experts (ir/ops.def's moe_* ops, runtime/cpu_kernels.c their oracle):
// the router (scores, top k, weights) and its backward one thread per token in double, as the
// CPU computes them, so the same experts are chosen; the aux and z losses as per-token double
// terms summed by one block in a fixed order; the stable sort by expert as chunk histograms, a
// scan and a chunk-local rank; permute, weighted unpermute and its backward a block per row;
// expert parallelism's run reordering a block per row. Integer atomics only (order-free), so
// every kernel is deterministic. The grouped GEMMs are cuBLASLt's (runtime/cuda/matmul.c).
#pragma once

#define MCC_MOE_SOFTMAX 0
#define MCC_MOE_SIGMOID 1
#define MCC_MOE_MAX_TOPK 32 // the launchers refuse a larger top k
#define MCC_MOE_MAX_GROUPS 64 // group-limited routing's groups: a bit each in a mask (the launcher refuses more)
#define MCC_MOE_SORT_CHUNK 256 // pairs per block of the sort (its block size)

__device__ __forceinline__ double mcc_moe_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

// Row l[E]'s max and sum of exp(l - max), in double.
template <class T> __device__ void mcc_moe_row_softmax_stats(const T *l, long long E, double *mx, double *sum)
{
    double m = mcc_ld(l, 0), s = 0;
    for (long long e = 1; e < E; e++)
        m = fmax(m, (double)mcc_ld(l, e));
    for (long long e = 0; e < E; e++)
        s += exp((double)mcc_ld(l, e) - m);
    *mx = m, *sum = s;
}

// The router's score of expert e (route_scores of cpu_kernels.c): softmax (pre), the logit, or
// its sigmoid.
template <class T>
__device__ __forceinline__ double mcc_moe_score(const T *l, long long e, int score, int pre, double mx, double sum)
{
    double v = mcc_ld(l, e);
    return score == MCC_MOE_SIGMOID ? mcc_moe_sigmoid(v) : pre ? exp(v - mx) / sum : v;
}

// The chosen experts' weights w[k] from their scores s[k] (s[0] the largest), before scaling:
// softmax over the chosen logits, sigmoid scores normalised to sum 1 (k > 1), else the scores;
// the router and its backward both need them
__device__ __forceinline__ void mcc_moe_weights(const double *s, int k, int score, int pre, double *w)
{
    double total = 0;
    if (score == MCC_MOE_SOFTMAX && !pre) {
        for (int j = 0; j < k; j++)
            total += w[j] = exp(s[j] - s[0]);
        for (int j = 0; j < k; j++)
            w[j] /= total;
    } else if (score == MCC_MOE_SIGMOID && k > 1) {
        for (int j = 0; j < k; j++)
            total += s[j];
        for (int j = 0; j < k; j++)
            w[j] = s[j] / (total + 1e-20);
    } else
        for (int j = 0; j < k; j++)
            w[j] = s[j];
}

// Expert e's choosing value: its score plus its bias (when there is one)
template <class T>
__device__ __forceinline__ double mcc_moe_choose(const T *l, const float *bias, long long E, long long e, int score,
                                                 int pre, double mx, double sum)
{
    return mcc_moe_score(l, e, score, pre, mx, sum) + (bias ? (double)bias[E + e] : 0.0);
}

// The k largest choosing values of experts [first, first + n) that `allowed` keeps (bit e / size),
// largest first, ties to the lower expert: each pick is the largest below the last in the order
// (value desc, expert asc). Their experts into id[k] (may be NULL), their values' sum returned.
template <class T>
__device__ double mcc_moe_top(const T *l, const float *bias, long long E, long long first, long long n, int k,
                              unsigned long long allowed, long long size, int score, int pre, double mx, double sum,
                              int *id)
{
    double last = 0, total = 0;
    long long last_e = -1;
    for (int j = 0; j < k; j++) {
        long long best = -1;
        double bv = 0;
        for (long long e = first; e < first + n; e++) {
            if (!(allowed >> (e / size) & 1))
                continue;
            double v = mcc_moe_choose(l, bias, E, e, score, pre, mx, sum);
            bool below = j == 0 || v < last || (v == last && e > last_e);
            if (below && (best < 0 || v > bv))
                best = e, bv = v;
        }
        last = bv, last_e = best, total += bv;
        if (id)
            id[j] = (int)best;
    }
    return total;
}

// Group-limited routing (cpu_kernels.c's limit_to_groups): the mask of the best `keep` of
// `groups` groups, each scored by the sum of its top k/keep choosing values, ties to the lower group
template <class T>
__device__ unsigned long long mcc_moe_groups(const T *l, const float *bias, long long E, int k, int groups, int keep,
                                             int score, int pre, double mx, double sum)
{
    double gs[MCC_MOE_MAX_GROUPS];
    long long size = E / groups;
    for (int g = 0; g < groups; g++)
        gs[g] = mcc_moe_top(l, bias, E, g * size, size, k / keep, ~0ull, size, score, pre, mx, sum, NULL);
    unsigned long long mask = 0;
    for (int j = 0; j < keep; j++) {
        int best = -1;
        for (int g = 0; g < groups; g++)
            if (!(mask >> g & 1) && (best < 0 || gs[g] > gs[best]))
                best = g;
        mask |= 1ull << best;
    }
    return mask;
}

// Token n's top k experts into id[k] (mcc_moe_top over all E, or the kept groups' with groups >
// 0), their scores into s[k], and the weights w[k] before scaling (route_weights of cpu_kernels.c).
template <class T>
__device__ void mcc_moe_route_token(const T *l, const float *bias, long long E, int k, int score, int pre,
                                    int groups, int keep, int *id, double *s, double *w)
{
    double mx = 0, sum = 1;
    if (score == MCC_MOE_SOFTMAX && pre)
        mcc_moe_row_softmax_stats(l, E, &mx, &sum);
    unsigned long long allowed = groups ? mcc_moe_groups(l, bias, E, k, groups, keep, score, pre, mx, sum) : ~0ull;
    mcc_moe_top(l, bias, E, 0, E, k, allowed, groups ? E / groups : E, score, pre, mx, sum, id);
    for (int j = 0; j < k; j++)
        s[j] = mcc_moe_score(l, id[j], score, pre, mx, sum);
    mcc_moe_weights(s, k, score, pre, w);
}

// (logits[N,E][, bias f32[2,E]]) -> (w[N,k], ids[N,k]): a thread per token
template <class T>
__device__ void mcc_moe_route(T *w, int *ids, const T *logits, const float *bias, long long N, long long E, int k,
                              int score, int pre, double scaling, int groups, int keep)
{
    MCC_FOR_EACH(n, N) {
        double s[MCC_MOE_MAX_TOPK], wd[MCC_MOE_MAX_TOPK];
        mcc_moe_route_token(logits + n * E, bias, E, k, score, pre, groups, keep, ids + n * k, s, wd);
        for (int j = 0; j < k; j++)
            mcc_st(w, n * k + j, (float)(wd[j] * scaling));
    }
}

// (dw[N,k], logits[N,E], ids[N,k]) -> dlogits[N,E]: a thread per token (cpu_MOE_ROUTE_GRAD)
template <class T>
__device__ void mcc_moe_route_grad(T *dl, const T *dw, const T *logits, const int *ids, long long N, long long E, int k,
                                   int score, int pre, double scaling)
{
    MCC_FOR_EACH(n, N) {
        const T *l = logits + n * E;
        const int *id = ids + n * k;
        double mx = 0, sum = 1, s[MCC_MOE_MAX_TOPK], w[MCC_MOE_MAX_TOPK], g[MCC_MOE_MAX_TOPK], gw = 0, ssum = 0,
               sg = 0;
        if (score == MCC_MOE_SOFTMAX && pre)
            mcc_moe_row_softmax_stats(l, E, &mx, &sum);
        for (int j = 0; j < k; j++)
            s[j] = mcc_moe_score(l, id[j], score, pre, mx, sum);
        mcc_moe_weights(s, k, score, pre, w);
        for (int j = 0; j < k; j++) {
            g[j] = (double)mcc_ld(dw, n * k + j) * scaling;
            gw += w[j] * g[j], ssum += s[j], sg += s[j] * g[j];
        }
        for (long long e = 0; e < E; e++) {
            double d = score == MCC_MOE_SOFTMAX && pre ? -exp((double)mcc_ld(l, e) - mx) / sum * sg : 0.0;
            for (int j = 0; j < k; j++) // the CPU's order: a later slot of the same expert overwrites
                if (id[j] == e) {
                    if (score == MCC_MOE_SOFTMAX && !pre)
                        d = w[j] * (g[j] - gw);
                    else if (score == MCC_MOE_SOFTMAX)
                        d += s[j] * g[j];
                    else
                        d = (k > 1 ? (g[j] - gw) / (ssum + 1e-20) : g[j]) * s[j] * (1 - s[j]);
                }
            mcc_st(dl, n * E + e, (float)d);
        }
    }
}

// counts[g][E] += the pairs routed to each expert, g = p / group the pair's group (the aux loss's
// sequence: group = S k; zeroed by the launcher); ids outside [0, E) skipped
__device__ void mcc_moe_count(int *counts, const int *ids, long long R, long long E, long long group)
{
    MCC_FOR_EACH(p, R) {
        int e = ids[p];
        if (e >= 0 && e < E)
            atomicAdd(&counts[p / group * E + e], 1);
    }
}

// h[0][ids[p]] += 1 for each pair (with w: those of w != 0); whole numbers below 2^24 add exactly
// in any order
template <class T> __device__ void mcc_moe_bias_count(float *h, const int *ids, const T *w, long long R, long long E)
{
    MCC_FOR_EACH(p, R) {
        int e = ids[p];
        if (e >= 0 && e < E && (!w || mcc_ld(w, p) != 0.0f))
            atomicAdd(&h[e], 1.0f);
    }
}

// Pair p's rank in token order: p, or under cp > 1 (rows of [B, seq] tokens gathered over cp in
// rank order) its token's place (ir/ir.h's ir_moe_pair_order).
__device__ __forceinline__ long long mcc_moe_pair_order(long long p, long long k, long long cp, long long seq)
{
    if (cp <= 1)
        return p;
    long long row = p / k, b = row / seq, q = row % seq, local = seq / cp;
    return (b * seq + mcc_cp_position(q % local, local, cp, q / local)) * k + p % k;
}

// (x, w, ids)[R] -> x * keep: pair p is kept when fewer than `capacity` pairs of its expert rank
// before it (by w descending, ties to the earlier; or by position; earlier: mcc_moe_pair_order's):
// a thread per pair, scanning; k the pairs a row
template <class T>
__device__ void mcc_moe_capacity(T *r, const T *x, const T *w, const int *ids, long long R, long long capacity,
                                 int by_position, long long k, long long cp, long long seq)
{
    MCC_FOR_EACH(p, R) {
        long long before = 0, op = mcc_moe_pair_order(p, k, cp, seq);
        float wp = mcc_ld(w, p);
        for (long long q = 0; q < R && before < capacity; q++) {
            float wq = mcc_ld(w, q);
            bool earlier = mcc_moe_pair_order(q, k, cp, seq) < op;
            before += ids[q] == ids[p] && q != p && (by_position ? earlier : wq > wp || (wq == wp && earlier));
        }
        mcc_st(r, p, before < capacity ? mcc_ld(x, p) : 0.0f);
    }
}

// (x[N,H], perm[R]) -> xp[R,H]: a block per pair, xp[perm[p]] = x[p / k]
template <int W, class T> __device__ void mcc_moe_permute(T *xp, const T *x, const int *perm, long long R, long long k, long long H)
{
    for (long long p = blockIdx.x; p < R; p += gridDim.x) {
        const T *src = x + (p / k) * H;
        T *dst = xp + (long long)perm[p] * H;
        for (long long h = threadIdx.x * (long long)W; h < H; h += blockDim.x * (long long)W) {
            float v[W];
            mcc_ldn(v, src, h);
            mcc_stn(dst, h, v);
        }
    }
}

// (yp[R,H], perm, w[N,k]) -> y[N,H] = sum_j w[n,j] yp[perm[n k + j]]: a block per token. The weights P
// may be f32 beside bf16 rows (--moe-router-dtype fp32: Megatron's combine in the router's dtype)
template <int W, class T, class P>
__device__ void mcc_moe_unpermute(T *y, const T *yp, const int *perm, const P *w, long long N, long long k, long long H)
{
    for (long long n = blockIdx.x; n < N; n += gridDim.x)
        for (long long h = threadIdx.x * (long long)W; h < H; h += blockDim.x * (long long)W) {
            float acc[W], v[W];
            for (int i = 0; i < W; i++)
                acc[i] = 0.0f;
            for (long long j = 0; j < k; j++) {
                float wj = mcc_ld(w, n * k + j);
                mcc_ldn(v, yp + (long long)perm[n * k + j] * H, h);
                for (int i = 0; i < W; i++)
                    acc[i] += wj * v[i];
            }
            mcc_stn(y + n * H, h, acc);
        }
}

// (dy[N,H], yp, perm, w) -> (dyp[perm[p]] = w[p] dy[n], dw[p] = dy[n] . yp[perm[p]]): a block per pair
template <int W, class T, class P>
__device__ void mcc_moe_unpermute_grad(T *dyp, P *dw, const T *dy, const T *yp, const int *perm, const P *w, long long R,
                                       long long k, long long H)
{
    for (long long p = blockIdx.x; p < R; p += gridDim.x) {
        const T *d = dy + (p / k) * H, *row = yp + (long long)perm[p] * H;
        T *out = dyp + (long long)perm[p] * H;
        float wp = mcc_ld(w, p), dot = 0.0f;
        for (long long h = threadIdx.x * (long long)W; h < H; h += blockDim.x * (long long)W) {
            float a[W], b[W];
            mcc_ldn(a, d, h);
            mcc_ldn(b, row, h);
            for (int i = 0; i < W; i++)
                dot += a[i] * b[i], a[i] *= wp;
            mcc_stn(out, h, a);
        }
        dot = mcc_block_sum(dot);
        if (threadIdx.x == 0)
            mcc_st(dw, p, dot);
    }
}

// The aux loss's per-token term t[n] = sum_e s[n,e] counts[e] (s the full score distribution:
// softmax, or sigmoid over its sum + 1e-20; counts those of the token's sequence of S tokens,
// S = N: one): a thread per token
template <class T>
__device__ void mcc_moe_aux_terms(double *t, const T *logits, const int *counts_all, long long N, long long E, int score,
                                  long long S)
{
    MCC_FOR_EACH(n, N) {
        const T *l = logits + n * E;
        const int *counts = counts_all + n / S * E;
        double mx = 0, sum = 0, acc = 0;
        if (score == MCC_MOE_SOFTMAX)
            mcc_moe_row_softmax_stats(l, E, &mx, &sum);
        else
            for (long long e = 0; e < E; e++)
                sum += mcc_moe_sigmoid(mcc_ld(l, e));
        for (long long e = 0; e < E; e++) {
            double v = mcc_ld(l, e);
            acc += (score == MCC_MOE_SOFTMAX ? exp(v - mx) / sum : mcc_moe_sigmoid(v) / (sum + 1e-20)) * counts[e];
        }
        t[n] = acc;
    }
}

// dlogits of the aux loss, f = dloss E / (k S N) (cpu_MOE_AUX_LOSS_GRAD), counts those of the
// token's sequence of S tokens: a thread per token
template <class T>
__device__ void mcc_moe_aux_grad(T *dl, const float *dloss, const T *logits, const int *counts_all, long long N,
                                 long long E, int score, double factor, long long S)
{
    double f = factor * (double)dloss[0];
    MCC_FOR_EACH(n, N) {
        const T *l = logits + n * E;
        const int *counts = counts_all + n / S * E;
        double mx = 0, sum = 0, sg = 0;
        if (score == MCC_MOE_SOFTMAX)
            mcc_moe_row_softmax_stats(l, E, &mx, &sum);
        else
            for (long long e = 0; e < E; e++)
                sum += mcc_moe_sigmoid(mcc_ld(l, e));
        for (long long e = 0; e < E; e++) {
            double v = mcc_ld(l, e);
            double s = score == MCC_MOE_SOFTMAX ? exp(v - mx) / sum : mcc_moe_sigmoid(v) / (sum + 1e-20);
            sg += s * counts[e] * f;
        }
        for (long long e = 0; e < E; e++) {
            double v = mcc_ld(l, e), d;
            if (score == MCC_MOE_SOFTMAX)
                d = exp(v - mx) / sum * (counts[e] * f - sg);
            else {
                double q = mcc_moe_sigmoid(v);
                d = (counts[e] * f - sg) / (sum + 1e-20) * q * (1 - q);
            }
            mcc_st(dl, n * E + e, (float)d);
        }
    }
}

// z loss: t[n] = logsumexp(row n)^2; its gradient dloss 2 lse / N softmax(row)
template <class T> __device__ void mcc_moe_z_terms(double *t, const T *logits, long long N, long long E)
{
    MCC_FOR_EACH(n, N) {
        double mx, sum;
        mcc_moe_row_softmax_stats(logits + n * E, E, &mx, &sum);
        double lse = mx + log(sum);
        t[n] = lse * lse;
    }
}

template <class T> __device__ void mcc_moe_z_grad(T *dl, const float *dloss, const T *logits, long long N, long long E)
{
    double d = dloss[0];
    MCC_FOR_EACH(n, N) {
        const T *l = logits + n * E;
        double mx, sum;
        mcc_moe_row_softmax_stats(l, E, &mx, &sum);
        double lse = mx + log(sum);
        for (long long e = 0; e < E; e++)
            mcc_st(dl, n * E + e, (float)(d * 2 * lse / (double)N * exp((double)mcc_ld(l, e) - lse)));
    }
}

#define MCC_MOE(sfx, T)                                                                                     \
    extern "C" __global__ void mcc_moe_route_##sfx(T *w, int *ids, const T *logits, const float *bias,      \
                                                   long long N, long long E, int k, int score, int pre,       \
                                                   double scaling, int groups, int keep)                      \
    {                                                                                                         \
        mcc_moe_route(w, ids, logits, bias, N, E, k, score, pre, scaling, groups, keep);                      \
    }                                                                                                         \
    extern "C" __global__ void mcc_moe_route_grad_##sfx(T *dl, const T *dw, const T *logits, const int *ids, \
                                                        long long N, long long E, int k, int score, int pre,  \
                                                        double scaling)                                       \
    {                                                                                                         \
        mcc_moe_route_grad(dl, dw, logits, ids, N, E, k, score, pre, scaling);                                \
    }                                                                                                         \
    extern "C" __global__ void mcc_moe_bias_count_##sfx(float *h, const int *ids, const T *w, long long R,    \
                                                        long long E)                                          \
    {                                                                                                         \
        mcc_moe_bias_count(h, ids, w, R, E);                                                                  \
    }                                                                                                         \
    extern "C" __global__ void mcc_moe_capacity_##sfx(T *r, const T *x, const T *w, const int *ids,          \
                                                      long long R, long long capacity, int by_position,       \
                                                      long long k, long long cp, long long seq)               \
    {                                                                                                         \
        mcc_moe_capacity(r, x, w, ids, R, capacity, by_position, k, cp, seq);                                 \
    }                                                                                                         \
    extern "C" __global__ void mcc_moe_permute_##sfx(T *xp, const T *x, const int *perm, long long R,        \
                                                     long long k, long long H)                                \
    {                                                                                                         \
        if (H % MCC_VEC == 0 && mcc_aligned(xp, x))                                                           \
            mcc_moe_permute<MCC_VEC>(xp, x, perm, R, k, H);                                                   \
        else                                                                                                  \
            mcc_moe_permute<1>(xp, x, perm, R, k, H);                                                         \
    }                                                                                                         \
    extern "C" __global__ void mcc_moe_aux_terms_##sfx(double *t, const T *logits, const int *counts,        \
                                                       long long N, long long E, int score, long long S)      \
    {                                                                                                         \
        mcc_moe_aux_terms(t, logits, counts, N, E, score, S);                                                 \
    }                                                                                                         \
    extern "C" __global__ void mcc_moe_aux_grad_##sfx(T *dl, const float *dloss, const T *logits,            \
                                                      const int *counts, long long N, long long E, int score, \
                                                      double factor, long long S)                             \
    {                                                                                                         \
        mcc_moe_aux_grad(dl, dloss, logits, counts, N, E, score, factor, S);                                  \
    }                                                                                                         \
    extern "C" __global__ void mcc_moe_z_terms_##sfx(double *t, const T *logits, long long N, long long E)   \
    {                                                                                                         \
        mcc_moe_z_terms(t, logits, N, E);                                                                     \
    }                                                                                                         \
    extern "C" __global__ void mcc_moe_z_grad_##sfx(T *dl, const float *dloss, const T *logits, long long N, \
                                                    long long E)                                              \
    {                                                                                                         \
        mcc_moe_z_grad(dl, dloss, logits, N, E);                                                              \
    }
MCC_FOR_FLOATS(MCC_MOE)

// the combine and its gradient: mcc_moe_unpermute_<rows>_<weights>
#define MCC_MOE_COMBINE(sfx, T, P)                                                                          \
    extern "C" __global__ void mcc_moe_unpermute_##sfx(T *y, const T *yp, const int *perm, const P *w,       \
                                                       long long N, long long k, long long H)                 \
    {                                                                                                         \
        if (H % MCC_VEC == 0 && mcc_aligned(y, yp))                                                           \
            mcc_moe_unpermute<MCC_VEC>(y, yp, perm, w, N, k, H);                                              \
        else                                                                                                  \
            mcc_moe_unpermute<1>(y, yp, perm, w, N, k, H);                                                    \
    }                                                                                                         \
    extern "C" __global__ void mcc_moe_unpermute_grad_##sfx(T *dyp, P *dw, const T *dy, const T *yp,         \
                                                            const int *perm, const P *w, long long R,         \
                                                            long long k, long long H)                         \
    {                                                                                                         \
        if (H % MCC_VEC == 0 && mcc_aligned(dyp, dy, yp))                                                     \
            mcc_moe_unpermute_grad<MCC_VEC>(dyp, dw, dy, yp, perm, w, R, k, H);                               \
        else                                                                                                  \
            mcc_moe_unpermute_grad<1>(dyp, dw, dy, yp, perm, w, R, k, H);                                     \
    }
MCC_FOR_FLOAT_PAIRS(MCC_MOE_COMBINE)

extern "C" __global__ void mcc_moe_count_i32(int *counts, const int *ids, long long R, long long E, long long group)
{
    mcc_moe_count(counts, ids, R, E, group);
}

// r[0] := scale * sum of t[n] (double), one block in a fixed order
extern "C" __global__ void mcc_moe_sum_f64(float *r, const double *t, long long n, double scale)
{
    double acc = 0;
    for (long long i = threadIdx.x; i < n; i += blockDim.x)
        acc += t[i];
    acc = mcc_block_sum(acc);
    if (threadIdx.x == 0)
        r[0] = (float)(acc * scale);
}

// (h f32[2,E], r like h) {rate}: h[1][e] += rate sign(mean(r[0]) - r[0][e]), then h[0] := 0; one thread
extern "C" __global__ void mcc_moe_bias_update_f32(float *h, const float *r, long long E, double rate)
{
    double mean = 0;
    for (long long e = 0; e < E; e++)
        mean += r[e];
    mean /= (double)E;
    for (long long e = 0; rate != 0 && e < E; e++)
        h[E + e] = (float)(h[E + e] + rate * ((mean > r[e]) - (mean < r[e])));
    for (long long e = 0; e < E; e++)
        h[e] = 0;
}

// The stable sort of ids[R] by expert, in three launches over chunks of MCC_MOE_SORT_CHUNK pairs,
// over B buckets: the E experts, and with kept weights (moe_capacity's) a last one, E, of the
// dropped pairs (w == 0), whose rows come after every kept one. hist[b][B] the chunk's pairs per
// bucket; then (one thread per bucket) base[b][e] the sorted row of chunk b's first pair of
// bucket e, and the experts' counts; then each pair's row is its chunk's base plus the pairs of
// its bucket before it in the chunk.
// kept: f32, or with kept_bf16 bf16 (the working dtype's weights: only their zeros matter)
__device__ __forceinline__ int mcc_moe_bucket(const int *ids, const void *kept, int kept_bf16, long long p, long long E)
{
    bool dropped = kept && (kept_bf16 ? (((const unsigned short *)kept)[p] & 0x7fffu) == 0 : ((const float *)kept)[p] == 0.0f);
    return dropped ? (int)E : ids[p];
}

extern "C" __global__ void mcc_moe_sort_hist_i32(int *hist, const int *ids, const void *kept, int kept_bf16, long long R,
                                                 long long E, long long B)
{
    for (long long e = threadIdx.x; e < B; e += blockDim.x)
        hist[blockIdx.x * B + e] = 0;
    __syncthreads();
    long long p = blockIdx.x * (long long)MCC_MOE_SORT_CHUNK + threadIdx.x;
    int e = p < R ? mcc_moe_bucket(ids, kept, kept_bf16, p, E) : -1;
    if (e >= 0 && e < B)
        atomicAdd(&hist[blockIdx.x * B + e], 1);
}

extern "C" __global__ void mcc_moe_sort_scan_i32(int *base, int *counts, const int *hist, long long chunks, long long E,
                                                 long long B)
{
    __shared__ long long dropped; // bucket E's pairs, when there is one
    for (long long e = threadIdx.x; e < B; e += blockDim.x) {
        long long t = 0;
        for (long long b = 0; b < chunks; b++)
            t += hist[b * B + e];
        if (e < E)
            counts[e] = (int)t;
        else
            dropped = t;
    }
    __syncthreads();
    if (threadIdx.x == 0) // base row 0: each bucket's first sorted row
        for (long long e = 0, run = 0; e < B; run += e < E ? counts[e] : dropped, e++)
            base[e] = (int)run;
    __syncthreads();
    for (long long e = threadIdx.x; e < B; e += blockDim.x) // rows 1..chunks: chunk b's first row of e
        for (long long b = 0, at = base[e]; b < chunks; at += hist[b++ * B + e])
            base[(b + 1) * B + e] = (int)at;
}

extern "C" __global__ void mcc_moe_sort_scatter_i32(int *perm, const int *base, const int *ids, const void *kept,
                                                    int kept_bf16, long long R, long long E, long long B)
{
    __shared__ int chunk[MCC_MOE_SORT_CHUNK];
    long long first = blockIdx.x * (long long)MCC_MOE_SORT_CHUNK, p = first + threadIdx.x;
    chunk[threadIdx.x] = p < R ? mcc_moe_bucket(ids, kept, kept_bf16, p, E) : -1;
    __syncthreads();
    if (p >= R || chunk[threadIdx.x] < 0 || chunk[threadIdx.x] >= B)
        return;
    int e = chunk[threadIdx.x], before = 0;
    for (int q = 0; q < (int)threadIdx.x; q++)
        before += chunk[q] == e;
    perm[p] = base[(blockIdx.x + 1) * B + e] + before;
}

// Expert parallelism's runs (moe_sort_runs, moe_unsort_runs): came[n,S] (i32, or i64 with is64)
// rows of run s from rank q, received packed rank by rank. at[(q,s)]: the run's first row in the
// received order; to[(q,s)]: in the sorted order (s, then q); rows[0] the rows received; counts[s]
// (when given) the rows of run s. One thread.
extern "C" __global__ void mcc_moe_runs_offsets(long long *at, long long *to, long long *rows, int *counts,
                                                const void *came, int is64, long long n, long long S)
{
    long long next = 0;
    for (long long k = 0; k < n * S; k++) {
        at[k] = next;
        next += is64 ? ((const long long *)came)[k] : ((const int *)came)[k];
    }
    rows[0] = next, next = 0;
    for (long long s = 0; s < S; s++) {
        long long run = 0;
        for (long long q = 0; q < n; q++) {
            long long c = is64 ? ((const long long *)came)[q * S + s] : ((const int *)came)[q * S + s];
            to[q * S + s] = next, next += c, run += c;
        }
        if (counts)
            counts[s] = (int)run;
    }
}

// The run k = q S + s whose destination rows hold row j, or -1 where none does (counts that do
// not add up). The runs' destinations rise along their destination order, run by run (s, q) when
// sorting and rank by rank (q, s) when not: a binary search over that order for the last run that
// starts at or before j (an empty run starts where the next one does, so the last holds j).
__device__ long long mcc_moe_run_of(long long j, const long long *at, const long long *to, const void *came, int is64,
                                    long long n, long long S, int sort)
{
    long long lo = 0, hi = n * S; // [lo, hi): where the first run starting past j lies
    while (lo < hi) {
        long long mid = lo + (hi - lo) / 2, k = sort ? (mid % n) * S + mid / n : mid;
        if ((sort ? to[k] : at[k]) <= j)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return -1;
    long long k = sort ? ((lo - 1) % n) * S + (lo - 1) / n : lo - 1;
    long long c = is64 ? ((const long long *)came)[k] : ((const int *)came)[k];
    return j < (sort ? to[k] : at[k]) + c ? k : -1;
}

// xs := x's rows moved run by run (sort: from at to to; else back); a block per destination row
// received (rows[0], the all-to-all's count on the device), its run found by binary search
// (mcc_moe_run_of: log2(n S) reads, where a scan read up to n S, 256 runs at DeepSeek-V3's ep 64),
// rows of `width` 2-byte units (f32 and bf16 rows alike); a row no run covers is written zero, not
// read from before x. The rows past those received are neither read nor written: the buffer has
// room for the dropless worst case (at DeepSeek-V3's ep 64, 32 times what balanced routing fills),
// and its readers (the grouped GEMMs by the counts, all_to_all_v by came) stop at the received rows.
extern "C" __global__ void mcc_moe_move_runs(unsigned short *r, const unsigned short *x, const long long *at,
                                             const long long *to, const long long *rows, const void *came, int is64,
                                             long long n, long long S, long long width, int sort)
{
    for (long long j = blockIdx.x; j < rows[0]; j += gridDim.x) {
        long long k = mcc_moe_run_of(j, at, to, came, is64, n, S, sort);
        long long src = k < 0 ? -1 : (sort ? at[k] : to[k]) + (j - (sort ? to[k] : at[k]));
        for (long long i = threadIdx.x; i < width; i += blockDim.x)
            r[j * width + i] = src < 0 ? 0 : x[src * width + i];
    }
}
