/* cpu_kernels.c — the CPU backend's fp32 kernels, one per op of ir/ops.def: the numerical oracle.
 * The kernels that write a gradient also take it in bf16 (--grad-reduce-in-bf16), rounding what
 * they store as the GPU does (f32_of). */
#include "runtime/cpu_kernels.h"
#include "runtime/bf16.h"
#include "runtime/dropout.h"
#include "runtime/fp8.h"

#include <cblas.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- helpers --------------------------------------------------------------------------------- */

/* Stops the run on data the kernels cannot compute with (a token id outside the vocabulary):
 * reading past a table would be a silent wrong run. */
static _Noreturn void cpu_fatal(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "mcc runtime error (%s:%d): ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}
#define CPU_FAIL(...) cpu_fatal(__FILE__, __LINE__, __VA_ARGS__)

static const float *argf(const rt_kernel_call *c, int i) { return c->args[i]; }
static float *resf(const rt_kernel_call *c, int i) { return c->res[i]; }
static float attrf(const rt_kernel_call *c, int i) { return (float)c->in->attr[i]; }

/* A tensor [*, N] seen as a 2-D row-major matrix [rows, N]. */
static int64_t last_dim(const ir_type *t) { return t->ndim ? t->dims[t->ndim - 1] : 1; }
static int64_t nrows(const ir_type *t)
{
    int64_t n = last_dim(t);
    return n ? ir_numel(t) / n : 0;
}

/* Zeroed scratch memory; freed by the caller. */
static void *scratch(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p)
        CPU_FAIL("out of memory allocating %zu bytes of kernel scratch", n * size);
    return p;
}

/* A buffer as fp32 values: x itself when f32; a bf16 one (a gradient under grad_reduce_in_bf16, the
 * only bf16 tensor a CPU plan holds besides Adam's moments) widened into scratch, which f32_release
 * frees and f32_store first rounds back to nearest even, as the GPU's bf16 stores of an fp32 result
 * (an accumulating GEMM's C, an accumulate's sum). So the CPU computes what the GPU computes. */
static float *f32_of(void *x, const ir_type *t)
{
    if (t->dtype == IR_F32)
        return x;
    if (t->dtype != IR_BF16)
        CPU_FAIL("a %s tensor where the CPU kernels take f32 or bf16: an mcc codegen bug", ir_dtype_name(t->dtype));
    int64_t n = ir_numel(t);
    float *f = scratch((size_t)n, sizeof *f);
    for (int64_t i = 0; i < n; i++)
        f[i] = rt_bf16_to_f32(((const uint16_t *)x)[i]);
    return f;
}

static void f32_release(const void *x, float *f)
{
    if (f != x)
        free(f);
}

/* x (of type t, f32 or bf16) := the fp32 values f, rounded to nearest even into bf16. */
static void f32_write(void *x, const ir_type *t, const float *f)
{
    if (t->dtype == IR_F32 && x != f)
        memcpy(x, f, ir_bytes(t));
    for (int64_t i = 0, n = ir_numel(t); t->dtype == IR_BF16 && i < n; i++)
        ((uint16_t *)x)[i] = rt_f32_to_bf16(f[i]);
}

static void f32_store(void *x, const ir_type *t, float *f)
{
    f32_write(x, t, f);
    f32_release(x, f);
}

/* Aborts when an index read from data (token id, target) is outside [0, limit). */
static void check_index(const char *op, const char *what, int32_t id, int64_t pos, int64_t limit, const char *fix)
{
    if (id < 0 || id >= limit)
        CPU_FAIL("%s: %s %d at position %lld is outside the vocabulary [0, %lld); %s", op, what, (int)id,
                 (long long)pos, (long long)limit, fix);
}

/* --- sources and sinks: the executor binds their buffers, so there is nothing to compute ---- */

void cpu_INPUT(const rt_kernel_call *c) {}
void cpu_GLOBAL(const rt_kernel_call *c) {}
void cpu_OUTPUT(const rt_kernel_call *c) {}

void cpu_FILL(const rt_kernel_call *c)
{
    float *r = resf(c, 0), v = attrf(c, 0);
    for (int64_t i = 0, n = ir_numel(c->res_types[0]); i < n; i++)
        r[i] = v;
}

/* --- elementwise ------------------------------------------------------------------------------ */

void cpu_ADD(const rt_kernel_call *c)
{
    const float *a = argf(c, 0), *b = argf(c, 1);
    float *r = resf(c, 0);
    for (int64_t i = 0, n = ir_numel(c->res_types[0]); i < n; i++)
        r[i] = a[i] + b[i];
}

void cpu_MUL(const rt_kernel_call *c)
{
    const float *a = argf(c, 0), *b = argf(c, 1);
    float *r = resf(c, 0);
    for (int64_t i = 0, n = ir_numel(c->res_types[0]); i < n; i++)
        r[i] = a[i] * b[i];
}

void cpu_SCALE(const rt_kernel_call *c)
{
    const float *a = argf(c, 0);
    float *r = resf(c, 0), f = attrf(c, 0);
    for (int64_t i = 0, n = ir_numel(c->res_types[0]); i < n; i++)
        r[i] = a[i] * f;
}

/* r := a in r's dtype: a bf16 result rounded to nearest even as the GPU's stores round (f32_write), a
 * bf16 operand widened exactly, a plain copy where the dtypes agree (a CPU plan's activations are
 * f32, so there it is a copy) */
void cpu_CONVERT(const rt_kernel_call *c)
{
    float *a = f32_of(c->args[0], c->arg_types[0]);
    f32_write(c->res[0], c->res_types[0], a);
    f32_release(c->args[0], a);
}

/* x[R,N] + b[N] */
void cpu_BIAS_ADD(const rt_kernel_call *c)
{
    const float *x = argf(c, 0), *b = argf(c, 1);
    float *r = resf(c, 0);
    int64_t R = nrows(c->arg_types[0]), N = last_dim(c->arg_types[0]);
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < N; j++)
            r[i * N + j] = x[i * N + j] + b[j];
}

/* GPT-2's tanh approximation: gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3). */
#define GELU_K 0.7978845608028654f
#define GELU_C 0.044715f

void cpu_GELU(const rt_kernel_call *c)
{
    const float *x = argf(c, 0);
    float *r = resf(c, 0);
    for (int64_t i = 0, n = ir_numel(c->res_types[0]); i < n; i++) {
        float v = x[i], t = tanhf(GELU_K * (v + GELU_C * v * v * v));
        r[i] = 0.5f * v * (1.0f + t);
    }
}

/* (dy, x) -> dy * (0.5 (1 + t) + 0.5 x (1 - t^2) du/dx), t = tanh(u) */
void cpu_GELU_GRAD(const rt_kernel_call *c)
{
    const float *dy = argf(c, 0), *x = argf(c, 1);
    float *r = resf(c, 0);
    for (int64_t i = 0, n = ir_numel(c->res_types[0]); i < n; i++) {
        float v = x[i], t = tanhf(GELU_K * (v + GELU_C * v * v * v));
        float dudx = GELU_K * (1.0f + 3.0f * GELU_C * v * v);
        r[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * dudx);
    }
}

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

void cpu_SILU(const rt_kernel_call *c)
{
    const float *x = argf(c, 0);
    float *r = resf(c, 0);
    for (int64_t i = 0, n = ir_numel(c->res_types[0]); i < n; i++)
        r[i] = x[i] * sigmoidf(x[i]);
}

/* (dy, x) -> dy * s (1 + x (1 - s)), s = sigmoid(x) */
void cpu_SILU_GRAD(const rt_kernel_call *c)
{
    const float *dy = argf(c, 0), *x = argf(c, 1);
    float *r = resf(c, 0);
    for (int64_t i = 0, n = ir_numel(c->res_types[0]); i < n; i++) {
        float s = sigmoidf(x[i]);
        r[i] = dy[i] * s * (1.0f + x[i] * (1.0f - s));
    }
}

/* relu(x)^2 */
void cpu_SQUARED_RELU(const rt_kernel_call *c)
{
    const float *x = argf(c, 0);
    float *r = resf(c, 0);
    for (int64_t i = 0, n = ir_numel(c->res_types[0]); i < n; i++)
        r[i] = x[i] > 0 ? x[i] * x[i] : 0.0f;
}

/* (dy, x) -> dy * 2 relu(x) */
void cpu_SQUARED_RELU_GRAD(const rt_kernel_call *c)
{
    const float *dy = argf(c, 0), *x = argf(c, 1);
    float *r = resf(c, 0);
    for (int64_t i = 0, n = ir_numel(c->res_types[0]); i < n; i++)
        r[i] = x[i] > 0 ? dy[i] * (2.0f * x[i]) : 0.0f;
}

/* (gate, up) -> silu(gate) up */
void cpu_SWIGLU(const rt_kernel_call *c)
{
    const float *g = argf(c, 0), *u = argf(c, 1);
    float *r = resf(c, 0);
    for (int64_t i = 0, n = ir_numel(c->res_types[0]); i < n; i++)
        r[i] = g[i] * sigmoidf(g[i]) * u[i];
}

/* (dy, gate, up) -> dgate = dy up s (1 + gate (1 - s)), dup = dy gate s; s = sigmoid(gate); and
 * when h is not NULL the forward's product h = gate s up (swiglu_grad_product). Each element's
 * operands are read before its results are written (dgate may be dy's bytes). */
static void swiglu_grad(const rt_kernel_call *c, float *h)
{
    const float *dy = argf(c, 0), *g = argf(c, 1), *u = argf(c, 2);
    float *dg = resf(c, 0), *du = resf(c, 1);
    for (int64_t i = 0, n = ir_numel(c->res_types[0]); i < n; i++) {
        float d = dy[i], x = g[i], up = u[i], s = sigmoidf(x);
        dg[i] = d * up * s * (1.0f + x * (1.0f - s));
        du[i] = d * x * s;
        if (h)
            h[i] = x * s * up;
    }
}

void cpu_SWIGLU_GRAD(const rt_kernel_call *c) { swiglu_grad(c, NULL); }
void cpu_SWIGLU_GRAD_PRODUCT(const rt_kernel_call *c) { swiglu_grad(c, resf(c, 2)); }

/* A view: the memory plan usually gives the result the operand's buffer, leaving nothing to do. */
void cpu_RESHAPE(const rt_kernel_call *c)
{
    if (c->args[0] != c->res[0])
        memmove(c->res[0], c->args[0], ir_bytes(c->res_types[0]));
}

void cpu_CONCAT_ROWS(const rt_kernel_call *c)
{
    size_t first = ir_bytes(c->arg_types[0]);
    memcpy(c->res[0], c->args[0], first);
    memcpy((char *)c->res[0] + first, c->args[1], ir_bytes(c->arg_types[1]));
}

/* x[O,H,N] -> a[O,H,size], b[O,H,N-size] (O the dimensions before the heads); result k where
 * sum_heads is k + 1: [O,1,..], its channels summed over the H heads */
void cpu_SPLIT_LAST_DIM(const rt_kernel_call *c)
{
    const ir_type *xt = c->arg_types[0];
    int n = xt->ndim;
    int64_t N = xt->dims[n - 1], H = n >= 2 ? xt->dims[n - 2] : 1, O = ir_numel(xt) / (H * N);
    int64_t size = (int64_t)c->in->attr[IR_ATTR_SPLIT_LAST_DIM_SIZE];
    const float *x = argf(c, 0);
    for (int k = 0; k < 2; k++) {
        int64_t first = k ? size : 0, w = k ? N - size : size;
        bool sum = (int)c->in->attr[IR_ATTR_SPLIT_LAST_DIM_SUM_HEADS] == k + 1;
        float *r = resf(c, k);
        if (sum)
            memset(r, 0, sizeof *r * (size_t)(O * w));
        for (int64_t o = 0; o < O; o++)
            for (int64_t h = 0; h < H; h++) {
                const float *xr = x + (o * H + h) * N + first;
                float *rr = sum ? r + o * w : r + (o * H + h) * w;
                for (int64_t j = 0; j < w; j++)
                    rr[j] = sum ? rr[j] + xr[j] : xr[j];
            }
    }
}

/* (a[O,Ha,Da], b[O,Hb,Db]) -> r[O,H,Da+Db]; an operand of one head read for every head */
void cpu_CONCAT_LAST_DIM(const rt_kernel_call *c)
{
    const ir_type *at = c->arg_types[0], *bt = c->arg_types[1], *rt = c->res_types[0];
    int n = rt->ndim;
    int64_t H = rt->dims[n - 2], Da = at->dims[n - 1], Db = bt->dims[n - 1], O = ir_numel(rt) / (H * (Da + Db));
    int64_t Ha = at->dims[n - 2], Hb = bt->dims[n - 2];
    const float *a = argf(c, 0), *b = argf(c, 1);
    float *r = resf(c, 0);
    for (int64_t o = 0; o < O; o++)
        for (int64_t h = 0; h < H; h++) {
            float *rr = r + (o * H + h) * (Da + Db);
            memcpy(rr, a + (o * Ha + (Ha == 1 ? 0 : h)) * Da, sizeof *rr * (size_t)Da);
            memcpy(rr + Da, b + (o * Hb + (Hb == 1 ? 0 : h)) * Db, sizeof *rr * (size_t)Db);
        }
}

