// attention.cuh — causal grouped-query flash attention, forward and backward. bf16: tiled tensor-core
// kernels (mma.sync m16n8k16, ldmatrix, cp.async double buffering, FA2-style); f32: simple
// one-thread-per-query-row kernels for testing. Tensors: q, y, dy, dq [B,T,H,D]; k, v, dk, dv
// [B,T,Hk,D]; lse and the backward's Di [B,H,T] f32; query head h reads kv head h / (H/Hk).
// Every kernel has a dropout twin (template DROP; ops.def attention_dropout): the probabilities
// that multiply v are P Z, Z = mask / (1-p), score (t, s) of head h of batch row b being element
// ((head_offset + h) T + t) T + s of sample first_sample + b under philox.cuh's rule, as in the
// CPU oracle. lse, the row sums and Di = rowsum(dy y) are those of attention without dropout
// (rowsum(P dP) = rowsum(dy y) holds with Z too); the backward redraws Z per score.
#pragma once
#include "common.cuh"
#include "philox.cuh"

// The dropout factor of element e of sample s, with its own Philox block (for scattered elements).
__device__ __forceinline__ float mcc_attn_drop_at(mcc_dropout d, unsigned long long s, unsigned long long e)
{
    mcc_dropout_cursor cur = MCC_DROPOUT_CURSOR;
    return mcc_dropout_factor(d, s, e, &cur);
}

// --- tensor-core building blocks --------------------------------------------------------------
// mma m16n8k16 fragments (g = lane/4, t = lane%4): A 16x16 holds a0a1 (row g, cols 2t..2t+1),
// a2a3 (row g+8), a4a5 (row g, cols 2t+8..), a6a7 (row g+8, cols 2t+8..); B 16x8 holds b0b1
// (rows 2t..2t+1, col g), b2b3 (rows 2t+8..); C 16x8 holds c0c1 (row g, cols 2t..), c2c3 (row g+8).

__device__ __forceinline__ unsigned mcc_attn_smem_addr(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

// 16-byte global->shared copy; with valid=false it writes zeros (rows past T).
__device__ __forceinline__ void mcc_attn_cp16(unsigned dst, const void *src, bool valid)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void mcc_attn_cp4(unsigned dst, const void *src, bool valid)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void mcc_attn_cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void mcc_attn_cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

template <bool TRANS> __device__ __forceinline__ void mcc_attn_ldsm4(unsigned addr, unsigned (&r)[4])
{
    if (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(addr));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(addr));
}

