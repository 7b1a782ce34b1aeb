/* cpu_kernels_test.c — the CPU kernels against finite differences (every backward kernel) and
 * against direct formulas (attention, cross-entropy, AdamW, matmul, rope, split and concat along
 * the last dimension, norms, grad norm);
 * Philox against its published known answers, and the dropout masks' statistics and layout
 * independence. */
#include "runtime/cpu_kernels.h"
#include "tests/check.h"
#include "runtime/dropout.h"
#include "runtime/bf16.h"
#include "runtime/fp8.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* --- tensors and running kernels ------------------------------------------------------------- */

/* A test tensor: its type and its buffer (float, int32_t for token ids and targets, int64_t for
 * a dropout op's first_sample). */
typedef struct {
    ir_type type;
    void *data;
} tensor;

static tensor tensor_new(ir_dtype dt, int ndim, const int64_t *dims)
{
    tensor t = {ir_tensor(dt, ndim, dims), NULL};
    t.data = calloc((size_t)ir_numel(&t.type), ir_dtype_size(dt));
    return t;
}
#define NDIMS(...) ((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define F32(...) tensor_new(IR_F32, NDIMS(__VA_ARGS__), (int64_t[]){__VA_ARGS__})
#define I32(...) tensor_new(IR_I32, NDIMS(__VA_ARGS__), (int64_t[]){__VA_ARGS__})
#define SCALAR() tensor_new(IR_F32, 0, NULL)
#define ATTRS(...) ((double[IR_MAX_ATTRS]){__VA_ARGS__})

/* The first_sample operand of the dropout ops. */
static tensor first_sample(int64_t s)
{
    tensor t = tensor_new(IR_I64, 0, NULL);
    *(int64_t *)t.data = s;
    return t;
}

static float *F(tensor t) { return t.data; }
static int32_t *I(tensor t) { return t.data; }
static int64_t numel(tensor t) { return ir_numel(&t.type); }
static tensor like(tensor t) { return tensor_new(t.type.dtype, t.type.ndim, t.type.dims); }

/* Deterministic xorshift64*, uniform in [-1, 1). */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double urand(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ull) >> 11) / (double)(1ull << 52) - 1.0;
}

static tensor uniform(tensor t, double scale)
{
    for (int64_t i = 0; i < numel(t); i++)
        F(t)[i] = (float)(scale * urand());
    return t;
}

/* Token ids in [0, vocab), with repeats so scatter-adds are exercised. */
static tensor ids(tensor t, int vocab)
{
    for (int64_t i = 0; i < numel(t); i++)
        I(t)[i] = (int32_t)((i * 5 + 3) % vocab);
    return t;
}

/* Runs one kernel as the executor does. Results are poisoned with NaN first, so a kernel that
 * leaves an element unwritten fails every check that reads it. */
static void run(ir_op op, const double attr[IR_MAX_ATTRS], const tensor *args, int nargs, const tensor *res, int nres)
{
    ir_instr in = {.op = op, .nargs = nargs, .nres = nres};
    void *a[8], *r[IR_MAX_RES];
    const ir_type *at[8], *rt[IR_MAX_RES];
    if (attr)
        memcpy(in.attr, attr, sizeof in.attr);
    for (int i = 0; i < nargs; i++)
        a[i] = args[i].data, at[i] = &args[i].type;
    for (int i = 0; i < nres; i++) {
        r[i] = res[i].data, rt[i] = &res[i].type;
        memset(r[i], 0xff, ir_bytes(rt[i]));
    }
    rt_kernel_call c = {&in, nargs, nres, a, at, r, rt};
    rt_cpu_kernels[op](&c);
}

static double max_abs_diff(const float *x, const double *ref, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        m = fmax(m, isnan(x[i]) ? INFINITY : fabs(x[i] - ref[i]));
    return m;
}

/* --- gradient checks ------------------------------------------------------------------------- */

/* One gradient check: a forward op on inputs in[] (diff[] marks the differentiable ones), its
 * result `out`, and a backward that turns dy into the gradients of the differentiable inputs
 * using the backward kernels: by default the op `grad_op` on (dy, in[0], ...), whose results are
 * those gradients in input order. */
typedef struct grad_case {
    const char *name;
    ir_op op;
    double attr[IR_MAX_ATTRS];
    int nin;
    tensor in[4];
    const char *in_names[4];
    bool diff[4];
    tensor out;
    ir_op grad_op;
    double grad_attr[IR_MAX_ATTRS];
    void (*backward)(const struct grad_case *gc, tensor dy, tensor *grads);
} grad_case;

static void backward_by_grad_op(const grad_case *gc, tensor dy, tensor *grads)
{
    tensor args[4] = {dy}, res[IR_MAX_RES];
    int nres = 0;
    for (int i = 0; i + 1 < ir_ops[gc->grad_op].nargs; i++)
        args[i + 1] = gc->in[i];
    for (int i = 0; i < gc->nin; i++)
        if (gc->diff[i])
            res[nres++] = grads[i];
    run(gc->grad_op, gc->grad_attr, args, ir_ops[gc->grad_op].nargs, res, nres);
}

/* The objective sum(r * fwd(in)), summed in double so only the kernel's own fp32 rounding
 * enters the finite differences. */
/* Attention's second result, the saved log-sum-exp f32[B,H,T] of its score rows. */
static tensor attention_lse(tensor q) { return F32(q.type.dims[0], q.type.dims[2], q.type.dims[1]); }

/* Runs the forward op of a case; ops with a second (saved) result get it in *extra. */
static void forward(const grad_case *gc, tensor *extra)
{
    tensor res[2] = {gc->out};
    int nres = ir_ops[gc->op].nres;
    if (nres == 2)
        res[1] = attention_lse(gc->in[0]);
    run(gc->op, gc->attr, gc->in, gc->nin, res, nres);
    if (nres == 2 && extra)
        *extra = res[1];
    else if (nres == 2)
        free(res[1].data);
}

static double objective(const grad_case *gc, tensor r)
{
    forward(gc, NULL);
    double s = 0;
    for (int64_t i = 0; i < numel(r); i++)
        s += (double)F(r)[i] * F(gc->out)[i];
    return s;
}

/* ||fd - g|| / ||fd|| for input i, fd the central difference (L(x+h) - L(x-h)) / (x+h - (x-h))
 * with the step as actually stored in fp32. */
static double fd_rel_error(grad_case *gc, int i, tensor r, tensor grad, double eps)
{
    double err2 = 0, ref2 = 0;
    for (int64_t e = 0; e < numel(gc->in[i]); e++) {
        float *x = &F(gc->in[i])[e], x0 = *x, xp = x0 + (float)eps, xm = x0 - (float)eps;
        *x = xp;
        double lp = objective(gc, r);
        *x = xm;
        double lm = objective(gc, r);
        *x = x0;
        double fd = (lp - lm) / ((double)xp - xm), d = fd - F(grad)[e];
        err2 += isnan(d) ? INFINITY : d * d;
        ref2 += fd * fd;
    }
    return sqrt(err2 / ref2);
}

/* Why these tolerances: the forward runs in fp32, so each objective carries a rounding error of
 * about 6e-8 sqrt(n) |r||y|, which the central difference divides by 2 eps: with eps = 1e-2 that
 * is ~1e-5 relative. The truncation error of these smooth ops is O(eps^2 |f'''|) ~ 1e-5 too (a
 * smaller eps would trade it for more rounding). Correct kernels measure 1e-7..7e-5; a wrong term
 * (a missing mean, a transposed operand, a wrong kv head) gives 1e-2..1, so 1e-3 on the norm of
 * the error over the norm of the gradient leaves an order of magnitude on either side. */
#define FD_EPS 1e-2
#define FD_TOL 1e-3

static void check_grad(grad_case *gc)
{
    tensor r = uniform(like(gc->out), 1.0), grads[4] = {0};
    for (int i = 0; i < gc->nin; i++)
        if (gc->diff[i])
            grads[i] = like(gc->in[i]);
    (gc->backward ? gc->backward : backward_by_grad_op)(gc, r, grads);
    for (int i = 0; i < gc->nin; i++) {
        if (!gc->diff[i])
            continue;
        double rel = fd_rel_error(gc, i, r, grads[i], FD_EPS);
        printf("grad %-22s d%-6s rel err %.1e\n", gc->name, gc->in_names[i], rel);
        CHECK(rel < FD_TOL, "%s: gradient of %s differs from finite differences (rel err %.3g)", gc->name,
              gc->in_names[i], rel);
        free(grads[i].data);
    }
    for (int i = 0; i < gc->nin; i++)
        free(gc->in[i].data);
    free(gc->out.data);
    free(r.data);
}

static void copy_into(tensor dst, tensor src) { memcpy(dst.data, src.data, ir_bytes(&src.type)); }

/* y = x W^T (the linear layer): dx = dy W, dW = dy^T x. */
static void matmul_backward(const grad_case *gc, tensor dy, tensor *g)
{
    run(IR_OP_MATMUL, ATTRS(0, 0), (tensor[]){dy, gc->in[1]}, 2, &g[0], 1);
    run(IR_OP_MATMUL, ATTRS(1, 0), (tensor[]){dy, gc->in[0]}, 2, &g[1], 1);
}

static void embedding_backward(const grad_case *gc, tensor dy, tensor *g)
{
    run(IR_OP_EMBEDDING_GRAD, ATTRS((double)gc->in[0].type.dims[0]), (tensor[]){dy, gc->in[1]}, 2, &g[0], 1);
}

static void pos_add_backward(const grad_case *gc, tensor dy, tensor *g)
{
    copy_into(g[0], dy);
    run(IR_OP_POS_ADD_GRAD, ATTRS((double)gc->in[1].type.dims[0]), &dy, 1, &g[1], 1);
}

static void bias_add_backward(const grad_case *gc, tensor dy, tensor *g)
{
    copy_into(g[0], dy);
    run(IR_OP_SUM_ROWS, NULL, &dy, 1, &g[1], 1);
}

/* (dy, q, k, v, y, lse[, first_sample]) -> dq, dk, dv, with y and lse from the forward. */
static void attention_backward(const grad_case *gc, tensor dy, tensor *g)
{
    tensor lse;
    forward(gc, &lse);
    ir_op op = gc->op == IR_OP_ATTENTION ? IR_OP_ATTENTION_GRAD : IR_OP_ATTENTION_DROPOUT_GRAD;
    tensor args[7] = {dy, gc->in[0], gc->in[1], gc->in[2], gc->out, lse, gc->in[3]};
    run(op, gc->attr, args, ir_ops[op].nargs, g, 3);
    free(lse.data);
}

/* concat_last_dim's gradient: split_last_dim of dy where the operands met, the one-head b's part
 * summed over the heads */
static void concat_last_dim_backward(const grad_case *gc, tensor dy, tensor *g)
{
    int n = gc->in[0].type.ndim;
    run(IR_OP_SPLIT_LAST_DIM, ATTRS((double)gc->in[0].type.dims[n - 1], 2), &dy, 1, g, 2);
}

/* Dropout is its own gradient: the same op (mask) on dy. */
static void dropout_backward(const grad_case *gc, tensor dy, tensor *g)
{
    run(IR_OP_DROPOUT, gc->attr, (tensor[]){dy, gc->in[1]}, 2, &g[0], 1);
}