/* x[B,T,I] -> r[B,count,I]: r[b,t] = x[b,t+by] where 0 <= t+by < T, else 0; any dtype, bytewise */
void cpu_SHIFT_SEQ(const rt_kernel_call *c)
{
    const ir_type *xt = c->arg_types[0], *rt = c->res_types[0];
    int64_t B = xt->dims[0], T = xt->dims[1], n = rt->dims[1], by = (int64_t)c->in->attr[IR_ATTR_SHIFT_SEQ_BY];
    size_t row = ir_bytes(xt) / (size_t)(B * T); /* one position's bytes */
    const char *x = c->args[0];
    char *r = c->res[0];
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < n; t++) {
            char *to = r + (size_t)(b * n + t) * row;
            if (t + by >= 0 && t + by < T)
                memcpy(to, x + (size_t)(b * T + t + by) * row, row);
            else
                memset(to, 0, row);
        }
}

/* A view too: the result's bytes are the rows' own (ir_view_offset) once memory_plan has run. */
void cpu_ROWS(const rt_kernel_call *c)
{
    const char *from = (const char *)c->args[0] + ir_view_offset_in(c->in, c->arg_types[0]);
    if (from != c->res[0])
        memmove(c->res[0], from, ir_bytes(c->res_types[0]));
}

/* (x[B,...], first_sample) -> x * mask / (1-p) (normal=1: a standard normal value an element): x is
 * one or two blocks of rows (rt_dropout_blocks);
 * row (b, o) of a block holds consecutive elements of sample first_sample + first_row + b, drawn by
 * kernels_templates/philox.cuh. */
void cpu_DROPOUT(const rt_kernel_call *c)
{
    const float *x = argf(c, 0);
    float *r = resf(c, 0);
    mcc_dropout d = rt_dropout_of(c->in, c->args[1]);
    rt_dropout_block blk[2];
    for (int k = 0, n = rt_dropout_blocks(c->in, c->arg_types[0], blk); k < n; k++) {
        mcc_dropout_rows l = blk[k].rows;
        for (long long row = 0; row < blk[k].R; row++) {
            unsigned long long s = (unsigned long long)(*d.first_sample + l.first_row + row / l.O),
                               e = (unsigned long long)((row % l.O) * l.G + l.base);
            mcc_dropout_cursor cur = MCC_DROPOUT_CURSOR;
            for (long long i = blk[k].first + row * l.S, end = i + l.C; i < end; i++, e++)
                r[i] = d.normal ? mcc_dropout_normal(d, s, e, &cur) : x[i] * mcc_dropout_factor(d, s, e, &cur);
        }
    }
}

/* --- contractions and reductions -------------------------------------------------------------- */

/* out[M,N] := alpha op(a)[M,K] op(b)[K,N] + beta out, a and b of types at, bt flattened to row-major
 * [rows, last], op = transpose if ta/tb (attrs 0, 1). */
static void gemm_of(const rt_kernel_call *c, const ir_type *at, const ir_type *bt, const float *a, const float *b,
                    float alpha, float beta, float *out)
{
    int ta = c->in->attr[IR_ATTR_TA] != 0, tb = c->in->attr[IR_ATTR_TB] != 0;
    int64_t arows = nrows(at), acols = last_dim(at), brows = nrows(bt), bcols = last_dim(bt);
    int64_t M = ta ? acols : arows, K = ta ? arows : acols;
    int64_t N = tb ? brows : bcols, Kb = tb ? bcols : brows;
    if (K != Kb)
        CPU_FAIL("%s: inner dimensions differ (%lld vs %lld); the verifier should have caught this",
                 ir_ops[c->in->op].name, (long long)K, (long long)Kb);
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, a, acols,
                b, bcols, beta, out, N);
}

/* gemm_of on the call's operands `first` and `first` + 1, alpha 1 */
static void gemm_into(const rt_kernel_call *c, int first, float beta, float *out)
{
    gemm_of(c, c->arg_types[first], c->arg_types[first + 1], argf(c, first), argf(c, first + 1), 1.0f, beta, out);
}

/* r[R,N] += bias[N] on every row */
static void add_bias_rows(const rt_kernel_call *c, const float *bias)
{
    int64_t N = last_dim(c->res_types[0]), R = ir_numel(c->res_types[0]) / N;
    float *r = resf(c, 0);
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < N; j++)
            r[i * N + j] += bias[j];
}

/* --- FP8 (ops.def): q as the format's bytes, tensorwise current scaling -------------------- */

/* max |x[i]| over n elements, a NaN anywhere giving NaN (as fmaxf would not) */
static float amax_of(const float *x, int64_t n)
{
    float amax = 0;
    for (int64_t i = 0; i < n; i++)
        amax = fabsf(x[i]) > amax || isnan(x[i]) ? fabsf(x[i]) : amax; /* NaN sticks */
    return amax;
}

/* Tensorwise and delayed scaling's scale: fmax / amax / 2^margin, 1 when amax is 0 */
static float fp8_scale(float amax, double margin, bool e5m2)
{
    return amax > 0 ? rt_fp8_max(e5m2) / amax / ldexpf(1.0f, (int)margin) : 1.0f;
}

/* x -> amax[1] = max |x| */
void cpu_FP8_AMAX(const rt_kernel_call *c) { resf(c, 0)[0] = amax_of(argf(c, 0), ir_numel(c->arg_types[0])); }

/* (x, amax[1]) -> (q, scale_inv[1]): scale = fmax / amax / 2^margin (1 when amax is 0),
 * q = encode(x * scale) */
void cpu_FP8_QUANTIZE(const rt_kernel_call *c)
{
    bool e5m2 = c->in->attr[IR_ATTR_FP8_QUANTIZE_FORMAT] == IR_FP8_E5M2;
    const float *x = argf(c, 0);
    uint8_t *q = c->res[0];
    float scale = fp8_scale(argf(c, 1)[0], c->in->attr[IR_ATTR_FP8_QUANTIZE_MARGIN], e5m2);
    for (int64_t i = 0, n = ir_numel(c->arg_types[0]); i < n; i++)
        q[i] = rt_fp8_encode(x[i] * scale, e5m2);
    resf(c, 1)[0] = 1.0f / scale;
}

static const int32_t *group_counts(const rt_kernel_call *c, int i, int64_t R);

/* A block's scale: 448 / its amax rounded down to a power of 2 (1 where that is not a finite normal:
 * amax 0, tiny, inf or NaN) */
static float fp8_block_scale(float amax)
{
    float scale = amax > 0 ? rt_fp8_max(false) / amax : 1.0f;
    int e;
    frexpf(scale, &e); /* scale = f 2^e, f in [0.5, 1): 2^(e-1) the power of 2 at or below */
    return isnormal(scale) && amax > 0 ? ldexpf(1.0f, e - 1) : 1.0f; /* inf amax: 1, not 0 */
}

/* x[R, C] -> q (x, or x^T [C, R] under transpose) in rows x cols blocks, each quantized by its
 * fp8_block_scale; its scale_inv at ir_fp8_scale_at of q's layout (the padding left as it is) */
static void block_quantize_matrix(const float *x, int64_t R, int64_t C, int64_t rows, int64_t cols, bool transpose,
                                  uint8_t *q, float *scale_inv)
{
    int64_t QR = transpose ? C : R, QC = transpose ? R : C; /* q[QR, QC]; its (i, j) is x's (j, i) transposed */
    for (int64_t br = 0; br < QR / rows; br++)
        for (int64_t bc = 0; bc < QC / cols; bc++) {
            float amax = 0;
            for (int64_t i = br * rows; i < (br + 1) * rows; i++)
                for (int64_t j = bc * cols; j < (bc + 1) * cols; j++) {
                    float v = x[transpose ? j * C + i : i * C + j];
                    amax = fabsf(v) > amax || isnan(v) ? fabsf(v) : amax;
                }
            float scale = fp8_block_scale(amax);
            for (int64_t i = br * rows; i < (br + 1) * rows; i++)
                for (int64_t j = bc * cols; j < (bc + 1) * cols; j++)
                    q[i * QC + j] = rt_fp8_encode(x[transpose ? j * C + i : i * C + j] * scale, false);
            for (int64_t i = br * rows; i < (br + 1) * rows; i++) /* a 1x128 tile is one of the block's rows */
                scale_inv[ir_fp8_scale_at(QR, QC, rows, cols, i, bc * cols)] = 1.0f / scale;
        }
}

/* The experts' rows x[R, C] by counts[E] -> q [C, R'] in 1x128 tiles: expert e's rows transposed
 * into q's columns from ir_fp8_expert_span, its tiles from its first row, the last one partial (its
 * amax over the rows there, q zero past them); the columns past the last expert's stay zero */
static void block_quantize_expert_rows(const rt_kernel_call *c, const float *x, uint8_t *q, float *scale_inv)
{
    int64_t R = c->arg_types[0]->dims[0], C = c->arg_types[0]->dims[1], E = c->arg_types[1]->dims[0];
    int64_t QC = c->res_types[0]->dims[1]; /* R' */
    const int32_t *counts = group_counts(c, 1, R);
    memset(q, 0, (size_t)(C * QC));
    for (int64_t e = 0, row = 0; e < E; row += counts[e++])
        for (int64_t t = 0, first = ir_fp8_expert_span(counts, e); t * IR_FP8_BLOCK < counts[e]; t++)
            for (int64_t i = 0; i < C; i++) {
                int64_t r0 = row + t * IR_FP8_BLOCK, n = counts[e] - t * IR_FP8_BLOCK; /* the tile's rows */
                n = n < IR_FP8_BLOCK ? n : IR_FP8_BLOCK;
                float amax = 0;
                for (int64_t j = 0; j < n; j++) {
                    float v = x[(r0 + j) * C + i];
                    amax = fabsf(v) > amax || isnan(v) ? fabsf(v) : amax;
                }
                float scale = fp8_block_scale(amax);
                int64_t col = first + t * IR_FP8_BLOCK;
                for (int64_t j = 0; j < n; j++)
                    q[i * QC + col + j] = rt_fp8_encode(x[(r0 + j) * C + i] * scale, false);
                scale_inv[ir_fp8_scale_at(C, QC, 1, IR_FP8_BLOCK, i, col)] = 1.0f / scale;
            }
}

/* x -> (q, scale_inv) {rows, cols, transpose, experts}[, counts]: block_quantize_matrix of x viewed
 * as [R, C], or of each expert's weight x[e] (experts), or the experts' rows by counts
 * (block_quantize_expert_rows); scale_inv laid out as ir_fp8_scale_blocks says (padding 1) */
void cpu_FP8_BLOCK_QUANTIZE(const rt_kernel_call *c)
{
    const float *x = argf(c, 0);
    uint8_t *q = c->res[0];
    float *scale_inv = resf(c, 1);
    int64_t rows = (int64_t)c->in->attr[IR_ATTR_FP8_BLOCK_QUANTIZE_ROWS];
    int64_t cols = (int64_t)c->in->attr[IR_ATTR_FP8_BLOCK_QUANTIZE_COLS];
    bool transpose = c->in->attr[IR_ATTR_FP8_BLOCK_QUANTIZE_TRANSPOSE] != 0;
    int64_t C = last_dim(c->arg_types[0]), R = ir_numel(c->arg_types[0]) / C;
    for (int64_t k = 0, n = ir_numel(c->res_types[1]); k < n; k++)
        scale_inv[k] = 1.0f;
    if (c->nargs == 2) {
        block_quantize_expert_rows(c, x, q, scale_inv);
        return;
    }
    int64_t E = c->in->attr[IR_ATTR_FP8_BLOCK_QUANTIZE_EXPERTS] != 0 ? c->arg_types[0]->dims[0] : 1;
    int64_t scales = ir_numel(c->res_types[1]) / E; /* an expert's: its blocks' rows whole */
    for (int64_t e = 0; e < E; e++)
        block_quantize_matrix(x + e * (R / E) * C, R / E, C, rows, cols, transpose, q + e * (R / E) * C,
                              scale_inv + e * scales);
}

/* An FP8 history's rows: f32[1 + len] one, an expert weight's f32[E, 1 + len] a row an expert */
static int64_t history_rows(const ir_type *h) { return h->ndim == 2 ? h->dims[0] : 1; }

/* h -> amax[rows]: max=1 the max of each row's h[1..len] (a NaN sticking), 0 its h[1] (ops.def) */
void cpu_FP8_HISTORY_AMAX(const rt_kernel_call *c)
{
    int64_t rows = history_rows(c->arg_types[0]), n = last_dim(c->arg_types[0]);
    for (int64_t e = 0; e < rows; e++) {
        const float *h = argf(c, 0) + e * n;
        float amax = h[1];
        for (int64_t i = 2; c->in->attr[IR_ATTR_FP8_HISTORY_AMAX_MAX] != 0 && i < n; i++)
            amax = h[i] > amax || isnan(h[i]) ? h[i] : amax;
        resf(c, 0)[e] = amax;
    }
}

/* (h, amax[rows]): each row's h[0] := max(h[0], amax), a NaN sticking */
void cpu_FP8_AMAX_FOLD(const rt_kernel_call *c)
{
    int64_t rows = history_rows(c->arg_types[0]), n = last_dim(c->arg_types[0]);
    for (int64_t e = 0; e < rows; e++) {
        float *h = (float *)c->args[0] + e * n, amax = argf(c, 1)[e];
        h[0] = amax > h[0] || isnan(amax) ? amax : h[0];
    }
}

