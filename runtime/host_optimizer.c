/* host_optimizer.c — runs a plan's host_optimizer function (--optimizer-cpu-offload, built by
 * passes/optimizer.c) on the host: a copy between a device global and a host global is a transfer
 * through the device table (down or up), AdamW runs on pthreads over static slices of the tensor,
 * and any other instruction is the CPU backend's kernel, on host memory.
 *
 * The AdamW is the plan's device's arithmetic: on the CPU device its own kernel (rt_cpu_adamw_range,
 * math in double), so that offloading changes no bit; on a GPU the fp32 formula of
 * kernels_templates/optimizer.cuh (mcc_adamw_step: the same operations in the same order),
 * vectorised by `omp simd` (-fopenmp-simd: no OpenMP runtime). NVRTC compiles that kernel with
 * --use_fast_math (flushed denormals, approximate division, FMA contraction), so host and GPU agree
 * to fp32 rounding there, not to the bit. pthreads rather than OpenMP: train_rank then carries no
 * OpenMP runtime whose idle workers spin beside the CPU ranks' MPI progress and the --async-save
 * writer, and a static split is all the work needs. Elementwise, so any split of the threads gives
 * the same bits.
 *
 * With config overlap_cpu_optimizer_d2h_h2d, where the device has asynchronous copies (copy_async;
 * the CPU device's are done at once),
 * every gradient copy down is queued first, on the device's copy stream in program order, and each
 * parameter's update waits only for its own gradient; its copy up is queued at once, and the
 * function returns when every copy up is done: the copies of one parameter overlap the host step of
 * the others, bucket (parameter) by bucket. */
#include "runtime/host_optimizer.h"

#include "common/knobs.h"
#include "runtime/bf16.h"
#include "runtime/cpu_kernels.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Elements one thread takes at least: below that, threads cost more than they save. */
enum { MIN_SLICE = 4096, MAX_THREADS = 1024 };

/* Adam's moment i, f32 or bf16 (--use-precision-aware-optimizer), and its store. */
static inline float moment_ld(const void *x, bool bf16, int64_t i)
{
    return bf16 ? rt_bf16_to_f32(((const uint16_t *)x)[i]) : ((const float *)x)[i];
}

static inline void moment_st(void *x, bool bf16, int64_t i, float value)
{
    if (bf16)
        ((uint16_t *)x)[i] = rt_f32_to_bf16(value);
    else
        ((float *)x)[i] = value;
}

/* The fp32 update of optimizer.cuh's mcc_adamw_step over [begin, end): the same operations in the
 * same order, each rounded to fp32 (the file is built with -ffp-contract=off: IEEE operations, where
 * the GPU's fast math approximates the division). */
static void adamw_f32_range(const rt_kernel_call *c, int64_t begin, int64_t end)
{
    float *restrict p = c->args[0];
    void *restrict m = c->args[2], *restrict v = c->args[3];
    bool m16 = c->arg_types[2]->dtype == IR_BF16, v16 = c->arg_types[3]->dtype == IR_BF16;
    const float *restrict g = c->args[1];
    double step = ((const float *)c->args[5])[0];
    float b1 = (float)c->in->attr[0], b2 = (float)c->in->attr[1], eps = (float)c->in->attr[2],
          wd = (float)c->in->attr[3], lr = ((const float *)c->args[4])[0], coef = ((const float *)c->args[6])[0];
    float bc1 = (float)(1.0 - pow(c->in->attr[0], step)), bc2 = (float)(1.0 - pow(c->in->attr[1], step));
#pragma omp simd
    for (int64_t i = begin; i < end; i++) {
        float gi = g[i] * coef;
        float mi = b1 * moment_ld(m, m16, i) + (1.0f - b1) * gi;
        float vi = b2 * moment_ld(v, v16, i) + (1.0f - b2) * gi * gi;
        p[i] = p[i] - lr * (mi / bc1 / (sqrtf(vi / bc2) + eps) + wd * p[i]);
        moment_st(m, m16, i, mi);
        moment_st(v, v16, i, vi);
    }
}

typedef struct {
    const rt_kernel_call *c;
    int64_t begin, end;
    bool f32;
} adamw_slice;

static void *adamw_slice_run(void *arg)
{
    const adamw_slice *s = arg;
    (s->f32 ? adamw_f32_range : rt_cpu_adamw_range)(s->c, s->begin, s->end);
    return NULL;
}

