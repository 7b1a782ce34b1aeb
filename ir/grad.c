/* grad.c — reverse-mode rules, one per differentiable op of the op table (ops.def). Each rule
 * reads the gradient of the instruction's result and contributes gradients to its operands. */
#include "grad.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ir_grad_of(const ir_grad_ctx *g, int v) { return v < g->nfwd ? g->grad[v] : -1; }

void ir_grad_contribute(ir_grad_ctx *g, int v, int dv)
{
    if (v >= g->nfwd)
        return;
    g->grad[v] = g->grad[v] < 0 ? dv : ir_op2(g->m, g->f, IR_OP_ADD, g->grad[v], dv);
}

void ir_grad_none(ir_grad_ctx *g, const ir_func *f, const ir_instr *in)
{
    fprintf(stderr, "mcc: internal error: op %s has no gradient rule but reaches the loss\n", ir_ops[in->op].name);
    abort();
}

/* Emits an instruction in the backward and returns its first result. */
static int emit(ir_grad_ctx *g, ir_op op, const int *args, int nargs, const double *attrs)
{
    return ir_emit(g->m, g->f, op, args, nargs, attrs, NULL, NULL);
}

/* Reshapes dv back to the shape of forward value v when an op flattened it. */
static int like(ir_grad_ctx *g, int dv, int v)
{
    const ir_type *t = ir_vtype(g->f, v), *dt = ir_vtype(g->f, dv);
    if (ir_type_eq(t, dt))
        return dv;
    return ir_reshape(g->m, g->f, dv, t->ndim, t->dims);
}

#define DY (ir_grad_of(g, in->res[0]))

void ir_grad_add(ir_grad_ctx *g, const ir_func *f, const ir_instr *in)
{
    ir_grad_contribute(g, in->args[0], DY);
    ir_grad_contribute(g, in->args[1], DY);
}

void ir_grad_mul(ir_grad_ctx *g, const ir_func *f, const ir_instr *in)
{
    int dy = DY;
    ir_grad_contribute(g, in->args[0], ir_op2(g->m, g->f, IR_OP_MUL, dy, in->args[1]));
    ir_grad_contribute(g, in->args[1], ir_op2(g->m, g->f, IR_OP_MUL, dy, in->args[0]));
}

void ir_grad_scale(ir_grad_ctx *g, const ir_func *f, const ir_instr *in)
{
    ir_grad_contribute(g, in->args[0], ir_scale(g->m, g->f, DY, in->attr[IR_ATTR_SCALE_FACTOR]));
}

/* convert's gradient: dy converted back to the operand's dtype (Megatron's router GEMM: fp32
 * gradients cast back to the input's and the weight's dtypes) */
void ir_grad_convert(ir_grad_ctx *g, const ir_func *f, const ir_instr *in)
{
    ir_grad_contribute(g, in->args[0], ir_convert(g->m, g->f, DY, ir_vtype(f, in->args[0])->dtype == IR_F32));
}

void ir_grad_bias_add(ir_grad_ctx *g, const ir_func *f, const ir_instr *in)
{
    int dy = DY;
    ir_grad_contribute(g, in->args[0], dy);
    ir_grad_contribute(g, in->args[1], ir_op1(g->m, g->f, IR_OP_SUM_ROWS, dy));
}

/* An activation's gradient: its _grad op of (dy, x) */
static void grad_activation(ir_grad_ctx *g, const ir_instr *in, ir_op grad_op)
{
    ir_grad_contribute(g, in->args[0], ir_op2(g->m, g->f, grad_op, DY, in->args[0]));
}

void ir_grad_gelu(ir_grad_ctx *g, const ir_func *f, const ir_instr *in) { grad_activation(g, in, IR_OP_GELU_GRAD); }
void ir_grad_silu(ir_grad_ctx *g, const ir_func *f, const ir_instr *in) { grad_activation(g, in, IR_OP_SILU_GRAD); }
void ir_grad_squared_relu(ir_grad_ctx *g, const ir_func *f, const ir_instr *in)
{
    grad_activation(g, in, IR_OP_SQUARED_RELU_GRAD);
}

