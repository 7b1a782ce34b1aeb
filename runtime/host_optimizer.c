/* host_optimizer.c — runs a plan's host_optimizer function (--optimizer-cpu-offload, built by
 * passes/optimizer.c) on the host. An AdamW whose gradient is a device global streams it: chunk by
 * chunk (ir_host_staging_of) the gradient goes down through the device table into a half of the
 * page-locked staging buffer, the chunk is updated, and the same chunk of the master goes up with
 * the copy up that follows the AdamW (converted by the host into the half where it changes the
 * dtype, the master into a bf16 working copy, so that only the working dtype's bytes cross: the
 * AdamW writes it block by block as it updates the master, as the GPU kernel its working copy);
 * the halves take the chunks in turn. No host copy of a whole gradient exists. AdamW runs on a pool
 * of pthreads started at load (MCC_HOST_OPTIMIZER_THREADS) over static slices of the chunk, any
 * other copy between the memories is a transfer, and any other instruction is the CPU backend's
 * kernel, on host memory. Each run adds its time to rt_program.host_times: the whole, waiting for
 * gradient chunks, AdamW (with the conversion it writes), the copies up (queueing, the last waits
 * and any conversion of their own).
 *
 * The AdamW is the plan's device's arithmetic: on the CPU device its own kernel (rt_cpu_adamw_range,
 * math in double), so that offloading changes no bit; on a GPU the fp32 formula of
 * kernels_templates/optimizer.cuh (mcc_adamw_step: the same operations in the same order),
 * vectorised by `omp simd` (-fopenmp-simd: no OpenMP runtime), one loop per pair of moment dtypes,
 * compiled for AVX-512, AVX2 and generic x86-64 (train_rank's own target: SSE2) and picked at load
 * (MCC_HOST_OPTIMIZER_ISA: the best the CPU has); without FMA contraction every set gives the same
 * bits. bench/host_adamw_bench.c times them. NVRTC compiles that kernel with
 * --use_fast_math (flushed denormals, approximate division, FMA contraction), so host and GPU agree
 * to fp32 rounding there, not to the bit. pthreads rather than OpenMP: train_rank then carries no
 * OpenMP runtime whose idle workers spin beside the CPU ranks' MPI progress and the --async-save
 * writer, and a static split is all the work needs. Elementwise, so any split of the threads or
 * into chunks gives the same bits.
 *
 * With config overlap_cpu_optimizer_d2h_h2d, where the device has asynchronous copies (copy_async;
 * the CPU device's are done at once), the copies are queued on the device's copy stream in program
 * order: the next chunk's gradient (the next parameter's first, after a parameter's last) goes down
 * while this one is updated, and each chunk's copy up is queued at once, a half being reused once
 * its copies are done; the function returns when every copy up is done. Without it each chunk's
 * copy down, update and copy up run one after another.
 *
 * Beside the backward (a plan with grad_ready marks: --clip-grad 0, passes/grad_ready.c), train_rank
 * starts the function on a thread of its own once the last micro-batch is queued (rt_host_start)
 * and joins it before param_sync (rt_host_join). Its updates come in the order the backward
 * finishes them; every copy of a parameter's waits for that parameter's mark alone (copy_async's
 * ready), so the copies are always queued: the compute stream is the main thread's. */
#include "runtime/host_optimizer.h"

#include "common/knobs.h"
#include "common/os.h"
#include "runtime/bf16.h"
#include "runtime/cpu_kernels.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
 * the GPU's fast math approximates the division). Inlined into a loop per instruction set and pair
 * of moment dtypes (HOST_LOOPS), so that each is vectorised with no branch on the dtypes. */