static void test_gradients(void)
{
    grad_case cases[] = {
        {"gelu", IR_OP_GELU, {0}, 1, {uniform(F32(3, 7), 3)}, {"x"}, {1}, F32(3, 7), .grad_op = IR_OP_GELU_GRAD},
        {"silu", IR_OP_SILU, {0}, 1, {uniform(F32(3, 7), 3)}, {"x"}, {1}, F32(3, 7), .grad_op = IR_OP_SILU_GRAD},
        {"squared_relu", IR_OP_SQUARED_RELU, {0}, 1, {uniform(F32(3, 7), 3)}, {"x"}, {1}, F32(3, 7),
         .grad_op = IR_OP_SQUARED_RELU_GRAD},
        /* eps 0.3, of the order of the rows' variance (~1.3): a backward that drops it is off by 10-16% */
        {"layernorm", IR_OP_LAYERNORM, {0.3}, 3, {uniform(F32(2, 3, 8), 2), uniform(F32(8), 1), uniform(F32(8), 1)},
         {"x", "w", "b"}, {1, 1, 1}, F32(2, 3, 8), .grad_op = IR_OP_LAYERNORM_GRAD, .grad_attr = {0.3}},
        {"layernorm 1p", IR_OP_LAYERNORM, {0.3, 1}, 3,
         {uniform(F32(2, 3, 8), 2), uniform(F32(8), 1), uniform(F32(8), 1)}, {"x", "w", "b"}, {1, 1, 1},
         F32(2, 3, 8), .grad_op = IR_OP_LAYERNORM_GRAD, .grad_attr = {0.3, 1}},
        {"rmsnorm", IR_OP_RMSNORM, {0.3}, 2, {uniform(F32(2, 3, 8), 2), uniform(F32(8), 1)}, {"x", "w"}, {1, 1},
         F32(2, 3, 8), .grad_op = IR_OP_RMSNORM_GRAD, .grad_attr = {0.3}},
        {"rmsnorm 1p", IR_OP_RMSNORM, {0.3, 1}, 2, {uniform(F32(2, 3, 8), 2), uniform(F32(8), 1)}, {"x", "w"}, {1, 1},
         F32(2, 3, 8), .grad_op = IR_OP_RMSNORM_GRAD, .grad_attr = {0.3, 1}},
        {"rope", IR_OP_ROPE, {10000, 0}, 1, {uniform(F32(2, 5, 3, 8), 1)}, {"x"}, {1}, F32(2, 5, 3, 8),
         .grad_op = IR_OP_ROPE, .grad_attr = {10000, 1}},
        {"rope rotary_dim 4 of 8", IR_OP_ROPE, {10000, 0, 0, 0, 0, 4}, 1, {uniform(F32(2, 5, 3, 8), 1)}, {"x"}, {1},
         F32(2, 5, 3, 8), .grad_op = IR_OP_ROPE, .grad_attr = {10000, 1, 0, 0, 0, 4}},
        {"attention", IR_OP_ATTENTION, {0}, 3,
         {uniform(F32(2, 5, 2, 4), 1), uniform(F32(2, 5, 2, 4), 1), uniform(F32(2, 5, 2, 4), 1)}, {"q", "k", "v"},
         {1, 1, 1}, F32(2, 5, 2, 4), .backward = attention_backward},
        {"attention gqa H=4 Hk=2", IR_OP_ATTENTION, {0}, 3,
         {uniform(F32(2, 5, 4, 8), 1), uniform(F32(2, 5, 2, 8), 1), uniform(F32(2, 5, 2, 8), 1)}, {"q", "k", "v"},
         {1, 1, 1}, F32(2, 5, 4, 8), .backward = attention_backward},
        {"attention values of 6 beside q, k of 8 (multi-latent)", IR_OP_ATTENTION, {0}, 3,
         {uniform(F32(2, 5, 4, 8), 1), uniform(F32(2, 5, 2, 8), 1), uniform(F32(2, 5, 2, 6), 1)}, {"q", "k", "v"},
         {1, 1, 1}, F32(2, 5, 4, 6), .backward = attention_backward},
        /* multi-token prediction's roll: x[2,5,4] by 2 positions, 3 kept; its gradient the shift back to 5 */
        {"shift_seq by 2, count 3", IR_OP_SHIFT_SEQ, {2, 3}, 1, {uniform(F32(2, 5, 4), 1)}, {"x"}, {1}, F32(2, 3, 4),
         .grad_op = IR_OP_SHIFT_SEQ, .grad_attr = {-2, 5}},
        {"shift_seq by 1, count 5 (zeros rolled in)", IR_OP_SHIFT_SEQ, {1, 5}, 1, {uniform(F32(2, 5, 4), 1)}, {"x"},
         {1}, F32(2, 5, 4), .grad_op = IR_OP_SHIFT_SEQ, .grad_attr = {-1, 5}},
        {"concat_last_dim of one head broadcast", IR_OP_CONCAT_LAST_DIM, {0}, 2,
         {uniform(F32(2, 3, 4, 5), 1), uniform(F32(2, 3, 1, 2), 1)}, {"a", "b"}, {1, 1}, F32(2, 3, 4, 7),
         .backward = concat_last_dim_backward},
        /* p 0.3, seed 1234, site 5; x as the slice [2, 7) of 9 positions; q heads [2, 6) of 8 */
        {"dropout", IR_OP_DROPOUT, {0.3, 1234, 5, 1, 2, 9}, 2, {uniform(F32(2, 5, 6), 1), first_sample(6000000007)},
         {"x", "first_sample"}, {1, 0}, F32(2, 5, 6), .backward = dropout_backward},
        {"attention_dropout gqa", IR_OP_ATTENTION_DROPOUT, {0.3, 1234, 5, 2, 8}, 4,
         {uniform(F32(2, 5, 4, 8), 1), uniform(F32(2, 5, 2, 8), 1), uniform(F32(2, 5, 2, 8), 1), first_sample(77)},
         {"q", "k", "v", "first_sample"}, {1, 1, 1, 0}, F32(2, 5, 4, 8), .backward = attention_backward},
        {"cross_entropy", IR_OP_CROSS_ENTROPY, {0}, 2, {uniform(F32(2, 3, 7), 2), ids(I32(2, 3), 7)},
         {"logits", "targets"}, {1, 0}, SCALAR(), .grad_op = IR_OP_CROSS_ENTROPY_GRAD},
        {"matmul x W^T", IR_OP_MATMUL, {0, 1}, 2, {uniform(F32(2, 3, 4), 1), uniform(F32(5, 4), 1)}, {"x", "W"}, {1, 1},
         F32(2, 3, 5), .backward = matmul_backward},
        {"embedding", IR_OP_EMBEDDING, {0}, 2, {uniform(F32(7, 3), 1), ids(I32(2, 5), 7)}, {"table", "ids"}, {1, 0},
         F32(2, 5, 3), .backward = embedding_backward},
        {"pos_add", IR_OP_POS_ADD, {0}, 2, {uniform(F32(2, 3, 4), 1), uniform(F32(5, 4), 1)}, {"x", "table"}, {1, 1},
         F32(2, 3, 4), .backward = pos_add_backward},
        {"bias_add", IR_OP_BIAS_ADD, {0}, 2, {uniform(F32(2, 3, 4), 1), uniform(F32(4), 1)}, {"x", "b"}, {1, 1},
         F32(2, 3, 4), .backward = bias_add_backward},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_grad(&cases[i]);
}

/* --- forward references ---------------------------------------------------------------------- */

/* Naive causal attention in double, one query at a time. */
static void attention_reference(tensor q, tensor k, tensor v, double *y)
{
    int64_t B = q.type.dims[0], T = q.type.dims[1], H = q.type.dims[2], Hk = k.type.dims[2], D = q.type.dims[3];
    int64_t Dv = v.type.dims[3];
    double s[64];
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++) {
                int64_t g = h / (H / Hk);
                const float *qt = F(q) + ((b * T + t) * H + h) * D;
                double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j <= t; j++) {
                    const float *kj = F(k) + ((b * T + j) * Hk + g) * D;
                    s[j] = 0;
                    for (int64_t d = 0; d < D; d++)
                        s[j] += (double)qt[d] * kj[d] / sqrt((double)D);
                    mx = fmax(mx, s[j]);
                }
                for (int64_t j = 0; j <= t; j++)
                    sum += s[j] = exp(s[j] - mx);
                for (int64_t d = 0; d < Dv; d++) {
                    double acc = 0;
                    for (int64_t j = 0; j <= t; j++)
                        acc += s[j] / sum * F(v)[((b * T + j) * Hk + g) * Dv + d];
                    y[((b * T + t) * H + h) * Dv + d] = acc;
                }
            }
}

/* Scale 30 makes scores of ~1e3, where a softmax without the max subtracted overflows. The last
 * case's values are narrower than q and k (multi-latent attention's). */
static void test_attention_reference(void)
{
    const int64_t heads[][3] = {{2, 2, 8}, {4, 2, 8}, {4, 1, 8}, {4, 4, 5}}; /* H, Hk, Dv */
    const double scales[] = {1, 30};
    for (int hi = 0; hi < 4; hi++)
        for (int si = 0; si < 2; si++) {
            int64_t H = heads[hi][0], Hk = heads[hi][1], Dv = heads[hi][2];
            tensor q = uniform(F32(2, 6, H, 8), scales[si]), k = uniform(F32(2, 6, Hk, 8), scales[si]);
            tensor v = uniform(F32(2, 6, Hk, Dv), 1), y = F32(2, 6, H, Dv), lse = attention_lse(q);
            double *ref = malloc(numel(y) * sizeof *ref);
            run(IR_OP_ATTENTION, NULL, (tensor[]){q, k, v}, 3, (tensor[]){y, lse}, 2);
            free(lse.data);
            attention_reference(q, k, v, ref);
            double err = max_abs_diff(F(y), ref, numel(y));
            printf("attention H=%lld Hk=%lld Dv=%lld scale %-4g max abs err vs naive %.1e\n", (long long)H,
                   (long long)Hk, (long long)Dv, scales[si], err);
            CHECK(err < 1e-5, "attention H=%lld Hk=%lld differs from the naive reference by %.3g", (long long)H,
                  (long long)Hk, err);
            free(ref), free(q.data), free(k.data), free(v.data), free(y.data);
        }
}

/* Mean of -log(softmax(x)[target]) straight from the definition; shifting every logit by 1000
 * must not change it (a log-sum-exp without the max overflows there). */
static void test_cross_entropy_reference(void)
{
    tensor x = uniform(F32(4, 9), 3), t = ids(I32(4), 9), loss = SCALAR(), shifted = like(x), loss2 = SCALAR();
    double ref = 0;
    for (int64_t i = 0; i < 4; i++) {
        double z = 0;
        for (int64_t j = 0; j < 9; j++)
            z += exp(F(x)[i * 9 + j]);
        ref -= log(exp(F(x)[i * 9 + I(t)[i]]) / z) / 4;
    }
    for (int64_t i = 0; i < numel(x); i++)
        F(shifted)[i] = F(x)[i] + 1000.0f;
    run(IR_OP_CROSS_ENTROPY, NULL, (tensor[]){x, t}, 2, &loss, 1);
    run(IR_OP_CROSS_ENTROPY, NULL, (tensor[]){shifted, t}, 2, &loss2, 1);
    printf("cross_entropy %.7f vs direct %.7f, shifted by 1000: %.7f\n", F(loss)[0], ref, F(loss2)[0]);
    CHECK(fabs(F(loss)[0] - ref) < 1e-6, "cross_entropy %.8g, direct formula %.8g", F(loss)[0], ref);
    /* fp32 rounds x + 1000 to ~6e-5 */
    CHECK(fabs(F(loss2)[0] - ref) < 2e-4, "cross_entropy of logits + 1000 is %.8g, not %.8g", F(loss2)[0], ref);
    free(x.data), free(t.data), free(loss.data), free(shifted.data), free(loss2.data);
}