// c += a * b (bf16 inputs, f32 accumulators)
__device__ __forceinline__ void mcc_attn_mma(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ unsigned mcc_attn_pack(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(unsigned *)&v;
}

// A shared-memory tile [ROWS][COLS] of bf16, 16-byte chunks XOR-swizzled by row so that the 8 row
// addresses of one ldmatrix phase hit 8 different bank groups.
template <int ROWS, int COLS> struct mcc_attn_tile {
    static constexpr int CHUNKS = COLS / 8, SWIZZLE = CHUNKS >= 8 ? 7 : CHUNKS - 1, BYTES = ROWS * COLS * 2;
    __device__ static unsigned off(int r, int c) { return r * COLS * 2 + ((((c >> 3) ^ (r & SWIZZLE))) << 4) + (c & 7) * 2; }
    // ldmatrix x4 of the 16x16 block at (r0, c0). ROW_PAIRS: matrices 0,1 are rows r0.., r0+8..
    // (an A block stored [m][k], or B stored [k][n] with .trans); otherwise matrices 0,1 are
    // columns c0.., c0+8.. (B stored [n][k], or A stored [k][m] with .trans). Either way r[0..1]
    // and r[2..3] are the fragments the mma wants (A: a0..a7; B: two n-tiles of 8).
    template <bool ROW_PAIRS, bool TRANS> __device__ static void ldsm(unsigned base, int r0, int c0, unsigned (&r)[4])
    {
        int lane = threadIdx.x & 31, i = lane & 7, a = (lane >> 3) & 1, b = lane >> 4;
        int row = ROW_PAIRS ? r0 + i + 8 * a : r0 + i + 8 * b, col = ROW_PAIRS ? c0 + 8 * b : c0 + 8 * a;
        mcc_attn_ldsm4<TRANS>(base + off(row, col), r);
    }
    // Rows [0, nvalid) from global rows of stride ld elements; rows past nvalid become zeros.
    template <int NTHREADS> __device__ static void load(unsigned base, const mcc_bf16 *g, long long ld, int nvalid)
    {
        for (int i = threadIdx.x; i < ROWS * CHUNKS; i += NTHREADS) {
            int r = i / CHUNKS, c = (i % CHUNKS) * 8;
            bool ok = r < nvalid;
            mcc_attn_cp16(base + off(r, c), g + (ok ? r * ld + c : 0), ok);
        }
    }
};

// n rows of f32 (lse, Di) into shared memory; rows past nvalid become zeros.
template <int N, int NTHREADS> __device__ __forceinline__ void mcc_attn_load_rows(unsigned base, const float *g, int nvalid)
{
    for (int i = threadIdx.x; i < N; i += NTHREADS)
        mcc_attn_cp4(base + 4 * i, g + (i < nvalid ? i : 0), i < nvalid);
}

__device__ __forceinline__ float mcc_attn_quad_max(float v)
{
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float mcc_attn_quad_sum(float v)
{
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

#define MCC_LOG2E 1.4426950408889634f
#define MCC_LN2 0.6931471805599453f
#define MCC_ATTN_INF __int_as_float(0x7f800000) // NVRTC has no math.h INFINITY

// --- forward (bf16) ---------------------------------------------------------------------------
// Block: BM query rows of one (b, h), W warps, each warp R = BM/(16W) slabs of 16 rows; loops
// over key blocks of BN with an online softmax in registers (log2 domain). Blocks are launched
// heaviest (last query block) first. Shared: Q [BM][D], K and V [2][BN][D] (double buffered).
template <int D, int BM, int BN, int W, bool DROP>
__device__ void mcc_attn_fwd(const mcc_bf16 *q, const mcc_bf16 *k, const mcc_bf16 *v, mcc_bf16 *y, float *lse, int T,
                             int H, int Hk, float scale, mcc_dropout drop, int head_offset)
{
    constexpr int R = BM / (16 * W), NT = 32 * W;
    static_assert(!DROP || BN <= 128, "a row's keep bits fit one word");
    typedef mcc_attn_tile<BM, D> QTile;
    typedef mcc_attn_tile<BN, D> KTile;
    extern __shared__ __align__(128) unsigned char mcc_attn_smem[];
    const unsigned sQ = mcc_attn_smem_addr(mcc_attn_smem), sK = sQ + QTile::BYTES, sV = sK + 2 * KTile::BYTES;

    const int m0 = (gridDim.x - 1 - blockIdx.x) * BM, b = blockIdx.y / H, h = blockIdx.y % H, hk = h / (H / Hk);
    const long long ldq = (long long)H * D, ldk = (long long)Hk * D;
    // DROP: this block's sample, and its head's first score row in the sample
    const unsigned long long sample = DROP ? *drop.first_sample + b : 0;
    const unsigned long long hrow = (unsigned long long)(head_offset + h) * T;
    const mcc_bf16 *kg = k + ((long long)b * T * Hk + hk) * D, *vg = v + ((long long)b * T * Hk + hk) * D;
    const int kend = min(T, m0 + BM), nblocks = (kend + BN - 1) / BN;

    QTile::template load<NT>(sQ, q + ((long long)(b * T + m0) * H + h) * D, ldq, T - m0);
    KTile::template load<NT>(sK, kg, ldk, T);
    KTile::template load<NT>(sV, vg, ldk, T);
    mcc_attn_cp_commit();

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int wrow = m0 + warp * 16 * R; // first query row of this warp
    const float sl2 = scale * MCC_LOG2E;
    float o[R][D / 8][4], mrow[R][2], lrow[R][2];
#pragma unroll
    for (int r = 0; r < R; r++) {
#pragma unroll
        for (int j = 0; j < D / 8; j++)
            o[r][j][0] = o[r][j][1] = o[r][j][2] = o[r][j][3] = 0.f;
        mrow[r][0] = mrow[r][1] = -MCC_ATTN_INF;
        lrow[r][0] = lrow[r][1] = 0.f;
    }

    for (int jb = 0; jb < nblocks; jb++) {
        const int n0 = jb * BN;
        const unsigned cK = sK + (jb & 1) * KTile::BYTES, cV = sV + (jb & 1) * KTile::BYTES;
        if (jb + 1 < nblocks) {
            const unsigned nK = sK + ((jb + 1) & 1) * KTile::BYTES, nV = sV + ((jb + 1) & 1) * KTile::BYTES;
            KTile::template load<NT>(nK, kg + (n0 + BN) * ldk, ldk, T - n0 - BN);
            KTile::template load<NT>(nV, vg + (n0 + BN) * ldk, ldk, T - n0 - BN);
            mcc_attn_cp_commit();
            mcc_attn_cp_wait<1>();
        } else {
            mcc_attn_cp_wait<0>();
        }
        __syncthreads();
        if (n0 <= wrow + 16 * R - 1) { // else every key of the block is after every row of this warp
            float s[R][BN / 8][4];
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int j = 0; j < BN / 8; j++)
                    s[r][j][0] = s[r][j][1] = s[r][j][2] = s[r][j][3] = 0.f;
            // S = Q K^T: [16R, BN] per warp
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                unsigned a[R][4];
#pragma unroll
                for (int r = 0; r < R; r++)
                    QTile::template ldsm<true, false>(sQ, warp * 16 * R + 16 * r, 16 * kk, a[r]);
#pragma unroll
                for (int np = 0; np < BN / 16; np++) {
                    unsigned bk[4];
                    KTile::template ldsm<false, false>(cK, 16 * np, 16 * kk, bk);
#pragma unroll
                    for (int r = 0; r < R; r++) {
                        mcc_attn_mma(s[r][2 * np], a[r], bk[0], bk[1]);
                        mcc_attn_mma(s[r][2 * np + 1], a[r], bk[2], bk[3]);
                    }
                }
            }
            const bool diag = n0 + BN - 1 > wrow; // some key after some row: apply the causal mask
            // DROP: bit 2j+e of keep[r][hf] keeps key n0+8j+2t+e of row qi, drawn up front as
            // independent Philox blocks (which interleave) before the softmax reads them
            unsigned keep[R][2];
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int hf = 0; hf < 2; hf++) {
                    keep[r][hf] = 0;
                    const unsigned long long e0 = (hrow + wrow + 16 * r + g + 8 * hf) * T + n0 + 2 * t;
#pragma unroll
                    for (int j = 0; DROP && j < BN / 8; j++)
                        keep[r][hf] |= mcc_dropout_keep2(drop, sample, e0 + 8 * j) << (2 * j);
                }
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int hf = 0; hf < 2; hf++) {
                    const int qi = wrow + 16 * r + g + 8 * hf;
                    float mx = mrow[r][hf];
#pragma unroll
                    for (int j = 0; j < BN / 8; j++)
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            float x = s[r][j][2 * hf + e] * sl2;
                            if (diag && n0 + 8 * j + 2 * t + e > qi)
                                x = -MCC_ATTN_INF;
                            s[r][j][2 * hf + e] = x;
                            mx = fmaxf(mx, x);
                        }
                    mx = mcc_attn_quad_max(mx);
                    const float base = mx == -MCC_ATTN_INF ? 0.f : mx, alpha = exp2f(mrow[r][hf] - base);
                    mrow[r][hf] = mx;
                    float sum = 0.f;
#pragma unroll
                    for (int j = 0; j < BN / 8; j++)
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            float p = exp2f(s[r][j][2 * hf + e] - base);
                            sum += p; // the softmax normalises by the undropped sum
                            if (DROP)
                                p = keep[r][hf] >> (2 * j + e) & 1 ? p * drop.scale : 0.f;
                            s[r][j][2 * hf + e] = p;
                        }
                    lrow[r][hf] = lrow[r][hf] * alpha + sum;
#pragma unroll
                    for (int j = 0; j < D / 8; j++) {
                        o[r][j][2 * hf] *= alpha;
                        o[r][j][2 * hf + 1] *= alpha;
                    }
                }
            // O += P V: P's accumulators become A fragments in place
