/* launchers.c — the CUDA launcher of every op except matmul and attention (matmul.c, attention.c):
 * picks the kernel of kernels_templates/ by dtype, its grid and block, stages scratch, and the
 * dispatch table rt_cuda_launchers in ops.def order. */
#include "cuda_ctx.h"
#include "launchers.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* --- kernel names ---------------------------------------------------------------------------- */

static const struct {
    const char *stem;
    int ndtypes;
} kernel_families[RT_CUDA_NUM_KERNELS] = {
#define K(id, stem, ndtypes) [RT_CUK_##id] = {stem, ndtypes},
    RT_CUDA_KERNELS(K)
#undef K
};

/* The kernels exist for f32 and bf16 only; anything else in a GPU plan is a codegen bug. */
static const char *float_suffix(const rt_kernel_call *c, const ir_type *t)
{
    static const char *const suffix[] = RT_CUDA_FLOAT_SUFFIXES;
    if (t->dtype == IR_F32 || t->dtype == IR_BF16)
        return suffix[t->dtype == IR_BF16];
    fprintf(stderr, "train_rank: %s has no CUDA kernel for %s tensors (only f32 and bf16); the plan was compiled "
                    "for a dtype this backend lacks: recompile with bf16 or f32\n",
            ir_ops[c->in->op].name, ir_dtype_name(t->dtype));
    exit(1);
}

/* Requires an f32 operand where the kernel reads floats directly (scalars, optimizer state). */
static void need_f32(const rt_kernel_call *c, const ir_type *t, const char *what)
{
    if (t->dtype == IR_F32)
        return;
    fprintf(stderr, "train_rank: %s on CUDA needs an f32 %s, got %s: the plan keeps optimizer state and loss "
                    "scalars in f32, so this is an mcc codegen bug\n",
            ir_ops[c->in->op].name, what, ir_dtype_name(t->dtype));
    exit(1);
}

typedef struct {
    char s[64];
} kernel_name;

/* stem_<t0>[_<t1>], as many suffixes as the family has; unused types may be NULL. */
static kernel_name name_of(const rt_kernel_call *c, rt_cuda_kernel k, const ir_type *t0, const ir_type *t1)
{
    kernel_name n;
    int nd = kernel_families[k].ndtypes;
    snprintf(n.s, sizeof n.s, "%s%s%s%s%s", kernel_families[k].stem, nd > 0 ? "_" : "",
             nd > 0 ? float_suffix(c, t0) : "", nd > 1 ? "_" : "", nd > 1 ? float_suffix(c, t1) : "");
    return n;
}

/* --- launch shapes ---------------------------------------------------------------------------- */

enum { FLAT_BLOCK = 256, MAX_GRID = 1 << 16 }; /* kernels loop grid-stride past MAX_GRID blocks */

static unsigned capped_grid(int64_t blocks) { return blocks < MAX_GRID ? (unsigned)blocks : MAX_GRID; }

/* One thread per element of n. */
static void launch_flat(rt_cuda_ctx *cx, kernel_name k, int64_t n, void **params)
{
    rt_cuda_launch(cx, k.s, capped_grid((n + FLAT_BLOCK - 1) / FLAT_BLOCK), 1, 1, FLAT_BLOCK, 0, params);
}

/* Threads for a block that owns rows of `width` elements: ~4 elements each, a multiple of 32. */
static unsigned row_block(int64_t width)
{
    int64_t t = ((width + 3) / 4 + 31) / 32 * 32;
    return t < 32 ? 32 : t > 1024 ? 1024 : (unsigned)t;
}

/* One block per row of `width` (grid-strided past MAX_GRID rows). */
static void launch_rows(rt_cuda_ctx *cx, kernel_name k, int64_t rows, int64_t width, size_t smem, void **params)
{
    rt_cuda_launch(cx, k.s, capped_grid(rows), 1, 1, row_block(width), smem, params);
}

