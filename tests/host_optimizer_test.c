/* host_optimizer_test.c — the host function's executor (runtime/host_optimizer.c) on the CPU
 * device: AdamW reading its gradient where the device holds it streams the gradient down chunk by
 * chunk through the staging buffer the plan counts (ir_host_staging_of), updating each chunk as it
 * arrives, and the copy up after it goes with each chunk; the copy up of an offloaded parameter's
 * f32 value into its bf16 working copy is converted by the host, rounding to nearest even as the
 * GPU does; ZeRO's master block goes up as f32 into the gradient block it was updated from. In one
 * chunk and in many (a chunk boundary inside the parameter, the last chunk short), copies at once
 * or queued; AdamW split over the thread pool started at load (MCC_HOST_OPTIMIZER_THREADS=4)
 * updates every element as the CPU kernel does in one piece, Adam's moments f32 or one of them bf16
 * (--use-precision-aware-optimizer), each in its own dtype; the run's time split (waiting for
 * gradient chunks, AdamW, copies up) sums to at most the whole. A GPU plan's AdamW (the GPU kernel's
 * fp32 formula) and bf16 conversion, compiled for each instruction set this CPU has, equal the
 * formula written here in plain fp32, bit for bit. The pool's default size follows the process's
 * CPU affinity. Beside the backward (grad_ready marks), the function on its own thread waits each
 * parameter's mark before its copies, in the ready order. */
#define _GNU_SOURCE /* sched_setaffinity: the pool's default size under a narrowed affinity */
#include "common/os.h"
#include "ir/ir.h"
#include "runtime/bf16.h"
#include "runtime/cpu_kernels.h"
#include "runtime/host_optimizer.h"
#include "runtime/program.h"

#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N = 40000 }; /* 9 slices of 4096: every pool thread takes one */

/* The host function of one offloaded parameter @w: AdamW on the host master reading the device's
 * gradient, then the master copied up. Filled with the layout's own globals, the dtypes of Adam's m
 * and v, the master, the gradient, m's and v's dtypes again, and the copy up's destination and dtype. */
static const char plan_format[] =
    "global @w : f32[40000] {kind=param, init=zeros, host}\n"
    "%s"
    "global @w.adam_m : %s[40000] {kind=adam_m, init=zeros, of=@w, host}\n"
    "global @w.adam_v : %s[40000] {kind=adam_v, init=zeros, of=@w, host}\n"
    "func host_optimizer {kind=host_optimizer, arena=192} {\n"
    "  %%0 = input @lr : f32[] @+0\n"
    "  %%1 = input @step : f32[] @+64\n"
    "  %%2 = input @clip_coef : f32[] @+128\n"
    "  %%3 = global @%s : f32[40000] @global\n"
    "  %%4 = global @%s : f32[40000] @global\n"
    "  %%5 = global @w.adam_m : %s[40000] @global\n"
    "  %%6 = global @w.adam_v : %s[40000] @global\n"
    "  adamw %%3, %%4, %%5, %%6, %%0, %%1, %%2 {beta1=0.9, beta2=0.95, eps=1e-08, weight_decay=0.01}\n"
    "  %%7 = global @%s : %s[40000] @global\n"
    "  copy %%7, %%3\n"
    "}\n";

/* Without ZeRO: the parameter is the master and goes up into its bf16 working copy. */
static const char plain_globals[] = "global @w.grad : f32[40000] {kind=grad, init=zeros, of=@w}\n"
                                    "global @w.bf16 : bf16[40000] {kind=copy, init=zeros, of=@w}\n";
/* ZeRO's shape: the host master block is updated from the device's reduced gradient block and goes
 * up, f32, into that block. */
static const char zero_globals[] =
    "global @w.master_shard : f32[40000] {kind=master_shard, init=zeros, of=@w, host}\n"
    "global @w.grad_shard : f32[40000] {kind=grad_shard, init=zeros, of=@w}\n";