#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++) {
                unsigned pa[R][4];
#pragma unroll
                for (int r = 0; r < R; r++) {
                    pa[r][0] = mcc_attn_pack(s[r][2 * kk][0], s[r][2 * kk][1]);
                    pa[r][1] = mcc_attn_pack(s[r][2 * kk][2], s[r][2 * kk][3]);
                    pa[r][2] = mcc_attn_pack(s[r][2 * kk + 1][0], s[r][2 * kk + 1][1]);
                    pa[r][3] = mcc_attn_pack(s[r][2 * kk + 1][2], s[r][2 * kk + 1][3]);
                }
#pragma unroll
                for (int dp = 0; dp < D / 16; dp++) {
                    unsigned bv[4];
                    KTile::template ldsm<true, true>(cV, 16 * kk, 16 * dp, bv);
#pragma unroll
                    for (int r = 0; r < R; r++) {
                        mcc_attn_mma(o[r][2 * dp], pa[r], bv[0], bv[1]);
                        mcc_attn_mma(o[r][2 * dp + 1], pa[r], bv[2], bv[3]);
                    }
                }
            }
        }
        __syncthreads(); // the next iteration's prefetch overwrites this block's buffers
    }

#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int qi = wrow + 16 * r + g + 8 * hf;
            const float l = mcc_attn_quad_sum(lrow[r][hf]), inv = 1.f / l;
            if (qi >= T)
                continue;
            mcc_bf16 *yrow = y + ((long long)(b * T + qi) * H + h) * D;