/* h = silu(gate) up: one fused kernel gives both gradients, recomputing silu(gate) */
void ir_grad_swiglu(ir_grad_ctx *g, const ir_func *f, const ir_instr *in)
{
    int args[3] = {DY, in->args[0], in->args[1]};
    int r = emit(g, IR_OP_SWIGLU_GRAD, args, 3, NULL);
    ir_grad_contribute(g, in->args[0], r);
    ir_grad_contribute(g, in->args[1], r + 1);
}

/* Zeros of forward value v's type: the gradient of a result that does not reach the loss, where a
 * rule needs one for each. */
static int zeros_like(ir_grad_ctx *g, int v)
{
    double zero = 0;
    return ir_emit(g->m, g->f, IR_OP_FILL, NULL, 0, &zero, NULL, ir_vtype(g->f, v));
}

/* split's gradient: the parts' gradients side by side again (a part summed over the heads
 * broadcast back over them) */
void ir_grad_split_last_dim(ir_grad_ctx *g, const ir_func *f, const ir_instr *in)
{
    int parts[2];
    for (int k = 0; k < 2; k++) {
        int d = ir_grad_of(g, in->res[k]);
        parts[k] = d >= 0 ? d : zeros_like(g, in->res[k]);
    }
    ir_grad_contribute(g, in->args[0], ir_op2(g->m, g->f, IR_OP_CONCAT_LAST_DIM, parts[0], parts[1]));
}

/* concat's gradient: dy split where the operands met, an operand broadcast over the heads
 * receiving its part summed over them */
void ir_grad_concat_last_dim(ir_grad_ctx *g, const ir_func *f, const ir_instr *in)
{
    const ir_type *a = ir_vtype(g->f, in->args[0]), *b = ir_vtype(g->f, in->args[1]), *y = ir_vtype(g->f, in->res[0]);
    int n = y->ndim, dy = DY;
    double attrs[IR_NATTRS_SPLIT_LAST_DIM] = {
        [IR_ATTR_SPLIT_LAST_DIM_SIZE] = (double)a->dims[n - 1],
        [IR_ATTR_SPLIT_LAST_DIM_SUM_HEADS] = a->dims[n - 2] < y->dims[n - 2] ? 1 : b->dims[n - 2] < y->dims[n - 2] ? 2 : 0};
    int parts = emit(g, IR_OP_SPLIT_LAST_DIM, &dy, 1, attrs);
    ir_grad_contribute(g, in->args[0], parts);
    ir_grad_contribute(g, in->args[1], parts + 1);
}

/* r[b,t] = x[b,t+by]: dx[b,t] = dy[b,t-by] where that is a position of r */
void ir_grad_shift_seq(ir_grad_ctx *g, const ir_func *f, const ir_instr *in)
{
    int dy = DY;
    double attrs[IR_NATTRS_SHIFT_SEQ] = {[IR_ATTR_SHIFT_SEQ_BY] = -in->attr[IR_ATTR_SHIFT_SEQ_BY],
                                         [IR_ATTR_SHIFT_SEQ_COUNT] = (double)ir_vtype(g->f, in->args[0])->dims[1]};
    ir_grad_contribute(g, in->args[0], emit(g, IR_OP_SHIFT_SEQ, &dy, 1, attrs));
}

void ir_grad_reshape(ir_grad_ctx *g, const ir_func *f, const ir_instr *in)
{
    ir_grad_contribute(g, in->args[0], like(g, DY, in->args[0]));
}