/* AdamW for 3 steps (the second with a clip coefficient) against the formula in double. */
static void test_adamw(void)
{
    enum { N = 16 };
    const double b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1, lr = 1e-2, coefs[3] = {1, 0.5, 1};
    tensor p = uniform(F32(N), 1), g = F32(N), m = F32(N), v = F32(N);
    tensor lr_t = SCALAR(), step = SCALAR(), coef = SCALAR();
    double rp[N], rm[N] = {0}, rv[N] = {0};
    for (int i = 0; i < N; i++)
        rp[i] = F(p)[i];
    F(lr_t)[0] = (float)lr;
    for (int s = 1; s <= 3; s++) {
        uniform(g, 1);
        F(step)[0] = (float)s, F(coef)[0] = (float)coefs[s - 1];
        run(IR_OP_ADAMW, ATTRS(b1, b2, eps, wd), (tensor[]){p, g, m, v, lr_t, step, coef}, 7, NULL, 0);
        for (int i = 0; i < N; i++) {
            double gi = F(g)[i] * coefs[s - 1];
            rm[i] = b1 * rm[i] + (1 - b1) * gi;
            rv[i] = b2 * rv[i] + (1 - b2) * gi * gi;
            rp[i] -= lr * (rm[i] / (1 - pow(b1, s)) / (sqrt(rv[i] / (1 - pow(b2, s))) + eps) + wd * rp[i]);
        }
    }
    double ep = max_abs_diff(F(p), rp, N), em = max_abs_diff(F(m), rm, N), ev = max_abs_diff(F(v), rv, N);
    printf("adamw 3 steps: max abs err p %.1e m %.1e v %.1e\n", ep, em, ev);
    CHECK(ep < 1e-6 && em < 1e-6 && ev < 1e-7, "adamw differs from the formula: p %.3g m %.3g v %.3g", ep, em, ev);
    free(p.data), free(g.data), free(m.data), free(v.data), free(lr_t.data), free(step.data), free(coef.data);
}

/* A master held as (bf16 high half, i16 remainder) (store_param_remainders): the pair gives every
 * bit pattern back, its high half is the value rounded to nearest with ties away from zero; and
 * AdamW on the pair computes what AdamW on the fp32 master does, bit for bit, for 3 steps. */
static void test_master_remainders(void)
{
    int64_t bad_join = 0, bad_round = 0;
    for (uint64_t u = 0; u <= 0xffffffffu; u += 0x10001) { /* 65536 patterns: every high half, the low ones varied */
        uint32_t bits[3] = {(uint32_t)u, ((uint32_t)u & 0xffff0000u) | 0x8000u, ((uint32_t)u & 0xffff0000u) | 0x7fffu};
        for (int k = 0; k < 3; k++) {
            float x, y;
            memcpy(&x, &bits[k], sizeof x);
            uint16_t hi;
            int16_t rem;
            rt_master_split(x, &hi, &rem);
            y = rt_master_join(hi, rem);
            bad_join += memcmp(&x, &y, sizeof x) != 0;
            uint32_t want = (bits[k] >> 16) + ((bits[k] & 0xffffu) >= 0x8000u); /* ties away from zero */
            bad_round += isfinite(x) && hi != (uint16_t)want;
        }
    }
    printf("master remainders: %lld joins differ, %lld high halves misrounded\n", (long long)bad_join, (long long)bad_round);
    CHECK(bad_join == 0 && bad_round == 0, "rt_master_split/join: %lld patterns not given back, %lld misrounded",
          (long long)bad_join, (long long)bad_round);

    enum { N = 1000 };
    const double b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
    tensor p = uniform(F32(N), 1), g = F32(N), m = F32(N), v = F32(N), m2 = F32(N), v2 = F32(N);
    tensor hi = tensor_new(IR_BF16, 1, (int64_t[]){N}), rem = tensor_new(IR_I16, 1, (int64_t[]){N});
    tensor lr_t = SCALAR(), step = SCALAR(), coef = SCALAR();
    for (int i = 0; i < N; i++)
        rt_master_split(F(p)[i], &((uint16_t *)hi.data)[i], &((int16_t *)rem.data)[i]);
    F(lr_t)[0] = 1e-2f;
    int64_t differ = 0;
    for (int s = 1; s <= 3; s++) {
        uniform(g, 1);
        F(step)[0] = (float)s, F(coef)[0] = s == 2 ? 0.5f : 1.0f;
        run(IR_OP_ADAMW, ATTRS(b1, b2, eps, wd), (tensor[]){p, g, m, v, lr_t, step, coef}, 7, NULL, 0);
        run(IR_OP_ADAMW, ATTRS(b1, b2, eps, wd), (tensor[]){rem, g, m2, v2, lr_t, step, coef, hi}, 8, NULL, 0);
        for (int i = 0; i < N; i++) {
            float joined = rt_master_join(((uint16_t *)hi.data)[i], ((int16_t *)rem.data)[i]);
            differ += memcmp(&joined, &F(p)[i], sizeof joined) != 0 || F(m)[i] != F(m2)[i] || F(v)[i] != F(v2)[i];
        }
    }
    printf("adamw on (copy, remainder) against the fp32 master, 3 steps: %lld elements differ\n", (long long)differ);
    CHECK(differ == 0, "adamw on the pair differs from adamw on the fp32 master in %lld element-steps", (long long)differ);
    free(p.data), free(g.data), free(m.data), free(v.data), free(m2.data), free(v2.data), free(hi.data), free(rem.data);
    free(lr_t.data), free(step.data), free(coef.data);
}

/* Every ta/tb combination of r[M,N] = op(a) op(b) against a naive triple loop. */
static void test_matmul_reference(void)
{
    enum { M = 3, K = 4, N = 5 };
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            tensor a = uniform(ta ? F32(K, M) : F32(M, K), 1), b = uniform(tb ? F32(N, K) : F32(K, N), 1);
            tensor r = F32(M, N);
            double ref[M * N];
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) {
                    ref[i * N + j] = 0;
                    for (int kk = 0; kk < K; kk++)
                        ref[i * N + j] +=
                            (double)F(a)[ta ? kk * M + i : i * K + kk] * F(b)[tb ? j * K + kk : kk * N + j];
                }
            run(IR_OP_MATMUL, ATTRS(ta, tb), (tensor[]){a, b}, 2, &r, 1);
            double err = max_abs_diff(F(r), ref, M * N);
            CHECK(err < 1e-5, "matmul ta=%d tb=%d differs from the naive product by %.3g", ta, tb, err);
            free(a.data), free(b.data), free(r.data);
        }
}

/* x [256, 256], each row's magnitude its own (2^-12 .. 2^3) and one 128x128 block zero, quantized
 * (transposed: x^T) in rows x cols blocks: each block's scale_inv, where ir_fp8_scale_blocks puts it
 * (cuBLASLt's layouts), is 1 / 2^floor(log2(448 / amax)) (1 for the zero block), its largest |q|
 * lands in [224, 448] (a little over 224 rounds to it), and every q is x * scale to half an E4M3
 * step; the padding of a row of scales is 1. */
static tensor fp8_block_case(tensor x, int rows, int cols, bool transpose, tensor *s)
{
    enum { R = 256, C = 256 };
    tensor q = tensor_new(IR_FP8E4M3, 2, (int64_t[]){R, C});
    ir_type st = ir_fp8_block_scale_type(R, C, rows, cols);
    *s = tensor_new(IR_F32, 2, st.dims);
    run(IR_OP_FP8_BLOCK_QUANTIZE, (double[IR_MAX_ATTRS]){rows, cols, transpose}, &x, 1, (tensor[]){q, *s}, 2);
    const uint8_t *qb = q.data;
    for (int br = 0; br < R / rows; br++)
        for (int bc = 0; bc < C / cols; bc++) {
            double amax = 0, qmax = 0, worst = 0;
            for (int i = br * rows; i < (br + 1) * rows; i++)
                for (int j = bc * cols; j < (bc + 1) * cols; j++)
                    amax = fmax(amax, fabs(F(x)[transpose ? j * C + i : i * C + j]));
            double scale = amax > 0 ? exp2(floor(log2(448.0 / amax))) : 1;
            for (int i = br * rows; i < (br + 1) * rows; i++)
                for (int j = bc * cols; j < (bc + 1) * cols; j++) {
                    double d = rt_fp8_decode(qb[i * C + j], false), want = F(x)[transpose ? j * C + i : i * C + j] * scale;
                    qmax = fmax(qmax, fabs(d));
                    worst = fmax(worst, fabs(d - want) / fmax(fabs(want), 0x1p-6)); /* E4M3's smallest normal */
                }
            float sinv = F(*s)[ir_fp8_scale_at(R, C, rows, cols, br * rows, bc * cols)];
            CHECK(sinv == (float)(1 / scale), "fp8_block_quantize %dx%d%s block (%d,%d): scale_inv %g, want %g", rows,
                  cols, transpose ? "^T" : "", br, bc, sinv, 1 / scale);
            CHECK(amax == 0 || (qmax >= 224 && qmax <= 448), "fp8_block_quantize %dx%d block (%d,%d): largest |q| %g",
                  rows, cols, br, bc, qmax);
            CHECK(worst <= 0x1p-4, "fp8_block_quantize %dx%d block (%d,%d): q off x * scale by %g of it", rows, cols,
                  br, bc, worst);
        }
    for (int64_t k = 0, used = rows == 1 ? R : C / cols; k < st.dims[0] * st.dims[1]; k++) /* each row's padding */
        CHECK(k % st.dims[1] < used || F(*s)[k] == 1, "fp8_block_quantize %dx%d: padding scale %lld is %g, not 1", rows,
              cols, (long long)k, F(*s)[k]);
    return q;
}

/* x dequantized from its blocks (q * its block's scale_inv), in double */
static void fp8_block_dequantized(tensor q, tensor s, double *out)
{
    int64_t R = q.type.dims[0], C = q.type.dims[1], rows, cols;
    CHECK(ir_fp8_scale_blocks(&q.type, &s.type, &rows, &cols), "fp8_block_quantize's scale_inv is no block layout");
    for (int64_t i = 0; i < R * C; i++)
        out[i] = rt_fp8_decode(((uint8_t *)q.data)[i], false) * (double)F(s)[ir_fp8_scale_at(R, C, rows, cols, i / C, i % C)];
}

/* the quantize's blocks (above), and fp8_matmul on block scales against the product of the
 * dequantized operands, both K-major (ta=0, tb=1) as the fp8 pass makes them: the forward's (x
 * 1x128 by w 128x128) and the wgrad's (x^T by x^T, both 1x128 along the tokens) */
