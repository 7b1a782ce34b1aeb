/* moe_gemm_bench.c — the MoE experts' grouped GEMMs (runtime/cuda/matmul.c: one cuBLASLt GEMM per
 * expert over the counts copied to the host) against one dense GEMM of the same FLOPs through mcc's
 * own cuBLASLt path (cuda_MATMUL), in bf16, at the expert shapes of a MoE spec: R = micro_batch_size
 * x seq_length x moe_router_topk routed rows, d = hidden_size, F = moe_ffn_hidden_size, E experts.
 *   forward: moe_grouped_matmul(x[R,d], w[E,F,d] (tb: the model's layout), counts) -> [R,F] with
 *            equal groups (R/E rows each), skewed ones (a ramp, max/mean near 2), and equal with
 *            the counts' drain (a layer's first grouped GEMM copies them to the host), against
 *            matmul(x[R,d], w[0]^T) -> [R,F];
 *   wgrad:   moe_grouped_wgrad(dy[R,F], x[R,d], counts) -> f32[E,F,d] against matmul(dy^T, x) -> f32[F,d].
 * Prints ms (median of REPS after WARMUP, CUDA events), TFLOP/s (2 R d F each) and grouped/dense
 * (time), and checks every result at SAMPLES entries against a host dot product: exit 1 on a
 * failure.
 *
 *   moe_gemm_bench [--shape R,d,F,E] [SPEC.json...]
 * default: bench/configs/moe-8x1B.json and moe-32x8.json (run from the repository root). */
#include "frontend/spec.h"
#include "runtime/cuda/cuda_ctx.h"
#include "tests/gpu/gpu_util.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { WARMUP = 3, REPS = 20, SAMPLES = 512 };
#define TOL 1e-2 /* relative error of norms: bf16's rounding of y (2^-9) with room */

typedef struct {
    char name[64];
    int64_t R, d, F, E;
} moe_shape;

/* One shape's operands: the inputs on the host (bf16 bits, for the checks) and on the device. */
typedef struct {
    moe_shape s;
    uint16_t *hx, *hw, *hdy;        /* x[R,d], w[E,F,d], dy[R,F] */
    void *x, *w, *dy, *y, *dw;      /* device; y[R,F] bf16, dw[E,F,d] f32: every case's result */
    int32_t equal_h[1024], skewed_h[1024], all_h[1]; /* counts[E]; all: one group of the R rows */
    void *equal, *skewed;           /* the counts on the device */
} moe_bench;

/* One launcher call: the instruction, its operands' types and pointers (the result last). */
typedef struct {
    ir_instr in;
    int ids[3];
    ir_type t[4];
    const ir_type *tp[4];
    void *p[4];
    rt_kernel_call c;
    bool drain;                     /* a new function invocation each call: the counts copied again */
} moe_call;

static uint32_t lcg(uint32_t *s) { return *s = *s * 1664525u + 1013904223u; }

/* n bf16 uniform in [-1, 1): *host keeps them, the device copy is returned */
static void *upload_random(uint16_t **host, size_t n, uint32_t seed)
{
    *host = malloc(n * 2);
    for (size_t i = 0; i < n; i++)
        (*host)[i] = bf16_of((float)(lcg(&seed) >> 8) / 8388608.0f - 1.0f);
    void *d;
    RT_CUDART_CHECK(cudaMalloc(&d, n * 2));
    RT_CUDART_CHECK(cudaMemcpy(d, *host, n * 2, cudaMemcpyHostToDevice));
    return d;
}

static void *upload_counts(const int32_t *counts, int64_t E)
{
    void *d;
    RT_CUDART_CHECK(cudaMalloc(&d, (size_t)E * 4));
    RT_CUDART_CHECK(cudaMemcpy(d, counts, (size_t)E * 4, cudaMemcpyHostToDevice));
    return d;
}

/* equal: R/E rows each; skewed: expert e's share (2e+1)/E^2, a ramp whose max is (2E-1)/E of the
 * mean; the remainders to the last expert */