/* r = a op(b) with a[*,K]: da = dy op(b)^T; for b = W[N,K] (tb): dW = dy^T a, else db = a^T dy. */
void ir_grad_matmul(ir_grad_ctx *g, const ir_func *f, const ir_instr *in)
{
    if (in->attr[IR_ATTR_MATMUL_TA] != 0) {
        fprintf(stderr, "mcc: internal error: no gradient rule for matmul with a transposed first operand\n");
        abort();
    }
    bool tb = in->attr[IR_ATTR_MATMUL_TB] != 0;
    int a = in->args[0], b = in->args[1], dy = DY;
    ir_grad_contribute(g, a, like(g, ir_matmul(g->m, g->f, dy, b, false, !tb), a));
    int db = tb ? ir_matmul(g->m, g->f, dy, a, true, false) : ir_matmul(g->m, g->f, a, dy, true, false);
    ir_grad_contribute(g, b, like(g, db, b));
}

/* The unquantized tensor fp8_quantize (fp8_block_quantize) made q of: gradients pass straight
 * through the quantize (as Transformer Engine's), so they go to it. */
static int fp8_source(const ir_func *f, int q)
{
    const ir_instr *def = &f->instrs[f->vals[q].def];
    if (def->op != IR_OP_FP8_QUANTIZE && def->op != IR_OP_FP8_BLOCK_QUANTIZE && def->op != IR_OP_FP8_GROUPED_QUANTIZE) {
        fprintf(stderr, "mcc: internal error: fp8_matmul operand %%%d is not an fp8_quantize result\n", q);
        abort();
    }
    return def->args[0];
}

/* The weight's FP8 copy for the backward: a weight is a global, live all step, so its quantize is
 * made again from it and the forward's amax (the history's as the step began, or the weight's own,
 * which the step does not change): the same scale and bytes, for one elementwise pass over the
 * weight, instead of a copy of every FP8 weight kept from the forward to the backward (a layer's
 * linear weights at a byte each: 6.5 GiB of LLaMA-3 8B's activations). Any other operand's
 * forward copy q itself. */
static int fp8_backward_copy(ir_grad_ctx *g, int q)
{
    const ir_instr *def = &g->f->instrs[g->f->vals[q].def];
    if (g->f->instrs[g->f->vals[def->args[0]].def].op != IR_OP_GLOBAL)
        return q;
    ir_instr copy = *def; /* emit may grow the instructions def points into */
    return emit(g, copy.op, copy.args, copy.nargs, copy.attr); /* no fold: the forward's folded its amax */
}

/* Blockwise (fp8_recipe blockwise, DeepSeek-V3's): each GEMM's operands scaled along its own
 * reduction dim, as Transformer Engine requantizes, and stored with it last (K-major: Hopper's FP8
 * GEMMs are TN only, so every block-scaled fp8_matmul is ta=0, tb=1). dy [M, N] in 1x128 tiles along
 * N for the dgrad dx = dy w, against the weight's 128x128 blocks quantized again from the global
 * with N last (w [N, K] of the forward's x w^T transposed; the same blocks and scales, read the other
 * way); for the wgrad (dy^T x, over the M tokens) dy and x transposed, in 1x128 tiles along M. */
static void fp8_block_grad(ir_grad_ctx *g, const ir_instr *in, int x, int w, int dy)
{
    bool wgrad = in->attr[IR_ATTR_FP8_MATMUL_WGRAD] != 0;
    const ir_instr *qw = &g->f->instrs[g->f->vals[in->args[2]].def];
    bool w_transposed = qw->attr[IR_ATTR_FP8_BLOCK_QUANTIZE_TRANSPOSE] != 0; /* the forward's: w [K, N] */
    int qdy = ir_fp8_block_quantize(g->m, g->f, dy, 1, IR_FP8_BLOCK, false);
    int qw_n = ir_fp8_block_quantize(g->m, g->f, w, IR_FP8_BLOCK, IR_FP8_BLOCK, !w_transposed);
    int dx = ir_fp8_matmul(g->m, g->f, qdy, qw_n, false, true, IR_FP8_E4M3, false, -1);
    ir_grad_contribute(g, x, like(g, dx, x));
    int db;
    if (wgrad) {
        int qdy_t = ir_fp8_block_quantize(g->m, g->f, dy, 1, IR_FP8_BLOCK, true);
        int qx_t = ir_fp8_block_quantize(g->m, g->f, x, 1, IR_FP8_BLOCK, true);
        db = w_transposed ? ir_fp8_matmul(g->m, g->f, qx_t, qdy_t, false, true, IR_FP8_E4M3, false, -1)
                          : ir_fp8_matmul(g->m, g->f, qdy_t, qx_t, false, true, IR_FP8_E4M3, false, -1);
    } else
        db = w_transposed ? ir_matmul(g->m, g->f, x, dy, true, false) : ir_matmul(g->m, g->f, dy, x, true, false);
    ir_grad_contribute(g, w, like(g, db, w));
}