static inline __attribute__((always_inline)) void adamw_f32_loop(const rt_kernel_call *c, int64_t begin, int64_t end,
                                                                 bool m16, bool v16)
{
    float *restrict p = c->args[0];
    void *restrict m = c->args[2], *restrict v = c->args[3];
    const float *restrict g = c->args[1];
    double step = ((const float *)c->args[5])[0];
    const double *a = c->in->attr;
    float b1 = (float)a[IR_ATTR_ADAMW_BETA1], b2 = (float)a[IR_ATTR_ADAMW_BETA2], eps = (float)a[IR_ATTR_ADAMW_EPS],
          wd = (float)a[IR_ATTR_ADAMW_WEIGHT_DECAY], lr = ((const float *)c->args[4])[0], coef = ((const float *)c->args[6])[0];
    float bc1 = (float)(1.0 - pow(a[IR_ATTR_ADAMW_BETA1], step)), bc2 = (float)(1.0 - pow(a[IR_ATTR_ADAMW_BETA2], step));
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

/* A converting copy up's host half over [begin, end): AdamW call c's bf16 working copy (args[7], in
 * the staging buffer) from its f32 master (args[0]), rounded to nearest even as the GPU's
 * __float2bfloat16_rn (runtime/bf16.h). */
static inline __attribute__((always_inline)) void to_bf16_loop(const rt_kernel_call *c, int64_t begin, int64_t end)
{
    uint16_t *restrict dst = c->args[7];
    const float *restrict src = c->args[0];
#pragma omp simd
    for (int64_t i = begin; i < end; i++)
        dst[i] = rt_f32_to_bf16(src[i]);
}

/* The host's loops compiled for an instruction set (train_rank is built for generic x86-64, whose
 * SSE2 does 4 lanes): attributes `target` on x86-64 with GCC or clang, the best one the CPU has
 * picked when the plan loads (host_isa). Without contraction into FMAs, and with IEEE division and
 * square root in every set, each gives the same bits (tests/host_optimizer_test.c checks). */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HOST_ISAS_X86 1
#define HOST_TARGET_AVX2 __attribute__((target("avx2")))
#if defined(__clang__) /* 512-bit vectors where the tuning would prefer 256: clang's spelling and GCC's */
#define HOST_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"), min_vector_width(512)))
#else
#define HOST_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,prefer-vector-width=512")))
#endif
#else
#define HOST_ISAS_X86 0
#endif

#define HOST_LOOPS(isa, target)                                                                                     \
    target static void adamw_f32_##isa(const rt_kernel_call *c, int64_t begin, int64_t end)                        \
    {                                                                                                               \
        bool m16 = c->arg_types[2]->dtype == IR_BF16, v16 = c->arg_types[3]->dtype == IR_BF16;                     \
        if (m16 && v16)                                                                                             \
            adamw_f32_loop(c, begin, end, true, true);                                                              \
        else if (m16)                                                                                               \
            adamw_f32_loop(c, begin, end, true, false);                                                             \
        else if (v16)                                                                                               \
            adamw_f32_loop(c, begin, end, false, true);                                                             \
        else                                                                                                        \
            adamw_f32_loop(c, begin, end, false, false);                                                            \
    }                                                                                                               \
    target static void to_bf16_##isa(const rt_kernel_call *c, int64_t begin, int64_t end) { to_bf16_loop(c, begin, end); }

HOST_LOOPS(generic, )
#if HOST_ISAS_X86
HOST_LOOPS(avx2, HOST_TARGET_AVX2)
HOST_LOOPS(avx512, HOST_TARGET_AVX512)
#else
#define adamw_f32_avx2 adamw_f32_generic /* never picked: rt_host_isa_supported */
#define to_bf16_avx2 to_bf16_generic
#define adamw_f32_avx512 adamw_f32_generic
#define to_bf16_avx512 to_bf16_generic
#endif

/* What a pool thread runs: range(c, begin, end) over its slice of a call's elements. */
typedef void (*host_range)(const rt_kernel_call *c, int64_t begin, int64_t end);

/* Each instruction set's loops. ORDER: rt_host_isa. */
static const struct {
    host_range adamw_f32, to_bf16;
} host_loops[RT_HOST_NUM_ISAS] = {
    [RT_HOST_ISA_AVX512] = {adamw_f32_avx512, to_bf16_avx512},
    [RT_HOST_ISA_AVX2] = {adamw_f32_avx2, to_bf16_avx2},
    [RT_HOST_ISA_GENERIC] = {adamw_f32_generic, to_bf16_generic},
};

const char *const rt_host_isa_names[RT_HOST_NUM_ISAS] = {"avx512", "avx2", "generic"};

bool rt_host_isa_supported(rt_host_isa isa)
{
#if HOST_ISAS_X86
    __builtin_cpu_init();
    if (isa == RT_HOST_ISA_AVX512)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    if (isa == RT_HOST_ISA_AVX2)
        return __builtin_cpu_supports("avx2");
#endif
    return isa == RT_HOST_ISA_GENERIC;
}

/* MCC_HOST_OPTIMIZER_ISA's instruction set (auto: the best this CPU has); one it lacks stops the
 * run here rather than on an illegal instruction in the first step. */
static rt_host_isa host_isa(void)
{
    int choice = knob_choice(KNOB_HOST_OPTIMIZER_ISA); /* 0 auto, then rt_host_isa's order */
    for (int isa = 0; choice == 0 && isa < RT_HOST_NUM_ISAS; isa++)
        if (rt_host_isa_supported((rt_host_isa)isa))
            return (rt_host_isa)isa;
    rt_host_isa want = (rt_host_isa)(choice - 1);
    if (!rt_host_isa_supported(want)) {
        fprintf(stderr, "train_rank: MCC_HOST_OPTIMIZER_ISA=%s, but this CPU lacks %s: unset it (auto picks the best "
                        "this CPU has) or name another of avx512|avx2|generic\n",
                rt_host_isa_names[want], rt_host_isa_names[want]);
        exit(1);
    }
    return want;
}

/* Elements a slice runs `range` over before `then` (the conversion after AdamW): the updated master
 * is converted while it is in the core's cache (a block's master, gradient and moments: 256 KiB
 * with f32 moments), not read again from memory. */
enum { THEN_BLOCK = 16384 };

/* One pool thread's share of a job: range over [begin, end) of call c, and where `then` is given,
 * then over each block after range. */
typedef struct {
    host_range range, then;
    const rt_kernel_call *c;
    int64_t begin, end;
} host_slice;

static void slice_run(const host_slice *s)
{
    int64_t block = s->then ? THEN_BLOCK : s->end - s->begin;
    for (int64_t at = s->begin; at < s->end; at += block) {
        int64_t end = s->end - at < block ? s->end : at + block;
        s->range(s->c, at, end);
        if (s->then)
            s->then(s->c, at, end);
    }
}

/* The host's threads (AdamW, conversions), started once when the plan is loaded (rt_host_attach) and joined
 * when it is freed: a job is one call's slices, slice 0 the caller's and slice t worker t's. A
 * job's generation wakes every worker; the caller waits until each has seen it (pending 0), so no
 * worker misses one and no slice outlives its call. */
struct rt_host_pool {
    pthread_mutex_t lock;
    pthread_cond_t go, done;
    int nworkers;              /* threads started, besides the caller */
    rt_host_isa isa;           /* the instruction set of the loops it runs */
    pthread_t *tid;
    struct pool_worker *workers;
    uint64_t generation;       /* of the job posted last */
    int pending;               /* workers yet to finish it */
    int parts;                 /* its slices */
    bool stop;
    host_slice slice[MAX_THREADS];
};

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

/* MCC_HOST_OPTIMIZER_THREADS, or the CPUs this process may run on. */
static int host_threads(void)
{
    long long want = knob_int(KNOB_HOST_OPTIMIZER_THREADS);
    long long n = want ? want : os_cpus();
    return (int)(n < MAX_THREADS ? n : MAX_THREADS);
}

rt_host_pool *rt_host_pool_open(int threads, rt_host_isa isa)
{
    int want = threads - 1;
    rt_host_pool *pool = calloc(1, sizeof *pool);
    pthread_t *tid = calloc((size_t)want + 1, sizeof(pthread_t));
    pool_worker *workers = calloc((size_t)want + 1, sizeof(pool_worker));
    if (!pool || !tid || !workers) {
        fprintf(stderr, "train_rank: out of host memory for the host optimizer's %d threads\n", want + 1);
        exit(1);
    }
    pool->tid = tid;
    pool->workers = workers;
    pool->isa = isa;
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->go, NULL);
    pthread_cond_init(&pool->done, NULL);
    for (int t = 0; t < want; t++) {
        pool->workers[t] = (pool_worker){pool, t + 1};
        if (pthread_create(&pool->tid[t], NULL, pool_worker_run, &pool->workers[t]) != 0)
            break; /* fewer threads: the slices are fewer */
        pool->nworkers++;
    }
    return pool;
}