static int64_t last_dim(const ir_type *t) { return t->ndim ? t->dims[t->ndim - 1] : 1; }
static int64_t nrows(const ir_type *t) { return last_dim(t) ? ir_numel(t) / last_dim(t) : 0; }
static CUdeviceptr dptr(void *p) { return (CUdeviceptr)(uintptr_t)p; }

static void device_copy(rt_cuda_ctx *cx, void *dst, const void *src, size_t bytes)
{
    if (dst != src && bytes)
        RT_CU_CHECK(cuMemcpyDtoDAsync(dptr(dst), dptr((void *)src), bytes, rt_cuda_stream(cx)));
}

/* --- shared shapes of several ops ------------------------------------------------------------- */

/* r[n_out] := column sums of x[R,N] (then zero past N), in two deterministic stages: row chunks
 * of at least 64 rows, at most 128 chunks, each summed per column into f32 partials[S,N]. */
static void column_sums(rt_cuda_ctx *cx, const rt_kernel_call *c, void *r, const void *x, const ir_type *xt,
                        int64_t R, int64_t N, int64_t n_out)
{
    long long rows = R, cols = N, out = n_out, stride = N;
    long long chunk = (R + 127) / 128 < 64 ? 64 : (R + 127) / 128;
    int S = (int)((R + chunk - 1) / chunk);
    void *partial = rt_cuda_scratch(cx, (size_t)S * (size_t)N * sizeof(float));
    void *p1[] = {&x, &rows, &cols, &chunk, &partial};
    rt_cuda_launch(cx, name_of(c, RT_CUK_COLSUM_PARTIAL, xt, NULL).s, (unsigned)((N + 31) / 32), (unsigned)S, 1, 256,
                   0, p1);
    void *p2[] = {&r, &partial, &S, &stride, &cols, &out};
    launch_flat(cx, name_of(c, RT_CUK_COLSUM_FINAL, c->res_types[0], NULL), n_out, p2);
}

/* r := f(a) */
static void unary(rt_cuda_ctx *cx, const rt_kernel_call *c, rt_cuda_kernel k)
{
    void *r = c->res[0], *a = c->args[0];
    long long n = ir_numel(c->res_types[0]);
    void *p[] = {&r, &a, &n};
    launch_flat(cx, name_of(c, k, c->res_types[0], NULL), n, p);
}

/* r := f(a, b) */
static void binary(rt_cuda_ctx *cx, const rt_kernel_call *c, rt_cuda_kernel k)
{
    void *r = c->res[0], *a = c->args[0], *b = c->args[1];
    long long n = ir_numel(c->res_types[0]);
    void *p[] = {&r, &a, &b, &n};
    launch_flat(cx, name_of(c, k, c->res_types[0], NULL), n, p);
}

/* (dst, src) of accumulate and copy */
static void dst_src(rt_cuda_ctx *cx, const rt_kernel_call *c, rt_cuda_kernel k)
{
    void *dst = c->args[0], *src = c->args[1];
    long long n = ir_numel(c->arg_types[1]);
    void *p[] = {&dst, &src, &n};
    launch_flat(cx, name_of(c, k, c->arg_types[0], c->arg_types[1]), n, p);
}

/* --- sources and sinks: bound by the executor, nothing to launch ------------------------------ */

void cuda_INPUT(rt_cuda_ctx *cx, const rt_kernel_call *c) {}
void cuda_GLOBAL(rt_cuda_ctx *cx, const rt_kernel_call *c) {}
void cuda_OUTPUT(rt_cuda_ctx *cx, const rt_kernel_call *c) {}

void cuda_FILL(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    void *r = c->res[0];
    long long n = ir_numel(c->res_types[0]);
    float value = (float)c->in->attr[0];
    void *p[] = {&r, &n, &value};
    launch_flat(cx, name_of(c, RT_CUK_FILL, c->res_types[0], NULL), n, p);
}

/* --- elementwise ------------------------------------------------------------------------------ */