/* y = op(a) op(b) on quantized a (the activation) and b (the weight): dy quantized once in the
 * gradient's format feeds the dgrad, an fp8 GEMM with the weight quantized again
 * (fp8_backward_copy), and (wgrad=1) the weight's gradient, an fp8 GEMM with the forward's
 * quantized activation; wgrad=0 keeps the weight's gradient a matmul of dy and a's source. */
void ir_grad_fp8_matmul(ir_grad_ctx *g, const ir_func *f, const ir_instr *in)
{
    if (in->attr[IR_ATTR_FP8_MATMUL_TA] != 0) {
        fprintf(stderr, "mcc: internal error: no gradient rule for fp8_matmul with a transposed first operand\n");
        abort();
    }
    bool tb = in->attr[IR_ATTR_FP8_MATMUL_TB] != 0, wgrad = in->attr[IR_ATTR_FP8_MATMUL_WGRAD] != 0;
    int qa = in->args[0], qb = in->args[2], dy = DY;
    int x = fp8_source(g->f, qa), w = fp8_source(g->f, qb);
    if (g->f->instrs[g->f->vals[qa].def].op == IR_OP_FP8_BLOCK_QUANTIZE)
        return fp8_block_grad(g, in, x, w, dy);
    ir_fp8_format grad_format = (ir_fp8_format)in->attr[IR_ATTR_FP8_MATMUL_GRAD_FORMAT];
    int qdy = ir_fp8_quantize(g->m, g->f, dy, in->nargs == 5 ? in->args[4] : -1, true, grad_format);
    int dx = ir_fp8_matmul(g->m, g->f, qdy, fp8_backward_copy(g, qb), false, !tb, IR_FP8_E4M3, false, -1);
    ir_grad_contribute(g, x, like(g, dx, x));
    int db;
    if (wgrad)
        db = tb ? ir_fp8_matmul(g->m, g->f, qdy, qa, true, false, IR_FP8_E4M3, false, -1)
                : ir_fp8_matmul(g->m, g->f, qa, qdy, true, false, IR_FP8_E4M3, false, -1);
    else
        db = tb ? ir_matmul(g->m, g->f, dy, x, true, false) : ir_matmul(g->m, g->f, x, dy, true, false);
    ir_grad_contribute(g, w, like(g, db, w));
}

void ir_grad_embedding(ir_grad_ctx *g, const ir_func *f, const ir_instr *in)
{
    int args[2] = {DY, in->args[1]};
    double vocab = (double)ir_vtype(g->f, in->args[0])->dims[0];
    double start = in->attr[IR_ATTR_EMBEDDING_VOCAB_START];
    double attrs[IR_NATTRS_EMBEDDING_GRAD] = {[IR_ATTR_EMBEDDING_GRAD_VOCAB] = vocab,
                                              [IR_ATTR_EMBEDDING_GRAD_VOCAB_START] = start};
    ir_grad_contribute(g, in->args[0], emit(g, IR_OP_EMBEDDING_GRAD, args, 2, attrs));
}