static int host_threads(void)
{
    long long want = knob_int(KNOB_HOST_OPTIMIZER_THREADS);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    long long n = want ? want : online > 0 ? online : 1;
    return (int)(n < MAX_THREADS ? n : MAX_THREADS);
}

/* AdamW of call c over its tensor, on up to host_threads() threads of MIN_SLICE elements or more. */
static void host_adamw(const rt_kernel_call *c, bool f32)
{
    if (((const float *)c->args[5])[0] < 1) { /* the CPU kernel's refusal, on both paths */
        rt_cpu_adamw_range(c, 0, 0);
        return;
    }
    int64_t n = ir_numel(c->arg_types[0]);
    int64_t parts = n / MIN_SLICE, threads = host_threads();
    parts = parts < 1 ? 1 : parts > threads ? threads : parts;
    adamw_slice slice[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    for (int64_t t = 0; t < parts; t++)
        slice[t] = (adamw_slice){c, n * t / parts, n * (t + 1) / parts, f32};
    int64_t started = 1;
    for (; started < parts; started++)
        if (pthread_create(&tid[started], NULL, adamw_slice_run, &slice[started]) != 0)
            break; /* no thread: the slices left run here */
    adamw_slice_run(&slice[0]);
    for (int64_t t = started; t < parts; t++)
        adamw_slice_run(&slice[t]);
    for (int64_t t = 1; t < started; t++)
        pthread_join(tid[t], NULL);
}

typedef enum { MOVE_NONE, MOVE_DOWN, MOVE_UP } host_move;

/* Whether instruction in of f moves bytes between the memories: a copy of a device global into a
 * host one (down) or of a host value into a device global (up). */
static host_move move_of(const rt_program *p, const ir_func *f, const ir_instr *in)
{
    if (in->op != IR_OP_COPY)
        return MOVE_NONE;
    int dst = ir_global_index_of(p->m, f, in->args[0]), src = ir_global_index_of(p->m, f, in->args[1]);
    bool dst_host = dst < 0 || p->m->globals[dst].host, src_host = src < 0 || p->m->globals[src].host;
    if (dst_host == src_host)
        return MOVE_NONE;
    if (f->vals[in->args[0]].type.dtype != f->vals[in->args[1]].type.dtype) {
        fprintf(stderr, "train_rank: internal error: %s copies between host and device memory with a dtype change "
                        "(instruction %d; passes/optimizer.c converts on one side)\n", f->name, (int)(in - f->instrs));
        exit(1);
    }
    return dst_host ? MOVE_DOWN : MOVE_UP;
}

void rt_host_run(rt_program *p, int func)
{
    const rt_func_exec *x = &p->funcs[func];
    const ir_func *f = x->f;
    const rt_device *dev = p->dev;
    bool f32 = dev != &rt_cpu_device;
    bool overlap = ir_cfg_bool(p->m, IR_CFG_OVERLAP_CPU_OPTIMIZER_D2H_H2D) && dev->copy_async;
    void **pending = overlap ? calloc((size_t)f->ninstrs + 1, sizeof(void *)) : NULL;
    for (int i = 0; overlap && i < f->ninstrs; i++) /* every gradient on its way down, in order */
        if (move_of(p, f, &f->instrs[i]) == MOVE_DOWN)
            pending[i] = dev->copy_async(p, x->calls[i].args[0], x->calls[i].args[1], ir_bytes(x->calls[i].arg_types[0]), true);
    for (int i = 0; i < f->ninstrs; i++) {
        const rt_kernel_call *c = &x->calls[i];
        size_t bytes = c->nargs ? ir_bytes(c->arg_types[0]) : 0;
        switch (move_of(p, f, &f->instrs[i])) {
        case MOVE_DOWN:
            if (overlap)
                dev->copy_wait(p, pending[i]), pending[i] = NULL;
            else
                dev->download(p, c->args[0], c->args[1], bytes);
            break;
        case MOVE_UP:
            if (overlap)
                pending[i] = dev->copy_async(p, c->args[0], c->args[1], bytes, false);
            else
                dev->upload(p, c->args[0], c->args[1], bytes);
            break;
        case MOVE_NONE:
            if (f->instrs[i].op == IR_OP_ADAMW)
                host_adamw(c, f32);
            else
                rt_cpu_kernels[f->instrs[i].op](c);
            break;
        }
    }
    for (int i = 0; overlap && i < f->ninstrs; i++) /* every parameter up before the device reads it */
        if (pending[i])
            dev->copy_wait(p, pending[i]);
    free(pending);
}