static void test_fp8_block_reference(void)
{
    enum { R = 256, C = 256 };
    tensor x = F32(R, C);
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++)
            F(x)[i * C + j] = i < 128 && j >= 128 ? 0 : (float)((urand() * 2 - 1) * ldexp(1, i % 16 - 12));
    tensor s[4], q[4];
    int shapes[4][3] = {{1, 128, 0}, {1, 128, 1}, {128, 128, 0}, {128, 128, 1}};
    for (int k = 0; k < 4; k++)
        q[k] = fp8_block_case(x, shapes[k][0], shapes[k][1], shapes[k][2], &s[k]);
    double *a = malloc(sizeof(double) * R * C), *b = malloc(sizeof(double) * R * C);
    int pairs[2][2] = {{0, 2}, {1, 1}};
    for (int p = 0; p < 2; p++) {
        tensor qa = q[pairs[p][0]], sa = s[pairs[p][0]], qb = q[pairs[p][1]], sb = s[pairs[p][1]], r = F32(R, C);
        fp8_block_dequantized(qa, sa, a);
        fp8_block_dequantized(qb, sb, b);
        run(IR_OP_FP8_MATMUL, ATTRS(0, 1), (tensor[]){qa, sa, qb, sb}, 4, &r, 1);
        double worst = 0;
        for (int i = 0; i < R; i++)
            for (int j = 0; j < C; j++) {
                double want = 0, norm = 0;
                for (int kk = 0; kk < C; kk++) {
                    double prod = a[i * C + kk] * b[j * C + kk];
                    want += prod, norm += fabs(prod);
                }
                worst = fmax(worst, fabs(F(r)[i * C + j] - want) / fmax(norm, 1e-30));
            }
        CHECK(worst < 1e-5, "fp8_matmul on block scales (%s): off the dequantized product by %.3g",
              p ? "wgrad x^T x^T^T" : "forward x w^T", worst);
        free(r.data);
    }
    for (int k = 0; k < 4; k++)
        free(q[k].data), free(s[k].data);
    free(a), free(b), free(x.data);
}

/* FP8 experts (ops.def's fp8_grouped_*), against per-expert definitions: x [24, 32] whose rows go to
 * 4 experts by counts {5, 0, 11, 4} (the last 4 rows NaN: the receive room, never read), each
 * expert's rows and weight at its own magnitude (2^-10 to 2^3), so one scale for all would leave the
 * small experts among E4M3's subnormals. Each expert's amax and scale_inv are its own (448 / amax),
 * its largest |q| in [224, 448], each q within E4M3's rounding of x * scale; the grouped GEMM and
 * wgrad equal the products of the dequantized operands, expert by expert, zero past the counts and
 * for the expert without rows. */
static void test_fp8_grouped_reference(void)
{
    enum { R = 24, K = 32, E = 4, N = 16 };
    int32_t counts[E] = {5, 0, 11, 4};
    int expert_of[R], first[E + 1] = {0};
    for (int e = 0; e < E; e++)
        first[e + 1] = first[e] + counts[e];
    for (int r = 0; r < R; r++) {
        expert_of[r] = -1;
        for (int e = 0; e < E; e++)
            expert_of[r] = r >= first[e] && r < first[e + 1] ? e : expert_of[r];
    }
    tensor x = F32(R, K), w = F32(E, N, K), c = I32(E);
    memcpy(c.data, counts, sizeof counts);
    for (int r = 0; r < R; r++)
        for (int k = 0; k < K; k++)
            F(x)[r * K + k] = expert_of[r] < 0 ? NAN : (float)(urand() * ldexp(1, 3 * expert_of[r] - 10));
    for (int i = 0; i < E * N * K; i++)
        F(w)[i] = (float)(urand() * ldexp(1, 2 - 3 * (i / (N * K))));
    tensor operands[2] = {x, w}, q[2], sinv[2];
    for (int o = 0; o < 2; o++) { /* o 0: x's rows by the counts; 1: w by its leading index */
        tensor amax = F32(E);
        run(IR_OP_FP8_GROUPED_AMAX, NULL, (tensor[]){operands[o], c}, o ? 1 : 2, &amax, 1);
        q[o] = tensor_new(IR_FP8E4M3, operands[o].type.ndim, operands[o].type.dims), sinv[o] = F32(E);
        run(IR_OP_FP8_GROUPED_QUANTIZE, ATTRS(IR_FP8_E4M3, 0), (tensor[]){operands[o], amax, c}, o ? 2 : 3,
            (tensor[]){q[o], sinv[o]}, 2);
        int64_t per = o ? N * K : K;
        for (int e = 0; e < E; e++) {
            int64_t lo = o ? e * per : first[e] * per, hi = o ? (e + 1) * per : first[e + 1] * per;
            float want = 0, qmax = 0;
            for (int64_t i = lo; i < hi; i++)
                want = fmaxf(want, fabsf(F(operands[o])[i]));
            double scale = want > 0 ? 448.0f / want : 1, worst = 0;
            for (int64_t i = lo; i < hi; i++) {
                double d = rt_fp8_decode(((uint8_t *)q[o].data)[i], false), v = F(operands[o])[i] * scale;
                qmax = fmaxf(qmax, (float)fabs(d));
                worst = fmax(worst, fabs(d - v) / fmax(fabs(v), 0x1p-6));
            }
            CHECK(F(amax)[e] == want, "fp8_grouped_amax %s expert %d: %g, want %g", o ? "w" : "x", e, F(amax)[e], want);
            CHECK(F(sinv[o])[e] == (float)(1 / (float)scale), "fp8_grouped_quantize %s expert %d: scale_inv %g, want %g",
                  o ? "w" : "x", e, F(sinv[o])[e], 1 / scale);
            CHECK(hi == lo || (qmax >= 224 && qmax <= 448), "fp8_grouped_quantize %s expert %d: largest |q| %g",
                  o ? "w" : "x", e, qmax);
            CHECK(worst <= 0x1p-4, "fp8_grouped_quantize %s expert %d: q off x * scale by %g", o ? "w" : "x", e, worst);
        }
        free(amax.data);
    }
    for (int64_t i = first[E] * K; i < R * K; i++)
        CHECK(((uint8_t *)q[0].data)[i] == 0, "fp8_grouped_quantize: q past the counts' rows is %d, not 0",
              ((uint8_t *)q[0].data)[i]);
    /* y = x_e w_e^T (tb) and dw_e = x_e^T x_e on the dequantized operands */
    tensor y = F32(R, N), dw = F32(E, K, K);
    run(IR_OP_FP8_GROUPED_MATMUL, ATTRS(1, 0, 0), (tensor[]){q[0], sinv[0], q[1], sinv[1], c}, 5, &y, 1);
    run(IR_OP_FP8_GROUPED_WGRAD, NULL, (tensor[]){q[0], sinv[0], q[0], sinv[0], c}, 5, &dw, 1);
    double worst_y = 0, worst_dw = 0;
    for (int r = 0; r < R; r++)
        for (int n = 0; n < N; n++) {
            int e = expert_of[r];
            double want = 0, norm = 0;
            for (int k = 0; e >= 0 && k < K; k++) {
                double a = rt_fp8_decode(((uint8_t *)q[0].data)[r * K + k], false) * F(sinv[0])[e];
                double b = rt_fp8_decode(((uint8_t *)q[1].data)[(e * N + n) * K + k], false) * F(sinv[1])[e];
                want += a * b, norm += fabs(a * b);
            }
            worst_y = fmax(worst_y, e < 0 ? fabs(F(y)[r * N + n]) : fabs(F(y)[r * N + n] - want) / fmax(norm, 1e-30));
        }
    for (int e = 0; e < E; e++)
        for (int i = 0; i < K; i++)
            for (int j = 0; j < K; j++) {
                double want = 0, norm = 0;
                for (int r = first[e]; r < first[e + 1]; r++) {
                    double a = rt_fp8_decode(((uint8_t *)q[0].data)[r * K + i], false) * F(sinv[0])[e];
                    double b = rt_fp8_decode(((uint8_t *)q[0].data)[r * K + j], false) * F(sinv[0])[e];
                    want += a * b, norm += fabs(a * b);
                }
                double got = F(dw)[(e * K + i) * K + j];
                worst_dw = fmax(worst_dw, norm > 0 ? fabs(got - want) / norm : fabs(got));
            }
    CHECK(worst_y < 1e-5, "fp8_grouped_matmul: off the experts' dequantized products by %.3g", worst_y);
    CHECK(worst_dw < 1e-5, "fp8_grouped_wgrad: off the experts' dequantized products by %.3g", worst_dw);
    for (int o = 0; o < 2; o++)
        free(q[o].data), free(sinv[o].data);
    free(x.data), free(w.data), free(c.data), free(y.data), free(dw.data);
}

/* Element i of block-scaled q (any shape, viewed as [numel / C, C]) dequantized, in double */
static double fp8_block_value(tensor q, tensor s, int64_t i)
{
    int64_t C = q.type.dims[q.type.ndim - 1], R = numel(q) / C, rows, cols;
    CHECK(ir_fp8_scale_blocks(&q.type, &s.type, &rows, &cols), "fp8_block_quantize's scale_inv is no block layout");
    return rt_fp8_decode(((uint8_t *)q.data)[i], false) * (double)F(s)[ir_fp8_scale_at(R, C, rows, cols, i / C, i % C)];
}

/* The blockwise FP8 experts' operands (ops.def's fp8_block_quantize with counts or experts=1, and
 * fp8_grouped_matmul and fp8_grouped_wgrad on block scales): x [300, 256] (each row at its own
 * magnitude, 2^-12 to 2^3, so that where a tile starts decides its scale) whose rows go to 3 experts
 * by counts {150, 0, 130} (the last 20 rows NaN: the receive room), an expert weight w [3, 128, 256]
 * and an output gradient dy [300, 128]. With the counts, x transposed is [256, R'] with each
 * expert's rows in a span of its own from a multiple of 128 (expert 0's columns [0, 150), expert
 * 2's [256, 386)), its tiles from its first row (the second partial), each scale 2^floor(log2(448 /
 * the tile's amax)) and the columns past an expert's rows zero with scale_inv 1 past the last;
 * experts=1 transposes each w[e] with its blocks and scales as they were. The forward, the dgrad
 * (dy by the transposed weights) and the wgrad (dy^T x over each expert's rows) equal the products
 * of the dequantized operands, expert by expert, zero past the counts and for the expert without
 * rows. */
