// fp8.cuh — FP8 (ir/ops.def's fp8_* ops): the max-abs reduction, the saturating quantize and the
// delayed-scaling history updates, each the CPU kernel's arithmetic (runtime/cpu_kernels.c,
// runtime/fp8.c) bit for bit. NVRTC compiles with --use_fast_math, so the scale's divisions are
// the IEEE round-to-nearest intrinsics, as the CPU's float division.
#pragma once
#include <cuda_fp8.h>

#define MCC_FP8_NAN_BITS(b) (((b) & 0x7fffffffu) > 0x7f800000u)

// x * scale rounded to nearest even onto E4M3 (e5m2 = 0) or E5M2, saturating at +-max (inf too);
// a NaN keeps its sign as the CPU's rt_fp8_encode (sign | 0x7f), where CUDA's conversion drops it.
__device__ __forceinline__ unsigned char mcc_fp8_encode(float v, int e5m2)
{
    unsigned b = __float_as_uint(v);
    if (MCC_FP8_NAN_BITS(b))
        return (unsigned char)(((b >> 24) & 0x80u) | 0x7fu);
    return (unsigned char)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, e5m2 ? __NV_E5M2 : __NV_E4M3);
}

// scale = fmax / amax / 2^margin (pow2_margin = 2^margin, from the launcher), 1 when amax is not > 0.
__device__ __forceinline__ float mcc_fp8_scale(const float *amax, float fmax, float pow2_margin)
{
    float a = amax[0];
    return a > 0.0f ? __fdiv_rn(__fdiv_rn(fmax, a), pow2_margin) : 1.0f;
}

// The largest |x| of x[i, i + W) as uint bits.
template <int W, class T> __device__ __forceinline__ unsigned mcc_fp8_absmax_at(const T *x, long long i)
{
    float v[W];
    mcc_ldn(v, x, i);
    unsigned m = 0;
    for (int k = 0; k < W; k++)
        m = max(m, __float_as_uint(v[k]) & 0x7fffffffu);
    return m;
}

// amax[0] := max over x of |x| as uint bits (every |x| is >= +0, so the bits order as the values,
// and a NaN's bits exceed inf's: a NaN anywhere gives NaN, as the CPU's). The launcher zeroes amax.
// 16-byte loads where x is aligned (a memory-bound pass: the scalar loop reached a third of the
// bandwidth), one atomic a block.
#define MCC_FP8_AMAX(sfx, T)                                                                                \
    extern "C" __global__ void mcc_fp8_amax_##sfx(unsigned *amax, const T *x, long long n)                  \
    {                                                                                                       \
        unsigned m = 0;                                                                                     \
        mcc_for_each_vec(n, mcc_aligned(x), [&](auto w, long long i) {                                      \
            m = max(m, mcc_fp8_absmax_at<decltype(w)::value>(x, i));                                        \
        });                                                                                                 \
        m = mcc_block_max_u32(m);                                                                           \
        if (threadIdx.x == 0 && m != 0)                                                                     \
            atomicMax(amax, m);                                                                             \
    }
MCC_FOR_FLOATS(MCC_FP8_AMAX)

// (x, amax) -> (q, scale_inv): q[i] = encode(x[i] * scale); scale_inv = 1 / scale (block 0's thread 0).
template <int W, class T>
__device__ __forceinline__ void mcc_fp8_quantize_at(unsigned char *q, const T *x, long long i, float scale, int e5m2)
{
    float v[W];
    mcc_ldn(v, x, i);
    unsigned word[2] = {0u, 0u}; // W == 8: one 8-byte store
    for (int k = 0; k < W; k++) {
        unsigned char b = mcc_fp8_encode(__fmul_rn(v[k], scale), e5m2);
        if (W == 8)
            word[k / 4] |= (unsigned)b << (8 * (k % 4));
        else
            q[i + k] = b;
    }
    if (W == 8)
        *(uint2 *)(q + i) = make_uint2(word[0], word[1]);
}

