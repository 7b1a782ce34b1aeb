/* gpu_util.h — what the GPU tests and benchmarks share: bf16 rounding on the host and the median
 * time of a launcher. Header-only: each user is one executable. */
#ifndef MCC_GPU_UTIL_H
#define MCC_GPU_UTIL_H

#include "runtime/cuda/cuda_ctx.h"

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* f32 -> bf16 bits, rounded to nearest even (finite inputs). */
static inline uint16_t bf16_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline float f32_of_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline int gpu_cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Median milliseconds of one launcher call on its stream, after `warmup` calls; reps <= 64. */
static inline float bench_median_ms(rt_cuda_ctx *cx, rt_cuda_launcher fn, const rt_kernel_call *c, int warmup,
                                    int reps)
{
    cudaStream_t st = (cudaStream_t)rt_cuda_stream(cx);
    cudaEvent_t e0, e1;
    RT_CUDART_CHECK(cudaEventCreate(&e0));
    RT_CUDART_CHECK(cudaEventCreate(&e1));
    for (int i = 0; i < warmup; i++)
        fn(cx, c);
    float ms[64];
    reps = reps < 64 ? reps : 64;
    for (int i = 0; i < reps; i++) {
        RT_CUDART_CHECK(cudaEventRecord(e0, st));
        fn(cx, c);
        RT_CUDART_CHECK(cudaEventRecord(e1, st));
        RT_CUDART_CHECK(cudaEventSynchronize(e1));
        RT_CUDART_CHECK(cudaEventElapsedTime(&ms[i], e0, e1));
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    qsort(ms, (size_t)reps, sizeof ms[0], gpu_cmp_float);
    return ms[reps / 2];
}

#endif
