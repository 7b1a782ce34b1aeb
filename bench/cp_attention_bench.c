/* cp_attention_bench.c — the compute cost of context parallelism's ring attention on one GPU: the
 * whole sequence's causal attention (forward and backward, mcc's bf16 kernels) against the ring
 * pieces one cp rank runs (Megatron's balanced chunks: for every shift the forward of its queries
 * against one rank's keys, the merge of the pieces' (y, lse), and the backward from the merged y
 * and lse), at seq 8K..128K, cp 2 and 4, batch 1. The ring's transfers and its gradient sums are
 * not counted. Prints, per (seq, cp): whole ms, one rank's pieces ms and pieces x cp / whole (1 =
 * splitting costs nothing; the chunks' balance makes every rank's share the same). Times are the
 * median of REPS after WARMUP (CUDA events). Up to --check-seq (default 16384) it also runs every
 * rank's pieces once and checks them against the whole: merged y and lse, and dq, dk, dv summed
 * over the pieces, within bf16 tolerance (relative error of norms).
 *
 *   cp_attention_bench [--heads H,Hk,D]... [--seqs S,...] [--check-seq S]
 * default heads: 32,8,64 (llama-1B-gqa, LLaMA-3.2-1B's) and 16,16,128 (bench/configs/llama-1B.json). */
#include "codegen/cuda/cuda_codegen.h"
#include "common/knobs.h"
#include "runtime/cuda/cuda_ctx.h"
#include "tests/gpu/gpu_util.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { WARMUP = 2, REPS = 5, MAX_CP = 4 };
#define BF16_TOL 2e-2 /* bf16 y, P, dS and outputs, and the pieces' bf16 gradients summed */

typedef struct {
    int H, Hk, D;
} cp_heads;

/* The whole sequence [1, S, heads, D] on the device (bf16), and what the runs need beside it. */
typedef struct {
    int S, H, Hk, D;
    void *q, *k, *v, *dy, *y, *lse, *dq, *dk, *dv; /* whole: inputs, then its attention's results */
} cp_whole;

/* One cp layout of the whole: every rank's local tensors ([1, 2c, ...]: chunks r and 2cp-1-r), the
 * ring's merged (o, lse) of rank `r`, a piece's (y, lse) and its gradients. */
typedef struct {
    const cp_whole *w;
    int cp, r, T;                               /* T = 2c, a rank's tokens */
    void *q[MAX_CP], *k[MAX_CP], *v[MAX_CP], *dy[MAX_CP];
    void *o, *olse, *py, *plse, *dq, *dk, *dv;
} cp_ring;

static void *dev_alloc(size_t bytes)
{
    void *p;
    RT_CUDART_CHECK(cudaMalloc(&p, bytes));
    return p;
}

