/* attention_test.c — the CUDA attention launchers (forward and backward, bf16 and f32) against the
 * CPU oracle on the same bf16-rounded inputs: y, lse, dq, dk, dv, with the outputs poisoned with
 * NaN first so that a row the kernel never writes fails. Shapes cover T off the tile size, head
 * dims 16/64/128 and GQA ratios 1, 2, 4. bf16 runs once per implementation (MCC_ATTENTION=mcc,
 * and with cuDNN =cudnn, eagerly and once more recorded into a CUDA graph and replayed, as
 * train_rank runs it); a shape cuDNN has no engine for fails, naming the descriptor it refused.
 * Multi-latent attention's values narrower than q and k (mla_cases: DeepSeek-V3's D 192, Dv 128, and
 * tiny-deepseek-v3's 24 and 16) run through cuDNN only, bf16 (mcc's kernels take one head dim; the
 * launcher routes them to cuDNN whatever MCC_ATTENTION says), skipped in a build without cuDNN.
 * Context parallelism (cp_cases, below): one cp rank's queries against every rank's keys gathered
 * and against each ring piece, and the pieces merged. ATTENTION_TEST_ONLY=plain|mla|cp runs the
 * plain cases with the mla ones, the mla ones alone, or the cp half (tests/gpu/emulate/run.sh runs
 * the cp half on the host). */
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
    int B, T, H, Hk, D, Dv; /* Dv: v and y's head width */
} attn_case;

static const attn_case attn_cases[] = {
    {2, 37, 4, 2, 16, 16}, {1, 256, 8, 8, 64, 64}, {2, 1024, 8, 2, 64, 64}, {1, 512, 4, 4, 128, 128},
};

/* Values narrower than q and k (cuDNN only): DeepSeek-V3's heads (128 + 64 rope, values 128), T off a
 * multiple of 128 too, and tiny-deepseek-v3's (16 + 8, values 16). */
static const attn_case mla_cases[] = {
    {2, 256, 4, 4, 192, 128}, {1, 200, 2, 2, 192, 128}, {2, 64, 4, 4, 24, 16},
};

static int attn_dv(const attn_case *s) { return s->Dv; }

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

typedef gpu_attn_call attn_call;

static void attn_call_init(attn_call *a, ir_op op, const attn_case *s, int Tk, const double *attr, ir_dtype dt,
                           void *const *args, void *const *res)
{
    gpu_attn_call_init_dv(a, op, (int[]){s->B, s->T, Tk, s->H, s->Hk, s->D, attn_dv(s)}, attr, dt, args, res);
}

/* The CPU oracle's y, lse, dq, dk, dv (f32); v, dv, y, dy are Dv wide. */
typedef struct {
    float *q, *k, *v, *dy;     /* inputs, bf16-representable */
    float *y, *lse, *dq, *dk, *dv;
} attn_ref;

static attn_ref attn_reference(const attn_case *s)
{
    size_t nq = (size_t)s->B * s->T * s->H * s->D, nk = (size_t)s->B * s->T * s->Hk * s->D;
    size_t ny = (size_t)s->B * s->T * s->H * attn_dv(s), nv = (size_t)s->B * s->T * s->Hk * attn_dv(s);
    attn_ref r = {.q = rand_tensor(nq), .k = rand_tensor(nk), .v = rand_tensor(nv), .dy = rand_tensor(ny)};
    r.y = malloc(ny * 4), r.lse = malloc((size_t)s->B * s->H * s->T * 4);
    r.dq = malloc(nq * 4), r.dk = malloc(nk * 4), r.dv = malloc(nv * 4);
    attn_call a;
    void *fa[] = {r.q, r.k, r.v}, *fr[] = {r.y, r.lse};
    attn_call_init(&a, IR_OP_ATTENTION, s, s->T, NULL, IR_F32, fa, fr);
    cpu_ATTENTION(&a.call);
    void *ga[] = {r.dy, r.q, r.k, r.v, r.y, r.lse}, *gr[] = {r.dq, r.dk, r.dv};
    attn_call_init(&a, IR_OP_ATTENTION_GRAD, s, s->T, NULL, IR_F32, ga, gr);
    cpu_ATTENTION_GRAD(&a.call);
    return r;
}

