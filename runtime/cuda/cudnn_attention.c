/* cudnn_attention.c — cuDNN's fused flash attention (causal, grouped-query, bf16, no dropout)
 * through the backend graph API, in C. The two graphs are the ones cudnn-frontend's composite SDPA
 * nodes build on cuDNN 9 before 9.21 (node/scaled_dot_product_flash_attention.h, softmax.h,
 * diagonal_band_mask.h): matmul, pointwise, reduction and reshape operations that cuDNN's fused
 * attention engines recognise as a whole. (cuDNN's opaque SDPA_FWD/BWD operations take a causal
 * mask only as a score-modifier subgraph, which needs cuDNN 9.21.)
 *
 * Every tensor is 4-d: our [B,T,H,D] buffers are [B,H,T,D] through strides, K^T and V^T are K and
 * V with the last two strides swapped, and GQA is K and V having Hk heads where Q has H. V, O, dO
 * and dV are Dv wide where Q, K, dQ and dK are D (multi-latent attention's narrower values: cuDNN 9
 * on Hopper takes d_qk 192 with d_v 128); the scale stays the caller's (1/sqrt(D)). Virtual
 * tensors (never stored; only their type and shape matter) are f32 unless noted, every operation
 * computes in f32, scalars (scale, -inf, 1) are passed by value. Building stops at the first
 * failing call and keeps which descriptor it was building, so a GPU run tells what cuDNN refused. */
#ifdef MCC_HAVE_CUDNN

#include "cudnn_attention.h"
#include "cuda_ctx.h"

#include <cuda_runtime.h>
#include <cudnn_graph.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef cudnnBackendDescriptor_t cudnn_desc;

/* cuDNN's message about its last failure ("" when it has none). */
static void cudnn_last_error(char *buf, size_t len)
{
    buf[0] = 0;
    cudnnGetLastErrorString(buf, len);
}

/* Checks a call made once the plans exist (execution): on failure prints file:line, the call,
 * the status, cuDNN's message and a hint, and exits. */
#define CUDNN_CHECK(call) cudnn_check((call), #call, __FILE__, __LINE__)
static void cudnn_check(cudnnStatus_t st, const char *call, const char *file, int line)
{
    if (st == CUDNN_STATUS_SUCCESS)
        return;
    char msg[1024];
    cudnn_last_error(msg, sizeof msg);
    fprintf(stderr, "train_rank: cuDNN error at %s:%d: %s returned %s (%d)%s%s\n", file, line, call,
            cudnnGetErrorString(st), (int)st, msg[0] ? ": " : "", msg);
    fprintf(stderr, "HINT: the attention plans were built for this shape at the first step, so running them failed: "
                    "a pointer not 16-byte aligned, a workspace below cudnn_attn_*_workspace() or a GPU fault; "
                    "CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=stderr prints cuDNN's log, "
                    "MCC_ATTENTION=mcc runs mcc's kernels instead\n");
    exit(1);
}

/* --- building a graph ------------------------------------------------------------------------- */

enum { CG_MAX_OPS = 48 };

/* A graph being built: every descriptor made for it, its operations in order, and the first
 * failure, naming the descriptor being built. After a failure every later call is skipped, so
 * building code reads straight through and looks at `failed` once at the end. */
typedef struct {
    cudnnHandle_t handle;
    const char *pass;               /* "forward" or "backward" */
    cudnn_desc *descs;              /* destroyed with the graph, or kept as long as its plan */
    int ndescs, cap;
    cudnn_desc ops[CG_MAX_OPS];
    int nops;
    int64_t next_virtual_uid;
    char what[128];                 /* the descriptor being built */
    char err[1024];
    bool failed;
} cudnn_graph;

/* Unique ids of the stored tensors and by-value scalars (the variant packs name them by these);
 * virtual tensors are numbered from UID_FIRST_VIRTUAL. */
enum {
    UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_DO, UID_DQ, UID_DK, UID_DV,
    UID_SCALE, UID_NEG_INF, UID_ONE, UID_SOFTMAX_SUM, UID_DQ_ACCUM,
    UID_FIRST_VIRTUAL = 100,
};

static bool cg_check(cudnn_graph *g, cudnnStatus_t st, const char *call, int line)
{
    if (st == CUDNN_STATUS_SUCCESS)
        return true;
    char msg[512];
    cudnn_last_error(msg, sizeof msg);
    snprintf(g->err, sizeof g->err, "%s graph, %s: %s returned %s at %s:%d%s%s", g->pass, g->what, call,
             cudnnGetErrorString(st), __FILE__, line, msg[0] ? ": " : "", msg);
    g->failed = true;
    return false;
}

/* A checked cuDNN call while building; skipped once the graph has failed. */
#define CG(g, call) ((g)->failed ? false : cg_check((g), (call), #call, __LINE__))
#define CG_SET(g, d, attr, type, n, value) CG(g, cudnnBackendSetAttribute((d), attr, type, (n), (value)))

static void cg_describe(cudnn_graph *g, const char *kind, const char *name)
{
    if (!g->failed)
        snprintf(g->what, sizeof g->what, "%s %s", kind, name);
}