void ir_grad_pos_add(ir_grad_ctx *g, const ir_func *f, const ir_instr *in)
{
    int dy = DY;
    double positions = (double)ir_vtype(g->f, in->args[1])->dims[0];
    double attrs[IR_NATTRS_POS_ADD_GRAD] = {[IR_ATTR_POS_ADD_GRAD_POSITIONS] = positions,
                                            [IR_ATTR_POS_ADD_GRAD_OFFSET] = in->attr[IR_ATTR_POS_ADD_OFFSET],
                                            [IR_ATTR_POS_ADD_GRAD_EXTENT] = in->attr[IR_ATTR_POS_ADD_EXTENT],
                                            [IR_ATTR_POS_ADD_GRAD_CP] = in->attr[IR_ATTR_POS_ADD_CP],
                                            [IR_ATTR_POS_ADD_GRAD_CP_RANK] = in->attr[IR_ATTR_POS_ADD_CP_RANK]};
    ir_grad_contribute(g, in->args[0], dy);
    ir_grad_contribute(g, in->args[1], emit(g, IR_OP_POS_ADD_GRAD, &dy, 1, attrs));
}

/* Norms: one backward op returns dx, dw (and db for layernorm) as consecutive values. */
static void grad_norm(ir_grad_ctx *g, const ir_instr *in, ir_op grad_op)
{
    int args[3] = {DY, in->args[0], in->args[1]};
    int dx = emit(g, grad_op, args, 3, in->attr);
    for (int i = 0; i < in->nargs; i++)
        ir_grad_contribute(g, in->args[i], dx + i);
}

void ir_grad_layernorm(ir_grad_ctx *g, const ir_func *f, const ir_instr *in) { grad_norm(g, in, IR_OP_LAYERNORM_GRAD); }
void ir_grad_rmsnorm(ir_grad_ctx *g, const ir_func *f, const ir_instr *in) { grad_norm(g, in, IR_OP_RMSNORM_GRAD); }

/* A rotation's gradient is the inverse rotation. */
void ir_grad_rope(ir_grad_ctx *g, const ir_func *f, const ir_instr *in)
{
    int dy = DY;
    double attrs[IR_MAX_ATTRS];
    memcpy(attrs, in->attr, sizeof attrs);
    attrs[IR_ATTR_ROPE_INVERSE] = in->attr[IR_ATTR_ROPE_INVERSE] != 0 ? 0 : 1;
    ir_grad_contribute(g, in->args[0], emit(g, IR_OP_ROPE, &dy, 1, attrs));
}

/* Dropout is diagonal: its gradient is the same dropout (mask and scale) of dy. */
void ir_grad_dropout(ir_grad_ctx *g, const ir_func *f, const ir_instr *in)
{
    if (in->attr[IR_ATTR_DROPOUT_NORMAL] != 0) { /* straight through, as Megatron's RandomSTE */
        ir_grad_contribute(g, in->args[0], DY);
        return;
    }
    int args[2] = {DY, in->args[1]};
    ir_grad_contribute(g, in->args[0], emit(g, IR_OP_DROPOUT, args, 2, in->attr));
}

/* The backward reads the forward's output and saved log-sum-exp instead of recomputing them;
 * with dropout it also takes first_sample (operand 3), to redraw the mask. */
static void grad_attention(ir_grad_ctx *g, const ir_instr *in, ir_op grad_op)
{
    int args[7] = {DY, in->args[0], in->args[1], in->args[2], in->res[0], in->res[1], in->nargs > 3 ? in->args[3] : -1};
    int dq = emit(g, grad_op, args, ir_ops[grad_op].nargs, in->attr);
    for (int i = 0; i < 3; i++)
        ir_grad_contribute(g, in->args[i], dq + i);
}

