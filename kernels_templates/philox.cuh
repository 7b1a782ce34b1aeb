/* philox.cuh — Philox4x32-10, the counter-based generator of Random123 (Salmon et al., "Parallel
 * random numbers: as easy as 1, 2, 3", SC'11; cuRAND's, JAX's and PyTorch's Philox), and the
 * dropout mask built on it. Written in the subset C and CUDA share: runtime/dropout.h includes it
 * for the CPU kernels and the CUDA launchers, NVRTC compiles it into the kernels (kernels.cu), so
 * the CPU oracle and the GPU draw the same bits from one definition. */
#ifndef MCC_PHILOX_CUH
#define MCC_PHILOX_CUH

#ifdef __CUDACC__
#define MCC_RNG_FN __device__ __forceinline__
#else
#include <math.h>
#define MCC_RNG_FN static inline
#endif

/* --- Philox4x32-10 ------------------------------------------------------------------------- */

typedef struct {
    unsigned int v[4];
} mcc_philox4x32;

#define MCC_PHILOX_M0 0xD2511F53u /* round multipliers */
#define MCC_PHILOX_M1 0xCD9E8D57u
#define MCC_PHILOX_W0 0x9E3779B9u /* key schedule (golden ratio, sqrt(3) - 1) */
#define MCC_PHILOX_W1 0xBB67AE85u

/* The Philox4x32 bijection of counter c under key (k0, k1), 10 rounds; each round is
 * (c0, c1, c2, c3) -> (hi(M1 c2) ^ c1 ^ k0, lo(M1 c2), hi(M0 c0) ^ c3 ^ k1, lo(M0 c0)), and the
 * key grows by (W0, W1) before every round but the first. */
MCC_RNG_FN mcc_philox4x32 mcc_philox4x32_10(mcc_philox4x32 c, unsigned int k0, unsigned int k1)
{
    for (int round = 0; round < 10; round++) {
        if (round) {
            k0 += MCC_PHILOX_W0;
            k1 += MCC_PHILOX_W1;
        }
        unsigned long long p0 = (unsigned long long)MCC_PHILOX_M0 * c.v[0];
        unsigned long long p1 = (unsigned long long)MCC_PHILOX_M1 * c.v[2];
        mcc_philox4x32 n = {{(unsigned int)(p1 >> 32) ^ c.v[1] ^ k0, (unsigned int)p1,
                             (unsigned int)(p0 >> 32) ^ c.v[3] ^ k1, (unsigned int)p0}};
        c = n;
    }
    return c;
}

/* --- dropout masks --------------------------------------------------------------------------- *
 * Element e of sample s at dropout site `site` draws the 32-bit word
 *     w = philox4x32_10(counter (e/4, e/4 >> 32, s, s >> 32), key (seed, site)).v[e % 4]
 * and is kept iff w >= threshold = ceil(p 2^32), i.e. iff the uniform w / 2^32 is >= p; a kept
 * value is scaled by 1/(1-p). e is the element's index within its sample in the whole (unsharded)
 * tensor, s the sample's global index in the run (Megatron's consumed-samples order), so every
 * parallel layout and every split into micro-batches draws the same mask for the same element,
 * and the backward redraws it instead of keeping it. */

/* What a dropout kernel needs besides its tensors (a kernel argument by value: the same layout
 * in C and CUDA). */
typedef struct {
    const long long *first_sample;  /* s of the tensor's batch row 0: device memory the host sets
                                       every micro-step, read when the kernel runs (CUDA graphs) */
    unsigned int seed, site;        /* the key */
    unsigned int threshold;         /* mcc_dropout_threshold(p) */
    float scale;                    /* mcc_dropout_scale(p) */
    unsigned int normal;            /* ops.def's dropout normal=1: mcc_dropout_normal's values instead */
} mcc_dropout;

/* ceil(p 2^32) for p in [0, 1), saturating at 2^32 - 1 */
MCC_RNG_FN unsigned int mcc_dropout_threshold(double p)
{
    double t = p * 4294967296.0;
    if (t >= 4294967295.0)
        return 4294967295u;
    unsigned int u = (unsigned int)t;
    return u + ((double)u < t);
}

MCC_RNG_FN float mcc_dropout_scale(double p) { return (float)(1.0 / (1.0 - p)); }