void rt_host_pool_close(rt_host_pool *pool)
{
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
}

/* range (then `then`, block by block, where given) over call c's n elements, in slices of
 * MIN_SLICE elements or more, one a pool thread. */
static void pool_run(rt_host_pool *pool, host_range range, host_range then, const rt_kernel_call *c, int64_t n)
{
    int64_t parts = n / MIN_SLICE, threads = pool->nworkers + 1;
    parts = parts < 1 ? 1 : parts > threads ? threads : parts;
    if (parts == 1) {
        slice_run(&(host_slice){range, then, c, 0, n});
        return;
    }
    pthread_mutex_lock(&pool->lock);
    for (int64_t t = 0; t < parts; t++)
        pool->slice[t] = (host_slice){range, then, c, n * t / parts, n * (t + 1) / parts};
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

void rt_host_adamw(rt_host_pool *pool, const rt_kernel_call *c, bool f32, int64_t n)
{
    if (((const float *)c->args[5])[0] < 1) { /* the CPU kernel's refusal, on both paths */
        rt_cpu_adamw_range(c, 0, 0);
        return;
    }
    bool copy = c->nargs == 8;
    if (copy && (c->arg_types[0]->dtype != IR_F32 || c->arg_types[7]->dtype != IR_BF16)) {
        fprintf(stderr, "train_rank: internal error: the host's AdamW writes a bf16 working copy from an f32 master, "
                        "not %s from %s (runtime/host_optimizer.c)\n",
                ir_dtype_name(c->arg_types[7]->dtype), ir_dtype_name(c->arg_types[0]->dtype));
        exit(1);
    }
    pool_run(pool, f32 ? host_loops[pool->isa].adamw_f32 : rt_cpu_adamw_range, copy ? host_loops[pool->isa].to_bf16 : NULL,
             c, n);
}

void rt_host_to_bf16(rt_host_pool *pool, uint16_t *dst, const float *src, int64_t n)
{
    void *args[8] = {[0] = (void *)src, [7] = dst};
    rt_kernel_call convert = {.nargs = 8, .args = args};
    pool_run(pool, host_loops[pool->isa].to_bf16, NULL, &convert, n);
}

typedef enum { MOVE_NONE, MOVE_DOWN, MOVE_UP } host_move;

/* Whether instruction in of f moves bytes between the memories: a copy of a device global into a
 * host one (down) or of a host value into a device global (up; it may change the dtype: the host
 * converts, ir_host_staging_of). */
static host_move move_of(const rt_program *p, const ir_func *f, const ir_instr *in)
{
    if (in->op != IR_OP_COPY)
        return MOVE_NONE;
    int dst = ir_global_of(f, in->args[0]), src = ir_global_of(f, in->args[1]);
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

/* One run of the host function: the staging halves' copies in flight (overlap: queued, waited
 * before a half is reused) and the half the next chunk takes. */
typedef struct {
    rt_program *p;
    bool overlap;
    void *down[2], *up[2];
    int turn;
} host_stream;

/* The ready mark the copies of AdamW `in` of f wait (its gradient's grad_ready slot), or -1: the
 * compute stream's queued work (a plan without marks). */
static int ready_slot(const rt_program *p, const ir_func *f, const ir_instr *in)
{
    return p->host_ready_slot ? p->host_ready_slot[ir_global_of(f, in->args[1])] : -1;
}

/* Half h of the staging buffer: a gradient chunk, then a converted chunk going up. */
static char *stage_grad(const rt_program *p, int h) { return p->host_staging + (size_t)h * (p->host_staging_bytes / 2); }
static char *stage_up(const rt_program *p, int h)
{
    return stage_grad(p, h) + (size_t)p->host_stage.chunk * (size_t)p->host_stage.grad_size;
}

static void wait_token(rt_program *p, void **token)
{
    if (*token)
        p->dev->copy_wait(p, *token), *token = NULL;
}

/* Whether copy up c changes the dtype (f32 to bf16: the optimizer pass allows no other): the host
 * converts it in the staging buffer, so that only the working dtype's bytes cross. */
static bool up_converts(const rt_kernel_call *c) { return c->arg_types[0]->dtype != c->arg_types[1]->dtype; }

/* Elements [at, at + k) of copy up c (a host value into a device global) through staging half h:
 * converted there first where it converts (unless `converted`: the AdamW before it wrote them
 * there); under overlap queued, the half's previous copy up waited for first. */
static void up_chunk(host_stream *s, const rt_kernel_call *c, int64_t at, int64_t k, int h, bool converted, int ready)
{
    rt_program *p = s->p;
    size_t to = ir_dtype_size(c->arg_types[0]->dtype);
    const void *src = (const char *)c->args[1] + (size_t)at * ir_dtype_size(c->arg_types[1]->dtype);
    wait_token(p, &s->up[h]);
    if (up_converts(c)) {
        if (!converted)
            rt_host_to_bf16(p->host_pool, (uint16_t *)stage_up(p, h), src, k);
        src = stage_up(p, h);
    }
    void *dst = (char *)c->args[0] + (size_t)at * to;
    if (s->overlap)
        s->up[h] = p->dev->copy_async(p, dst, src, (size_t)k * to, false, ready);
    else
        p->dev->upload(p, dst, src, (size_t)k * to);
}

/* Chunk [at, at + k) of AdamW c's gradient (a device global) down into staging half h, once its
 * ready mark `ready` is reached (-1: the compute stream's queued work). */
static void *down_chunk(host_stream *s, const rt_kernel_call *c, int64_t at, int64_t k, int h, int ready)
{
    size_t g = ir_dtype_size(c->arg_types[1]->dtype);
    const char *src = (const char *)c->args[1] + (size_t)at * g;
    if (s->overlap)
        return s->p->dev->copy_async(s->p, stage_grad(s->p, h), src, (size_t)k * g, true, ready);
    s->p->dev->download(s->p, stage_grad(s->p, h), src, (size_t)k * g);
    return NULL;
}

/* AdamW c, whose gradient is a device global, streamed chunk by chunk (host_stage.chunk elements)
 * through the staging halves in turn, with copy up `up` of the master it updates (NULL: none): each
 * chunk's gradient goes down, is updated, and the same chunk of the master goes up; where the copy
 * up converts, the AdamW writes the chunk's bf16 into the half itself (its working-copy operand),
 * block by block while the master is in cache, the half's previous copy up waited for first. Under overlap
 * the next chunk's copy down is queued before this one's update (at the last chunk, the first of
 * `next`, the streamed AdamW that follows, or NULL) and each copy up is queued, so the copies of
 * one chunk run beside the update of its neighbours; without, each runs in turn. */
static void stream_adamw(host_stream *s, const rt_kernel_call *c, const rt_kernel_call *up,
                         const rt_kernel_call *next, bool f32, int ready, int next_ready)
{
    rt_program *p = s->p;
    int64_t n = ir_numel(c->arg_types[0]), chunk = p->host_stage.chunk;
    size_t msize = ir_dtype_size(c->arg_types[2]->dtype), vsize = ir_dtype_size(c->arg_types[3]->dtype);
    if (s->overlap && !s->down[s->turn]) /* else the previous AdamW queued it */
        s->down[s->turn] = down_chunk(s, c, 0, n < chunk ? n : chunk, s->turn, ready);
    for (int64_t at = 0; at < n; at += chunk) {
        int h = s->turn;
        int64_t k = n - at < chunk ? n - at : chunk;
        double t0 = os_now_s();
        if (s->overlap && at + chunk < n) /* the other half's gradient was updated last chunk: free */
            s->down[h ^ 1] = down_chunk(s, c, at + chunk, n - at - chunk < chunk ? n - at - chunk : chunk, h ^ 1, ready);
        else if (s->overlap && next) {
            int64_t first = ir_numel(next->arg_types[0]);
            s->down[h ^ 1] = down_chunk(s, next, 0, first < chunk ? first : chunk, h ^ 1, next_ready);
        }
        if (s->overlap)
            wait_token(p, &s->down[h]);
        else
            down_chunk(s, c, at, k, h, ready);
        double t1 = os_now_s();
        bool fused = up && up_converts(up);
        if (fused) /* the AdamW writes where the half's last copy up reads */
            wait_token(p, &s->up[h]);
        double t_up = os_now_s();
        void *args[8] = {(float *)c->args[0] + at, stage_grad(p, h), (char *)c->args[2] + (size_t)at * msize,
                         (char *)c->args[3] + (size_t)at * vsize, c->args[4], c->args[5], c->args[6], stage_up(p, h)};
        const ir_type *types[8] = {c->arg_types[0], c->arg_types[1], c->arg_types[2], c->arg_types[3],
                                   c->arg_types[4], c->arg_types[5], c->arg_types[6], up ? up->arg_types[0] : NULL};
        rt_kernel_call part = *c;
        part.args = args;
        part.arg_types = types;
        part.nargs = fused ? 8 : 7;
        rt_host_adamw(p->host_pool, &part, f32, k);
        double t2 = os_now_s();
        if (up)
            up_chunk(s, up, at, k, h, fused, ready);
        double t3 = os_now_s();
        p->host_times[RT_HOST_TIME_DOWN] += t1 - t0;
        p->host_times[RT_HOST_TIME_ADAM] += t2 - t_up;
        p->host_times[RT_HOST_TIME_UP] += t3 - t2 + t_up - t1;
        s->turn ^= 1;
    }
}

/* The first instruction of f after i that does work (references to globals do none), or ninstrs. */
static int next_work(const ir_func *f, int i)
{
    while (++i < f->ninstrs && f->instrs[i].op == IR_OP_GLOBAL) {
    }
    return i;
}

/* Whether AdamW c of f (instruction i) reads its gradient from a device global: streamed. */
static bool streamed(const rt_program *p, const ir_func *f, int i)
{
    int g = f->instrs[i].op == IR_OP_ADAMW ? ir_global_of(f, f->instrs[i].args[1]) : -1;
    return g >= 0 && !p->m->globals[g].host;
}

static void host_run(rt_program *p, int func)
{
    double start = os_now_s();
    const rt_func_exec *x = &p->funcs[func];
    const ir_func *f = x->f;
    bool f32 = p->dev->kind != RT_DEVICE_CPU;
    /* beside the backward (the plan's ready marks) the copies are queued whatever the flag says: the
     * compute stream, which a synchronous copy would join, is the main thread's */
    bool queued = ir_cfg_bool(p->m, IR_CFG_OVERLAP_CPU_OPTIMIZER_D2H_H2D) || p->host_ready_slot;
    host_stream s = {p, queued && p->dev->copy_async, {0}, {0}, 0};
    for (int i = 0; i < f->ninstrs; i++) {
        const rt_kernel_call *c = &x->calls[i];
        host_move move = move_of(p, f, &f->instrs[i]);
        if (streamed(p, f, i)) {
            int j = next_work(f, i); /* the copy up of what it updated, where it follows */
            bool paired = j < f->ninstrs && move_of(p, f, &f->instrs[j]) == MOVE_UP &&
                          f->instrs[j].args[1] == f->instrs[i].args[0];
            int after = paired ? next_work(f, j) : j; /* the next streamed AdamW: its first chunk prefetched */
            bool prefetch = after < f->ninstrs && streamed(p, f, after);
            stream_adamw(&s, c, paired ? &x->calls[j] : NULL, prefetch ? &x->calls[after] : NULL, f32,
                         ready_slot(p, f, &f->instrs[i]), prefetch ? ready_slot(p, f, &f->instrs[after]) : -1);
            i = paired ? j : i;
        } else if (move == MOVE_DOWN) {
            p->dev->download(p, c->args[0], c->args[1], ir_bytes(c->arg_types[0]));
        } else if (move == MOVE_UP) {
            double t0 = os_now_s();
            int64_t n = ir_numel(c->arg_types[0]), chunk = p->host_stage.chunk ? p->host_stage.chunk : n;
            for (int64_t at = 0; at < n; at += chunk, s.turn ^= 1)
                up_chunk(&s, c, at, n - at < chunk ? n - at : chunk, s.turn, false, -1);
            p->host_times[RT_HOST_TIME_UP] += os_now_s() - t0;
        } else if (f->instrs[i].op == IR_OP_ADAMW) {
            double t0 = os_now_s();
            rt_host_adamw(p->host_pool, c, f32, ir_numel(c->arg_types[0]));
            p->host_times[RT_HOST_TIME_ADAM] += os_now_s() - t0;
        } else {
            rt_cpu_kernels[f->instrs[i].op](c);
        }
    }
    double t0 = os_now_s(); /* every parameter up before the device reads it */
    for (int h = 0; h < 2; h++) {
        wait_token(p, &s.down[h]);
        wait_token(p, &s.up[h]);
    }
    double end = os_now_s();
    p->host_times[RT_HOST_TIME_UP] += end - t0;
    p->host_times[RT_HOST_TIME_ALL] += end - start;
}

/* The host function running on its own thread (rt_host_start), joined by rt_host_join. */
typedef struct rt_host_thread {
    pthread_t tid;
    rt_program *p;
    int func;
} rt_host_thread;

static void *host_thread_run(void *arg)
{
    const rt_host_thread *t = arg;
    host_run(t->p, t->func);
    return NULL;
}

bool rt_host_beside(const rt_program *p) { return p->host_ready_slot != NULL; }

void rt_host_start(rt_program *p, int func)
{
    rt_host_thread *t = malloc(sizeof *t);
    if (!t || p->host_thread) {
        fprintf(stderr, "train_rank: %s\n", t ? "internal error: the host function is already running (rt_host_start "
                                                "twice without rt_host_join)" : "out of host memory");
        exit(1);
    }
    *t = (rt_host_thread){.p = p, .func = func};
    if (pthread_create(&t->tid, NULL, host_thread_run, t) != 0) { /* no thread: it runs here, after the backward */
        free(t);
        host_run(p, func);
        return;
    }
    p->host_thread = t;
}

void rt_host_join(rt_program *p)
{
    if (!p->host_thread)
        return;
    pthread_join(p->host_thread->tid, NULL);
    free(p->host_thread);
    p->host_thread = NULL;
}

static void host_close(rt_program *p)
{
    rt_host_join(p);
    rt_host_pool_close(p->host_pool);
    p->host_pool = NULL;
    free(p->host_ready_slot);
    p->host_ready_slot = NULL;
}

static const rt_host_hooks host_hooks = {host_run, host_close};

/* Per global of p's plan, its grad_ready mark's slot (-1: none); NULL where the plan has none. */
static int *ready_slots(const ir_module *m)
{
    if (!ir_grad_ready_slots(m))
        return NULL;
    int *slot = malloc(sizeof(int) * ((size_t)m->nglobals + 1));
    for (int g = 0; slot && g < m->nglobals; g++)
        slot[g] = -1;
    for (int fi = 0; slot && fi < m->nfuncs; fi++)
        for (int i = 0; i < m->funcs[fi]->ninstrs; i++) {
            const ir_instr *in = &m->funcs[fi]->instrs[i];
            if (in->op == IR_OP_GRAD_READY)
                slot[ir_global_of(m->funcs[fi], in->args[0])] = (int)in->attr[IR_ATTR_GRAD_READY_SLOT];
        }
    return slot;
}

void rt_host_attach(rt_program *p)
{
    if (ir_func_of_kind(p->m, IR_FUNC_HOST_OPTIMIZER) < 0 || p->host)
        return;
    p->host = &host_hooks;
    p->host_pool = rt_host_pool_open(host_threads(), host_isa());
    p->host_ready_slot = ready_slots(p->m);
}