static cudnn_desc cg_new(cudnn_graph *g, cudnnBackendDescriptorType_t type)
{
    cudnn_desc d = NULL;
    if (!CG(g, cudnnBackendCreateDescriptor(type, &d)))
        return NULL;
    if (g->ndescs == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 64;
        g->descs = realloc(g->descs, sizeof *g->descs * (size_t)g->cap);
    }
    g->descs[g->ndescs++] = d;
    return d;
}

static void cg_destroy(cudnn_desc *descs, int n)
{
    for (int i = n - 1; i >= 0; i--)
        cudnnBackendDestroyDescriptor(descs[i]);
    free(descs);
}

static void cg_add_op(cudnn_graph *g, cudnn_desc op)
{
    if (g->failed)
        return;
    if (g->nops == CG_MAX_OPS) {
        snprintf(g->err, sizeof g->err, "%s graph: more than %d operations (CG_MAX_OPS)", g->pass, CG_MAX_OPS);
        g->failed = true;
        return;
    }
    g->ops[g->nops++] = op;
}

/* --- tensors ---------------------------------------------------------------------------------- */

typedef struct {
    int64_t dim[4], stride[4];
} cg_layout;

/* A [B,T,H,D] buffer as [B,H,T,D]. */
static cg_layout cg_heads(int64_t B, int64_t T, int64_t H, int64_t D)
{
    return (cg_layout){{B, H, T, D}, {T * H * D, D, H * D, 1}};
}

/* A [B,T,H,D] buffer as the transpose [B,H,D,T] (K^T, V^T). */
static cg_layout cg_heads_transposed(int64_t B, int64_t T, int64_t H, int64_t D)
{
    return (cg_layout){{B, H, D, T}, {T * H * D, D, 1, H * D}};
}

/* Packed row-major [B,H,R,C]. */
static cg_layout cg_packed(int64_t B, int64_t H, int64_t R, int64_t C)
{
    return (cg_layout){{B, H, R, C}, {H * R * C, R * C, C, 1}};
}

/* The transpose [B,H,C,R] of a packed [B,H,R,C], as a view. */
static cg_layout cg_packed_transposed(int64_t B, int64_t H, int64_t R, int64_t C)
{
    return (cg_layout){{B, H, C, R}, {H * R * C, R * C, 1, C}};
}

enum { CG_STORED = 0, CG_VIRTUAL = 1, CG_BY_VALUE = 2 };