static void test_fp8_block_experts_reference(void)
{
    enum { R = 300, K = 256, E = 3, N = 128 };
    int32_t counts[E] = {150, 0, 130};
    int first[E + 1] = {0}, span[E] = {0, 256, 256}, expert_of[R];
    for (int e = 0; e < E; e++)
        first[e + 1] = first[e] + counts[e];
    for (int r = 0; r < R; r++)
        for (int e = 0, *x = &expert_of[r]; e <= E; e++)
            *x = e == 0 ? -1 : r >= first[e - 1] && r < first[e] ? e - 1 : *x;
    tensor x = F32(R, K), w = F32(E, N, K), dy = F32(R, N), c = I32(E);
    memcpy(c.data, counts, sizeof counts);
    for (int r = 0; r < R; r++) {
        for (int k = 0; k < K; k++)
            F(x)[r * K + k] = expert_of[r] < 0 ? NAN : (float)((urand() * 2 - 1) * ldexp(1, r % 16 - 12));
        for (int n = 0; n < N; n++)
            F(dy)[r * N + n] = expert_of[r] < 0 ? NAN : (float)((urand() * 2 - 1) * ldexp(1, (r * 7) % 16 - 12));
    }
    for (int i = 0; i < E * N * K; i++)
        F(w)[i] = (float)((urand() * 2 - 1) * ldexp(1, 2 - 3 * (i / (N * K))));
    int64_t RP = ir_fp8_expert_rows(R, E); /* 768 */
    CHECK(RP == 768, "ir_fp8_expert_rows(300, 3): %lld columns, want 768 (300 + 127 x 3 rounded up to 128)",
          (long long)RP);
    tensor qx = tensor_new(IR_FP8E4M3, 2, (int64_t[]){R, K}), sx = F32(K / 128, R);
    tensor qdy = tensor_new(IR_FP8E4M3, 2, (int64_t[]){R, N}), sdy = F32(N / 128, R);
    tensor qw = tensor_new(IR_FP8E4M3, 3, (int64_t[]){E, N, K}), sw = F32(E * N / 128, 4);
    tensor qwt = tensor_new(IR_FP8E4M3, 3, (int64_t[]){E, K, N}), swt = F32(E * K / 128, 4);
    tensor qxt = tensor_new(IR_FP8E4M3, 2, (int64_t[]){K, RP}), sxt = F32(RP / 128, K);
    tensor qdyt = tensor_new(IR_FP8E4M3, 2, (int64_t[]){N, RP}), sdyt = F32(RP / 128, N);
    run(IR_OP_FP8_BLOCK_QUANTIZE, ATTRS(1, 128, 0), &x, 1, (tensor[]){qx, sx}, 2);
    run(IR_OP_FP8_BLOCK_QUANTIZE, ATTRS(1, 128, 0), &dy, 1, (tensor[]){qdy, sdy}, 2);
    run(IR_OP_FP8_BLOCK_QUANTIZE, ATTRS(128, 128, 0), &w, 1, (tensor[]){qw, sw}, 2);
    run(IR_OP_FP8_BLOCK_QUANTIZE, ATTRS(128, 128, 1, 1), &w, 1, (tensor[]){qwt, swt}, 2);
    run(IR_OP_FP8_BLOCK_QUANTIZE, ATTRS(1, 128, 1), (tensor[]){x, c}, 2, (tensor[]){qxt, sxt}, 2);
    run(IR_OP_FP8_BLOCK_QUANTIZE, ATTRS(1, 128, 1), (tensor[]){dy, c}, 2, (tensor[]){qdyt, sdyt}, 2);
    for (int e = 0; e < E; e++) /* experts=1: w[e]^T, its blocks' values and scales those of w[e] */
        for (int n = 0; n < N; n++)
            for (int k = 0; k < K; k++)
                CHECK(fp8_block_value(qwt, swt, (e * K + k) * N + n) == fp8_block_value(qw, sw, (e * N + n) * K + k),
                      "fp8_block_quantize {experts=1}: w[%d]^T (%d, %d) is not w[%d]'s (%d, %d)", e, k, n, e, n, k);
    tensor operands[2] = {x, dy}, qt[2] = {qxt, qdyt}, st[2] = {sxt, sdyt};
    for (int o = 0; o < 2; o++) { /* the counts' transposed rows: each expert's tiles from its first row */
        int64_t C = operands[o].type.dims[1];
        for (int64_t i = 0; i < C; i++)
            for (int64_t col = 0; col < RP; col++) {
                int e = col < 256 ? 0 : col < 512 ? 2 : -1;
                int64_t row = e < 0 ? -1 : first[e] + (col - span[e]), tile = (col - (e < 0 ? 0 : span[e])) / 128;
                uint8_t got = ((uint8_t *)qt[o].data)[i * RP + col];
                float sinv = F(st[o])[col / 128 * C + i];
                if (e < 0 || row >= first[e + 1]) { /* past an expert's rows: zero, and 1 past the last's tiles */
                    CHECK(got == 0, "fp8_block_quantize with counts: q (%lld, %lld) past the rows is %d, not 0",
                          (long long)i, (long long)col, got);
                    CHECK(e >= 0 || sinv == 1, "fp8_block_quantize with counts: scale_inv of unused tile %lld is %g",
                          (long long)(col / 128), sinv);
                    continue;
                }
                double amax = 0;
                for (int64_t r = first[e] + tile * 128; r < first[e] + tile * 128 + 128 && r < first[e + 1]; r++)
                    amax = fmax(amax, fabs(F(operands[o])[r * C + i]));
                double scale = exp2(floor(log2(448.0 / amax))), want = F(operands[o])[row * C + i] * scale;
                double d = rt_fp8_decode(got, false);
                CHECK(sinv == (float)(1 / scale), "fp8_block_quantize with counts: %s^T (%lld, %lld), expert %d's tile "
                      "%lld: scale_inv %g, want %g", o ? "dy" : "x", (long long)i, (long long)col, e, (long long)tile,
                      sinv, 1 / scale);
                CHECK(fabs(d - want) <= 0x1p-4 * fmax(fabs(want), 0x1p-6), "fp8_block_quantize with counts: %s^T "
                      "(%lld, %lld): q %g, want %g", o ? "dy" : "x", (long long)i, (long long)col, d, want);
            }
    }
    /* y = x_e w_e^T, dx = dy_e w_e (w_e^T K-major), dw_e = dy_e^T x_e, each on the dequantized operands */
    tensor y = F32(R, N), dx = F32(R, K), dw = F32(E, N, K);
    run(IR_OP_FP8_GROUPED_MATMUL, ATTRS(1, 0, 0), (tensor[]){qx, sx, qw, sw, c}, 5, &y, 1);
    run(IR_OP_FP8_GROUPED_MATMUL, ATTRS(1, 0, 0), (tensor[]){qdy, sdy, qwt, swt, c}, 5, &dx, 1);
    run(IR_OP_FP8_GROUPED_WGRAD, NULL, (tensor[]){qdyt, sdyt, qxt, sxt, c}, 5, &dw, 1);
    struct { tensor out, a, sa, b, sb; int64_t P, Q, inner; const char *what; } gemms[2] = {
        {y, qx, sx, qw, sw, N, K, K, "fp8_grouped_matmul (forward)"},
        {dx, qdy, sdy, qwt, swt, K, N, N, "fp8_grouped_matmul (dgrad)"}};
    for (int g = 0; g < 2; g++) { /* out[r, j] = sum_k a[r, k] b[e, j, k] */
        double worst = 0;
        for (int r = 0; r < R; r++)
            for (int64_t j = 0; j < gemms[g].P; j++) {
                int e = expert_of[r];
                double want = 0, norm = 0;
                for (int64_t k = 0; e >= 0 && k < gemms[g].inner; k++) {
                    double p = fp8_block_value(gemms[g].a, gemms[g].sa, r * gemms[g].inner + k) *
                               fp8_block_value(gemms[g].b, gemms[g].sb, (e * gemms[g].P + j) * gemms[g].inner + k);
                    want += p, norm += fabs(p);
                }
                double got = F(gemms[g].out)[r * gemms[g].P + j];
                worst = fmax(worst, e < 0 ? fabs(got) : fabs(got - want) / fmax(norm, 1e-30));
            }
        CHECK(worst < 1e-5, "%s on block scales: off the experts' dequantized products by %.3g", gemms[g].what, worst);
    }
    double worst_dw = 0;
    for (int e = 0; e < E; e++)
        for (int n = 0; n < N; n++)
            for (int k = 0; k < K; k++) {
                double want = 0, norm = 0;
                for (int r = first[e]; r < first[e + 1]; r++) {
                    int64_t col = span[e] + (r - first[e]);
                    double p = fp8_block_value(qdyt, sdyt, n * RP + col) * fp8_block_value(qxt, sxt, k * RP + col);
                    want += p, norm += fabs(p);
                }
                double got = F(dw)[(e * N + n) * K + k];
                worst_dw = fmax(worst_dw, norm > 0 ? fabs(got - want) / norm : fabs(got));
            }
    CHECK(worst_dw < 1e-5, "fp8_grouped_wgrad on block scales: off the experts' dequantized products by %.3g", worst_dw);
    tensor all[] = {x, w, dy, c, qx, sx, qdy, sdy, qw, sw, qwt, swt, qxt, sxt, qdyt, sdyt, y, dx, dw};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i].data);
}

/* split_last_dim and concat_last_dim against their definitions: x [2,3,4,5] split after 2 channels,
 * the rest summed over the 4 heads; the parts joined again, the summed one broadcast over them. */
static void test_split_concat_reference(void)
{
    enum { O = 6, H = 4, N = 5, S = 2 };
    tensor x = uniform(F32(2, 3, H, N), 1), a = F32(2, 3, H, S), b = F32(2, 3, 1, N - S), r = F32(2, 3, H, N);
    double ra[O * H * S], rb[O * (N - S)] = {0}, rr[O * H * N];
    for (int o = 0; o < O; o++)
        for (int h = 0; h < H; h++)
            for (int j = 0; j < N; j++) {
                double xv = F(x)[(o * H + h) * N + j];
                if (j < S)
                    ra[(o * H + h) * S + j] = xv;
                else
                    rb[o * (N - S) + j - S] += xv;
            }
    for (int o = 0; o < O; o++)
        for (int h = 0; h < H; h++)
            for (int j = 0; j < N; j++)
                rr[(o * H + h) * N + j] = j < S ? ra[(o * H + h) * S + j] : rb[o * (N - S) + j - S];
    run(IR_OP_SPLIT_LAST_DIM, ATTRS(S, 2), &x, 1, (tensor[]){a, b}, 2);
    double ea = max_abs_diff(F(a), ra, numel(a)), eb = max_abs_diff(F(b), rb, numel(b));
    CHECK(ea == 0 && eb < 1e-6, "split_last_dim differs from its definition by %.3g (first part), %.3g (summed)", ea, eb);
    run(IR_OP_CONCAT_LAST_DIM, NULL, (tensor[]){a, b}, 2, &r, 1);
    double er = max_abs_diff(F(r), rr, numel(r));
    CHECK(er < 1e-6, "concat_last_dim of a one-head operand differs from its definition by %.3g", er);
    free(x.data), free(a.data), free(b.data), free(r.data);
}

/* rope at position t: (x[i], x[i+D/2]) rotated by t * theta^(-2i/D), from the definition, for
 * every batch row and head of x[B,T,H,D]. */
static void test_rope_reference(void)
{
    enum { B = 2, T = 6, H = 3, D = 8 };
    tensor x = uniform(F32(B, T, H, D), 1), y = like(x);
    double ref[B * T * H * D];
    for (int row = 0; row < B * T * H; row++)
        for (int i = 0; i < D / 2; i++) {
            int t = row / H % T;
            double a = t * pow(500.0, -2.0 * i / D), x1 = F(x)[row * D + i], x2 = F(x)[row * D + i + D / 2];
            ref[row * D + i] = x1 * cos(a) - x2 * sin(a);
            ref[row * D + i + D / 2] = x2 * cos(a) + x1 * sin(a);
        }
    run(IR_OP_ROPE, ATTRS(500, 0), &x, 1, &y, 1);
    double err = max_abs_diff(F(y), ref, numel(y));
    CHECK(err < 1e-6, "rope differs from the rotate-half definition by %.3g", err);
    free(x.data), free(y.data);
}

/* LLaMA 3.1's rope scaling against transformers' frequencies (table: tests/rope_scaling_ref.py's
 * transcription of _compute_llama3_parameters, one line a case: theta, head_dim, factor, the
 * head_dim / 2 frequencies): ir_rope_freq equals each to 1e-13, and the rope kernel with attribute
 * scaling turns a unit pair at positions up to 8191 by t times it (the angle's cosine and sine to
 * 2e-6, the kernel's float sincos of the reduced angle), where the unscaled frequency turns it
 * visibly otherwise. */