void cuda_ADD(rt_cuda_ctx *cx, const rt_kernel_call *c) { binary(cx, c, RT_CUK_ADD); }
void cuda_MUL(rt_cuda_ctx *cx, const rt_kernel_call *c) { binary(cx, c, RT_CUK_MUL); }
void cuda_GELU(rt_cuda_ctx *cx, const rt_kernel_call *c) { unary(cx, c, RT_CUK_GELU); }
void cuda_GELU_GRAD(rt_cuda_ctx *cx, const rt_kernel_call *c) { binary(cx, c, RT_CUK_GELU_GRAD); }
void cuda_SILU(rt_cuda_ctx *cx, const rt_kernel_call *c) { unary(cx, c, RT_CUK_SILU); }
void cuda_SILU_GRAD(rt_cuda_ctx *cx, const rt_kernel_call *c) { binary(cx, c, RT_CUK_SILU_GRAD); }
void cuda_SQRT(rt_cuda_ctx *cx, const rt_kernel_call *c) { unary(cx, c, RT_CUK_SQRT); }

void cuda_SCALE(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    void *r = c->res[0], *a = c->args[0];
    long long n = ir_numel(c->res_types[0]);
    float factor = (float)c->in->attr[0];
    void *p[] = {&r, &a, &n, &factor};
    launch_flat(cx, name_of(c, RT_CUK_SCALE, c->res_types[0], NULL), n, p);
}

/* x[R,N] + b[N] */
void cuda_BIAS_ADD(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    void *r = c->res[0], *x = c->args[0], *b = c->args[1];
    long long n = ir_numel(c->arg_types[0]), N = last_dim(c->arg_types[0]);
    void *p[] = {&r, &x, &b, &n, &N};
    launch_flat(cx, name_of(c, RT_CUK_BIAS_ADD, c->arg_types[0], c->arg_types[1]), n, p);
}

/* A view: the memory plan usually gives the result the operand's buffer. */
void cuda_RESHAPE(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    device_copy(cx, c->res[0], c->args[0], ir_bytes(c->res_types[0]));
}

/* --- reductions ------------------------------------------------------------------------------- */

/* x[R,N] -> [N] */
void cuda_SUM_ROWS(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    const ir_type *xt = c->arg_types[0];
    column_sums(cx, c, c->res[0], c->args[0], xt, nrows(xt), last_dim(xt), last_dim(xt));
}

/* ORDER SUMSQ: the by-value kernel argument of kernels_templates/reduce.cuh (mcc_sumsq_chunk). */
#define SUMSQ_TENSORS 48
typedef struct {
    const void *ptr[SUMSQ_TENSORS];
    long long numel[SUMSQ_TENSORS];
    int is_bf16[SUMSQ_TENSORS];
    int count;
} sumsq_chunk;

enum { SUMSQ_BLOCKS = 512 }; /* partials per chunk; fixed, so the sum order never depends on the GPU */

/* (x1..xn) -> f32[]: per chunk of SUMSQ_TENSORS tensors SUMSQ_BLOCKS double partials, then one block
 * adds all partials in order. */
void cuda_SUM_SQUARES(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    int nchunks = (c->nargs + SUMSQ_TENSORS - 1) / SUMSQ_TENSORS;
    double *partials = rt_cuda_scratch(cx, (size_t)nchunks * SUMSQ_BLOCKS * sizeof(double));
    for (int k = 0; k < nchunks; k++) {
        sumsq_chunk chunk = {.count = 0};
        for (int a = k * SUMSQ_TENSORS; a < c->nargs && chunk.count < SUMSQ_TENSORS; a++, chunk.count++) {
            float_suffix(c, c->arg_types[a]); /* rejects anything but f32/bf16 */
            chunk.ptr[chunk.count] = c->args[a];
            chunk.numel[chunk.count] = ir_numel(c->arg_types[a]);
            chunk.is_bf16[chunk.count] = c->arg_types[a]->dtype == IR_BF16;
        }
        double *out = partials + (size_t)k * SUMSQ_BLOCKS;
        void *p[] = {&chunk, &out};
        rt_cuda_launch(cx, name_of(c, RT_CUK_SUM_SQUARES_PARTIAL, NULL, NULL).s, SUMSQ_BLOCKS, 1, 1, 256, 0, p);
    }
    void *r = c->res[0];
    long long n = (long long)nchunks * SUMSQ_BLOCKS;
    void *p[] = {&r, &partials, &n};
    rt_cuda_launch(cx, name_of(c, RT_CUK_SUM_SQUARES_FINAL, NULL, NULL).s, 1, 1, 1, 1024, 0, p);
}