#pragma unroll
            for (int j = 0; j < D / 8; j++)
                *(__nv_bfloat162 *)(yrow + 8 * j + 2 * t) =
                    __floats2bfloat162_rn(o[r][j][2 * hf] * inv, o[r][j][2 * hf + 1] * inv);
            if (t == 0)
                lse[((long long)b * H + h) * T + qi] = mrow[r][hf] * MCC_LN2 + logf(l);
        }
}

// --- backward (bf16) --------------------------------------------------------------------------
// Di[b,h,t] = rowsum(dy * y), and zeroes the f32 dq accumulator [B,T,H,D]. One warp per (b,t,h).
extern "C" __global__ void mcc_attention_bwd_pre_bf16(const mcc_bf16 *dy, const mcc_bf16 *y, float *Di, float *dq_acc,
                                                      int B, int T, int H, int D)
{
    long long row = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (row >= (long long)B * T * H)
        return;
    float sum = 0.f;
    for (int d = lane; d < D; d += 32) {
        sum += __bfloat162float(dy[row * D + d]) * __bfloat162float(y[row * D + d]);
        dq_acc[row * D + d] = 0.f;
    }
    sum = mcc_warp_reduce(sum, mcc_sum_op());
    long long b = row / ((long long)T * H), t = row / H % T, h = row % H;
    if (lane == 0)
        Di[(b * H + h) * T + t] = sum;
}

// dq = scale * dq_acc, rounded to bf16.
extern "C" __global__ void mcc_attention_bwd_post_bf16(const float *dq_acc, mcc_bf16 *dq, long long n, float scale)
{
    MCC_FOR_EACH(i, n) dq[i] = __float2bfloat16_rn(dq_acc[i] * scale);
}