/* Adam's m and v dtypes. The mixed pairs (Megatron's --exp-avg-dtype bf16 --exp-avg-sq-dtype fp32,
 * and the reverse) guard each chunk's pointer into each moment: advanced by that moment's own
 * element size, not the other moment's, the gradient's or the master's. */
static const ir_dtype moment_dtypes[][2] = {{IR_F32, IR_F32}, {IR_BF16, IR_F32}, {IR_F32, IR_BF16}};

/* An Adam moment of N elements as the plan holds it, f32 or bf16. */
typedef union {
    float f32[N];
    uint16_t bf16[N];
} moment;

/* Moment x of dtype t at a start that is not zero (v's positive), so that a chunk read from the
 * wrong place shows. */
static void moment_start(moment *x, ir_dtype t, bool v)
{
    for (int i = 0; i < N; i++) {
        float value = v ? 1e-4f * (1.5f + (float)cos(i * 0.07)) : 0.01f * (float)sin(i * 0.23);
        if (t == IR_BF16)
            x->bf16[i] = rt_f32_to_bf16(value);
        else
            x->f32[i] = value;
    }
}

static int fails;

static void expect(bool ok, const char *what)
{
    printf("%s: %s\n", ok ? "ok" : "FAIL", what);
    fails += !ok;
}

/* One host_optimizer run of the plan (zero: ZeRO's; overlap: config overlap_cpu_optimizer_d2h_h2d,
 * the CPU device's copies then done at once) in chunks of `chunk` elements (0: the plan's, one),
 * Adam's m and v of dtypes mt and vt. */
