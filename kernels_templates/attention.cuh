// attention.cuh — causal grouped-query flash attention, forward and backward. bf16: tiled tensor-core
// kernels (mma.sync m16n8k16, ldmatrix, cp.async double buffering, FA2-style); f32: simple
// one-thread-per-query-row kernels for testing. Tensors: q, y, dy, dq [B,T,H,D]; k, v, dk, dv
// [B,T,Hk,D]; lse and the backward's Di [B,H,T] f32; query head h reads kv head h / (H/Hk).
// Every kernel has a dropout twin (template DROP; ops.def attention_dropout): the probabilities
// that multiply v are P Z, Z = mask / (1-p), score (t, s) of head h of batch row b being element
// ((head_offset + h) T + t) T + s of sample first_sample + b under philox.cuh's rule, as in the
// CPU oracle. lse, the row sums and Di = rowsum(dy y) are those of attention without dropout
// (rowsum(P dP) = rowsum(dy y) holds with Z too); the backward redraws Z per score.
// Context parallelism (mcc_attn_cp, below): q holds one cp rank's two balanced chunks, k and v one
// or every rank's, the mask by whole-sequence positions; mcc_attention_merge_<dtype> merges two
// ring pieces' (y, lse).
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

// The primitives below (shared addresses, cp.async, ldmatrix, mma) are PTX; tests/gpu/emulate's host
// emulation defines MCC_ATTN_EMULATED and its own.
#ifndef MCC_ATTN_EMULATED
#define MCC_ATTN_DYNAMIC_SMEM extern __shared__ __align__(128) unsigned char mcc_attn_smem[]
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
#endif

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

// --- context parallelism --------------------------------------------------------------------
// Under context parallelism (cp > 1) the whole sequence is cut into 2 cp chunks of c = T/2 tokens (T:
// a rank's local length) and rank r holds chunks r and 2cp-1-r, in that order (ir.h's
// ir_cp_position). q holds rank q_rank's; k and v hold kv_ranks ranks' from kv_rank on, in rank
// order, [B, kv_ranks T, Hk, D]: every rank's gathered (ring = 0: kv_rank 0, kv_ranks cp) or one
// rank's (ring = 1, a ring piece: kv_rank = (cp_rank - shift) mod cp). cp = 1: one chunk of T tokens
// whose positions are its indices. The kernels walk tiles that never straddle a chunk, so a tile's
// positions are one contiguous range: the causal mask compares base + offset exactly as at cp = 1
// (no per-element position), tiles wholly after the rows they meet are skipped, and keys past a
// chunk's end (a partial tile) are masked with the causal ones. A query row that sees no key gets
// y = 0 and lse = -inf. ORDER: runtime/cuda/attention.c's cu_attn_cp mirrors this struct.
struct mcc_attn_cp {
    int cp, q_rank, kv_rank, kv_ranks;
};

__device__ __forceinline__ int mcc_attn_chunk_len(const mcc_attn_cp &s, int T) { return s.cp > 1 ? T / 2 : T; }
__device__ __forceinline__ int mcc_attn_chunks_per_rank(const mcc_attn_cp &s) { return s.cp > 1 ? 2 : 1; }
// The whole-sequence position of the first token of chunk i (0 or 1) of rank r's local sequence.
__device__ __forceinline__ int mcc_attn_chunk_pos(const mcc_attn_cp &s, int r, int i, int c)
{
    return (i == 0 ? r : 2 * s.cp - 1 - r) * c;
}
// The same for key chunk kc of k and v (kc / chunks-per-rank: the rank after kv_rank).
__device__ __forceinline__ int mcc_attn_key_chunk_pos(const mcc_attn_cp &s, int kc, int c)
{
    const int n = mcc_attn_chunks_per_rank(s);
    return mcc_attn_chunk_pos(s, s.kv_rank + kc / n, kc % n, c);
}
// Moves (kc, tile) to the first key tile of BN at or after it (tile < the chunk's tiles) whose first
// key is at a position <= qmax; false when none is left. A chunk's visible tiles are a prefix of it.
template <int BN>
__device__ __forceinline__ bool mcc_attn_next_key_tile(const mcc_attn_cp &s, int c, int qmax, int &kc, int &tile)
{
    for (const int nk = s.kv_ranks * mcc_attn_chunks_per_rank(s); kc < nk; kc++, tile = 0)
        if (tile * BN < c && mcc_attn_key_chunk_pos(s, kc, c) + tile * BN <= qmax)
            return true;
    return false;
}

