/* attention_bench.c — times the bf16 CUDA attention forward and backward (median of 20 after
 * warm-up, CUDA events on the launchers' stream) and prints TFLOP/s with causal FLOP counts:
 * forward 4*B*H*T*T*D/2, backward 2.5x that. With cuDNN, cuDNN's flash attention is timed beside
 * mcc's kernels on the same shapes (MCC_ATTENTION=mcc, then =cudnn), with the time it took to build
 * its two plans.
 *
 *   attention_bench                                   the kernels as mcc compiles them (and cuDNN's)
 *   attention_bench D=fbm,fbn,fw,bbm,bbn,bw ...       each argument a cubin with those tiles for
 *                                                     head dim D (attention.cuh), timed on D's shapes
 *   attention_bench --compile-only D=... ...          only compiles them (no GPU needed)
 * A cubin's compile is cached ($MCC_CACHE_DIR), so a sweep can be compiled ahead and carried. */
#include "codegen/cuda/cuda_codegen.h"
#include "common/knobs.h"
#include "runtime/cuda/cuda_ctx.h"
#include "runtime/cuda/cudnn_attention.h"
#include "tests/gpu/gpu_util.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    int B, T, H, Hk, D;
} bench_shape;

static const bench_shape bench_shapes[] = {
    {4, 4096, 16, 16, 128}, /* llama-1B-like */
    {32, 1024, 12, 12, 64}, /* GPT-2 124M */
    {4, 4096, 32, 8, 64},   /* GQA 4:1 */
};

enum { WARMUP = 3, REPS = 20 };