static void run_case(bool zero, bool overlap, int64_t chunk, ir_dtype mt, ir_dtype vt)
{
    char text[4096], err[512];
    int at = snprintf(text, sizeof text, "%s", overlap ? "config {\n  overlap_cpu_optimizer_d2h_h2d = \"1\"\n}\n" : "");
    const char *ms = ir_dtype_name(mt), *vs = ir_dtype_name(vt);
    if (zero)
        snprintf(text + at, sizeof text - at, plan_format, zero_globals, ms, vs, "w.master_shard", "w.grad_shard", ms, vs,
                 "w.grad_shard", "f32");
    else
        snprintf(text + at, sizeof text - at, plan_format, plain_globals, ms, vs, "w", "w.grad", ms, vs, "w.bf16", "bf16");
    rt_program *p = rt_program_load(text, &rt_cpu_device, NULL, 0, err, sizeof err);
    if (!p) {
        fprintf(stderr, "FAIL: the plan does not load: %s\n", err);
        exit(1);
    }
    rt_host_attach(p);
    printf("-- %s, %s, %s, adam_m %s, adam_v %s\n", zero ? "ZeRO's block" : "bf16 working copy",
           overlap ? "copies queued" : "copies at once", chunk ? "chunks of 1500 elements" : "one chunk", ms, vs);
    int up_size = zero ? 0 : 2;
    expect(ir_host_staging_bytes(p->m, p->m->funcs[0]) == 2 * N * (4 + up_size) && p->host_staging &&
               p->host_stage.chunk == N,
           "the staging buffer has two halves, each a gradient chunk of the whole parameter (and its bf16 copy up)");
    if (chunk) /* white box: smaller chunks inside the buffer, a boundary inside the parameter, the last short */
        p->host_stage.chunk = chunk;
    static float w[N], g[N], ref[N];
    static moment m, v;
    for (int i = 0; i < N; i++) {
        w[i] = (float)sin(i * 0.37) * (1.0f + (float)i / N);
        g[i] = (float)cos(i * 0.11) * 0.01f;
    }
    moment_start(&m, mt, false);
    moment_start(&v, vt, true);
    w[2] = NAN;
    float lr = 1e-3f, step = 1, coef = 0.5f;
    const char *master = zero ? "w.master_shard" : "w", *grad = zero ? "w.grad_shard" : "w.grad";
    rt_program_write_global(p, ir_global_find(p->m, master), w);
    rt_program_write_global(p, ir_global_find(p->m, grad), g);
    rt_program_write_global(p, ir_global_find(p->m, "w.adam_m"), &m);
    rt_program_write_global(p, ir_global_find(p->m, "w.adam_v"), &v);
    rt_program_set_input(p, 0, rt_program_find(p, 0, IR_OP_INPUT, ir_role_of(IR_ROLE_LR)), &lr, sizeof lr);
    rt_program_set_input(p, 0, rt_program_find(p, 0, IR_OP_INPUT, ir_role_of(IR_ROLE_STEP)), &step, sizeof step);
    rt_program_set_input(p, 0, rt_program_find(p, 0, IR_OP_INPUT, ir_role_of(IR_ROLE_CLIP_COEF)), &coef, sizeof coef);

    /* the reference: the CPU kernel over the whole tensor at once, with the same moment dtypes */
    memcpy(ref, w, sizeof w);
    const ir_func *f = p->m->funcs[0];
    const ir_instr *adamw = NULL;
    for (int i = 0; i < f->ninstrs; i++)
        adamw = f->instrs[i].op == IR_OP_ADAMW ? &f->instrs[i] : adamw;
    ir_type t = ir_tensor(IR_F32, 1, (int64_t[]){N}), tm = ir_tensor(mt, 1, (int64_t[]){N}),
            tv = ir_tensor(vt, 1, (int64_t[]){N}), s = ir_scalar(IR_F32);
    void *args[7] = {ref, g, &m, &v, &lr, &step, &coef};
    const ir_type *types[7] = {&t, &t, &tm, &tv, &s, &s, &s};
    rt_kernel_call one = {adamw, 7, 0, args, types, NULL, NULL};
    rt_cpu_adamw_range(&one, 0, N);

    rt_program_run(p, 0);
    static float got[N], up[N];
    static uint16_t copy[N];
    static moment got_m, got_v;
    rt_program_read_global(p, ir_global_find(p->m, master), got);
    expect(!memcmp(got, ref, sizeof got), "AdamW over the streamed chunks and the pool's slices equals the CPU kernel's "
                                          "in one piece, bit for bit");
    rt_program_read_global(p, ir_global_find(p->m, "w.adam_m"), &got_m);
    rt_program_read_global(p, ir_global_find(p->m, "w.adam_v"), &got_v);
    expect(!memcmp(&got_m, &m, N * ir_dtype_size(mt)), "so does Adam's m, in its dtype");
    expect(!memcmp(&got_v, &v, N * ir_dtype_size(vt)), "and Adam's v, in its dtype");
    if (zero) {
        rt_program_read_global(p, ir_global_find(p->m, "w.grad_shard"), up);
        expect(!memcmp(up, ref, sizeof up), "the updated master block went up into the gradient block, every chunk");
    } else {
        rt_program_read_global(p, ir_global_find(p->m, "w.bf16"), copy);
        bool rounded = true, truncation = true; /* the check can fail: rounding is not cutting the low bits off */
        for (int i = 0; i < N; i++) {
            uint32_t u;
            memcpy(&u, &got[i], sizeof u);
            rounded &= copy[i] == rt_f32_to_bf16(got[i]);
            truncation &= copy[i] == (uint16_t)(u >> 16);
        }
        expect(rounded && !truncation && isnan(rt_bf16_to_f32(copy[2])),
               "the bf16 working copy is the host's round-to-nearest-even of every updated element (NaN stays NaN)");
    }
    const double *ts = p->host_times;
    expect(ts[RT_HOST_TIME_ALL] > 0 && ts[RT_HOST_TIME_DOWN] >= 0 && ts[RT_HOST_TIME_ADAM] > 0 && ts[RT_HOST_TIME_UP] > 0 &&
               ts[RT_HOST_TIME_DOWN] + ts[RT_HOST_TIME_ADAM] + ts[RT_HOST_TIME_UP] <= ts[RT_HOST_TIME_ALL],
           "the time split (copies down, AdamW, copies up) sums to at most the host step");
    rt_program_free(p); /* joins the pool's threads */
}