/* max |got - want|; infinite if got holds a NaN or an infinity want does not (a row that sees no key
 * has lse -inf on both sides) */
static double max_abs_error(const float *got, const float *want, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = got[i] == want[i] ? m : isfinite(got[i]) ? fmax(m, fabs(got[i] - want[i])) : INFINITY;
    return m;
}

/* Compares one downloaded result of implementation `impl`; prints it and returns whether it is
 * within tol. */
static bool check(const char *impl, const char *what, const void *dev, const float *want, size_t n, ir_dtype dt,
                  double tol, bool abs_err)
{
    float *got = dev_download(dev, n, dt);
    double e = abs_err ? max_abs_error(got, want, n) : gpu_rel_error(got, want, n);
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
    attn_call_init(&a, IR_OP_ATTENTION, s, s->T, NULL, dt, fa, fr);
    cuda_ATTENTION(cx, &a.call);
    attn_call_init(&a, IR_OP_ATTENTION_GRAD, s, s->T, NULL, dt, ga, gr);
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
    size_t ny = (size_t)s->B * s->T * s->H * attn_dv(s), nv = (size_t)s->B * s->T * s->Hk * attn_dv(s);
    size_t nl = (size_t)s->B * s->H * s->T;
    double tol = dt == IR_BF16 ? BF16_TOL : F32_TOL;
    void *q = dev_upload(r->q, nq, dt), *k = dev_upload(r->k, nk, dt), *v = dev_upload(r->v, nv, dt);
    void *dy = dev_upload(r->dy, ny, dt), *y = dev_poisoned(ny, dt), *lse = dev_poisoned(nl, IR_F32);
    void *dq = dev_poisoned(nq, dt), *dk = dev_poisoned(nk, dt), *dv = dev_poisoned(nv, dt);
    RT_CUDART_CHECK(cudaDeviceSynchronize()); /* the context's stream does not wait for the default one */

    void *fa[] = {q, k, v}, *fr[] = {y, lse}, *ga[] = {dy, q, k, v, y, lse}, *gr[] = {dq, dk, dv};
    attn_launch(cx, s, dt, fa, fr, ga, gr, run);
    RT_CUDART_CHECK(cudaDeviceSynchronize());

    printf("  B=%d T=%d H=%d Hk=%d D=%d Dv=%d %s %s%s\n", s->B, s->T, s->H, s->Hk, s->D, attn_dv(s),
           ir_dtype_name(dt), run.impl, run.graph ? " (CUDA graph replay)" : "");
    bool ok = check(run.impl, "y", y, r->y, ny, dt, tol, false);
    ok &= check(run.impl, "lse", lse, r->lse, nl, IR_F32, dt == IR_BF16 ? LSE_TOL : F32_TOL, true);
    ok &= check(run.impl, "dq", dq, r->dq, nq, dt, tol, false);
    ok &= check(run.impl, "dk", dk, r->dk, nk, dt, tol, false);
    ok &= check(run.impl, "dv", dv, r->dv, nv, dt, tol, false);
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
    cudnn_attn_shape shape = {s->B, s->T, s->H, s->Hk, s->D, attn_dv(s), (float)(1.0 / sqrt((double)s->D))};
    if (!cudnn_attn_get(&shape, &why, NULL)) {
        printf("  B=%d T=%d H=%d Hk=%d D=%d Dv=%d bf16 cudnn: no plan: %s  FAIL\n", s->B, s->T, s->H, s->Hk, s->D,
               attn_dv(s), why);
        return 1;
    }
    int failed = !attn_check_gpu(cx, s, r, IR_BF16, (attn_run){"cudnn", false});
    return failed + !attn_check_gpu(cx, s, r, IR_BF16, (attn_run){"cudnn", true});
}
#endif

/* --- context parallelism ----------------------------------------------------------------------- */

/* cp ranks, each holding two balanced chunks of c tokens (T = 2c; the whole sequence 2 cp c). */
typedef struct {
    int cp, B, c, H, Hk, D;
} cp_case;

