/* kernels_bench.c — times the memory-bound CUDA launchers (runtime/cuda/launchers.c) at the shapes
 * of a gpt2-124M (B=32 T=1024 d=768) and a llama-1B (B=4 T=4096 d=2048) training step: median of
 * 20 after warm-up, CUDA events on the launchers' stream; prints ms and the GB/s of the bytes
 * each op must move at least (every operand read once, every result and in-place operand
 * written once). */
#include "codegen/cuda/cuda_codegen.h"
#include "runtime/cuda/cuda_ctx.h"
#include "tests/gpu/gpu_util.h"

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* dt: 'b' bf16, 'f' f32, 'p' f32 positive (second moments), 'i' i32 ids below value,
 * 's' f32 scalar equal to value. */
typedef struct {
    char dt;
    int ndim;
    int64_t dims[4];
    double value;
    bool inplace; /* written by the op: counted as read and written */
} bench_tensor;

typedef struct {
    const char *model, *op, *shape;
    double attr[4];
    int nargs, nres;
    bench_tensor args[7], res[3];
} bench_case;

#define BF(nd, ...) {.dt = 'b', .ndim = nd, .dims = {__VA_ARGS__}}
#define F32(nd, ...) {.dt = 'f', .ndim = nd, .dims = {__VA_ARGS__}}
#define F32_INPLACE(k, n) {.dt = k, .ndim = 1, .dims = {n}, .inplace = true}
#define BF_INPLACE(n) {.dt = 'b', .ndim = 1, .dims = {n}, .inplace = true}
#define IDS(limit, nd, ...) {.dt = 'i', .ndim = nd, .dims = {__VA_ARGS__}, .value = limit}
#define SCALAR(v) {.dt = 's', .value = v}

enum { GPT_R = 32 * 1024, LLAMA_R = 4 * 4096 };
#define GPT_PARAMS 124000000LL

static const bench_case bench_cases[] = {
    {"gpt2", "layernorm", "[32768,768]", {1e-5}, 3, 1, {BF(2, GPT_R, 768), BF(1, 768), BF(1, 768)}, {BF(2, GPT_R, 768)}},
    {"gpt2", "layernorm_grad", "[32768,768]", {1e-5}, 3, 3, {BF(2, GPT_R, 768), BF(2, GPT_R, 768), BF(1, 768)},
     {BF(2, GPT_R, 768), BF(1, 768), BF(1, 768)}},
    {"gpt2", "bias_add", "[32768,3072]+[3072]", {0}, 2, 1, {BF(2, GPT_R, 3072), BF(1, 3072)}, {BF(2, GPT_R, 3072)}},
    {"gpt2", "add", "[32768,768]", {0}, 2, 1, {BF(2, GPT_R, 768), BF(2, GPT_R, 768)}, {BF(2, GPT_R, 768)}},
    {"gpt2", "gelu", "[32768,3072]", {0}, 1, 1, {BF(2, GPT_R, 3072)}, {BF(2, GPT_R, 3072)}},
    {"gpt2", "gelu_grad", "[32768,3072]", {0}, 2, 1, {BF(2, GPT_R, 3072), BF(2, GPT_R, 3072)}, {BF(2, GPT_R, 3072)}},
    {"gpt2", "sum_rows", "[32768,3072]", {0}, 1, 1, {BF(2, GPT_R, 3072)}, {BF(1, 3072)}},
    {"gpt2", "cross_entropy", "[32768,50304]", {0}, 2, 1, {BF(2, GPT_R, 50304), IDS(50257, 1, GPT_R)}, {F32(0, 0)}},
    {"gpt2", "cross_entropy_grad", "[32768,50304]", {0}, 3, 1, {SCALAR(1), BF(2, GPT_R, 50304), IDS(50257, 1, GPT_R)},
     {BF(2, GPT_R, 50304)}},
    {"gpt2", "embedding_grad", "dy[32768,768] V=50304", {50304}, 2, 1, {BF(2, GPT_R, 768), IDS(50257, 1, GPT_R)},
     {BF(2, 50304, 768)}},
    {"gpt2", "adamw", "124M", {0.9, 0.95, 1e-8, 0.1}, 7, 0,
     .args = {F32_INPLACE('f', GPT_PARAMS), F32(1, GPT_PARAMS), F32_INPLACE('f', GPT_PARAMS),
              F32_INPLACE('p', GPT_PARAMS), SCALAR(1e-3), SCALAR(3), SCALAR(0.7)}},
    {"gpt2", "copy", "bf16[124M] := f32", {0}, 2, 0, .args = {BF_INPLACE(GPT_PARAMS), F32(1, GPT_PARAMS)}},
    {"gpt2", "accumulate", "f32[124M] += bf16", {0}, 2, 0, .args = {F32_INPLACE('f', GPT_PARAMS), BF(1, GPT_PARAMS)}},
    {"llama", "rope", "[4,4096,16,128]", {500000, 0}, 1, 1, {BF(4, 4, 4096, 16, 128)}, {BF(4, 4, 4096, 16, 128)}},
    {"llama", "rmsnorm", "[16384,2048]", {1e-6}, 2, 1, {BF(2, LLAMA_R, 2048), BF(1, 2048)}, {BF(2, LLAMA_R, 2048)}},
    {"llama", "rmsnorm_grad", "[16384,2048]", {1e-6}, 3, 2, {BF(2, LLAMA_R, 2048), BF(2, LLAMA_R, 2048), BF(1, 2048)},
     {BF(2, LLAMA_R, 2048), BF(1, 2048)}},
    {"llama", "mul", "[16384,8192]", {0}, 2, 1, {BF(2, LLAMA_R, 8192), BF(2, LLAMA_R, 8192)}, {BF(2, LLAMA_R, 8192)}},
    {"llama", "silu", "[16384,8192]", {0}, 1, 1, {BF(2, LLAMA_R, 8192)}, {BF(2, LLAMA_R, 8192)}},
    {"llama", "silu_grad", "[16384,8192]", {0}, 2, 1, {BF(2, LLAMA_R, 8192), BF(2, LLAMA_R, 8192)}, {BF(2, LLAMA_R, 8192)}},
    {"llama", "scale", "[16384,8192]", {0.5}, 1, 1, {BF(2, LLAMA_R, 8192)}, {BF(2, LLAMA_R, 8192)}},
    {"llama", "fill", "[16384,8192]", {0.5}, 0, 1, .res = {BF(2, LLAMA_R, 8192)}},
    {"llama", "adamw", "1.2B", {0.9, 0.95, 1e-8, 0.1}, 7, 0,
     .args = {F32_INPLACE('f', 1200000000LL), F32(1, 1200000000LL), F32_INPLACE('f', 1200000000LL),
              F32_INPLACE('p', 1200000000LL), SCALAR(1e-3), SCALAR(3), SCALAR(0.7)}},
    {"llama", "sum_squares", "3 x [2048,8192] f32", {0}, 3, 1,
     {F32(2, 2048, 8192), F32(2, 2048, 8192), F32(2, 2048, 8192)}, {F32(0, 0)}},
};

