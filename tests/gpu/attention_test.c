/* attention_test.c — the CUDA attention launchers (forward and backward, bf16 and f32) against the
 * CPU oracle on the same bf16-rounded inputs: y, lse, dq, dk, dv, with the outputs poisoned with
 * NaN first so that a row the kernel never writes fails. Shapes cover T off the tile size, head
 * dims 16/64/128 and GQA ratios 1, 2, 4. bf16 runs once per implementation (MCC_ATTENTION=mcc,
 * and with cuDNN =cudnn, eagerly and once more recorded into a CUDA graph and replayed, as
 * train_rank runs it); a shape cuDNN has no engine for fails, naming the descriptor it refused. */
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

typedef struct {
    int B, T, H, Hk, D;
} attn_case;

static const attn_case attn_cases[] = {
    {2, 37, 4, 2, 16}, {1, 256, 8, 8, 64}, {2, 1024, 8, 2, 64}, {1, 512, 4, 4, 128},
};

/* Tolerances: relative error of norms. bf16 rounds y, P, dS and the outputs (2^-8 each); f32
 * differs from the BLAS oracle only in summation order. lse is f32 in both: max abs error. */
#define BF16_TOL 1e-2
#define F32_TOL 1e-4
#define LSE_TOL 1e-3


static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float rand_normal(void) /* Box-Muller on a xorshift generator */
{
    double u[2];
    for (int i = 0; i < 2; i++) {
        rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
        u[i] = ((rng_state >> 11) + 0.5) / 9007199254740992.0;
    }
    return (float)(sqrt(-2 * log(u[0])) * cos(6.283185307179586 * u[1]));
}

/* n bf16-representable normal values (so CPU and GPU see identical inputs) */
static float *rand_tensor(size_t n)
{
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = f32_of_bf16(bf16_of(rand_normal()));
    return x;
}

/* --- device buffers in a dtype ------------------------------------------------------------------ */

static size_t dsize(ir_dtype dt) { return dt == IR_BF16 ? 2 : 4; }

static void *dev_upload(const float *x, size_t n, ir_dtype dt)
{
    void *d, *h = malloc(n * dsize(dt));
    for (size_t i = 0; i < n; i++)
        if (dt == IR_BF16)
            ((uint16_t *)h)[i] = bf16_of(x[i]);
        else
            ((float *)h)[i] = x[i];
    RT_CUDART_CHECK(cudaMalloc(&d, n * dsize(dt)));
    RT_CUDART_CHECK(cudaMemcpy(d, h, n * dsize(dt), cudaMemcpyHostToDevice));
    free(h);
    return d;
}

/* A result buffer filled with NaN (all-ones bits in bf16 and f32). */
static void *dev_poisoned(size_t n, ir_dtype dt)
{
    void *d;
    RT_CUDART_CHECK(cudaMalloc(&d, n * dsize(dt)));
    RT_CUDART_CHECK(cudaMemset(d, 0xff, n * dsize(dt)));
    return d;
}