static const cp_case cp_cases[] = {
    {2, 1, 40, 4, 2, 16},  /* chunks off the tiles (64): partial tiles at every chunk's end */
    {4, 2, 64, 4, 1, 16},  /* chunks of whole tiles, GQA 4:1 */
    {2, 1, 128, 4, 2, 64}, /* llama's head dim and its tiles (forward 128 x 64, backward 64 x 128) */
};

/* x [B, 2 cp c, n] -> rank r's tokens [B, 2c, n] (ir_cp_position) */
static float *cp_rows(const cp_case *s, const float *x, int r, int n)
{
    int64_t T = 2 * s->c, S = T * s->cp;
    float *l = malloc((size_t)s->B * T * n * sizeof *l);
    for (int64_t b = 0; b < s->B; b++)
        for (int64_t t = 0; t < T; t++)
            memcpy(l + (b * T + t) * n, x + (b * S + ir_cp_position(t, T, s->cp, r)) * n, (size_t)n * sizeof *l);
    return l;
}

/* x [B, 2 cp c, n] -> every rank's tokens in rank order [B, cp 2c, n] (what all_gather_seq makes) */
static float *cp_gathered(const cp_case *s, const float *x, int n)
{
    int64_t T = 2 * s->c;
    float *g = malloc((size_t)s->B * T * s->cp * n * sizeof *g);
    for (int r = 0; r < s->cp; r++) {
        float *l = cp_rows(s, x, r, n);
        for (int64_t b = 0; b < s->B; b++)
            memcpy(g + (b * s->cp + r) * T * n, l + b * T * n, (size_t)T * n * sizeof *g);
        free(l);
    }
    return g;
}

/* One ring piece on the host, in double: rank qr's queries q, dy [B,T,H,D] against rank kr's keys
 * k, v [B,T,Hk,D] under the causal mask of their positions. Forward: y, lse (a row that sees no
 * key: 0 and -inf). Backward (dq not NULL), from the whole ring's y and lse (ym, lsem): FA2's
 * P = exp(scale q k - lsem), dS = P (dy v - rowsum(dy ym)); dq = scale dS k, dk = scale dS^T q,
 * dv = P^T dy. */
typedef struct {
    const float *q, *k, *v, *dy, *ym, *lsem;
} cp_piece_in;

static void cp_piece_reference(const cp_case *s, int qr, int kr, const cp_piece_in *in, float *y, float *lse, float *dq,
                               float *dk, float *dv)
{
    int64_t T = 2 * s->c, H = s->H, Hk = s->Hk, D = s->D;
    double scale = 1.0 / sqrt((double)D), *sc = malloc((size_t)T * sizeof *sc);
    if (dq) {
        memset(dk, 0, (size_t)s->B * T * Hk * D * sizeof *dk);
        memset(dv, 0, (size_t)s->B * T * Hk * D * sizeof *dv);
    }
    for (int64_t b = 0; b < s->B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++) {
                const int64_t qo = ((b * T + t) * H + h) * D, li = (b * H + h) * T + t;
                const int64_t qp = ir_cp_position(t, T, s->cp, qr);
                double mx = -INFINITY, sum = 0, di = 0;
                for (int64_t j = 0; j < T; j++) {
                    const float *kj = in->k + ((b * T + j) * Hk + h / (H / Hk)) * D;
                    double dot = 0;
                    for (int64_t d = 0; d < D; d++)
                        dot += (double)in->q[qo + d] * kj[d];
                    sc[j] = ir_cp_position(j, T, s->cp, kr) <= qp ? dot * scale : -INFINITY;
                    mx = fmax(mx, sc[j]);
                }
                for (int64_t d = 0; dq && d < D; d++)
                    di += (double)in->dy[qo + d] * in->ym[qo + d];
                for (int64_t j = 0; j < T; j++)
                    sum += sc[j] > -INFINITY ? exp(sc[j] - mx) : 0;
                if (!dq)
                    lse[li] = sum > 0 ? (float)(mx + log(sum)) : -INFINITY;
                for (int64_t d = 0; d < D; d++) {
                    double acc = 0;
                    for (int64_t j = 0; j < T; j++) {
                        const int64_t ko = ((b * T + j) * Hk + h / (H / Hk)) * D;
                        if (sc[j] == -INFINITY)
                            continue;
                        if (!dq) {
                            acc += exp(sc[j] - mx) / sum * in->v[ko + d];
                            continue;
                        }
                        double p = exp(sc[j] - in->lsem[li]), dp = 0;
                        for (int64_t e = 0; e < D; e++)
                            dp += (double)in->dy[qo + e] * in->v[ko + e];
                        const double ds = p * (dp - di);
                        acc += scale * ds * in->k[ko + d];
                        dk[ko + d] += (float)(scale * ds * in->q[qo + d]);
                        dv[ko + d] += (float)(p * in->dy[qo + d]);
                    }
                    (dq ? dq : y)[qo + d] = (float)acc;
                }
            }
    free(sc);
}