/* (h, r) {roll}: each row's h[j] := r[j-1] (r may be h: from the end), then h[0] := 0 */
void cpu_FP8_HISTORY_UPDATE(const rt_kernel_call *c)
{
    int64_t rows = history_rows(c->arg_types[0]), n = last_dim(c->arg_types[0]);
    for (int64_t e = 0; e < rows; e++) {
        float *h = (float *)c->args[0] + e * n;
        const float *r = argf(c, 1) + e * n;
        for (int64_t j = n - 1; c->in->attr[IR_ATTR_FP8_HISTORY_UPDATE_ROLL] != 0 && j >= 1; j--)
            h[j] = r[j - 1];
        h[0] = 0;
    }
}

/* The fp8 bytes of operand i decoded into fp32 scratch (freed by the caller), unscaled (a GEMM's
 * alpha applies a single scale, and an FP8 grouped GEMM each expert's, as cuBLASLt's scale pointers) */
static float *fp8_bytes_decoded(const rt_kernel_call *c, int i)
{
    bool e5m2 = c->arg_types[i]->dtype == IR_FP8E5M2;
    int64_t n = ir_numel(c->arg_types[i]);
    const uint8_t *q = c->args[i];
    float *out = scratch((size_t)n, sizeof(float));
    for (int64_t k = 0; k < n; k++)
        out[k] = rt_fp8_decode(q[k], e5m2);
    return out;
}

/* The fp8 tensor of operand i decoded into fp32 scratch (freed by the caller); its scale_inv,
 * operand i + 1, multiplied in where it is one per block (a single one is the GEMM's alpha). */
static float *fp8_decoded(const rt_kernel_call *c, int i)
{
    int64_t n = ir_numel(c->arg_types[i]);
    float *out = fp8_bytes_decoded(c, i);
    int64_t rows, cols, C = last_dim(c->arg_types[i]);
    if (c->arg_types[i + 1]->ndim == 2 && ir_fp8_scale_blocks(c->arg_types[i], c->arg_types[i + 1], &rows, &cols)) {
        const float *s = argf(c, i + 1);
        for (int64_t k = 0; k < n; k++)
            out[k] *= s[ir_fp8_scale_at(n / C, C, rows, cols, k / C, k % C)];
    }
    return out;
}

/* Operand i's scale_inv as the GEMM's alpha: a single one, else 1 (fp8_decoded applied its blocks) */
static float fp8_alpha(const rt_kernel_call *c, int i) { return c->arg_types[i + 1]->ndim == 2 ? 1.0f : argf(c, i + 1)[0]; }

/* r := operand `addend`, for a GEMM to add onto (beta = 1); r may be it already (in place) */
static float *addend_as_result(const rt_kernel_call *c, int addend)
{
    float *r = resf(c, 0);
    if (r != argf(c, addend))
        memcpy(r, argf(c, addend), sizeof(float) * (size_t)ir_numel(c->res_types[0]));
    return r;
}

/* The FP8 GEMM of operands (qa, sa, qb, sb) from operand `first`: sa sb op(qa) op(qb) into out,
 * accumulated in fp32 (cuBLASLt's A/B scales as alpha) */
static void fp8_gemm(const rt_kernel_call *c, int first, float *out)
{
    float *a = fp8_decoded(c, first), *b = fp8_decoded(c, first + 2);
    gemm_of(c, c->arg_types[first], c->arg_types[first + 2], a, b, fp8_alpha(c, first) * fp8_alpha(c, first + 2),
            0.0f, out);
    free(a);
    free(b);
}

/* (qa, sa, qb, sb) -> sa sb op(qa) op(qb) */
void cpu_FP8_MATMUL(const rt_kernel_call *c) { fp8_gemm(c, 0, resf(c, 0)); }

/* The FP8 GEMM's product of n elements, in scratch: the fused ops below round it, then add it, as
 * the unfused fp8_matmul and add (accumulate) do, so the CPU oracle's numbers are the same whether
 * the fusion pass ran or not (the FP8 quantization downstream turns an ulp into a flip). */
static float *fp8_product(const rt_kernel_call *c, int first, int64_t n)
{
    float *p = scratch((size_t)n, sizeof *p);
    fp8_gemm(c, first, p);
    return p;
}

/* (dst, qa, sa, qb, sb): dst += (assign: :=) the FP8 GEMM; a bf16 dst rounded once, after it */
void cpu_FP8_MATMUL_ACCUMULATE(const rt_kernel_call *c)
{
    int64_t n = ir_numel(c->arg_types[0]);
    float *dst = f32_of(c->args[0], c->arg_types[0]), *p = fp8_product(c, 1, n);
    bool assign = c->in->attr[IR_ATTR_FP8_MATMUL_ACCUMULATE_ASSIGN] != 0;
    for (int64_t i = 0; i < n; i++)
        dst[i] = assign ? p[i] : dst[i] + p[i];
    free(p);
    f32_store(c->args[0], c->arg_types[0], dst);
}

/* (qa, sa, qb, sb, c) -> the FP8 GEMM + c */
void cpu_FP8_MATMUL_ADD(const rt_kernel_call *c)
{
    int64_t n = ir_numel(c->res_types[0]);
    float *p = fp8_product(c, 0, n), *r = addend_as_result(c, 4);
    for (int64_t i = 0; i < n; i++)
        r[i] += p[i];
    free(p);
}

/* r := op(a) op(b) */
void cpu_MATMUL(const rt_kernel_call *c) { gemm_into(c, 0, 0.0f, resf(c, 0)); }

/* An accumulating GEMM op: its destination global (operand 0) := beta dst + the product `into`
 * writes from operand 1 on, beta 1 or, with assign, 0; a bf16 dst rounded once, after it (f32_of) */
static void accumulate_op(const rt_kernel_call *c, void (*into)(const rt_kernel_call *, int, float, float *), bool assign)
{
    float *dst = f32_of(c->args[0], c->arg_types[0]);
    into(c, 1, assign ? 0.0f : 1.0f, dst);
    f32_store(c->args[0], c->arg_types[0], dst);
}

/* (dst, a, b): dst += matmul(a, b), the GEMM accumulating (beta = 1); assign: dst := (beta = 0) */
void cpu_MATMUL_ACCUMULATE(const rt_kernel_call *c)
{
    accumulate_op(c, gemm_into, c->in->attr[IR_ATTR_MATMUL_ACCUMULATE_ASSIGN] != 0);
}

/* matmul, then bias[N] added to every row of the result */
void cpu_MATMUL_BIAS(const rt_kernel_call *c)
{
    cpu_MATMUL(c);
    add_bias_rows(c, argf(c, 2));
}

/* r := c, then r += op(a) op(b) by the GEMM (beta = 1) */
static void matmul_onto(const rt_kernel_call *c, int addend) { gemm_into(c, 0, 1.0f, addend_as_result(c, addend)); }

/* (a, b, c) -> matmul(a, b) + c */
void cpu_MATMUL_ADD(const rt_kernel_call *c) { matmul_onto(c, 2); }

/* (a, b, bias, c) -> matmul(a, b) + bias + c */
void cpu_MATMUL_BIAS_ADD(const rt_kernel_call *c)
{
    matmul_onto(c, 3);
    add_bias_rows(c, argf(c, 2));
}

/* (a, b, bias) -> (gelu(p), p), p = matmul_bias(a, b, bias) */
void cpu_MATMUL_BIAS_GELU(const rt_kernel_call *c)
{
    void *pre[1] = {c->res[1]};
    rt_kernel_call mm = *c;
    mm.nres = 1, mm.res = pre, mm.res_types = &c->res_types[1];
    cpu_MATMUL_BIAS(&mm);
    void *gelu_args[1] = {c->res[1]};
    rt_kernel_call g = *c;
    g.nargs = 1, g.args = gelu_args, g.arg_types = &c->res_types[1], g.nres = 1;
    cpu_GELU(&g);
}

/* (a, b, x) -> (d, sum_rows(d)), d = gelu_grad(matmul(a, b), x): the product is d's own bytes */
void cpu_MATMUL_DGELU_BGRAD(const rt_kernel_call *c)
{
    rt_kernel_call mm = *c;
    mm.nargs = 2, mm.nres = 1;
    cpu_MATMUL(&mm);
    void *grad_args[2] = {c->res[0], c->args[2]};
    const ir_type *grad_types[2] = {c->res_types[0], c->arg_types[2]};
    rt_kernel_call g = *c;
    g.nargs = 2, g.args = grad_args, g.arg_types = grad_types, g.nres = 1;
    cpu_GELU_GRAD(&g); /* in place: dy and r are the same elements */
    void *sum_args[1] = {c->res[0]};
    void *sum_res[1] = {c->res[1]};
    rt_kernel_call s = *c;
    s.nargs = 1, s.args = sum_args, s.arg_types = c->res_types, s.nres = 1, s.res = sum_res,
    s.res_types = &c->res_types[1];
    cpu_SUM_ROWS(&s);
}

/* x[R,N] -> [N], accumulated in double so long reductions keep fp32 accuracy */
void cpu_SUM_ROWS(const rt_kernel_call *c)
{
    const float *x = argf(c, 0);
    float *r = resf(c, 0);
    int64_t R = nrows(c->arg_types[0]), N = last_dim(c->arg_types[0]);
    double *acc = scratch(N, sizeof *acc);
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < N; j++)
            acc[j] += x[i * N + j];
    for (int64_t j = 0; j < N; j++)
        r[j] = (float)acc[j];
    free(acc);
}

/* (x1..xn) -> f32[] sum of every squared element of every operand (f32, or bf16 gradients) */
void cpu_SUM_SQUARES(const rt_kernel_call *c)
{
    double acc = 0;
    for (int a = 0; a < c->nargs; a++) {
        float *x = f32_of(c->args[a], c->arg_types[a]);
        for (int64_t i = 0, n = ir_numel(c->arg_types[a]); i < n; i++)
            acc += (double)x[i] * x[i];
        f32_release(c->args[a], x);
    }
    resf(c, 0)[0] = (float)acc;
}

/* --- embeddings ------------------------------------------------------------------------------- */

static const char *const TOKEN_FIX =
    "tokenize the data with the model's tokenizer or raise vocab_size in the model spec";

/* (table[V,d], ids[n]) -> [n,d] */
/* The table holds vocabulary rows [start, start+V) of a vocab_size vocabulary (a vocab-parallel
 * shard; vocab_size 0 means V): ids of other shards give zero rows. */
void cpu_EMBEDDING(const rt_kernel_call *c)
{
    const float *table = argf(c, 0);
    const int32_t *ids = c->args[1];
    float *r = resf(c, 0);
    int64_t V = c->arg_types[0]->dims[0], d = c->arg_types[0]->dims[1], n = ir_numel(c->arg_types[1]);
    double size = c->in->attr[IR_ATTR_EMBEDDING_VOCAB_SIZE];
    int64_t start = (int64_t)c->in->attr[IR_ATTR_EMBEDDING_VOCAB_START], vocab = size ? (int64_t)size : V;
    for (int64_t i = 0; i < n; i++) {
        check_index("embedding", "token id", ids[i], i, vocab, TOKEN_FIX);
        int64_t row = ids[i] - start;
        if (row >= 0 && row < V)
            memcpy(r + i * d, table + row * d, d * sizeof *r);
        else
            memset(r + i * d, 0, d * sizeof *r);
    }
}

/* (dy[n,d], ids[n]) -> [vocab,d], scatter-add of the rows of dy */
void cpu_EMBEDDING_GRAD(const rt_kernel_call *c)
{
    const float *dy = argf(c, 0);
    const int32_t *ids = c->args[1];
    float *r = resf(c, 0);
    int64_t V = c->res_types[0]->dims[0], d = c->res_types[0]->dims[1], n = ir_numel(c->arg_types[1]);
    int64_t start = (int64_t)c->in->attr[IR_ATTR_EMBEDDING_GRAD_VOCAB_START];
    memset(r, 0, V * d * sizeof *r);
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] - start < 0 || ids[i] - start >= V)
            continue; /* another shard's row */
        float *row = r + (int64_t)(ids[i] - start) * d;
        for (int64_t j = 0; j < d; j++)
            row[j] += dy[i * d + j];
    }
}

/* (x[B,T,d], table[P,d]) -> x + the table's rows at x's positions, broadcast over B */
void cpu_POS_ADD(const rt_kernel_call *c)
{
    const ir_type *xt = c->arg_types[0];
    const float *x = argf(c, 0), *table = argf(c, 1);
    float *r = resf(c, 0);
    int64_t d = last_dim(xt), T = xt->dims[xt->ndim - 2], B = ir_numel(xt) / (T * d);
    ir_cp_run run[2];
    for (int k = 0, n = ir_pos_runs(c->in, T, run); k < n; k++)
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < run[k].n; t++) {
                const float *row = table + (run[k].pos + t) * d;
                int64_t at = (b * T + run[k].t + t) * d;
                for (int64_t j = 0; j < d; j++)
                    r[at + j] = x[at + j] + row[j];
            }
}

/* dy[B,T,d] -> [P,d]: the rows at dy's positions get dy summed over B, the others zero */
void cpu_POS_ADD_GRAD(const rt_kernel_call *c)
{
    const ir_type *yt = c->arg_types[0];
    const float *dy = argf(c, 0);
    float *r = resf(c, 0);
    int64_t d = last_dim(yt), T = yt->dims[yt->ndim - 2], B = ir_numel(yt) / (T * d);
    memset(r, 0, ir_bytes(c->res_types[0]));
    ir_cp_run run[2];
    for (int k = 0, n = ir_pos_runs(c->in, T, run); k < n; k++)
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < run[k].n; t++) {
                float *row = r + (run[k].pos + t) * d;
                const float *g = dy + (b * T + run[k].t + t) * d;
                for (int64_t j = 0; j < d; j++)
                    row[j] += g[j];
            }
}