#define MCC_FP8_QUANTIZE(sfx, T)                                                                            \
    extern "C" __global__ void mcc_fp8_quantize_##sfx(unsigned char *q, float *scale_inv, const T *x,       \
                                                      const float *amax, long long n, int e5m2, float fmax, \
                                                      float pow2_margin)                                    \
    {                                                                                                       \
        float scale = mcc_fp8_scale(amax, fmax, pow2_margin);                                               \
        bool vec = mcc_aligned(x) && (((unsigned long long)q) & 7u) == 0;                                   \
        mcc_for_each_vec(n, vec, [&](auto w, long long i) {                                                 \
            mcc_fp8_quantize_at<decltype(w)::value>(q, x, i, scale, e5m2);                                  \
        });                                                                                                 \
        if (blockIdx.x == 0 && threadIdx.x == 0)                                                            \
            scale_inv[0] = __frcp_rn(scale);                                                                \
    }
MCC_FOR_FLOATS(MCC_FP8_QUANTIZE)

// Blockwise (fp8_block_quantize): x[R, C] -> (q E4M3, x or transposed x^T [C, R]; scale_inv laid out
// as cuBLASLt's VEC128_32F / BLK128x128_32F read it: ir_fp8_scale_blocks). A block's scale from its
// amax as uint bits (a NaN gives scale 1, as the CPU's): 448 / amax rounded down to a power of 2
// (its exponent bits), 1 where that is not a finite normal.
__device__ __forceinline__ float mcc_fp8_block_scale(unsigned amax_bits)
{
    float amax = __uint_as_float(amax_bits), s = amax > 0.0f ? __fdiv_rn(448.0f, amax) : 1.0f;
    unsigned e = __float_as_uint(s) & 0x7f800000u;
    return amax > 0.0f && e != 0u && e != 0x7f800000u ? __uint_as_float(e) : 1.0f;
}

// The scales' padding, 1: `used` scales of each of `rows` rows of ld (by the first CUDA block)
__device__ __forceinline__ void mcc_fp8_scale_padding(float *scale_inv, long long rows, long long used, long long ld)
{
    for (long long k = threadIdx.x; blockIdx.x == 0 && ld > used && k < rows * (ld - used); k += blockDim.x)
        scale_inv[k / (ld - used) * ld + used + k % (ld - used)] = 1.0f;
}

// 1x128 tiles of q (activations, gradients; the wgrad's x^T and dy^T): a warp a tile, 4 elements a
// lane, no __syncthreads; consecutive warps take the tiles of consecutive rows of q at one column of
// tiles, whose scales sit side by side, and whose strided loads under transpose (a tile is a column
// of x) share their sectors with the neighbouring warps'.
#define MCC_FP8_TILE_QUANTIZE(sfx, T)                                                                       \
    extern "C" __global__ void mcc_fp8_tile_quantize_##sfx(unsigned char *q, float *scale_inv, const T *x,  \
                                                           long long R, long long C, int transpose)         \
    {                                                                                                       \
        long long QR = transpose ? C : R, QC = transpose ? R : C, ntiles = QR * (QC / 128);                 \
        long long ld = (QR + 3) / 4 * 4, warps = (long long)gridDim.x * (blockDim.x >> 5);                  \
        int lane = threadIdx.x & 31;                                                                        \
        mcc_fp8_scale_padding(scale_inv, QC / 128, QR, ld);                                                 \
        for (long long t = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); t < ntiles;      \
             t += warps) {                                                                                  \
            long long i = t % QR, j = t / QR * 128 + lane * 4; /* q's row, the lane's first column */      \
            float v[4];                                                                                     \
            unsigned m = 0;                                                                                 \
            for (int e = 0; e < 4; e++) {                                                                   \
                float w[1];                                                                                 \
                mcc_ldn(w, x, transpose ? (j + e) * C + i : i * C + j + e);                                 \
                v[e] = w[0];                                                                                \
                m = max(m, __float_as_uint(w[0]) & 0x7fffffffu);                                            \
            }                                                                                               \
            float s = mcc_fp8_block_scale(__reduce_max_sync(0xffffffffu, m));                               \
            if (lane == 0)                                                                                  \
                scale_inv[t / QR * ld + i] = __frcp_rn(s);                                                  \
            for (int e = 0; e < 4; e++)                                                                     \
                q[i * QC + j + e] = mcc_fp8_encode(__fmul_rn(v[e], s), 0);                                  \
        }                                                                                                   \
    }
MCC_FOR_FLOATS(MCC_FP8_TILE_QUANTIZE)

