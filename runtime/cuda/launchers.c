/* launchers.c — the CUDA launcher of every op except matmul and attention (matmul.c, attention.c):
 * picks the kernel of kernels_templates/ by dtype, its grid and block, stages scratch, and the
 * dispatch table rt_cuda_launchers in ops.def order. */
#include "cuda_ctx.h"
#include "launchers.h"
#include "runtime/dropout.h"

#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* stem_<t0>[_<t1>[_<t2>]], as many suffixes as the family has; unused types may be NULL. */
static kernel_name name_of3(const rt_kernel_call *c, rt_cuda_kernel k, const ir_type *t0, const ir_type *t1,
                            const ir_type *t2)
{
    kernel_name n;
    const ir_type *t[3] = {t0, t1, t2};
    int len = snprintf(n.s, sizeof n.s, "%s", kernel_families[k].stem);
    for (int i = 0; i < kernel_families[k].ndtypes && i < 3; i++)
        len += snprintf(n.s + len, sizeof n.s - (size_t)len, "_%s", float_suffix(c, t[i]));
    return n;
}

static kernel_name name_of(const rt_kernel_call *c, rt_cuda_kernel k, const ir_type *t0, const ir_type *t1)
{
    return name_of3(c, k, t0, t1, NULL);
}

/* --- launch shapes ---------------------------------------------------------------------------- */

enum { FLAT_BLOCK = 256, MAX_GRID = 1 << 16 }; /* kernels loop grid-stride past MAX_GRID blocks */
enum { VEC = 8 };                              /* MCC_VEC: elements per thread of vectorized kernels */
enum { FILL_BLOCKS = 132 * 16 };               /* enough blocks to fill an H200's SMs many times over */

static unsigned capped_grid(int64_t blocks) { return blocks < MAX_GRID ? (unsigned)blocks : MAX_GRID; }

/* One thread per element of n. */
static void launch_flat(rt_cuda_ctx *cx, kernel_name k, int64_t n, void **params)
{
    rt_cuda_launch(cx, k.s, capped_grid((n + FLAT_BLOCK - 1) / FLAT_BLOCK), 1, 1, FLAT_BLOCK, 0, params);
}

/* One thread per VEC elements of n (mcc_for_each_vec kernels). */
static void launch_vec(rt_cuda_ctx *cx, kernel_name k, int64_t n, void **params)
{
    launch_flat(cx, k, (n + VEC - 1) / VEC, params);
}

/* Whether rows of `width` elements can be moved VEC at a time: width a multiple of VEC and every
 * buffer 16-byte aligned (NULLs, absent operands, pass). */