/* The host values of one case: the whole sequence's q, k, v, dy and the oracle's y, lse, dq (cp = 1). */
typedef struct {
    attn_case whole;
    attn_ref r;
} cp_whole;

/* Device copies of rank-local host tensors, and the checks of one rank. */
typedef struct {
    const cp_case *s;
    attn_case local; /* B, T = 2c, H, Hk, D */
    ir_dtype dt;
    int r, failed;
    size_t nq, nk, nl; /* elements of q, of one rank's k, of lse */
} cp_run;

static void cp_check(cp_run *u, const char *what, const void *dev, const float *want, size_t n, ir_dtype dt, bool lse)
{
    char label[48];
    snprintf(label, sizeof label, "r%d %s", u->r, what);
    double tol = lse ? (u->dt == IR_BF16 ? LSE_TOL : F32_TOL) : u->dt == IR_BF16 ? BF16_TOL : F32_TOL;
    u->failed += !check("mcc", label, dev, want, n, dt, tol, lse);
}

/* ring 0: rank r's queries against every rank's keys, gathered, against the CPU oracle's kernel. */
static void cp_check_gathered(rt_cuda_ctx *cx, cp_run *u, const float *q, const float *kg, const float *vg,
                              const float *dy)
{
    const cp_case *s = u->s;
    int Tk = s->cp * u->local.T;
    size_t nkg = u->nk * s->cp;
    double attr[4] = {s->cp, u->r, 0, 0};
    float *y = malloc(u->nq * 4), *lse = malloc(u->nl * 4), *dq = malloc(u->nq * 4), *dk = malloc(nkg * 4),
          *dv = malloc(nkg * 4);
    attn_call a;
    void *fa[] = {(void *)q, (void *)kg, (void *)vg}, *fr[] = {y, lse};
    attn_call_init(&a, IR_OP_ATTENTION, &u->local, Tk, attr, IR_F32, fa, fr);
    cpu_ATTENTION(&a.call);
    void *ga[] = {(void *)dy, (void *)q, (void *)kg, (void *)vg, y, lse}, *gr[] = {dq, dk, dv};
    attn_call_init(&a, IR_OP_ATTENTION_GRAD, &u->local, Tk, attr, IR_F32, ga, gr);
    cpu_ATTENTION_GRAD(&a.call);

    void *dq_ = dev_upload(q, u->nq, u->dt), *dk_ = dev_upload(kg, nkg, u->dt), *dv_ = dev_upload(vg, nkg, u->dt);
    void *ddy = dev_upload(dy, u->nq, u->dt), *gy = dev_poisoned(u->nq, u->dt), *glse = dev_poisoned(u->nl, IR_F32);
    void *gdq = dev_poisoned(u->nq, u->dt), *gdk = dev_poisoned(nkg, u->dt), *gdv = dev_poisoned(nkg, u->dt);
    void *fa2[] = {dq_, dk_, dv_}, *fr2[] = {gy, glse}, *ga2[] = {ddy, dq_, dk_, dv_, gy, glse}, *gr2[] = {gdq, gdk, gdv};
    attn_call_init(&a, IR_OP_ATTENTION, &u->local, Tk, attr, u->dt, fa2, fr2);
    cuda_ATTENTION(cx, &a.call);
    attn_call_init(&a, IR_OP_ATTENTION_GRAD, &u->local, Tk, attr, u->dt, ga2, gr2);
    cuda_ATTENTION_GRAD(cx, &a.call);
    RT_CUDART_CHECK(cudaDeviceSynchronize());
    cp_check(u, "gathered y", gy, y, u->nq, u->dt, false);
    cp_check(u, "gathered lse", glse, lse, u->nl, IR_F32, true);
    cp_check(u, "gathered dq", gdq, dq, u->nq, u->dt, false);
    cp_check(u, "gathered dk", gdk, dk, nkg, u->dt, false);
    cp_check(u, "gathered dv", gdv, dv, nkg, u->dt, false);
    void *bufs[] = {dq_, dk_, dv_, ddy, gy, glse, gdq, gdk, gdv};
    for (int i = 0; i < 9; i++)
        RT_CUDART_CHECK(cudaFree(bufs[i]));
    float *host[] = {y, lse, dq, dk, dv};
    for (int i = 0; i < 5; i++)
        free(host[i]);
}