static void test_rope_scaling(const char *table)
{
    FILE *f = fopen(table, "r");
    CHECK(f != NULL, "cannot open the frequency table %s", table);
    if (!f)
        return;
    double theta, factor;
    int D, cases = 0;
    while (fscanf(f, "%lf %d %lf", &theta, &D, &factor) == 3 && D <= 128) {
        double want[64];
        for (int i = 0; i < D / 2; i++)
            CHECK(fscanf(f, "%lf", &want[i]) == 1, "%s: case %d has fewer than %d frequencies", table, cases, D / 2);
        for (int i = 0; i < D / 2; i++) {
            ir_rope_scale scale = ir_rope_scale_of(ATTRS(theta, 0, 0, 0, factor), D);
            double got = ir_rope_freq(&scale, i, D);
            CHECK(fabs(got - want[i]) <= 1e-13 * want[i], "ir_rope_freq(%g, %g, %d, %d) = %.17g, transformers' %.17g",
                  theta, factor, i, D, got, want[i]);
        }
        enum { T = 8192 };
        static const int at[] = {1, 31, 1000, 4095, 8191};
        tensor x = F32(1, T, 1, D), y = like(x);
        for (int64_t t = 0; t < T; t++)
            for (int i = 0; i < D; i++)
                F(x)[t * D + i] = i < D / 2 ? 1.0f : 0.0f; /* every pair (1, 0): turned, (cos a, sin a) */
        run(IR_OP_ROPE, ATTRS(theta, 0, 0, 0, factor), &x, 1, &y, 1);
        double err = 0, apart = 0;
        for (size_t k = 0; k < sizeof at / sizeof at[0]; k++)
            for (int i = 0; i < D / 2; i++) {
                double a = at[k] * want[i], plain = at[k] * pow(theta, -2.0 * i / D);
                const float *row = F(y) + (int64_t)at[k] * D;
                err = fmax(err, fmax(fabs(row[i] - cos(a)), fabs(row[i + D / 2] - sin(a))));
                apart = fmax(apart, fabs(cos(a) - cos(plain)) + fabs(sin(a) - sin(plain)));
            }
        CHECK(err < 2e-6, "rope with scaling %g (theta %g, head_dim %d) differs from transformers' frequencies by %.3g",
              factor, theta, D, err);
        CHECK(apart > 1e-2, "case %d: the scaled and plain rotations are too close (%.3g) to tell apart", cases, apart);
        free(x.data), free(y.data);
        cases++;
    }
    fclose(f);
    CHECK(cases >= 3, "%s: %d cases read", table, cases);
}

/* YaRN's rope against Megatron's YarnRotaryEmbedding (table: tests/rope_scaling_ref.py's
 * transcription, one line a case: theta, rotary dim, factor, original context, beta_fast,
 * beta_slow, mscale, mscale_all_dim, the concentration, the dim / 2 frequencies): ir_rope_freq and
 * ir_rope_scale_of's concentration equal them to 1e-13, and the rope kernel turns a unit pair at
 * positions up to 4095 to concentration (cos, sin) of t times the frequency, its gradient (inverse)
 * scaling back by the same concentration (c R is not orthogonal where c != 1: its transpose is c R^T). */
static void test_rope_yarn(const char *table)
{
    FILE *f = fopen(table, "r");
    CHECK(f != NULL, "cannot open the frequency table %s", table);
    if (!f)
        return;
    double h[9];
    int cases = 0;
    while (fscanf(f, "%lf %lf %lf %lf %lf %lf %lf %lf %lf", &h[0], &h[1], &h[2], &h[3], &h[4], &h[5], &h[6], &h[7],
                  &h[8]) == 9 && h[1] <= 128) {
        int D = (int)h[1];
        double want[64], *attr = ATTRS(h[0], 0, 0, 0, h[2], 0, h[3], h[4], h[5], h[6], h[7]);
        for (int i = 0; i < D / 2; i++)
            CHECK(fscanf(f, "%lf", &want[i]) == 1, "%s: case %d has fewer than %d frequencies", table, cases, D / 2);
        ir_rope_scale scale = ir_rope_scale_of(attr, D);
        CHECK(fabs(scale.concentration - h[8]) <= 1e-13 * h[8], "case %d: concentration %.17g, Megatron's %.17g", cases,
              scale.concentration, h[8]);
        for (int i = 0; i < D / 2; i++)
            CHECK(fabs(ir_rope_freq(&scale, i, D) - want[i]) <= 1e-13 * want[i],
                  "case %d: ir_rope_freq of pair %d = %.17g, Megatron's %.17g", cases, i, ir_rope_freq(&scale, i, D),
                  want[i]);
        enum { T = 4096 };
        static const int at[] = {1, 31, 1000, 4095};
        tensor x = F32(1, T, 1, D), y = like(x), back = like(x);
        for (int64_t t = 0; t < T; t++)
            for (int i = 0; i < D; i++)
                F(x)[t * D + i] = i < D / 2 ? 1.0f : 0.0f;
        run(IR_OP_ROPE, attr, &x, 1, &y, 1);
        attr[IR_ATTR_ROPE_INVERSE] = 1;
        run(IR_OP_ROPE, attr, &y, 1, &back, 1);
        double err = 0, back_err = 0, c = h[8];
        for (size_t k = 0; k < sizeof at / sizeof at[0]; k++)
            for (int i = 0; i < D / 2; i++) {
                double a = at[k] * want[i];
                const float *row = F(y) + (int64_t)at[k] * D, *brow = F(back) + (int64_t)at[k] * D;
                err = fmax(err, fmax(fabs(row[i] - c * cos(a)), fabs(row[i + D / 2] - c * sin(a))));
                back_err = fmax(back_err, fmax(fabs(brow[i] - c * c), fabs(brow[i + D / 2])));
            }
        CHECK(err < 2e-6 * c, "case %d: yarn rope differs from Megatron's by %.3g", cases, err);
        CHECK(back_err < 4e-6 * c * c, "case %d: the inverse of yarn rope is not c^2 times the identity (%.3g)", cases,
              back_err);
        free(x.data), free(y.data), free(back.data);
        cases++;
    }
    fclose(f);
    CHECK(cases >= 3, "%s: %d cases read", table, cases);
}

/* layernorm (biased variance, as torch) and rmsnorm from their definitions, on rows of magnitude
 * 1 and of magnitude 1e-3, whose variance (~3e-7) is far below eps (1e-5): there the result
 * without eps is ~6 times larger, so a kernel that drops eps fails. */
static void test_norm_reference(void)
{
    enum { R = 4, D = 6 };
    tensor x = uniform(F32(R, D), 2), w = uniform(F32(D), 1), b = uniform(F32(D), 1), y = like(x), z = like(x);
    double ln[R * D], rms[R * D];
    for (int i = R / 2 * D; i < R * D; i++)
        F(x)[i] *= 1e-3f;
    for (int i = 0; i < R; i++) {
        double mean = 0, var = 0, ms = 0;
        for (int j = 0; j < D; j++)
            mean += F(x)[i * D + j] / (double)D, ms += (double)F(x)[i * D + j] * F(x)[i * D + j] / D;
        for (int j = 0; j < D; j++)
            var += (F(x)[i * D + j] - mean) * (F(x)[i * D + j] - mean) / D;
        for (int j = 0; j < D; j++) {
            ln[i * D + j] = (F(x)[i * D + j] - mean) / sqrt(var + 1e-5) * F(w)[j] + F(b)[j];
            rms[i * D + j] = F(x)[i * D + j] / sqrt(ms + 1e-5) * F(w)[j];
        }
    }
    run(IR_OP_LAYERNORM, ATTRS(1e-5), (tensor[]){x, w, b}, 3, &y, 1);
    run(IR_OP_RMSNORM, ATTRS(1e-5), (tensor[]){x, w}, 2, &z, 1);
    double e1 = max_abs_diff(F(y), ln, R * D), e2 = max_abs_diff(F(z), rms, R * D);
    CHECK(e1 < 1e-5, "layernorm differs from its definition by %.3g", e1);
    CHECK(e2 < 1e-5, "rmsnorm differs from its definition by %.3g", e2);
    free(x.data), free(w.data), free(b.data), free(y.data), free(z.data);
}

/* gelu at a few points against torch.nn.functional.gelu(x, approximate="tanh"). */
static void test_gelu_reference(void)
{
    tensor x = F32(4), y = F32(4);
    const double want[4] = {-0.0454023059, 0.0, 0.8411919906, 2.9963626079};
    memcpy(x.data, (float[]){-2, 0, 1, 3}, sizeof(float[4]));
    run(IR_OP_GELU, NULL, &x, 1, &y, 1);
    double err = max_abs_diff(F(y), want, 4);
    CHECK(err < 1e-6, "gelu differs from torch's tanh approximation by %.3g", err);
    free(x.data), free(y.data);
}

/* The grad-norm path: sum_squares over several tensors, sqrt, clip_coef; and accumulate/zero. */
static void test_grad_norm_and_state(void)
{
    tensor xs[3] = {uniform(F32(3, 4), 1), uniform(F32(5), 1), uniform(F32(2, 2, 2), 1)};
    tensor ss = SCALAR(), norm = SCALAR(), coef = SCALAR(), dst = uniform(F32(5), 1);
    double ref = 0;
    for (int t = 0; t < 3; t++)
        for (int64_t i = 0; i < numel(xs[t]); i++)
            ref += (double)F(xs[t])[i] * F(xs[t])[i];
    run(IR_OP_SUM_SQUARES, NULL, xs, 3, &ss, 1);
    CHECK(fabs(F(ss)[0] - ref) < 1e-5 * ref, "sum_squares over 3 tensors %.8g, want %.8g", F(ss)[0], ref);
    run(IR_OP_SQRT, NULL, &ss, 1, &norm, 1);
    CHECK(fabs(F(norm)[0] - sqrt(ref)) < 1e-5, "sqrt %.8g, want %.8g", F(norm)[0], sqrt(ref));
    const double max_norms[3] = {0.5, 0, 1e3}, want[3] = {0.5 / (sqrt(ref) + 1e-6), 1, 1};
    for (int i = 0; i < 3; i++) {
        run(IR_OP_CLIP_COEF, ATTRS(max_norms[i]), &ss, 1, &coef, 1);
        CHECK(fabs(F(coef)[0] - want[i]) < 1e-6, "clip_coef max_norm=%g: %.8g, want %.8g", max_norms[i], F(coef)[0],
              want[i]);
    }
    run(IR_OP_ZERO, NULL, &dst, 1, NULL, 0);
    run(IR_OP_ACCUMULATE, NULL, (tensor[]){dst, xs[1]}, 2, NULL, 0);
    run(IR_OP_ACCUMULATE, NULL, (tensor[]){dst, xs[1]}, 2, NULL, 0);
    for (int i = 0; i < 5; i++)
        CHECK(F(dst)[i] == 2 * F(xs[1])[i], "zero then accumulate twice gave %g, want %g", F(dst)[i], 2 * F(xs[1])[i]);
    for (int t = 0; t < 3; t++)
        free(xs[t].data);
    free(ss.data), free(norm.data), free(coef.data), free(dst.data);
}

/* --- Philox and dropout ------------------------------------------------------------------------ */

/* Philox4x32-10 against Random123's known answers (tests/kat_vectors of
 * github.com/DEShawResearch/random123, the three "philox4x32 10" lines: counter, key, result). */