// --- forward (bf16) ---------------------------------------------------------------------------
// Block: BM query rows of one (b, h) in one chunk, W warps, each warp R = BM/(16W) slabs of 16 rows;
// loops over the key tiles of BN it sees (mcc_attn_next_key_tile) with an online softmax in
// registers (log2 domain). Blocks are launched heaviest (the later chunk's last query tile) first;
// the grid's x is chunks-per-rank x ceil(c/BM). Shared: Q [BM][D], K and V [2][BN][D] (double
// buffered).
template <int D, int BM, int BN, int W, bool DROP>
__device__ void mcc_attn_fwd(const mcc_bf16 *q, const mcc_bf16 *k, const mcc_bf16 *v, mcc_bf16 *y, float *lse, int T,
                             int H, int Hk, float scale, mcc_attn_cp cp, mcc_dropout drop, int head_offset)
{
    constexpr int R = BM / (16 * W), NT = 32 * W;
    static_assert(!DROP || BN <= 128, "a row's keep bits fit one word");
    typedef mcc_attn_tile<BM, D> QTile;
    typedef mcc_attn_tile<BN, D> KTile;
    MCC_ATTN_DYNAMIC_SMEM;
    const unsigned sQ = mcc_attn_smem_addr(mcc_attn_smem), sK = sQ + QTile::BYTES, sV = sK + 2 * KTile::BYTES;

    // this block's query tile: rows m0.. (qvalid of them, to its chunk's end) at positions qb..
    const int c = mcc_attn_chunk_len(cp, T), qtiles = (c + BM - 1) / BM, xb = gridDim.x - 1 - blockIdx.x;
    const int qc = xb / qtiles, m0 = qc * c + xb % qtiles * BM, qvalid = min(BM, (qc + 1) * c - m0);
    const int qb = mcc_attn_chunk_pos(cp, cp.q_rank, qc, c) + (m0 - qc * c), qmax = qb + qvalid - 1;
    const int b = blockIdx.y / H, h = blockIdx.y % H, hk = h / (H / Hk), Tk = T * cp.kv_ranks;
    const long long ldq = (long long)H * D, ldk = (long long)Hk * D;
    // DROP: this block's sample, and its head's first score row in the sample
    const unsigned long long sample = DROP ? *drop.first_sample + b : 0;
    const unsigned long long hrow = (unsigned long long)(head_offset + h) * T;
    const mcc_bf16 *kg = k + ((long long)b * Tk * Hk + hk) * D, *vg = v + ((long long)b * Tk * Hk + hk) * D;

    int kc = 0, tile = 0; // the key tile in hand: tile `tile` of key chunk kc
    bool more = mcc_attn_next_key_tile<BN>(cp, c, qmax, kc, tile);
    if (more) { // else a ring piece whose keys all follow these rows: y = 0, lse = -inf
        QTile::template load<NT>(sQ, q + ((long long)(b * T + m0) * H + h) * D, ldq, qvalid);
        KTile::template load<NT>(sK, kg + (kc * c + tile * BN) * ldk, ldk, c - tile * BN);
        KTile::template load<NT>(sV, vg + (kc * c + tile * BN) * ldk, ldk, c - tile * BN);
    }
    mcc_attn_cp_commit();

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int wrow = m0 + warp * 16 * R, wpos = qb + warp * 16 * R; // first query row of this warp, its position
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

    for (int jb = 0; more; jb++) {
        // keys n0.. (kvalid of them) at positions kb..
        const int n0 = kc * c + tile * BN, kvalid = min(BN, c - tile * BN);
        const int kb = mcc_attn_key_chunk_pos(cp, kc, c) + tile * BN;
        const unsigned cK = sK + (jb & 1) * KTile::BYTES, cV = sV + (jb & 1) * KTile::BYTES;
        int nkc = kc, ntile = tile + 1;
        more = mcc_attn_next_key_tile<BN>(cp, c, qmax, nkc, ntile);
        if (more) {
            const unsigned nK = sK + ((jb + 1) & 1) * KTile::BYTES, nV = sV + ((jb + 1) & 1) * KTile::BYTES;
            KTile::template load<NT>(nK, kg + (nkc * c + ntile * BN) * ldk, ldk, c - ntile * BN);
            KTile::template load<NT>(nV, vg + (nkc * c + ntile * BN) * ldk, ldk, c - ntile * BN);
            mcc_attn_cp_commit();
            mcc_attn_cp_wait<1>();
        } else {
            mcc_attn_cp_wait<0>();
        }
        kc = nkc, tile = ntile;
        __syncthreads();
        if (kb <= wpos + 16 * R - 1) { // else every key of the block is after every row of this warp
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
            // some key after some row, or past the chunk's end: apply the mask
            const bool diag = kb + BN - 1 > wpos || kvalid < BN;
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
                    // key n0+i is masked for i > last: after the row's position, or past the chunk
                    const int last = min(wpos + 16 * r + g + 8 * hf - kb, kvalid - 1);
                    float mx = mrow[r][hf];
#pragma unroll
                    for (int j = 0; j < BN / 8; j++)
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            float x = s[r][j][2 * hf + e] * sl2;
                            if (diag && 8 * j + 2 * t + e > last)
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
            const float l = mcc_attn_quad_sum(lrow[r][hf]), inv = l > 0.f ? 1.f / l : 0.f; // l = 0: no key seen
            if (qi - m0 >= qvalid)
                continue;
            mcc_bf16 *yrow = y + ((long long)(b * T + qi) * H + h) * D;
#pragma unroll
            for (int j = 0; j < D / 8; j++)
                *(__nv_bfloat162 *)(yrow + 8 * j + 2 * t) =
                    __floats2bfloat162_rn(o[r][j][2 * hf] * inv, o[r][j][2 * hf + 1] * inv);
            if (t == 0)
                lse[((long long)b * H + h) * T + qi] = l > 0.f ? mrow[r][hf] * MCC_LN2 + logf(l) : -MCC_ATTN_INF;
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

// Block: BN = 16W keys of one (b, kv head) in one key chunk (the grid's x: key chunks x ceil(c/BN));
// warp w owns keys 16w..16w+15 and keeps their dk, dv rows in registers while the block walks every
// query tile (of BM rows, in either of q's chunks) of every query head of the group that has a row
// at or after its keys. Per query block: S^T = K Q^T, dP^T = V dy^T, P^T, dS^T =
// P^T (dP^T - Di), dV += P^T dy, dK += dS^T Q (warp-local), then dS^T goes to shared memory and
// the warps split dQ += dS K by (16-row slab, column group) and add it to dq_acc with f32
// atomics. Shared: K, V [BN][D], Q, dy [2][BM][D], dS^T [BN][BM], lse, Di [2][BM].
template <int D, int BM, int BN, int W, bool DROP>
__device__ void mcc_attn_bwd(const mcc_bf16 *dy, const mcc_bf16 *q, const mcc_bf16 *k, const mcc_bf16 *v,
                             const float *lse, const float *Di, float *dq_acc, mcc_bf16 *dk, mcc_bf16 *dv, int T, int H,
                             int Hk, float scale, mcc_attn_cp cp, mcc_dropout drop, int head_offset)
{
    static_assert(BN == 16 * W, "one 16-key slab per warp");
    constexpr int NT = 32 * W, MSLABS = BM / 16, CGROUPS = W / MSLABS, DC = D / CGROUPS;
    static_assert(W % MSLABS == 0 && DC % 16 == 0, "dQ work split");
    typedef mcc_attn_tile<BN, D> KTile;
    typedef mcc_attn_tile<BM, D> QTile;
    typedef mcc_attn_tile<BN, BM> STile;
    MCC_ATTN_DYNAMIC_SMEM;
    const unsigned sK = mcc_attn_smem_addr(mcc_attn_smem), sV = sK + KTile::BYTES, sQ = sV + KTile::BYTES,
                   sdO = sQ + 2 * QTile::BYTES, sS = sdO + 2 * QTile::BYTES, sL = sS + STile::BYTES,
                   sD = sL + 2 * BM * 4;
    const float *Ls = (const float *)(mcc_attn_smem + (sL - sK)), *Ds = (const float *)(mcc_attn_smem + (sD - sK));

    // this block's keys: n0.. (kvalid of them, to their chunk's end) at positions kb..
    const int c = mcc_attn_chunk_len(cp, T), ktiles = (c + BN - 1) / BN, kc = blockIdx.x / ktiles;
    const int n0 = kc * c + blockIdx.x % ktiles * BN, kvalid = min(BN, (kc + 1) * c - n0);
    const int kb = mcc_attn_key_chunk_pos(cp, kc, c) + (n0 - kc * c), Tk = T * cp.kv_ranks;
    const int b = blockIdx.y / Hk, hk = blockIdx.y % Hk, G = H / Hk;
    const unsigned long long sample = DROP ? *drop.first_sample + b : 0;
    const long long ldq = (long long)H * D, ldk = (long long)Hk * D;
    // The query tiles with a row at or after position kb: of q's chunk i, tiles first_i.. (count_i of
    // them; scalars, not arrays, which would live in local memory)
    const int qtiles = (c + BM - 1) / BM, from0 = kb - mcc_attn_chunk_pos(cp, cp.q_rank, 0, c); // kb's offsets
    const int from1 = cp.cp > 1 ? kb - mcc_attn_chunk_pos(cp, cp.q_rank, 1, c) : c;           // in the chunks
    const int first0 = from0 > 0 ? from0 / BM : 0, count0 = from0 < c ? qtiles - first0 : 0;
    const int first1 = from1 > 0 ? from1 / BM : 0, count1 = from1 < c ? qtiles - first1 : 0;
    const int mblocks = count0 + count1, iters = G * mblocks;
    // Query tile `it`: head hk*G + it/mblocks; its first row m0 (qvalid rows) at position qb.
    auto q_tile = [&](int it, int &h, int &m0, int &qvalid, int &qb) {
        const int j = it % mblocks, i = j < count0 ? 0 : 1, tile = i ? first1 + j - count0 : first0 + j;
        h = hk * G + it / mblocks, m0 = i * c + tile * BM, qvalid = min(BM, c - tile * BM);
        qb = mcc_attn_chunk_pos(cp, cp.q_rank, i, c) + tile * BM;
    };

    if (iters > 0) { // else a ring piece whose keys follow every query: dk = dv = 0
        KTile::template load<NT>(sK, k + ((long long)(b * Tk + n0) * Hk + hk) * D, ldk, kvalid);
        KTile::template load<NT>(sV, v + ((long long)(b * Tk + n0) * Hk + hk) * D, ldk, kvalid);
    }
    // Query tile `it` into buffer it&1.
    auto load_q = [&](int it) {
        int h, m0, qvalid, qb;
        q_tile(it, h, m0, qvalid, qb);
        const int buf = it & 1;
        const long long off = ((long long)(b * T + m0) * H + h) * D, roff = ((long long)b * H + h) * T + m0;
        QTile::template load<NT>(sQ + buf * QTile::BYTES, q + off, ldq, qvalid);
        QTile::template load<NT>(sdO + buf * QTile::BYTES, dy + off, ldq, qvalid);
        mcc_attn_load_rows<BM, NT>(sL + buf * BM * 4, lse + roff, qvalid);
        mcc_attn_load_rows<BM, NT>(sD + buf * BM * 4, Di + roff, qvalid);
        mcc_attn_cp_commit();
    };
    if (iters > 0)
        load_q(0);

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int wkey = n0 + 16 * warp, wpos = kb + 16 * warp; // first key of this warp, its position
    const float sl2 = scale * MCC_LOG2E;
    float dka[D / 8][4], dva[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            dka[j][e] = dva[j][e] = 0.f;

    for (int it = 0; it < iters; it++) {
        int h, m0, qvalid, qb;
        q_tile(it, h, m0, qvalid, qb);
        const int buf = it & 1;
        mcc_attn_cp_wait<0>();
        __syncthreads(); // this block's tiles are in; everyone is done with the previous one
        if (it + 1 < iters)
            load_q(it + 1);
        const unsigned cQ = sQ + buf * QTile::BYTES, cdO = sdO + buf * QTile::BYTES;
        const float *cL = Ls + buf * BM, *cD = Ds + buf * BM;

        if (wpos > qb + BM - 1 || 16 * warp >= kvalid) { // every key after every row, or none: dS^T = 0
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
            // some key after some row, or past the chunk's end: apply the mask. Query column col is
            // masked for key row hf (g + 8hf of the warp's) where col < before[hf].
            const bool diag = wpos + 15 > qb || 16 * warp + 15 >= kvalid;
            int before[2];
#pragma unroll
            for (int hf = 0; hf < 2; hf++)
                before[hf] = 16 * warp + g + 8 * hf < kvalid ? wpos + g + 8 * hf - qb : BM;
            const unsigned long long hrow = (unsigned long long)(head_offset + h) * T + m0; // DROP: query m0's row
#pragma unroll
            for (int j = 0; j < BM / 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = wkey + g + 8 * (e >> 1), col = 8 * j + 2 * t + (e & 1);
                    float p = exp2f(st[j][e] * sl2 - cL[col] * MCC_LOG2E);
                    if (diag && col < before[e >> 1])
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
        const int klimit = min(kvalid, qb + 16 * slab + 15 - kb + 1); // keys after the slab's last row give dS = 0
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
                if (qi - m0 >= qvalid)
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
        if (key - n0 >= kvalid)
            continue;
        const long long off = ((long long)(b * Tk + key) * Hk + hk) * D + 2 * t;
#pragma unroll
        for (int j = 0; j < D / 8; j++) {
            *(__nv_bfloat162 *)(dk + off + 8 * j) =
                __floats2bfloat162_rn(dka[j][2 * hf] * scale, dka[j][2 * hf + 1] * scale);
            *(__nv_bfloat162 *)(dv + off + 8 * j) = __floats2bfloat162_rn(dva[j][2 * hf], dva[j][2 * hf + 1]);
        }
    }
}

// --- f32 (testing): one thread per query row ---------------------------------------------------
// Query row i at position qp sees, of key chunk kc (at position base), its first min(c, qp-base+1)
// keys (cp = 1: keys 0..i).
__device__ __forceinline__ int mcc_attn_row_pos(const mcc_attn_cp &s, int i, int c)
{
    return mcc_attn_chunk_pos(s, s.q_rank, i / c, c) + i % c;
}
__device__ __forceinline__ int mcc_attn_keys_seen(const mcc_attn_cp &s, int kc, int c, int qp)
{
    return max(0, min(c, qp - mcc_attn_key_chunk_pos(s, kc, c) + 1));
}

template <int D, bool DROP>
__device__ void mcc_attn_fwd_f32(const float *q, const float *k, const float *v, float *y, float *lse, int B, int T,
                                 int H, int Hk, float scale, mcc_attn_cp cp, mcc_dropout drop, int head_offset)
{
    long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (idx >= (long long)B * H * T)
        return;
    const int i = idx % T, h = idx / T % H, b = idx / ((long long)T * H), hk = h / (H / Hk);
    const int c = mcc_attn_chunk_len(cp, T), qp = mcc_attn_row_pos(cp, i, c), Tk = T * cp.kv_ranks;
    const float *qi = q + ((long long)(b * T + i) * H + h) * D;
    const unsigned long long sample = DROP ? *drop.first_sample + b : 0; // DROP: row i's scores from erow
    const unsigned long long erow = ((unsigned long long)(head_offset + h) * T + i) * T;
    mcc_dropout_cursor cur = MCC_DROPOUT_CURSOR;
    float acc[D], m = -MCC_ATTN_INF, l = 0.f;
    for (int d = 0; d < D; d++)
        acc[d] = 0.f;
    for (int kc = 0; kc < Tk / c; kc++)
        for (int j = kc * c, end = j + mcc_attn_keys_seen(cp, kc, c, qp); j < end; j++) {
            const float *kj = k + ((long long)(b * Tk + j) * Hk + hk) * D, *vj = v + ((long long)(b * Tk + j) * Hk + hk) * D;
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
    for (int d = 0; d < D; d++) // l = 0: the row saw no key
        y[((long long)(b * T + i) * H + h) * D + d] = l > 0.f ? acc[d] / l : 0.f;
    lse[((long long)b * H + h) * T + i] = l > 0.f ? m + logf(l) : -MCC_ATTN_INF;
}

// dk, dv must be zeroed first (they are accumulated with atomics).
template <int D, bool DROP>
__device__ void mcc_attn_bwd_f32(const float *dy, const float *q, const float *k, const float *v, const float *y,
                                 const float *lse, float *dq, float *dk, float *dv, int B, int T, int H, int Hk,
                                 float scale, mcc_attn_cp cp, mcc_dropout drop, int head_offset)
{
    long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (idx >= (long long)B * H * T)
        return;
    const int i = idx % T, h = idx / T % H, b = idx / ((long long)T * H), hk = h / (H / Hk);
    const int c = mcc_attn_chunk_len(cp, T), qp = mcc_attn_row_pos(cp, i, c), Tk = T * cp.kv_ranks;
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
    for (int kc = 0; kc < Tk / c; kc++)
        for (int j = kc * c, end = j + mcc_attn_keys_seen(cp, kc, c, qp); j < end; j++) {
            const long long ko = ((long long)(b * Tk + j) * Hk + hk) * D;
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

// --- context parallelism's merge -----------------------------------------------------------------
// (o, lse) := merge((o, lse), (o2, lse2)) in place, two ring pieces' attention of the same queries:
// lse = logaddexp(lse, lse2), o = o exp(lse_old - lse) + o2 exp(lse2 - lse), in fp32; a row whose
// two lse are -inf gets o = 0, lse = -inf. o, o2 [B,T,H,D] (the dtype); lse, lse2 f32 [B,H,T].
// One warp per (b, t, h) row, grid-stride: any grid of blocks of a multiple of 32 threads (e.g.
// ceil(32 B T H / 256) blocks of 256). Entry points mcc_attention_merge_<f32|bf16>.
template <class X>
__device__ void mcc_attn_merge(X *o, float *lse, const X *o2, const float *lse2, int B, int H, int T, int D)
{
    const long long rows = (long long)B * T * H, warps = ((long long)gridDim.x * blockDim.x) >> 5;
    const int lane = threadIdx.x & 31;
    for (long long row = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5; row < rows; row += warps) {
        const long long b = row / ((long long)T * H), t = row / H % T, h = row % H, li = (b * H + h) * T + t;
        const float l1 = lse[li], l2 = lse2[li], mx = fmaxf(l1, l2);
        float w1 = 0.f, w2 = 0.f, l = -MCC_ATTN_INF;
        if (mx != -MCC_ATTN_INF) {
            const float e1 = expf(l1 - mx), e2 = expf(l2 - mx), sum = e1 + e2;
            w1 = e1 / sum, w2 = e2 / sum, l = mx + logf(sum);
        }
        for (int d = lane; d < D; d += 32)
            mcc_st(o, row * D + d, mcc_ld(o, row * D + d) * w1 + mcc_ld(o2, row * D + d) * w2);
        __syncwarp(); // every lane has read lse[li]
        if (lane == 0)
            lse[li] = l;
    }
}
#define MCC_ATTN_MERGE(sfx, X)                                                                                \
    extern "C" __global__ void mcc_attention_merge_##sfx(X *o, float *lse, const X *o2, const float *lse2, int B,  \
                                                         int H, int T, int D)                                 \
    {                                                                                                         \
        mcc_attn_merge<X>(o, lse, o2, lse2, B, H, T, D);                                                      \
    }
MCC_FOR_FLOATS(MCC_ATTN_MERGE)

// --- entry points: mcc_attention_{fwd,bwd}_<dtype>_d<D> (the sequence layout, mcc_attn_cp, last;
// {1, 0, 0, 1} without context parallelism), and their dropout twins
// mcc_attention_dropout_{fwd,bwd}_<dtype>_d<D> with (mcc_dropout drop, int head_offset) after the
// same parameters. ORDER: the tile table in runtime/cuda/attention.c (its smem sizes and launch
// shapes) mirrors these parameters.
#define MCC_ATTN_FWD_BF16_PARAMS                                                                              \
    const mcc_bf16 *q, const mcc_bf16 *k, const mcc_bf16 *v, mcc_bf16 *y, float *lse, int T, int H, int Hk, float scale, \
        mcc_attn_cp cp
#define MCC_ATTN_BWD_BF16_PARAMS                                                                              \
    const mcc_bf16 *dy, const mcc_bf16 *q, const mcc_bf16 *k, const mcc_bf16 *v, const float *lse, const float *Di, \
        float *dq_acc, mcc_bf16 *dk, mcc_bf16 *dv, int T, int H, int Hk, float scale, mcc_attn_cp cp
#define MCC_ATTN_BF16(D, FBM, FBN, FW, BBM, BBN, BW)                                                         \
    extern "C" __global__ void __launch_bounds__(32 * FW) mcc_attention_fwd_bf16_d##D(MCC_ATTN_FWD_BF16_PARAMS) \
    {                                                                                                         \
        mcc_attn_fwd<D, FBM, FBN, FW, false>(q, k, v, y, lse, T, H, Hk, scale, cp, mcc_dropout{}, 0);             \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(32 * FW)                                                    \
        mcc_attention_dropout_fwd_bf16_d##D(MCC_ATTN_FWD_BF16_PARAMS, mcc_dropout drop, int head_offset)     \
    {                                                                                                         \
        mcc_attn_fwd<D, FBM, FBN, FW, true>(q, k, v, y, lse, T, H, Hk, scale, cp, drop, head_offset);             \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(32 * BW) mcc_attention_bwd_bf16_d##D(MCC_ATTN_BWD_BF16_PARAMS) \
    {                                                                                                         \
        mcc_attn_bwd<D, BBM, BBN, BW, false>(dy, q, k, v, lse, Di, dq_acc, dk, dv, T, H, Hk, scale, cp, mcc_dropout{}, 0); \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(32 * BW)                                                    \
        mcc_attention_dropout_bwd_bf16_d##D(MCC_ATTN_BWD_BF16_PARAMS, mcc_dropout drop, int head_offset)     \
    {                                                                                                         \
        mcc_attn_bwd<D, BBM, BBN, BW, true>(dy, q, k, v, lse, Di, dq_acc, dk, dv, T, H, Hk, scale, cp, drop, head_offset); \
    }
#define MCC_ATTN_FWD_F32_PARAMS                                                                               \
    const float *q, const float *k, const float *v, float *y, float *lse, int B, int T, int H, int Hk, float scale, \
        mcc_attn_cp cp
#define MCC_ATTN_BWD_F32_PARAMS                                                                               \
    const float *dy, const float *q, const float *k, const float *v, const float *y, const float *lse, float *dq, \
        float *dk, float *dv, int B, int T, int H, int Hk, float scale, mcc_attn_cp cp
#define MCC_ATTN_F32(D)                                                                                       \
    extern "C" __global__ void mcc_attention_fwd_f32_d##D(MCC_ATTN_FWD_F32_PARAMS)                           \
    {                                                                                                         \
        mcc_attn_fwd_f32<D, false>(q, k, v, y, lse, B, T, H, Hk, scale, cp, mcc_dropout{}, 0);                    \
    }                                                                                                         \
    extern "C" __global__ void mcc_attention_dropout_fwd_f32_d##D(MCC_ATTN_FWD_F32_PARAMS, mcc_dropout drop,  \
                                                                  int head_offset)                            \
    {                                                                                                         \
        mcc_attn_fwd_f32<D, true>(q, k, v, y, lse, B, T, H, Hk, scale, cp, drop, head_offset);                    \
    }                                                                                                         \
    extern "C" __global__ void mcc_attention_bwd_f32_d##D(MCC_ATTN_BWD_F32_PARAMS)                           \
    {                                                                                                         \
        mcc_attn_bwd_f32<D, false>(dy, q, k, v, y, lse, dq, dk, dv, B, T, H, Hk, scale, cp, mcc_dropout{}, 0);    \
    }                                                                                                         \
    extern "C" __global__ void mcc_attention_dropout_bwd_f32_d##D(MCC_ATTN_BWD_F32_PARAMS, mcc_dropout drop,  \
                                                                  int head_offset)                            \
    {                                                                                                         \
        mcc_attn_bwd_f32<D, true>(dy, q, k, v, y, lse, dq, dk, dv, B, T, H, Hk, scale, cp, drop, head_offset);    \
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