static bool vec_rows(int64_t width, const void *const *ptrs, int n)
{
    uintptr_t bits = 0;
    for (int i = 0; i < n; i++)
        bits |= (uintptr_t)ptrs[i];
    return width % VEC == 0 && bits % 16 == 0;
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

/* Either side may be page-locked host memory (a host global of --optimizer-cpu-offload: setup fills
 * the host masters), which unified addressing lets cuMemcpyAsync tell from the pointer. */
static void device_copy(rt_cuda_ctx *cx, void *dst, const void *src, size_t bytes)
{
    if (dst != src && bytes)
        RT_CU_CHECK(cuMemcpyAsync(dptr(dst), dptr((void *)src), bytes, rt_cuda_stream(cx)));
}

/* --- shared shapes of several ops ------------------------------------------------------------- */

/* mcc_colsum_final over n_out columns: a block of 32 warps per 32 columns. */
static void colsum_final(rt_cuda_ctx *cx, kernel_name k, int64_t n_out, void **params)
{
    rt_cuda_launch(cx, k.s, (unsigned)((n_out + 31) / 32), 1, 1, 1024, 0, params);
}

/* r[n_out] := column sums of x[R,N] (then zero past N), in two deterministic stages: row chunks
 * of at least 64 rows, at most 128 chunks, each summed per column into f32 partials[S,N]. */
static void column_sums(rt_cuda_ctx *cx, const rt_kernel_call *c, void *r, const void *x, const ir_type *xt,
                        int64_t R, int64_t N, int64_t n_out)
{
    long long rows = R, cols = N, out = n_out, stride = N;
    long long chunk = (R + 127) / 128 < 64 ? 64 : (R + 127) / 128;
    int S = (int)((R + chunk - 1) / chunk);
    void *partial = rt_cuda_scratch(cx, (size_t)S * (size_t)N * sizeof(float));
    int width = N % 8 == 0 && (uintptr_t)x % 16 == 0 ? 8 : 1; /* MCC_VEC: 16-byte loads */
    void *p1[] = {&x, &rows, &cols, &chunk, &partial, &width};
    rt_cuda_launch(cx, name_of(c, RT_CUK_COLSUM_PARTIAL, xt, NULL).s, (unsigned)((N + 32 * width - 1) / (32 * width)),
                   (unsigned)S, 1, 256, 0, p1);
    void *p2[] = {&r, &partial, &S, &stride, &cols, &out};
    colsum_final(cx, name_of(c, RT_CUK_COLSUM_FINAL, c->res_types[0], NULL), n_out, p2);
}

/* The elementwise kernels' row bound (common.cuh's mcc_row_bound, passed by value): the counts of
 * an instruction's row bound (ir_row_bound), which the kernel sums on the device, and its rows'
 * elements; counts NULL: every element. The grid stays sized for the whole buffer (the rows are
 * known only on the device); the threads past the rows exit at once. */
typedef struct {
    const void *counts;
    long long S, width;
} row_bound;

static row_bound row_bound_of(const rt_kernel_call *c)
{
    if (ir_row_bound(c->in) < 0)
        return (row_bound){NULL, 0, 0};
    const ir_type *x = c->arg_types[0], *counts = c->arg_types[c->nargs - 1];
    return (row_bound){c->args[c->nargs - 1], counts->dims[0], x->dims[0] ? ir_numel(x) / x->dims[0] : 0};
}

/* The k-th amax result of c's instruction (ir_amax_results: the fusion pass's), zeroed for its
 * kernel's atomic max (kernels_templates/common.cuh's mcc_amax_commit); NULL where it has none. */
static void *amax_result(rt_cuda_ctx *cx, const rt_kernel_call *c, int k)
{
    if (k >= ir_amax_results(c->in->op, c->in->attr))
        return NULL;
    void *amax = c->res[ir_ops[c->in->op].nres + k];
    need_f32(c, c->res_types[ir_ops[c->in->op].nres + k], "amax");
    RT_CU_CHECK(cuMemsetD32Async(dptr(amax), 0, 1, rt_cuda_stream(cx)));
    return amax;
}

/* r := f(a) */
static void unary(rt_cuda_ctx *cx, const rt_kernel_call *c, rt_cuda_kernel k)
{
    void *r = c->res[0], *a = c->args[0];
    long long n = ir_numel(c->res_types[0]);
    row_bound rb = row_bound_of(c);
    void *p[] = {&r, &a, &n, &rb};
    launch_vec(cx, name_of(c, k, c->res_types[0], NULL), n, p);
}

/* r := f(a, b) */
static void binary(rt_cuda_ctx *cx, const rt_kernel_call *c, rt_cuda_kernel k)
{
    void *r = c->res[0], *a = c->args[0], *b = c->args[1];
    long long n = ir_numel(c->res_types[0]);
    row_bound rb = row_bound_of(c);
    void *p[] = {&r, &a, &b, &n, &rb};
    launch_vec(cx, name_of(c, k, c->res_types[0], NULL), n, p);
}

void rt_cuda_add(rt_cuda_ctx *cx, const rt_kernel_call *c, void *r, const void *a, const void *b, const ir_type *t)
{
    long long n = ir_numel(t);
    row_bound whole = {NULL, 0, 0};
    void *p[] = {&r, &a, &b, &n, &whole};
    launch_vec(cx, name_of(c, RT_CUK_ADD, t, NULL), n, p);
}

void rt_cuda_accumulate(rt_cuda_ctx *cx, const rt_kernel_call *c, void *dst, const void *src, const ir_type *t)
{
    long long n = ir_numel(t);
    void *p[] = {&dst, &src, &n};
    launch_vec(cx, name_of(c, RT_CUK_ACCUMULATE, t, t), n, p);
}

/* (dst, src) of accumulate and copy */
static void dst_src(rt_cuda_ctx *cx, const rt_kernel_call *c, rt_cuda_kernel k)
{
    void *dst = c->args[0], *src = c->args[1];
    long long n = ir_numel(c->arg_types[1]);
    void *p[] = {&dst, &src, &n};
    launch_vec(cx, name_of(c, k, c->arg_types[0], c->arg_types[1]), n, p);
}

/* dst := src converted to dst's dtype by mcc_copy_<dst>_<src>; a plain device copy when the dtypes agree */
static void copy_converted(rt_cuda_ctx *cx, const rt_kernel_call *c, void *dst, const ir_type *dt, void *src,
                           const ir_type *st)
{
    if (dt->dtype == st->dtype) {
        device_copy(cx, dst, src, ir_bytes(st));
        return;
    }
    long long n = ir_numel(st);
    void *p[] = {&dst, &src, &n};
    launch_vec(cx, name_of(c, RT_CUK_COPY, dt, st), n, p);
}

/* --- sources and sinks: bound by the executor, nothing to launch ------------------------------ */

void cuda_INPUT(rt_cuda_ctx *cx, const rt_kernel_call *c) {}
void cuda_GLOBAL(rt_cuda_ctx *cx, const rt_kernel_call *c) {}
void cuda_OUTPUT(rt_cuda_ctx *cx, const rt_kernel_call *c) {}

void cuda_FILL(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    void *r = c->res[0];
    long long n = ir_numel(c->res_types[0]);
    float value = (float)c->in->attr[IR_ATTR_FILL_VALUE];
    void *p[] = {&r, &n, &value};
    launch_vec(cx, name_of(c, RT_CUK_FILL, c->res_types[0], NULL), n, p);
}

/* --- elementwise ------------------------------------------------------------------------------ */

void cuda_ADD(rt_cuda_ctx *cx, const rt_kernel_call *c) { binary(cx, c, RT_CUK_ADD); }
void cuda_MUL(rt_cuda_ctx *cx, const rt_kernel_call *c) { binary(cx, c, RT_CUK_MUL); }
void cuda_GELU(rt_cuda_ctx *cx, const rt_kernel_call *c) { unary(cx, c, RT_CUK_GELU); }
void cuda_GELU_GRAD(rt_cuda_ctx *cx, const rt_kernel_call *c) { binary(cx, c, RT_CUK_GELU_GRAD); }
void cuda_SILU(rt_cuda_ctx *cx, const rt_kernel_call *c) { unary(cx, c, RT_CUK_SILU); }
void cuda_SILU_GRAD(rt_cuda_ctx *cx, const rt_kernel_call *c) { binary(cx, c, RT_CUK_SILU_GRAD); }

/* --- Nemotron-4's squared relu (issue 44) ------------------------------------------------------ */

void cuda_SQUARED_RELU(rt_cuda_ctx *cx, const rt_kernel_call *c) { unary(cx, c, RT_CUK_SQUARED_RELU); }
void cuda_SQUARED_RELU_GRAD(rt_cuda_ctx *cx, const rt_kernel_call *c) { binary(cx, c, RT_CUK_SQUARED_RELU_GRAD); }
/* (gate, up) -> silu(gate) up (and its amax) */
void cuda_SWIGLU(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    void *r = c->res[0], *g = c->args[0], *u = c->args[1], *amax = amax_result(cx, c, 0);
    long long n = ir_numel(c->res_types[0]);
    row_bound rb = row_bound_of(c);
    void *p[] = {&r, &g, &u, &n, &rb, &amax};
    launch_vec(cx, name_of(c, RT_CUK_SWIGLU, c->res_types[0], NULL), n, p);
}

/* (dy, gate, up) -> dgate, dup (and their amaxes), and with h the forward's product
 * (swiglu_grad_product) */
static void swiglu_grad(rt_cuda_ctx *cx, const rt_kernel_call *c, void *h)
{
    void *dg = c->res[0], *du = c->res[1], *dy = c->args[0], *g = c->args[1], *u = c->args[2];
    void *amax_dg = amax_result(cx, c, 0), *amax_du = amax_result(cx, c, 1);
    long long n = ir_numel(c->res_types[0]);
    row_bound rb = row_bound_of(c);
    void *p[] = {&dg, &du, &h, &dy, &g, &u, &n, &rb, &amax_dg, &amax_du};
    launch_vec(cx, name_of(c, RT_CUK_SWIGLU_GRAD, c->res_types[0], NULL), n, p);
}
void cuda_SWIGLU_GRAD(rt_cuda_ctx *cx, const rt_kernel_call *c) { swiglu_grad(cx, c, NULL); }
void cuda_SWIGLU_GRAD_PRODUCT(rt_cuda_ctx *cx, const rt_kernel_call *c) { swiglu_grad(cx, c, c->res[2]); }
void cuda_SQRT(rt_cuda_ctx *cx, const rt_kernel_call *c) { unary(cx, c, RT_CUK_SQRT); }

void cuda_SCALE(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    void *r = c->res[0], *a = c->args[0];
    long long n = ir_numel(c->res_types[0]);
    float factor = (float)c->in->attr[IR_ATTR_SCALE_FACTOR];
    row_bound rb = row_bound_of(c);
    void *p[] = {&r, &a, &n, &factor, &rb};
    launch_vec(cx, name_of(c, RT_CUK_SCALE, c->res_types[0], NULL), n, p);
}

/* --- convert (--moe-router-dtype fp32: the router's GEMM in f32) ------------------------------ */

/* r := a in r's dtype, the copy kernel's conversion (one rounding to nearest even into bf16) */
void cuda_CONVERT(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    copy_converted(cx, c, c->res[0], c->res_types[0], c->args[0], c->arg_types[0]);
}

/* The launch of a kernel over rows [R,N] whose threads each take VEC columns down a group of rows
 * (mcc_bias_add_cols, mcc_dropout_cols): blocks of column chunks times row groups, about
 * FILL_BLOCKS blocks in all. */
typedef struct {
    unsigned gx, gy, block;
} column_grid;

static column_grid column_grid_of(int64_t R, int64_t N)
{
    int64_t threads = (N + VEC - 1) / VEC, block = (threads + 31) / 32 * 32;
    block = block < FLAT_BLOCK ? block : FLAT_BLOCK;
    int64_t gx = (threads + block - 1) / block, gy = FILL_BLOCKS / gx;
    gx = gx < MAX_GRID ? gx : MAX_GRID;
    gy = gy > R ? R : gy < 1 ? 1 : gy > MAX_GRID - 1 ? MAX_GRID - 1 : gy; /* grid.y is below 65536 */
    return (column_grid){(unsigned)gx, (unsigned)gy, (unsigned)block};
}

/* r[R,N] := x[R,N] + b[N] (the bias_add kernel of c's operand dtypes) */
static void rows_plus_vector_at(rt_cuda_ctx *cx, const rt_kernel_call *c, void *r, const void *x, const void *b,
                                int64_t R, int64_t N)
{
    long long rows = R, cols = N;
    column_grid g = column_grid_of(R, N);
    void *p[] = {&r, &x, &b, &rows, &cols};
    rt_cuda_launch(cx, name_of(c, RT_CUK_BIAS_ADD, c->arg_types[0], c->arg_types[1]).s, g.gx, g.gy, 1, g.block, 0, p);
}

/* c's result := operand 0 [R,N] + operand 1 [N] starting `skip` elements in (a position table's
 * slice); bias_add and pos_add. */
static void rows_plus_vector(rt_cuda_ctx *cx, const rt_kernel_call *c, int64_t R, int64_t N, int64_t skip)
{
    rows_plus_vector_at(cx, c, c->res[0], c->args[0], (const char *)c->args[1] +
                        skip * (int64_t)ir_dtype_size(c->arg_types[1]->dtype), R, N);
}

/* (x[B,T,d], table[P,d]) whose tokens lie at two runs of positions (a context-parallel rank's
 * chunks): each batch row's run one bias add of the table's rows at the run's positions. */
static void pos_add_runs(rt_cuda_ctx *cx, const rt_kernel_call *c, const ir_cp_run *run, int nrun)
{
    const ir_type *xt = c->arg_types[0];
    int64_t B = xt->dims[0], T = xt->dims[1], d = last_dim(xt);
    size_t es = ir_dtype_size(xt->dtype), et = ir_dtype_size(c->arg_types[1]->dtype);
    for (int64_t b = 0; b < B; b++)
        for (int k = 0; k < nrun; k++) {
            size_t at = (size_t)((b * T + run[k].t) * d) * es;
            rows_plus_vector_at(cx, c, (char *)c->res[0] + at, (const char *)c->args[0] + at,
                                (const char *)c->args[1] + (size_t)(run[k].pos * d) * et, 1, run[k].n * d);
        }
}

/* x[R,N] + b[N] */
void cuda_BIAS_ADD(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    rows_plus_vector(cx, c, nrows(c->arg_types[0]), last_dim(c->arg_types[0]), 0);
}

/* (x, first_sample) -> x * mask / (1-p): mcc_dropout over each block of x's rows (rt_dropout_blocks) */
void cuda_DROPOUT(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    const ir_type *xt = c->arg_types[0];
    mcc_dropout d = rt_dropout_of(c->in, c->args[1]);
    rt_dropout_block blk[2];
    size_t es = ir_dtype_size(xt->dtype);
    for (int k = 0, n = rt_dropout_blocks(c->in, xt, blk); k < n; k++) {
        void *r = (char *)c->res[0] + (size_t)blk[k].first * es, *x = (char *)c->args[0] + (size_t)blk[k].first * es;
        mcc_dropout_rows l = blk[k].rows;
        long long R = blk[k].R;
        column_grid g = column_grid_of(R, l.C);
        void *p[] = {&r, &x, &R, &l, &d};
        rt_cuda_launch(cx, name_of(c, RT_CUK_DROPOUT, xt, NULL).s, g.gx, g.gy, 1, g.block, 0, p);
    }
}

/* A view: the memory plan usually gives the result the operand's buffer. */
void cuda_RESHAPE(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    device_copy(cx, c->res[0], c->args[0], ir_bytes(c->res_types[0]));
}

void cuda_CONCAT_ROWS(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    size_t first = ir_bytes(c->arg_types[0]);
    device_copy(cx, c->res[0], c->args[0], first);
    device_copy(cx, (char *)c->res[0] + first, c->args[1], ir_bytes(c->arg_types[1]));
}

/* x[O,H,N] -> its two parts along the last dimension, one launch each (a part with sum_heads
 * summed over the H heads: ops.def) */
void cuda_SPLIT_LAST_DIM(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    const ir_type *xt = c->arg_types[0];
    int n = xt->ndim;
    long long N = xt->dims[n - 1], H = n >= 2 ? xt->dims[n - 2] : 1, O = ir_numel(xt) / (H * N);
    long long size = (long long)c->in->attr[IR_ATTR_SPLIT_LAST_DIM_SIZE];
    const void *x = c->args[0];
    for (int k = 0; k < 2; k++) {
        void *r = c->res[k];
        long long first = k ? size : 0, w = k ? N - size : size;
        int sum = (int)c->in->attr[IR_ATTR_SPLIT_LAST_DIM_SUM_HEADS] == k + 1;
        void *p[] = {&r, &x, &O, &H, &N, &first, &w, &sum};
        launch_flat(cx, name_of(c, RT_CUK_TAKE_LAST_DIM, xt, NULL), ir_numel(c->res_types[k]), p);
    }
}

/* (a[O,Ha,Da], b[O,Hb,Db]) -> r[O,H,Da+Db] */
void cuda_CONCAT_LAST_DIM(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    const ir_type *at = c->arg_types[0], *bt = c->arg_types[1], *rt = c->res_types[0];
    int n = rt->ndim;
    long long H = rt->dims[n - 2], Ha = at->dims[n - 2], Da = at->dims[n - 1], Hb = bt->dims[n - 2],
              Db = bt->dims[n - 1], O = ir_numel(rt) / (H * (Da + Db));
    void *r = c->res[0], *a = c->args[0], *b = c->args[1];
    void *p[] = {&r, &a, &b, &O, &H, &Ha, &Da, &Hb, &Db};
    launch_flat(cx, name_of(c, RT_CUK_CONCAT_LAST_DIM, rt, NULL), ir_numel(rt), p);
}

/* x[B,T,...] -> r[B,n,...] shifted by `by` positions, zero where none (any 2- or 4-byte dtype) */
void cuda_SHIFT_SEQ(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    const ir_type *xt = c->arg_types[0], *rt = c->res_types[0];
    long long B = xt->dims[0], T = xt->dims[1], n = rt->dims[1], by = (long long)c->in->attr[IR_ATTR_SHIFT_SEQ_BY];
    long long w = (long long)(ir_bytes(xt) / 2 / (size_t)(B * T)); /* a position's 2-byte units */
    void *r = c->res[0], *x = c->args[0];
    void *p[] = {&r, &x, &B, &T, &n, &by, &w};
    launch_flat(cx, name_of(c, RT_CUK_SHIFT_SEQ, NULL, NULL), B * n * w, p);
}

/* A view too (ir_view_offset): nothing to move once memory_plan has run. */
void cuda_ROWS(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    const char *from = (const char *)c->args[0] + ir_view_offset_in(c->in, c->arg_types[0]);
    device_copy(cx, c->res[0], from, ir_bytes(c->res_types[0]));
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
    long long start = (long long)c->in->attr[IR_ATTR_EMBEDDING_VOCAB_START];
    void *p[] = {&r, &table, &ids, &n, &V, &d, &start};
    launch_rows(cx, name_of(c, RT_CUK_EMBEDDING, c->arg_types[0], NULL), n, d, 0, p);
}

/* (dy[n,d], ids[n]) -> [V,d]: first[V] := first token of each id (scratch), then a block per
 * vocabulary row and column chunk sums its tokens' dy rows in token order. */
/* (dy[n,d], ids[n]) -> r[V,d], attrs (vocab, vocab_start): a counting sort of the token
 * positions by row (embedding.cuh), then each row summed in token order. Scratch, in ints:
 * count[chunks*V], rank[n], total[V], offset[V], order[n]. */
enum { EMB_CHUNK = 1024 }; /* MCC_EMB_CHUNK */

void cuda_EMBEDDING_GRAD(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    void *r = c->res[0], *dy = c->args[0], *ids = c->args[1];
    long long V = c->res_types[0]->dims[0], d = c->res_types[0]->dims[1], n = ir_numel(c->arg_types[1]);
    long long start = (long long)c->in->attr[IR_ATTR_EMBEDDING_GRAD_VOCAB_START];
    long long chunks = (n + EMB_CHUNK - 1) / EMB_CHUNK;
    int *count = rt_cuda_scratch(cx, sizeof(int) * (size_t)(chunks * V + 2 * n + 2 * V));
    int *rank = count + chunks * V, *total = rank + n, *offset = total + V, *order = offset + V;
    RT_CU_CHECK(cuMemsetD32Async((CUdeviceptr)(uintptr_t)count, 0, (size_t)(chunks * V), rt_cuda_stream(cx)));
    void *p1[] = {&count, &rank, &ids, &n, &start, &V};
    rt_cuda_launch(cx, name_of(c, RT_CUK_EMBEDDING_COUNT, NULL, NULL).s, (unsigned)chunks, 1, 1, 256, 0, p1);
    void *p2[] = {&count, &total, &chunks, &V};
    launch_flat(cx, name_of(c, RT_CUK_EMBEDDING_PREFIX, NULL, NULL), V, p2);
    void *p3[] = {&offset, &total, &V};
    rt_cuda_launch(cx, name_of(c, RT_CUK_EMBEDDING_OFFSETS, NULL, NULL).s, 1, 1, 1, 1024, 0, p3);
    void *p4[] = {&order, &offset, &count, &rank, &ids, &n, &start, &V};
    launch_flat(cx, name_of(c, RT_CUK_EMBEDDING_SCATTER, NULL, NULL), n, p4);
    unsigned block = row_block(4 * d); /* one column per thread */
    void *p5[] = {&r, &dy, &order, &offset, &total, &d};
    rt_cuda_launch(cx, name_of(c, RT_CUK_EMBEDDING_GRAD, c->res_types[0], NULL).s, (unsigned)V,
                   (unsigned)((d + block - 1) / block), 1, block, 0, p5);
}

/* (x[B,T,d], table[P,d]) -> x + the table's rows at x's positions: a bias add over [B, T d] where
 * they are consecutive */
void cuda_POS_ADD(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    const ir_type *xt = c->arg_types[0];
    int64_t T = xt->dims[xt->ndim - 2], Td = T * last_dim(xt);
    ir_cp_run run[2];
    int n = ir_pos_runs(c->in, T, run);
    if (n > 1) {
        pos_add_runs(cx, c, run, n);
        return;
    }
    rows_plus_vector(cx, c, Td ? ir_numel(xt) / Td : 0, Td, run[0].pos * last_dim(xt));
}

/* dy[B,T,d] -> [P,d]: the column sums of dy as [B, T d] at the rows of its first position, zero
 * elsewhere; where its tokens lie at two runs of positions (a context-parallel rank's chunks), the
 * second run's rows then move to their place, the second run always past the first by at least
 * its length (ir_cp_runs: chunk r then chunk 2cp-1-r > r) */
void cuda_POS_ADD_GRAD(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    const ir_type *yt = c->arg_types[0];
    int64_t T = yt->dims[yt->ndim - 2], d = last_dim(yt), Td = T * d;
    size_t es = ir_dtype_size(c->res_types[0]->dtype), row = (size_t)d * es;
    CUdeviceptr r = (CUdeviceptr)(uintptr_t)c->res[0];
    CUstream st = rt_cuda_stream(cx);
    ir_cp_run run[2];
    int n = ir_pos_runs(c->in, T, run);
    RT_CU_CHECK(cuMemsetD8Async(r, 0, ir_bytes(c->res_types[0]), st));
    column_sums(cx, c, (char *)c->res[0] + (size_t)run[0].pos * row, c->args[0], yt, Td ? ir_numel(yt) / Td : 0, Td, Td);
    if (n > 1 && run[1].pos != run[0].pos + run[1].t) {
        CUdeviceptr from = r + (size_t)(run[0].pos + run[1].t) * row;
        RT_CU_CHECK(cuMemcpyDtoDAsync(r + (size_t)run[1].pos * row, from, (size_t)run[1].n * row, st));
        RT_CU_CHECK(cuMemsetD8Async(from, 0, (size_t)run[1].n * row, st));
    }
}

/* --- normalisation ---------------------------------------------------------------------------- */

/* The row layout of kernels_templates/norms.cuh: `width` elements a load (VEC when rows and
 * buffers allow), `tpr` threads a row (whole warps, NORM_REGS elements each at most), and
 * 256 / tpr rows a block (at least one). */
enum { NORM_REGS = 16, NORM_MAX_D = 1024 * NORM_REGS };
typedef struct {
    int width, tpr, groups;
} norm_layout;

static norm_layout norm_layout_of(const rt_kernel_call *c, int64_t d)
{
    if (d > NORM_MAX_D) {
        fprintf(stderr, "train_rank: %s over rows of %lld elements: the CUDA kernel keeps a row in one block's "
                        "registers, at most %d elements; use a model dimension of at most %d\n",
                ir_ops[c->in->op].name, (long long)d, NORM_MAX_D, NORM_MAX_D);
        exit(1);
    }
    bool vec = vec_rows(d, (const void *const *)c->args, c->nargs) &&
               vec_rows(d, (const void *const *)c->res, ir_ops[c->in->op].nres); /* not the amax results */
    norm_layout l = {.width = vec ? VEC : 1};
    int64_t per_thread = NORM_REGS / l.width * l.width;
    l.tpr = (int)(((d + per_thread - 1) / per_thread + 31) / 32 * 32);
    l.groups = l.tpr < FLAT_BLOCK ? FLAT_BLOCK / l.tpr : 1;
    return l;
}

/* The kernel of the layout's width: norms.cuh's _w1 kernels load one element at a time. */
static kernel_name norm_kernel(const rt_kernel_call *c, rt_cuda_kernel k, const ir_type *xt, const ir_type *wt,
                               norm_layout l)
{
    kernel_name n = name_of(c, k, xt, wt);
    if (l.width == 1)
        strncat(n.s, "_w1", sizeof n.s - strlen(n.s) - 1);
    return n;
}

/* (x[R,d], w[d] (, b[d])) -> y (and its amax) */
static void norm_forward(rt_cuda_ctx *cx, const rt_kernel_call *c, rt_cuda_kernel k)
{
    const ir_type *xt = c->arg_types[0];
    void *y = c->res[0], *x = c->args[0], *w = c->args[1], *b = k == RT_CUK_LAYERNORM ? c->args[2] : NULL;
    void *amax = amax_result(cx, c, 0);
    long long R = nrows(xt), d = last_dim(xt);
    float eps = (float)c->in->attr[IR_ATTR_EPS], shift = (float)c->in->attr[IR_ATTR_ONE_P]; /* w stored as w - 1 */
    norm_layout l = norm_layout_of(c, d);
    void *ln[] = {&y, &x, &w, &b, &R, &d, &eps, &shift, &l.tpr, &amax};
    void *rms[] = {&y, &x, &w, &R, &d, &eps, &shift, &l.tpr, &amax};
    rt_cuda_launch(cx, norm_kernel(c, k, xt, c->arg_types[1], l).s, capped_grid((R + l.groups - 1) / l.groups), 1, 1,
                   (unsigned)(l.tpr * l.groups), 0, k == RT_CUK_LAYERNORM ? ln : rms);
}

/* dw/db partial rows (row groups): enough groups to fill the GPU, fixed so that they add up alike
 * on every GPU */
enum { NORM_GRAD_ROWS = 1024 };

/* (dy, x, w (, dr)) -> dx (+ dr), dw (, db) (and dx's amax): dx and per-group dw/db partials [S,
 * nacc d] in one kernel, then the partials' column sums. */
static void norm_backward(rt_cuda_ctx *cx, const rt_kernel_call *c, rt_cuda_kernel k)
{
    const ir_type *xt = c->arg_types[1], *wt = c->arg_types[2];
    void *dx = c->res[0], *dy = c->args[0], *x = c->args[1], *w = c->args[2], *dr = c->nargs > 3 ? c->args[3] : NULL;
    void *amax = amax_result(cx, c, 0);
    int nres = ir_ops[c->in->op].nres; /* dx, dw (, db), before the amax */
    long long R = nrows(xt), d = last_dim(xt), nacc = nres - 1, stride = nacc * d;
    float eps = (float)c->in->attr[IR_ATTR_EPS], shift = (float)c->in->attr[IR_ATTR_ONE_P];
    norm_layout l = norm_layout_of(c, d);
    int64_t groups = R < NORM_GRAD_ROWS ? R : NORM_GRAD_ROWS, G = (groups + l.groups - 1) / l.groups;
    int S = (int)(G * l.groups);
    char *partial = rt_cuda_scratch(cx, (size_t)S * (size_t)stride * sizeof(float));
    void *p[] = {&dx, &partial, &dy, &x, &w, &dr, &R, &d, &eps, &shift, &l.tpr, &amax};
    rt_cuda_launch(cx, norm_kernel(c, k, xt, wt, l).s, (unsigned)G, 1, 1, (unsigned)(l.tpr * l.groups), 0, p);
    for (int i = 1; i < nres; i++) { /* dw, then db */
        void *r = c->res[i], *part = partial + (size_t)(i - 1) * d * sizeof(float);
        void *pf[] = {&r, &part, &S, &stride, &d, &d};
        colsum_final(cx, name_of(c, RT_CUK_COLSUM_FINAL, wt, NULL), d, pf);
    }
}

void cuda_LAYERNORM(rt_cuda_ctx *cx, const rt_kernel_call *c) { norm_forward(cx, c, RT_CUK_LAYERNORM); }
void cuda_RMSNORM(rt_cuda_ctx *cx, const rt_kernel_call *c) { norm_forward(cx, c, RT_CUK_RMSNORM); }
void cuda_LAYERNORM_GRAD(rt_cuda_ctx *cx, const rt_kernel_call *c) { norm_backward(cx, c, RT_CUK_LAYERNORM_GRAD); }
void cuda_RMSNORM_GRAD(rt_cuda_ctx *cx, const rt_kernel_call *c) { norm_backward(cx, c, RT_CUK_RMSNORM_GRAD); }
void cuda_LAYERNORM_GRAD_ADD(rt_cuda_ctx *cx, const rt_kernel_call *c) { norm_backward(cx, c, RT_CUK_LAYERNORM_GRAD); }
void cuda_RMSNORM_GRAD_ADD(rt_cuda_ctx *cx, const rt_kernel_call *c) { norm_backward(cx, c, RT_CUK_RMSNORM_GRAD); }

/* --- attention-side ----------------------------------------------------------------------------- */

/* x[B,T,H,D] rotate-half: a thread per VEC (or 1) pairs of a row, walking rows; rows and pairs
 * are counted in 32 bits. */
void cuda_ROPE(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    const ir_type *xt = c->arg_types[0];
    void *r = c->res[0], *x = c->args[0];
    int64_t D = xt->dims[3], rows64 = D ? ir_numel(xt) / D : 0;
    if (D % 2 || D > 2048 || rows64 > UINT_MAX) {
        fprintf(stderr, "train_rank: rope on CUDA needs an even head_dim of at most 2048 and fewer than 2^32 rows; "
                        "got head_dim %lld and %lld rows: change the model's head_dim or batch\n",
                (long long)D, (long long)rows64);
        exit(1);
    }
    int64_t rotary = c->in->attr[IR_ATTR_ROPE_ROTARY_DIM] > 0 ? (int64_t)c->in->attr[IR_ATTR_ROPE_ROTARY_DIM] : D;
    unsigned rows = (unsigned)rows64, T = (unsigned)xt->dims[1], H = (unsigned)xt->dims[2], half = (unsigned)(rotary / 2);
    unsigned Du = (unsigned)D;
    void *bufs[] = {r, x};
    int width = vec_rows(half, (const void *const *)bufs, 2) && D % VEC == 0 ? VEC : 1;
    unsigned lanes = half / (unsigned)width, groups = lanes < FLAT_BLOCK ? FLAT_BLOCK / lanes : 1;
    ir_rope_scale s = ir_rope_scale_of(c->in->attr, rotary);
    double yarn_low = s.yarn ? s.yarn_low : 0, yarn_high = s.yarn ? s.yarn_high : 0; /* high 0: not YaRN */
    float amplitude = (float)s.concentration;
    double sign = c->in->attr[IR_ATTR_ROPE_INVERSE] != 0 ? -1.0 : 1.0;
    int cp = (int)c->in->attr[IR_ATTR_ROPE_CP], cp_rank = (int)c->in->attr[IR_ATTR_ROPE_CP_RANK];
    void *p[] = {&r,        &x,         &rows,      &T,    &H,     &Du, &half,   &s.theta,
                 &s.factor, &yarn_low, &yarn_high, &amplitude, &sign, &width, &cp, &cp_rank};
    /* a few rows per thread: the frequencies (pow in double) are computed once per thread */
    int64_t blocks = (rows + groups - 1) / groups, cap = FILL_BLOCKS / 4;
    rt_cuda_launch(cx, name_of(c, RT_CUK_ROPE, xt, NULL).s, (unsigned)(blocks < cap ? blocks : cap), 1, 1,
                   lanes * groups, 0, p);
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

/* (logits[N,V], targets[N], dloss[]) -> (dlogits, mean loss): per-row losses and the gradient in
 * one kernel, then their mean in a fixed order */
void cuda_CROSS_ENTROPY_WITH_GRAD(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    const ir_type *lt = c->arg_types[0];
    need_f32(c, c->arg_types[2], "dloss");
    void *dl = c->res[0], *r = c->res[1], *logits = c->args[0], *targets = c->args[1], *dloss = c->args[2];
    long long N = nrows(lt), V = last_dim(lt);
    void *loss = rt_cuda_scratch(cx, (size_t)N * sizeof(float));
    void *p1[] = {&loss, &dl, &logits, &targets, &dloss, &N, &V};
    launch_rows(cx, name_of(c, RT_CUK_CROSS_ENTROPY_WITH_GRAD, lt, NULL), N, V, 0, p1);
    void *p2[] = {&r, &loss, &N};
    rt_cuda_launch(cx, name_of(c, RT_CUK_MEAN, NULL, NULL).s, 1, 1, 1, 1024, 0, p2);
}

/* --- optimizer and persistent state ----------------------------------------------------------- */

/* (dst, x): dst += x, any f32/bf16 pair */
void cuda_ACCUMULATE(rt_cuda_ctx *cx, const rt_kernel_call *c) { dst_src(cx, c, RT_CUK_ACCUMULATE); }

/* (dst, x): dst := x converted */
void cuda_COPY(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    copy_converted(cx, c, c->args[0], c->arg_types[0], c->args[1], c->arg_types[1]);
}

void cuda_ZERO(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    size_t bytes = ir_bytes(c->arg_types[0]);
    if (bytes)
        RT_CU_CHECK(cuMemsetD8Async(dptr(c->args[0]), 0, bytes, rt_cuda_stream(cx)));
}

/* (g): its ready mark, recorded on the compute stream (the host's copy of g waits for it) */
void cuda_GRAD_READY(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    rt_cuda_mark_ready(cx, (int)c->in->attr[IR_ATTR_GRAD_READY_SLOT]);
}

void cuda_CLIP_COEF(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    need_f32(c, c->arg_types[0], "sum of squares");
    void *r = c->res[0], *sumsq = c->args[0];
    double max_norm = c->in->attr[IR_ATTR_CLIP_COEF_MAX_NORM];
    void *p[] = {&r, &sumsq, &max_norm};
    rt_cuda_launch(cx, name_of(c, RT_CUK_CLIP_COEF, NULL, NULL).s, 1, 1, 1, 1, 0, p);
}

/* (p, g, m, v, lr[], step[], coef[][, copy]), f32 but the gradient and the moments, f32 or bf16; in
 * place on p, m, v. An i16 p is the remainder of a master held with the bf16 copy
 * (store_param_remainders). */
void cuda_ADAMW(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    bool pair = c->arg_types[0]->dtype == IR_I16;
    static const char *const operand[] = {"parameter", "gradient", "first moment", "second moment",
                                          "learning rate", "step", "clip coefficient"};
    for (int i = 0; i < 7; i++) /* the gradient and moments may be bf16: --grad-reduce-in-bf16, */
        if ((i == 0 && !pair) || i > 3) /* --use-precision-aware-optimizer */
            need_f32(c, c->arg_types[i], operand[i]);
    void *p = pair ? NULL : c->args[0], *rem = pair ? c->args[0] : NULL, *g = c->args[1], *m = c->args[2], *v = c->args[3];
    void *lr = c->args[4], *step = c->args[5], *coef = c->args[6];
    long long n = ir_numel(c->arg_types[0]);
    const double *a = c->in->attr;
    double b1 = a[IR_ATTR_ADAMW_BETA1], b2 = a[IR_ATTR_ADAMW_BETA2], eps = a[IR_ATTR_ADAMW_EPS];
    double wd = a[IR_ATTR_ADAMW_WEIGHT_DECAY];
    void *copy = c->nargs == 8 ? c->args[7] : NULL; /* the bf16 working copy, refreshed in the same pass */
    if ((copy || pair) && (!copy || c->arg_types[7]->dtype != IR_BF16)) {
        fprintf(stderr, "train_rank: adamw on CUDA writes bf16 working copies, got %s: the precision pass makes bf16 "
                        "copies only, so this is an mcc codegen bug\n", ir_dtype_name(c->arg_types[7]->dtype));
        exit(1);
    }
    void *params[] = {&p, &g, &m, &v, &lr, &step, &coef, &n, &b1, &b2, &eps, &wd, &copy, &rem};
    launch_flat(cx, name_of3(c, RT_CUK_ADAMW, c->arg_types[1], c->arg_types[2], c->arg_types[3]), (n + 3) / 4,
                params); /* 4 floats a thread */
}

/* --- FP8 (kernels_templates/fp8.cuh; fp8_matmul is matmul.c's) -------------------------------- */

/* amax[0] := max |x| over x's n elements (of dtype c's operand 0), a NaN anywhere giving NaN; the
 * kernel max-reduces uint bits atomically (order-free, so deterministic) into amax, zeroed by the
 * caller. */
static void fp8_amax_of(rt_cuda_ctx *cx, const rt_kernel_call *c, void *amax, const void *x, long long n)
{
    void *params[] = {&amax, (void *)&x, &n};
    int64_t blocks = (n + VEC * FLAT_BLOCK - 1) / (VEC * FLAT_BLOCK); /* VEC elements a thread (mcc_for_each_vec) */
    rt_cuda_launch(cx, name_of(c, RT_CUK_FP8_AMAX, c->arg_types[0], NULL).s,
                   blocks < 1 ? 1 : blocks < FILL_BLOCKS ? (unsigned)blocks : FILL_BLOCKS, 1, 1, FLAT_BLOCK, 0, params);
}

/* x -> amax[1]: max |x| */
void cuda_FP8_AMAX(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    need_f32(c, c->res_types[0], "amax");
    RT_CU_CHECK(cuMemsetD32Async(dptr(c->res[0]), 0, 1, rt_cuda_stream(cx)));
    fp8_amax_of(cx, c, c->res[0], c->args[0], ir_numel(c->arg_types[0]));
}

/* The format of quantize `c` (attribute `format`), checked against its result's dtype */
static int fp8_e5m2_of(const rt_kernel_call *c, int format)
{
    need_f32(c, c->arg_types[1], "amax");
    need_f32(c, c->res_types[1], "scale_inv");
    int e5m2 = c->in->attr[format] == IR_FP8_E5M2;
    if (c->res_types[0]->dtype != (e5m2 ? IR_FP8E5M2 : IR_FP8E4M3)) {
        fprintf(stderr, "train_rank: %s's format says %s but its result is %s: an mcc codegen bug\n",
                ir_ops[c->in->op].name, e5m2 ? "e5m2" : "e4m3", ir_dtype_name(c->res_types[0]->dtype));
        exit(1);
    }
    return e5m2;
}

/* q[n] := x[n] quantized by amax[0] (the CPU's scale and rounding), scale_inv[0] := 1 / scale */
static void fp8_quantize_of(rt_cuda_ctx *cx, const rt_kernel_call *c, void *q, void *scale_inv, const void *x,
                            const void *amax, long long n, int e5m2, double margin)
{
    float fmax = e5m2 ? 57344.0f : 448.0f; /* rt_fp8_max's */
    float pow2_margin = ldexpf(1.0f, (int)margin);
    void *params[] = {&q, &scale_inv, (void *)&x, (void *)&amax, &n, &e5m2, &fmax, &pow2_margin};
    kernel_name k = name_of(c, RT_CUK_FP8_QUANTIZE, c->arg_types[0], NULL);
    if (n == 0) /* scale_inv is still written: one thread */
        rt_cuda_launch(cx, k.s, 1, 1, 1, 32, 0, params);
    else
        launch_vec(cx, k, n, params);
}

/* (x, amax[1]) {format, margin} -> (q fp8e4m3|fp8e5m2, scale_inv[1]) */
void cuda_FP8_QUANTIZE(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    int e5m2 = fp8_e5m2_of(c, IR_ATTR_FP8_QUANTIZE_FORMAT);
    fp8_quantize_of(cx, c, c->res[0], c->res[1], c->args[0], c->args[1], ir_numel(c->arg_types[0]), e5m2,
                    c->in->attr[IR_ATTR_FP8_QUANTIZE_MARGIN]);
}

/* FP8 experts: the elements of c's operand 0 each expert's scale covers, into first[E + 1]: its
 * rows by the counts at operand `counts` (their host copy: rt_cuda_grouped_counts), or (counts < 0)
 * expert e's [out, in] of a weight [E, out, in]. As Transformer Engine's GroupedLinear quantizes
 * expert by expert (split_quantize), a launch of the dense kernels an expert, on its slice. */
static void fp8_expert_spans(rt_cuda_ctx *cx, const rt_kernel_call *c, int counts, int64_t E, int64_t *first)
{
    const ir_type *x = c->arg_types[0];
    const int32_t *n = counts >= 0 ? rt_cuda_grouped_counts(cx, c, counts, x->dims[0]) : NULL;
    first[0] = 0;
    for (int64_t e = 0; e < E; e++)
        first[e + 1] = first[e] + (n ? n[e] * last_dim(x) : ir_numel(x) / E);
}

/* (x, counts) or (w) -> amax[E]: each expert's max |x| */
void cuda_FP8_GROUPED_AMAX(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    need_f32(c, c->res_types[0], "amax");
    int64_t E = c->res_types[0]->dims[0], *first = malloc(sizeof(int64_t) * (size_t)(E + 1));
    size_t es = ir_dtype_size(c->arg_types[0]->dtype);
    fp8_expert_spans(cx, c, c->nargs == 2 ? 1 : -1, E, first);
    RT_CU_CHECK(cuMemsetD32Async(dptr(c->res[0]), 0, (size_t)E, rt_cuda_stream(cx)));
    for (int64_t e = 0; e < E; e++)
        if (first[e + 1] > first[e])
            fp8_amax_of(cx, c, (float *)c->res[0] + e, (const char *)c->args[0] + (size_t)first[e] * es,
                        first[e + 1] - first[e]);
    free(first);
}

/* (x, amax[E][, counts]) {format, margin} -> (q, scale_inv[E]): expert e's elements quantized by
 * amax[e]; q's rows past the counts zero */
void cuda_FP8_GROUPED_QUANTIZE(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    int e5m2 = fp8_e5m2_of(c, IR_ATTR_FP8_GROUPED_QUANTIZE_FORMAT);
    int64_t E = c->arg_types[1]->dims[0], *first = malloc(sizeof(int64_t) * (size_t)(E + 1));
    size_t es = ir_dtype_size(c->arg_types[0]->dtype);
    fp8_expert_spans(cx, c, c->nargs == 3 ? 2 : -1, E, first);
    for (int64_t e = 0; e < E; e++) /* an expert without rows still writes its scale_inv (one thread) */
        fp8_quantize_of(cx, c, (char *)c->res[0] + first[e], (float *)c->res[1] + e,
                        (const char *)c->args[0] + (size_t)first[e] * es, (const float *)c->args[1] + e,
                        first[e + 1] - first[e], e5m2, c->in->attr[IR_ATTR_FP8_GROUPED_QUANTIZE_MARGIN]);
    int64_t n = ir_numel(c->arg_types[0]);
    if (first[E] < n)
        RT_CU_CHECK(cuMemsetD8Async(dptr((char *)c->res[0] + first[E]), 0, (size_t)(n - first[E]), rt_cuda_stream(cx)));
    free(first);
}

/* x[R, C] -> (q E4M3, x or x^T; scale_inv) {rows, cols, transpose}, the scales laid out for
 * cuBLASLt's block scale modes (ops.def): 1x128 tiles a warp each, 8 to a CUDA block; 128x128
 * blocks a CUDA block of 128 threads each */
/* (x[R, C], counts[E]) {rows=1, transpose=1} -> (q [C, R'], scale_inv): the experts' rows transposed
 * in 1x128 tiles from each expert's first row (the blockwise wgrad's: ops.def); the counts read on
 * the device, no host wait */
static void fp8_expert_rows_quantize(rt_cuda_ctx *cx, const rt_kernel_call *c, int tile_warps)
{
    void *q = c->res[0], *scale_inv = c->res[1], *x = c->args[0], *counts = c->args[1];
    long long E = c->arg_types[1]->dims[0], C = c->arg_types[0]->dims[1], QC = c->res_types[0]->dims[1];
    void *params[] = {&q, &scale_inv, &x, &counts, &E, &C, &QC};
    kernel_name k = name_of(c, RT_CUK_FP8_EXPERT_TILE_QUANTIZE, c->arg_types[0], NULL);
    rt_cuda_launch(cx, k.s, capped_grid((C * QC / IR_FP8_BLOCK + tile_warps - 1) / tile_warps), 1, 1, 32 * tile_warps,
                   0, params);
}

/* x -> (q, scale_inv) {rows, cols, transpose, experts}[, counts]: 1x128 tiles a warp each, 128x128
 * blocks a CUDA block each; experts=1 quantizes each expert's weight x[e] alone (a launch an expert,
 * at its offsets in x, q and scale_inv); with counts fp8_expert_rows_quantize */
void cuda_FP8_BLOCK_QUANTIZE(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    enum { TILE_WARPS = 8 };
    need_f32(c, c->res_types[1], "scale_inv");
    if (c->nargs == 2) {
        fp8_expert_rows_quantize(cx, c, TILE_WARPS);
        return;
    }
    long long E = c->in->attr[IR_ATTR_FP8_BLOCK_QUANTIZE_EXPERTS] != 0 ? c->arg_types[0]->dims[0] : 1;
    long long C = c->arg_types[0]->ndim ? c->arg_types[0]->dims[c->arg_types[0]->ndim - 1] : 1;
    long long R = ir_numel(c->arg_types[0]) / C / E; /* an expert's rows (all of x's without experts) */
    int64_t scales = ir_numel(c->res_types[1]) / E;
    size_t xs = ir_dtype_size(c->arg_types[0]->dtype);
    int transpose = c->in->attr[IR_ATTR_FP8_BLOCK_QUANTIZE_TRANSPOSE] != 0;
    bool tiles = c->in->attr[IR_ATTR_FP8_BLOCK_QUANTIZE_ROWS] == 1;
    kernel_name k = name_of(c, tiles ? RT_CUK_FP8_TILE_QUANTIZE : RT_CUK_FP8_BLOCK_QUANTIZE, c->arg_types[0], NULL);
    for (long long e = 0; e < E; e++) {
        void *q = (char *)c->res[0] + e * R * C, *scale_inv = (float *)c->res[1] + e * scales;
        const void *x = (const char *)c->args[0] + (size_t)(e * R * C) * xs;
        void *params[] = {&q, &scale_inv, (void *)&x, &R, &C, &transpose};
        if (tiles)
            rt_cuda_launch(cx, k.s, capped_grid((R * C / IR_FP8_BLOCK + TILE_WARPS - 1) / TILE_WARPS), 1, 1,
                           32 * TILE_WARPS, 0, params);
        else
            rt_cuda_launch(cx, k.s, capped_grid(R * C / (IR_FP8_BLOCK * IR_FP8_BLOCK)), 1, 1, 128, 0, params);
    }
}

/* An FP8 history's rows (an expert weight's: a row an expert) and the threads that take them */
static int64_t history_rows(const ir_type *h) { return h->ndim == 2 ? h->dims[0] : 1; }
static unsigned history_block(const ir_type *h) { return history_rows(h) < 256 ? 32 : 256; }

/* h -> r[rows] {max}: each row's max (a NaN sticking) or its last entry; a thread a row (ops.def) */
void cuda_FP8_HISTORY_AMAX(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    need_f32(c, c->arg_types[0], "amax history");
    void *r = c->res[0], *h = c->args[0];
    long long rows = history_rows(c->arg_types[0]), n = last_dim(c->arg_types[0]);
    int take_max = c->in->attr[IR_ATTR_FP8_HISTORY_AMAX_MAX] != 0;
    void *params[] = {&r, &h, &rows, &n, &take_max};
    rt_cuda_launch(cx, name_of(c, RT_CUK_FP8_HISTORY_AMAX, NULL, NULL).s, 1, 1, 1, history_block(c->arg_types[0]), 0,
                   params);
}

/* (h, amax[rows]): each row's h[0] := max(h[0], amax) in place */
void cuda_FP8_AMAX_FOLD(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    need_f32(c, c->arg_types[0], "amax history");
    need_f32(c, c->arg_types[1], "amax");
    void *h = c->args[0], *amax = c->args[1];
    long long rows = history_rows(c->arg_types[0]), n = last_dim(c->arg_types[0]);
    void *params[] = {&h, &amax, &rows, &n};
    rt_cuda_launch(cx, name_of(c, RT_CUK_FP8_AMAX_FOLD, NULL, NULL).s, 1, 1, 1, history_block(c->arg_types[0]), 0,
                   params);
}

/* (h, r) {roll}: each row's h[j] := r[j-1], then h[0] := 0, in place (r may be h) */
void cuda_FP8_HISTORY_UPDATE(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    need_f32(c, c->arg_types[0], "amax history");
    need_f32(c, c->arg_types[1], "reduced amax history");
    void *h = c->args[0], *r = c->args[1];
    long long rows = history_rows(c->arg_types[0]), n = last_dim(c->arg_types[0]);
    int roll = c->in->attr[IR_ATTR_FP8_HISTORY_UPDATE_ROLL] != 0;
    void *params[] = {&h, &r, &rows, &n, &roll};
    rt_cuda_launch(cx, name_of(c, RT_CUK_FP8_HISTORY_UPDATE, NULL, NULL).s, 1, 1, 1, history_block(c->arg_types[0]), 0,
                   params);
}

/* --- mixture of experts (kernels_templates/moe.cuh; the grouped GEMMs are matmul.c's) --------- */

/* The router's top k, which the kernels keep in registers (MCC_MOE_MAX_TOPK). */
static int moe_topk(const rt_kernel_call *c, int64_t k)
{
    if (k < 1 || k > 32) {
        fprintf(stderr, "train_rank: %s on CUDA takes a top k of 1 to 32 (MCC_MOE_MAX_TOPK of "
                        "kernels_templates/moe.cuh), got %lld: lower moe_router_topk or recompile with --target cpu\n",
                ir_ops[c->in->op].name, (long long)k);
        exit(1);
    }
    return (int)k;
}

static double moe_scaling(const rt_kernel_call *c)
{
    double scaling = c->in->attr[IR_ATTR_MOE_ROUTE_SCALING];
    return scaling != 0 ? scaling : 1.0;
}

/* counts[R / group][E] := the pairs of ids[R] routed to each expert, per group of `group` pairs
 * (the aux loss's sequences; i32, in scratch the caller carved) */
static void moe_counts(rt_cuda_ctx *cx, int *counts, const void *ids, long long R, long long E, long long group)
{
    RT_CU_CHECK(cuMemsetD32Async(dptr(counts), 0, (size_t)(E * (R / group)), rt_cuda_stream(cx)));
    void *p[] = {&counts, &ids, &R, &E, &group};
    rt_cuda_launch(cx, kernel_families[RT_CUK_MOE_COUNT].stem, capped_grid((R + FLAT_BLOCK - 1) / FLAT_BLOCK), 1, 1,
                   FLAT_BLOCK, 0, p);
}

/* r[0] := scale * the sum of the per-token double terms t[n], one block in a fixed order */
static void moe_sum(rt_cuda_ctx *cx, void *r, const double *t, long long n, double scale)
{
    void *p[] = {&r, &t, &n, &scale};
    rt_cuda_launch(cx, kernel_families[RT_CUK_MOE_SUM].stem, 1, 1, 1, 1024, 0, p);
}

/* (logits[N,E][, h f32[2,E]]) -> (w[N,k], ids[N,k]): a thread per token (groups: group-limited) */
void cuda_MOE_ROUTE(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    const ir_type *lt = c->arg_types[0];
    if (c->nargs > 1)
        need_f32(c, c->arg_types[1], "expert bias");
    void *w = c->res[0], *ids = c->res[1], *logits = c->args[0], *bias = c->nargs > 1 ? c->args[1] : NULL;
    long long N = lt->dims[0], E = lt->dims[1];
    int k = moe_topk(c, c->res_types[0]->dims[1]), score = (int)c->in->attr[IR_ATTR_MOE_ROUTE_SCORE];
    int pre = c->in->attr[IR_ATTR_MOE_ROUTE_PRE_SOFTMAX] != 0;
    int groups = (int)c->in->attr[IR_ATTR_MOE_ROUTE_GROUPS], keep = (int)c->in->attr[IR_ATTR_MOE_ROUTE_GROUP_TOPK];
    if (groups > 64) {
        fprintf(stderr, "train_rank: moe_route on CUDA takes at most 64 expert groups (MCC_MOE_MAX_GROUPS of "
                        "kernels_templates/moe.cuh), got %d: lower moe_router_num_groups or recompile with --target cpu\n",
                groups);
        exit(1);
    }
    double scaling = moe_scaling(c);
    void *p[] = {&w, &ids, &logits, &bias, &N, &E, &k, &score, &pre, &scaling, &groups, &keep};
    launch_flat(cx, name_of(c, RT_CUK_MOE_ROUTE, lt, NULL), N, p);
}

/* (dw[N,k], logits, ids) -> dlogits[N,E]: a thread per token */
void cuda_MOE_ROUTE_GRAD(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    const ir_type *lt = c->arg_types[1];
    if (c->arg_types[0]->dtype != lt->dtype) {
        fprintf(stderr, "train_rank: moe_route_grad on CUDA takes dw and the logits in one dtype, got %s and %s: "
                        "an mcc codegen bug\n", ir_dtype_name(c->arg_types[0]->dtype), ir_dtype_name(lt->dtype));
        exit(1);
    }
    void *dl = c->res[0], *dw = c->args[0], *logits = c->args[1], *ids = c->args[2];
    long long N = lt->dims[0], E = lt->dims[1];
    int k = moe_topk(c, c->arg_types[2]->dims[1]), score = (int)c->in->attr[IR_ATTR_MOE_ROUTE_GRAD_SCORE];
    int pre = c->in->attr[IR_ATTR_MOE_ROUTE_GRAD_PRE_SOFTMAX] != 0;
    double scaling = moe_scaling(c);
    void *p[] = {&dl, &dw, &logits, &ids, &N, &E, &k, &score, &pre, &scaling};
    launch_flat(cx, name_of(c, RT_CUK_MOE_ROUTE_GRAD, lt, NULL), N, p);
}

/* (h f32[2,E], ids[N,k][, w]): h[0][ids] += 1 per (kept) pair, by exact float atomics */
void cuda_MOE_BIAS_COUNT(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    need_f32(c, c->arg_types[0], "expert bias");
    void *h = c->args[0], *ids = c->args[1], *w = c->nargs > 2 ? c->args[2] : NULL;
    long long R = ir_numel(c->arg_types[1]), E = c->arg_types[0]->dims[1];
    void *p[] = {&h, &ids, &w, &R, &E};
    launch_flat(cx, name_of(c, RT_CUK_MOE_BIAS_COUNT, c->nargs > 2 ? c->arg_types[2] : c->arg_types[0], NULL), R, p);
}

/* (h, r like h) {rate}: one thread */
void cuda_MOE_BIAS_UPDATE(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    need_f32(c, c->arg_types[0], "expert bias");
    need_f32(c, c->arg_types[1], "summed expert counts");
    void *h = c->args[0], *r = c->args[1];
    long long E = c->arg_types[0]->dims[1];
    double rate = c->in->attr[IR_ATTR_MOE_BIAS_UPDATE_RATE];
    void *p[] = {&h, &r, &E, &rate};
    rt_cuda_launch(cx, kernel_families[RT_CUK_MOE_BIAS_UPDATE].stem, 1, 1, 1, 1, 0, p);
}

/* (x, w, ids)[N,k] {capacity, policy} -> x * keep: a thread per pair (it scans all pairs) */
void cuda_MOE_CAPACITY(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    const ir_type *xt = c->arg_types[0];
    if (c->arg_types[1]->dtype != xt->dtype) {
        fprintf(stderr, "train_rank: moe_capacity on CUDA takes x and w in one dtype, got %s and %s: an mcc codegen "
                        "bug\n", ir_dtype_name(xt->dtype), ir_dtype_name(c->arg_types[1]->dtype));
        exit(1);
    }
    void *r = c->res[0], *x = c->args[0], *w = c->args[1], *ids = c->args[2];
    long long R = ir_numel(xt), capacity = (long long)c->in->attr[IR_ATTR_MOE_CAPACITY_CAPACITY], k = xt->dims[1];
    /* cp > 1: rows gathered over cp */
    long long cp = (long long)c->in->attr[IR_ATTR_MOE_CAPACITY_CP];
    long long seq = (long long)c->in->attr[IR_ATTR_MOE_CAPACITY_SEQ];
    int by_position = c->in->attr[IR_ATTR_MOE_CAPACITY_POLICY] != 0;
    void *p[] = {&r, &x, &w, &ids, &R, &capacity, &by_position, &k, &cp, &seq};
    launch_flat(cx, name_of(c, RT_CUK_MOE_CAPACITY, xt, NULL), R, p);
}

enum { MOE_SORT_CHUNK = 256 }; /* MCC_MOE_SORT_CHUNK of moe.cuh: pairs per block of the sort */

/* (ids[N,k][, kept f32|bf16[N,k]]) -> (perm[N k], counts[E]): per-chunk histograms, one block's scan,
 * chunk-local ranks, over the experts and with kept weights a last bucket of the dropped pairs */
void cuda_MOE_SORT(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    void *perm = c->res[0], *counts = c->res[1], *ids = c->args[0], *kept = c->nargs > 1 ? c->args[1] : NULL;
    int kept_bf16 = kept && c->arg_types[1]->dtype == IR_BF16;
    long long R = ir_numel(c->arg_types[0]), E = c->res_types[1]->dims[0], chunks = (R + MOE_SORT_CHUNK - 1) / MOE_SORT_CHUNK;
    long long B = E + (kept != NULL);
    if (chunks >= MAX_GRID) {
        fprintf(stderr, "train_rank: moe_sort on CUDA sorts at most %d pairs, got %lld: lower the micro-batch's "
                        "tokens or moe_router_topk\n", (MAX_GRID - 1) * MOE_SORT_CHUNK, R);
        exit(1);
    }
    if (R == 0) {
        RT_CU_CHECK(cuMemsetD32Async(dptr(counts), 0, (size_t)E, rt_cuda_stream(cx)));
        return;
    }
    int *hist = rt_cuda_scratch(cx, sizeof(int) * (size_t)B * (size_t)(2 * chunks + 1)), *base = hist + chunks * B;
    void *p1[] = {&hist, &ids, &kept, &kept_bf16, &R, &E, &B};
    rt_cuda_launch(cx, kernel_families[RT_CUK_MOE_SORT_HIST].stem, (unsigned)chunks, 1, 1, MOE_SORT_CHUNK, 0, p1);
    void *p2[] = {&base, &counts, &hist, &chunks, &E, &B};
    rt_cuda_launch(cx, kernel_families[RT_CUK_MOE_SORT_SCAN].stem, 1, 1, 1, 1024, 0, p2);
    void *p3[] = {&perm, &base, &ids, &kept, &kept_bf16, &R, &E, &B};
    rt_cuda_launch(cx, kernel_families[RT_CUK_MOE_SORT_SCATTER].stem, (unsigned)chunks, 1, 1, MOE_SORT_CHUNK, 0, p3);
}

/* (x[N,H], perm[R]) -> xp[R,H]: a block per pair */
void cuda_MOE_PERMUTE(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    const ir_type *xt = c->arg_types[0];
    void *xp = c->res[0], *x = c->args[0], *perm = c->args[1];
    long long N = xt->dims[0], H = xt->dims[1], R = c->arg_types[1]->dims[0], k = N ? R / N : 1;
    void *p[] = {&xp, &x, &perm, &R, &k, &H};
    launch_rows(cx, name_of(c, RT_CUK_MOE_PERMUTE, xt, NULL), R, H / VEC ? H / VEC * 4 : H, 0, p);
}

/* (yp[R,H], perm, w[N,k]) -> y[N,H]: a block per token; w f32 or yp's dtype */
void cuda_MOE_UNPERMUTE(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    const ir_type *yt = c->arg_types[0];
    void *y = c->res[0], *yp = c->args[0], *perm = c->args[1], *w = c->args[2];
    long long N = c->arg_types[2]->dims[0], k = c->arg_types[2]->dims[1], H = yt->dims[1];
    void *p[] = {&y, &yp, &perm, &w, &N, &k, &H};
    launch_rows(cx, name_of(c, RT_CUK_MOE_UNPERMUTE, yt, c->arg_types[2]), N, H / VEC ? H / VEC * 4 : H, 0, p);
}

/* (dy[N,H], yp, perm, w) -> (dyp, dw in w's dtype): a block per pair, the dot by a block reduction */
void cuda_MOE_UNPERMUTE_GRAD(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    const ir_type *yt = c->arg_types[1];
    if (c->arg_types[0]->dtype != yt->dtype) {
        fprintf(stderr, "train_rank: moe_unpermute_grad on CUDA takes dy and yp in one dtype, got %s and %s: an mcc "
                        "codegen bug\n", ir_dtype_name(c->arg_types[0]->dtype), ir_dtype_name(yt->dtype));
        exit(1);
    }
    void *dyp = c->res[0], *dw = c->res[1], *dy = c->args[0], *yp = c->args[1], *perm = c->args[2], *w = c->args[3];
    long long R = ir_numel(c->arg_types[3]), k = c->arg_types[3]->dims[1], H = yt->dims[1];
    void *p[] = {&dyp, &dw, &dy, &yp, &perm, &w, &R, &k, &H};
    launch_rows(cx, name_of(c, RT_CUK_MOE_UNPERMUTE_GRAD, yt, c->arg_types[3]), R, H / VEC ? H / VEC * 4 : H, 0, p);
}

/* The aux loss's sequence of S tokens (attribute seq; 0: all N, one loss) */
static long long moe_aux_seq(const rt_kernel_call *c, long long N)
{
    double seq = c->in->attr[IR_ATTR_MOE_AUX_LOSS_SEQ];
    return seq > 0 ? (long long)seq : N;
}

/* (logits[N,E], ids[N,k]) {seq S} -> f32[]: the mean over the N/S sequences of E / (k S^2) sum_n
 * sum_e s[n,e] c_e, c the sequence's counts, = E / (k S N) times the sum of the per-token terms:
 * counts, per-token terms, one sum */
void cuda_MOE_AUX_LOSS(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    const ir_type *lt = c->arg_types[0];
    need_f32(c, c->res_types[0], "aux loss");
    long long N = lt->dims[0], E = lt->dims[1], k = c->arg_types[1]->dims[1], S = moe_aux_seq(c, N);
    double *t = rt_cuda_scratch(cx, sizeof(double) * (size_t)N + sizeof(int) * (size_t)(E * (N / S)));
    int *counts = (int *)(t + N);
    void *logits = c->args[0];
    int score = (int)c->in->attr[IR_ATTR_MOE_AUX_LOSS_SCORE];
    moe_counts(cx, counts, c->args[1], N * k, E, S * k);
    void *p[] = {&t, &logits, &counts, &N, &E, &score, &S};
    launch_flat(cx, name_of(c, RT_CUK_MOE_AUX_TERMS, lt, NULL), N, p);
    moe_sum(cx, c->res[0], t, N, (double)E / ((double)k * (double)S * (double)N));
}

/* (dloss[], logits, ids) {seq} -> dlogits: a thread per token after the (sequences') counts */
void cuda_MOE_AUX_LOSS_GRAD(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    const ir_type *lt = c->arg_types[1];
    need_f32(c, c->arg_types[0], "dloss");
    long long N = lt->dims[0], E = lt->dims[1], k = c->arg_types[2]->dims[1], S = moe_aux_seq(c, N);
    int *counts = rt_cuda_scratch(cx, sizeof(int) * (size_t)(E * (N / S)));
    void *dl = c->res[0], *dloss = c->args[0], *logits = c->args[1];
    int score = (int)c->in->attr[IR_ATTR_MOE_AUX_LOSS_GRAD_SCORE];
    double factor = (double)E / ((double)k * (double)S * (double)N);
    moe_counts(cx, counts, c->args[2], N * k, E, S * k);
    void *p[] = {&dl, &dloss, &logits, &counts, &N, &E, &score, &factor, &S};
    launch_flat(cx, name_of(c, RT_CUK_MOE_AUX_GRAD, lt, NULL), N, p);
}

/* logits[N,E] -> f32[] mean of logsumexp^2 */
void cuda_MOE_Z_LOSS(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    const ir_type *lt = c->arg_types[0];
    need_f32(c, c->res_types[0], "z loss");
    long long N = lt->dims[0], E = lt->dims[1];
    double *t = rt_cuda_scratch(cx, sizeof(double) * (size_t)(N ? N : 1));
    void *logits = c->args[0];
    void *p[] = {&t, &logits, &N, &E};
    launch_flat(cx, name_of(c, RT_CUK_MOE_Z_TERMS, lt, NULL), N, p);
    moe_sum(cx, c->res[0], t, N, 1.0 / (double)N);
}

void cuda_MOE_Z_LOSS_GRAD(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    const ir_type *lt = c->arg_types[1];
    need_f32(c, c->arg_types[0], "dloss");
    void *dl = c->res[0], *dloss = c->args[0], *logits = c->args[1];
    long long N = lt->dims[0], E = lt->dims[1];
    void *p[] = {&dl, &dloss, &logits, &N, &E};
    launch_flat(cx, name_of(c, RT_CUK_MOE_Z_GRAD, lt, NULL), N, p);
}

/* (x, loss) -> x: a copy unless the memory plan gave the result x's bytes */
void cuda_MOE_AUX_ATTACH(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    device_copy(cx, c->res[0], c->args[0], ir_bytes(c->arg_types[0]));
}

/* moe_sort_runs (sort) and moe_unsort_runs: the run offsets from came by one thread, then a block
 * per destination row received, the count read on the device (blocks past it exit at once; the
 * rows past it are left as they were: no reader looks there); counts[S] too when sorting */
static void moe_move_runs(rt_cuda_ctx *cx, const rt_kernel_call *c, int sort)
{
    const ir_type *xt = c->arg_types[0], *ct = c->arg_types[1];
    long long n = ct->dims[0], S = ct->dims[1], C = xt->dims[0], nS = n * S;
    long long width = C ? (long long)(ir_bytes(xt) / (size_t)C / 2) : 0; /* 2-byte units: f32 and bf16 rows */
    int is64 = ct->dtype == IR_I64;
    long long *at = rt_cuda_scratch(cx, sizeof(long long) * (size_t)(2 * nS + 1)), *to = at + nS, *rows = to + nS;
    void *came = c->args[1], *counts = sort ? c->res[1] : NULL, *r = c->res[0], *x = c->args[0];
    if (C == 0)
        return;
    void *p1[] = {&at, &to, &rows, &counts, &came, &is64, &n, &S};
    rt_cuda_launch(cx, kernel_families[RT_CUK_MOE_RUNS_OFFSETS].stem, 1, 1, 1, 1, 0, p1);
    void *p2[] = {&r, &x, &at, &to, &rows, &came, &is64, &n, &S, &width, &sort};
    rt_cuda_launch(cx, kernel_families[RT_CUK_MOE_MOVE_RUNS].stem, capped_grid(C), 1, 1, row_block(width * 4), 0, p2);
}

void cuda_MOE_SORT_RUNS(rt_cuda_ctx *cx, const rt_kernel_call *c) { moe_move_runs(cx, c, 1); }
void cuda_MOE_UNSORT_RUNS(rt_cuda_ctx *cx, const rt_kernel_call *c) { moe_move_runs(cx, c, 0); }

/* --- the dispatch table, in ops.def order (ORDER OP) ------------------------------------------ */

const rt_cuda_launcher rt_cuda_launchers[IR_NUM_OPS] = {
#define X(id, text, nargs, nres, inplace, flags, attrs, infer, grad, shard) [IR_OP_##id] = cuda_##id,
#include "ir/ops.def"
#undef X
};
