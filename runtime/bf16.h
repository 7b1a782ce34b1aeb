/* bf16.h — bf16 <-> f32 on the host: widening is exact, narrowing rounds to nearest even (as
 * CUDA's __float2bfloat16_rn), a NaN staying a quiet NaN. For what the host computes on bf16
 * data: MPI's bf16 reductions, the CPU's bf16 Adam moments. */
#ifndef MCC_RT_BF16_H
#define MCC_RT_BF16_H

#include <stdint.h>
#include <string.h>

static inline float rt_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t rt_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t quiet = (u >> 16) | 0x40u, rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    /* NaN stays a (quiet) NaN. A select, not a branch: loops over arrays (the host AdamW's bf16
     * moments and copies up) vectorise */
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}

/* An fp32 master held as a bf16 high half and an i16 remainder (store_param_remainders;
 * passes/precision.c): hi is x's bits plus 0x8000, shifted (round to nearest, ties away from
 * zero), the remainder x's low 16 bits, negative exactly when that carried into the high half, so
 * that rt_master_join gives x back bit for bit. kernels_templates/common.cuh's mcc_master_split
 * and mcc_master_join are the device's. */
static inline void rt_master_split(float x, uint16_t *hi, int16_t *rem)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint16_t low = (uint16_t)u;
    *hi = (uint16_t)((u >> 16) + (low >= 0x8000u)); /* u + 0x8000 without its overflow past 0xffffffff */
    memcpy(rem, &low, sizeof low);
}

static inline float rt_master_join(uint16_t hi, int16_t rem)
{
    uint16_t low;
    memcpy(&low, &rem, sizeof low);
    uint32_t u = ((uint32_t)(uint16_t)(hi - (rem < 0)) << 16) | low;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#endif
