/* dropout_test.c — dropout on the GPU against the CPU oracle (label gpu; needs an sm_90 GPU):
 * (1) Philox4x32-10 of kernels_templates/philox.cuh, compiled by NVRTC, gives Random123's known
 *     answers;
 * (2) the dropout op (f32 and bf16; 16-byte and scalar paths; a whole tensor, a sequence slice, a
 *     column block, in place, a context-parallel rank's chunks and a slice of them) gives the CPU's result bit for bit: the same elements dropped, the
 *     kept ones x / (1-p) rounded once;
 * (3) attention with dropout, forward and backward, bf16 and f32, against the CPU's y, lse, dq,
 *     dk, dv on random inputs (with head offsets and grouped-query heads), and on inputs that make
 *     y and dv show the masks themselves (q = 0, v and dy one-hot), whose zeros must be the CPU's
 *     exactly. Outputs are poisoned with NaN first, so an element never written fails. */
#include "codegen/cuda/cuda_codegen.h"
#include "codegen/cuda/kernel_sources.h"
#include "runtime/cuda/cuda_ctx.h"
#include "runtime/dropout.h"
#include "tests/gpu/gpu_util.h"

#include <cuda_runtime.h>
#include <math.h>
#include <nvrtc.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("FAIL ", stdout);
    vprintf(fmt, ap);
    putchar('\n');
    va_end(ap);
    failures++;
}

/* --- device buffers ------------------------------------------------------------------------------ */

static size_t dsize(ir_dtype dt) { return ir_dtype_size(dt); }

/* n floats to the device in dtype dt (bf16: they must be bf16-representable) */
static void *upload(const float *x, size_t n, ir_dtype dt)
{
    void *d, *h = malloc(n * dsize(dt) + 1);
    for (size_t i = 0; i < n; i++)
        if (dt == IR_BF16)
            ((uint16_t *)h)[i] = bf16_of(x[i]);
        else
            ((float *)h)[i] = x[i];
    RT_CUDART_CHECK(cudaMalloc(&d, n * dsize(dt) + 1));
    RT_CUDART_CHECK(cudaMemcpy(d, h, n * dsize(dt), cudaMemcpyHostToDevice));
    free(h);
    return d;
}

/* A result buffer of NaNs (all-ones bits in bf16 and f32). */
static void *poisoned(size_t n, ir_dtype dt)
{
    void *d;
    RT_CUDART_CHECK(cudaMalloc(&d, n * dsize(dt) + 1));
    RT_CUDART_CHECK(cudaMemset(d, 0xff, n * dsize(dt)));
    return d;
}