/* --- embeddings ------------------------------------------------------------------------------- */

/* (table[V,d], ids[n]) -> [n,d]; out-of-range ids give zero rows */
void cuda_EMBEDDING(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    void *r = c->res[0], *table = c->args[0], *ids = c->args[1];
    long long V = c->arg_types[0]->dims[0], d = c->arg_types[0]->dims[1], n = ir_numel(c->arg_types[1]);
    void *p[] = {&r, &table, &ids, &n, &V, &d};
    launch_rows(cx, name_of(c, RT_CUK_EMBEDDING, c->arg_types[0], NULL), n, d, 0, p);
}

/* (dy[n,d], ids[n]) -> [V,d]: first[V] := first token of each id (scratch), then a block per
 * vocabulary row and column chunk sums its tokens' dy rows in token order. */
void cuda_EMBEDDING_GRAD(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    void *r = c->res[0], *dy = c->args[0], *ids = c->args[1];
    long long V = c->res_types[0]->dims[0], d = c->res_types[0]->dims[1], n = ir_numel(c->arg_types[1]);
    void *first = rt_cuda_scratch(cx, (size_t)V * sizeof(int));
    int none = INT_MAX; /* MCC_NO_TOKEN */
    void *p1[] = {&first, &V, &none};
    launch_flat(cx, name_of(c, RT_CUK_FILL_I32, NULL, NULL), V, p1);
    void *p2[] = {&first, &ids, &n, &V};
    launch_flat(cx, name_of(c, RT_CUK_EMBEDDING_FIRST, NULL, NULL), n, p2);
    unsigned block = row_block(4 * d); /* one column per thread */
    void *p3[] = {&r, &dy, &ids, &first, &n, &d};
    rt_cuda_launch(cx, name_of(c, RT_CUK_EMBEDDING_GRAD, c->res_types[0], NULL).s, (unsigned)V,
                   (unsigned)((d + block - 1) / block), 1, block, 0, p3);
}

/* (x[B,T,d], table[P,d]) -> x + table[0:T] */
void cuda_POS_ADD(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    const ir_type *xt = c->arg_types[0];
    void *r = c->res[0], *x = c->args[0], *table = c->args[1];
    long long n = ir_numel(xt), Td = xt->dims[xt->ndim - 2] * last_dim(xt);
    void *p[] = {&r, &x, &table, &n, &Td};
    launch_flat(cx, name_of(c, RT_CUK_POS_ADD, xt, c->arg_types[1]), n, p);
}

/* dy[B,T,d] -> [P,d]: the column sums of dy as [B, T d], zero past T */
void cuda_POS_ADD_GRAD(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    const ir_type *yt = c->arg_types[0];
    int64_t Td = yt->dims[yt->ndim - 2] * last_dim(yt);
    column_sums(cx, c, c->res[0], c->args[0], yt, Td ? ir_numel(yt) / Td : 0, Td, ir_numel(c->res_types[0]));
}

/* --- normalisation ---------------------------------------------------------------------------- */