/* The GPU plan's AdamW as the test writes it: optimizer.cuh's mcc_adamw_step, one element at a time
 * in plain fp32 (this file is built with -ffp-contract=off, as host_optimizer.c is). */
static void gpu_formula(float *p, float g, float *m, float *v, const double *attr, float lr, float step, float coef)
{
    float b1 = (float)attr[IR_ATTR_ADAMW_BETA1], b2 = (float)attr[IR_ATTR_ADAMW_BETA2];
    float eps = (float)attr[IR_ATTR_ADAMW_EPS], wd = (float)attr[IR_ATTR_ADAMW_WEIGHT_DECAY];
    float bc1 = (float)(1.0 - pow(attr[IR_ATTR_ADAMW_BETA1], step)), bc2 = (float)(1.0 - pow(attr[IR_ATTR_ADAMW_BETA2], step));
    g *= coef;
    *m = b1 * *m + (1.0f - b1) * g;
    *v = b2 * *v + (1.0f - b2) * g * g;
    *p = *p - lr * (*m / bc1 / (sqrtf(*v / bc2) + eps) + wd * *p);
}

/* Value i of a test array with the edges a vector loop can get wrong: NaN, infinities, zero, a
 * denormal, a bf16 rounding tie; else smooth values of `scale`. */
static float edgy(int i, float scale)
{
    static const float edges[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f, 1.00390625f /* bf16 tie */, 3.0e38f};
    return i % 97 < 8 ? edges[i % 97] : scale * (float)sin(i * 0.37 + scale);
}

enum { ISA_N = N - 1 }; /* odd: every vector loop's tail runs, in each pool thread's slice */

/* The GPU plan's AdamW (the host's fp32 loops) compiled for each instruction set this CPU has,
 * split over a pool of 2 (slices of 20,000 elements: two blocks each, the second short, where it
 * writes the bf16 working copy as it goes), equals gpu_formula element by element, bit for bit,
 * with f32 and bf16 moments, and so does its working copy rt_f32_to_bf16 of the result; and the
 * conversion of a copy up alone. */
