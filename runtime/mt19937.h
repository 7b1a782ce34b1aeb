/* mt19937.h — the Mersenne Twister MT19937 (Matsumoto and Nishimura's genrand_int32, seeded by
 * their init_genrand), which numpy's RandomState (gpt_dataset.c's shuffles) and PyTorch's CPU
 * torch.Generator (sampler.c's randperm) both draw from. */
#ifndef MCC_RT_MT19937_H
#define MCC_RT_MT19937_H

#include <stdint.h>

enum { RT_MT_N = 624, RT_MT_M = 397 };
typedef struct {
    uint32_t key[RT_MT_N];
    int pos;
} rt_mt;

/* init_genrand(seed) (Knuth's initialiser): numpy's RandomState(seed) for an integer seed, and
 * torch's Generator.manual_seed(seed) for a seed below 2^32. */
static inline void rt_mt_seed(rt_mt *mt, uint32_t seed) {
    for (int i = 0; i < RT_MT_N; i++) {
        mt->key[i] = seed;
        seed = 1812433253u * (seed ^ seed >> 30) + (uint32_t)i + 1;
    }
    mt->pos = RT_MT_N;
}

/* The next 32-bit output (genrand_int32). */
static inline uint32_t rt_mt_next32(rt_mt *mt) {
    if (mt->pos == RT_MT_N) { /* regenerate the state in place, as the reference genrand_int32 */
        for (int i = 0; i < RT_MT_N; i++) {
            uint32_t y = (mt->key[i] & 0x80000000u) | (mt->key[(i + 1) % RT_MT_N] & 0x7fffffffu);
            mt->key[i] = mt->key[(i + RT_MT_M) % RT_MT_N] ^ y >> 1 ^ (y & 1 ? 0x9908b0dfu : 0);
        }
        mt->pos = 0;
    }
    uint32_t y = mt->key[mt->pos++];
    y ^= y >> 11;
    y ^= y << 7 & 0x9d2c5680u;
    y ^= y << 15 & 0xefc60000u;
    return y ^ y >> 18;
}

#endif