void ir_grad_attention(ir_grad_ctx *g, const ir_func *f, const ir_instr *in) { grad_attention(g, in, IR_OP_ATTENTION_GRAD); }
void ir_grad_attention_dropout(ir_grad_ctx *g, const ir_func *f, const ir_instr *in)
{
    grad_attention(g, in, IR_OP_ATTENTION_DROPOUT_GRAD);
}

/* The combine is the dispatch's transpose: dr's rows go back to where x's came from, the
 * splits swapped (came out, the forward's splits received), into x's rows; x's rows that were
 * not sent get 0. */
void ir_grad_all_to_all_v(ir_grad_ctx *g, const ir_func *f, const ir_instr *in)
{
    int args[2] = {DY, in->res[1]};
    /* the transpose fills x's room: sized by a capacity where x's splits are the came of a2a's so sized */
    const ir_instr *splits = &f->instrs[f->vals[in->args[1]].def];
    bool came = splits->op == IR_OP_ALL_TO_ALL_V && splits->res[1] == in->args[1];
    double attrs[IR_NATTRS_ALL_TO_ALL_V] = {[IR_ATTR_AXIS] = in->attr[IR_ATTR_AXIS],
                                            [IR_ATTR_ALL_TO_ALL_V_ROWS] = (double)ir_vtype(f, in->args[0])->dims[0],
                                            [IR_ATTR_ALL_TO_ALL_V_CAPACITY] =
                                                came ? splits->attr[IR_ATTR_ALL_TO_ALL_V_CAPACITY] : 0};
    ir_grad_contribute(g, in->args[0], emit(g, IR_OP_ALL_TO_ALL_V, args, 2, attrs));
}

/* Ulysses' exchange is a permutation of elements between the ranks: its gradient is the inverse one. */
void ir_grad_cp_all_to_all(ir_grad_ctx *g, const ir_func *f, const ir_instr *in)
{
    int dy = DY;
    double heads = in->attr[IR_ATTR_CP_ALL_TO_ALL_HEADS] != 0 ? 0 : 1;
    double attrs[IR_NATTRS_CP_ALL_TO_ALL] = {[IR_ATTR_AXIS] = in->attr[IR_ATTR_AXIS],
                                             [IR_ATTR_CP_ALL_TO_ALL_HEADS] = heads};
    ir_grad_contribute(g, in->args[0], emit(g, IR_OP_CP_ALL_TO_ALL, &dy, 1, attrs));
}

/* A permutation of rows: the gradient goes back through the inverse one. */
void ir_grad_moe_sort_runs(ir_grad_ctx *g, const ir_func *f, const ir_instr *in)
{
    int args[2] = {DY, in->args[1]};
    ir_grad_contribute(g, in->args[0], emit(g, IR_OP_MOE_UNSORT_RUNS, args, 2, NULL));
}

void ir_grad_moe_unsort_runs(ir_grad_ctx *g, const ir_func *f, const ir_instr *in)
{
    int args[2] = {DY, in->args[1]};
    ir_grad_contribute(g, in->args[0], emit(g, IR_OP_MOE_SORT_RUNS, args, 2, NULL));
}

void ir_grad_cross_entropy(ir_grad_ctx *g, const ir_func *f, const ir_instr *in)
{
    int args[3] = {DY, in->args[0], in->args[1]};
    ir_grad_contribute(g, in->args[0], emit(g, IR_OP_CROSS_ENTROPY_GRAD, args, 3, NULL));
}

/* --- mixture of experts --- */

void ir_grad_moe_route(ir_grad_ctx *g, const ir_func *f, const ir_instr *in)
{
    int args[3] = {DY, in->args[0], in->res[1]};
    ir_grad_contribute(g, in->args[0], emit(g, IR_OP_MOE_ROUTE_GRAD, args, 3, in->attr));
}

/* Linear in x with the keep mask of (w, ids) fixed: the same dropping of dy. */
void ir_grad_moe_capacity(ir_grad_ctx *g, const ir_func *f, const ir_instr *in)
{
    int args[3] = {DY, in->args[1], in->args[2]};
    ir_grad_contribute(g, in->args[0], emit(g, IR_OP_MOE_CAPACITY, args, 3, in->attr));
}