/* ring 1: rank r's queries against each rank's keys (shift 0..cp-1, kv rank (r - shift) mod cp) as
 * pieces: each piece's y, lse against cp_piece_reference; the pieces merged in shift order
 * (rt_cuda_attention_merge) against the whole's y, lse (yw, lsew: rank r's rows); each piece's
 * backward from the merged y, lse against the reference, and the pieces' dq summed against the
 * whole's (dqw). */
static void cp_check_ring(rt_cuda_ctx *cx, cp_run *u, const cp_whole *w, const float *yw, const float *lsew,
                          const float *dqw)
{
    const cp_case *s = u->s;
    const int cp = s->cp, T = u->local.T;
    float *q = cp_rows(s, w->r.q, u->r, s->H * s->D), *dy = cp_rows(s, w->r.dy, u->r, s->H * s->D);
    void *dq_ = dev_upload(q, u->nq, u->dt), *ddy = dev_upload(dy, u->nq, u->dt);
    void *o = dev_poisoned(u->nq, u->dt), *olse = dev_poisoned(u->nl, IR_F32); /* the merged pieces */
    void *py = dev_poisoned(u->nq, u->dt), *plse = dev_poisoned(u->nl, IR_F32);
    float *ry = malloc(u->nq * 4), *rlse = malloc(u->nl * 4), *rdq = malloc(u->nq * 4), *rdk = malloc(u->nk * 4),
          *rdv = malloc(u->nk * 4), *dqsum = calloc(u->nq, 4);
    float *ks[8], *vs[8];
    for (int shift = 0; shift < cp; shift++) { /* forward pieces, merged into (o, olse) */
        const int kr = ((u->r - shift) % cp + cp) % cp;
        ks[shift] = cp_rows(s, w->r.k, kr, s->Hk * s->D), vs[shift] = cp_rows(s, w->r.v, kr, s->Hk * s->D);
        cp_piece_reference(s, u->r, kr, &(cp_piece_in){q, ks[shift], vs[shift], NULL, NULL, NULL}, ry, rlse, NULL, NULL,
                           NULL);
        void *dk_ = dev_upload(ks[shift], u->nk, u->dt), *dv_ = dev_upload(vs[shift], u->nk, u->dt);
        double attr[4] = {cp, u->r, 1, shift};
        attn_call a;
        void *fa[] = {dq_, dk_, dv_}, *fr[] = {shift ? py : o, shift ? plse : olse};
        attn_call_init(&a, IR_OP_ATTENTION, &u->local, T, attr, u->dt, fa, fr);
        cuda_ATTENTION(cx, &a.call);
        RT_CUDART_CHECK(cudaDeviceSynchronize());
        char what[32];
        snprintf(what, sizeof what, "shift %d y", shift);
        cp_check(u, what, fr[0], ry, u->nq, u->dt, false);
        snprintf(what, sizeof what, "shift %d lse", shift);
        cp_check(u, what, fr[1], rlse, u->nl, IR_F32, true);
        if (shift)
            rt_cuda_attention_merge(cx, u->dt, o, olse, py, plse, s->B, s->H, T, s->D);
        RT_CUDART_CHECK(cudaFree(dk_));
        RT_CUDART_CHECK(cudaFree(dv_));
    }
    RT_CUDART_CHECK(cudaDeviceSynchronize());
    cp_check(u, "merged y", o, yw, u->nq, u->dt, false);
    cp_check(u, "merged lse", olse, lsew, u->nl, IR_F32, true);
    float *ym = dev_download(o, u->nq, u->dt), *lsem = dev_download(olse, u->nl, IR_F32);
    for (int shift = 0; shift < cp; shift++) { /* backward pieces from the merged y, lse */
        const int kr = ((u->r - shift) % cp + cp) % cp;
        cp_piece_reference(s, u->r, kr, &(cp_piece_in){q, ks[shift], vs[shift], dy, ym, lsem}, NULL, NULL, rdq, rdk, rdv);
        void *dk_ = dev_upload(ks[shift], u->nk, u->dt), *dv_ = dev_upload(vs[shift], u->nk, u->dt);
        void *gdq = dev_poisoned(u->nq, u->dt), *gdk = dev_poisoned(u->nk, u->dt), *gdv = dev_poisoned(u->nk, u->dt);
        double attr[4] = {cp, u->r, 1, shift};
        attn_call a;
        void *ga[] = {ddy, dq_, dk_, dv_, o, olse}, *gr[] = {gdq, gdk, gdv};
        attn_call_init(&a, IR_OP_ATTENTION_GRAD, &u->local, T, attr, u->dt, ga, gr);
        cuda_ATTENTION_GRAD(cx, &a.call);
        RT_CUDART_CHECK(cudaDeviceSynchronize());
        const char *names[] = {"dq", "dk", "dv"};
        float *want[] = {rdq, rdk, rdv};
        size_t n[] = {u->nq, u->nk, u->nk};
        for (int i = 0; i < 3; i++) {
            char what[32];
            snprintf(what, sizeof what, "shift %d %s", shift, names[i]);
            cp_check(u, what, gr[i], want[i], n[i], u->dt, false);
        }
        float *g = dev_download(gdq, u->nq, u->dt);
        for (size_t i = 0; i < u->nq; i++)
            dqsum[i] += g[i];
        free(g);
        void *bufs[] = {dk_, dv_, gdq, gdk, gdv};
        for (int i = 0; i < 5; i++)
            RT_CUDART_CHECK(cudaFree(bufs[i]));
        free(ks[shift]);
        free(vs[shift]);
    }
    double e = gpu_rel_error(dqsum, dqw, u->nq), tol = u->dt == IR_BF16 ? BF16_TOL : F32_TOL;
    printf("    mcc   r%d pieces' dq summed rel error %.3g (tol %.0e)%s\n", u->r, e, tol, e <= tol ? "" : "  FAIL");
    u->failed += !(e <= tol);
    void *bufs[] = {dq_, ddy, o, olse, py, plse};
    for (int i = 0; i < 6; i++)
        RT_CUDART_CHECK(cudaFree(bufs[i]));
    float *host[] = {q, dy, ry, rlse, rdq, rdk, rdv, dqsum, ym, lsem};
    for (int i = 0; i < 10; i++)
        free(host[i]);
}