static void isa_cases(void)
{
    ir_instr in = {.op = IR_OP_ADAMW};
    in.attr[IR_ATTR_ADAMW_BETA1] = 0.9, in.attr[IR_ATTR_ADAMW_BETA2] = 0.95, in.attr[IR_ATTR_ADAMW_EPS] = 1e-8;
    in.attr[IR_ATTR_ADAMW_WEIGHT_DECAY] = 0.1;
    float lr = 3e-4f, step = 3, coef = 0.75f;
    static float p[ISA_N], g[ISA_N], ref_p[ISA_N];
    static moment m, v, ref_m, ref_v;
    static uint16_t up[ISA_N];
    int ran = 0;
    for (int isa = 0; isa < RT_HOST_NUM_ISAS; isa++) {
        if (!rt_host_isa_supported((rt_host_isa)isa)) {
            printf("-- %s: this CPU lacks it, not run\n", rt_host_isa_names[isa]);
            continue;
        }
        ran++;
        rt_host_pool *pool = rt_host_pool_open(2, (rt_host_isa)isa);
        for (int mt16 = 0; mt16 < 2; mt16++) {
            ir_dtype mt = mt16 ? IR_BF16 : IR_F32;
            memset(up, 0, sizeof up);
            bool same = true;
            for (int i = 0; i < ISA_N; i++) {
                p[i] = ref_p[i] = edgy(i, 0.02f), g[i] = edgy(i + 5, 1e-3f);
                float mi = edgy(i + 11, 1e-4f), vi = fabsf(edgy(i + 23, 1e-7f));
                if (mt16) {
                    m.bf16[i] = rt_f32_to_bf16(mi), v.bf16[i] = rt_f32_to_bf16(vi);
                    mi = rt_bf16_to_f32(m.bf16[i]), vi = rt_bf16_to_f32(v.bf16[i]);
                } else {
                    m.f32[i] = mi, v.f32[i] = vi;
                }
                gpu_formula(&ref_p[i], g[i], &mi, &vi, in.attr, lr, step, coef);
                if (mt16)
                    ref_m.bf16[i] = rt_f32_to_bf16(mi), ref_v.bf16[i] = rt_f32_to_bf16(vi);
                else
                    ref_m.f32[i] = mi, ref_v.f32[i] = vi;
            }
            ir_type t = ir_tensor(IR_F32, 1, (int64_t[]){ISA_N}), tm = ir_tensor(mt, 1, (int64_t[]){ISA_N}),
                    s = ir_scalar(IR_F32), tc = ir_tensor(IR_BF16, 1, (int64_t[]){ISA_N});
            void *args[8] = {p, g, &m, &v, &lr, &step, &coef, up};
            const ir_type *types[8] = {&t, &t, &tm, &tm, &s, &s, &s, &tc};
            rt_kernel_call c = {&in, 8, 0, args, types, NULL, NULL};
            rt_host_adamw(pool, &c, true, ISA_N);
            size_t msize = ir_dtype_size(mt);
            same &= !memcmp(p, ref_p, sizeof p); /* NaN's payload included: the bits, not the values */
            same &= !memcmp(&m, &ref_m, ISA_N * msize) && !memcmp(&v, &ref_v, ISA_N * msize);
            for (int i = 0; i < ISA_N; i++)
                same &= up[i] == rt_f32_to_bf16(ref_p[i]);
            char what[200];
            snprintf(what, sizeof what, "%s: the GPU's AdamW formula on the host, %s moments, equals it element by "
                     "element in plain fp32, bit for bit (NaN, infinities, denormals, the tails), and so does the bf16 "
                     "working copy it writes", rt_host_isa_names[isa],
                     ir_dtype_name(mt));
            expect(same, what);
        }
        for (int i = 0; i < ISA_N; i++)
            p[i] = edgy(i, 1.0f);
        rt_host_to_bf16(pool, up, p, ISA_N);
        bool rounded = true;
        for (int i = 0; i < ISA_N; i++)
            rounded &= up[i] == rt_f32_to_bf16(p[i]);
        char what[160];
        snprintf(what, sizeof what, "%s: the copy up's conversion equals rt_f32_to_bf16 element by element", rt_host_isa_names[isa]);
        expect(rounded, what);
        rt_host_pool_close(pool);
    }
    expect(ran > 0 && rt_host_isa_supported(RT_HOST_ISA_GENERIC), "the generic loops run on every CPU");
}

/* rt_f32_to_bf16 (a select, so that loops over it vectorise) rounds to nearest even and keeps a NaN
 * a quiet NaN: its known answers. */
static void bf16_cases(void)
{
    static const struct {
        uint32_t f32;
        uint16_t bf16;
    } known[] = {
        {0x3f800000u, 0x3f80}, {0x3f808000u, 0x3f80}, /* a tie to the even below */
        {0x3f818000u, 0x3f82},                        /* a tie to the even above */
        {0x3f808001u, 0x3f81}, {0x7f7fffffu, 0x7f80}, /* the largest float rounds to infinity */
        {0x7f800000u, 0x7f80}, {0xff800000u, 0xff80}, /* infinities stay */
        {0x7f800001u, 0x7fc0}, {0xffa00000u, 0xffe0}, /* a signalling NaN turns quiet, its sign kept */
        {0x00000001u, 0x0000}, {0x80000000u, 0x8000},
    };
    bool ok = true;
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++) {
        float f;
        memcpy(&f, &known[k].f32, sizeof f);
        ok &= rt_f32_to_bf16(f) == known[k].bf16;
    }
    expect(ok, "rt_f32_to_bf16: nearest even, overflow to infinity, NaN kept quiet");
}