/* --- normalisation: LayerNorm centres and has a bias; RMSNorm is the same without either ------- */

/* Mean (0 when !center) and 1/sqrt(var + eps) of one row, in double; var is the biased variance
 * about that mean (as torch's layer_norm), which for RMSNorm is mean(x^2). */
static void row_stats(const float *x, int64_t d, int center, double eps, double *mean, double *rstd)
{
    double m = 0, v = 0;
    if (center) {
        for (int64_t j = 0; j < d; j++)
            m += x[j];
        m /= d;
    }
    for (int64_t j = 0; j < d; j++)
        v += (x[j] - m) * (x[j] - m);
    *mean = m;
    *rstd = 1.0 / sqrt(v / d + eps);
}


/* (x[R,d], w[d], b[d] when center) -> (x - mean) * rstd * (w + shift) (+ b); shift is one_p (the
 * weight stored zero-centred) */
static void norm_forward(const rt_kernel_call *c, int center)
{
    const float *x = argf(c, 0), *w = argf(c, 1), *b = center ? argf(c, 2) : NULL;
    float *y = resf(c, 0), shift = (float)c->in->attr[IR_ATTR_ONE_P];
    int64_t R = nrows(c->arg_types[0]), d = last_dim(c->arg_types[0]);
    for (int64_t i = 0; i < R; i++) {
        const float *xr = x + i * d;
        double mean, rstd;
        row_stats(xr, d, center, c->in->attr[IR_ATTR_EPS], &mean, &rstd);
        for (int64_t j = 0; j < d; j++)
            y[i * d + j] = (float)((xr[j] - mean) * rstd) * (w[j] + shift) + (b ? b[j] : 0.0f);
    }
}

/* (dy, x, w (, dr)) -> dx (+ dr), dw (, db when center). With xhat = (x - mean) rstd and g = dy (w + shift):
 * dx = rstd (g - mean(g) - xhat mean(g xhat)), the mean(g) term only when centred;
 * dw = sum over rows of dy xhat, db = sum over rows of dy. dr (the _add ops) may be dx's own
 * bytes: each of its elements is read right before dx's is written. */
static void norm_backward(const rt_kernel_call *c, int center)
{
    const float *dy = argf(c, 0), *x = argf(c, 1), *w = argf(c, 2), *dr = c->nargs > 3 ? argf(c, 3) : NULL;
    float *dx = resf(c, 0), *dw = resf(c, 1), *db = center ? resf(c, 2) : NULL, shift = (float)c->in->attr[IR_ATTR_ONE_P];
    int64_t R = nrows(c->arg_types[1]), d = last_dim(c->arg_types[1]);
    double *acc = scratch(2 * d, sizeof *acc); /* dw [d], then db [d] */
    for (int64_t i = 0; i < R; i++) {
        const float *xr = x + i * d, *dyr = dy + i * d;
        double mean, rstd, sum_g = 0, sum_gx = 0;
        row_stats(xr, d, center, c->in->attr[IR_ATTR_EPS], &mean, &rstd);
        for (int64_t j = 0; j < d; j++) {
            double xhat = (xr[j] - mean) * rstd, g = (double)dyr[j] * (w[j] + shift);
            sum_g += g;
            sum_gx += g * xhat;
            acc[j] += dyr[j] * xhat;
            acc[d + j] += dyr[j];
        }
        double mean_g = center ? sum_g / d : 0.0, mean_gx = sum_gx / d;
        for (int64_t j = 0; j < d; j++) {
            double xhat = (xr[j] - mean) * rstd, g = (double)dyr[j] * (w[j] + shift);
            float v = (float)(rstd * (g - mean_g - xhat * mean_gx));
            dx[i * d + j] = dr ? v + dr[i * d + j] : v;
        }
    }
    for (int64_t j = 0; j < d; j++) {
        dw[j] = (float)acc[j];
        if (db)
            db[j] = (float)acc[d + j];
    }
    free(acc);
}

void cpu_LAYERNORM(const rt_kernel_call *c) { norm_forward(c, 1); }
void cpu_LAYERNORM_GRAD(const rt_kernel_call *c) { norm_backward(c, 1); }
void cpu_RMSNORM(const rt_kernel_call *c) { norm_forward(c, 0); }
void cpu_RMSNORM_GRAD(const rt_kernel_call *c) { norm_backward(c, 0); }
void cpu_LAYERNORM_GRAD_ADD(const rt_kernel_call *c) { norm_backward(c, 1); }
void cpu_RMSNORM_GRAD_ADD(const rt_kernel_call *c) { norm_backward(c, 0); }

/* --- attention ------------------------------------------------------------------------------- */

/* x[B,T,H,D] -> rotate-half over a head's first R channels (rotary_dim, else R = D): for i < R/2,
 * (x[i], x[i+R/2]) turns by t * ir_rope_freq(i) at position t (theta^(-2i/R), LLaMA 3.1's or YaRN's
 * scaling: ir_rope_scale_of) (by the negative angle when inverse, which is the gradient: rotations
 * are orthogonal, and YaRN's concentration c scales both ways, as the transpose of c R is c R^T),
 * channels R.. pass through; under context parallelism row t is at ir_cp_position's position. */
void cpu_ROPE(const rt_kernel_call *c)
{
    const ir_type *xt = c->arg_types[0];
    const float *x = argf(c, 0);
    float *r = resf(c, 0);
    int64_t T = xt->dims[1], H = xt->dims[2], D = xt->dims[3], BTH = ir_numel(xt) / D;
    int64_t R = c->in->attr[IR_ATTR_ROPE_ROTARY_DIM] > 0 ? (int64_t)c->in->attr[IR_ATTR_ROPE_ROTARY_DIM] : D, half = R / 2;
    double sign = c->in->attr[IR_ATTR_ROPE_INVERSE] != 0 ? -1.0 : 1.0;
    int cp = (int)c->in->attr[IR_ATTR_ROPE_CP], cp_rank = (int)c->in->attr[IR_ATTR_ROPE_CP_RANK];
    if (D % 2)
        CPU_FAIL("rope: head dimension %lld is odd; rotate-half needs an even head_dim", (long long)D);
    ir_rope_scale scale = ir_rope_scale_of(c->in->attr, R);
    float *cs = scratch(2 * T * half, sizeof *cs); /* cos [T, half], then sin [T, half] */
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < half; i++) {
            double angle = sign * (double)ir_cp_position(t, T, cp, cp_rank) * ir_rope_freq(&scale, i, R);
            cs[t * half + i] = (float)(scale.concentration * cos(angle));
            cs[T * half + t * half + i] = (float)(scale.concentration * sin(angle));
        }
    for (int64_t row = 0; row < BTH; row++) {
        int64_t t = (row / H) % T;
        const float *xr = x + row * D, *cosr = cs + t * half, *sinr = cs + T * half + t * half;
        float *rr = r + row * D;
        for (int64_t i = 0; i < half; i++) {
            float x1 = xr[i], x2 = xr[i + half];
            rr[i] = x1 * cosr[i] - x2 * sinr[i];
            rr[i + half] = x2 * cosr[i] + x1 * sinr[i];
        }
        for (int64_t i = R; i < D; i++)
            rr[i] = xr[i];
    }
    free(cs);
}

/* q[B,T,H,D], k [B,Tk,Hk,D], v [B,Tk,Hk,Dv] (Dv may differ: multi-latent attention's), y
 * [B,T,H,Dv]; query head h reads kv head h / (H/Hk). Head h of batch b is the strided matrix [T, D]
 * at q + (b T H + h) D with row stride H D (Hk D for k; v and y alike with Dv). Under
 * context parallelism (attributes cp, cp_rank, ring, shift, the dropout twins' too) q holds rank
 * cp_rank's two balanced chunks of the whole sequence of Tw = cp T and k, v with ring = 0 every cp
 * rank's, gathered in rank order (Tk = cp T), with ring = 1 rank (cp_rank - shift) mod cp's (Tk =
 * T: ring attention's piece); qpos[T] and kpos[Tk] are the positions in the whole sequence that
 * the causal mask compares (key j is seen by query t when kpos[j] <= qpos[t]) and the dropout
 * mask draws by. */
typedef struct {
    int64_t B, T, Tk, Tw, H, Hk, D, Dv;
    float scale;                    /* 1 / sqrt(D): q and k's head dimension */
    bool ring;
    int64_t *qpos, *kpos;
} attn_shape;

static attn_shape attn_shape_of(const rt_kernel_call *c, const ir_type *q, const ir_type *k, const ir_type *v)
{
    const double *a = ir_attention_attrs(c->in);
    int cp = a[IR_ATTR_ATTENTION_CP] > 1 ? (int)a[IR_ATTR_ATTENTION_CP] : 1;
    int cp_rank = (int)a[IR_ATTR_ATTENTION_CP_RANK];
    attn_shape s = {q->dims[0], q->dims[1], k->dims[1], q->dims[1] * cp, q->dims[2], k->dims[2], q->dims[3], v->dims[3],
                    0, false, NULL, NULL};
    s.scale = (float)(1.0 / sqrt((double)s.D));
    s.ring = a[2] != 0;
    int kv_rank = s.ring ? ((cp_rank - (int)a[3]) % cp + cp) % cp : -1;
    s.qpos = scratch(s.T + s.Tk, sizeof *s.qpos);
    s.kpos = s.qpos + s.T;
    for (int64_t t = 0; t < s.T; t++)
        s.qpos[t] = ir_cp_position(t, s.T, cp, cp_rank);
    for (int64_t j = 0; j < s.Tk; j++) /* ring: kv_rank's chunks; else rank j / T's part */
        s.kpos[j] = ir_cp_position(j % s.T, s.T, cp, s.ring ? kv_rank : (int)(j / s.T));
    return s;
}

/* the first element of head h of batch row b in a [B,T,H,width] tensor (q, y, dy: width D or Dv) or
 * of its kv head in a [B,Tk,Hk,width] one (k, v) */
static int64_t q_head(const attn_shape *s, int64_t b, int64_t h, int64_t width) { return (b * s->T * s->H + h) * width; }
static int64_t kv_head(const attn_shape *s, int64_t b, int64_t h, int64_t width)
{
    return (b * s->Tk * s->Hk + h / (s->H / s->Hk)) * width;
}

/* P[T,Tk] := causal softmax(scale q_h k_g^T), rows stable by subtracting their max; P = 0 where
 * the key lies after the query. lse (if not NULL) gets each row's log-sum-exp: -inf for a row that
 * sees no key (a ring piece's: its P row is 0). With lse_in (a ring piece's backward: the merged
 * log-sum-exp of the whole ring) P = exp(scale q k^T - lse_in) instead, the piece's share of the
 * whole row's softmax. */
static void attn_probs(const attn_shape *s, const float *q, const float *k, int64_t b, int64_t h, float *P, float *lse,
                       const float *lse_in)
{
    int64_t T = s->T, Tk = s->Tk;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, Tk, s->D, s->scale, q + q_head(s, b, h, s->D), s->H * s->D,
                k + kv_head(s, b, h, s->D), s->Hk * s->D, 0.0f, P, Tk);
    for (int64_t t = 0; t < T; t++) {
        float *row = P + t * Tk, mx = -INFINITY;
        int64_t at = s->qpos[t];
        if (lse_in) {
            for (int64_t j = 0; j < Tk; j++)
                row[j] = s->kpos[j] <= at ? expf(row[j] - lse_in[t]) : 0.0f;
            continue;
        }
        for (int64_t j = 0; j < Tk; j++)
            if (s->kpos[j] <= at)
                mx = fmaxf(mx, row[j]);
        double sum = 0;
        for (int64_t j = 0; j < Tk; j++)
            if (s->kpos[j] <= at)
                sum += row[j] = expf(row[j] - mx);
        if (lse)
            lse[t] = sum > 0 ? mx + (float)log(sum) : -INFINITY;
        for (int64_t j = 0; j < Tk; j++)
            row[j] = s->kpos[j] <= at ? (float)(row[j] / sum) : 0.0f;
    }
}

/* Attention dropout (attention_dropout ops): the mask parameters and this rank's first query head
 * (the whole head count only bounds it: the verifier's). */
typedef struct {
    mcc_dropout d;
    int64_t head_offset;
} attn_dropout;

static attn_dropout attn_dropout_of(const rt_kernel_call *c, int first_sample_arg)
{
    return (attn_dropout){rt_dropout_of(c->in, c->args[first_sample_arg]),
                          (int64_t)c->in->attr[IR_ATTR_ATTENTION_DROPOUT_HEAD_OFFSET]};
}

/* M[T,Tk] of head h of batch row b times the dropout factors: entry (t, j) is element
 * ((head_offset + h) Tw + qpos[t]) Tw + kpos[j] of sample first_sample + b. Only the causal part
 * kpos[j] <= qpos[t]: the probabilities of the later keys are 0, and so is all that is made from
 * them. */