static cudnn_desc cg_tensor(cudnn_graph *g, const char *name, int64_t uid, cudnnDataType_t dt, cg_layout l, int kind)
{
    cg_describe(g, "tensor", name);
    cudnn_desc t = cg_new(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    int64_t alignment = 16;
    bool yes = true;
    CG_SET(g, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    CG_SET(g, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, l.dim);
    CG_SET(g, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, l.stride);
    CG_SET(g, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    CG_SET(g, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    if (kind == CG_VIRTUAL)
        CG_SET(g, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &yes);
    if (kind == CG_BY_VALUE)
        CG_SET(g, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes);
    CG(g, cudnnBackendFinalize(t));
    return t;
}

/* A buffer the variant pack points at (an operand, a result or a workspace slice). */
static cudnn_desc cg_stored(cudnn_graph *g, const char *name, int64_t uid, cudnnDataType_t dt, cg_layout l)
{
    return cg_tensor(g, name, uid, dt, l, CG_STORED);
}

static cudnn_desc cg_virtual(cudnn_graph *g, const char *name, cudnnDataType_t dt, cg_layout l)
{
    return cg_tensor(g, name, g->next_virtual_uid++, dt, l, CG_VIRTUAL);
}

/* An f32 scalar the variant pack passes by value (a host pointer), broadcast over any shape. */
static cudnn_desc cg_scalar(cudnn_graph *g, const char *name, int64_t uid)
{
    return cg_tensor(g, name, uid, CUDNN_DATA_FLOAT, (cg_layout){{1, 1, 1, 1}, {1, 1, 1, 1}}, CG_BY_VALUE);
}

/* --- operations -------------------------------------------------------------------------------- */

/* y = mode(x [, b [, t]]) computed in `math`; axis: GEN_INDEX's. */
static void cg_pointwise(cudnn_graph *g, const char *name, cudnnPointwiseMode_t mode, cudnnDataType_t math,
                         int64_t axis, cudnn_desc x, cudnn_desc b, cudnn_desc t, cudnn_desc y)
{
    cg_describe(g, "pointwise", name);
    cudnn_desc pw = cg_new(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    CG_SET(g, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    CG_SET(g, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math);
    if (mode == CUDNN_POINTWISE_GEN_INDEX)
        CG_SET(g, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    CG(g, cudnnBackendFinalize(pw));

    cudnn_desc op = cg_new(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    float one = 1.0f;
    CG_SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
    CG_SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    if (b)
        CG_SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    if (t)
        CG_SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t);
    CG_SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    CG_SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one);
    CG_SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
    CG(g, cudnnBackendFinalize(op));
    cg_add_op(g, op);
}

static void cg_unary(cudnn_graph *g, const char *name, cudnnPointwiseMode_t mode, cudnn_desc x, cudnn_desc y)
{
    cg_pointwise(g, name, mode, CUDNN_DATA_FLOAT, 0, x, NULL, NULL, y);
}

static void cg_binary(cudnn_graph *g, const char *name, cudnnPointwiseMode_t mode, cudnn_desc x, cudnn_desc b,
                      cudnn_desc y)
{
    cg_pointwise(g, name, mode, CUDNN_DATA_FLOAT, 0, x, b, NULL, y);
}

/* c = a b over the last two dims, batched over the first two (broadcast where b has fewer heads). */
static void cg_matmul(cudnn_graph *g, const char *name, cudnn_desc a, cudnn_desc b, cudnn_desc c)
{
    cg_describe(g, "matmul", name);
    cudnn_desc mm = cg_new(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    double padding = 0;
    CG_SET(g, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32);
    CG_SET(g, mm, CUDNN_ATTR_MATMUL_PADDING_VALUE, CUDNN_TYPE_DOUBLE, 1, &padding);
    CG(g, cudnnBackendFinalize(mm));

    cudnn_desc op = cg_new(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    CG_SET(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a);
    CG_SET(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    CG_SET(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
    CG_SET(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm);
    CG(g, cudnnBackendFinalize(op));
    cg_add_op(g, op);
}

/* y = x reduced over the dims where y has extent 1 (or fewer heads: a sum over each group). */
static void cg_reduce(cudnn_graph *g, const char *name, cudnnReduceTensorOp_t how, cudnn_desc x, cudnn_desc y)
{
    cg_describe(g, "reduction", name);
    cudnn_desc rd = cg_new(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    CG_SET(g, rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &how);
    CG_SET(g, rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32);
#if CUDNN_VERSION >= 91100
    bool deterministic = false; /* the frontend sets it from cuDNN 9.11 on */
    if (cudnnGetVersion() >= 91100)
        CG_SET(g, rd, CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC, CUDNN_TYPE_BOOLEAN, 1, &deterministic);
#endif
    CG(g, cudnnBackendFinalize(rd));

    cudnn_desc op = cg_new(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    CG_SET(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    CG_SET(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    CG_SET(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd);
    CG(g, cudnnBackendFinalize(op));
    cg_add_op(g, op);
}

/* y = x seen through y's dims and strides (a view; a transpose here). */
static void cg_reshape(cudnn_graph *g, const char *name, cudnn_desc x, cudnn_desc y)
{
    cg_describe(g, "reshape", name);
    cudnn_desc op = cg_new(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    CG_SET(g, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    CG_SET(g, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    CG(g, cudnnBackendFinalize(op));
    cg_add_op(g, op);
}

/* --- the attention graphs ------------------------------------------------------------------------ */

/* scale * Q K^T: [B,H,T,T] */
static cudnn_desc cg_scaled_scores(cudnn_graph *g, const cudnn_attn_shape *s, cudnn_desc q, cudnn_desc kt,
                                   cudnn_desc scale)
{
    cg_layout l = cg_packed(s->B, s->H, s->T, s->T);
    cudnn_desc qk = cg_virtual(g, "Q K^T", CUDNN_DATA_FLOAT, l);
    cudnn_desc scaled = cg_virtual(g, "scale * Q K^T", CUDNN_DATA_FLOAT, l);
    cg_matmul(g, "Q K^T", q, kt, qk);
    cg_binary(g, "scores * scale (MUL)", CUDNN_POINTWISE_MUL, qk, scale, scaled);
    return scaled;
}

/* x with -inf above the diagonal (key after query): row >= column keeps x. [B,H,T,T] */
static cudnn_desc cg_causal_mask(cudnn_graph *g, const cudnn_attn_shape *s, cudnn_desc x, cudnn_desc neg_inf)
{
    cg_layout l = cg_packed(s->B, s->H, s->T, s->T);
    cudnn_desc row = cg_virtual(g, "row index", CUDNN_DATA_INT32, l);
    cudnn_desc col = cg_virtual(g, "column index", CUDNN_DATA_INT32, l);
    cudnn_desc keep = cg_virtual(g, "row >= column", CUDNN_DATA_BOOLEAN, l);
    cudnn_desc masked = cg_virtual(g, "causally masked scores", CUDNN_DATA_FLOAT, l);
    cg_pointwise(g, "row index (GEN_INDEX axis 2)", CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, 2, x, NULL, NULL,
                 row);
    cg_pointwise(g, "column index (GEN_INDEX axis 3)", CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, 3, x, NULL,
                 NULL, col);
    cg_pointwise(g, "row >= column (CMP_GE)", CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, 0, row, col, NULL, keep);
    cg_pointwise(g, "causal mask (BINARY_SELECT)", CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, 0, x, neg_inf,
                 keep, masked);
    return masked;
}

/* P = softmax(x) along rows, in bf16 for the second matmul; stats = max + log(sum exp) (stored). */
static cudnn_desc cg_softmax(cudnn_graph *g, const cudnn_attn_shape *s, cudnn_desc x, cudnn_desc stats)
{
    cg_layout l = cg_packed(s->B, s->H, s->T, s->T), rows = cg_packed(s->B, s->H, s->T, 1);
    cudnn_desc max = cg_virtual(g, "row max", CUDNN_DATA_FLOAT, rows);
    cudnn_desc centered = cg_virtual(g, "x - max", CUDNN_DATA_FLOAT, l);
    cudnn_desc e = cg_virtual(g, "exp(x - max)", CUDNN_DATA_FLOAT, l);
    cudnn_desc sum = cg_virtual(g, "row sum of exp", CUDNN_DATA_FLOAT, rows);
    cudnn_desc log_sum = cg_virtual(g, "log(sum)", CUDNN_DATA_FLOAT, rows);
    cudnn_desc p = cg_virtual(g, "P", CUDNN_DATA_BFLOAT16, l);
    cg_reduce(g, "row max (MAX)", CUDNN_REDUCE_TENSOR_MAX, x, max);
    cg_binary(g, "x - max (SUB)", CUDNN_POINTWISE_SUB, x, max, centered);
    cg_unary(g, "exp(x - max) (EXP)", CUDNN_POINTWISE_EXP, centered, e);
    cg_reduce(g, "row sum (ADD)", CUDNN_REDUCE_TENSOR_ADD, e, sum);
    cg_unary(g, "log(sum) (LOG)", CUDNN_POINTWISE_LOG, sum, log_sum);
    cg_binary(g, "stats = max + log(sum) (ADD)", CUDNN_POINTWISE_ADD, max, log_sum, stats);
    cg_binary(g, "P = exp / sum (DIV)", CUDNN_POINTWISE_DIV, e, sum, p);
    return p;
}

/* (Q, K, V) -> O, stats:
 *   S = scale * Q K^T; S = row >= col ? S : -inf; P = softmax(S) (bf16), stats = max + log sum exp;
 *   O = P V */
static void cg_forward_graph(cudnn_graph *g, const cudnn_attn_shape *s)
{
    int64_t B = s->B, T = s->T, H = s->H, Hk = s->Hk, D = s->D, Dv = s->Dv;
    cudnn_desc q = cg_stored(g, "Q", UID_Q, CUDNN_DATA_BFLOAT16, cg_heads(B, T, H, D));
    cudnn_desc kt = cg_stored(g, "K^T", UID_K, CUDNN_DATA_BFLOAT16, cg_heads_transposed(B, T, Hk, D));
    cudnn_desc v = cg_stored(g, "V", UID_V, CUDNN_DATA_BFLOAT16, cg_heads(B, T, Hk, Dv));
    cudnn_desc o = cg_stored(g, "O", UID_O, CUDNN_DATA_BFLOAT16, cg_heads(B, T, H, Dv));
    cudnn_desc stats = cg_stored(g, "stats", UID_STATS, CUDNN_DATA_FLOAT, cg_packed(B, H, T, 1));
    cudnn_desc scale = cg_scalar(g, "scale", UID_SCALE), neg_inf = cg_scalar(g, "-inf", UID_NEG_INF);
    cudnn_desc masked = cg_causal_mask(g, s, cg_scaled_scores(g, s, q, kt, scale), neg_inf);
    cg_matmul(g, "O = P V", cg_softmax(g, s, masked, stats), v, o);
}

/* softmax_sum = rowsum(dO * O) * 1: [B,H,T,1] f32, stored (in the workspace) as the frontend does;
 * O and dO are Dv wide. */
static void cg_row_dot(cudnn_graph *g, const cudnn_attn_shape *s, cudnn_desc dO, cudnn_desc o, cudnn_desc one,
                       cudnn_desc softmax_sum)
{
    int64_t B = s->B, H = s->H, T = s->T, D = s->Dv;
    cg_layout frontends = {{B, H, T, D}, {H * T * D, T * D, H * D, 1}}; /* its strides for this virtual tensor */
    cudnn_desc prod = cg_virtual(g, "dO * O", CUDNN_DATA_FLOAT, frontends);
    cudnn_desc dot = cg_virtual(g, "rowsum(dO * O)", CUDNN_DATA_FLOAT, cg_packed(B, H, T, 1));
    cg_binary(g, "dO * O (MUL)", CUDNN_POINTWISE_MUL, dO, o, prod);
    cg_reduce(g, "rowsum(dO * O) (ADD)", CUDNN_REDUCE_TENSOR_ADD, prod, dot);
    cg_binary(g, "softmax_sum = rowsum * 1 (MUL)", CUDNN_POINTWISE_MUL, dot, one, softmax_sum);
}

/* P = exp(mask(scale * Q K^T - stats)): the forward's probabilities, recomputed. [B,H,T,T] f32 */
static cudnn_desc cg_recomputed_probs(cudnn_graph *g, const cudnn_attn_shape *s, cudnn_desc q, cudnn_desc kt,
                                      cudnn_desc scale, cudnn_desc stats, cudnn_desc neg_inf)
{
    cg_layout l = cg_packed(s->B, s->H, s->T, s->T);
    cudnn_desc centered = cg_virtual(g, "scores - stats", CUDNN_DATA_FLOAT, l);
    cudnn_desc p = cg_virtual(g, "P (recomputed)", CUDNN_DATA_FLOAT, l);
    cg_binary(g, "scores - stats (SUB)", CUDNN_POINTWISE_SUB, cg_scaled_scores(g, s, q, kt, scale), stats, centered);
    cg_unary(g, "P = exp (EXP)", CUDNN_POINTWISE_EXP, cg_causal_mask(g, s, centered, neg_inf), p);
    return p;
}

/* dX = A^T Y for a kv-side gradient (dV = P^T dO, dK = dS^T Q) of head width D (Dv for dV): A
 * [B,H,T,T] seen transposed in bf16; with fewer kv heads, computed per query head [B,H,T,D] (bf16)
 * and summed over each group. */
static void cg_kv_grad(cudnn_graph *g, const cudnn_attn_shape *s, const char *name, int64_t D, cudnn_desc a,
                       cudnn_desc y, cudnn_desc dx)
{
    int64_t B = s->B, T = s->T, H = s->H;
    char what[3][64];
    snprintf(what[0], sizeof what[0], "%s: transposed view", name);
    snprintf(what[1], sizeof what[1], "%s: per query head", name);
    snprintf(what[2], sizeof what[2], "%s: sum over query heads (ADD)", name);
    cudnn_desc at = cg_virtual(g, what[0], CUDNN_DATA_BFLOAT16, cg_packed_transposed(B, H, T, T));
    cg_reshape(g, what[0], a, at);
    if (s->H == s->Hk) {
        cg_matmul(g, name, at, y, dx);
        return;
    }
    cudnn_desc per_head = cg_virtual(g, what[1], CUDNN_DATA_BFLOAT16, cg_packed(B, H, T, D));
    cg_matmul(g, name, at, y, per_head);
    cg_reduce(g, what[2], CUDNN_REDUCE_TENSOR_ADD, per_head, dx);
}

/* dS = scale * P * (dO V^T - softmax_sum): [B,H,T,T] f32 */
static cudnn_desc cg_score_grad(cudnn_graph *g, const cudnn_attn_shape *s, cudnn_desc dO, cudnn_desc vt,
                                cudnn_desc softmax_sum, cudnn_desc p, cudnn_desc scale)
{
    cg_layout l = cg_packed(s->B, s->H, s->T, s->T);
    cudnn_desc dp = cg_virtual(g, "dP = dO V^T", CUDNN_DATA_FLOAT, l);
    cudnn_desc centered = cg_virtual(g, "dP - softmax_sum", CUDNN_DATA_FLOAT, l);
    cudnn_desc unscaled = cg_virtual(g, "P * (dP - softmax_sum)", CUDNN_DATA_FLOAT, l);
    cudnn_desc ds = cg_virtual(g, "dS", CUDNN_DATA_FLOAT, l);
    cg_matmul(g, "dP = dO V^T", dO, vt, dp);
    cg_binary(g, "dP - softmax_sum (SUB)", CUDNN_POINTWISE_SUB, dp, softmax_sum, centered);
    cg_binary(g, "P * (dP - softmax_sum) (MUL)", CUDNN_POINTWISE_MUL, centered, p, unscaled);
    cg_binary(g, "dS = scale * ... (MUL)", CUDNN_POINTWISE_MUL, unscaled, scale, ds);
    return ds;
}

/* dQ = dS K, into the f32 accumulator (stored, in the workspace), then copied to bf16. K is K^T
 * seen transposed again; the frontend leaves that view's type f32. */
static void cg_q_grad(cudnn_graph *g, const cudnn_attn_shape *s, cudnn_desc ds, cudnn_desc kt, cudnn_desc dq_accum,
                      cudnn_desc dq)
{
    cudnn_desc k = cg_virtual(g, "K (view of K^T)", CUDNN_DATA_FLOAT, cg_heads(s->B, s->T, s->Hk, s->D));
    cg_reshape(g, "K (view of K^T)", kt, k);
    cg_matmul(g, "dQ accumulator = dS K", ds, k, dq_accum);
    cg_unary(g, "dQ = dQ accumulator (IDENTITY)", CUDNN_POINTWISE_IDENTITY, dq_accum, dq);
}

/* (Q, K, V, O, dO, stats) -> dQ, dK, dV:
 *   softmax_sum = rowsum(dO * O); P = exp(mask(scale * Q K^T - stats)); dV = P^T dO;
 *   dS = scale * P * (dO V^T - softmax_sum); dK = dS^T Q; dQ = dS K */
static void cg_backward_graph(cudnn_graph *g, const cudnn_attn_shape *s)
{
    int64_t B = s->B, T = s->T, H = s->H, Hk = s->Hk, D = s->D, Dv = s->Dv;
    cudnn_desc q = cg_stored(g, "Q", UID_Q, CUDNN_DATA_BFLOAT16, cg_heads(B, T, H, D));
    cudnn_desc kt = cg_stored(g, "K^T", UID_K, CUDNN_DATA_BFLOAT16, cg_heads_transposed(B, T, Hk, D));
    cudnn_desc vt = cg_stored(g, "V^T", UID_V, CUDNN_DATA_BFLOAT16, cg_heads_transposed(B, T, Hk, Dv));
    cudnn_desc o = cg_stored(g, "O", UID_O, CUDNN_DATA_BFLOAT16, cg_heads(B, T, H, Dv));
    cudnn_desc dO = cg_stored(g, "dO", UID_DO, CUDNN_DATA_BFLOAT16, cg_heads(B, T, H, Dv));
    cudnn_desc stats = cg_stored(g, "stats", UID_STATS, CUDNN_DATA_FLOAT, cg_packed(B, H, T, 1));
    cudnn_desc dq = cg_stored(g, "dQ", UID_DQ, CUDNN_DATA_BFLOAT16, cg_heads(B, T, H, D));
    cudnn_desc dk = cg_stored(g, "dK", UID_DK, CUDNN_DATA_BFLOAT16, cg_heads(B, T, Hk, D));
    cudnn_desc dv = cg_stored(g, "dV", UID_DV, CUDNN_DATA_BFLOAT16, cg_heads(B, T, Hk, Dv));
    cudnn_desc softmax_sum = cg_stored(g, "softmax_sum", UID_SOFTMAX_SUM, CUDNN_DATA_FLOAT, cg_packed(B, H, T, 1));
    cudnn_desc dq_accum = cg_stored(g, "dQ accumulator", UID_DQ_ACCUM, CUDNN_DATA_FLOAT, cg_packed(B, H, T, D));
    cudnn_desc scale = cg_scalar(g, "scale", UID_SCALE), neg_inf = cg_scalar(g, "-inf", UID_NEG_INF);
    cudnn_desc one = cg_scalar(g, "1", UID_ONE);

    cg_row_dot(g, s, dO, o, one, softmax_sum);
    cudnn_desc p = cg_recomputed_probs(g, s, q, kt, scale, stats, neg_inf);
    cg_kv_grad(g, s, "dV = P^T dO", Dv, p, dO, dv);
    cudnn_desc ds = cg_score_grad(g, s, dO, vt, softmax_sum, p, scale);
    cg_kv_grad(g, s, "dK = dS^T Q", D, ds, q, dk);
    cg_q_grad(g, s, ds, kt, dq_accum, dq);
}

/* --- plans ------------------------------------------------------------------------------------ */

typedef struct {
    cudnn_desc plan;
    int64_t workspace;              /* bytes cuDNN needs */
    cudnn_desc *descs;              /* everything the plan was built from, kept with it */
    int ndescs;
} cudnn_plan;

static cudnn_desc cg_operation_graph(cudnn_graph *g)
{
    char name[32];
    snprintf(name, sizeof name, "of %d operations", g->nops);
    cg_describe(g, "operation graph", name);
    cudnn_desc og = cg_new(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    CG_SET(g, og, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &g->handle);
    CG_SET(g, og, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->nops, g->ops);
    CG(g, cudnnBackendFinalize(og));
    return og;
}

static const struct {
    cudnnBackendHeurMode_t mode;
    const char *name;
} cg_heuristics[] = {
    {CUDNN_HEUR_MODE_A, "heuristics mode A"},
    {CUDNN_HEUR_MODE_B, "heuristics mode B"},
    {CUDNN_HEUR_MODE_FALLBACK, "heuristics mode FALLBACK"},
};

/* The engine configurations heuristics `h` ranks for the graph, best first (*n of them; a
 * malloc'ed array, NULL when none or on failure). */
static cudnn_desc *cg_engine_configs(cudnn_graph *g, cudnn_desc og, int h, int64_t *n)
{
    *n = 0;
    cg_describe(g, "engine heuristics:", cg_heuristics[h].name);
    cudnn_desc heur = cg_new(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    cudnnBackendHeurMode_t mode = cg_heuristics[h].mode;
    int64_t count = 0;
    CG_SET(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &og);
    CG_SET(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    CG(g, cudnnBackendFinalize(heur));
    CG(g, cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                   NULL));
    if (g->failed || count <= 0)
        return NULL;
    cudnn_desc *cfgs = calloc((size_t)count, sizeof *cfgs);
    for (int64_t i = 0; i < count; i++)
        cfgs[i] = cg_new(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    CG(g, cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, n, cfgs));
    if (g->failed)
        *n = 0;
    return cfgs;
}

/* The execution plan of engine configuration `cfg`, if it finalizes for this graph. */
static bool cg_try_plan(cudnn_graph *g, cudnn_desc cfg, const char *heuristics, int64_t rank, cudnn_plan *out)
{
    char name[96];
    snprintf(name, sizeof name, "of engine config #%lld of %s", (long long)rank, heuristics);
    cg_describe(g, "execution plan", name);
    cudnn_desc plan = cg_new(g, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    int64_t workspace = 0, got = 0;
    CG_SET(g, plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &g->handle);
    CG_SET(g, plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg);
    CG(g, cudnnBackendFinalize(plan));
    CG(g, cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got,
                                   &workspace));
    if (g->failed)
        return false;
    out->plan = plan, out->workspace = workspace;
    return true;
}

/* Takes a failure as an expected outcome: keeps its message in `keep` (unless one is kept
 * already) and lets building go on. */
static void cg_forgive(cudnn_graph *g, char *keep, size_t len)
{
    if (!g->failed)
        return;
    if (!keep[0])
        snprintf(keep, len, "%s", g->err);
    g->failed = false;
}

/* The first engine configuration (heuristics A, then B, then FALLBACK, each best first) whose
 * execution plan finalizes. One that does not finalize is no error by itself; when none does, the
 * error says how many were tried and why the best-ranked one failed. */
static bool cg_plan(cudnn_graph *g, cudnn_plan *out)
{
    cudnn_desc og = cg_operation_graph(g);
    if (g->failed)
        return false;
    char plan_failure[sizeof g->err] = "", heuristics_failure[sizeof g->err] = "";
    int64_t tried = 0;
    bool found = false;
    for (int h = 0; h < (int)(sizeof cg_heuristics / sizeof cg_heuristics[0]) && !found; h++) {
        int64_t n = 0;
        cudnn_desc *cfgs = cg_engine_configs(g, og, h, &n);
        cg_forgive(g, heuristics_failure, sizeof heuristics_failure);
        for (int64_t i = 0; i < n && !found; i++, tried++) {
            found = cg_try_plan(g, cfgs[i], cg_heuristics[h].name, i, out);
            cg_forgive(g, plan_failure, sizeof plan_failure);
        }
        free(cfgs);
    }
    if (found)
        return true;
    if (tried)
        snprintf(g->err, sizeof g->err, "%s graph: no engine: none of the %lld engine configs of heuristics A, B "
                 "and FALLBACK finalized an execution plan; the best-ranked: %.800s", g->pass, (long long)tried,
                 plan_failure);
    else
        snprintf(g->err, sizeof g->err, "%s graph: no engine: heuristics A, B and FALLBACK returned no engine "
                 "config%s%.800s", g->pass, heuristics_failure[0] ? "; " : "", heuristics_failure);
    g->failed = true;
    return false;
}

/* --- a shape's plans ------------------------------------------------------------------------------ */

struct cudnn_attn {
    cudnn_attn_shape s;
    cudnnHandle_t handle;
    cudnn_plan fwd, bwd;
    float scale, neg_inf, one;      /* the by-value scalars: the variant packs point at these */
};

/* Builds one pass's graph and plan. */
static bool cudnn_attn_plan(cudnn_attn *a, const char *pass, void (*graph)(cudnn_graph *, const cudnn_attn_shape *),
                            cudnn_plan *out, char *err, size_t errlen)
{
    cudnn_graph g = {.handle = a->handle, .pass = pass, .next_virtual_uid = UID_FIRST_VIRTUAL};
    graph(&g, &a->s);
    if (!g.failed && cg_plan(&g, out)) {
        out->descs = g.descs, out->ndescs = g.ndescs;
        return true;
    }
    snprintf(err, errlen, "%s", g.err);
    cg_destroy(g.descs, g.ndescs);
    return false;
}

enum { CUDNN_ATTN_MAX_DEVICES = 64 };
static cudnnHandle_t cudnn_handles[CUDNN_ATTN_MAX_DEVICES];

/* The device's cuDNN handle, created at its first use. */
static cudnnHandle_t cudnn_handle_of(int device, char *err, size_t errlen)
{
    if (device < 0 || device >= CUDNN_ATTN_MAX_DEVICES) {
        snprintf(err, errlen, "device %d is beyond the %d cudnn_attention.c keeps handles for", device,
                 CUDNN_ATTN_MAX_DEVICES);
        return NULL;
    }
    if (cudnn_handles[device])
        return cudnn_handles[device];
    cudnnStatus_t st = cudnnCreate(&cudnn_handles[device]);
    if (st == CUDNN_STATUS_SUCCESS)
        return cudnn_handles[device];
    char msg[512];
    cudnn_last_error(msg, sizeof msg);
    snprintf(err, errlen, "cudnnCreate returned %s%s%s (libcudnn %zu loaded, mcc built against %d)",
             cudnnGetErrorString(st), msg[0] ? ": " : "", msg, cudnnGetVersion(), CUDNN_VERSION);
    cudnn_handles[device] = NULL;
    return NULL;
}

/* The oldest cuDNN these graphs were checked with on a GPU (tests/gpu/attention_test.c): older ones
 * need workarounds the frontend applies (e.g. a padding mask for lengths off a multiple of 128
 * before 9.16) and mcc does not, so they run mcc's kernels instead. */
enum { CUDNN_ATTN_MIN_VERSION = 91900 };

static cudnn_attn *cudnn_attn_create(const cudnn_attn_shape *s, int device, char *err, size_t errlen)
{
    size_t version = cudnnGetVersion();
    if (version < CUDNN_ATTN_MIN_VERSION) {
        snprintf(err, errlen, "the cuDNN loaded is %zu.%zu, older than %d.%d, the oldest mcc's attention graphs were "
                 "checked with; put a newer libcudnn first on LD_LIBRARY_PATH", version / 10000, version / 100 % 100,
                 CUDNN_ATTN_MIN_VERSION / 10000, CUDNN_ATTN_MIN_VERSION / 100 % 100);
        return NULL;
    }
    cudnnHandle_t handle = cudnn_handle_of(device, err, errlen);
    if (!handle)
        return NULL;
    cudnn_attn *a = malloc(sizeof *a);
    /* masked scores: -inf (cuDNN 9.10 on; the frontend used the lowest float before) */
    *a = (cudnn_attn){.s = *s, .handle = handle, .scale = s->scale, .neg_inf = -INFINITY, .one = 1.0f};
    if (cudnn_attn_plan(a, "forward", cg_forward_graph, &a->fwd, err, errlen) &&
        cudnn_attn_plan(a, "backward", cg_backward_graph, &a->bwd, err, errlen))
        return a;
    if (a->fwd.plan)
        cg_destroy(a->fwd.descs, a->fwd.ndescs);
    free(a);
    return NULL;
}

/* Every shape asked for, per device, with its plans or why there are none. Lives as long as the
 * process, like matmul.c's cuBLASLt plans. */
typedef struct {
    int device;
    cudnn_attn_shape s;
    cudnn_attn *a;
    char *reason;                   /* when a is NULL */
} cudnn_attn_entry;

static cudnn_attn_entry *cache;
static int ncache;

static bool cudnn_attn_same_shape(const cudnn_attn_shape *x, const cudnn_attn_shape *y)
{
    return x->B == y->B && x->T == y->T && x->H == y->H && x->Hk == y->Hk && x->D == y->D && x->Dv == y->Dv &&
           x->scale == y->scale;
}

cudnn_attn *cudnn_attn_get(const cudnn_attn_shape *s, const char **reason, bool *built)
{
    int device = 0;
    RT_CUDART_CHECK(cudaGetDevice(&device));
    cudnn_attn_entry *e = NULL;
    for (int i = 0; i < ncache && !e; i++)
        if (cache[i].device == device && cudnn_attn_same_shape(&cache[i].s, s))
            e = &cache[i];
    if (built)
        *built = !e;
    if (!e) {
        char err[1024];
        cudnn_attn *a = cudnn_attn_create(s, device, err, sizeof err);
        cache = realloc(cache, sizeof *cache * (size_t)(ncache + 1));
        e = &cache[ncache++];
        *e = (cudnn_attn_entry){device, *s, a, a ? NULL : strdup(err)};
    }
    if (reason)
        *reason = e->reason;
    return e->a;
}

/* --- running ---------------------------------------------------------------------------------- */

static size_t cudnn_align(size_t bytes) { return (bytes + 255) & ~(size_t)255; }

size_t cudnn_attn_forward_workspace(const cudnn_attn *a) { return (size_t)a->fwd.workspace; }

/* The backward's workspace: cuDNN's own, then softmax_sum f32 [B,H,T], then the dQ accumulator
 * f32 [B,H,T,D] (cuDNN 9.6+ zeroes it itself). */
static size_t cudnn_attn_softmax_sum_offset(const cudnn_attn *a) { return cudnn_align((size_t)a->bwd.workspace); }

static size_t cudnn_attn_dq_accum_offset(const cudnn_attn *a)
{
    return cudnn_attn_softmax_sum_offset(a) + cudnn_align((size_t)a->s.B * a->s.H * a->s.T * sizeof(float));
}

size_t cudnn_attn_backward_workspace(const cudnn_attn *a)
{
    return cudnn_attn_dq_accum_offset(a) + (size_t)a->s.B * a->s.H * a->s.T * a->s.D * sizeof(float);
}

/* Runs a plan on `stream` with the buffers `ptrs` (by unique id). Only host calls besides the
 * plan's kernels, so a CUDA graph can record it. */
static void cudnn_attn_execute(cudnn_attn *a, const cudnn_plan *p, CUstream stream, int64_t n, const int64_t *uids,
                               void *const *ptrs, void *workspace)
{
    cudnn_desc pack = NULL;
    CUDNN_CHECK(cudnnSetStream(a->handle, (cudaStream_t)stream));
    CUDNN_CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack));
    CUDNN_CHECK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids));
    CUDNN_CHECK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs));
    CUDNN_CHECK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace));
    CUDNN_CHECK(cudnnBackendFinalize(pack));
    CUDNN_CHECK(cudnnBackendExecute(a->handle, p->plan, pack));
    CUDNN_CHECK(cudnnBackendDestroyDescriptor(pack));
}

void cudnn_attn_forward(cudnn_attn *a, CUstream stream, const void *q, const void *k, const void *v, void *o,
                        float *lse, void *workspace)
{
    const int64_t uids[] = {UID_Q, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_NEG_INF};
    void *const ptrs[] = {(void *)q, (void *)k, (void *)v, o, lse, &a->scale, &a->neg_inf};
    cudnn_attn_execute(a, &a->fwd, stream, 7, uids, ptrs, workspace);
}

void cudnn_attn_backward(cudnn_attn *a, CUstream stream, const void *q, const void *k, const void *v, const void *o,
                         const void *dO, const float *lse, void *dq, void *dk, void *dv, void *workspace)
{
    char *ws = workspace;
    const int64_t uids[] = {UID_Q,  UID_K,  UID_V,     UID_O,       UID_DO,  UID_STATS,       UID_DQ,
                            UID_DK, UID_DV, UID_SCALE, UID_NEG_INF, UID_ONE, UID_SOFTMAX_SUM, UID_DQ_ACCUM};
    void *const ptrs[] = {(void *)q, (void *)k, (void *)v, (void *)o, (void *)dO, (void *)lse, dq, dk, dv,
                          &a->scale, &a->neg_inf, &a->one, ws + cudnn_attn_softmax_sum_offset(a),
                          ws + cudnn_attn_dq_accum_offset(a)};
    cudnn_attn_execute(a, &a->bwd, stream, 14, uids, ptrs, workspace);
}

#endif /* MCC_HAVE_CUDNN */