enum { WARMUP = 3, REPS = 20, PATTERN = 1 << 22 };

static ir_dtype bench_dtype(char dt) { return dt == 'b' ? IR_BF16 : dt == 'i' ? IR_I32 : IR_F32; }

/* A device tensor of the spec, filled by tiling one random host pattern (fast for GB tensors). */
static void *bench_alloc(const bench_tensor *s, ir_type *t)
{
    *t = ir_tensor(bench_dtype(s->dt), s->ndim, s->dims);
    size_t bytes = ir_bytes(t), esize = t->dtype == IR_BF16 ? 2 : 4;
    static uint32_t pattern[PATTERN];
    uint32_t x = 12345;
    for (int i = 0; i < PATTERN; i++) {
        x = x * 1664525u + 1013904223u;
        float f = s->dt == 's' ? (float)s->value : (float)(x >> 8) / 8388608.0f - 1.0f; /* [-1, 1) */
        if (s->dt == 'p')
            f = f < 0 ? -f : f;
        uint32_t u;
        memcpy(&u, &f, 4);
        pattern[i] = s->dt == 'i' ? (x >> 8) % (uint32_t)s->value : u;
        if (esize == 2) /* two bf16 per word */
            pattern[i] = (u >> 16) | (u & 0xffff0000u);
    }
    void *d;
    RT_CUDART_CHECK(cudaMalloc(&d, bytes ? bytes : 4));
    for (size_t off = 0; off < bytes; off += sizeof pattern)
        RT_CUDART_CHECK(cudaMemcpy((char *)d + off, pattern, bytes - off < sizeof pattern ? bytes - off : sizeof pattern,
                                   cudaMemcpyHostToDevice));
    return d;
}



static void bench_one(rt_cuda_ctx *cx, const bench_case *bc)
{
    int op = ir_op_by_name(bc->op);
    if (op < 0) {
        fprintf(stderr, "kernels_bench: %s is not in ir/ops.def\n", bc->op);
        exit(1);
    }
    ir_instr in = {.op = (ir_op)op, .nargs = bc->nargs, .nres = bc->nres};
    memcpy(in.attr, bc->attr, sizeof bc->attr);
    void *ptr[10];
    ir_type types[10];
    const ir_type *tp[10];
    double bytes = 0;
    for (int i = 0; i < bc->nargs + bc->nres; i++) {
        const bench_tensor *s = i < bc->nargs ? &bc->args[i] : &bc->res[i - bc->nargs];
        ptr[i] = bench_alloc(s, &types[i]);
        tp[i] = &types[i];
        bytes += (double)ir_bytes(&types[i]) * (s->inplace ? 2 : 1);
    }
    RT_CUDART_CHECK(cudaDeviceSynchronize());
    rt_kernel_call c = {&in, bc->nargs, bc->nres, ptr, tp, ptr + bc->nargs, tp + bc->nargs};
    float ms = bench_median_ms(cx, rt_cuda_launchers[op], &c, WARMUP, REPS);
    printf("%-6s %-20s %-24s %9.3f ms %8.1f GB/s\n", bc->model, bc->op, bc->shape, ms, bytes / ms * 1e-6);
    fflush(stdout);
    for (int i = 0; i < bc->nargs + bc->nres; i++)
        RT_CUDART_CHECK(cudaFree(ptr[i]));
}

int main(void)
{
    char err[8192];
    void *image;
    size_t size;
    if (!cg_cuda_compile_kernels(&image, &size, err, sizeof err)) {
        fprintf(stderr, "kernels_bench: %s\n", err);
        return 1;
    }
    RT_CUDART_CHECK(cudaSetDevice(0));
    rt_cuda_ctx *cx = rt_cuda_ctx_create(image, err, sizeof err);
    if (!cx) {
        fprintf(stderr, "kernels_bench: %s\n", err);
        return 1;
    }
    for (size_t i = 0; i < sizeof bench_cases / sizeof bench_cases[0]; i++)
        bench_one(cx, &bench_cases[i]);
    rt_cuda_ctx_free(cx);
    free(image);
    return 0;
}
