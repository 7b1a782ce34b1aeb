/* gpu_util.h — what the GPU tests and benchmarks share: bf16 rounding on the host and the median
 * time of a launcher. Header-only: each user is one executable. */
#ifndef MCC_GPU_UTIL_H
#define MCC_GPU_UTIL_H

#include "codegen/cuda/cuda_codegen.h"
#include "runtime/cuda/cuda_ctx.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
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

/* NVRTC's kernels loaded on GPU 0: the context (free it, then *image), or NULL after printing why
 * as `prog`. */
static inline rt_cuda_ctx *gpu_ctx_open(const char *prog, void **image)
{
    char err[8192];
    size_t size;
    if (!cg_cuda_compile_kernels(image, &size, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", prog, err);
        return NULL;
    }
    RT_CUDART_CHECK(cudaSetDevice(0));
    rt_cuda_ctx *cx = rt_cuda_ctx_create(*image, err, sizeof err);
    if (!cx)
        fprintf(stderr, "%s: %s\n", prog, err);
    return cx;
}

/* ||got - want|| / ||want||; infinite if got holds a NaN or an infinity. */
static inline double gpu_rel_error(const float *got, const float *want, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i]))
            return INFINITY;
        num += (double)(got[i] - want[i]) * (got[i] - want[i]);
        den += (double)want[i] * want[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

static inline int gpu_cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* One ATTENTION / ATTENTION_GRAD call: q, dq [B,T,H,D]; k, dk [B,Tk,Hk,D]; v, dv [B,Tk,Hk,Dv]; y, dy
 * [B,T,H,Dv]; lse f32 [B,H,T]; attributes cp, cp_rank, ring, shift (attr: NULL for none, the whole
 * sequence). shape: B, T, Tk, H, Hk, D, Dv (gpu_attn_call_init: Dv = D). args, res: device (or host,
 * for the CPU kernels) pointers in the op's order. */
typedef struct {
    ir_instr in;
    ir_type qt, kt, vt, yt, lt;
    const ir_type *argt[6], *rest[3];
    rt_kernel_call call;
} gpu_attn_call;

static inline void gpu_attn_call_init_dv(gpu_attn_call *a, ir_op op, const int shape[7], const double *attr,
                                         ir_dtype dt, void *const *args, void *const *res)
{
    memset(a, 0, sizeof *a);
    int64_t qd[4] = {shape[0], shape[1], shape[3], shape[5]}, kd[4] = {shape[0], shape[2], shape[4], shape[5]};
    int64_t vd[4] = {shape[0], shape[2], shape[4], shape[6]}, yd[4] = {shape[0], shape[1], shape[3], shape[6]};
    int64_t ld[3] = {shape[0], shape[3], shape[1]};
    a->qt = ir_tensor(dt, 4, qd), a->kt = ir_tensor(dt, 4, kd), a->lt = ir_tensor(IR_F32, 3, ld);
    a->vt = ir_tensor(dt, 4, vd), a->yt = ir_tensor(dt, 4, yd);
    a->in.op = op;
    for (int i = 0; attr && i < 4; i++)
        a->in.attr[i] = attr[i];
    if (op == IR_OP_ATTENTION) {
        const ir_type *at[] = {&a->qt, &a->kt, &a->vt}, *rt[] = {&a->yt, &a->lt};
        memcpy(a->argt, at, sizeof at), memcpy(a->rest, rt, sizeof rt);
        a->in.nargs = 3, a->in.nres = 2;
    } else {
        const ir_type *at[] = {&a->yt, &a->qt, &a->kt, &a->vt, &a->yt, &a->lt}, *rt[] = {&a->qt, &a->kt, &a->vt};
        memcpy(a->argt, at, sizeof at), memcpy(a->rest, rt, sizeof rt);
        a->in.nargs = 6, a->in.nres = 3;
    }
    a->call = (rt_kernel_call){&a->in, a->in.nargs, a->in.nres, (void **)args, a->argt, (void **)res, a->rest};
}

static inline void gpu_attn_call_init(gpu_attn_call *a, ir_op op, const int shape[6], const double *attr, ir_dtype dt,
                                      void *const *args, void *const *res)
{
    gpu_attn_call_init_dv(a, op, (int[]){shape[0], shape[1], shape[2], shape[3], shape[4], shape[5], shape[5]}, attr,
                          dt, args, res);
}

/* Median milliseconds of fn(cx, arg) on the context's stream (CUDA events), after `warmup` calls;
 * reps <= 64. */
static inline float bench_median_ms_of(rt_cuda_ctx *cx, void (*fn)(rt_cuda_ctx *, const void *), const void *arg,
                                       int warmup, int reps)
{
    cudaStream_t st = (cudaStream_t)rt_cuda_stream(cx);
    cudaEvent_t e0, e1;
    RT_CUDART_CHECK(cudaEventCreate(&e0));
    RT_CUDART_CHECK(cudaEventCreate(&e1));
    for (int i = 0; i < warmup; i++)
        fn(cx, arg);
    float ms[64];
    reps = reps < 64 ? reps : 64;
    for (int i = 0; i < reps; i++) {
        RT_CUDART_CHECK(cudaEventRecord(e0, st));
        fn(cx, arg);
        RT_CUDART_CHECK(cudaEventRecord(e1, st));
        RT_CUDART_CHECK(cudaEventSynchronize(e1));
        RT_CUDART_CHECK(cudaEventElapsedTime(&ms[i], e0, e1));
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    qsort(ms, (size_t)reps, sizeof ms[0], gpu_cmp_float);
    return ms[reps / 2];
}

typedef struct {
    rt_cuda_launcher fn;
    const rt_kernel_call *c;
} bench_launch;

static inline void bench_launch_run(rt_cuda_ctx *cx, const void *arg)
{
    const bench_launch *l = arg;
    l->fn(cx, l->c);
}

/* Median milliseconds of one launcher call on its stream, after `warmup` calls; reps <= 64. */
static inline float bench_median_ms(rt_cuda_ctx *cx, rt_cuda_launcher fn, const rt_kernel_call *c, int warmup,
                                    int reps)
{
    bench_launch l = {fn, c};
    return bench_median_ms_of(cx, bench_launch_run, &l, warmup, reps);
}

#endif