static void make_counts(moe_bench *b)
{
    int64_t R = b->s.R, E = b->s.E, eq = 0, sk = 0;
    for (int64_t e = 0; e < E; e++) {
        eq += b->equal_h[e] = (int32_t)(R / E);
        sk += b->skewed_h[e] = (int32_t)(R * (2 * e + 1) / (E * E));
    }
    b->equal_h[E - 1] += (int32_t)(R - eq), b->skewed_h[E - 1] += (int32_t)(R - sk);
    b->all_h[0] = (int32_t)R;
    b->equal = upload_counts(b->equal_h, E), b->skewed = upload_counts(b->skewed_h, E);
}

static void call_init(moe_call *m, ir_op op, const double attr[2], int nargs, const ir_type *types, void *const *ptrs)
{
    memset(m, 0, sizeof *m);
    m->in = (ir_instr){.op = op, .nargs = nargs, .nres = 1, .args = m->ids, .attr = {attr[0], attr[1]}};
    for (int i = 0; i < 3; i++) /* value ids: grouped_counts keys its copy by the counts' */
        m->ids[i] = i;
    for (int i = 0; i <= nargs; i++)
        m->t[i] = types[i], m->tp[i] = &m->t[i], m->p[i] = ptrs[i];
    m->c = (rt_kernel_call){&m->in, nargs, 1, m->p, m->tp, m->p + nargs, m->tp + nargs};
}

static void call_run(rt_cuda_ctx *cx, const void *arg)
{
    const moe_call *m = arg;
    if (m->drain)
        rt_cuda_begin_function(cx);
    rt_cuda_launchers[m->in.op](cx, &m->c);
}

/* The first row of expert e under counts. */
static int64_t first_row(const int32_t *counts, int64_t e)
{
    int64_t row = 0;
    for (int64_t i = 0; i < e; i++)
        row += counts[i];
    return row;
}

/* ||got - want|| / ||want|| at SAMPLES entries of the result `out` (host) under counts[E]: forward
 * y[r,n] = x[r] . w[e(r),n] (bf16), wgrad dw[e,n,k] = sum over e's rows of dy[r,n] x[r,k] (f32). */
static double check(const moe_bench *b, bool wgrad, const int32_t *counts, int64_t E, const void *out)
{
    int64_t R = b->s.R, d = b->s.d, F = b->s.F;
    double num = 0, den = 0, want = 0, got;
    uint32_t seed = 7;
    for (int i = 0; i < SAMPLES; i++, want = 0) {
        int64_t n = lcg(&seed) % (uint32_t)F, e = 0;
        if (wgrad) {
            int64_t k = lcg(&seed) % (uint32_t)d, end;
            e = lcg(&seed) % (uint32_t)E, end = first_row(counts, e + 1);
            for (int64_t r = first_row(counts, e); r < end; r++)
                want += (double)f32_of_bf16(b->hdy[r * F + n]) * f32_of_bf16(b->hx[r * d + k]);
            got = ((const float *)out)[(e * F + n) * d + k];
        } else {
            int64_t r = lcg(&seed) % (uint32_t)R;
            while (r >= first_row(counts, e + 1))
                e++;
            for (int64_t j = 0; j < d; j++)
                want += (double)f32_of_bf16(b->hx[r * d + j]) * f32_of_bf16(b->hw[(e * F + n) * d + j]);
            got = f32_of_bf16(((const uint16_t *)out)[r * F + n]);
        }
        num += (got - want) * (got - want), den += want * want;
    }
    return sqrt(num / (den > 0 ? den : 1));
}