static void test_philox_known_answers(void)
{
    static const struct {
        unsigned int ctr[4], key[2], want[4];
    } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (int i = 0; i < 3; i++) {
        mcc_philox4x32 c = {{kat[i].ctr[0], kat[i].ctr[1], kat[i].ctr[2], kat[i].ctr[3]}};
        mcc_philox4x32 r = mcc_philox4x32_10(c, kat[i].key[0], kat[i].key[1]);
        CHECK(!memcmp(r.v, kat[i].want, sizeof r.v), "philox4x32-10 known answer %d: got %08x %08x %08x %08x", i, r.v[0],
              r.v[1], r.v[2], r.v[3]);
        printf("philox4x32-10 known answer %d: %08x %08x %08x %08x\n", i, r.v[0], r.v[1], r.v[2], r.v[3]);
    }
}

/* keep iff w >= threshold must mean keep iff w / 2^32 >= p: threshold is the least such w. */
static void test_dropout_threshold(void)
{
    const double ps[] = {0, 1e-12, 0.1, 0.25, 0.5, 1.0 / 3, 0.9, 0.999999999};
    for (int i = 0; i < 8; i++) {
        double t = mcc_dropout_threshold(ps[i]);
        CHECK(t / 4294967296.0 >= ps[i] && (t == 0 || (t - 1) / 4294967296.0 < ps[i]),
              "dropout threshold of p %.12g is %.0f, not ceil(p 2^32)", ps[i], t);
    }
}

/* y = dropout(x) for x[...] given as a tensor, attributes (p, seed, site, dim, offset, extent). */
static tensor dropout_of(tensor x, const double attr[IR_MAX_ATTRS], int64_t sample)
{
    tensor first = first_sample(sample), y = like(x);
    run(IR_OP_DROPOUT, attr, (tensor[]){x, first}, 2, &y, 1);
    free(first.data);
    return y;
}

/* Over 1e6 elements the kept fraction is within 5 sigma of 1-p, and the output's mean within 5
 * sigma of the input's (y = x z, E z = 1, Var z = p/(1-p)); kept elements are exactly x/(1-p). */
static void test_dropout_statistics(void)
{
    const double ps[] = {0.1, 0.5, 0.9};
    tensor x = F32(10, 100, 1000);
    int64_t n = numel(x);
    double mean_x = 0, mean_x2 = 0;
    for (int64_t i = 0; i < n; i++) {
        F(x)[i] = (float)(1 + 0.5 * urand());
        mean_x += F(x)[i] / (double)n, mean_x2 += (double)F(x)[i] * F(x)[i] / (double)n;
    }
    for (int k = 0; k < 3; k++) {
        double p = ps[k];
        tensor y = dropout_of(x, ATTRS(p, 1234, 3, 1, 0, 100), 5000);
        float scale = (float)(1 / (1 - p));
        int64_t kept = 0, exact = 0;
        double mean_y = 0;
        for (int64_t i = 0; i < n; i++) {
            kept += F(y)[i] != 0;
            exact += F(y)[i] == 0 || F(y)[i] == F(x)[i] * scale;
            mean_y += F(y)[i] / (double)n;
        }
        double frac = (double)kept / n, sd_frac = sqrt(p * (1 - p) / n), sd_mean = sqrt(mean_x2 * p / (1 - p) / n);
        printf("dropout p %.1f over %lld: kept %.5f (want %.1f +- %.1e), mean %.5f vs %.5f (+- %.1e)\n", p,
               (long long)n, frac, 1 - p, 5 * sd_frac, mean_y, mean_x, 5 * sd_mean);
        CHECK(fabs(frac - (1 - p)) < 5 * sd_frac, "dropout p %g keeps %.6f of the elements", p, frac);
        CHECK(fabs(mean_y - mean_x) < 5 * sd_mean, "dropout p %g: mean %.6f, input mean %.6f", p, mean_y, mean_x);
        CHECK(exact == n, "dropout p %g: %lld elements neither 0 nor x / (1-p)", p, (long long)(n - exact));
        free(y.data);
    }
    free(x.data);
}

/* The fraction of elements on which two dropouts of x (all ones) agree about keeping. */
static double mask_agreement(tensor a, tensor b)
{
    int64_t same = 0;
    for (int64_t i = 0; i < numel(a); i++)
        same += (F(a)[i] != 0) == (F(b)[i] != 0);
    return (double)same / numel(a);
}

/* Another seed, site or sample draws another mask: two independent masks of p agree on
 * p^2 + (1-p)^2 of the elements (within 5 sigma); the same key and sample agree on all. */
static void test_dropout_keys(void)
{
    const double p = 0.5, want = p * p + (1 - p) * (1 - p);
    tensor x = F32(4, 250, 1000);
    for (int64_t i = 0; i < numel(x); i++)
        F(x)[i] = 1;
    double sd = sqrt(want * (1 - want) / numel(x));
    tensor base = dropout_of(x, ATTRS(p, 1234, 3, 1, 0, 250), 5000), again = dropout_of(x, ATTRS(p, 1234, 3, 1, 0, 250), 5000);
    tensor other[3] = {dropout_of(x, ATTRS(p, 1235, 3, 1, 0, 250), 5000), dropout_of(x, ATTRS(p, 1234, 4, 1, 0, 250), 5000),
                       dropout_of(x, ATTRS(p, 1234, 3, 1, 0, 250), 5001)};
    const char *what[3] = {"seed", "site", "first sample"};
    CHECK(mask_agreement(base, again) == 1, "the same key and sample drew another mask");
    for (int i = 0; i < 3; i++) {
        double agree = mask_agreement(base, other[i]);
        printf("dropout: another %s agrees on %.5f of the mask (independent: %.2f +- %.1e)\n", what[i], agree, want, 5 * sd);
        CHECK(fabs(agree - want) < 5 * sd, "another %s gives a mask agreeing on %.6f, not ~%.2f", what[i], agree, want);
        free(other[i].data);
    }
    /* consecutive samples: row b of a batch is sample first + b */
    tensor shifted = dropout_of(x, ATTRS(p, 1234, 3, 1, 0, 250), 5001);
    int64_t row = numel(x) / 4;
    CHECK(!memcmp(F(shifted), F(base) + row, sizeof(float) * (size_t)(3 * row)), "row b + 1 of sample s is not row b of s + 1");
    free(shifted.data), free(base.data), free(again.data), free(x.data);
}

/* t[dim] restricted to [start, start + len), as a new tensor. */
static tensor slice(tensor t, int dim, int64_t start, int64_t len)
{
    ir_type st = t.type;
    st.dims[dim] = len;
    tensor r = tensor_new(st.dtype, st.ndim, st.dims);
    int64_t inner = ir_dtype_size(st.dtype), outer = 1;
    for (int i = dim + 1; i < st.ndim; i++)
        inner *= st.dims[i];
    for (int i = 0; i < dim; i++)
        outer *= st.dims[i];
    for (int64_t o = 0; o < outer; o++)
        memcpy((char *)r.data + o * len * inner, (char *)t.data + (o * t.type.dims[dim] + start) * inner,
               (size_t)(len * inner));
    return r;
}

/* Whether a equals b's block [start, start + len) of dimension dim bit for bit. */
static bool equals_slice(tensor a, tensor b, int dim, int64_t start)
{
    tensor s = slice(b, dim, start, a.type.dims[dim]);
    bool same = !memcmp(a.data, s.data, ir_bytes(&a.type));
    free(s.data);
    return same;
}

/* The mask follows an element's place in the whole tensor and its sample, not how the tensor is
 * split: dropout of x[4,6,8] equals, bit for bit, that of its sequence halves (dim 1, offsets 0
 * and 3 of 6: sequence parallelism), of its column halves (dim 2, offsets 0 and 4 of 8: a
 * tensor-parallel split), and of its last two rows as a batch of their own (first_sample + 2:
 * data parallelism, micro-batches). */
static void test_dropout_layouts(void)
{
    tensor x = uniform(F32(4, 6, 8), 1);
    const int64_t s = 1ll << 33;
    tensor whole = dropout_of(x, ATTRS(0.4, 7, 9, 1, 0, 6), s);
    for (int dim = 1; dim <= 2; dim++)
        for (int half = 0; half < 2; half++) {
            int64_t len = x.type.dims[dim] / 2;
            tensor part = slice(x, dim, half * len, len);
            tensor y = dropout_of(part, ATTRS(0.4, 7, 9, dim, half * len, 2 * len), s);
            CHECK(equals_slice(y, whole, dim, half * len), "dropout of the %s half of dimension %d differs from the whole's",
                  half ? "second" : "first", dim);
            free(part.data), free(y.data);
        }
    tensor rows = slice(x, 0, 2, 2), y = dropout_of(rows, ATTRS(0.4, 7, 9, 1, 0, 6), s + 2);
    CHECK(equals_slice(y, whole, 0, 2), "dropout of rows 2, 3 as samples s + 2, s + 3 differs from the whole's");
    /* context parallelism over 3 ranks: rank 1 holds chunks 1 and 4 of 6 (positions 1 and 4) */
    tensor lo = slice(x, 1, 1, 1), hi = slice(x, 1, 4, 1), both = F32(4, 2, 8);
    for (int64_t b = 0; b < 4; b++)
        memcpy(F(both) + b * 16, F(lo) + b * 8, 32), memcpy(F(both) + b * 16 + 8, F(hi) + b * 8, 32);
    tensor yc = dropout_of(both, ATTRS(0.4, 7, 9, 1, 0, 2, 3, 1), s), ylo = slice(yc, 1, 0, 1), yhi = slice(yc, 1, 1, 1);
    CHECK(equals_slice(ylo, whole, 1, 1) && equals_slice(yhi, whole, 1, 4),
          "dropout of cp rank 1's balanced chunks (cp 3) differs from the whole's at their positions");
    /* and its second token alone, a sequence-parallel slice of them (offset 1 of the rank's 2) */
    tensor ysp = dropout_of(hi, ATTRS(0.4, 7, 9, 1, 1, 2, 3, 1), s);
    CHECK(equals_slice(ysp, whole, 1, 4), "dropout of a sequence-parallel slice of cp rank 1's chunks (cp 3) differs "
          "from the whole's at its position");
    tensor all[] = {lo, hi, both, yc, ylo, yhi, ysp, rows, y, whole, x};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i].data);
}

/* Attention with dropout against a naive double reference whose mask comes straight from Philox
 * (score (t, j) of head h is element ((head_offset + h) T + t) T + j of sample first + b). */
static void attention_dropout_reference(tensor q, tensor k, tensor v, double p, int head_offset, int64_t first, double *y)
{
    int64_t B = q.type.dims[0], T = q.type.dims[1], H = q.type.dims[2], Hk = k.type.dims[2], D = q.type.dims[3];
    unsigned int threshold = mcc_dropout_threshold(p);
    double s[64];
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++) {
                int64_t g = h / (H / Hk);
                double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j <= t; j++) {
                    s[j] = 0;
                    for (int64_t d = 0; d < D; d++)
                        s[j] += (double)F(q)[((b * T + t) * H + h) * D + d] * F(k)[((b * T + j) * Hk + g) * D + d] / sqrt((double)D);
                    mx = fmax(mx, s[j]);
                }
                for (int64_t j = 0; j <= t; j++)
                    sum += s[j] = exp(s[j] - mx);
                for (int64_t j = 0; j <= t; j++) {
                    uint64_t e = ((uint64_t)(head_offset + h) * T + t) * T + j, sample = first + b;
                    mcc_philox4x32 c = {{(unsigned)(e / 4), (unsigned)(e / 4 >> 32), (unsigned)sample, (unsigned)(sample >> 32)}};
                    s[j] *= mcc_philox4x32_10(c, 1234, 5).v[e % 4] >= threshold ? 1 / (1 - p) : 0;
                }
                for (int64_t d = 0; d < D; d++) {
                    double acc = 0;
                    for (int64_t j = 0; j <= t; j++)
                        acc += s[j] / sum * F(v)[((b * T + j) * Hk + g) * D + d];
                    y[((b * T + t) * H + h) * D + d] = acc;
                }
            }
}