static void attn_drop(const attn_dropout *a, const attn_shape *s, int64_t b, int64_t h, float *M)
{
    unsigned long long sample = (unsigned long long)(*a->d.first_sample + b);
    for (int64_t t = 0; t < s->T; t++) {
        unsigned long long e = ((unsigned long long)(a->head_offset + h) * s->Tw + s->qpos[t]) * s->Tw;
        mcc_dropout_cursor cur = MCC_DROPOUT_CURSOR;
        for (int64_t j = 0; j < s->Tk; j++)
            if (s->kpos[j] <= s->qpos[t])
                M[t * s->Tk + j] *= mcc_dropout_factor(a->d, sample, e + s->kpos[j], &cur);
    }
}

/* (q, k, v) -> y[B,T,H,Dv], y_h = P v_g (with dropout P Z, Z = mask / (1-p)); lse[B,H,T] of the
 * undropped scores */
static void attention_forward(const rt_kernel_call *c, const attn_dropout *drop)
{
    attn_shape s = attn_shape_of(c, c->arg_types[0], c->arg_types[1], c->arg_types[2]);
    const float *q = argf(c, 0), *k = argf(c, 1), *v = argf(c, 2);
    float *y = resf(c, 0), *lse = resf(c, 1), *P = scratch(s.T * s.Tk, sizeof *P);
    for (int64_t b = 0; b < s.B; b++)
        for (int64_t h = 0; h < s.H; h++) {
            attn_probs(&s, q, k, b, h, P, lse + (b * s.H + h) * s.T, NULL);
            if (drop)
                attn_drop(drop, &s, b, h, P);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.T, s.Dv, s.Tk, 1.0f, P, s.Tk,
                        v + kv_head(&s, b, h, s.Dv), s.Hk * s.Dv, 0.0f, y + q_head(&s, b, h, s.Dv), s.H * s.Dv);
        }
    free(P);
    free(s.qpos);
}

void cpu_ATTENTION(const rt_kernel_call *c) { attention_forward(c, NULL); }

/* (q, k, v, first_sample) */
void cpu_ATTENTION_DROPOUT(const rt_kernel_call *c)
{
    attn_dropout drop = attn_dropout_of(c, 3);
    attention_forward(c, &drop);
}

/* (dy, q, k, v, y, lse) -> dq [B,T,H,D], dk [B,T,Hk,D], dv [B,T,Hk,Dv]. Per head, with P recomputed (the
 * CPU oracle does not use the saved y and lse but in a ring piece):
 * dv_g += P^T dy_h; dP = dy_h v_g^T; dS = P (dP - rowsum(P dP)); dq_h = scale dS k_g;
 * dk_g += scale dS^T q_h. kv heads accumulate over the query heads of their group.
 * With dropout (y_h = (P Z) v_g): dv_g += (P Z)^T dy_h and dP = (dy_h v_g^T) Z, the rest alike;
 * rowsum(P dP) = rowsum(P Z dy_h v_g^T) = rowsum(dy_h y_h), as without. A ring piece's P is its
 * share of the whole row (exp(s - lse), lse the merged one) and its rowsum(P dP) that of the whole
 * row, rowsum(dy_h y_h) with y the merged output: so the pieces' gradients sum to the whole's. */
static void attention_backward(const rt_kernel_call *c, const attn_dropout *drop)
{
    attn_shape s = attn_shape_of(c, c->arg_types[1], c->arg_types[2], c->arg_types[3]);
    const float *dy = argf(c, 0), *q = argf(c, 1), *k = argf(c, 2), *v = argf(c, 3), *y = argf(c, 4),
                *lse = argf(c, 5);
    float *dq = resf(c, 0), *dk = resf(c, 1), *dv = resf(c, 2);
    int64_t T = s.T, Tk = s.Tk, ldq = s.H * s.D, ldk = s.Hk * s.D, ldy = s.H * s.Dv, ldv = s.Hk * s.Dv;
    float *P = scratch((drop ? 3 : 2) * T * Tk, sizeof *P), *dS = P + T * Tk, *PZ = dS + T * Tk;
    memset(dk, 0, ir_bytes(c->res_types[1]));
    memset(dv, 0, ir_bytes(c->res_types[2]));
    for (int64_t b = 0; b < s.B; b++)
        for (int64_t h = 0; h < s.H; h++) {
            int64_t qo = q_head(&s, b, h, s.D), ko = kv_head(&s, b, h, s.D);
            int64_t yo = q_head(&s, b, h, s.Dv), vo = kv_head(&s, b, h, s.Dv);
            attn_probs(&s, q, k, b, h, P, NULL, s.ring ? lse + (b * s.H + h) * T : NULL);
            const float *used = P; /* the probabilities y was made of */
            if (drop) {
                memcpy(PZ, P, sizeof *P * T * Tk);
                attn_drop(drop, &s, b, h, PZ);
                used = PZ;
            }
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Tk, s.Dv, T, 1.0f, used, Tk, dy + yo, ldy, 1.0f,
                        dv + vo, ldv);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, Tk, s.Dv, 1.0f, dy + yo, ldy, v + vo, ldv, 0.0f,
                        dS, Tk);
            if (drop)
                attn_drop(drop, &s, b, h, dS);
            for (int64_t t = 0; t < T; t++) {
                float *p = P + t * Tk, *g = dS + t * Tk;
                double dot = 0;
                if (s.ring)
                    for (int64_t d = 0; d < s.Dv; d++)
                        dot += (double)dy[yo + t * ldy + d] * y[yo + t * ldy + d];
                else
                    for (int64_t j = 0; j < Tk; j++)
                        dot += (double)p[j] * g[j];
                for (int64_t j = 0; j < Tk; j++)
                    g[j] = p[j] * (float)(g[j] - dot);
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, s.D, Tk, s.scale, dS, Tk, k + ko, ldk, 0.0f,
                        dq + qo, ldq);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Tk, s.D, T, s.scale, dS, Tk, q + qo, ldq, 1.0f,
                        dk + ko, ldk);
        }
    free(P);
    free(s.qpos);
}

void cpu_ATTENTION_GRAD(const rt_kernel_call *c) { attention_backward(c, NULL); }

/* (dy, q, k, v, y, lse, first_sample) */
void cpu_ATTENTION_DROPOUT_GRAD(const rt_kernel_call *c)
{
    attn_dropout drop = attn_dropout_of(c, 6);
    attention_backward(c, &drop);
}

/* (o1, lse1, o2, lse2) -> (o, lse): lse = logaddexp(lse1, lse2), o = o1 exp(lse1 - lse) +
 * o2 exp(lse2 - lse); a row both pieces' keys miss stays 0, -inf. o may be o1 (ops.def): each
 * element is read before it is written. */
void cpu_ATTENTION_MERGE(const rt_kernel_call *c)
{
    const ir_type *ot = c->arg_types[0];
    int64_t B = ot->dims[0], T = ot->dims[1], H = ot->dims[2], D = ot->dims[3];
    const float *o1 = argf(c, 0), *l1 = argf(c, 1), *o2 = argf(c, 2), *l2 = argf(c, 3);
    float *o = resf(c, 0), *lse = resf(c, 1);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++) {
                int64_t li = (b * H + h) * T + t, oi = ((b * T + t) * H + h) * D;
                double a = l1[li], z = l2[li], mx = fmax(a, z);
                double l = mx == -INFINITY ? -INFINITY : mx + log(exp(a - mx) + exp(z - mx));
                float w1 = l == -INFINITY ? 0.0f : (float)exp(a - l), w2 = l == -INFINITY ? 0.0f : (float)exp(z - l);
                for (int64_t d = 0; d < D; d++)
                    o[oi + d] = o1[oi + d] * w1 + o2[oi + d] * w2;
                lse[li] = (float)l;
            }
}

/* --- loss ------------------------------------------------------------------------------------- */

/* log(sum(exp(x))) of one row of V logits, in double, stable by subtracting the max */
static double row_logsumexp(const float *x, int64_t V)
{
    float mx = x[0];
    for (int64_t j = 1; j < V; j++)
        mx = fmaxf(mx, x[j]);
    double sum = 0;
    for (int64_t j = 0; j < V; j++)
        sum += exp((double)x[j] - mx);
    return mx + log(sum);
}

static const char *const TARGET_FIX = "the targets must be token ids below the model's vocab_size";

/* (logits[N,V], targets[N] i32) -> f32[] mean over tokens of logsumexp(row) - row[target] */
void cpu_CROSS_ENTROPY(const rt_kernel_call *c)
{
    const float *logits = argf(c, 0);
    const int32_t *targets = c->args[1];
    int64_t N = nrows(c->arg_types[0]), V = last_dim(c->arg_types[0]);
    double total = 0;
    for (int64_t i = 0; i < N; i++) {
        check_index("cross_entropy", "target", targets[i], i, V, TARGET_FIX);
        total += row_logsumexp(logits + i * V, V) - logits[i * V + targets[i]];
    }
    resf(c, 0)[0] = (float)(total / N);
}

/* (logits[N,V], targets[N], dloss[]) -> (dlogits, mean loss): each row's logits are read (its
 * log-sum-exp and target logit) before its gradient is written, so dlogits may be the logits. */
void cpu_CROSS_ENTROPY_WITH_GRAD(const rt_kernel_call *c)
{
    const float *logits = argf(c, 0);
    const int32_t *targets = c->args[1];
    float *r = resf(c, 0);
    int64_t N = nrows(c->arg_types[0]), V = last_dim(c->arg_types[0]);
    double f = argf(c, 2)[0] / (double)N, total = 0;
    for (int64_t i = 0; i < N; i++) {
        check_index("cross_entropy_with_grad", "target", targets[i], i, V, TARGET_FIX);
        const float *x = logits + i * V;
        double lse = row_logsumexp(x, V);
        total += lse - x[targets[i]];
        for (int64_t j = 0; j < V; j++)
            r[i * V + j] = (float)(f * (exp(x[j] - lse) - (j == targets[i])));
    }
    resf(c, 1)[0] = (float)(total / N);
}

/* (dloss[], logits[N,V], targets[N]) -> dlogits = dloss (softmax - onehot) / N */
void cpu_CROSS_ENTROPY_GRAD(const rt_kernel_call *c)
{
    const float *logits = argf(c, 1);
    const int32_t *targets = c->args[2];
    float *r = resf(c, 0);
    int64_t N = nrows(c->arg_types[1]), V = last_dim(c->arg_types[1]);
    double f = argf(c, 0)[0] / (double)N;
    for (int64_t i = 0; i < N; i++) {
        check_index("cross_entropy_grad", "target", targets[i], i, V, TARGET_FIX);
        const float *x = logits + i * V;
        double lse = row_logsumexp(x, V);
        for (int64_t j = 0; j < V; j++)
            r[i * V + j] = (float)(f * (exp(x[j] - lse) - (j == targets[i])));
    }
}

/* --- optimizer and persistent state ----------------------------------------------------------- */

/* (dst, x): dst += x, each f32 or bf16 (a bf16 gradient's sum rounded: f32_of) */
void cpu_ACCUMULATE(const rt_kernel_call *c)
{
    float *dst = f32_of(c->args[0], c->arg_types[0]), *x = f32_of(c->args[1], c->arg_types[1]);
    for (int64_t i = 0, n = ir_numel(c->arg_types[1]); i < n; i++)
        dst[i] += x[i];
    f32_release(c->args[1], x);
    f32_store(c->args[0], c->arg_types[0], dst);
}

/* (dst, x): dst := x. The CPU computes in fp32: only a bf16 gradient (grad_reduce_in_bf16) converts. */
void cpu_COPY(const rt_kernel_call *c)
{
    if (c->arg_types[0]->dtype == c->arg_types[1]->dtype) {
        memcpy(c->args[0], c->args[1], ir_bytes(c->arg_types[1]));
        return;
    }
    float *x = f32_of(c->args[1], c->arg_types[1]);
    f32_write(c->args[0], c->arg_types[0], x);
    f32_release(c->args[1], x);
}

void cpu_ZERO(const rt_kernel_call *c) { memset(c->args[0], 0, ir_bytes(c->arg_types[0])); }

/* The CPU device's work is done when it returns: a gradient is ready once its grad_ready is reached,
 * and the host's wait for it (copy_async's ready slot) has nothing to wait for. */
void cpu_GRAD_READY(const rt_kernel_call *c) { (void)c; }

/* sumsq[] -> min(1, max_norm / (sqrt(sumsq) + 1e-6)); max_norm = 0 turns clipping off */
void cpu_CLIP_COEF(const rt_kernel_call *c)
{
    double max_norm = c->in->attr[IR_ATTR_CLIP_COEF_MAX_NORM], coef = 1.0;
    if (max_norm != 0)
        coef = fmin(1.0, max_norm / (sqrt((double)argf(c, 0)[0]) + 1e-6));
    resf(c, 0)[0] = (float)coef;
}

void cpu_SQRT(const rt_kernel_call *c)
{
    const float *a = argf(c, 0);
    float *r = resf(c, 0);
    for (int64_t i = 0, n = ir_numel(c->res_types[0]); i < n; i++)
        r[i] = sqrtf(a[i]);
}

/* Element i of Adam's moment (m or v, f32 or bf16: --use-precision-aware-optimizer) or of its
 * gradient (bf16 under grad_reduce_in_bf16). */
static double moment_at(const void *x, ir_dtype t, int64_t i)
{
    return t == IR_BF16 ? rt_bf16_to_f32(((const uint16_t *)x)[i]) : ((const float *)x)[i];
}