// The experts' rows x[R, C] by counts[E], transposed in 1x128 tiles (fp8_block_quantize with counts,
// the blockwise wgrad's): q [C, QC] (QC = ir_fp8_expert_rows(R, E)), expert e's rows in the columns
// from the previous experts' rows each rounded up to 128, its tiles from its first row, the last
// partial and zero past its rows (cuBLASLt's block-scaled GEMM reads each expert's span as a K of
// a multiple of 128; the zeros add nothing); the tiles past the last expert's zero with scale 1.
// As mcc_fp8_tile_quantize: a warp a tile, consecutive warps the tiles of consecutive rows of q at
// one column of tiles; each warp finds its tile's expert by walking the counts (on the device: no
// host wait, so a CUDA graph may hold it).
#define MCC_FP8_EXPERT_TILE_QUANTIZE(sfx, T)                                                                \
    extern "C" __global__ void mcc_fp8_expert_tile_quantize_##sfx(unsigned char *q, float *scale_inv,      \
                                                                  const T *x, const int *counts,            \
                                                                  long long E, long long C, long long QC)   \
    {                                                                                                       \
        long long ntiles = C * (QC / 128), ld = (C + 3) / 4 * 4;                                            \
        long long warps = (long long)gridDim.x * (blockDim.x >> 5);                                         \
        int lane = threadIdx.x & 31;                                                                        \
        mcc_fp8_scale_padding(scale_inv, QC / 128, C, ld);                                                  \
        for (long long t = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); t < ntiles;      \
             t += warps) {                                                                                  \
            long long i = t % C, tile = t / C, first_tile = 0, row = 0, n = 0; /* q's row; x's tile rows */ \
            for (long long e = 0; e < E; e++) {                                                             \
                long long tiles = ((long long)counts[e] + 127) / 128;                                       \
                if (tile < first_tile + tiles) {                                                            \
                    row += (tile - first_tile) * 128, n = min(128LL, counts[e] - (tile - first_tile) * 128); \
                    break;                                                                                  \
                }                                                                                           \
                first_tile += tiles, row += counts[e];                                                      \
            }                                                                                               \
            float v[4];                                                                                     \
            unsigned m = 0;                                                                                 \
            for (int k = 0; k < 4; k++) {                                                                   \
                long long j = lane * 4 + k;                                                                 \
                float w[1] = {0.0f};                                                                        \
                if (j < n)                                                                                  \
                    mcc_ldn(w, x, (row + j) * C + i);                                                       \
                v[k] = w[0];                                                                                \
                m = max(m, __float_as_uint(w[0]) & 0x7fffffffu);                                            \
            }                                                                                               \
            float s = mcc_fp8_block_scale(__reduce_max_sync(0xffffffffu, m));                               \
            if (lane == 0)                                                                                  \
                scale_inv[tile * ld + i] = __frcp_rn(s);                                                    \
            for (int k = 0; k < 4; k++)                                                                     \
                q[i * QC + tile * 128 + lane * 4 + k] = lane * 4 + k < n ? mcc_fp8_encode(__fmul_rn(v[k], s), 0) : 0; \
        }                                                                                                   \
    }
MCC_FOR_FLOATS(MCC_FP8_EXPERT_TILE_QUANTIZE)

// 128x128 blocks of q (weights): a CUDA block of threads a block (grid-stride past the grid), its
// amax reduced across the threads.
#define MCC_FP8_BLOCK_QUANTIZE(sfx, T)                                                                      \
    extern "C" __global__ void mcc_fp8_block_quantize_##sfx(unsigned char *q, float *scale_inv, const T *x, \
                                                            long long R, long long C, int transpose)        \
    {                                                                                                       \
        __shared__ float block_scale;                                                                       \
        long long QR = transpose ? C : R, QC = transpose ? R : C; /* q's (i, j) is x's (j, i) transposed */ \
        long long nbc = QC / 128, nblocks = QR / 128 * nbc, ld = (nbc + 3) / 4 * 4;                         \
        mcc_fp8_scale_padding(scale_inv, QR / 128, nbc, ld);                                                \
        for (long long b = blockIdx.x; b < nblocks; b += gridDim.x) {                                       \
            long long i0 = b / nbc * 128, j0 = b % nbc * 128; /* the block's first element of q */         \
            unsigned m = 0;                                                                                 \
            for (int k = threadIdx.x; k < 128 * 128; k += blockDim.x) {                                     \
                long long i = i0 + k / 128, j = j0 + k % 128;                                               \
                float v[1];                                                                                 \
                mcc_ldn(v, x, transpose ? j * C + i : i * C + j);                                           \
                m = max(m, __float_as_uint(v[0]) & 0x7fffffffu);                                            \
            }                                                                                               \
            m = mcc_block_max_u32(m);                                                                       \
            if (threadIdx.x == 0) {                                                                         \
                block_scale = mcc_fp8_block_scale(m);                                                       \
                scale_inv[b / nbc * ld + b % nbc] = __frcp_rn(block_scale);                                 \
            }                                                                                               \
            __syncthreads();                                                                                \
            float s = block_scale;                                                                          \
            for (int k = threadIdx.x; k < 128 * 128; k += blockDim.x) {                                     \
                long long i = i0 + k / 128, j = j0 + k % 128;                                               \
                float v[1];                                                                                 \
                mcc_ldn(v, x, transpose ? j * C + i : i * C + j);                                           \
                q[i * QC + j] = mcc_fp8_encode(__fmul_rn(v[0], s), 0);                                      \
            }                                                                                               \
        }                                                                                                   \
    }