/* Each token's row is copied to its k routed rows: the gradient sums them back (the combine with
 * weights 1). */
void ir_grad_moe_permute(ir_grad_ctx *g, const ir_func *f, const ir_instr *in)
{
    const ir_type *x = ir_vtype(g->f, in->args[0]);
    int64_t dims[2] = {x->dims[0], ir_vtype(g->f, in->args[1])->dims[0] / x->dims[0]};
    int args[3] = {DY, in->args[1], ir_fill(g->m, g->f, 1.0, ir_tensor(ir_vtype(g->f, DY)->dtype, 2, dims))};
    ir_grad_contribute(g, in->args[0], emit(g, IR_OP_MOE_UNPERMUTE, args, 3, NULL));
}

void ir_grad_moe_unpermute(ir_grad_ctx *g, const ir_func *f, const ir_instr *in)
{
    int args[4] = {DY, in->args[0], in->args[1], in->args[2]};
    int dyp = emit(g, IR_OP_MOE_UNPERMUTE_GRAD, args, 4, NULL);
    ir_grad_contribute(g, in->args[0], dyp);
    ir_grad_contribute(g, in->args[2], dyp + 1);
}

/* y_e = x_e op(w_e): dx_e = dy_e op(w_e)^T (the other form of the grouped matmul); for w[E,F,K]
 * (tb) dw_e = dy_e^T x_e, else dw_e = x_e^T dy_e. */
void ir_grad_moe_grouped_matmul(ir_grad_ctx *g, const ir_func *f, const ir_instr *in)
{
    bool tb = in->attr[IR_ATTR_MOE_GROUPED_MATMUL_TB] != 0;
    int x = in->args[0], w = in->args[1], counts = in->args[2], dy = DY;
    int dx_args[3] = {dy, w, counts};
    double not_tb = tb ? 0 : 1;
    ir_grad_contribute(g, x, emit(g, IR_OP_MOE_GROUPED_MATMUL, dx_args, 3, &not_tb));
    int dw_args[3] = {tb ? dy : x, tb ? x : dy, counts};
    ir_grad_contribute(g, w, emit(g, IR_OP_MOE_GROUPED_WGRAD, dw_args, 3, NULL));
}

/* Blockwise FP8 experts (y = x w_e^T on expert e's rows, w [E,F,K]): fp8_block_grad's rule expert by
 * expert. dy [R, F] in 1x128 tiles along F (a row's tiles its own) for the dgrad dx = dy w_e, against
 * each w[e] quantized again from the global transposed to [K, F] (the same blocks and scales);
 * for the wgrad dw_e = dy_e^T x_e, over the expert's rows, dy and x transposed with the counts, so
 * that the 1x128 tiles along the rows start at each expert's first row and never take another's
 * (the last partial, zero-padded: ops.def's fp8_block_quantize). */
static void fp8_grouped_block_grad(ir_grad_ctx *g, const ir_instr *in, int x, int w, int dy)
{
    int counts = in->args[4];
    int qdy = ir_fp8_block_quantize(g->m, g->f, dy, 1, IR_FP8_BLOCK, false);
    int qw_t = ir_fp8_expert_block_quantize(g->m, g->f, w, -1);
    int dx = ir_fp8_grouped_matmul(g->m, g->f, qdy, qw_t, counts, true, IR_FP8_E4M3, false, -1);
    ir_grad_contribute(g, x, dx);
    int dw;
    if (in->attr[IR_ATTR_FP8_GROUPED_MATMUL_WGRAD] != 0) {
        int qdy_t = ir_fp8_expert_block_quantize(g->m, g->f, dy, counts);
        int qx_t = ir_fp8_expert_block_quantize(g->m, g->f, x, counts);
        dw = emit(g, IR_OP_FP8_GROUPED_WGRAD, (int[5]){qdy_t, qdy_t + 1, qx_t, qx_t + 1, counts}, 5, NULL);
    } else
        dw = emit(g, IR_OP_MOE_GROUPED_WGRAD, (int[3]){dy, x, counts}, 3, NULL);
    ir_grad_contribute(g, w, dw);
}