static void moment_set(void *x, ir_dtype t, int64_t i, double value)
{
    if (t == IR_BF16)
        ((uint16_t *)x)[i] = rt_f32_to_bf16((float)value); /* via f32: as a GPU's fp32 value is rounded */
    else
        ((float *)x)[i] = (float)value;
}

/* (p, g, m, v, lr[], step[], coef[]), attrs beta1, beta2, eps, weight_decay; in place on p, m, v:
 * g' = g coef; m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2;
 * p -= lr (m/(1-b1^step) / (sqrt(v/(1-b2^step)) + eps) + wd p). Elementwise math in double;
 * the update reads the new moments before they are stored (bf16 moments: rounded then). An i16 p
 * is the remainder of a master held with the bf16 working copy (operand 8) as its high half:
 * the master is joined from the pair, updated, and split back into it (rt_master_split). */
void rt_cpu_adamw_range(const rt_kernel_call *c, int64_t begin, int64_t end)
{
    bool pair = c->arg_types[0]->dtype == IR_I16;
    float *p = pair ? NULL : c->args[0];
    int16_t *rem = pair ? c->args[0] : NULL;
    uint16_t *hi = pair ? c->args[7] : NULL;
    void *m = c->args[2], *v = c->args[3];
    ir_dtype mt = c->arg_types[2]->dtype, vt = c->arg_types[3]->dtype, gt = c->arg_types[1]->dtype;
    const void *g = c->args[1];
    double lr = argf(c, 4)[0], step = argf(c, 5)[0], coef = argf(c, 6)[0];
    const double *a = c->in->attr;
    double b1 = a[IR_ATTR_ADAMW_BETA1], b2 = a[IR_ATTR_ADAMW_BETA2], eps = a[IR_ATTR_ADAMW_EPS];
    double wd = a[IR_ATTR_ADAMW_WEIGHT_DECAY];
    if (step < 1)
        CPU_FAIL("adamw: step is %g but must count from 1 (bias correction divides by 1 - beta^step)", step);
    double bc1 = 1.0 - pow(b1, step), bc2 = 1.0 - pow(b2, step);
    for (int64_t i = begin; i < end; i++) {
        double gi = moment_at(g, gt, i) * coef;
        double mi = b1 * moment_at(m, mt, i) + (1.0 - b1) * gi, vi = b2 * moment_at(v, vt, i) + (1.0 - b2) * gi * gi;
        double pi = pair ? rt_master_join(hi[i], rem[i]) : p[i];
        float next = (float)(pi - lr * (mi / bc1 / (sqrt(vi / bc2) + eps) + wd * pi));
        if (pair)
            rt_master_split(next, &hi[i], &rem[i]);
        else
            p[i] = next;
        moment_set(m, mt, i, mi);
        moment_set(v, vt, i, vi);
    }
}

void cpu_ADAMW(const rt_kernel_call *c)
{
    rt_cpu_adamw_range(c, 0, ir_numel(c->arg_types[0]));
    if (c->nargs == 8 && c->arg_types[0]->dtype == IR_F32) /* the working copy (f32 on the CPU) */
        memcpy(c->args[7], c->args[0], ir_bytes(c->arg_types[0]));
}

/* --- the dispatch table, in ops.def order (ORDER OP) ------------------------------------------ */

const rt_cpu_kernel rt_cpu_kernels[IR_NUM_OPS] = {
#define X(id, text, nargs, nres, inplace, flags, attrs, infer, grad, shard) [IR_OP_##id] = cpu_##id,
#include "ir/ops.def"
#undef X
};

/* --- vocab-parallel cross entropy (logits split over tp; see ops.def) ------------------------- */

/* logits[N,V] -> f32[N] */
void cpu_CE_ROW_MAX(const rt_kernel_call *c)
{
    const float *x = argf(c, 0);
    int64_t N = nrows(c->arg_types[0]), V = last_dim(c->arg_types[0]);
    for (int64_t i = 0; i < N; i++) {
        float mx = x[i * V];
        for (int64_t j = 1; j < V; j++)
            mx = fmaxf(mx, x[i * V + j]);
        resf(c, 0)[i] = mx;
    }
}

/* (logits, targets, gmax) -> [N,2]: sum exp(x - gmax), target logit if in this shard */
void cpu_CE_ROW_STATS(const rt_kernel_call *c)
{
    const float *x = argf(c, 0), *gmax = argf(c, 2);
    const int32_t *targets = c->args[1];
    int64_t N = nrows(c->arg_types[0]), V = last_dim(c->arg_types[0]);
    int64_t start = (int64_t)c->in->attr[IR_ATTR_CE_ROW_STATS_VOCAB_START];
    float *st = resf(c, 0);
    for (int64_t i = 0; i < N; i++) {
        double sum = 0;
        for (int64_t j = 0; j < V; j++)
            sum += exp((double)x[i * V + j] - gmax[i]);
        int64_t t = targets[i] - start;
        st[2 * i] = (float)sum;
        st[2 * i + 1] = t >= 0 && t < V ? x[i * V + t] : 0.0f;
    }
}

/* (stats[N,2], gmax[N]) -> mean of gmax + log(s0) - s1 */
void cpu_CE_LOSS(const rt_kernel_call *c)
{
    const float *st = argf(c, 0), *gmax = argf(c, 1);
    int64_t N = ir_numel(c->arg_types[1]);
    double total = 0;
    for (int64_t i = 0; i < N; i++)
        total += gmax[i] + log((double)st[2 * i]) - st[2 * i + 1];
    resf(c, 0)[0] = (float)(total / N);
}

/* (dloss, logits, targets, gmax, stats) -> dloss/N (exp(x - gmax)/s0 - onehot) */
void cpu_CE_GRAD_SHARDED(const rt_kernel_call *c)
{
    const float *x = argf(c, 1), *gmax = argf(c, 3), *st = argf(c, 4);
    const int32_t *targets = c->args[2];
    int64_t N = nrows(c->arg_types[1]), V = last_dim(c->arg_types[1]);
    int64_t start = (int64_t)c->in->attr[IR_ATTR_CE_GRAD_SHARDED_VOCAB_START];
    double scale = (double)argf(c, 0)[0] / N;
    float *dx = resf(c, 0);
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < V; j++)
            dx[i * V + j] = (float)(scale * (exp((double)x[i * V + j] - gmax[i]) / st[2 * i] -
                                             (targets[i] - start == j ? 1.0 : 0.0)));
}

/* --- mixture of experts (ops.def): tokens as rows; scores computed in double ---------------- */

enum { MOE_SOFTMAX, MOE_SIGMOID };

static double sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }

/* s[E] := softmax(l[E]) */
static void softmax_row(const float *l, int64_t E, double *s)
{
    double mx = l[0], sum = 0;
    for (int64_t e = 1; e < E; e++)
        mx = fmax(mx, l[e]);
    for (int64_t e = 0; e < E; e++)
        sum += s[e] = exp(l[e] - mx);
    for (int64_t e = 0; e < E; e++)
        s[e] /= sum;
}

/* The k largest of v[E] into ids, largest first; a tie goes to the lower expert. */
static void topk_row(const double *v, int64_t E, int64_t k, int32_t *ids)
{
    for (int64_t j = 0; j < k; j++) {
        int64_t best = -1;
        for (int64_t e = 0; e < E; e++) {
            bool taken = false;
            for (int64_t i = 0; i < j && !taken; i++)
                taken = ids[i] == e;
            if (!taken && (best < 0 || v[e] > v[best]))
                best = e;
        }
        ids[j] = (int32_t)best;
    }
}

/* Token n's routing weights w[k] for its chosen ids, before the scaling factor, and the scores
 * (E of them) they come from: softmax of the logits (pre_softmax), the logits themselves (softmax
 * after the top k), or their sigmoid. */
static void route_scores(const rt_kernel_call *c, const float *l, int64_t E, double *s)
{
    int score = (int)c->in->attr[IR_ATTR_MOE_ROUTE_SCORE];
    bool pre = c->in->attr[IR_ATTR_MOE_ROUTE_PRE_SOFTMAX] != 0;
    if (score == MOE_SOFTMAX && pre)
        softmax_row(l, E, s);
    else
        for (int64_t e = 0; e < E; e++)
            s[e] = score == MOE_SIGMOID ? sigmoid_d(l[e]) : l[e];
}

static void route_weights(const rt_kernel_call *c, const double *s, const int32_t *ids, int64_t k, double *w)
{
    int score = (int)c->in->attr[IR_ATTR_MOE_ROUTE_SCORE];
    bool pre = c->in->attr[IR_ATTR_MOE_ROUTE_PRE_SOFTMAX] != 0;
    double sum = 0;
    for (int64_t j = 0; j < k; j++)
        w[j] = s[ids[j]];
    if (score == MOE_SOFTMAX && !pre) { /* softmax over the chosen logits */
        double mx = w[0];
        for (int64_t j = 0; j < k; j++)
            sum += w[j] = exp(w[j] - mx); /* w[0] is the largest */
        for (int64_t j = 0; j < k; j++)
            w[j] /= sum;
    } else if (score == MOE_SIGMOID && k > 1) {
        for (int64_t j = 0; j < k; j++)
            sum += w[j];
        for (int64_t j = 0; j < k; j++)
            w[j] /= sum + 1e-20;
    }
}

static double route_scaling(const rt_kernel_call *c)
{
    double scaling = c->in->attr[IR_ATTR_MOE_ROUTE_SCALING];
    return scaling != 0 ? scaling : 1.0;
}

/* Group-limited routing (Megatron's group_limited_topk): v[E] as `groups` runs of E/groups, each
 * scored by the sum of its top k/group_topk; the experts outside the best group_topk groups get
 * -inf, so the top k of v fall in those groups. ids: scratch of max(k, groups) slots. */
static void limit_to_groups(const rt_kernel_call *c, double *v, int64_t E, int64_t k, int32_t *ids)
{
    int64_t groups = (int64_t)c->in->attr[IR_ATTR_MOE_ROUTE_GROUPS];
    int64_t keep = (int64_t)c->in->attr[IR_ATTR_MOE_ROUTE_GROUP_TOPK], size = E / groups;
    double *gs = scratch((size_t)groups, sizeof(double));
    for (int64_t g = 0; g < groups; g++) {
        topk_row(v + g * size, size, k / keep, ids);
        for (int64_t j = 0; j < k / keep; j++)
            gs[g] += v[g * size + ids[j]];
    }
    topk_row(gs, groups, keep, ids);
    for (int64_t g = 0; g < groups; g++) {
        bool kept = false;
        for (int64_t j = 0; j < keep; j++)
            kept |= ids[j] == g;
        for (int64_t e = 0; !kept && e < size; e++)
            v[g * size + e] = -INFINITY;
    }
    free(gs);
}

/* (logits[N,E][, h[2,E]]) -> (w[N,k], ids[N,k]): with an expert bias the top k of s + h[1]; with
 * groups among the kept groups' experts only */
void cpu_MOE_ROUTE(const rt_kernel_call *c)
{
    const float *logits = argf(c, 0), *bias = c->in->nargs > 1 ? argf(c, 1) : NULL;
    int64_t N = c->arg_types[0]->dims[0], E = c->arg_types[0]->dims[1], k = c->res_types[0]->dims[1];
    int64_t groups = (int64_t)c->in->attr[IR_ATTR_MOE_ROUTE_GROUPS];
    float *w = resf(c, 0);
    int32_t *ids = c->res[1], *gids = groups ? scratch((size_t)(k > groups ? k : groups), sizeof(int32_t)) : NULL;
    double *s = scratch((size_t)E, sizeof(double)), *wd = scratch((size_t)k, sizeof(double)), scaling = route_scaling(c);
    double *choose = bias || groups ? scratch((size_t)E, sizeof(double)) : s;
    for (int64_t n = 0; n < N; n++) {
        route_scores(c, logits + n * E, E, s);
        for (int64_t e = 0; choose != s && e < E; e++)
            choose[e] = s[e] + (bias ? bias[E + e] : 0.0);
        if (groups)
            limit_to_groups(c, choose, E, k, gids);
        topk_row(choose, E, k, ids + n * k);
        route_weights(c, s, ids + n * k, k, wd);
        for (int64_t j = 0; j < k; j++)
            w[n * k + j] = (float)(wd[j] * scaling);
    }
    if (choose != s)
        free(choose);
    free(gids);
    free(s);
    free(wd);
}

/* (h[2,E], ids[N,k][, w[N,k]]): h[0][ids] += 1 for each pair (kept: w != 0) */
void cpu_MOE_BIAS_COUNT(const rt_kernel_call *c)
{
    float *h = (float *)c->args[0];
    const int32_t *ids = c->args[1];
    const float *w = c->in->nargs > 2 ? argf(c, 2) : NULL;
    for (int64_t i = 0, n = ir_numel(c->arg_types[1]); i < n; i++)
        h[ids[i]] += !w || w[i] != 0;
}

/* (h[2,E], r like h) {rate}: h[1][e] += rate sign(mean(r[0]) - r[0][e]), then h[0] := 0 */
void cpu_MOE_BIAS_UPDATE(const rt_kernel_call *c)
{
    float *h = (float *)c->args[0];
    const float *r = argf(c, 1);
    int64_t E = c->arg_types[0]->dims[1];
    double rate = c->in->attr[IR_ATTR_MOE_BIAS_UPDATE_RATE], mean = 0;
    for (int64_t e = 0; e < E; e++)
        mean += r[e];
    mean /= (double)E;
    for (int64_t e = 0; rate != 0 && e < E; e++)
        h[E + e] = (float)(h[E + e] + rate * ((mean > r[e]) - (mean < r[e])));
    for (int64_t e = 0; e < E; e++)
        h[e] = 0;
}