/* n bf16 values uniform in [-1, 1) on the device */
static void *bench_random_bf16(size_t n)
{
    uint16_t *h = malloc(n * 2);
    uint32_t x = 12345;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        float f = (float)(x >> 8) / 8388608.0f - 1.0f;
        uint32_t u;
        memcpy(&u, &f, 4);
        h[i] = (uint16_t)(u >> 16);
    }
    void *d;
    RT_CUDART_CHECK(cudaMalloc(&d, n * 2));
    RT_CUDART_CHECK(cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

/* The forward's and the backward's median ms through one implementation (MCC_ATTENTION). */
typedef struct {
    float fwd, bwd;
} bench_times;

static bench_times bench_impl(rt_cuda_ctx *cx, const char *impl, const rt_kernel_call *fc, const rt_kernel_call *gc)
{
    knob_setenv(KNOB_ATTENTION, impl);
    return (bench_times){bench_median_ms(cx, cuda_ATTENTION, fc, WARMUP, REPS),
                         bench_median_ms(cx, cuda_ATTENTION_GRAD, gc, WARMUP, REPS)};
}

static void bench_print(const char *impl, const bench_shape *s, bench_times t, const char *note)
{
    double flops = 4.0 * s->B * s->H * (double)s->T * s->T * s->D / 2;
    printf("B=%-3d T=%-5d H=%-3d Hk=%-3d D=%-4d %-5s fwd %8.3f ms %7.1f TFLOP/s   bwd %8.3f ms %7.1f TFLOP/s%s\n",
           s->B, s->T, s->H, s->Hk, s->D, impl, t.fwd, flops / t.fwd * 1e-9, t.bwd, 2.5 * flops / t.bwd * 1e-9, note);
}

#ifdef MCC_HAVE_CUDNN
static double bench_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* cuDNN's times on the shape, after building its plans (timed); when it has no engine, says why. */
static void bench_cudnn(rt_cuda_ctx *cx, const bench_shape *s, const rt_kernel_call *fc, const rt_kernel_call *gc)
{
    const char *why = NULL;
    cudnn_attn_shape shape = {s->B, s->T, s->H, s->Hk, s->D, s->D, (float)(1.0 / sqrt((double)s->D))};
    double t0 = bench_now_ms();
    bool ok = cudnn_attn_get(&shape, &why, NULL) != NULL;
    double build_ms = bench_now_ms() - t0;
    if (!ok) {
        printf("B=%-3d T=%-5d H=%-3d Hk=%-3d D=%-4d cudnn no plan (after %.0f ms): %s\n", s->B, s->T, s->H, s->Hk,
               s->D, build_ms, why);
        return;
    }
    char note[64];
    snprintf(note, sizeof note, "   (plans built in %.0f ms)", build_ms);
    bench_print("cudnn", s, bench_impl(cx, "cudnn", fc, gc), note);
}
#endif

static void bench_one(rt_cuda_ctx *cx, const bench_shape *s, bool with_cudnn)
{
    size_t nq = (size_t)s->B * s->T * s->H * s->D, nk = (size_t)s->B * s->T * s->Hk * s->D;
    int64_t qd[4] = {s->B, s->T, s->H, s->D}, kd[4] = {s->B, s->T, s->Hk, s->D}, ld[3] = {s->B, s->H, s->T};
    ir_type qt = ir_tensor(IR_BF16, 4, qd), kt = ir_tensor(IR_BF16, 4, kd), lt = ir_tensor(IR_F32, 3, ld);
    void *q = bench_random_bf16(nq), *k = bench_random_bf16(nk), *v = bench_random_bf16(nk), *dy = bench_random_bf16(nq);
    void *y, *lse, *dq, *dk, *dv;
    RT_CUDART_CHECK(cudaMalloc(&y, nq * 2));
    RT_CUDART_CHECK(cudaMalloc(&lse, (size_t)s->B * s->H * s->T * 4));
    RT_CUDART_CHECK(cudaMalloc(&dq, nq * 2));
    RT_CUDART_CHECK(cudaMalloc(&dk, nk * 2));
    RT_CUDART_CHECK(cudaMalloc(&dv, nk * 2));
    RT_CUDART_CHECK(cudaDeviceSynchronize());

    ir_instr fin = {.op = IR_OP_ATTENTION, .nargs = 3, .nres = 2};
    ir_instr gin = {.op = IR_OP_ATTENTION_GRAD, .nargs = 6, .nres = 3};
    void *fa[] = {q, k, v}, *fr[] = {y, lse}, *ga[] = {dy, q, k, v, y, lse}, *gr[] = {dq, dk, dv};
    const ir_type *fat[] = {&qt, &kt, &kt}, *frt[] = {&qt, &lt};
    const ir_type *gat[] = {&qt, &qt, &kt, &kt, &qt, &lt}, *grt[] = {&qt, &kt, &kt};
    rt_kernel_call fc = {&fin, 3, 2, fa, fat, fr, frt}, gc = {&gin, 6, 3, ga, gat, gr, grt};

    bench_print("mcc", s, bench_impl(cx, "mcc", &fc, &gc), "");
#ifdef MCC_HAVE_CUDNN
    if (with_cudnn)
        bench_cudnn(cx, s, &fc, &gc);
#endif
    void *bufs[] = {q, k, v, dy, y, lse, dq, dk, dv};
    for (int i = 0; i < 9; i++)
        RT_CUDART_CHECK(cudaFree(bufs[i]));
}

/* Times one cubin, compiled with `define` (NULL: the default tiles), on the shapes of head dim
 * D (0: every shape). */
static bool compile_only;

static int bench_cubin(const char *define, int D)
{
    char err[8192];
    void *image;
    size_t size;
    const char *defs[1] = {define};
    if (!cg_cuda_compile_kernels_with(defs, define ? 1 : 0, &image, &size, err, sizeof err)) {
        fprintf(stderr, "attention_bench: %s: %s\n", define ? define : "default tiles", err);
        return 1;
    }
    if (compile_only) {
        free(image);
        return 0;
    }
    RT_CUDART_CHECK(cudaSetDevice(0));
    rt_cuda_ctx *cx = rt_cuda_ctx_create(image, err, sizeof err);
    if (!cx) {
        fprintf(stderr, "attention_bench: %s\n", err);
        return 1;
    }
    if (define)
        printf("%s\n", define);
    for (size_t i = 0; i < sizeof bench_shapes / sizeof bench_shapes[0]; i++)
        if (!D || bench_shapes[i].D == D)
            bench_one(cx, &bench_shapes[i], !define); /* cuDNN's times do not depend on the cubin */
    fflush(stdout);
    rt_cuda_ctx_free(cx);
    free(image);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 1)
        return bench_cubin(NULL, 0);
    int failed = 0, first = 1;
    if (!strcmp(argv[1], "--compile-only"))
        compile_only = true, first = 2;
    for (int a = first; a < argc; a++) {
        int D, t[6];
        if (sscanf(argv[a], "%d=%d,%d,%d,%d,%d,%d", &D, &t[0], &t[1], &t[2], &t[3], &t[4], &t[5]) != 7) {
            fprintf(stderr, "attention_bench: expected D=fbm,fbn,fw,bbm,bbn,bw, got `%s`\n", argv[a]);
            return 2;
        }
        char define[128];
        snprintf(define, sizeof define, "-DMCC_ATTN_TILES_D%d=%d,%d,%d,%d,%d,%d", D, t[0], t[1], t[2], t[3], t[4], t[5]);
        failed |= bench_cubin(define, D);
    }
    return failed;
}