/* The pool's default size (MCC_HOST_OPTIMIZER_THREADS 0) is the CPUs the process may run on: under
 * an affinity of one CPU (a container's cpuset, taskset), one, however many the machine has. */
static void cpus_case(void)
{
    cpu_set_t was, one;
    if (sched_getaffinity(0, sizeof was, &was) != 0) {
        expect(false, "sched_getaffinity answers");
        return;
    }
    int first = 0;
    while (!CPU_ISSET(first, &was))
        first++;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    bool narrowed = sched_setaffinity(0, sizeof one, &one) == 0;
    int n = os_cpus();
    sched_setaffinity(0, sizeof was, &was);
    expect(narrowed && n == 1 && os_cpus() == CPU_COUNT(&was),
           "os_cpus counts the CPUs of the affinity mask (1 under taskset -c 0), not every core online");
}

/* ---- the host's update beside the backward (passes/grad_ready.c, --clip-grad 0) ---------------- */

/* Three offloaded parameters, their host function's updates in the order the step marks their
 * gradients ready (slots 0, 1, 2: @c, @a, @b, not declaration order), the clipping coefficient a
 * constant 1; sizes that chunk unevenly (chunks of READY_CHUNK). */
enum { READY_PARAMS = 3, READY_CHUNK = 2048 };
static const char *const ready_name[READY_PARAMS] = {"c", "a", "b"}; /* slot order */
static const int ready_n[READY_PARAMS] = {7000, 5000, 3000};

/* Each copy_async the host queues: its ready slot, direction, and the device bytes it touches. */
enum { MAX_COPIES = 64 };
static struct {
    int ready;
    bool to_host;
    const void *device;
} copies[MAX_COPIES];
static int ncopies;

static void *logged_copy_async(rt_program *p, void *dst, const void *src, size_t bytes, bool to_host, int ready)
{
    if (ncopies < MAX_COPIES)
        copies[ncopies++] = (typeof(copies[0])){ready, to_host, to_host ? src : dst};
    return rt_cpu_device.copy_async(p, dst, src, bytes, to_host, ready);
}

/* The plan: each parameter's globals, its mark in a step function and its update in the host
 * function, in slot order. */
static void ready_plan(char *text, size_t len)
{
    char globals[4096], marks[1024], updates[4096];
    size_t g = 0, mk = 0, u = 0;
    for (int k = 0, v = 3; k < READY_PARAMS; k++, v += 5) {
        const char *w = ready_name[k];
        int n = ready_n[k];
        g += (size_t)snprintf(globals + g, sizeof globals - g,
                              "global @%s : f32[%d] {kind=param, init=zeros, host}\n"
                              "global @%s.grad : f32[%d] {kind=grad, init=zeros, of=@%s}\n"
                              "global @%s.bf16 : bf16[%d] {kind=copy, init=zeros, of=@%s}\n"
                              "global @%s.adam_m : f32[%d] {kind=adam_m, init=zeros, of=@%s, host}\n"
                              "global @%s.adam_v : f32[%d] {kind=adam_v, init=zeros, of=@%s, host}\n",
                              w, n, w, n, w, w, n, w, w, n, w, w, n, w);
        mk += (size_t)snprintf(marks + mk, sizeof marks - mk, "  %%%d = global @%s.grad : f32[%d] @global\n"
                               "  grad_ready %%%d {slot=%d}\n", k, w, n, k, k);
        u += (size_t)snprintf(updates + u, sizeof updates - u,
                              "  %%%d = global @%s : f32[%d] @global\n  %%%d = global @%s.grad : f32[%d] @global\n"
                              "  %%%d = global @%s.adam_m : f32[%d] @global\n  %%%d = global @%s.adam_v : f32[%d] @global\n"
                              "  adamw %%%d, %%%d, %%%d, %%%d, %%0, %%1, %%2 {beta1=0.9, beta2=0.95, eps=1e-08, weight_decay=0.01}\n"
                              "  %%%d = global @%s.bf16 : bf16[%d] @global\n  copy %%%d, %%%d\n",
                              v, w, n, v + 1, w, n, v + 2, w, n, v + 3, w, n, v, v + 1, v + 2, v + 3, v + 4, w, n, v + 4, v);
    }
    snprintf(text, len, "%sfunc micro_step {kind=step, arena=0} {\n%s}\n"
                        "func host_optimizer {kind=host_optimizer, arena=192} {\n"
                        "  %%0 = input @lr : f32[] @+0\n  %%1 = input @step : f32[] @+64\n  %%2 = fill {value=1} : f32[] @+128\n"
                        "%s}\n", globals, marks, updates);
}