static float *download(const void *d, size_t n, ir_dtype dt)
{
    void *h = malloc(n * dsize(dt) + 1);
    float *x = malloc(n * sizeof *x + 1);
    RT_CUDART_CHECK(cudaMemcpy(h, d, n * dsize(dt), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++)
        x[i] = dt == IR_BF16 ? f32_of_bf16(((uint16_t *)h)[i]) : ((float *)h)[i];
    free(h);
    return x;
}

static void *upload_sample(int64_t s)
{
    void *d;
    RT_CUDART_CHECK(cudaMalloc(&d, sizeof s));
    RT_CUDART_CHECK(cudaMemcpy(d, &s, sizeof s, cudaMemcpyHostToDevice));
    return d;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double uniform(void) /* [0, 1) */
{
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

/* n bf16-representable values in [lo, hi) */
static float *values(size_t n, double lo, double hi)
{
    float *x = malloc(n * sizeof *x + 1);
    for (size_t i = 0; i < n; i++)
        x[i] = f32_of_bf16(bf16_of((float)(lo + (hi - lo) * uniform())));
    return x;
}

/* --- (1) Philox on the GPU ------------------------------------------------------------------------- */

static const char *const kat_kernel =
    "#include \"philox.cuh\"\n"
    "extern \"C\" __global__ void philox_kat(const unsigned *in, unsigned *out)\n"
    "{\n"
    "    const unsigned *t = in + 6 * threadIdx.x;\n"
    "    mcc_philox4x32 c = {{t[0], t[1], t[2], t[3]}}, r = mcc_philox4x32_10(c, t[4], t[5]);\n"
    "    for (int k = 0; k < 4; k++)\n"
    "        out[4 * threadIdx.x + k] = r.v[k];\n"
    "}\n";

/* kernels_templates/philox.cuh as mcc embeds it */
static const char *philox_source(void)
{
    for (int i = 0; i < cg_num_kernel_sources; i++)
        if (!strcmp(cg_kernel_sources[i].name, "philox.cuh"))
            return cg_kernel_sources[i].text;
    fprintf(stderr, "dropout_test: philox.cuh is not among the embedded kernel templates\n");
    exit(1);
}

static void *nvrtc_cubin(const char *src, const char *header_name, const char *header)
{
    nvrtcProgram prog;
    const char *opts[] = {"--gpu-architecture=sm_90", "--std=c++17"};
    if (nvrtcCreateProgram(&prog, src, "philox_kat.cu", 1, &header, &header_name) != NVRTC_SUCCESS ||
        nvrtcCompileProgram(prog, 2, opts) != NVRTC_SUCCESS) {
        size_t n = 0;
        nvrtcGetProgramLogSize(prog, &n);
        char *log = malloc(n + 1);
        nvrtcGetProgramLog(prog, log);
        fprintf(stderr, "dropout_test: NVRTC cannot compile the Philox kernel:\n%s\n", log);
        exit(1);
    }
    size_t size;
    nvrtcGetCUBINSize(prog, &size);
    void *image = malloc(size);
    nvrtcGetCUBIN(prog, image);
    nvrtcDestroyProgram(&prog);
    return image;
}

/* Random123's tests/kat_vectors, the three "philox4x32 10" lines: counter, key -> result. */
static void test_philox(void)
{
    static const unsigned int in[3][6] = {{0, 0, 0, 0, 0, 0},
                                          {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
                                          {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0}};
    static const unsigned int want[3][4] = {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
                                            {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
                                            {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}};
    char err[1024];
    void *image = nvrtc_cubin(kat_kernel, "philox.cuh", philox_source());
    rt_cuda_ctx *cx = rt_cuda_ctx_create(image, err, sizeof err);
    if (!cx) {
        fprintf(stderr, "dropout_test: %s\n", err);
        exit(1);
    }
    void *din, *dout;
    unsigned int got[3][4];
    RT_CUDART_CHECK(cudaMalloc(&din, sizeof in));
    RT_CUDART_CHECK(cudaMalloc(&dout, sizeof got));
    RT_CUDART_CHECK(cudaMemcpy(din, in, sizeof in, cudaMemcpyHostToDevice));
    void *params[] = {&din, &dout};
    rt_cuda_launch(cx, "philox_kat", 1, 1, 1, 3, 0, params);
    RT_CUDART_CHECK(cudaStreamSynchronize((cudaStream_t)rt_cuda_stream(cx)));
    RT_CUDART_CHECK(cudaMemcpy(got, dout, sizeof got, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 3; i++)
        if (memcmp(got[i], want[i], sizeof got[i]))
            fail("philox4x32-10 on the GPU, known answer %d: %08x %08x %08x %08x", i, got[i][0], got[i][1], got[i][2],
                 got[i][3]);
    printf("philox4x32-10 on the GPU: %s\n", memcmp(got, want, sizeof got) ? "WRONG" : "Random123's known answers");
    cudaFree(din), cudaFree(dout);
    rt_cuda_ctx_free(cx);
    free(image);
}

/* --- (2) the dropout op ------------------------------------------------------------------------------ */

typedef struct {
    const char *what;
    int64_t dims[3];
    double attr[IR_MAX_ATTRS]; /* p, seed, site, dim, offset, extent, cp, cp_rank, normal */
    bool in_place;
} dropout_case;

static const dropout_case dropout_cases[] = {
    {"[3,67,768] whole (16-byte loads)", {3, 67, 768}, {0.1, 1234, 3, 1, 0, 67}, false},
    {"[3,67,768] whole, in place", {3, 67, 768}, {0.1, 1234, 3, 1, 0, 67}, true},
    {"[2,33,100] sequence slice [33,66) of 99 (scalar path)", {2, 33, 100}, {0.5, 99, 8, 1, 33, 99}, false},
    {"[2,16,256] columns [256,512) of 1024", {2, 16, 256}, {0.3, 7, 2, 2, 256, 1024}, false},
    /* context parallelism: rank 1 of 4's balanced chunks; a sequence-parallel slice of them crossing
       from the first chunk to the second; batch rows split beside them */
    {"[2,64,96] cp 4 rank 1", {2, 64, 96}, {0.1, 1234, 3, 1, 0, 64, 4, 1}, false},
    {"[2,24,100] tokens [8,32) of cp 4 rank 1's 48 (scalar path)", {2, 24, 100}, {0.2, 5, 1, 1, 8, 48, 4, 1}, false},
    {"[2,32,64] batch rows 2.. under cp 2 rank 1", {2, 32, 64}, {0.1, 9, 2, 0, 2, 0, 2, 1}, false},
    /* normal=1 (--moe-router-force-load-balancing's logits): standard normal values, to libm's and
       CUDA's last bits of log, sqrt, sin and cos */
    {"[2,64,8] normal values", {2, 64, 8}, {0, 1234, (1 << 30) + 3, 1, 0, 64, 0, 0, 1}, false},
    {"[2,24,6] normal values, cp 4 rank 1's tokens [8,32) of 48 (scalar path)", {2, 24, 6},
     {0, 5, (1 << 30) + 1, 1, 8, 48, 4, 1, 1}, false},
};

/* Runs one case in dtype dt; the GPU's result must be the CPU's, rounded to dt (exactly). */
static void dropout_check(rt_cuda_ctx *cx, const dropout_case *dc, ir_dtype dt)
{
    const int64_t first = 6000000007ll;
    ir_type ft = ir_tensor(IR_F32, 3, dc->dims), gt = ir_tensor(dt, 3, dc->dims), st = ir_scalar(IR_I64);
    size_t n = (size_t)ir_numel(&ft);
    float *x = values(n, -2, 2), *want = malloc(n * sizeof *want);
    ir_instr in = {.op = IR_OP_DROPOUT, .nargs = 2, .nres = 1};
    memcpy(in.attr, dc->attr, sizeof in.attr);

    int64_t host_first = first;
    void *cargs[2] = {x, &host_first}, *cres[1] = {want};
    const ir_type *cat[2] = {&ft, &st}, *crt[1] = {&ft};
    rt_kernel_call cc = {&in, 2, 1, cargs, cat, cres, crt};
    rt_cpu_kernels[IR_OP_DROPOUT](&cc);

    void *dx = upload(x, n, dt), *dfirst = upload_sample(first), *dr = dc->in_place ? dx : poisoned(n, dt);
    RT_CUDART_CHECK(cudaDeviceSynchronize());
    void *gargs[2] = {dx, dfirst}, *gres[1] = {dr};
    const ir_type *gat[2] = {&gt, &st}, *grt[1] = {&gt};
    rt_kernel_call gc = {&in, 2, 1, gargs, gat, gres, grt};
    cuda_DROPOUT(cx, &gc);
    RT_CUDART_CHECK(cudaStreamSynchronize((cudaStream_t)rt_cuda_stream(cx)));
    float *got = download(dr, n, dt);

    bool normal = dc->attr[IR_ATTR_DROPOUT_NORMAL] != 0; /* transcendental: within an ulp or two of dt */
    double tol = normal ? (dt == IR_BF16 ? 1.0 / 128 : 1e-5) : 0;
    size_t wrong = 0, dropped = 0, first_wrong = 0;
    for (size_t i = 0; i < n; i++) {
        float w = dt == IR_BF16 ? f32_of_bf16(bf16_of(want[i])) : want[i];
        dropped += want[i] == 0;
        bool differs = normal ? !(fabs((double)got[i] - w) <= tol * fmax(1.0, fabs(w))) : memcmp(&w, &got[i], sizeof w);
        if (differs && !wrong++)
            first_wrong = i;
    }
    if (wrong)
        fail("dropout %s %s: %zu of %zu elements differ from the CPU's, first %zu: gpu %g cpu %g", ir_dtype_name(dt),
             dc->what, wrong, n, first_wrong, got[first_wrong], want[first_wrong]);
    printf("%s dropout %-5s %s: %zu of %zu dropped (p %.1f)\n", wrong ? "FAIL" : "ok  ", ir_dtype_name(dt), dc->what,
           dropped, n, dc->attr[0]);
    if (!dc->in_place)
        cudaFree(dr);
    cudaFree(dx), cudaFree(dfirst);
    free(x), free(want), free(got);
}

/* --- (3) attention with dropout ---------------------------------------------------------------------- */

typedef struct {
    int B, T, H, Hk, D, head_offset, heads;
    bool expose; /* q = 0, v and dy one-hot (needs T <= D, Hk = H): y and dv show the masks */
} attn_case;

static const attn_case attn_cases[] = {
    {2, 37, 4, 2, 16, 0, 4, false},   {1, 256, 8, 8, 64, 8, 16, false}, {2, 200, 8, 2, 64, 0, 8, false},
    {1, 128, 4, 4, 128, 4, 8, false}, {2, 64, 2, 2, 64, 3, 8, true},    {1, 37, 2, 2, 64, 0, 2, true},
    {1, 128, 2, 2, 128, 6, 8, true},
};

/* Tolerances as tests/gpu/attention_test.c: relative error of norms; lse max abs. */
#define BF16_TOL 1e-2
#define F32_TOL 1e-4
#define LSE_TOL 1e-3

/* q, dy [B,T,H,D]; k, v [B,T,Hk,D] */
typedef struct {
    float *q, *k, *v, *dy;
} attn_inputs;

static attn_inputs attn_inputs_of(const attn_case *s)
{
    size_t nq = (size_t)s->B * s->T * s->H * s->D, nk = (size_t)s->B * s->T * s->Hk * s->D;
    if (!s->expose)
        return (attn_inputs){values(nq, -2, 2), values(nk, -2, 2), values(nk, -2, 2), values(nq, -2, 2)};
    attn_inputs in = {calloc(nq, 4), calloc(nk, 4), calloc(nk, 4), calloc(nq, 4)};
    for (size_t i = 0; i < nk; i++) /* v[b,j,h,d] = (d == j) */
        in.v[i] = (float)(i % s->D == i / ((size_t)s->D * s->Hk) % s->T);
    for (size_t i = 0; i < nq; i++) /* dy[b,t,h,d] = (d == t) */
        in.dy[i] = (float)(i % s->D == i / ((size_t)s->D * s->H) % s->T);
    return in;
}

/* One call of attention_dropout (grad = false: (q, k, v, first) -> y, lse) or its gradient
 * ((dy, q, k, v, y, lse, first) -> dq, dk, dv) on buffers of dtype dt. */
typedef struct {
    ir_instr in;
    ir_type qt, kt, lt, st;
    const ir_type *argt[7], *rest[3];
    void *args[7], *res[3];
    rt_kernel_call call;
} attn_call;

static void attn_call_init(attn_call *a, bool grad, const attn_case *s, ir_dtype dt, void *const *args, void *const *res)
{
    memset(a, 0, sizeof *a);
    int64_t qd[4] = {s->B, s->T, s->H, s->D}, kd[4] = {s->B, s->T, s->Hk, s->D}, ld[3] = {s->B, s->H, s->T};
    a->qt = ir_tensor(dt, 4, qd), a->kt = ir_tensor(dt, 4, kd), a->lt = ir_tensor(IR_F32, 3, ld), a->st = ir_scalar(IR_I64);
    a->in = (ir_instr){.op = grad ? IR_OP_ATTENTION_DROPOUT_GRAD : IR_OP_ATTENTION_DROPOUT, .nargs = grad ? 7 : 4,
                       .nres = grad ? 3 : 2, .attr = {0.2, 4321, 11, s->head_offset, s->heads}};
    const ir_type *fa[] = {&a->qt, &a->kt, &a->kt, &a->st}, *fr[] = {&a->qt, &a->lt};
    const ir_type *ga[] = {&a->qt, &a->qt, &a->kt, &a->kt, &a->qt, &a->lt, &a->st}, *gr[] = {&a->qt, &a->kt, &a->kt};
    memcpy(a->argt, grad ? ga : fa, sizeof(ir_type *) * (size_t)a->in.nargs);
    memcpy(a->rest, grad ? gr : fr, sizeof(ir_type *) * (size_t)a->in.nres);
    memcpy(a->args, args, sizeof(void *) * (size_t)a->in.nargs);
    memcpy(a->res, res, sizeof(void *) * (size_t)a->in.nres);
    a->call = (rt_kernel_call){&a->in, a->in.nargs, a->in.nres, a->args, a->argt, a->res, a->rest};
}

/* The CPU oracle's y, lse, dq, dk, dv (f32). */
typedef struct {
    float *out[5];
} attn_ref;

static const char *const attn_out_names[5] = {"y", "lse", "dq", "dk", "dv"};

static void attn_sizes(const attn_case *s, size_t n[5])
{
    size_t nq = (size_t)s->B * s->T * s->H * s->D, nk = (size_t)s->B * s->T * s->Hk * s->D;
    size_t sizes[5] = {nq, (size_t)s->B * s->H * s->T, nq, nk, nk};
    memcpy(n, sizes, sizeof sizes);
}

static const int64_t ATTN_FIRST = 4000000001ll;

static attn_ref attn_reference(const attn_case *s, const attn_inputs *in)
{
    size_t n[5];
    attn_sizes(s, n);
    attn_ref r;
    for (int i = 0; i < 5; i++)
        r.out[i] = malloc(n[i] * 4 + 1);
    int64_t first = ATTN_FIRST;
    attn_call a;
    void *fa[] = {in->q, in->k, in->v, &first}, *fr[] = {r.out[0], r.out[1]};
    attn_call_init(&a, false, s, IR_F32, fa, fr);
    rt_cpu_kernels[IR_OP_ATTENTION_DROPOUT](&a.call);
    void *ga[] = {in->dy, in->q, in->k, in->v, r.out[0], r.out[1], &first}, *gr[] = {r.out[2], r.out[3], r.out[4]};
    attn_call_init(&a, true, s, IR_F32, ga, gr);
    rt_cpu_kernels[IR_OP_ATTENTION_DROPOUT_GRAD](&a.call);
    return r;
}

/* ||got - want|| / ||want||; infinite if got holds a NaN or an infinity. */
static double rel_error(const float *got, const float *want, size_t n, bool max_abs)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i]))
            return INFINITY;
        double d = fabs((double)got[i] - want[i]);
        num = max_abs ? fmax(num, d) : num + d * d;
        den += (double)want[i] * want[i];
    }
    return max_abs ? num : sqrt(num / (den > 0 ? den : 1));
}

/* Elements where exactly one of got, want is zero. */
static size_t zero_mismatches(const float *got, const float *want, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += (got[i] == 0) != (want[i] == 0);
    return bad;
}

/* Forward and backward on the GPU in dtype dt (the backward takes the GPU's y and lse, as in
 * training), each output against the oracle. */
static void attn_check(rt_cuda_ctx *cx, const attn_case *s, const attn_inputs *in, const attn_ref *r, ir_dtype dt)
{
    size_t n[5];
    attn_sizes(s, n);
    void *q = upload(in->q, n[0], dt), *k = upload(in->k, n[3], dt), *v = upload(in->v, n[3], dt);
    void *dy = upload(in->dy, n[0], dt), *first = upload_sample(ATTN_FIRST), *out[5];
    for (int i = 0; i < 5; i++)
        out[i] = poisoned(n[i], i == 1 ? IR_F32 : dt);
    RT_CUDART_CHECK(cudaDeviceSynchronize()); /* the context's stream does not wait for the default one */
    attn_call a;
    void *fa[] = {q, k, v, first}, *fr[] = {out[0], out[1]};
    attn_call_init(&a, false, s, dt, fa, fr);
    cuda_ATTENTION_DROPOUT(cx, &a.call);
    void *ga[] = {dy, q, k, v, out[0], out[1], first}, *gr[] = {out[2], out[3], out[4]};
    attn_call_init(&a, true, s, dt, ga, gr);
    cuda_ATTENTION_DROPOUT_GRAD(cx, &a.call);
    RT_CUDART_CHECK(cudaDeviceSynchronize());

    char what[96];
    snprintf(what, sizeof what, "B=%d T=%d H=%d Hk=%d D=%d heads [%d,%d) of %d%s %s", s->B, s->T, s->H, s->Hk, s->D,
             s->head_offset, s->head_offset + s->H, s->heads, s->expose ? " (masks shown)" : "", ir_dtype_name(dt));
    for (int i = 0; i < 5; i++) {
        float *got = download(out[i], n[i], i == 1 ? IR_F32 : dt);
        if (s->expose && (i == 0 || i == 4)) { /* y and dv are the masks (scaled), exactly */
            size_t bad = zero_mismatches(got, r->out[i], n[i]);
            if (bad)
                fail("attention dropout %s: %s drops %zu elements other than the CPU's", what, attn_out_names[i], bad);
        }
        bool lse = i == 1;
        double tol = lse ? (dt == IR_BF16 ? LSE_TOL : F32_TOL) : dt == IR_BF16 ? BF16_TOL : F32_TOL;
        double e = rel_error(got, r->out[i], n[i], lse);
        if (!(e <= tol))
            fail("attention dropout %s: %s error %.3g > %.0e", what, attn_out_names[i], e, tol);
        free(got);
    }
    printf("done attention dropout %s\n", what);
    void *bufs[] = {q, k, v, dy, first, out[0], out[1], out[2], out[3], out[4]};
    for (int i = 0; i < 10; i++)
        cudaFree(bufs[i]);
}

int main(void)
{
    char err[8192];
    void *image;
    size_t size;
    RT_CUDART_CHECK(cudaSetDevice(0));
    test_philox();
    if (!cg_cuda_compile_kernels(&image, &size, err, sizeof err)) {
        fprintf(stderr, "dropout_test: %s\n", err);
        return 1;
    }
    rt_cuda_ctx *cx = rt_cuda_ctx_create(image, err, sizeof err);
    if (!cx) {
        fprintf(stderr, "dropout_test: %s\n", err);
        return 1;
    }
    ir_dtype dtypes[] = {IR_F32, IR_BF16};
    for (size_t i = 0; i < sizeof dropout_cases / sizeof dropout_cases[0]; i++)
        for (int d = 0; d < 2; d++)
            dropout_check(cx, &dropout_cases[i], dtypes[d]);
    for (size_t i = 0; i < sizeof attn_cases / sizeof attn_cases[0]; i++) {
        attn_inputs in = attn_inputs_of(&attn_cases[i]);
        attn_ref r = attn_reference(&attn_cases[i], &in);
        for (int d = 0; d < 2; d++)
            attn_check(cx, &attn_cases[i], &in, &r, dtypes[d]);
        free(in.q), free(in.k), free(in.v), free(in.dy);
        for (int j = 0; j < 5; j++)
            free(r.out[j]);
    }
    rt_cuda_ctx_free(cx);
    free(image);
    printf(failures ? "dropout_test: %d check(s) FAILED\n" : "dropout_test: all passed\n", failures);
    return failures != 0;
}