/* n bf16 values uniform in [-1, 1) (so the scores are not all equal) */
static void *dev_random_bf16(size_t n, uint32_t seed)
{
    uint16_t *h = malloc(n * 2);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        h[i] = bf16_of((float)(seed >> 8) / 8388608.0f - 1.0f);
    }
    void *d = dev_alloc(n * 2);
    RT_CUDART_CHECK(cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

static float *host_f32(const void *dev, size_t n)
{
    uint16_t *h = malloc(n * 2);
    float *x = malloc(n * sizeof *x);
    RT_CUDART_CHECK(cudaMemcpy(h, dev, n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++)
        x[i] = f32_of_bf16(h[i]);
    free(h);
    return x;
}

/* --- launches ----------------------------------------------------------------------------------- */

/* ATTENTION or ATTENTION_GRAD of q [1,T,H,D] against k, v [1,Tk,Hk,D] under attributes attr */
static void cp_attention(rt_cuda_ctx *cx, ir_op op, const cp_whole *w, int T, int Tk, const double *attr,
                         void *const *args, void *const *res)
{
    gpu_attn_call a;
    gpu_attn_call_init(&a, op, (int[]){1, T, Tk, w->H, w->Hk, w->D}, attr, IR_BF16, args, res);
    (op == IR_OP_ATTENTION ? cuda_ATTENTION : cuda_ATTENTION_GRAD)(cx, &a.call);
}

static void whole_forward(rt_cuda_ctx *cx, const void *arg)
{
    const cp_whole *w = arg;
    cp_attention(cx, IR_OP_ATTENTION, w, w->S, w->S, NULL, (void *[]){w->q, w->k, w->v}, (void *[]){w->y, w->lse});
}

static void whole_backward(rt_cuda_ctx *cx, const void *arg)
{
    const cp_whole *w = arg;
    cp_attention(cx, IR_OP_ATTENTION_GRAD, w, w->S, w->S, NULL, (void *[]){w->dy, w->q, w->k, w->v, w->y, w->lse},
                 (void *[]){w->dq, w->dk, w->dv});
}

/* Rank g->r's forward pieces, shift 0..cp-1 (keys of rank (r - shift) mod cp), merged into (o, olse). */
static void ring_forward(rt_cuda_ctx *cx, const void *arg)
{
    const cp_ring *g = arg;
    for (int s = 0; s < g->cp; s++) {
        int kr = ((g->r - s) % g->cp + g->cp) % g->cp;
        double attr[4] = {g->cp, g->r, 1, s};
        cp_attention(cx, IR_OP_ATTENTION, g->w, g->T, g->T, attr, (void *[]){g->q[g->r], g->k[kr], g->v[kr]},
                     (void *[]){s ? g->py : g->o, s ? g->plse : g->olse});
        if (s)
            rt_cuda_attention_merge(cx, IR_BF16, g->o, g->olse, g->py, g->plse, 1, g->w->H, g->T, g->w->D);
    }
}

/* Rank g->r's backward piece of one shift, from the merged (o, olse), into (dq, dk, dv). */
static void ring_backward_piece(rt_cuda_ctx *cx, const cp_ring *g, int s)
{
    int kr = ((g->r - s) % g->cp + g->cp) % g->cp;
    double attr[4] = {g->cp, g->r, 1, s};
    cp_attention(cx, IR_OP_ATTENTION_GRAD, g->w, g->T, g->T, attr,
                 (void *[]){g->dy[g->r], g->q[g->r], g->k[kr], g->v[kr], g->o, g->olse}, (void *[]){g->dq, g->dk, g->dv});
}

static void ring_backward(rt_cuda_ctx *cx, const void *arg)
{
    const cp_ring *g = arg;
    for (int s = 0; s < g->cp; s++)
        ring_backward_piece(cx, g, s);
}

/* --- layouts ------------------------------------------------------------------------------------ */

/* dst [1, 2c, n] := rank r's chunks of src [1, 2 cp c, n] (bf16) */
static void rank_rows(void *dst, const void *src, int cp, int r, int c, int n)
{
    size_t chunk = (size_t)c * n * 2;
    RT_CUDART_CHECK(cudaMemcpy(dst, (const char *)src + r * chunk, chunk, cudaMemcpyDeviceToDevice));
    RT_CUDART_CHECK(cudaMemcpy((char *)dst + chunk, (const char *)src + (2 * cp - 1 - r) * chunk, chunk,
                               cudaMemcpyDeviceToDevice));
}

static void ring_init(cp_ring *g, const cp_whole *w, int cp)
{
    memset(g, 0, sizeof *g);
    g->w = w, g->cp = cp, g->T = w->S / cp;
    int c = g->T / 2, nq = w->H * w->D, nk = w->Hk * w->D;
    for (int r = 0; r < cp; r++) {
        g->q[r] = dev_alloc((size_t)g->T * nq * 2), g->dy[r] = dev_alloc((size_t)g->T * nq * 2);
        g->k[r] = dev_alloc((size_t)g->T * nk * 2), g->v[r] = dev_alloc((size_t)g->T * nk * 2);
        rank_rows(g->q[r], w->q, cp, r, c, nq), rank_rows(g->dy[r], w->dy, cp, r, c, nq);
        rank_rows(g->k[r], w->k, cp, r, c, nk), rank_rows(g->v[r], w->v, cp, r, c, nk);
    }
    g->o = dev_alloc((size_t)g->T * nq * 2), g->py = dev_alloc((size_t)g->T * nq * 2);
    g->olse = dev_alloc((size_t)w->H * g->T * 4), g->plse = dev_alloc((size_t)w->H * g->T * 4);
    g->dq = dev_alloc((size_t)g->T * nq * 2);
    g->dk = dev_alloc((size_t)g->T * nk * 2), g->dv = dev_alloc((size_t)g->T * nk * 2);
}

static void ring_free(cp_ring *g)
{
    for (int r = 0; r < g->cp; r++) {
        void *b[] = {g->q[r], g->dy[r], g->k[r], g->v[r]};
        for (int i = 0; i < 4; i++)
            RT_CUDART_CHECK(cudaFree(b[i]));
    }
    void *b[] = {g->o, g->py, g->olse, g->plse, g->dq, g->dk, g->dv};
    for (int i = 0; i < 7; i++)
        RT_CUDART_CHECK(cudaFree(b[i]));
}

/* --- the check ---------------------------------------------------------------------------------- */

/* acc [S, n] (whole rows) += rank r's local rows x [2c, n] (bf16 on the device) */
static void add_rank_rows(float *acc, const void *x, int cp, int r, int c, int n)
{
    float *h = host_f32(x, (size_t)2 * c * n);
    for (int64_t t = 0; t < 2 * c; t++) {
        float *row = acc + ir_cp_position(t, 2 * c, cp, r) * n;
        for (int j = 0; j < n; j++)
            row[j] += h[t * n + j];
    }
    free(h);
}

/* Every rank's ring once: merged y (and lse) against the whole's rows, dq, dk, dv summed over all
 * pieces against the whole's. Returns the largest relative error (lse: max abs), printing each. */
static double ring_check(rt_cuda_ctx *cx, cp_ring *g)
{
    const cp_whole *w = g->w;
    int c = g->T / 2, nq = w->H * w->D, nk = w->Hk * w->D;
    float *y = calloc((size_t)w->S * nq, 4), *dq = calloc((size_t)w->S * nq, 4);
    float *dk = calloc((size_t)w->S * nk, 4), *dv = calloc((size_t)w->S * nk, 4);
    double lse_err = 0;
    float *lw = malloc((size_t)w->H * w->S * 4), *lr = malloc((size_t)w->H * g->T * 4);
    RT_CUDART_CHECK(cudaMemcpy(lw, w->lse, (size_t)w->H * w->S * 4, cudaMemcpyDeviceToHost));
    /* the kernels run on the context's stream, which does not wait for the legacy stream's
     * cudaMemcpy (nor it for them): each read of their results waits for the stream first */
    RT_CU_CHECK(cuStreamSynchronize(rt_cuda_stream(cx)));
    for (g->r = 0; g->r < g->cp; g->r++) {
        ring_forward(cx, g);
        RT_CU_CHECK(cuStreamSynchronize(rt_cuda_stream(cx)));
        add_rank_rows(y, g->o, g->cp, g->r, c, nq);
        RT_CUDART_CHECK(cudaMemcpy(lr, g->olse, (size_t)w->H * g->T * 4, cudaMemcpyDeviceToHost));
        for (int h = 0; h < w->H; h++)
            for (int t = 0; t < g->T; t++) {
                double e = fabs(lr[h * g->T + t] - lw[h * w->S + ir_cp_position(t, g->T, g->cp, g->r)]);
                lse_err = fmax(lse_err, isfinite(e) ? e : INFINITY);
            }
        for (int s = 0; s < g->cp; s++) {
            ring_backward_piece(cx, g, s);
            RT_CU_CHECK(cuStreamSynchronize(rt_cuda_stream(cx)));
            add_rank_rows(dq, g->dq, g->cp, g->r, c, nq);
            int kr = ((g->r - s) % g->cp + g->cp) % g->cp;
            add_rank_rows(dk, g->dk, g->cp, kr, c, nk);
            add_rank_rows(dv, g->dv, g->cp, kr, c, nk);
        }
    }
    g->r = 0;
    const void *want[] = {w->y, w->dq, w->dk, w->dv};
    float *got[] = {y, dq, dk, dv};
    size_t n[] = {(size_t)w->S * nq, (size_t)w->S * nq, (size_t)w->S * nk, (size_t)w->S * nk};
    double worst = 0;
    printf("    check:");
    for (int i = 0; i < 4; i++) {
        float *h = host_f32(want[i], n[i]);
        double e = gpu_rel_error(got[i], h, n[i]);
        printf(" %s %.2e", (const char *[]){"y", "dq", "dk", "dv"}[i], e);
        worst = fmax(worst, e);
        free(h);
        free(got[i]);
    }
    printf(" lse(max abs) %.2e\n", lse_err);
    free(lw);
    free(lr);
    return lse_err > 1e-2 ? INFINITY : worst;
}

/* --- main --------------------------------------------------------------------------------------- */

static int bench_heads(rt_cuda_ctx *cx, cp_heads hd, const int *seqs, int nseqs, int check_seq)
{
    int failed = 0;
    printf("\nH=%d Hk=%d D=%d, batch 1, mcc's bf16 kernels (ms: median of %d)\n", hd.H, hd.Hk, hd.D, REPS);
    printf("%7s %3s %9s %9s %9s | %9s %9s %9s | %12s %s\n", "seq", "cp", "whole fwd", "bwd", "total", "rank fwd",
           "bwd", "total", "pieces*cp/w", "check");
    for (int i = 0; i < nseqs; i++) {
        cp_whole w = {.S = seqs[i], .H = hd.H, .Hk = hd.Hk, .D = hd.D};
        size_t nq = (size_t)w.S * hd.H * hd.D, nk = (size_t)w.S * hd.Hk * hd.D;
        w.q = dev_random_bf16(nq, 1), w.k = dev_random_bf16(nk, 2), w.v = dev_random_bf16(nk, 3);
        w.dy = dev_random_bf16(nq, 4), w.y = dev_alloc(nq * 2), w.lse = dev_alloc((size_t)hd.H * w.S * 4);
        w.dq = dev_alloc(nq * 2), w.dk = dev_alloc(nk * 2), w.dv = dev_alloc(nk * 2);
        float wf = bench_median_ms_of(cx, whole_forward, &w, WARMUP, REPS);
        float wb = bench_median_ms_of(cx, whole_backward, &w, WARMUP, REPS);
        for (int cp = 2; cp <= MAX_CP; cp *= 2) {
            cp_ring g;
            ring_init(&g, &w, cp);
            whole_forward(cx, &w); /* the whole's y, lse for the check (the backward's left dq, dk, dv) */
            float rf = bench_median_ms_of(cx, ring_forward, &g, WARMUP, REPS);
            float rb = bench_median_ms_of(cx, ring_backward, &g, WARMUP, REPS);
            printf("%7d %3d %9.3f %9.3f %9.3f | %9.3f %9.3f %9.3f | %12.3f", w.S, cp, wf, wb, wf + wb, rf, rb, rf + rb,
                   (rf + rb) * cp / (wf + wb));
            if (w.S <= check_seq) {
                printf("\n");
                double e = ring_check(cx, &g);
                bool ok = e <= BF16_TOL;
                failed += !ok;
                printf("    %s (tol %.0e)\n", ok ? "ok" : "FAIL", BF16_TOL);
            } else {
                printf(" -\n");
            }
            fflush(stdout);
            ring_free(&g);
        }
        void *b[] = {w.q, w.k, w.v, w.dy, w.y, w.lse, w.dq, w.dk, w.dv};
        for (int j = 0; j < 9; j++)
            RT_CUDART_CHECK(cudaFree(b[j]));
    }
    return failed;
}

int main(int argc, char **argv)
{
    cp_heads heads[8] = {{32, 8, 64}, {16, 16, 128}};
    int nheads = 0, seqs[16] = {8192, 16384, 32768, 65536, 131072}, nseqs = 5, check_seq = 16384;
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--heads") && a + 1 < argc && nheads < 8 &&
            sscanf(argv[++a], "%d,%d,%d", &heads[nheads].H, &heads[nheads].Hk, &heads[nheads].D) == 3) {
            nheads++;
        } else if (!strcmp(argv[a], "--seqs") && a + 1 < argc) {
            nseqs = 0;
            for (char *t = strtok(argv[++a], ","); t && nseqs < 16; t = strtok(NULL, ","))
                seqs[nseqs++] = atoi(t);
        } else if (!strcmp(argv[a], "--check-seq") && a + 1 < argc) {
            check_seq = atoi(argv[++a]);
        } else {
            fprintf(stderr, "usage: cp_attention_bench [--heads H,Hk,D]... [--seqs S,...] [--check-seq S]\n");
            return 2;
        }
    }
    nheads = nheads ? nheads : 2;
    for (int i = 0; i < nseqs; i++)
        if (seqs[i] % (4 * MAX_CP)) {
            fprintf(stderr, "cp_attention_bench: seq %d is not a multiple of 2 x cp for cp up to %d\n", seqs[i], MAX_CP);
            return 2;
        }
    void *image = NULL;
    rt_cuda_ctx *cx = gpu_ctx_open("cp_attention_bench", &image);
    if (!cx)
        return 1;
    knob_setenv(KNOB_ATTENTION, "mcc"); /* the whole on the same kernels as the pieces (cuDNN: cp = 1 only) */
    int failed = 0;
    for (int h = 0; h < nheads; h++)
        failed += bench_heads(cx, heads[h], seqs, nseqs, check_seq);
    rt_cuda_ctx_free(cx);
    free(image);
    printf(failed ? "cp_attention_bench: %d check(s) FAILED\n" : "cp_attention_bench: all checks passed\n", failed);
    return failed != 0;
}