/* Every rank of a case in dtype dt: gathered (ring 0) and ring pieces (ring 1, every shift). */
static int cp_check_case(rt_cuda_ctx *cx, const cp_case *s, const cp_whole *w, ir_dtype dt)
{
    cp_run u = {s, {s->B, 2 * s->c, s->H, s->Hk, s->D, s->D}, dt, 0, 0, 0, 0, 0};
    u.nq = (size_t)s->B * u.local.T * s->H * s->D, u.nk = (size_t)s->B * u.local.T * s->Hk * s->D;
    u.nl = (size_t)s->B * s->H * u.local.T;
    printf("  cp=%d B=%d c=%d H=%d Hk=%d D=%d %s\n", s->cp, s->B, s->c, s->H, s->Hk, s->D, ir_dtype_name(dt));
    float *kg = cp_gathered(s, w->r.k, s->Hk * s->D), *vg = cp_gathered(s, w->r.v, s->Hk * s->D);
    for (u.r = 0; u.r < s->cp; u.r++) {
        float *q = cp_rows(s, w->r.q, u.r, s->H * s->D), *dy = cp_rows(s, w->r.dy, u.r, s->H * s->D);
        float *yw = cp_rows(s, w->r.y, u.r, s->H * s->D), *dqw = cp_rows(s, w->r.dq, u.r, s->H * s->D);
        float *lsew = malloc(u.nl * 4); /* rank r's columns of the whole's lse [B,H,S] */
        for (size_t i = 0; i < u.nl; i++) {
            int64_t t = (int64_t)(i % u.local.T), bh = (int64_t)(i / u.local.T);
            lsew[i] = w->r.lse[bh * w->whole.T + ir_cp_position(t, u.local.T, s->cp, u.r)];
        }
        cp_check_gathered(cx, &u, q, kg, vg, dy);
        cp_check_ring(cx, &u, w, yw, lsew, dqw);
        float *host[] = {q, dy, yw, dqw, lsew};
        for (int i = 0; i < 5; i++)
            free(host[i]);
    }
    free(kg);
    free(vg);
    return u.failed;
}