/* Times one case, checks its result (*ok := false on a failure) and prints its row; returns its ms. */
static float bench_case(rt_cuda_ctx *cx, const moe_bench *b, const char *what, moe_call *m, bool wgrad,
                        const int32_t *counts, int64_t E, float dense_ms, bool *ok)
{
    size_t bytes = ir_bytes(&m->t[m->in.nargs]);
    RT_CUDART_CHECK(cudaMemset(m->c.res[0], 0xff, bytes)); /* NaN: what the launcher leaves unwritten fails */
    float ms = bench_median_ms_of(cx, call_run, m, WARMUP, REPS);
    void *out = malloc(bytes);
    RT_CUDART_CHECK(cudaMemcpy(out, m->c.res[0], bytes, cudaMemcpyDeviceToHost));
    double err = check(b, wgrad, counts, E, out);
    free(out);
    double flops = 2.0 * (double)b->s.R * (double)b->s.d * (double)b->s.F;
    printf("  %-50s %9.3f %8.1f", what, ms, flops / ms * 1e-9);
    if (dense_ms > 0)
        printf(" %13.2f", ms / dense_ms);
    else
        printf(" %13s", "-");
    printf("   %.1e %s\n", err, err < TOL ? "ok" : "FAIL");
    fflush(stdout);
    *ok &= err < TOL;
    return ms;
}

/* Every case of one shape; false if a check failed. */
static bool bench_shape(rt_cuda_ctx *cx, const moe_shape *s)
{
    moe_bench b = {.s = *s};
    rt_cuda_begin_function(cx); /* grouped_counts' copies are of the last shape's buffers: forget them */
    int64_t R = s->R, d = s->d, F = s->F, E = s->E;
    b.x = upload_random(&b.hx, (size_t)(R * d), 1);
    b.w = upload_random(&b.hw, (size_t)(E * F * d), 2);
    b.dy = upload_random(&b.hdy, (size_t)(R * F), 3);
    RT_CUDART_CHECK(cudaMalloc(&b.y, (size_t)(R * F) * 2));
    RT_CUDART_CHECK(cudaMalloc(&b.dw, (size_t)(E * F * d) * 4));
    make_counts(&b);
    int32_t max = 0;
    for (int64_t e = 0; e < E; e++)
        max = b.skewed_h[e] > max ? b.skewed_h[e] : max;
    printf("\n%s: R %lld routed rows, d %lld, F %lld, %lld experts (bf16)\n  %-50s %9s %8s %13s   %s\n", s->name,
           (long long)R, (long long)d, (long long)F, (long long)E, "GEMM", "ms", "TFLOP/s", "grouped/dense", "check");
    ir_type x = ir_tensor(IR_BF16, 2, (int64_t[]){R, d}), dy = ir_tensor(IR_BF16, 2, (int64_t[]){R, F});
    ir_type w = ir_tensor(IR_BF16, 3, (int64_t[]){E, F, d}), w0 = ir_tensor(IR_BF16, 2, (int64_t[]){F, d});
    ir_type dw = ir_tensor(IR_F32, 3, (int64_t[]){E, F, d}), dw0 = ir_tensor(IR_F32, 2, (int64_t[]){F, d});
    ir_type counts = ir_tensor(IR_I32, 1, (int64_t[]){E});
    char what[5][64];
    snprintf(what[0], 64, "forward dense [%lld,%lld] x [%lld,%lld]^T", (long long)R, (long long)d, (long long)F,
             (long long)d);
    snprintf(what[1], 64, "forward grouped, equal (%d rows each)", b.equal_h[0]);
    snprintf(what[2], 64, "forward grouped, skewed (max/mean %.2f)", max / ((double)R / (double)E));
    snprintf(what[3], 64, "wgrad dense [%lld,%lld]^T x [%lld,%lld] -> f32", (long long)R, (long long)F, (long long)R,
             (long long)d);
    snprintf(what[4], 64, "wgrad grouped, skewed (max/mean %.2f)", max / ((double)R / (double)E));
    moe_call m;
    bool ok = true;
    call_init(&m, IR_OP_MATMUL, (double[]){0, 1}, 2, (ir_type[]){x, w0, dy}, (void *[]){b.x, b.w, b.y});
    float dense = bench_case(cx, &b, what[0], &m, false, b.all_h, 1, 0, &ok);
    call_init(&m, IR_OP_MOE_GROUPED_MATMUL, (double[]){1, 0}, 3, (ir_type[]){x, w, counts, dy},
              (void *[]){b.x, b.w, b.equal, b.y});
    bench_case(cx, &b, what[1], &m, false, b.equal_h, E, dense, &ok);
    m.drain = true;
    bench_case(cx, &b, "forward grouped, equal, with the counts' drain", &m, false, b.equal_h, E, dense, &ok);
    m.drain = false, m.p[2] = b.skewed;
    bench_case(cx, &b, what[2], &m, false, b.skewed_h, E, dense, &ok);
    call_init(&m, IR_OP_MATMUL, (double[]){1, 0}, 2, (ir_type[]){dy, x, dw0}, (void *[]){b.dy, b.x, b.dw});
    dense = bench_case(cx, &b, what[3], &m, true, b.all_h, 1, 0, &ok);
    call_init(&m, IR_OP_MOE_GROUPED_WGRAD, (double[]){0, 0}, 3, (ir_type[]){dy, x, counts, dw},
              (void *[]){b.dy, b.x, b.equal, b.dw});
    bench_case(cx, &b, "wgrad grouped, equal", &m, true, b.equal_h, E, dense, &ok);
    m.p[2] = b.skewed;
    bench_case(cx, &b, what[4], &m, true, b.skewed_h, E, dense, &ok);
    void *dev[] = {b.x, b.w, b.dy, b.y, b.dw, b.equal, b.skewed};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        RT_CUDART_CHECK(cudaFree(dev[i]));
    free(b.hx), free(b.hw), free(b.hdy);
    return ok;
}