// Block: BN = 16W keys of one (b, kv head); warp w owns keys 16w..16w+15 and keeps their dk, dv
// rows in registers while the block walks every query block (of BM rows) of every query head of
// the group at or after its keys. Per query block: S^T = K Q^T, dP^T = V dy^T, P^T, dS^T =
// P^T (dP^T - Di), dV += P^T dy, dK += dS^T Q (warp-local), then dS^T goes to shared memory and
// the warps split dQ += dS K by (16-row slab, column group) and add it to dq_acc with f32
// atomics. Shared: K, V [BN][D], Q, dy [2][BM][D], dS^T [BN][BM], lse, Di [2][BM].
template <int D, int BM, int BN, int W, bool DROP>
__device__ void mcc_attn_bwd(const mcc_bf16 *dy, const mcc_bf16 *q, const mcc_bf16 *k, const mcc_bf16 *v,
                             const float *lse, const float *Di, float *dq_acc, mcc_bf16 *dk, mcc_bf16 *dv, int T, int H,
                             int Hk, float scale, mcc_dropout drop, int head_offset)
{
    static_assert(BN == 16 * W, "one 16-key slab per warp");
    constexpr int NT = 32 * W, MSLABS = BM / 16, CGROUPS = W / MSLABS, DC = D / CGROUPS;
    static_assert(W % MSLABS == 0 && DC % 16 == 0, "dQ work split");
    typedef mcc_attn_tile<BN, D> KTile;
    typedef mcc_attn_tile<BM, D> QTile;
    typedef mcc_attn_tile<BN, BM> STile;
    extern __shared__ __align__(128) unsigned char mcc_attn_smem[];
    const unsigned sK = mcc_attn_smem_addr(mcc_attn_smem), sV = sK + KTile::BYTES, sQ = sV + KTile::BYTES,
                   sdO = sQ + 2 * QTile::BYTES, sS = sdO + 2 * QTile::BYTES, sL = sS + STile::BYTES,
                   sD = sL + 2 * BM * 4;
    const float *Ls = (const float *)(mcc_attn_smem + (sL - sK)), *Ds = (const float *)(mcc_attn_smem + (sD - sK));

    const int n0 = blockIdx.x * BN, b = blockIdx.y / Hk, hk = blockIdx.y % Hk, G = H / Hk;
    const unsigned long long sample = DROP ? *drop.first_sample + b : 0;
    const long long ldq = (long long)H * D, ldk = (long long)Hk * D;
    const int mfirst = n0 / BM, mblocks = (T + BM - 1) / BM - mfirst, iters = G * mblocks;

    KTile::template load<NT>(sK, k + ((long long)(b * T + n0) * Hk + hk) * D, ldk, T - n0);
    KTile::template load<NT>(sV, v + ((long long)(b * T + n0) * Hk + hk) * D, ldk, T - n0);
    // Query block `it` (head hk*G + it/mblocks, block mfirst + it%mblocks) into buffer it&1.
    auto load_q = [&](int it) {
        const int h = hk * G + it / mblocks, m0 = (mfirst + it % mblocks) * BM, buf = it & 1;
        const long long off = ((long long)(b * T + m0) * H + h) * D, roff = ((long long)b * H + h) * T + m0;
        QTile::template load<NT>(sQ + buf * QTile::BYTES, q + off, ldq, T - m0);
        QTile::template load<NT>(sdO + buf * QTile::BYTES, dy + off, ldq, T - m0);
        mcc_attn_load_rows<BM, NT>(sL + buf * BM * 4, lse + roff, T - m0);
        mcc_attn_load_rows<BM, NT>(sD + buf * BM * 4, Di + roff, T - m0);
        mcc_attn_cp_commit();
    };
    load_q(0);

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int wkey = n0 + 16 * warp; // first key of this warp
    const float sl2 = scale * MCC_LOG2E;
    float dka[D / 8][4], dva[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            dka[j][e] = dva[j][e] = 0.f;

    for (int it = 0; it < iters; it++) {
        const int h = hk * G + it / mblocks, m0 = (mfirst + it % mblocks) * BM, buf = it & 1;
        mcc_attn_cp_wait<0>();
        __syncthreads(); // this block's tiles are in; everyone is done with the previous one
        if (it + 1 < iters)
            load_q(it + 1);
        const unsigned cQ = sQ + buf * QTile::BYTES, cdO = sdO + buf * QTile::BYTES;
        const float *cL = Ls + buf * BM, *cD = Ds + buf * BM;

        if (wkey > m0 + BM - 1) { // every key of this warp is after every query row: dS^T = 0
#pragma unroll
            for (int j = 0; j < BM / 8; j++)
#pragma unroll
                for (int hf = 0; hf < 2; hf++)
                    *(unsigned *)(mcc_attn_smem + (sS - sK) + STile::off(16 * warp + g + 8 * hf, 8 * j + 2 * t)) = 0u;
        } else {
            float st[BM / 8][4], dpt[BM / 8][4];
#pragma unroll
            for (int j = 0; j < BM / 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    st[j][e] = dpt[j][e] = 0.f;
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                unsigned ak[4], av[4];
                KTile::template ldsm<true, false>(sK, 16 * warp, 16 * kk, ak);
                KTile::template ldsm<true, false>(sV, 16 * warp, 16 * kk, av);
#pragma unroll
                for (int np = 0; np < BM / 16; np++) {
                    unsigned bq[4], bo[4];
                    QTile::template ldsm<false, false>(cQ, 16 * np, 16 * kk, bq);
                    QTile::template ldsm<false, false>(cdO, 16 * np, 16 * kk, bo);
                    mcc_attn_mma(st[2 * np], ak, bq[0], bq[1]);
                    mcc_attn_mma(st[2 * np + 1], ak, bq[2], bq[3]);
                    mcc_attn_mma(dpt[2 * np], av, bo[0], bo[1]);
                    mcc_attn_mma(dpt[2 * np + 1], av, bo[2], bo[3]);
                }
            }
            // P^T = exp(scale S^T - lse) (0 where the key is after the query); dS^T = P^T (dP^T - Di).
            // DROP: dV takes (P Z)^T and dS^T = P^T (dP^T Z^T - Di).
            const bool diag = wkey + 15 > m0;
            const unsigned long long hrow = (unsigned long long)(head_offset + h) * T + m0; // DROP: query m0's row
#pragma unroll
            for (int j = 0; j < BM / 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = wkey + g + 8 * (e >> 1), col = 8 * j + 2 * t + (e & 1);
                    float p = exp2f(st[j][e] * sl2 - cL[col] * MCC_LOG2E);
                    if (diag && key > m0 + col)
                        p = 0.f;
                    if (DROP) {
                        const float z = mcc_attn_drop_at(drop, sample, (hrow + col) * T + key);
                        st[j][e] = p * z;
                        dpt[j][e] = p * (dpt[j][e] * z - cD[col]);
                    } else {
                        st[j][e] = p;
                        dpt[j][e] = p * (dpt[j][e] - cD[col]);
                    }
                }
#pragma unroll
            for (int kk = 0; kk < BM / 16; kk++) {
                unsigned pa[4], sa[4];
                pa[0] = mcc_attn_pack(st[2 * kk][0], st[2 * kk][1]);
                pa[1] = mcc_attn_pack(st[2 * kk][2], st[2 * kk][3]);
                pa[2] = mcc_attn_pack(st[2 * kk + 1][0], st[2 * kk + 1][1]);
                pa[3] = mcc_attn_pack(st[2 * kk + 1][2], st[2 * kk + 1][3]);
                sa[0] = mcc_attn_pack(dpt[2 * kk][0], dpt[2 * kk][1]);
                sa[1] = mcc_attn_pack(dpt[2 * kk][2], dpt[2 * kk][3]);
                sa[2] = mcc_attn_pack(dpt[2 * kk + 1][0], dpt[2 * kk + 1][1]);
                sa[3] = mcc_attn_pack(dpt[2 * kk + 1][2], dpt[2 * kk + 1][3]);
                // dS^T to shared memory for the dQ product: rows g / g+8 of the warp's slab
                unsigned char *ss = mcc_attn_smem + (sS - sK);
                *(unsigned *)(ss + STile::off(16 * warp + g, 16 * kk + 2 * t)) = sa[0];
                *(unsigned *)(ss + STile::off(16 * warp + g + 8, 16 * kk + 2 * t)) = sa[1];
                *(unsigned *)(ss + STile::off(16 * warp + g, 16 * kk + 8 + 2 * t)) = sa[2];
                *(unsigned *)(ss + STile::off(16 * warp + g + 8, 16 * kk + 8 + 2 * t)) = sa[3];
#pragma unroll
                for (int dp = 0; dp < D / 16; dp++) {
                    unsigned bo[4], bq[4];
                    QTile::template ldsm<true, true>(cdO, 16 * kk, 16 * dp, bo);
                    QTile::template ldsm<true, true>(cQ, 16 * kk, 16 * dp, bq);
                    mcc_attn_mma(dva[2 * dp], pa, bo[0], bo[1]);
                    mcc_attn_mma(dva[2 * dp + 1], pa, bo[2], bo[3]);
                    mcc_attn_mma(dka[2 * dp], sa, bq[0], bq[1]);
                    mcc_attn_mma(dka[2 * dp + 1], sa, bq[2], bq[3]);
                }
            }
        }
        __syncthreads(); // dS^T complete

        // dQ[slab, cgroup] += dS K: A = dS [q][key] read transposed from dS^T, B = K [key][d]
        const int slab = warp % MSLABS, c0 = (warp / MSLABS) * DC;
        float dqa[DC / 8][4];
#pragma unroll
        for (int j = 0; j < DC / 8; j++)
            dqa[j][0] = dqa[j][1] = dqa[j][2] = dqa[j][3] = 0.f;
        const int klimit = min(BN, m0 + 16 * slab + 15 - n0 + 1); // keys after the slab's last row give dS = 0
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) {
            if (16 * kk >= klimit)
                break;
            unsigned a[4];
            STile::template ldsm<false, true>(sS, 16 * kk, 16 * slab, a);
#pragma unroll
            for (int dp = 0; dp < DC / 16; dp++) {
                unsigned bk[4];
                KTile::template ldsm<true, true>(sK, 16 * kk, c0 + 16 * dp, bk);
                mcc_attn_mma(dqa[2 * dp], a, bk[0], bk[1]);
                mcc_attn_mma(dqa[2 * dp + 1], a, bk[2], bk[3]);
            }
        }
        if (klimit > 0)
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                const int qi = m0 + 16 * slab + g + 8 * hf;
                if (qi >= T)
                    continue;
                float *row = dq_acc + ((long long)(b * T + qi) * H + h) * D + c0 + 2 * t;
#pragma unroll
                for (int j = 0; j < DC / 8; j++)
                    atomicAdd((float2 *)(row + 8 * j), make_float2(dqa[j][2 * hf], dqa[j][2 * hf + 1]));
            }
    }