/* FP8 experts, as fp8_matmul's rule expert by expert (Transformer Engine's GroupedLinear backward):
 * dy quantized once with a scale per expert's rows in the gradient's format, the dgrad an FP8 grouped
 * GEMM against the weights quantized again (fp8_backward_copy), the weights' gradient (wgrad=1) one
 * against the forward's quantized rows, each expert's sum over its own rows; wgrad=0 the plain grouped
 * wgrad of the unquantized ones. */
void ir_grad_fp8_grouped_matmul(ir_grad_ctx *g, const ir_func *f, const ir_instr *in)
{
    bool tb = in->attr[IR_ATTR_FP8_GROUPED_MATMUL_TB] != 0, wgrad = in->attr[IR_ATTR_FP8_GROUPED_MATMUL_WGRAD] != 0;
    int qx = in->args[0], qw = in->args[2], counts = in->args[4], dy = DY;
    int x = fp8_source(g->f, qx), w = fp8_source(g->f, qw);
    if (g->f->instrs[g->f->vals[qx].def].op == IR_OP_FP8_BLOCK_QUANTIZE)
        return fp8_grouped_block_grad(g, in, x, w, dy);
    ir_fp8_format grad_format = (ir_fp8_format)in->attr[IR_ATTR_FP8_GROUPED_MATMUL_GRAD_FORMAT];
    int qdy = ir_fp8_grouped_quantize(g->m, g->f, dy, counts, in->nargs == 6 ? in->args[5] : -1, true, grad_format);
    int dx = ir_fp8_grouped_matmul(g->m, g->f, qdy, fp8_backward_copy(g, qw), counts, !tb, IR_FP8_E4M3, false, -1);
    ir_grad_contribute(g, x, dx);
    int a = tb ? dy : x, b = tb ? x : dy; /* dw_e = dy_e^T x_e for w[E,F,K], x_e^T dy_e for [E,K,F] */
    int dw;
    if (wgrad) {
        int qa = tb ? qdy : qx, qb = tb ? qx : qdy;
        int args[5] = {qa, qa + 1, qb, qb + 1, counts};
        dw = emit(g, IR_OP_FP8_GROUPED_WGRAD, args, 5, NULL);
    } else
        dw = emit(g, IR_OP_MOE_GROUPED_WGRAD, (int[3]){a, b, counts}, 3, NULL);
    ir_grad_contribute(g, w, dw);
}

void ir_grad_moe_aux_loss(ir_grad_ctx *g, const ir_func *f, const ir_instr *in)
{
    int args[3] = {DY, in->args[0], in->args[1]};
    ir_grad_contribute(g, in->args[0], emit(g, IR_OP_MOE_AUX_LOSS_GRAD, args, 3, in->attr));
}

void ir_grad_moe_z_loss(ir_grad_ctx *g, const ir_func *f, const ir_instr *in)
{
    int args[2] = {DY, in->args[0]};
    ir_grad_contribute(g, in->args[0], emit(g, IR_OP_MOE_Z_LOSS_GRAD, args, 2, NULL));
}

/* MoEAuxLossAutoScaler's backward: dy passes to x, and the attached loss is seeded as the lm loss is. */
void ir_grad_moe_aux_attach(ir_grad_ctx *g, const ir_func *f, const ir_instr *in)
{
    ir_grad_contribute(g, in->args[0], DY);
    ir_grad_contribute(g, in->args[1], ir_fill(g->m, g->f, g->loss_scale, ir_scalar(IR_F32)));
}