/* The words of elements 4j .. 4j+3 of sample s. */
MCC_RNG_FN mcc_philox4x32 mcc_dropout_words(mcc_dropout d, unsigned long long s, unsigned long long j)
{
    mcc_philox4x32 c = {{(unsigned int)j, (unsigned int)(j >> 32), (unsigned int)s, (unsigned int)(s >> 32)}};
    return mcc_philox4x32_10(c, d.seed, d.site);
}

/* Walks elements of one sample, drawing each block of four words once. */
typedef struct {
    unsigned long long j;           /* the block in `words`; ~0: none yet */
    mcc_philox4x32 words;
} mcc_dropout_cursor;
#define MCC_DROPOUT_CURSOR {~0ull, {{0, 0, 0, 0}}}

/* Whether the element drawing word k (0..3) of `words` is kept: the rule itself. (Selects, not an
 * index: the words stay in registers on the GPU.) */
MCC_RNG_FN unsigned int mcc_dropout_kept(mcc_philox4x32 words, unsigned int k, unsigned int threshold)
{
    unsigned int word = k == 0 ? words.v[0] : k == 1 ? words.v[1] : k == 2 ? words.v[2] : words.v[3];
    return word >= threshold;
}

/* The factor of element e of sample s: scale if kept, else 0. A cursor serves one sample. (d by
 * value: a kernel parameter whose address is never taken stays in registers.) */
MCC_RNG_FN float mcc_dropout_factor(mcc_dropout d, unsigned long long s, unsigned long long e, mcc_dropout_cursor *cur)
{
    if (cur->j != e >> 2) {
        cur->j = e >> 2;
        cur->words = mcc_dropout_words(d, s, e >> 2);
    }
    return mcc_dropout_kept(cur->words, (unsigned int)e & 3, d.threshold) ? d.scale : 0.0f;
}

/* normal=1: element e's standard normal value, Box-Muller's of the uniforms of its pair's words
 * (2i, 2i + 1 of the block: u1 = (w + 1/2) / 2^32 of the even one, u2 of the odd), the cosine for
 * the even element, the sine for the odd; the CPU's libm and the GPU's may differ in the last bits. */
MCC_RNG_FN float mcc_dropout_normal(mcc_dropout d, unsigned long long s, unsigned long long e, mcc_dropout_cursor *cur)
{
    if (cur->j != e >> 2) {
        cur->j = e >> 2;
        cur->words = mcc_dropout_words(d, s, e >> 2);
    }
    unsigned int pair = (unsigned int)e & 2;
    unsigned int w1 = pair ? cur->words.v[2] : cur->words.v[0], w2 = pair ? cur->words.v[3] : cur->words.v[1];
    float u1 = ((float)w1 + 0.5f) * 2.3283064365386963e-10f, u2 = ((float)w2 + 0.5f) * 2.3283064365386963e-10f;
    float radius = sqrtf(-2.0f * logf(u1)), angle = 6.2831853071795865f * u2;
    return (e & 1) ? radius * sinf(angle) : radius * cosf(angle);
}

/* The keep bits of elements e and e + 1 of sample s (bit k: element e + k), from one Philox block
 * or, where the two straddle blocks, two. No state between calls, so a kernel can draw many pairs
 * side by side. */
MCC_RNG_FN unsigned int mcc_dropout_keep2(mcc_dropout d, unsigned long long s, unsigned long long e)
{
    mcc_philox4x32 w = mcc_dropout_words(d, s, e >> 2);
    unsigned int k = (unsigned int)e & 3, lo = mcc_dropout_kept(w, k, d.threshold);
    if (k == 3)
        return lo | mcc_dropout_kept(mcc_dropout_words(d, s, (e >> 2) + 1), 0, d.threshold) << 1;
    return lo | mcc_dropout_kept(w, k + 1, d.threshold) << 1;
}

/* Where the elements of a dropout operand x[B, ...] sit in their samples, as rows: x (or a block
 * of it) is R rows of C elements, S apart, and row (b, o) holds elements o*G + base .. o*G + base
 * + C - 1 of sample first_sample + first_row + b (first_row: where this block of batch rows starts,
 * when the batch is split). (runtime/dropout.c derives it from the op's split attributes.) */
typedef struct {
    long long O, C, G, base, first_row, S;
} mcc_dropout_rows;

#endif