#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int key = wkey + g + 8 * hf;
        if (key >= T)
            continue;
        const long long off = ((long long)(b * T + key) * Hk + hk) * D + 2 * t;
#pragma unroll
        for (int j = 0; j < D / 8; j++) {
            *(__nv_bfloat162 *)(dk + off + 8 * j) =
                __floats2bfloat162_rn(dka[j][2 * hf] * scale, dka[j][2 * hf + 1] * scale);
            *(__nv_bfloat162 *)(dv + off + 8 * j) = __floats2bfloat162_rn(dva[j][2 * hf], dva[j][2 * hf + 1]);
        }
    }
}

// --- f32 (testing): one thread per query row ---------------------------------------------------
template <int D, bool DROP>
__device__ void mcc_attn_fwd_f32(const float *q, const float *k, const float *v, float *y, float *lse, int B, int T,
                                 int H, int Hk, float scale, mcc_dropout drop, int head_offset)
{
    long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (idx >= (long long)B * H * T)
        return;
    const int i = idx % T, h = idx / T % H, b = idx / ((long long)T * H), hk = h / (H / Hk);
    const float *qi = q + ((long long)(b * T + i) * H + h) * D;
    const unsigned long long sample = DROP ? *drop.first_sample + b : 0; // DROP: row i's scores from erow
    const unsigned long long erow = ((unsigned long long)(head_offset + h) * T + i) * T;
    mcc_dropout_cursor cur = MCC_DROPOUT_CURSOR;
    float acc[D], m = -MCC_ATTN_INF, l = 0.f;
    for (int d = 0; d < D; d++)
        acc[d] = 0.f;
    for (int j = 0; j <= i; j++) {
        const float *kj = k + ((long long)(b * T + j) * Hk + hk) * D, *vj = v + ((long long)(b * T + j) * Hk + hk) * D;
        float s = 0.f;
        for (int d = 0; d < D; d++)
            s += qi[d] * kj[d];
        s *= scale;
        const float mn = fmaxf(m, s), alpha = expf(m - mn), p = expf(s - mn);
        const float pv = DROP ? p * mcc_dropout_factor(drop, sample, erow + j, &cur) : p;
        l = l * alpha + p;
        for (int d = 0; d < D; d++)
            acc[d] = acc[d] * alpha + pv * vj[d];
        m = mn;
    }
    for (int d = 0; d < D; d++)
        y[((long long)(b * T + i) * H + h) * D + d] = acc[d] / l;
    lse[((long long)b * H + h) * T + i] = m + logf(l);
}