static float *dev_download(const void *d, size_t n, ir_dtype dt)
{
    void *h = malloc(n * dsize(dt));
    float *x = malloc(n * sizeof *x);
    RT_CUDART_CHECK(cudaMemcpy(h, d, n * dsize(dt), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++)
        x[i] = dt == IR_BF16 ? f32_of_bf16(((uint16_t *)h)[i]) : ((float *)h)[i];
    free(h);
    return x;
}

/* --- kernel calls --------------------------------------------------------------------------------- */

/* One ATTENTION / ATTENTION_GRAD call: q, y, dy, dq [B,T,H,D]; k, v, dk, dv [B,T,Hk,D]; lse f32 [B,H,T]. */
typedef struct {
    ir_instr in;
    ir_type qt, kt, lt;
    const ir_type *argt[6], *rest[3];
    rt_kernel_call call;
} attn_call;

static void attn_call_init(attn_call *a, ir_op op, const attn_case *s, ir_dtype dt, void *const *args,
                           void *const *res)
{
    memset(a, 0, sizeof *a);
    int64_t qd[4] = {s->B, s->T, s->H, s->D}, kd[4] = {s->B, s->T, s->Hk, s->D}, ld[3] = {s->B, s->H, s->T};
    a->qt = ir_tensor(dt, 4, qd), a->kt = ir_tensor(dt, 4, kd), a->lt = ir_tensor(IR_F32, 3, ld);
    a->in.op = op;
    if (op == IR_OP_ATTENTION) {
        const ir_type *at[] = {&a->qt, &a->kt, &a->kt}, *rt[] = {&a->qt, &a->lt};
        memcpy(a->argt, at, sizeof at), memcpy(a->rest, rt, sizeof rt);
        a->in.nargs = 3, a->in.nres = 2;
    } else {
        const ir_type *at[] = {&a->qt, &a->qt, &a->kt, &a->kt, &a->qt, &a->lt}, *rt[] = {&a->qt, &a->kt, &a->kt};
        memcpy(a->argt, at, sizeof at), memcpy(a->rest, rt, sizeof rt);
        a->in.nargs = 6, a->in.nres = 3;
    }
    a->call = (rt_kernel_call){&a->in, a->in.nargs, a->in.nres, args, a->argt, res, a->rest};
}

/* The CPU oracle's y, lse, dq, dk, dv (f32). */
typedef struct {
    float *q, *k, *v, *dy;     /* inputs, bf16-representable */
    float *y, *lse, *dq, *dk, *dv;
} attn_ref;

static attn_ref attn_reference(const attn_case *s)
{
    size_t nq = (size_t)s->B * s->T * s->H * s->D, nk = (size_t)s->B * s->T * s->Hk * s->D;
    attn_ref r = {.q = rand_tensor(nq), .k = rand_tensor(nk), .v = rand_tensor(nk), .dy = rand_tensor(nq)};
    r.y = malloc(nq * 4), r.lse = malloc((size_t)s->B * s->H * s->T * 4);
    r.dq = malloc(nq * 4), r.dk = malloc(nk * 4), r.dv = malloc(nk * 4);
    attn_call a;
    void *fa[] = {r.q, r.k, r.v}, *fr[] = {r.y, r.lse};
    attn_call_init(&a, IR_OP_ATTENTION, s, IR_F32, fa, fr);
    cpu_ATTENTION(&a.call);
    void *ga[] = {r.dy, r.q, r.k, r.v, r.y, r.lse}, *gr[] = {r.dq, r.dk, r.dv};
    attn_call_init(&a, IR_OP_ATTENTION_GRAD, s, IR_F32, ga, gr);
    cpu_ATTENTION_GRAD(&a.call);
    return r;
}

/* ||got - want|| / ||want||; infinite if got holds a NaN or an infinity. */
static double rel_error(const float *got, const float *want, size_t n)
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

static double max_abs_error(const float *got, const float *want, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = isfinite(got[i]) ? fmax(m, fabs(got[i] - want[i])) : INFINITY;
    return m;
}

/* Compares one downloaded result of implementation `impl`; prints it and returns whether it is
 * within tol. */
static bool check(const char *impl, const char *what, const void *dev, const float *want, size_t n, ir_dtype dt,
                  double tol, bool abs_err)
{
    float *got = dev_download(dev, n, dt);
    double e = abs_err ? max_abs_error(got, want, n) : rel_error(got, want, n);
    free(got);
    bool ok = e <= tol;
    printf("    %-5s %-4s %s error %.3g (tol %.0e)%s\n", impl, what, abs_err ? "max abs" : "rel", e, tol,
           ok ? "" : "  FAIL");
    return ok;
}

/* How a check runs the launchers: which implementation (MCC_ATTENTION) and whether recorded into
 * a CUDA graph and replayed (the same shape must have run eagerly before: that builds cuDNN's
 * plans and sizes the scratch, as a training step's first, eager call does). */
typedef struct {
    const char *impl;
    bool graph;
} attn_run;

/* The forward and then the backward, on the context's stream, as `run` says. */
static void attn_launch(rt_cuda_ctx *cx, const attn_case *s, ir_dtype dt, void *const *fa, void *const *fr,
                        void *const *ga, void *const *gr, attn_run run)
{
    cudaStream_t st = (cudaStream_t)rt_cuda_stream(cx);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    knob_setenv(KNOB_ATTENTION, run.impl);
    if (run.graph)
        RT_CUDART_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    attn_call a;
    attn_call_init(&a, IR_OP_ATTENTION, s, dt, fa, fr);
    cuda_ATTENTION(cx, &a.call);
    attn_call_init(&a, IR_OP_ATTENTION_GRAD, s, dt, ga, gr);
    cuda_ATTENTION_GRAD(cx, &a.call);
    if (run.graph) {
        RT_CUDART_CHECK(cudaStreamEndCapture(st, &graph));
        RT_CUDART_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        RT_CUDART_CHECK(cudaGraphLaunch(exec, st));
        RT_CUDART_CHECK(cudaStreamSynchronize(st));
        RT_CUDART_CHECK(cudaGraphExecDestroy(exec));
        RT_CUDART_CHECK(cudaGraphDestroy(graph));
    }
}

/* Runs forward and backward on the GPU in dtype dt and checks every result against the oracle.
 * The backward takes the GPU's own y and lse, as in training. */
static bool attn_check_gpu(rt_cuda_ctx *cx, const attn_case *s, const attn_ref *r, ir_dtype dt, attn_run run)
{
    size_t nq = (size_t)s->B * s->T * s->H * s->D, nk = (size_t)s->B * s->T * s->Hk * s->D;
    size_t nl = (size_t)s->B * s->H * s->T;
    double tol = dt == IR_BF16 ? BF16_TOL : F32_TOL;
    void *q = dev_upload(r->q, nq, dt), *k = dev_upload(r->k, nk, dt), *v = dev_upload(r->v, nk, dt);
    void *dy = dev_upload(r->dy, nq, dt), *y = dev_poisoned(nq, dt), *lse = dev_poisoned(nl, IR_F32);
    void *dq = dev_poisoned(nq, dt), *dk = dev_poisoned(nk, dt), *dv = dev_poisoned(nk, dt);
    RT_CUDART_CHECK(cudaDeviceSynchronize()); /* the context's stream does not wait for the default one */

    void *fa[] = {q, k, v}, *fr[] = {y, lse}, *ga[] = {dy, q, k, v, y, lse}, *gr[] = {dq, dk, dv};
    attn_launch(cx, s, dt, fa, fr, ga, gr, run);
    RT_CUDART_CHECK(cudaDeviceSynchronize());

    printf("  B=%d T=%d H=%d Hk=%d D=%d %s %s%s\n", s->B, s->T, s->H, s->Hk, s->D, ir_dtype_name(dt), run.impl,
           run.graph ? " (CUDA graph replay)" : "");
    bool ok = check(run.impl, "y", y, r->y, nq, dt, tol, false);
    ok &= check(run.impl, "lse", lse, r->lse, nl, IR_F32, dt == IR_BF16 ? LSE_TOL : F32_TOL, true);
    ok &= check(run.impl, "dq", dq, r->dq, nq, dt, tol, false);
    ok &= check(run.impl, "dk", dk, r->dk, nk, dt, tol, false);
    ok &= check(run.impl, "dv", dv, r->dv, nk, dt, tol, false);
    void *bufs[] = {q, k, v, dy, y, lse, dq, dk, dv};
    for (int i = 0; i < 9; i++)
        RT_CUDART_CHECK(cudaFree(bufs[i]));
    return ok;
}

#ifdef MCC_HAVE_CUDNN
/* The bf16 case through cuDNN, eagerly and then replayed from a CUDA graph; when cuDNN has no
 * engine for the shape, fails saying why (the descriptor it refused and its message). */
static int attn_check_cudnn(rt_cuda_ctx *cx, const attn_case *s, const attn_ref *r)
{
    const char *why = NULL;
    cudnn_attn_shape shape = {s->B, s->T, s->H, s->Hk, s->D, (float)(1.0 / sqrt((double)s->D))};
    if (!cudnn_attn_get(&shape, &why, NULL)) {
        printf("  B=%d T=%d H=%d Hk=%d D=%d bf16 cudnn: no plan: %s  FAIL\n", s->B, s->T, s->H, s->Hk, s->D, why);
        return 1;
    }
    int failed = !attn_check_gpu(cx, s, r, IR_BF16, (attn_run){"cudnn", false});
    return failed + !attn_check_gpu(cx, s, r, IR_BF16, (attn_run){"cudnn", true});
}
#endif

int main(void)
{
    char err[8192];
    void *image;
    size_t size;
    if (!cg_cuda_compile_kernels(&image, &size, err, sizeof err)) {
        fprintf(stderr, "attention_test: %s\n", err);
        return 1;
    }
    RT_CUDART_CHECK(cudaSetDevice(0));
    rt_cuda_ctx *cx = rt_cuda_ctx_create(image, err, sizeof err);
    if (!cx) {
        fprintf(stderr, "attention_test: %s\n", err);
        return 1;
    }
    int failed = 0;
    for (size_t i = 0; i < sizeof attn_cases / sizeof attn_cases[0]; i++) {
        attn_ref r = attn_reference(&attn_cases[i]);
        failed += !attn_check_gpu(cx, &attn_cases[i], &r, IR_BF16, (attn_run){"mcc", false});
#ifdef MCC_HAVE_CUDNN
        failed += attn_check_cudnn(cx, &attn_cases[i], &r);
#endif
        failed += !attn_check_gpu(cx, &attn_cases[i], &r, IR_F32, (attn_run){"mcc", false});
        float *bufs[] = {r.q, r.k, r.v, r.dy, r.y, r.lse, r.dq, r.dk, r.dv};
        for (int j = 0; j < 9; j++)
            free(bufs[j]);
    }
    rt_cuda_ctx_free(cx);
    free(image);
    printf(failed ? "attention_test: %d FAILED\n" : "attention_test: all passed\n", failed);
    return failed != 0;
}