MCC_FOR_FLOATS(MCC_FP8_BLOCK_QUANTIZE)

// The history ops touch 1 + len floats a row (len the amax history's, Megatron's default 1024; an
// expert weight's history a row an expert, the others one row): a thread a row, in the CPU's order,
// so their NaN handling is the CPU's exactly.

// r[e] := max of row e's h[1..n) (take_max, a NaN sticking) or its h[1]
extern "C" __global__ void mcc_fp8_history_amax_f32(float *r, const float *h, long long rows, long long n, int take_max)
{
    for (long long e = threadIdx.x; e < rows; e += blockDim.x) {
        const float *he = h + e * n;
        float amax = he[1];
        for (long long i = 2; take_max && i < n; i++)
            amax = he[i] > amax || MCC_FP8_NAN_BITS(__float_as_uint(he[i])) ? he[i] : amax;
        r[e] = amax;
    }
}

// each row's h[0] := max(h[0], amax[e]), a NaN sticking
extern "C" __global__ void mcc_fp8_amax_fold_f32(float *h, const float *amax, long long rows, long long n)
{
    for (long long e = threadIdx.x; e < rows; e += blockDim.x) {
        float a = amax[e], *he = h + e * n;
        he[0] = a > he[0] || MCC_FP8_NAN_BITS(__float_as_uint(a)) ? a : he[0];
    }
}

// roll: each row's h[j] := r[j-1] for j >= 1 (from the end: r may be h); then h[0] := 0
extern "C" __global__ void mcc_fp8_history_update_f32(float *h, const float *r, long long rows, long long n, int roll)
{
    for (long long e = threadIdx.x; e < rows; e += blockDim.x) {
        float *he = h + e * n;
        for (long long j = n - 1; roll && j >= 1; j--)
            he[j] = r[e * n + j - 1];
        he[0] = 0.0f;
    }
}

// out[C,ld] := q[R,C]^T (FP8 bytes), its columns R..ld zero (ld >= R): fp8_matmul's operands made
// K-major for Hopper's "TN" FP8 GEMM (runtime/cuda/matmul.c), an FP8 expert's wgrad operands with
// their reduction (the expert's rows) padded to cuBLASLt's multiple of 16. 32x32 tiles through
// shared memory, 256 threads as 8 rows of 32; grid (ceil(C/32), up to ceil(ld/32)), striding over
// row tiles past gridDim.y.
extern "C" __global__ void mcc_fp8_transpose_u8(unsigned char *out, const unsigned char *q, long long R, long long C,
                                                long long ld)
{
    __shared__ unsigned char tile[32][33];
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    const long long c0 = blockIdx.x * 32LL;
    for (long long r0 = blockIdx.y * 32LL; r0 < ld; r0 += gridDim.y * 32LL) {
        for (int j = ty; j < 32; j += 8)
            if (c0 + tx < C)
                tile[j][tx] = r0 + j < R ? q[(r0 + j) * C + c0 + tx] : 0;
        __syncthreads();
        for (int j = ty; j < 32; j += 8)
            if (c0 + j < C && r0 + tx < ld)
                out[(c0 + j) * ld + r0 + tx] = tile[tx][j];
        __syncthreads();
    }
}
