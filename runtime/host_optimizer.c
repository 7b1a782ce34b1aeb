/* host_optimizer.c — runs a plan's host_optimizer function (--optimizer-cpu-offload, built by
 * passes/optimizer.c) on the host: a copy between a device global and a host global is a transfer
 * through the device table (down or up; a copy up that changes the dtype, the master into a bf16
 * working copy, converted by the host chunk by chunk into a staging buffer first, so that only the
 * working dtype's bytes cross), AdamW runs on a pool of pthreads started at load (MCC_HOST_OPTIMIZER_THREADS) over
 * static slices of the tensor, and any other instruction is the CPU backend's kernel, on host memory.
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

/* What a pool thread runs: range(c, begin, end) over its slice of a call's elements. */
typedef void (*host_range)(const rt_kernel_call *c, int64_t begin, int64_t end);

typedef struct {
    host_range range;
    const rt_kernel_call *c;
    int64_t begin, end;
} host_slice;

static void slice_run(const host_slice *s) { s->range(s->c, s->begin, s->end); }

/* A converting copy up's host half (c: dst the staging buffer, as bf16; src the f32 master), over
 * [begin, end): rounded to nearest even as the GPU's __float2bfloat16_rn (runtime/bf16.h). */
static void to_bf16_range(const rt_kernel_call *c, int64_t begin, int64_t end)
{
    uint16_t *restrict dst = c->args[0];
    const float *restrict src = c->args[1];
    for (int64_t i = begin; i < end; i++)
        dst[i] = rt_f32_to_bf16(src[i]);
}

/* The host's threads (AdamW, conversions), started once when the plan is loaded (rt_host_pool_open) and joined
 * when it is freed: a job is one call's slices, slice 0 the caller's and slice t worker t's. A
 * job's generation wakes every worker; the caller waits until each has seen it (pending 0), so no
 * worker misses one and no slice outlives its call. */
typedef struct rt_host_pool {
    pthread_mutex_t lock;
    pthread_cond_t go, done;
    int nworkers;              /* threads started, besides the caller */
    pthread_t *tid;
    struct pool_worker *workers;
    uint64_t generation;       /* of the job posted last */
    int pending;               /* workers yet to finish it */
    int parts;                 /* its slices */
    bool stop;
    host_slice slice[MAX_THREADS];
} rt_host_pool;

typedef struct pool_worker {
    rt_host_pool *pool;
    int index;                 /* its slice: 1 .. nworkers */
} pool_worker;

static void *pool_worker_run(void *arg)
{
    const pool_worker *w = arg;
    rt_host_pool *pool = w->pool;
    uint64_t seen = 0;
    pthread_mutex_lock(&pool->lock);
    for (;;) {
        while (!pool->stop && pool->generation == seen)
            pthread_cond_wait(&pool->go, &pool->lock);
        if (pool->stop)
            break;
        seen = pool->generation;
        bool mine = w->index < pool->parts;
        pthread_mutex_unlock(&pool->lock);
        if (mine)
            slice_run(&pool->slice[w->index]);
        pthread_mutex_lock(&pool->lock);
        if (--pool->pending == 0)
            pthread_cond_signal(&pool->done);
    }
    pthread_mutex_unlock(&pool->lock);
    return NULL;
}

static int host_threads(void)
{
    long long want = knob_int(KNOB_HOST_OPTIMIZER_THREADS);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    long long n = want ? want : online > 0 ? online : 1;
    return (int)(n < MAX_THREADS ? n : MAX_THREADS);
}

void rt_host_pool_open(rt_program *p)
{
    int want = host_threads() - 1;
    rt_host_pool *pool = calloc(1, sizeof *pool);
    pthread_t *tid = calloc((size_t)want + 1, sizeof(pthread_t));
    pool_worker *workers = calloc((size_t)want + 1, sizeof(pool_worker));
    if (!pool || !tid || !workers) {
        fprintf(stderr, "train_rank: out of host memory for the host optimizer's %d threads\n", want + 1);
        exit(1);
    }
    pool->tid = tid;
    pool->workers = workers;
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->go, NULL);
    pthread_cond_init(&pool->done, NULL);
    for (int t = 0; t < want; t++) {
        pool->workers[t] = (pool_worker){pool, t + 1};
        if (pthread_create(&pool->tid[t], NULL, pool_worker_run, &pool->workers[t]) != 0)
            break; /* fewer threads: the slices are fewer */
        pool->nworkers++;
    }
    p->host_pool = pool;
}

void rt_host_pool_close(rt_program *p)
{
    rt_host_pool *pool = p->host_pool;
    if (!pool)
        return;
    pthread_mutex_lock(&pool->lock);
    pool->stop = true;
    pthread_cond_broadcast(&pool->go);
    pthread_mutex_unlock(&pool->lock);
    for (int t = 0; t < pool->nworkers; t++)
        pthread_join(pool->tid[t], NULL);
    pthread_mutex_destroy(&pool->lock);
    pthread_cond_destroy(&pool->go);
    pthread_cond_destroy(&pool->done);
    free(pool->tid);
    free(pool->workers);
    free(pool);
    p->host_pool = NULL;
}