/* (dw, logits, ids) -> dlogits: back through the scaling, the weights' normalisation and the scores */
void cpu_MOE_ROUTE_GRAD(const rt_kernel_call *c)
{
    const float *dw = argf(c, 0), *logits = argf(c, 1);
    const int32_t *ids = c->args[2];
    int64_t N = c->arg_types[1]->dims[0], E = c->arg_types[1]->dims[1], k = c->arg_types[2]->dims[1];
    int score = (int)c->in->attr[IR_ATTR_MOE_ROUTE_GRAD_SCORE];
    bool pre = c->in->attr[IR_ATTR_MOE_ROUTE_GRAD_PRE_SOFTMAX] != 0;
    float *dl = resf(c, 0);
    double *s = scratch((size_t)E, sizeof(double)), *ds = scratch((size_t)E, sizeof(double));
    double *w = scratch((size_t)k, sizeof(double)), *g = scratch((size_t)k, sizeof(double)), scaling = route_scaling(c);
    for (int64_t n = 0; n < N; n++) {
        const int32_t *id = ids + n * k;
        route_scores(c, logits + n * E, E, s);
        route_weights(c, s, id, k, w);
        double gw = 0; /* sum_j w_j g_j */
        for (int64_t j = 0; j < k; j++)
            gw += w[j] * (g[j] = dw[n * k + j] * scaling);
        for (int64_t e = 0; e < E; e++)
            ds[e] = 0;
        if (score == MOE_SOFTMAX && !pre) { /* w = softmax of the chosen logits */
            for (int64_t j = 0; j < k; j++)
                ds[id[j]] = w[j] * (g[j] - gw);
        } else if (score == MOE_SOFTMAX) { /* w = the chosen softmax probabilities: back through the softmax */
            double sg = 0;
            for (int64_t j = 0; j < k; j++)
                sg += s[id[j]] * g[j];
            for (int64_t e = 0; e < E; e++)
                ds[e] = -s[e] * sg;
            for (int64_t j = 0; j < k; j++)
                ds[id[j]] += s[id[j]] * g[j];
        } else { /* sigmoid scores, over their sum when k > 1 */
            double sum = 0;
            for (int64_t j = 0; j < k; j++)
                sum += s[id[j]];
            for (int64_t j = 0; j < k; j++) {
                double dsel = k > 1 ? (g[j] - gw) / (sum + 1e-20) : g[j];
                ds[id[j]] = dsel * s[id[j]] * (1 - s[id[j]]);
            }
        }
        for (int64_t e = 0; e < E; e++)
            dl[n * E + e] = (float)ds[e];
    }
    free(s);
    free(ds);
    free(w);
    free(g);
}

/* (x, w, ids) -> x * keep: each expert keeps its first `capacity` pairs by weight (probs) or by
 * token (position); a pair's rank is the pairs of its expert that come before it. */
void cpu_MOE_CAPACITY(const rt_kernel_call *c)
{
    const float *x = argf(c, 0), *w = argf(c, 1);
    const int32_t *ids = c->args[2];
    int64_t R = ir_numel(c->arg_types[0]), k = c->arg_types[0]->dims[1];
    int64_t capacity = (int64_t)c->in->attr[IR_ATTR_MOE_CAPACITY_CAPACITY];
    int64_t cp = (int64_t)c->in->attr[IR_ATTR_MOE_CAPACITY_CP], seq = (int64_t)c->in->attr[IR_ATTR_MOE_CAPACITY_SEQ];
    bool by_position = c->in->attr[IR_ATTR_MOE_CAPACITY_POLICY] != 0;
    float *r = resf(c, 0);
    int64_t *order = scratch((size_t)R, sizeof(int64_t)); /* token order (under cp, the gathered rows') */
    for (int64_t p = 0; p < R; p++)
        order[p] = ir_moe_pair_order(p, k, cp, seq);
    for (int64_t p = 0; p < R; p++) {
        int64_t before = 0;
        for (int64_t q = 0; q < R && before < capacity; q++) {
            bool earlier = order[q] < order[p];
            before += ids[q] == ids[p] && q != p && (by_position ? earlier : w[q] > w[p] || (w[q] == w[p] && earlier));
        }
        r[p] = before < capacity ? x[p] : 0.0f;
    }
    free(order);
}

/* ids[N,k] -> (perm[N k], counts[E]): a counting sort, stable */
void cpu_MOE_SORT(const rt_kernel_call *c)
{
    const int32_t *ids = c->args[0];
    const float *kept = c->in->nargs == 2 ? argf(c, 1) : NULL; /* w == 0: dropped at capacity */
    int32_t *perm = c->res[0], *counts = c->res[1];
    int64_t R = ir_numel(c->arg_types[0]), E = c->res_types[1]->dims[0];
    int64_t *next = scratch((size_t)E + 1, sizeof(int64_t)); /* next[E]: the dropped pairs' next row */
    for (int64_t e = 0; e < E; e++)
        counts[e] = 0;
    for (int64_t p = 0; p < R; p++) {
        if (ids[p] < 0 || ids[p] >= E)
            CPU_FAIL("moe_sort: expert id %d of pair %lld is outside [0, %lld): the router's ids are corrupt",
                     (int)ids[p], (long long)p, (long long)E);
        counts[ids[p]] += !kept || kept[p] != 0;
    }
    for (int64_t e = 1; e <= E; e++)
        next[e] = next[e - 1] + counts[e - 1];
    for (int64_t p = 0; p < R; p++)
        perm[p] = (int32_t)next[!kept || kept[p] != 0 ? ids[p] : E]++;
    free(next);
}

/* (x[N,H], perm[R]) -> xp[R,H] */
void cpu_MOE_PERMUTE(const rt_kernel_call *c)
{
    const float *x = argf(c, 0);
    const int32_t *perm = c->args[1];
    int64_t N = c->arg_types[0]->dims[0], H = c->arg_types[0]->dims[1], R = c->arg_types[1]->dims[0], k = R / N;
    float *xp = resf(c, 0);
    for (int64_t p = 0; p < R; p++)
        memcpy(xp + (int64_t)perm[p] * H, x + p / k * H, (size_t)H * sizeof(float));
}

/* (yp[R,H], perm, w[N,k]) -> y[N,H] */
void cpu_MOE_UNPERMUTE(const rt_kernel_call *c)
{
    const float *yp = argf(c, 0), *w = argf(c, 2);
    const int32_t *perm = c->args[1];
    int64_t N = c->arg_types[2]->dims[0], k = c->arg_types[2]->dims[1], H = c->arg_types[0]->dims[1];
    float *y = resf(c, 0);
    for (int64_t n = 0; n < N; n++)
        for (int64_t h = 0; h < H; h++) {
            float sum = 0;
            for (int64_t j = 0; j < k; j++)
                sum += w[n * k + j] * yp[(int64_t)perm[n * k + j] * H + h];
            y[n * H + h] = sum;
        }
}

/* (dy[N,H], yp, perm, w) -> (dyp, dw) */
void cpu_MOE_UNPERMUTE_GRAD(const rt_kernel_call *c)
{
    const float *dy = argf(c, 0), *yp = argf(c, 1), *w = argf(c, 3);
    const int32_t *perm = c->args[2];
    int64_t N = c->arg_types[3]->dims[0], k = c->arg_types[3]->dims[1], H = c->arg_types[1]->dims[1];
    float *dyp = resf(c, 0), *dw = resf(c, 1);
    for (int64_t p = 0; p < N * k; p++) {
        const float *d = dy + p / k * H, *row = yp + (int64_t)perm[p] * H;
        float *out = dyp + (int64_t)perm[p] * H, dot = 0;
        for (int64_t h = 0; h < H; h++) {
            dot += d[h] * row[h];
            out[h] = w[p] * d[h];
        }
        dw[p] = dot;
    }
}

/* The counts[E] of a grouped op, checked to sum to its R rows. */
static const int32_t *group_counts(const rt_kernel_call *c, int i, int64_t R)
{
    const int32_t *counts = c->args[i];
    int64_t sum = 0;
    for (int64_t e = 0; e < c->arg_types[i]->dims[0]; e++)
        sum += counts[e] >= 0 ? counts[e] : R + 1;
    if (sum > R) /* below R under expert parallelism: the receive buffer's room past the rows received */
        CPU_FAIL("%s: the experts' counts sum to %lld, more than the %lld routed rows: moe_sort's counts are corrupt",
                 ir_ops[c->in->op].name, (long long)sum, (long long)R);
    return counts;
}

/* (x[R,K], w[E,F,K] (tb) or [E,K,F], counts[E]) -> [R,F]: one GEMM per expert over its rows */
void cpu_MOE_GROUPED_MATMUL(const rt_kernel_call *c)
{
    const float *x = argf(c, 0), *w = argf(c, 1);
    bool tb = c->in->attr[IR_ATTR_MOE_GROUPED_MATMUL_TB] != 0;
    int64_t R = c->arg_types[0]->dims[0], K = c->arg_types[0]->dims[1], E = c->arg_types[1]->dims[0];
    int64_t F = c->res_types[0]->dims[1];
    const int32_t *counts = group_counts(c, 2, R);
    float *y = resf(c, 0);
    int64_t row = 0;
    for (int64_t e = 0; e < E; row += counts[e++])
        if (counts[e])
            cblas_sgemm(CblasRowMajor, CblasNoTrans, tb ? CblasTrans : CblasNoTrans, counts[e], (int)F, (int)K, 1.0f,
                        x + row * K, (int)K, w + e * F * K, tb ? (int)K : (int)F, 0.0f, y + row * F, (int)F);
    memset(y + row * F, 0, sizeof(float) * (size_t)((R - row) * F)); /* rows no expert holds */
}

/* dw[E,P,Q] := beta dw + a_e^T b_e, the operands (a[R,P], b[R,Q], counts[E]) from argument `first` on;
 * an expert without rows keeps beta dw (0 when beta is 0) */
static void grouped_wgrad_into(const rt_kernel_call *c, int first, float beta, float *dw)
{
    const float *a = argf(c, first), *b = argf(c, first + 1);
    int64_t R = c->arg_types[first]->dims[0], P = c->arg_types[first]->dims[1], Q = c->arg_types[first + 1]->dims[1];
    int64_t E = c->arg_types[first + 2]->dims[0];
    const int32_t *counts = group_counts(c, first + 2, R);
    if (beta == 0.0f)
        memset(dw, 0, sizeof(float) * (size_t)(E * P * Q));
    for (int64_t e = 0, row = 0; e < E; row += counts[e++])
        if (counts[e])
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)P, (int)Q, counts[e], 1.0f, a + row * P, (int)P,
                        b + row * Q, (int)Q, beta, dw + e * P * Q, (int)Q);
}

/* (a[R,P], b[R,Q], counts[E]) -> [E,P,Q]: a_e^T b_e */
void cpu_MOE_GROUPED_WGRAD(const rt_kernel_call *c) { grouped_wgrad_into(c, 0, 0.0f, resf(c, 0)); }

/* (dst, a, b, counts): dst += a_e^T b_e (beta = 1); assign: dst := (beta = 0) */
void cpu_MOE_GROUPED_WGRAD_ACCUMULATE(const rt_kernel_call *c)
{
    accumulate_op(c, grouped_wgrad_into, c->in->attr[IR_ATTR_MOE_GROUPED_WGRAD_ACCUMULATE_ASSIGN] != 0);
}

/* --- FP8 experts (ops.def): a scale per expert, tensorwise or delayed -------------------------- */

/* The elements of x each expert's scale covers, into first[E + 1] (expert e's are [first[e],
 * first[e+1])): its rows by the counts at operand `counts` (x[R,K]), or without counts (counts < 0)
 * x[e] of an expert weight [E, ...]. The rows past the counts are nobody's. */
static void fp8_expert_spans(const rt_kernel_call *c, int counts, int64_t E, int64_t *first)
{
    const ir_type *x = c->arg_types[0];
    int64_t K = last_dim(x);
    const int32_t *n = counts >= 0 ? group_counts(c, counts, x->dims[0]) : NULL;
    first[0] = 0;
    for (int64_t e = 0; e < E; e++)
        first[e + 1] = first[e] + (n ? n[e] * K : ir_numel(x) / E);
}

/* (x, counts) or (w) -> amax[E]: each expert's max |x| */
void cpu_FP8_GROUPED_AMAX(const rt_kernel_call *c)
{
    int64_t E = c->res_types[0]->dims[0], *first = scratch((size_t)E + 1, sizeof(int64_t));
    fp8_expert_spans(c, c->nargs == 2 ? 1 : -1, E, first);
    for (int64_t e = 0; e < E; e++)
        resf(c, 0)[e] = amax_of(argf(c, 0) + first[e], first[e + 1] - first[e]);
    free(first);
}

/* (x, amax[E][, counts]) -> (q, scale_inv[E]): expert e's elements quantized as fp8_quantize's by
 * amax[e]; q past the counts' rows zero */