static int cp_check_all(rt_cuda_ctx *cx)
{
    int failed = 0;
    for (size_t i = 0; i < sizeof cp_cases / sizeof cp_cases[0]; i++) {
        const cp_case *s = &cp_cases[i];
        cp_whole w = {{s->B, 2 * s->c * s->cp, s->H, s->Hk, s->D, s->D}, {0}};
        w.r = attn_reference(&w.whole);
        failed += cp_check_case(cx, s, &w, IR_BF16);
        failed += cp_check_case(cx, s, &w, IR_F32);
        float *bufs[] = {w.r.q, w.r.k, w.r.v, w.r.dy, w.r.y, w.r.lse, w.r.dq, w.r.dk, w.r.dv};
        for (int j = 0; j < 9; j++)
            free(bufs[j]);
    }
    return failed;
}

int main(void)
{
    void *image = NULL;
    rt_cuda_ctx *cx = gpu_ctx_open("attention_test", &image);
    if (!cx)
        return 1;
    int failed = 0;
    const char *only = getenv("ATTENTION_TEST_ONLY") ? getenv("ATTENTION_TEST_ONLY") : "";
    for (size_t i = 0; strcmp(only, "cp") && strcmp(only, "mla") && i < sizeof attn_cases / sizeof attn_cases[0];
         i++) {
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
    /* values narrower than q and k: cuDNN's, bf16; MCC_ATTENTION=mcc routes them to cuDNN all the same */
    for (size_t i = 0; strcmp(only, "cp") && i < sizeof mla_cases / sizeof mla_cases[0]; i++) {
#ifdef MCC_HAVE_CUDNN
        attn_ref r = attn_reference(&mla_cases[i]);
        failed += attn_check_cudnn(cx, &mla_cases[i], &r);
        failed += !attn_check_gpu(cx, &mla_cases[i], &r, IR_BF16, (attn_run){"mcc", false});
        float *bufs[] = {r.q, r.k, r.v, r.dy, r.y, r.lse, r.dq, r.dk, r.dv};
        for (int j = 0; j < 9; j++)
            free(bufs[j]);
#else
        printf("  B=%d T=%d H=%d Hk=%d D=%d Dv=%d: skipped, a build without cuDNN\n", mla_cases[i].B, mla_cases[i].T,
               mla_cases[i].H, mla_cases[i].Hk, mla_cases[i].D, mla_cases[i].Dv);
#endif
    }
    if (strcmp(only, "plain") && strcmp(only, "mla"))
        failed += cp_check_all(cx);
    rt_cuda_ctx_free(cx);
    free(image);
    printf(failed ? "attention_test: %d FAILED\n" : "attention_test: all passed\n", failed);
    return failed != 0;
}