/* range over call c's n elements, in slices of MIN_SLICE elements or more, one a pool thread. */
static void pool_run(rt_host_pool *pool, host_range range, const rt_kernel_call *c, int64_t n)
{
    int64_t parts = n / MIN_SLICE, threads = pool->nworkers + 1;
    parts = parts < 1 ? 1 : parts > threads ? threads : parts;
    if (parts == 1) {
        range(c, 0, n);
        return;
    }
    pthread_mutex_lock(&pool->lock);
    for (int64_t t = 0; t < parts; t++)
        pool->slice[t] = (host_slice){range, c, n * t / parts, n * (t + 1) / parts};
    pool->parts = (int)parts;
    pool->pending = pool->nworkers;
    pool->generation++;
    pthread_cond_broadcast(&pool->go);
    pthread_mutex_unlock(&pool->lock);
    slice_run(&pool->slice[0]);
    pthread_mutex_lock(&pool->lock);
    while (pool->pending)
        pthread_cond_wait(&pool->done, &pool->lock);
    pthread_mutex_unlock(&pool->lock);
}

/* AdamW of call c over its tensor, in the device's arithmetic (f32: the GPU's formula). */
static void host_adamw(rt_host_pool *pool, const rt_kernel_call *c, bool f32)
{
    if (((const float *)c->args[5])[0] < 1) { /* the CPU kernel's refusal, on both paths */
        rt_cpu_adamw_range(c, 0, 0);
        return;
    }
    pool_run(pool, f32 ? adamw_f32_range : rt_cpu_adamw_range, c, ir_numel(c->arg_types[0]));
}

typedef enum { MOVE_NONE, MOVE_DOWN, MOVE_UP } host_move;

/* Whether instruction in of f moves bytes between the memories: a copy of a device global into a
 * host one (down) or of a host value into a device global (up; it may change the dtype: the host
 * converts, ir_host_staging_bytes). */
static host_move move_of(const rt_program *p, const ir_func *f, const ir_instr *in)
{
    if (in->op != IR_OP_COPY)
        return MOVE_NONE;
    int dst = ir_global_index_of(p->m, f, in->args[0]), src = ir_global_index_of(p->m, f, in->args[1]);
    bool dst_host = dst < 0 || p->m->globals[dst].host, src_host = src < 0 || p->m->globals[src].host;
    if (dst_host == src_host)
        return MOVE_NONE;
    ir_dtype to = f->vals[in->args[0]].type.dtype, from = f->vals[in->args[1]].type.dtype;
    if (to != from && (dst_host || from != IR_F32 || to != IR_BF16)) {
        fprintf(stderr, "train_rank: internal error: %s copies between host and device memory converting %s to %s "
                        "(instruction %d; the host converts f32 to bf16 on the way up only: passes/optimizer.c)\n",
                f->name, ir_dtype_name(from), ir_dtype_name(to), (int)(in - f->instrs));
        exit(1);
    }
    return dst_host ? MOVE_DOWN : MOVE_UP;
}

/* Copy up c that changes the dtype (f32 to bf16: the optimizer pass allows no other): the host
 * converts a chunk at a time into the halves of the staging buffer in turn (ir_host_staging_bytes),
 * and each chunk goes up from there; under overlap its copy is queued (inflight[half]) and the
 * next chunk's conversion runs beside it, a half being reused once its copy is done. */
static void convert_up(rt_program *p, const rt_kernel_call *c, bool overlap, void *inflight[2], int *turn)
{
    const rt_device *dev = p->dev;
    int64_t n = ir_numel(c->arg_types[1]), chunk = (int64_t)(p->host_staging_bytes / 2 / sizeof(uint16_t));
    for (int64_t at = 0; at < n; at += chunk) {
        int64_t k = n - at < chunk ? n - at : chunk;
        char *half = p->host_staging + (size_t)*turn * (p->host_staging_bytes / 2);
        if (inflight[*turn])
            dev->copy_wait(p, inflight[*turn]), inflight[*turn] = NULL;
        void *args[2] = {half, (float *)c->args[1] + at};
        rt_kernel_call convert = *c;
        convert.args = args;
        pool_run(p->host_pool, to_bf16_range, &convert, k);
        void *dst = (uint16_t *)c->args[0] + at;
        if (overlap)
            inflight[*turn] = dev->copy_async(p, dst, half, (size_t)k * sizeof(uint16_t), false);
        else
            dev->upload(p, dst, half, (size_t)k * sizeof(uint16_t));
        *turn ^= 1;
    }
}

void rt_host_run(rt_program *p, int func)
{
    const rt_func_exec *x = &p->funcs[func];
    const ir_func *f = x->f;
    const rt_device *dev = p->dev;
    bool f32 = dev != &rt_cpu_device;
    bool overlap = ir_cfg_bool(p->m, IR_CFG_OVERLAP_CPU_OPTIMIZER_D2H_H2D) && dev->copy_async;
    void **pending = overlap ? calloc((size_t)f->ninstrs + 1, sizeof(void *)) : NULL;
    void *inflight[2] = {NULL, NULL}; /* the staging halves' copies up */
    int turn = 0;
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
            if (c->arg_types[0]->dtype != c->arg_types[1]->dtype)
                convert_up(p, c, overlap, inflight, &turn);
            else if (overlap)
                pending[i] = dev->copy_async(p, c->args[0], c->args[1], bytes, false);
            else
                dev->upload(p, c->args[0], c->args[1], bytes);
            break;
        case MOVE_NONE:
            if (f->instrs[i].op == IR_OP_ADAMW)
                host_adamw(p->host_pool, c, f32);
            else
                rt_cpu_kernels[f->instrs[i].op](c);
            break;
        }
    }
    for (int i = 0; overlap && i < f->ninstrs; i++) /* every parameter up before the device reads it */
        if (pending[i])
            dev->copy_wait(p, pending[i]);
    for (int h = 0; h < 2; h++)
        if (inflight[h])
            dev->copy_wait(p, inflight[h]);
    free(pending);
}