/* Forward against the reference; lse is attention's (undropped); and heads 2, 3 of 4 computed on
 * their own (head_offset 2, kv head 1 of 2: tensor parallelism) give the whole's y, dq, dk, dv. */
static void test_attention_dropout(void)
{
    const double p = 0.3;
    const int64_t first = 3000000000ll;
    tensor q = uniform(F32(2, 7, 4, 8), 1), k = uniform(F32(2, 7, 2, 8), 1), v = uniform(F32(2, 7, 2, 8), 1);
    tensor fs = first_sample(first), dy = uniform(F32(2, 7, 4, 8), 1), y = like(q), lse = attention_lse(q);
    tensor y0 = like(q), lse0 = attention_lse(q), g[3] = {like(q), like(k), like(v)};
    double *ref = malloc(sizeof *ref * numel(y));
    run(IR_OP_ATTENTION_DROPOUT, ATTRS(p, 1234, 5, 0, 4), (tensor[]){q, k, v, fs}, 4, (tensor[]){y, lse}, 2);
    run(IR_OP_ATTENTION, NULL, (tensor[]){q, k, v}, 3, (tensor[]){y0, lse0}, 2);
    attention_dropout_reference(q, k, v, p, 0, first, ref);
    double err = max_abs_diff(F(y), ref, numel(y));
    printf("attention_dropout max abs err vs naive %.1e\n", err);
    CHECK(err < 1e-5, "attention_dropout differs from the naive reference by %.3g", err);
    CHECK(!memcmp(lse.data, lse0.data, ir_bytes(&lse.type)), "attention_dropout's lse is not attention's");
    run(IR_OP_ATTENTION_DROPOUT_GRAD, ATTRS(p, 1234, 5, 0, 4), (tensor[]){dy, q, k, v, y, lse, fs}, 7, g, 3);

    tensor ql = slice(q, 2, 2, 2), kl = slice(k, 2, 1, 1), vl = slice(v, 2, 1, 1), dyl = slice(dy, 2, 2, 2);
    tensor yl = like(ql), lsel = attention_lse(ql), gl[3] = {like(ql), like(kl), like(vl)};
    run(IR_OP_ATTENTION_DROPOUT, ATTRS(p, 1234, 5, 2, 4), (tensor[]){ql, kl, vl, fs}, 4, (tensor[]){yl, lsel}, 2);
    run(IR_OP_ATTENTION_DROPOUT_GRAD, ATTRS(p, 1234, 5, 2, 4), (tensor[]){dyl, ql, kl, vl, yl, lsel, fs}, 7, gl, 3);
    const tensor got[4] = {yl, gl[0], gl[1], gl[2]}, whole[4] = {y, g[0], g[1], g[2]};
    const char *names[4] = {"y", "dq", "dk", "dv"};
    for (int i = 0; i < 4; i++) {
        tensor w = slice(whole[i], 2, i < 2 ? 2 : 1, got[i].type.dims[2]);
        double e = 0;
        for (int64_t j = 0; j < numel(w); j++)
            e = fmax(e, fabs(F(got[i])[j] - F(w)[j]));
        CHECK(e < 1e-6, "attention_dropout of heads 2, 3 alone: %s differs from the whole's by %.3g", names[i], e);
        free(w.data);
    }
    tensor all[] = {q, k, v, fs, dy, y, lse, y0, lse0, g[0], g[1], g[2], ql, kl, vl, dyl, yl, lsel, gl[0], gl[1], gl[2]};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i].data);
    free(ref);
}

/* max |a - b| over every element (-inf against -inf: 0) */
static double max_diff(tensor a, tensor b)
{
    double e = 0;
    for (int64_t j = 0; j < numel(a); j++)
        if (F(a)[j] != F(b)[j])
            e = fmax(e, fabs((double)F(a)[j] - F(b)[j]));
    return e;
}

/* Ring attention (ops.def: attention {cp, cp_rank, ring=1, shift}, attention_merge): cp rank 1
 * of 3 (odd, so the shifts wrap), q its two chunks of 2 of a 12-token sequence, grouped-query
 * heads. Its cp pieces, piece s over the keys of rank (1 - s) mod 3 alone, merged, equal attention
 * over every rank's keys gathered (y, lse); each piece's attention_grad with the merged y and lse
 * gives dq summed over the pieces and dk, dv of the piece's rank equal to that rank's block of the
 * gathered backward's. A row a piece's keys miss gets y 0 and lse -inf: rank 0's first chunk
 * (positions 0, 1) against rank 2's keys (chunks 2 and 3: positions 4..7). */
static void test_attention_ring(void)
{
    enum { CP = 3, RANK = 1, T = 4 };
    tensor q = uniform(F32(2, T, 4, 8), 1), kg = uniform(F32(2, CP * T, 2, 8), 1), vg = uniform(F32(2, CP * T, 2, 8), 1);
    tensor dy = uniform(F32(2, T, 4, 8), 1), y = like(q), lse = attention_lse(q), g[3] = {like(q), like(kg), like(vg)};
    run(IR_OP_ATTENTION, ATTRS(CP, RANK, 0, 0), (tensor[]){q, kg, vg}, 3, (tensor[]){y, lse}, 2);
    run(IR_OP_ATTENTION_GRAD, ATTRS(CP, RANK, 0, 0), (tensor[]){dy, q, kg, vg, y, lse}, 6, g, 3);
    tensor o = like(q), ol = attention_lse(q), piece = like(q), pl = attention_lse(q), merged = like(q), ml = attention_lse(q);
    tensor dq = like(q), pg[3] = {like(q), uniform(F32(2, T, 2, 8), 0), uniform(F32(2, T, 2, 8), 0)};
    double dkv = 0;
    for (int s = 0; s < CP; s++) {
        int kv_rank = (RANK - s + CP) % CP;
        tensor k = slice(kg, 1, kv_rank * T, T), v = slice(vg, 1, kv_rank * T, T);
        run(IR_OP_ATTENTION, ATTRS(CP, RANK, 1, s), (tensor[]){q, k, v}, 3, (tensor[]){s ? piece : o, s ? pl : ol}, 2);
        if (s) {
            run(IR_OP_ATTENTION_MERGE, NULL, (tensor[]){o, ol, piece, pl}, 4, (tensor[]){merged, ml}, 2);
            copy_into(o, merged), copy_into(ol, ml);
        }
        run(IR_OP_ATTENTION_GRAD, ATTRS(CP, RANK, 1, s), (tensor[]){dy, q, k, v, y, lse}, 6, pg, 3);
        for (int64_t j = 0; j < numel(dq); j++)
            F(dq)[j] = s ? F(dq)[j] + F(pg[0])[j] : F(pg[0])[j];
        for (int i = 1; i < 3; i++) {
            tensor want = slice(g[i], 1, kv_rank * T, T);
            dkv = fmax(dkv, max_diff(pg[i], want));
            free(want.data);
        }
        free(k.data), free(v.data);
    }
    double ey = max_diff(o, y), el = max_diff(ol, lse), eq = max_diff(dq, g[0]);
    printf("ring attention (cp 3) vs gathered: y %.1e, lse %.1e, dq %.1e, dk/dv %.1e\n", ey, el, eq, dkv);
    CHECK(ey < 1e-6 && el < 1e-6, "ring pieces merged differ from gathered attention: y by %.3g, lse by %.3g", ey, el);
    CHECK(eq < 1e-5 && dkv < 1e-5, "ring pieces' gradients differ from the gathered backward's: dq by %.3g, dk/dv by %.3g",
          eq, dkv);
    tensor k2 = slice(kg, 1, 2 * T, T), v2 = slice(vg, 1, 2 * T, T);
    run(IR_OP_ATTENTION, ATTRS(CP, 0, 1, 1), (tensor[]){q, k2, v2}, 3, (tensor[]){piece, pl}, 2);
    bool masked = true;
    for (int64_t b = 0; b < 2; b++)
        for (int64_t h = 0; h < 4; h++)
            for (int64_t t = 0; t < 2; t++) {
                masked &= F(pl)[(b * 4 + h) * T + t] == -INFINITY;
                for (int64_t d = 0; d < 8; d++)
                    masked &= F(piece)[((b * T + t) * 4 + h) * 8 + d] == 0.0f;
            }
    CHECK(masked, "a ring piece's rows that see none of its keys must give y 0 and lse -inf");
    tensor all[] = {q, kg, vg, dy, y, lse, g[0], g[1], g[2], o, ol, piece, pl, merged, ml, dq, pg[0], pg[1], pg[2], k2, v2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i].data);
}

/* --- bad data aborts with a message instead of reading out of bounds ------------------------- */

/* Runs op in a child and expects it to abort with `want` in its message. */
static void expect_abort(const char *what, ir_op op, const tensor *args, int nargs, const tensor *res, const char *want)
{
    int fds[2];
    char msg[1024] = {0};
    fflush(stdout);
    if (pipe(fds) != 0)
        abort();
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], STDERR_FILENO);
        run(op, NULL, args, nargs, res, 1);
        _exit(0);
    }
    close(fds[1]);
    for (size_t n = 0, k; n + 1 < sizeof msg && (k = read(fds[0], msg + n, sizeof msg - 1 - n)) > 0 && k != (size_t)-1;)
        n += k;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    printf("%s: %s", what, msg);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "%s: the kernel did not abort", what);
    CHECK(strstr(msg, want) != NULL, "%s: message lacks \"%s\"", what, want);
}

static void test_bad_ids(void)
{
    tensor table = uniform(F32(7, 3), 1), tok = ids(I32(4), 7), y = F32(4, 3), loss = SCALAR();
    I(tok)[2] = 9;
    expect_abort("embedding id 9, vocab 7", IR_OP_EMBEDDING, (tensor[]){table, tok}, 2, &y,
                 "token id 9 at position 2 is outside the vocabulary [0, 7)");
    tensor logits = uniform(F32(4, 7), 1);
    I(tok)[2] = -1;
    expect_abort("cross_entropy target -1", IR_OP_CROSS_ENTROPY, (tensor[]){logits, tok}, 2, &loss,
                 "target -1 at position 2");
    free(table.data), free(tok.data), free(y.data), free(loss.data), free(logits.data);
}

int main(int argc, char **argv)
{
    test_gradients();
    test_attention_reference();
    test_cross_entropy_reference();
    test_adamw();
    test_master_remainders();
    test_matmul_reference();
    test_fp8_block_reference();
    test_fp8_grouped_reference();
    test_fp8_block_experts_reference();
    test_rope_reference();
    test_split_concat_reference();
    if (argc > 1) /* tests/data/rope_llama3_freqs.txt */
        test_rope_scaling(argv[1]);
    if (argc > 2) /* tests/data/rope_yarn_freqs.txt */
        test_rope_yarn(argv[2]);
    test_norm_reference();
    test_gelu_reference();
    test_grad_norm_and_state();
    test_bad_ids();
    test_philox_known_answers();
    test_dropout_threshold();
    test_dropout_statistics();
    test_dropout_keys();
    test_dropout_layouts();
    test_attention_dropout();
    test_attention_ring();
    printf(failures ? "%d check(s) FAILED\n" : "all cpu kernel checks passed\n", failures);
    return failures != 0;
}
