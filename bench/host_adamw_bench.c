/* host_adamw_bench.c — the host's AdamW under --optimizer-cpu-offload (runtime/host_optimizer.c's
 * rt_host_adamw on a GPU plan: the GPU kernel's fp32 formula), alone and writing the bf16 working
 * copy that goes up (as the streamed update does), and that conversion alone (rt_host_to_bf16),
 * timed on this machine's cores: elements per second, per thread, and the memory
 * traffic in GB/s, for f32 and bf16 Adam moments, at each thread count asked for. The work is the
 * real functions' over arrays as large as a tensor's share of llama3-8b, called chunk by chunk as
 * the streamed gradient arrives (a staging half's 16 Mi elements by default), compiled for each
 * instruction set this CPU has (rt_host_isa; train_rank picks the first, MCC_HOST_OPTIMIZER_ISA).
 *
 *   host_adamw_bench [--elements-mi 256] [--chunk-mi 16] [--threads 1,2] [--reps 3]
 *
 * An executable, not a test: it prints timings (bench/RESULTS.md keeps them). */
#include "runtime/bf16.h"
#include "runtime/host_optimizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAX_COUNTS = 16 };

typedef struct {
    int64_t elements, chunk;
    int threads[MAX_COUNTS], nthreads;
    int reps;
} bench_options;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void usage_fail(const char *flag, const char *value, const char *want)
{
    fprintf(stderr, "host_adamw_bench: %s %s: %s\n", flag, value ? value : "(missing)", want);
    exit(2);
}

static long long positive(const char *flag, const char *value)
{
    char *end;
    long long x = value ? strtoll(value, &end, 10) : 0;
    if (!value || *end || x < 1)
        usage_fail(flag, value, "give a whole number of 1 or more");
    return x;
}

static bench_options parse(int argc, char **argv)
{
    bench_options o = {256ll << 20, 16ll << 20, {1, 2}, 2, 3};
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        i++;
        if (!strcmp(flag, "--elements-mi"))
            o.elements = positive(flag, value) << 20;
        else if (!strcmp(flag, "--chunk-mi"))
            o.chunk = positive(flag, value) << 20;
        else if (!strcmp(flag, "--reps"))
            o.reps = (int)positive(flag, value);
        else if (!strcmp(flag, "--threads")) {
            char *list = strdup(value ? value : ""), *save = NULL;
            o.nthreads = 0;
            for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if (o.nthreads == MAX_COUNTS)
                    usage_fail(flag, value, "give at most 16 thread counts");
                o.threads[o.nthreads++] = (int)positive(flag, t);
            }
            free(list);
            if (!o.nthreads)
                usage_fail(flag, value, "give thread counts separated by commas, e.g. 1,2,16");
        } else
            usage_fail(flag, value, "not a flag: --elements-mi, --chunk-mi, --threads, --reps");
    }
    return o;
}

static void *alloc_or_die(size_t bytes)
{
    void *x = malloc(bytes);
    if (!x) {
        fprintf(stderr, "host_adamw_bench: %zu bytes do not fit in host memory: pass a smaller --elements-mi\n", bytes);
        exit(1);
    }
    return x;
}

/* The arrays of one run: master, gradient, m and v (moments of `moment_size` bytes), the bf16 copy
 * going up. Filled by the thread that times them (first touch: the pages are its node's, as the
 * page-locked buffers train_rank allocates are the allocating thread's). */
typedef struct {
    float *p, *g;
    void *m, *v;
    uint16_t *up;
} bench_arrays;

static bench_arrays arrays_new(int64_t n, size_t moment_size)
{
    bench_arrays a = {alloc_or_die((size_t)n * 4), alloc_or_die((size_t)n * 4), alloc_or_die((size_t)n * moment_size),
                      alloc_or_die((size_t)n * moment_size), alloc_or_die((size_t)n * 2)};
    for (int64_t i = 0; i < n; i++) {
        a.p[i] = 0.02f * (float)sin((double)i * 0.37);
        a.g[i] = 1e-3f * (float)cos((double)i * 0.11);
        float m = 1e-4f * (float)sin((double)i * 0.23), v = 1e-7f * (1.5f + (float)cos((double)i * 0.07));
        if (moment_size == 2) {
            ((uint16_t *)a.m)[i] = rt_f32_to_bf16(m);
            ((uint16_t *)a.v)[i] = rt_f32_to_bf16(v);
        } else {
            ((float *)a.m)[i] = m;
            ((float *)a.v)[i] = v;
        }
    }
    memset(a.up, 0, (size_t)n * 2);
    return a;
}

static void arrays_free(bench_arrays *a)
{
    free(a->p), free(a->g), free(a->m), free(a->v), free(a->up);
}