// dk, dv must be zeroed first (they are accumulated with atomics).
template <int D, bool DROP>
__device__ void mcc_attn_bwd_f32(const float *dy, const float *q, const float *k, const float *v, const float *y,
                                 const float *lse, float *dq, float *dk, float *dv, int B, int T, int H, int Hk,
                                 float scale, mcc_dropout drop, int head_offset)
{
    long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (idx >= (long long)B * H * T)
        return;
    const int i = idx % T, h = idx / T % H, b = idx / ((long long)T * H), hk = h / (H / Hk);
    const unsigned long long sample = DROP ? *drop.first_sample + b : 0; // DROP: row i's scores from erow
    const unsigned long long erow = ((unsigned long long)(head_offset + h) * T + i) * T;
    mcc_dropout_cursor cur = MCC_DROPOUT_CURSOR;
    const long long qo = ((long long)(b * T + i) * H + h) * D;
    const float L = lse[((long long)b * H + h) * T + i];
    float Dsum = 0.f, acc[D];
    for (int d = 0; d < D; d++) {
        Dsum += dy[qo + d] * y[qo + d];
        acc[d] = 0.f;
    }
    for (int j = 0; j <= i; j++) {
        const long long ko = ((long long)(b * T + j) * Hk + hk) * D;
        float s = 0.f, dp = 0.f;
        for (int d = 0; d < D; d++) {
            s += q[qo + d] * k[ko + d];
            dp += dy[qo + d] * v[ko + d];
        }
        const float p = expf(s * scale - L), z = DROP ? mcc_dropout_factor(drop, sample, erow + j, &cur) : 1.f;
        const float ds = DROP ? p * (dp * z - Dsum) : p * (dp - Dsum), pz = DROP ? p * z : p;
        for (int d = 0; d < D; d++) {
            acc[d] += ds * k[ko + d];
            atomicAdd(dk + ko + d, scale * ds * q[qo + d]);
            atomicAdd(dv + ko + d, pz * dy[qo + d]);
        }
    }
    for (int d = 0; d < D; d++)
        dq[qo + d] = scale * acc[d];
}

// --- entry points: mcc_attention_{fwd,bwd}_<dtype>_d<D>, and their dropout twins
// mcc_attention_dropout_{fwd,bwd}_<dtype>_d<D> with (mcc_dropout drop, int head_offset) after the
// same parameters. ORDER: the tile table in runtime/cuda/attention.c (its smem sizes and launch
// shapes) mirrors these parameters.
#define MCC_ATTN_FWD_BF16_PARAMS                                                                              \
    const mcc_bf16 *q, const mcc_bf16 *k, const mcc_bf16 *v, mcc_bf16 *y, float *lse, int T, int H, int Hk, float scale
#define MCC_ATTN_BWD_BF16_PARAMS                                                                              \
    const mcc_bf16 *dy, const mcc_bf16 *q, const mcc_bf16 *k, const mcc_bf16 *v, const float *lse, const float *Di, \
        float *dq_acc, mcc_bf16 *dk, mcc_bf16 *dv, int T, int H, int Hk, float scale