/* (x[R,d], w[d] (, b[d])) -> y; block per row */
static void norm_forward(rt_cuda_ctx *cx, const rt_kernel_call *c, rt_cuda_kernel k)
{
    const ir_type *xt = c->arg_types[0];
    void *y = c->res[0], *x = c->args[0], *w = c->args[1], *b = k == RT_CUK_LAYERNORM ? c->args[2] : NULL;
    long long R = nrows(xt), d = last_dim(xt);
    float eps = (float)c->in->attr[0];
    void *ln[] = {&y, &x, &w, &b, &R, &d, &eps}, *rms[] = {&y, &x, &w, &R, &d, &eps};
    launch_rows(cx, name_of(c, k, xt, c->arg_types[1]), R, d, 0, k == RT_CUK_LAYERNORM ? ln : rms);
}

enum { NORM_GRAD_BLOCKS = 512 }; /* at most; fixed, so dw/db add up in the same order on every GPU */

/* (dy, x, w) -> dx, dw (, db): dx and per-block dw/db partials [G, nacc d] in one kernel, then
 * the partials' column sums. */
static void norm_backward(rt_cuda_ctx *cx, const rt_kernel_call *c, rt_cuda_kernel k)
{
    const ir_type *xt = c->arg_types[1], *wt = c->arg_types[2];
    void *dx = c->res[0], *dy = c->args[0], *x = c->args[1], *w = c->args[2];
    long long R = nrows(xt), d = last_dim(xt), nacc = c->nres - 1, stride = nacc * d;
    float eps = (float)c->in->attr[0];
    int G = (int)(R < NORM_GRAD_BLOCKS ? R : NORM_GRAD_BLOCKS);
    char *partial = rt_cuda_scratch(cx, (size_t)G * (size_t)stride * sizeof(float));
    void *p[] = {&dx, &partial, &dy, &x, &w, &R, &d, &eps};
    rt_cuda_launch(cx, name_of(c, k, xt, wt).s, (unsigned)G, 1, 1, row_block(d), (size_t)stride * sizeof(float), p);
    for (int i = 1; i < c->nres; i++) { /* dw, then db */
        void *r = c->res[i], *part = partial + (size_t)(i - 1) * d * sizeof(float);
        void *pf[] = {&r, &part, &G, &stride, &d, &d};
        launch_flat(cx, name_of(c, RT_CUK_COLSUM_FINAL, wt, NULL), d, pf);
    }
}

void cuda_LAYERNORM(rt_cuda_ctx *cx, const rt_kernel_call *c) { norm_forward(cx, c, RT_CUK_LAYERNORM); }
void cuda_RMSNORM(rt_cuda_ctx *cx, const rt_kernel_call *c) { norm_forward(cx, c, RT_CUK_RMSNORM); }
void cuda_LAYERNORM_GRAD(rt_cuda_ctx *cx, const rt_kernel_call *c) { norm_backward(cx, c, RT_CUK_LAYERNORM_GRAD); }
void cuda_RMSNORM_GRAD(rt_cuda_ctx *cx, const rt_kernel_call *c) { norm_backward(cx, c, RT_CUK_RMSNORM_GRAD); }

/* --- attention-side ----------------------------------------------------------------------------- */

/* x[B,T,H,D] rotate-half; one thread per (row, i < D/2) pair */
void cuda_ROPE(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    const ir_type *xt = c->arg_types[0];
    void *r = c->res[0], *x = c->args[0];
    long long T = xt->dims[1], H = xt->dims[2], D = xt->dims[3], npairs = ir_numel(xt) / 2;
    double theta = c->in->attr[0], sign = c->in->attr[1] != 0 ? -1.0 : 1.0;
    void *p[] = {&r, &x, &npairs, &T, &H, &D, &theta, &sign};
    launch_flat(cx, name_of(c, RT_CUK_ROPE, xt, NULL), npairs, p);
}

/* --- loss ------------------------------------------------------------------------------------- */

