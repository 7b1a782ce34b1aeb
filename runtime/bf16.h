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
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40); /* NaN stays a (quiet) NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

#endif