#define MCC_ATTN_BF16(D, FBM, FBN, FW, BBM, BBN, BW)                                                         \
    extern "C" __global__ void __launch_bounds__(32 * FW) mcc_attention_fwd_bf16_d##D(MCC_ATTN_FWD_BF16_PARAMS) \
    {                                                                                                         \
        mcc_attn_fwd<D, FBM, FBN, FW, false>(q, k, v, y, lse, T, H, Hk, scale, mcc_dropout{}, 0);             \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(32 * FW)                                                    \
        mcc_attention_dropout_fwd_bf16_d##D(MCC_ATTN_FWD_BF16_PARAMS, mcc_dropout drop, int head_offset)     \
    {                                                                                                         \
        mcc_attn_fwd<D, FBM, FBN, FW, true>(q, k, v, y, lse, T, H, Hk, scale, drop, head_offset);             \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(32 * BW) mcc_attention_bwd_bf16_d##D(MCC_ATTN_BWD_BF16_PARAMS) \
    {                                                                                                         \
        mcc_attn_bwd<D, BBM, BBN, BW, false>(dy, q, k, v, lse, Di, dq_acc, dk, dv, T, H, Hk, scale, mcc_dropout{}, 0); \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(32 * BW)                                                    \
        mcc_attention_dropout_bwd_bf16_d##D(MCC_ATTN_BWD_BF16_PARAMS, mcc_dropout drop, int head_offset)     \
    {                                                                                                         \
        mcc_attn_bwd<D, BBM, BBN, BW, true>(dy, q, k, v, lse, Di, dq_acc, dk, dv, T, H, Hk, scale, drop, head_offset); \
    }
#define MCC_ATTN_FWD_F32_PARAMS                                                                               \
    const float *q, const float *k, const float *v, float *y, float *lse, int B, int T, int H, int Hk, float scale
#define MCC_ATTN_BWD_F32_PARAMS                                                                               \
    const float *dy, const float *q, const float *k, const float *v, const float *y, const float *lse, float *dq, \
        float *dk, float *dv, int B, int T, int H, int Hk, float scale
#define MCC_ATTN_F32(D)                                                                                       \
    extern "C" __global__ void mcc_attention_fwd_f32_d##D(MCC_ATTN_FWD_F32_PARAMS)                           \
    {                                                                                                         \
        mcc_attn_fwd_f32<D, false>(q, k, v, y, lse, B, T, H, Hk, scale, mcc_dropout{}, 0);                    \
    }                                                                                                         \
    extern "C" __global__ void mcc_attention_dropout_fwd_f32_d##D(MCC_ATTN_FWD_F32_PARAMS, mcc_dropout drop,  \
                                                                  int head_offset)                            \
    {                                                                                                         \
        mcc_attn_fwd_f32<D, true>(q, k, v, y, lse, B, T, H, Hk, scale, drop, head_offset);                    \
    }                                                                                                         \
    extern "C" __global__ void mcc_attention_bwd_f32_d##D(MCC_ATTN_BWD_F32_PARAMS)                           \
    {                                                                                                         \
        mcc_attn_bwd_f32<D, false>(dy, q, k, v, y, lse, dq, dk, dv, B, T, H, Hk, scale, mcc_dropout{}, 0);    \
    }                                                                                                         \
    extern "C" __global__ void mcc_attention_dropout_bwd_f32_d##D(MCC_ATTN_BWD_F32_PARAMS, mcc_dropout drop,  \
                                                                  int head_offset)                            \
    {                                                                                                         \
        mcc_attn_bwd_f32<D, true>(dy, q, k, v, y, lse, dq, dk, dv, B, T, H, Hk, scale, drop, head_offset);    \
    }

// Tiles per head dim: fwd BM, BN, warps, bwd BM, BN, warps. -DMCC_ATTN_TILES_D<D>=... overrides
// one (bench/attention_bench.c sweeps them); the launchers read the cubin's mcc_attn_tiles_d<D>,
// so the two never disagree.
#ifndef MCC_ATTN_TILES_D16
#define MCC_ATTN_TILES_D16 64, 64, 4, 64, 64, 4
#endif
#ifndef MCC_ATTN_TILES_D64
#define MCC_ATTN_TILES_D64 128, 64, 4, 64, 128, 8
#endif
#ifndef MCC_ATTN_TILES_D128
#define MCC_ATTN_TILES_D128 128, 64, 4, 64, 128, 8
#endif
#define MCC_ATTN_BF16_TILED(D, ...)                                                                           \
    MCC_ATTN_BF16(D, __VA_ARGS__)                                                                             \
    extern "C" __device__ const int mcc_attn_tiles_d##D[6] = {__VA_ARGS__};
#define MCC_ATTN_BF16_WITH(D, tiles) MCC_ATTN_BF16_TILED(D, tiles)
MCC_ATTN_BF16_WITH(16, MCC_ATTN_TILES_D16)
MCC_ATTN_BF16_WITH(64, MCC_ATTN_TILES_D64)
MCC_ATTN_BF16_WITH(128, MCC_ATTN_TILES_D128)
MCC_ATTN_F32(16)
MCC_ATTN_F32(64)
MCC_ATTN_F32(128)