/* The host function run by rt_host_start on its own thread, each parameter's copies waiting for
 * its mark: every copy names the ready slot of the parameter whose bytes it moves (down: its
 * gradient; up: its working copy), the slots follow the ready order (each parameter's copies after
 * the previous one's first, none of a later slot before), and the update equals the CPU kernel's,
 * bit for bit, with the joined run's copies up done. */
static void ready_case(void)
{
    static char text[16384];
    char err[512];
    ready_plan(text, sizeof text);
    static rt_device logged;
    logged = rt_cpu_device;
    logged.copy_async = logged_copy_async;
    rt_program *p = rt_program_load(text, &logged, NULL, 0, err, sizeof err);
    if (!p) {
        fprintf(stderr, "FAIL: the ready-order plan does not load: %s\n", err);
        exit(1);
    }
    rt_host_attach(p);
    printf("-- the host's update beside the backward: three parameters marked ready in the order c, a, b\n");
    int host = ir_func_of_kind(p->m, IR_FUNC_HOST_OPTIMIZER);
    expect(rt_host_beside(p) && ir_grad_ready_slots(p->m) == READY_PARAMS, "the plan's ready marks are seen at load");
    p->host_stage.chunk = READY_CHUNK; /* white box: several chunks a parameter, the last short */
    static float w[READY_PARAMS][7000], g[READY_PARAMS][7000], m[READY_PARAMS][7000], v[READY_PARAMS][7000];
    const void *grad_at[READY_PARAMS], *copy_at[READY_PARAMS];
    float lr = 1e-3f, step = 3, one = 1;
    for (int k = 0; k < READY_PARAMS; k++) {
        char name[32];
        for (int i = 0; i < ready_n[k]; i++) {
            w[k][i] = (float)sin(i * 0.31 + k), g[k][i] = 0.01f * (float)cos(i * 0.17 - k);
            m[k][i] = 0.001f * (float)sin(i * 0.05), v[k][i] = 1e-5f * (1.5f + (float)cos(i * 0.03));
        }
        rt_program_write_global(p, ir_global_find(p->m, ready_name[k]), w[k]);
        snprintf(name, sizeof name, "%s.grad", ready_name[k]);
        rt_program_write_global(p, ir_global_find(p->m, name), g[k]);
        grad_at[k] = p->globals[ir_global_find(p->m, name)];
        snprintf(name, sizeof name, "%s.adam_m", ready_name[k]);
        rt_program_write_global(p, ir_global_find(p->m, name), m[k]);
        snprintf(name, sizeof name, "%s.adam_v", ready_name[k]);
        rt_program_write_global(p, ir_global_find(p->m, name), v[k]);
        snprintf(name, sizeof name, "%s.bf16", ready_name[k]);
        copy_at[k] = p->globals[ir_global_find(p->m, name)];
    }
    rt_program_set_input(p, host, rt_program_find(p, host, IR_OP_INPUT, ir_role_of(IR_ROLE_LR)), &lr, sizeof lr);
    rt_program_set_input(p, host, rt_program_find(p, host, IR_OP_INPUT, ir_role_of(IR_ROLE_STEP)), &step, sizeof step);
    ncopies = 0;
    rt_host_start(p, host);
    rt_host_join(p);

    bool named = ncopies > 0, ordered = true;
    int chunks = 0, first[READY_PARAMS] = {-1, -1, -1}; /* each slot's first copy (its first wait) */
    for (int k = 0; k < READY_PARAMS; k++)
        chunks += 2 * ((ready_n[k] + READY_CHUNK - 1) / READY_CHUNK);
    for (int i = 0; i < ncopies; i++) {
        int k = copies[i].ready;
        named &= k >= 0 && k < READY_PARAMS;
        if (!named)
            break;
        const char *base = copies[i].to_host ? grad_at[k] : copy_at[k];
        size_t bytes = (size_t)ready_n[k] * (copies[i].to_host ? sizeof(float) : sizeof(uint16_t));
        named &= (const char *)copies[i].device >= base && (const char *)copies[i].device < base + bytes;
        if (first[k] < 0)
            first[k] = i;
        ordered &= copies[first[k]].to_host && (k == 0 || (first[k - 1] >= 0 && first[k - 1] < first[k]));
    }
    for (int k = 0; k < READY_PARAMS; k++)
        ordered &= first[k] >= 0;
    expect(named && ncopies == chunks, "every copy (each chunk down and up) waits for the mark of the parameter it moves");
    expect(named && ordered, "the waits follow the ready order: each parameter's first copy down (its first wait) "
                             "comes after the previous slot's first, c's, then a's (prefetched during c's last chunk), "
                             "then b's");

    bool same = true;
    for (int k = 0; k < READY_PARAMS; k++) {
        static float got[7000], ref[7000];
        static uint16_t copy[7000];
        memcpy(ref, w[k], sizeof ref);
        const ir_instr adamw = {.op = IR_OP_ADAMW, .attr = {0.9, 0.95, 1e-8, 0.01}};
        ir_type t = ir_tensor(IR_F32, 1, (int64_t[]){ready_n[k]}), sc = ir_scalar(IR_F32);
        void *args[7] = {ref, g[k], m[k], v[k], &lr, &step, &one};
        const ir_type *types[7] = {&t, &t, &t, &t, &sc, &sc, &sc};
        rt_kernel_call call = {&adamw, 7, 0, args, types, NULL, NULL};
        rt_cpu_adamw_range(&call, 0, ready_n[k]);
        char name[32];
        rt_program_read_global(p, ir_global_find(p->m, ready_name[k]), got);
        snprintf(name, sizeof name, "%s.bf16", ready_name[k]);
        rt_program_read_global(p, ir_global_find(p->m, name), copy);
        for (int i = 0; i < ready_n[k]; i++)
            same &= !memcmp(&got[i], &ref[i], sizeof(float)) && copy[i] == rt_f32_to_bf16(ref[i]);
    }
    expect(same, "each parameter's update and bf16 working copy equal the CPU kernel's, bit for bit");
    rt_program_free(p);
}

int main(void)
{
    setenv("MCC_HOST_OPTIMIZER_THREADS", "4", 1);
    setvbuf(stdout, NULL, _IOLBF, 0); /* a moment overrun clobbers the step and aborts: keep the case's header */
    for (size_t d = 0; d < sizeof moment_dtypes / sizeof moment_dtypes[0]; d++)
        for (int zero = 0; zero < 2; zero++)
            for (int overlap = 0; overlap < 2; overlap++)
                for (int chunked = 0; chunked < 2; chunked++)
                    run_case(zero, overlap, chunked ? 1500 : 0, moment_dtypes[d][0], moment_dtypes[d][1]);
    ready_case();
    isa_cases();
    bf16_cases();
    cpus_case();
    return fails ? 1 : 0;
}