/* The expert shapes of a MoE spec, named by its file. */
static bool shape_of_spec(const char *path, moe_shape *s)
{
    mcc_spec spec;
    int rest[1], nrest;
    char err[1024];
    if (!mcc_spec_load(path, 0, NULL, &spec, rest, &nrest, err, sizeof err)) {
        fprintf(stderr, "moe_gemm_bench: %s\n", err);
        return false;
    }
    if (spec.num_experts < 1) {
        fprintf(stderr, "moe_gemm_bench: %s: model.num_experts is not set: not a MoE spec\n", path);
        return false;
    }
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    snprintf(s->name, sizeof s->name, "%.*s", (int)strcspn(base, "."), base);
    s->R = (int64_t)spec.micro_batch_size * spec.seq_length * spec.moe_router_topk;
    s->d = spec.hidden_size, s->F = spec.moe_ffn_hidden_size, s->E = spec.num_experts;
    return true;
}

int main(int argc, char **argv)
{
    moe_shape shapes[8];
    int n = 0;
    for (int a = 1; a < argc && n < 8; a++) {
        moe_shape *s = &shapes[n];
        long long R, d, F, E;
        bool shape = !strcmp(argv[a], "--shape");
        if (shape ? a + 1 == argc || sscanf(argv[++a], "%lld,%lld,%lld,%lld", &R, &d, &F, &E) != 4 : argv[a][0] == '-') {
            fprintf(stderr, "usage: moe_gemm_bench [--shape R,d,F,E] [SPEC.json...] (at %s)\n", argv[a]);
            return 2;
        } else if (shape) {
            *s = (moe_shape){"--shape", R, d, F, E};
        } else if (!shape_of_spec(argv[a], s)) {
            return 2;
        }
        if (s->E < 1 || s->E > 1024 || s->R < s->E || s->d < 1 || s->F < 1) {
            fprintf(stderr, "moe_gemm_bench: %s: needs 1 <= E <= 1024 experts, R >= E rows, d and F >= 1\n", s->name);
            return 2;
        }
        n++;
    }
    if (!n && !(shape_of_spec("bench/configs/moe-8x1B.json", &shapes[n++]) &&
                shape_of_spec("bench/configs/moe-32x8.json", &shapes[n++])))
        return 2;
    void *image;
    rt_cuda_ctx *cx = gpu_ctx_open("moe_gemm_bench", &image);
    if (!cx)
        return 1;
    bool ok = true;
    for (int i = 0; i < n; i++)
        ok &= bench_shape(cx, &shapes[i]);
    rt_cuda_ctx_free(cx);
    free(image);
    printf("\nmoe_gemm_bench: %s\n", ok ? "every check passed" : "FAILED: a result is wrong");
    return ok ? 0 : 1;
}