/* (logits[N,V], targets[N]) -> f32[]: per-row losses in scratch, then their mean by one block */
void cuda_CROSS_ENTROPY(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    const ir_type *lt = c->arg_types[0];
    void *logits = c->args[0], *targets = c->args[1], *r = c->res[0];
    long long N = nrows(lt), V = last_dim(lt);
    void *loss = rt_cuda_scratch(cx, (size_t)N * sizeof(float));
    void *p1[] = {&loss, &logits, &targets, &N, &V};
    launch_rows(cx, name_of(c, RT_CUK_CROSS_ENTROPY_ROWS, lt, NULL), N, V, 0, p1);
    void *p2[] = {&r, &loss, &N};
    rt_cuda_launch(cx, name_of(c, RT_CUK_MEAN, NULL, NULL).s, 1, 1, 1, 1024, 0, p2);
}

/* (dloss[], logits[N,V], targets[N]) -> dlogits in the logits' dtype */
void cuda_CROSS_ENTROPY_GRAD(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    const ir_type *lt = c->arg_types[1];
    need_f32(c, c->arg_types[0], "dloss");
    void *dl = c->res[0], *dloss = c->args[0], *logits = c->args[1], *targets = c->args[2];
    long long N = nrows(lt), V = last_dim(lt);
    void *p[] = {&dl, &dloss, &logits, &targets, &N, &V};
    launch_rows(cx, name_of(c, RT_CUK_CROSS_ENTROPY_GRAD, lt, NULL), N, V, 0, p);
}

/* --- optimizer and persistent state ----------------------------------------------------------- */

/* (dst, x): dst += x, any f32/bf16 pair */
void cuda_ACCUMULATE(rt_cuda_ctx *cx, const rt_kernel_call *c) { dst_src(cx, c, RT_CUK_ACCUMULATE); }

/* (dst, x): dst := x converted; a plain device copy when the dtypes agree */
void cuda_COPY(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    if (c->arg_types[0]->dtype == c->arg_types[1]->dtype)
        device_copy(cx, c->args[0], c->args[1], ir_bytes(c->arg_types[1]));
    else
        dst_src(cx, c, RT_CUK_COPY);
}

void cuda_ZERO(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    size_t bytes = ir_bytes(c->arg_types[0]);
    if (bytes)
        RT_CU_CHECK(cuMemsetD8Async(dptr(c->args[0]), 0, bytes, rt_cuda_stream(cx)));
}

void cuda_CLIP_COEF(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    need_f32(c, c->arg_types[0], "sum of squares");
    void *r = c->res[0], *sumsq = c->args[0];
    double max_norm = c->in->attr[0];
    void *p[] = {&r, &sumsq, &max_norm};
    rt_cuda_launch(cx, name_of(c, RT_CUK_CLIP_COEF, NULL, NULL).s, 1, 1, 1, 1, 0, p);
}

/* (p, g, m, v, lr[], step[], coef[]), all f32; in place on p, m, v */
void cuda_ADAMW(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    static const char *const operand[] = {"parameter", "gradient", "first moment", "second moment",
                                          "learning rate", "step", "clip coefficient"};
    for (int i = 0; i < 7; i++)
        need_f32(c, c->arg_types[i], operand[i]);
    void *p = c->args[0], *g = c->args[1], *m = c->args[2], *v = c->args[3];
    void *lr = c->args[4], *step = c->args[5], *coef = c->args[6];
    long long n = ir_numel(c->arg_types[0]);
    double b1 = c->in->attr[0], b2 = c->in->attr[1], eps = c->in->attr[2], wd = c->in->attr[3];
    void *params[] = {&p, &g, &m, &v, &lr, &step, &coef, &n, &b1, &b2, &eps, &wd};
    launch_flat(cx, name_of(c, RT_CUK_ADAMW, NULL, NULL), n, params);
}

/* --- the dispatch table, in ops.def order (ORDER OP) ------------------------------------------ */

const rt_cuda_launcher rt_cuda_launchers[IR_NUM_OPS] = {
#define X(id, text, nargs, nres, attrs, infer, grad) [IR_OP_##id] = cuda_##id,
#include "ir/ops.def"
#undef X
};