/* One pass of AdamW over every element, chunk by chunk as the streamed gradient arrives, writing
 * the bf16 working copy where `copy`; returns seconds. */
static double adamw_pass(rt_host_pool *pool, const bench_options *o, const bench_arrays *a, ir_dtype moments,
                         float step, bool copy)
{
    size_t msize = ir_dtype_size(moments);
    ir_instr in = {.op = IR_OP_ADAMW};
    in.attr[IR_ATTR_ADAMW_BETA1] = 0.9, in.attr[IR_ATTR_ADAMW_BETA2] = 0.95, in.attr[IR_ATTR_ADAMW_EPS] = 1e-8;
    in.attr[IR_ATTR_ADAMW_WEIGHT_DECAY] = 0.1;
    float lr = 3e-4f, coef = 0.5f;
    double t0 = now_s();
    for (int64_t at = 0; at < o->elements; at += o->chunk) {
        int64_t k = o->elements - at < o->chunk ? o->elements - at : o->chunk;
        ir_type t = ir_tensor(IR_F32, 1, (int64_t[]){k}), tm = ir_tensor(moments, 1, (int64_t[]){k}),
                s = ir_scalar(IR_F32), tc = ir_tensor(IR_BF16, 1, (int64_t[]){k});
        void *args[8] = {a->p + at, a->g + at, (char *)a->m + (size_t)at * msize, (char *)a->v + (size_t)at * msize,
                         &lr, &step, &coef, a->up + at};
        const ir_type *types[8] = {&t, &t, &tm, &tm, &s, &s, &s, &tc};
        rt_kernel_call c = {&in, copy ? 8 : 7, 0, args, types, NULL, NULL};
        rt_host_adamw(pool, &c, true, k);
    }
    return now_s() - t0;
}

/* One pass of the copy up's conversion, f32 master to bf16, chunk by chunk; returns seconds. */
static double to_bf16_pass(rt_host_pool *pool, const bench_options *o, const bench_arrays *a)
{
    double t0 = now_s();
    for (int64_t at = 0; at < o->elements; at += o->chunk)
        rt_host_to_bf16(pool, a->up + at, a->p + at, o->elements - at < o->chunk ? o->elements - at : o->chunk);
    return now_s() - t0;
}

static void report(const char *what, int threads, int64_t n, double bytes_per_element, double best)
{
    double rate = (double)n / best;
    printf("%-32s threads %2d  %8.1f ms  %7.1f M elements/s  %6.1f M/s per thread  %6.1f GB/s\n", what, threads,
           best * 1e3, rate * 1e-6, rate * 1e-6 / threads, rate * bytes_per_element * 1e-9);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    bench_options o = parse(argc, argv);
    printf("host AdamW (the GPU's fp32 formula), %lld Mi elements in chunks of %lld Mi, best of %d passes\n",
           (long long)(o.elements >> 20), (long long)(o.chunk >> 20), o.reps);
    ir_dtype moment_dtypes[2] = {IR_F32, IR_BF16};
    for (int d = 0; d < 2; d++) {
        size_t msize = ir_dtype_size(moment_dtypes[d]);
        bench_arrays a = arrays_new(o.elements, msize);
        for (int t = 0; t < o.nthreads; t++) {
            for (int isa = 0; isa < RT_HOST_NUM_ISAS; isa++) {
                if (!rt_host_isa_supported((rt_host_isa)isa))
                    continue;
                rt_host_pool *pool = rt_host_pool_open(o.threads[t], (rt_host_isa)isa);
                double best_up = INFINITY;
                for (int copy = 0; copy < 2; copy++) {
                    double best = INFINITY;
                    for (int r = 0; r < o.reps; r++) {
                        double s = adamw_pass(pool, &o, &a, moment_dtypes[d], (float)(r + 1), copy);
                        best = s < best ? s : best;
                    }
                    char what[64];
                    snprintf(what, sizeof what, "adamw%s %s, %s moments", copy ? "+bf16" : "", rt_host_isa_names[isa],
                             ir_dtype_name(moment_dtypes[d]));
                    /* master read and written, gradient read, each moment read and written, the copy written */
                    report(what, o.threads[t], o.elements, 8.0 + 4.0 + 4.0 * (double)msize + 2.0 * copy, best);
                }
                char what[64];
                for (int r = 0; d == 0 && r < o.reps; r++) {
                    double s = to_bf16_pass(pool, &o, &a);
                    best_up = s < best_up ? s : best_up;
                }
                snprintf(what, sizeof what, "to bf16 %s (copy up)", rt_host_isa_names[isa]);
                if (d == 0)
                    report(what, o.threads[t], o.elements, 4.0 + 2.0, best_up);
                rt_host_pool_close(pool);
            }
        }
        arrays_free(&a);
    }
    return 0;
}