void cpu_FP8_GROUPED_QUANTIZE(const rt_kernel_call *c)
{
    bool e5m2 = c->in->attr[IR_ATTR_FP8_GROUPED_QUANTIZE_FORMAT] == IR_FP8_E5M2;
    int64_t E = c->arg_types[1]->dims[0], *first = scratch((size_t)E + 1, sizeof(int64_t));
    fp8_expert_spans(c, c->nargs == 3 ? 2 : -1, E, first);
    const float *x = argf(c, 0);
    uint8_t *q = c->res[0];
    for (int64_t e = 0; e < E; e++) {
        float scale = fp8_scale(argf(c, 1)[e], c->in->attr[IR_ATTR_FP8_GROUPED_QUANTIZE_MARGIN], e5m2);
        for (int64_t i = first[e]; i < first[e + 1]; i++)
            q[i] = rt_fp8_encode(x[i] * scale, e5m2);
        resf(c, 1)[e] = 1.0f / scale;
    }
    memset(q + first[E], 0, (size_t)(ir_numel(c->arg_types[0]) - first[E]));
    free(first);
}

/* (qx[R,K], sx[E], qw[E,F,K] (tb) or [E,K,F], sw[E], counts[, hdy]) -> [R,F]: one GEMM per expert
 * over its rows, alpha sx[e] sw[e] (blockwise: each element scaled by its tile's or block's); the rows
 * past the counts zero */
void cpu_FP8_GROUPED_MATMUL(const rt_kernel_call *c)
{
    bool blocks = ir_fp8_grouped_blockwise(c->arg_types[1]); /* fp8_decoded applies the blocks */
    float *x = blocks ? fp8_decoded(c, 0) : fp8_bytes_decoded(c, 0), *w = blocks ? fp8_decoded(c, 2) : fp8_bytes_decoded(c, 2);
    const float *sx = argf(c, 1), *sw = argf(c, 3);
    bool tb = c->in->attr[IR_ATTR_FP8_GROUPED_MATMUL_TB] != 0;
    int64_t R = c->arg_types[0]->dims[0], K = c->arg_types[0]->dims[1], E = c->arg_types[2]->dims[0];
    int64_t F = c->res_types[0]->dims[1], row = 0;
    const int32_t *counts = group_counts(c, 4, R);
    float *y = resf(c, 0);
    for (int64_t e = 0; e < E; row += counts[e++])
        if (counts[e])
            cblas_sgemm(CblasRowMajor, CblasNoTrans, tb ? CblasTrans : CblasNoTrans, counts[e], (int)F, (int)K,
                        blocks ? 1.0f : sx[e] * sw[e], x + row * K, (int)K, w + e * F * K, tb ? (int)K : (int)F, 0.0f,
                        y + row * F, (int)F);
    memset(y + row * F, 0, sizeof(float) * (size_t)((R - row) * F)); /* rows no expert holds */
    free(x);
    free(w);
}

/* Blockwise: dw[E,P,Q] := beta dw + qa_e qb_e^T, the operands (qa[P,R'], sa, qb[Q,R'], sb, counts) from
 * `first` on, the experts' rows transposed in 1x128 tiles (fp8_block_quantize with counts) and
 * scaled by them, expert e's span of columns from ir_fp8_expert_span, its rows rounded up to 128
 * (the quantize's zeros past them: the k of cuBLASLt's GEMM, so both read the same); the product
 * rounded to f32 before it is added, as the tensorwise one's */
static void fp8_grouped_block_wgrad_into(const rt_kernel_call *c, int first, float beta, float *dw)
{
    float *a = fp8_decoded(c, first), *b = fp8_decoded(c, first + 2);
    int64_t P = c->arg_types[first]->dims[0], Q = c->arg_types[first + 2]->dims[0], RP = c->arg_types[first]->dims[1];
    int64_t E = c->arg_types[first + 4]->dims[0];
    const int32_t *counts = c->args[first + 4];
    float *p = scratch((size_t)(P * Q), sizeof(float));
    for (int64_t e = 0; e < E; e++) {
        float *d = dw + e * P * Q;
        int64_t col = ir_fp8_expert_span(counts, e), k = ((int64_t)counts[e] + IR_FP8_BLOCK - 1) / IR_FP8_BLOCK * IR_FP8_BLOCK;
        if (counts[e] < 0 || col + k > RP)
            CPU_FAIL("%s: expert %lld's %d rows past the %lld columns of its transposed operands: moe_sort's counts are "
                     "corrupt", ir_ops[c->in->op].name, (long long)e, counts[e], (long long)RP);
        if (counts[e])
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)P, (int)Q, (int)k, 1.0f, a + col, (int)RP,
                        b + col, (int)RP, 0.0f, p, (int)Q);
        for (int64_t i = 0; i < P * Q; i++)
            d[i] = (beta != 0.0f ? d[i] : 0.0f) + (counts[e] ? p[i] : 0.0f);
    }
    free(p);
    free(a);
    free(b);
}

/* dw[E,P,Q] := beta dw + qa_e^T qb_e, alpha sa[e] sb[e], the operands (qa[R,P], sa[E], qb[R,Q], sb[E],
 * counts) from argument `first` on; an expert without rows keeps beta dw (0 when beta is 0). The
 * product is rounded to f32 before it is added (as fp8_product's), so the fused accumulate's
 * numbers are the unfused wgrad and accumulate's. */
static void fp8_grouped_wgrad_into(const rt_kernel_call *c, int first, float beta, float *dw)
{
    if (ir_fp8_grouped_blockwise(c->arg_types[first + 1])) {
        fp8_grouped_block_wgrad_into(c, first, beta, dw);
        return;
    }
    float *a = fp8_bytes_decoded(c, first), *b = fp8_bytes_decoded(c, first + 2);
    const float *sa = argf(c, first + 1), *sb = argf(c, first + 3);
    int64_t R = c->arg_types[first]->dims[0], P = c->arg_types[first]->dims[1], Q = c->arg_types[first + 2]->dims[1];
    int64_t E = c->arg_types[first + 4]->dims[0];
    const int32_t *counts = group_counts(c, first + 4, R);
    float *p = scratch((size_t)(P * Q), sizeof(float));
    for (int64_t e = 0, row = 0; e < E; row += counts[e++]) {
        float *d = dw + e * P * Q;
        if (counts[e])
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)P, (int)Q, counts[e], sa[e] * sb[e], a + row * P,
                        (int)P, b + row * Q, (int)Q, 0.0f, p, (int)Q);
        for (int64_t i = 0; i < P * Q; i++)
            d[i] = (beta != 0.0f ? d[i] : 0.0f) + (counts[e] ? p[i] : 0.0f);
    }
    free(p);
    free(a);
    free(b);
}

/* (qa[R,P], sa[E], qb[R,Q], sb[E], counts) -> [E,P,Q]: qa_e^T qb_e; an expert without rows zero */
void cpu_FP8_GROUPED_WGRAD(const rt_kernel_call *c) { fp8_grouped_wgrad_into(c, 0, 0.0f, resf(c, 0)); }

/* (dst, qa, sa, qb, sb, counts): dst += qa_e^T qb_e (assign: :=) */
void cpu_FP8_GROUPED_WGRAD_ACCUMULATE(const rt_kernel_call *c)
{
    accumulate_op(c, fp8_grouped_wgrad_into, c->in->attr[IR_ATTR_FP8_GROUPED_WGRAD_ACCUMULATE_ASSIGN] != 0);
}

/* The aux loss's full score distribution of one token: softmax, or sigmoid over its sum + 1e-20 */
static void aux_scores(int score, const float *l, int64_t E, double *s)
{
    if (score == MOE_SOFTMAX) {
        softmax_row(l, E, s);
        return;
    }
    double sum = 0;
    for (int64_t e = 0; e < E; e++)
        sum += s[e] = sigmoid_d(l[e]);
    for (int64_t e = 0; e < E; e++)
        s[e] /= sum + 1e-20;
}

/* The tokens each expert was routed, and the loss's factor E / (k N^2). */
static double aux_counts(const int32_t *ids, int64_t N, int64_t E, int64_t k, double *counts)
{
    for (int64_t e = 0; e < E; e++)
        counts[e] = 0;
    for (int64_t p = 0; p < N * k; p++)
        counts[ids[p]] += 1;
    return (double)E / ((double)k * (double)N * (double)N);
}

/* The tokens of one of the aux loss's sequences: its seq attribute, 0 for all N (ops.def). */
static int64_t aux_seq(const rt_kernel_call *c, int64_t N)
{
    double seq = c->in->attr[IR_ATTR_MOE_AUX_LOSS_SEQ];
    return seq > 0 ? (int64_t)seq : N;
}

/* (logits[N,E], ids[N,k]) -> the mean over the sequences of S tokens of E / (k S^2) sum_e (sum_n s[n,e])
 * counts[e], n and counts over the sequence's tokens (S = N: the micro-batch's one loss) */
void cpu_MOE_AUX_LOSS(const rt_kernel_call *c)
{
    const float *l = argf(c, 0);
    const int32_t *ids = c->args[1];
    int64_t N = c->arg_types[0]->dims[0], E = c->arg_types[0]->dims[1], k = c->arg_types[1]->dims[1];
    int64_t S = aux_seq(c, N);
    double *s = scratch((size_t)E, sizeof(double)), *counts = scratch((size_t)E, sizeof(double)), loss = 0;
    for (int64_t n0 = 0; n0 < N; n0 += S) {
        double f = aux_counts(ids + n0 * k, S, E, k, counts), sum = 0;
        for (int64_t n = n0; n < n0 + S; n++) {
            aux_scores((int)c->in->attr[IR_ATTR_MOE_AUX_LOSS_SCORE], l + n * E, E, s);
            for (int64_t e = 0; e < E; e++)
                sum += s[e] * counts[e];
        }
        loss += sum * f;
    }
    resf(c, 0)[0] = (float)(loss * (double)S / (double)N);
    free(s);
    free(counts);
}

/* (dloss, logits, ids) -> dlogits: d loss / d s[n,e] = f counts[e] (its sequence's, over their number),
 * back through the scores */
void cpu_MOE_AUX_LOSS_GRAD(const rt_kernel_call *c)
{
    const float *l = argf(c, 1);
    const int32_t *ids = c->args[2];
    int64_t N = c->arg_types[1]->dims[0], E = c->arg_types[1]->dims[1], k = c->arg_types[2]->dims[1];
    int64_t S = aux_seq(c, N);
    int score = (int)c->in->attr[IR_ATTR_MOE_AUX_LOSS_GRAD_SCORE];
    double *s = scratch((size_t)E, sizeof(double)), *counts = scratch((size_t)E, sizeof(double)), f = 0;
    float *dl = resf(c, 0);
    for (int64_t n = 0; n < N; n++) {
        if (n % S == 0)
            f = aux_counts(ids + n * k, S, E, k, counts) * argf(c, 0)[0] * (double)S / (double)N;
        aux_scores(score, l + n * E, E, s);
        double sg = 0, sig_sum = 0;
        for (int64_t e = 0; e < E; e++)
            sg += s[e] * counts[e] * f;
        if (score == MOE_SOFTMAX) {
            for (int64_t e = 0; e < E; e++)
                dl[n * E + e] = (float)(s[e] * (counts[e] * f - sg));
            continue;
        }
        /* s = q / (sum q + 1e-20), q = sigmoid(l): ds/dq through the sum, then dq/dl = q (1 - q) */
        for (int64_t e = 0; e < E; e++)
            sig_sum += sigmoid_d(l[n * E + e]);
        for (int64_t e = 0; e < E; e++) {
            double q = sigmoid_d(l[n * E + e]);
            dl[n * E + e] = (float)((counts[e] * f - sg) / (sig_sum + 1e-20) * q * (1 - q));
        }
    }
    free(s);
    free(counts);
}

/* log-sum-exp of row l[E] */
static double logsumexp_row(const float *l, int64_t E)
{
    double mx = l[0], sum = 0;
    for (int64_t e = 1; e < E; e++)
        mx = fmax(mx, l[e]);
    for (int64_t e = 0; e < E; e++)
        sum += exp(l[e] - mx);
    return mx + log(sum);
}

/* logits[N,E] -> mean_n lse_n^2 */
void cpu_MOE_Z_LOSS(const rt_kernel_call *c)
{
    const float *l = argf(c, 0);
    int64_t N = c->arg_types[0]->dims[0], E = c->arg_types[0]->dims[1];
    double sum = 0;
    for (int64_t n = 0; n < N; n++) {
        double lse = logsumexp_row(l + n * E, E);
        sum += lse * lse;
    }
    resf(c, 0)[0] = (float)(sum / (double)N);
}

/* (dloss, logits) -> dloss 2 lse_n / N softmax(row n) */
void cpu_MOE_Z_LOSS_GRAD(const rt_kernel_call *c)
{
    const float *l = argf(c, 1);
    int64_t N = c->arg_types[1]->dims[0], E = c->arg_types[1]->dims[1];
    double d = argf(c, 0)[0];
    float *dl = resf(c, 0);
    for (int64_t n = 0; n < N; n++) {
        double lse = logsumexp_row(l + n * E, E);
        for (int64_t e = 0; e < E; e++)
            dl[n * E + e] = (float)(d * 2 * lse / (double)N * exp(l[n * E + e] - lse));
    }
}

/* (x, loss) -> x (its result may share x's bytes) */
void cpu_MOE_AUX_ATTACH(const rt_kernel_call *c)
{
    if (c->res[0] != c->args[0])
        memmove(c->res[0], c->args[0], ir_bytes(c->arg_types[0]));
}
