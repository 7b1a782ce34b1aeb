/* infer.c — shape and type inference, one function per row kind of the op table (ops.def).
 * Each checks its operands and writes the result types; the builder and the verifier share it. */
#include "ir.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static bool fail(char *err, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return false;
}

static const char *tstr(const ir_type *t)
{
    static char bufs[4][128];
    static int next;
    char *b = bufs[next++ & 3];
    ir_type_str(t, b, 128);
    return b;
}

static bool same_shape(const ir_type *a, const ir_type *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->dims[i] != b->dims[i])
            return false;
    return true;
}

static bool need_float(const ir_type *t, const char *what, char *err, size_t len)
{
    if (t->dtype == IR_I32 || t->dtype == IR_I64)
        return fail(err, len, "%s must be a floating-point tensor, got %s", what, tstr(t));
    return true;
}

static bool need_ndim(const ir_type *t, int ndim, const char *what, char *err, size_t len)
{
    if (t->ndim != ndim)
        return fail(err, len, "%s must have %d dimensions, got %s", what, ndim, tstr(t));
    return true;
}

static int64_t last_dim(const ir_type *t) { return t->ndim ? t->dims[t->ndim - 1] : 1; }
static int64_t lead_numel(const ir_type *t) { return t->ndim ? ir_numel(t) / last_dim(t) : 1; }

/* The result type is given by the instruction (input, fill). */
bool ir_infer_explicit(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    return true;
}

bool ir_infer_global(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (in->global < 0 || in->global >= m->nglobals)
        return fail(err, len, "unknown global @%s", in->sym ? in->sym : "?");
    r[0] = m->globals[in->global].type;
    return true;
}

bool ir_infer_none(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    return true;
}

bool ir_infer_same1(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (!need_float(&a[0], "operand", err, len))
        return false;
    r[0] = a[0];
    return true;
}

/* a of any float dtype -> a's shape in f32 (f32=1) or in the activations' dtype, the plan's param_dtype
 * (f32=0): the attribute, not the operand, names the result's dtype, so the precision pass's
 * re-inference keeps an f32 router while the activations around it turn bf16 */
bool ir_infer_convert(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    double f32 = in->attr[IR_ATTR_CONVERT_F32];
    if (f32 != 0 && f32 != 1)
        return fail(err, len, "convert takes f32=1 (to f32) or f32=0 (to the activations' dtype), got %.10g", f32);
    if (!need_float(&a[0], "operand", err, len) || ir_dtype_is_fp8(a[0].dtype))
        return fail(err, len, "convert's operand must be f32, bf16 or f16, got %s", tstr(&a[0]));
    r[0] = a[0];
    r[0].dtype = f32 ? IR_F32 : (ir_dtype)ir_cfg_choice(m, IR_CFG_PARAM_DTYPE); /* f32, bf16 or f16 */
    return true;
}

bool ir_infer_same2(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (!same_shape(&a[0], &a[1]) || a[0].dtype != a[1].dtype)
        return fail(err, len, "operands differ: %s vs %s", tstr(&a[0]), tstr(&a[1]));
    return ir_infer_same1(m, in, a, r, err, len);
}

bool ir_infer_bias_add(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (!need_ndim(&a[1], 1, "bias", err, len))
        return false;
    if (last_dim(&a[0]) != a[1].dims[0])
        return fail(err, len, "bias %s does not match the last dimension of %s", tstr(&a[1]), tstr(&a[0]));
    r[0] = a[0];
    return true;
}

/* --- dropout (dropout and the attention_dropout ops) --- */

/* A whole number in [0, max]: attributes that index or key. */
static bool whole_in(double v, double max) { return v >= 0 && v <= max && v == (double)(int64_t)v; }

/* The first_sample operand: the global index of the micro-batch's first sample, which the
 * runtime sets every micro-step. */
static bool check_first_sample(const ir_type *t, char *err, size_t len)
{
    if (t->dtype != IR_I64 || t->ndim != 0)
        return fail(err, len, "first_sample must be an i64 scalar, got %s", tstr(t));
    return true;
}

/* p in [0, 1); seed and site are the 32-bit words of the Philox key. */
static bool check_dropout_key(const ir_instr *in, char *err, size_t len)
{
    double p = in->attr[IR_ATTR_DROPOUT_P], seed = in->attr[IR_ATTR_DROPOUT_SEED];
    double site = in->attr[IR_ATTR_DROPOUT_SITE];
    if (!(p >= 0 && p < 1))
        return fail(err, len, "%s: p = %g is outside [0, 1)", ir_ops[in->op].name, p);
    if (!whole_in(seed, 4294967295.0) || !whole_in(site, 4294967295.0))
        return fail(err, len, "%s: seed %g and site %g must be whole numbers below 2^32", ir_ops[in->op].name, seed,
                    site);
    return true;
}

/* (x[B,...], first_sample) with dimension dim of x holding [offset, offset + dims[dim]) of extent;
 * under context parallelism (cp > 1) dimension 1 a rank's balanced chunks (runtime/dropout.h) */
bool ir_infer_dropout(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (!need_float(&a[0], "dropout input", err, len) || !check_first_sample(&a[1], err, len) ||
        !check_dropout_key(in, err, len))
        return false;
    double dim = in->attr[IR_ATTR_DROPOUT_DIM], offset = in->attr[IR_ATTR_DROPOUT_OFFSET];
    double extent = in->attr[IR_ATTR_DROPOUT_EXTENT];
    if (a[0].ndim < 2 || !whole_in(dim, a[0].ndim - 1))
        return fail(err, len, "dropout wants x[B,...] and a dimension dim in 0..ndim-1 (0: a block of the batch's "
                    "samples), got dim %g of %s", dim, tstr(&a[0]));
    if (!whole_in(offset, 1e15) || !whole_in(extent, 1e15) || offset + (double)a[0].dims[(int)dim] > extent)
        return fail(err, len, "dropout: dimension %g of %s does not fit in a whole dimension of %g from offset %g",
                    dim, tstr(&a[0]), extent, offset);
    double cp = in->attr[IR_ATTR_DROPOUT_CP], tokens = dim == 1 ? extent : (double)a[0].dims[1];
    if (cp > 1 && (dim > 1 || (int64_t)tokens % 2 != 0))
        return fail(err, len, "dropout under context parallelism (cp=%g) cuts the sequence, dimension 1, whose rank's "
                    "tokens (extent, when dim is 1) are two balanced chunks of the whole; got dim %g extent %g of %s",
                    cp, dim, extent, tstr(&a[0]));
    r[0] = a[0];
    return true;
}

bool ir_infer_reshape(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (ir_numel(&a[0]) != ir_numel(&r[0]) || a[0].dtype != r[0].dtype)
        return fail(err, len, "cannot reshape %s to %s", tstr(&a[0]), tstr(&r[0]));
    return true;
}

bool ir_infer_rows(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    int64_t first = (int64_t)in->attr[IR_ATTR_ROWS_FIRST], count = (int64_t)in->attr[IR_ATTR_ROWS_COUNT];
    if (a[0].ndim < 1 || first < 0 || count < 1 || first + count > a[0].dims[0])
        return fail(err, len, "rows [%lld, %lld) of %s", (long long)first, (long long)(first + count), tstr(&a[0]));
    r[0] = ir_tensor(a[0].dtype, a[0].ndim, a[0].dims);
    r[0].dims[0] = count;
    return true;
}

bool ir_infer_concat_rows(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    bool same = a[0].ndim == a[1].ndim && a[0].ndim >= 1 && a[0].dtype == a[1].dtype;
    for (int d = 1; same && d < a[0].ndim; d++)
        same = a[0].dims[d] == a[1].dims[d];
    if (!same)
        return fail(err, len, "cannot stack the rows of %s and %s", tstr(&a[0]), tstr(&a[1]));
    r[0] = ir_tensor(a[0].dtype, a[0].ndim, a[0].dims);
    r[0].dims[0] += a[1].dims[0];
    return true;
}

/* x[*,H,N] -> (a[*,H,size], b[*,H,N-size]), result sum_heads - 1 [*,1,..] */
bool ir_infer_split_last_dim(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err,
                             size_t len)
{
    double size = in->attr[IR_ATTR_SPLIT_LAST_DIM_SIZE], sum = in->attr[IR_ATTR_SPLIT_LAST_DIM_SUM_HEADS];
    int n = a[0].ndim;
    if (n < 1 || !whole_in(size, 1e12) || size < 1 || size >= (double)a[0].dims[n - 1])
        return fail(err, len, "split_last_dim {size=%g} of %s: size must leave both parts at least one channel", size,
                    tstr(&a[0]));
    if (!whole_in(sum, 2) || (sum != 0 && n < 2))
        return fail(err, len, "split_last_dim {sum_heads=%g} of %s: 0, or the result (1 or 2) summed over "
                    "dimension -2", sum, tstr(&a[0]));
    for (int k = 0; k < 2; k++) {
        r[k] = a[0];
        r[k].dims[n - 1] = k == 0 ? (int64_t)size : a[0].dims[n - 1] - (int64_t)size;
        if ((int)sum == k + 1)
            r[k].dims[n - 2] = 1;
    }
    return need_float(&a[0], "split_last_dim operand", err, len);
}

/* (a[*,H,Da], b[*,H,Db]) -> [*,H,Da+Db]; either may have one head, broadcast */
bool ir_infer_concat_last_dim(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err,
                              size_t len)
{
    int n = a[0].ndim;
    bool ok = n >= 2 && a[1].ndim == n && a[0].dtype == a[1].dtype;
    for (int d = 0; ok && d < n - 2; d++)
        ok = a[0].dims[d] == a[1].dims[d];
    int64_t h0 = ok ? a[0].dims[n - 2] : 0, h1 = ok ? a[1].dims[n - 2] : 0;
    if (!ok || (h0 != h1 && h0 != 1 && h1 != 1))
        return fail(err, len, "concat_last_dim of %s and %s: the dimensions but the last must agree (dimension -2 "
                    "may be 1 in one, broadcast over the other's heads)", tstr(&a[0]), tstr(&a[1]));
    r[0] = a[0];
    r[0].dims[n - 2] = h0 > h1 ? h0 : h1;
    r[0].dims[n - 1] = a[0].dims[n - 1] + a[1].dims[n - 1];
    return need_float(&a[0], "concat_last_dim operand", err, len);
}

/* x[B,T,...] -> r[B,count,...] of x's dtype */
bool ir_infer_shift_seq(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    int64_t by = (int64_t)in->attr[IR_ATTR_SHIFT_SEQ_BY], count = (int64_t)in->attr[IR_ATTR_SHIFT_SEQ_COUNT];
    if (a[0].ndim < 2 || count < 1)
        return fail(err, len, "shift_seq {by=%lld, count=%lld} of %s: a sequence (dimension 1) to at least one "
                    "position", (long long)by, (long long)count, tstr(&a[0]));
    r[0] = a[0];
    r[0].dims[1] = count;
    return true;
}

bool ir_infer_matmul(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    bool ta = in->attr[IR_ATTR_MATMUL_TA] != 0, tb = in->attr[IR_ATTR_MATMUL_TB] != 0;
    if (a[0].ndim < 1 || a[1].ndim < 1 || a[0].dtype != a[1].dtype)
        return fail(err, len, "bad matmul operands %s, %s", tstr(&a[0]), tstr(&a[1]));
    int64_t am = lead_numel(&a[0]), ak = last_dim(&a[0]);
    int64_t bk = lead_numel(&a[1]), bn = last_dim(&a[1]);
    int64_t m_ = ta ? ak : am, k = ta ? am : ak;
    int64_t k2 = tb ? bn : bk, n = tb ? bk : bn;
    if (k != k2)
        return fail(err, len, "contracted sizes differ (%lld vs %lld) in matmul %s%s x %s%s", (long long)k,
                    (long long)k2, tstr(&a[0]), ta ? "^T" : "", tstr(&a[1]), tb ? "^T" : "");
    if (ta) {
        int64_t dims[2] = {m_, n};
        r[0] = ir_tensor(a[0].dtype, 2, dims);
    } else {
        r[0] = ir_tensor(a[0].dtype, a[0].ndim, a[0].dims);
        r[0].dims[r[0].ndim - 1] = n;
    }
    return true;
}

/* x -> f32[1], x a wider float tensor than fp8 (what fp8_quantize quantizes) */
bool ir_infer_fp8_amax(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (!need_float(&a[0], "operand", err, len) || ir_dtype_is_fp8(a[0].dtype))
        return fail(err, len, "%s of %s: it reads a wider float tensor", ir_ops[in->op].name, tstr(&a[0]));
    int64_t one = 1;
    r[0] = ir_tensor(IR_F32, 1, &one);
    return true;
}

bool ir_infer_results(const ir_module *m, const ir_instr *in, const ir_type *args, ir_type *res, char *err, size_t len)
{
    int namax = ir_amax_results(in->op, in->attr), nres = ir_ops[in->op].nres;
    if (nres + namax > IR_MAX_RES) /* before res[] past IR_MAX_RES is written */
        return fail(err, len, "%s {amax=%g}: at most %d results in all", ir_ops[in->op].name,
                    in->attr[ir_ops[in->op].amax_attr], IR_MAX_RES);
    if (!ir_ops[in->op].infer(m, in, args, res, err, len))
        return false;
    int like = 1; /* the leading results shaped as the first (a norm gradient's dx, not its dw) */
    while (like < nres && same_shape(&res[like], &res[0]))
        like++;
    if (ir_ops[in->op].amax_attr >= 0 && (namax < 0 || namax > like || namax != in->attr[ir_ops[in->op].amax_attr]))
        return fail(err, len, "%s {amax=%g}: the amaxes of its first results shaped as the first, 0 to %d",
                    ir_ops[in->op].name, in->attr[ir_ops[in->op].amax_attr], like);
    for (int k = 0; k < namax; k++)
        if (!ir_infer_fp8_amax(m, in, &res[k], &res[nres + k], err, len))
            return false;
    return true;
}

/* (x, amax f32[1]) -> (q in the format's fp8 dtype, scale_inv f32[1]) */
bool ir_infer_fp8_quantize(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (in->attr[IR_ATTR_FP8_QUANTIZE_FORMAT] != IR_FP8_E4M3 && in->attr[IR_ATTR_FP8_QUANTIZE_FORMAT] != IR_FP8_E5M2)
        return fail(err, len, "fp8_quantize format %g: 0 (E4M3) or 1 (E5M2)", in->attr[IR_ATTR_FP8_QUANTIZE_FORMAT]);
    if (!ir_infer_fp8_amax(m, in, a, r, err, len))
        return false;
    if (a[1].dtype != IR_F32 || ir_numel(&a[1]) != 1)
        return fail(err, len, "fp8_quantize's amax operand: f32[1], got %s", tstr(&a[1]));
    r[0] = a[0];
    r[0].dtype = ir_fp8_dtype((ir_fp8_format)in->attr[IR_ATTR_FP8_QUANTIZE_FORMAT]);
    int64_t one = 1;
    r[1] = ir_tensor(IR_F32, 1, &one);
    return true;
}

static bool need_i32(const ir_type *t, int ndim, const char *what, char *err, size_t len);

/* (x[R, C], counts i32[E]) {rows=1, transpose=1} -> (q [C, R'], scale_inv in 1x128 tiles of q),
 * R' = ir_fp8_expert_rows(R, E): each expert's rows in a span of q's columns of its own */
static bool infer_fp8_expert_rows_quantize(const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (!need_i32(&a[1], 1, "counts [E]", err, len))
        return false;
    if (a[0].ndim != 2 || in->attr[IR_ATTR_FP8_BLOCK_QUANTIZE_ROWS] != 1 ||
        in->attr[IR_ATTR_FP8_BLOCK_QUANTIZE_TRANSPOSE] == 0 || in->attr[IR_ATTR_FP8_BLOCK_QUANTIZE_EXPERTS] != 0)
        return fail(err, len, "fp8_block_quantize with counts quantizes the experts' rows x[R, C] (got %s) transposed "
                    "in 1x128 tiles: rows=1, transpose=1, experts=0", tstr(&a[0]));
    int64_t C = a[0].dims[1], cols = ir_fp8_expert_rows(a[0].dims[0], a[1].dims[0]);
    r[0] = ir_tensor(IR_FP8E4M3, 2, (int64_t[]){C, cols});
    r[1] = ir_fp8_block_scale_type(C, cols, 1, IR_FP8_BLOCK);
    return true;
}

/* x[*, C] -> (q E4M3 like x, or x^T [C, R] under transpose; its scale_inv,
 * ir_fp8_block_scale_type), R the leading dims' product; the blocks 1x128 or 128x128 of q, tiling it
 * exactly; the experts' operands as ops.def says */
bool ir_infer_fp8_block_quantize(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err,
                                 size_t len)
{
    if (!ir_infer_fp8_amax(m, in, a, r, err, len))
        return false;
    int64_t rows = (int64_t)in->attr[IR_ATTR_FP8_BLOCK_QUANTIZE_ROWS], cols = (int64_t)in->attr[IR_ATTR_FP8_BLOCK_QUANTIZE_COLS];
    bool transpose = in->attr[IR_ATTR_FP8_BLOCK_QUANTIZE_TRANSPOSE] != 0;
    bool experts = in->attr[IR_ATTR_FP8_BLOCK_QUANTIZE_EXPERTS] != 0;
    if ((rows != 1 && rows != IR_FP8_BLOCK) || cols != IR_FP8_BLOCK)
        return fail(err, len, "fp8_block_quantize {rows=%lld, cols=%lld}: blocks are 1x%d or %dx%d (of q: transpose "
                    "quantizes x^T)", (long long)rows, (long long)cols, IR_FP8_BLOCK, IR_FP8_BLOCK, IR_FP8_BLOCK);
    if (in->nargs == 2) /* the experts' rows by counts, for the wgrad */
        return infer_fp8_expert_rows_quantize(in, a, r, err, len);
    if (in->nargs != 1)
        return fail(err, len, "fp8_block_quantize takes x, or an expert's rows x and their counts, got %d operands",
                    in->nargs);
    if (experts && (a[0].ndim != 3 || rows != IR_FP8_BLOCK || !transpose || a[0].dims[1] % IR_FP8_BLOCK ||
                    a[0].dims[2] % IR_FP8_BLOCK))
        return fail(err, len, "fp8_block_quantize {experts=1} of %s: an expert weight [E, A, C], A and C multiples of "
                    "%d, in 128x128 blocks, each w[e] transposed (rows=128, transpose=1)", tstr(&a[0]), IR_FP8_BLOCK);
    if (experts) { /* q [E, C, A], scale_inv as [E C, A]'s blocks */
        r[0] = ir_tensor(IR_FP8E4M3, 3, (int64_t[]){a[0].dims[0], a[0].dims[2], a[0].dims[1]});
        r[1] = ir_fp8_block_scale_type(a[0].dims[0] * a[0].dims[2], a[0].dims[1], rows, cols);
        return true;
    }
    int64_t C = a[0].ndim ? a[0].dims[a[0].ndim - 1] : 1, R = ir_numel(&a[0]) / (C ? C : 1);
    int64_t qr = transpose ? C : R, qc = transpose ? R : C;
    if (qr % rows || qc % cols)
        return fail(err, len, "fp8_block_quantize of %s (%lld x %lld%s): %lldx%lld blocks do not tile it", tstr(&a[0]),
                    (long long)qr, (long long)qc, transpose ? " transposed" : "", (long long)rows, (long long)cols);
    r[0] = a[0];
    r[0].dtype = IR_FP8E4M3;
    if (transpose)
        r[0] = ir_tensor(IR_FP8E4M3, 2, (int64_t[]){qr, qc});
    r[1] = ir_fp8_block_scale_type(qr, qc, rows, cols);
    return true;
}

/* An FP8_HISTORY's value: f32[1 + len], or an expert weight's f32[E, 1 + len] (a row an expert),
 * len >= 1 */
static bool need_fp8_history(const ir_instr *in, const ir_type *h, char *err, size_t len)
{
    if (h->dtype != IR_F32 || (h->ndim != 1 && h->ndim != 2) || h->dims[h->ndim - 1] < 2)
        return fail(err, len, "%s: an FP8 amax history is f32[1 + history length] or f32[experts, 1 + history "
                    "length], got %s", ir_ops[in->op].name, tstr(h));
    return true;
}

/* The amaxes an FP8 history h scales: f32[1], or f32[E] a row each */
static ir_type fp8_history_amaxes(const ir_type *h)
{
    int64_t rows = h->ndim == 2 ? h->dims[0] : 1;
    return ir_tensor(IR_F32, 1, &rows);
}

/* h -> f32[1] (f32[E] for h[E, 1 + len]) */
bool ir_infer_fp8_history_amax(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (!need_fp8_history(in, &a[0], err, len))
        return false;
    r[0] = fp8_history_amaxes(&a[0]);
    return true;
}

/* (h, amax f32[1], or f32[E] for h[E, 1 + len]) */
bool ir_infer_fp8_amax_fold(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (!need_fp8_history(in, &a[0], err, len))
        return false;
    ir_type amaxes = fp8_history_amaxes(&a[0]);
    if (a[1].dtype != IR_F32 || !same_shape(&a[1], &amaxes))
        return fail(err, len, "fp8_amax_fold's amax operand: %s for the history %s, got %s", tstr(&amaxes), tstr(&a[0]),
                    tstr(&a[1]));
    return true;
}

/* (h, r like h) */
bool ir_infer_fp8_history_update(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (!need_fp8_history(in, &a[0], err, len))
        return false;
    if (a[1].dtype != IR_F32 || !same_shape(&a[0], &a[1]))
        return fail(err, len, "fp8_history_update: its operands are the history %s and one like it, got %s", tstr(&a[0]),
                    tstr(&a[1]));
    return true;
}

/* (qa, sa, qb, sb) -> r: a matmul's shape of fp8 operands, each with its scale_inv (f32[1] or per
 * block: ir_fp8_scale_blocks); r in the activations' dtype, the plan's param_dtype (the precision
 * pass's working copies') */
static bool fp8_product(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    int64_t rows, cols;
    for (int i = 0; i < 4; i += 2)
        if (!ir_dtype_is_fp8(a[i].dtype) || !ir_fp8_scale_blocks(&a[i], &a[i + 1], &rows, &cols))
            return fail(err, len, "fp8_matmul operand %d: an fp8 tensor and its scale_inv, f32[1] or one per block, "
                        "got %s and %s", i, tstr(&a[i]), tstr(&a[i + 1]));
    ir_type ops[2] = {a[0], a[2]}, product;
    ops[0].dtype = ops[1].dtype = IR_F32; /* E4M3 x E5M2 mixes: the shapes are what matter */
    if (!ir_infer_matmul(m, in, ops, &product, err, len))
        return false;
    r[0] = product;
    r[0].dtype = (ir_dtype)ir_cfg_choice(m, IR_CFG_PARAM_DTYPE); /* f32, bf16 or f16 */
    return true;
}

/* (qa, sa, qb, sb[, hdy]): fp8_product, and dy's amax history where the gradient rule reads one */
bool ir_infer_fp8_matmul(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (in->nargs != 4 && in->nargs != 5)
        return fail(err, len, "fp8_matmul takes 4 operands (qa, sa, qb, sb) or 5 (and dy's amax history), got %d",
                    in->nargs);
    if (in->nargs == 5 && !need_fp8_history(in, &a[4], err, len))
        return false;
    return fp8_product(m, in, a, r, err, len);
}

/* (dy, gate, up) -> dgate, dup (and swiglu_grad_product's product): three operands of one shape and
 * dtype, results like them */
bool ir_infer_swiglu_grad(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    for (int i = 1; i < 3; i++)
        if (!ir_type_eq(&a[0], &a[i]))
            return fail(err, len, "swiglu_grad operands %s and %s differ", tstr(&a[0]), tstr(&a[i]));
    if (!need_float(&a[0], "operand", err, len))
        return false;
    for (int k = 0; k < ir_ops[in->op].nres; k++)
        r[k] = a[0];
    return true;
}

/* (dst, a, b): dst has the shape of matmul(a, b), in any float dtype (a gradient accumulator) */
/* (dst, operands...): an accumulating op's product, inferred by `product_of` from the operands
 * after dst, lands in dst, of its shape and a float dtype. */
static bool check_accumulate(const ir_module *m, const ir_instr *in, const ir_type *a, char *err, size_t len,
                             bool (*product_of)(const ir_module *, const ir_instr *, const ir_type *, ir_type *, char *,
                                                size_t))
{
    ir_type product;
    if (!product_of(m, in, &a[1], &product, err, len))
        return false;
    if (!same_shape(&a[0], &product) || !need_float(&a[0], "accumulator", err, len))
        return fail(err, len, "%s into %s of a %s product", ir_ops[in->op].name, tstr(&a[0]), tstr(&product));
    return true;
}

bool ir_infer_matmul_accumulate(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err,
                                size_t len)
{
    return check_accumulate(m, in, a, err, len, ir_infer_matmul);
}

bool ir_infer_fp8_matmul_accumulate(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err,
                                    size_t len)
{
    return check_accumulate(m, in, a, err, len, fp8_product);
}

/* (a, b, bias[N]): a matmul's result with a bias over its last dimension */
bool ir_infer_matmul_bias(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (!ir_infer_matmul(m, in, a, r, err, len))
        return false;
    if (a[2].ndim != 1 || a[2].dims[0] != last_dim(&r[0]))
        return fail(err, len, "bias %s does not match the matmul's %s", tstr(&a[2]), tstr(&r[0]));
    return true;
}

/* The addend c (operand `at`) of a matmul_add / matmul_bias_add: the product's shape and dtype. */
static bool check_addend(const ir_type *c, const ir_type *r, char *err, size_t len)
{
    if (!same_shape(c, r) || c->dtype != r->dtype)
        return fail(err, len, "addend %s does not match the matmul's %s", tstr(c), tstr(r));
    return true;
}

bool ir_infer_matmul_add(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    return ir_infer_matmul(m, in, a, r, err, len) && check_addend(&a[2], &r[0], err, len);
}

/* (qa, sa, qb, sb, c): fp8_product plus c of its shape and dtype */
bool ir_infer_fp8_matmul_add(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err,
                             size_t len)
{
    return fp8_product(m, in, a, r, err, len) && check_addend(&a[4], &r[0], err, len);
}

bool ir_infer_matmul_bias_add(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err,
                              size_t len)
{
    return ir_infer_matmul_bias(m, in, a, r, err, len) && check_addend(&a[3], &r[0], err, len);
}

bool ir_infer_matmul_bias_gelu(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err,
                               size_t len)
{
    if (!ir_infer_matmul_bias(m, in, a, r, err, len))
        return false;
    r[1] = r[0];
    return true;
}

bool ir_infer_matmul_dgelu_bgrad(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err,
                                 size_t len)
{
    if (!ir_infer_matmul(m, in, a, r, err, len))
        return false;
    if (!same_shape(&a[2], &r[0]) || a[2].dtype != r[0].dtype)
        return fail(err, len, "gelu input %s does not match the matmul's %s", tstr(&a[2]), tstr(&r[0]));
    int64_t n = last_dim(&r[0]);
    r[1] = ir_tensor(r[0].dtype, 1, &n);
    return true;
}

bool ir_infer_sum_rows(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    int64_t n = last_dim(&a[0]);
    r[0] = ir_tensor(a[0].dtype, 1, &n);
    return need_float(&a[0], "operand", err, len);
}

bool ir_infer_scalar(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    for (int i = 0; i < in->nargs; i++)
        if (!need_float(&a[i], "operand", err, len))
            return false;
    r[0] = ir_scalar(IR_F32);
    return true;
}

bool ir_infer_embedding(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (!need_ndim(&a[0], 2, "embedding table", err, len))
        return false;
    if (a[1].dtype != IR_I32 || a[1].ndim >= IR_MAX_DIMS)
        return fail(err, len, "token ids must be i32 with fewer than %d dims, got %s", IR_MAX_DIMS, tstr(&a[1]));
    r[0] = ir_tensor(a[0].dtype, a[1].ndim + 1, a[1].dims);
    r[0].dims[a[1].ndim] = a[0].dims[1];
    return true;
}

bool ir_infer_embedding_grad(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (a[1].dtype != IR_I32 || a[0].ndim != a[1].ndim + 1)
        return fail(err, len, "embedding_grad wants dy[*,d] and ids[*], got %s, %s", tstr(&a[0]), tstr(&a[1]));
    int64_t dims[2] = {(int64_t)in->attr[IR_ATTR_EMBEDDING_GRAD_VOCAB], last_dim(&a[0])};
    if (dims[0] <= 0)
        return fail(err, len, "embedding_grad needs vocab > 0");
    r[0] = ir_tensor(a[0].dtype, 2, dims);
    return true;
}

/* The positions a position op in (its offset, extent, cp: ir_pos_attrs) of x[B,T,d] reads: x's
 * tokens are [offset, offset + T) of extent (0: T), with cp > 1 a cp rank's balanced chunks of
 * the cp extent-token whole. Returns how many table rows they need, or -1 if they do not fit. */
static int64_t pos_add_span(const ir_instr *in, int64_t T)
{
    const double *a = ir_pos_attrs(in);
    double whole = a[IR_ATTR_POS_ADD_EXTENT];
    int64_t offset = (int64_t)a[IR_ATTR_POS_ADD_OFFSET], extent = whole > 0 ? (int64_t)whole : T,
            cp = a[IR_ATTR_POS_ADD_CP] > 1 ? (int64_t)a[IR_ATTR_POS_ADD_CP] : 1;
    if (offset < 0 || (whole > 0 && offset + T > extent))
        return -1;
    return cp > 1 ? cp * extent : offset + T;
}

bool ir_infer_pos_add(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (!need_ndim(&a[0], 3, "pos_add input", err, len) || !need_ndim(&a[1], 2, "position table", err, len))
        return false;
    int64_t span = pos_add_span(in, a[0].dims[1]);
    if (span < 0 || a[1].dims[0] < span || a[1].dims[1] != a[0].dims[2])
        return fail(err, len, "position table %s cannot cover %s from position %g of %g (cp %g)", tstr(&a[1]),
                    tstr(&a[0]), in->attr[IR_ATTR_POS_ADD_OFFSET], in->attr[IR_ATTR_POS_ADD_EXTENT],
                    in->attr[IR_ATTR_POS_ADD_CP]);
    r[0] = a[0];
    return true;
}

bool ir_infer_pos_add_grad(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (!need_ndim(&a[0], 3, "pos_add_grad input", err, len))
        return false;
    int64_t dims[2] = {(int64_t)in->attr[IR_ATTR_POS_ADD_GRAD_POSITIONS], a[0].dims[2]};
    int64_t span = pos_add_span(in, a[0].dims[1]);
    if (span < 0 || dims[0] < span)
        return fail(err, len, "positions %lld cannot hold a sequence of %lld from position %g of %g (cp %g)",
                    (long long)dims[0], (long long)a[0].dims[1], in->attr[IR_ATTR_POS_ADD_GRAD_OFFSET],
                    in->attr[IR_ATTR_POS_ADD_GRAD_EXTENT], in->attr[IR_ATTR_POS_ADD_GRAD_CP]);
    r[0] = ir_tensor(a[0].dtype, 2, dims);
    return true;
}

/* x[*,d] with per-feature parameters w[d] (and b[d]). */
static bool check_norm_params(const ir_type *x, const ir_type *params, int nparams, char *err, size_t len)
{
    for (int i = 0; i < nparams; i++)
        if (params[i].ndim != 1 || params[i].dims[0] != last_dim(x))
            return fail(err, len, "norm parameter %s does not match %s", tstr(&params[i]), tstr(x));
    return need_float(x, "norm input", err, len);
}

bool ir_infer_norm(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (!check_norm_params(&a[0], &a[1], in->nargs - 1, err, len))
        return false;
    r[0] = a[0];
    return true;
}

/* (dy, x, w) -> dx, dw[, db] */
bool ir_infer_norm_grad(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (!same_shape(&a[0], &a[1]))
        return fail(err, len, "dy %s and x %s differ", tstr(&a[0]), tstr(&a[1]));
    if (!check_norm_params(&a[1], &a[2], 1, err, len))
        return false;
    r[0] = a[1];
    for (int i = 1; i < ir_ops[in->op].nres; i++)
        r[i] = a[2];
    return true;
}

bool ir_infer_norm_grad_add(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err,
                            size_t len)
{
    if (!ir_infer_norm_grad(m, in, a, r, err, len))
        return false;
    if (!same_shape(&a[3], &r[0]) || a[3].dtype != r[0].dtype)
        return fail(err, len, "residual gradient %s does not match dx %s", tstr(&a[3]), tstr(&r[0]));
    return true;
}

bool ir_infer_rope(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (!need_ndim(&a[0], 4, "rope input [B,T,H,D]", err, len))
        return false;
    if (a[0].dims[3] % 2)
        return fail(err, len, "rope needs an even head dimension, got %s", tstr(&a[0]));
    double rotary = in->attr[IR_ATTR_ROPE_ROTARY_DIM];
    if (rotary < 0 || rotary > (double)a[0].dims[3] || rotary != (double)(int64_t)rotary || (int64_t)rotary % 2)
        return fail(err, len, "rope's rotary_dim %g must be an even number of channels up to the head's, %s", rotary,
                    tstr(&a[0]));
    r[0] = a[0];
    return need_float(&a[0], "rope input", err, len);
}

/* kv_ranks: the context-parallel ranks whose keys k holds (1: the query's own sequence, or one
 * rank's chunks, ring attention's piece) */
static bool check_qkv(const ir_type *q, const ir_type *k, const ir_type *v, int64_t kv_ranks, char *err, size_t len)
{
    if (!need_ndim(q, 4, "q [B,T,H,D]", err, len) || !need_ndim(k, 4, "k [B,T,Hk,D]", err, len) ||
        !need_ndim(v, 4, "v [B,T,Hk,Dv]", err, len))
        return false;
    if (k->dtype != v->dtype || k->dims[0] != v->dims[0] || k->dims[1] != v->dims[1] || k->dims[2] != v->dims[2])
        return fail(err, len, "k %s and v %s differ but in the head dimension", tstr(k), tstr(v));
    if (q->dims[0] != k->dims[0] || q->dims[1] * kv_ranks != k->dims[1] || q->dims[3] != k->dims[3] ||
        q->dims[2] % k->dims[2])
        return fail(err, len, "q %s and k %s are not a (grouped-query) attention pair", tstr(q), tstr(k));
    return true;
}

/* The attention ops' attributes cp, cp_rank, ring, shift (ops.def): the cp ranks whose keys k
 * holds. cp > 1: q holds two equal chunks; ring = 1 needs cp > 1 and a shift below it. */
static bool cp_kv_ranks(const ir_instr *in, const ir_type *q, int64_t *kv_ranks, char *err, size_t len)
{
    const double *a = ir_attention_attrs(in);
    double cp = a[IR_ATTR_ATTENTION_CP], ring = a[IR_ATTR_ATTENTION_RING], shift = a[IR_ATTR_ATTENTION_SHIFT];
    *kv_ranks = 1;
    if (cp > 1 && q->ndim >= 2 && q->dims[1] % 2)
        return fail(err, len, "q %s under context parallelism (cp=%g) holds two equal chunks: its T must be even",
                    tstr(q), cp);
    if ((ring != 0 && ring != 1) || (ring == 1 && (cp < 2 || !whole_in(shift, cp - 1))) || (ring == 0 && shift != 0))
        return fail(err, len, "%s: ring=%g shift=%g with cp=%g (ring 0 or 1; ring 1 needs cp > 1 and shift in [0, cp))",
                    ir_ops[in->op].name, ring, shift, cp);
    *kv_ranks = ring == 0 && cp > 1 ? (int64_t)cp : 1;
    return true;
}

bool ir_infer_attention(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    int64_t kv_ranks;
    if (!cp_kv_ranks(in, &a[0], &kv_ranks, err, len) || !check_qkv(&a[0], &a[1], &a[2], kv_ranks, err, len))
        return false;
    r[0] = a[0];
    r[0].dims[3] = a[2].dims[3]; /* y [B,T,H,Dv] */
    int64_t lse[3] = {a[0].dims[0], a[0].dims[2], a[0].dims[1]}; /* [B,H,T] */
    r[1] = ir_tensor(IR_F32, 3, lse);
    return true;
}

/* lse f32[B,H,T] of q [B,T,H,D] */
static bool check_lse(const ir_type *lse, const ir_type *q, char *err, size_t len)
{
    if (lse->dtype != IR_F32 || lse->ndim != 3 || lse->dims[0] != q->dims[0] || lse->dims[1] != q->dims[2] ||
        lse->dims[2] != q->dims[1])
        return fail(err, len, "lse %s is not f32[B,H,T] for q %s", tstr(lse), tstr(q));
    return true;
}

/* (dy, q, k, v, y, lse) -> dq, dk, dv */
bool ir_infer_attention_grad(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    int64_t kv_ranks;
    if (!cp_kv_ranks(in, &a[1], &kv_ranks, err, len) || !check_qkv(&a[1], &a[2], &a[3], kv_ranks, err, len))
        return false;
    ir_type y = a[1];
    y.dims[3] = a[3].dims[3]; /* [B,T,H,Dv] */
    if (!same_shape(&a[0], &y) || !same_shape(&a[4], &y))
        return fail(err, len, "dy %s and y %s are not [B,T,H,Dv] of q %s and v %s", tstr(&a[0]), tstr(&a[4]),
                    tstr(&a[1]), tstr(&a[3]));
    if (!check_lse(&a[5], &a[1], err, len))
        return false;
    r[0] = a[1];
    r[1] = a[2];
    r[2] = a[3];
    return true;
}

/* (o1, lse1, o2, lse2) -> (o, lse): two ring pieces' outputs alike */
bool ir_infer_attention_merge(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err,
                              size_t len)
{
    if (!need_ndim(&a[0], 4, "o1 [B,T,H,D]", err, len) || !need_float(&a[0], "o1", err, len))
        return false;
    if (!same_shape(&a[0], &a[2]) || a[0].dtype != a[2].dtype)
        return fail(err, len, "attention_merge: o1 %s and o2 %s differ", tstr(&a[0]), tstr(&a[2]));
    if (!check_lse(&a[1], &a[0], err, len) || !check_lse(&a[3], &a[0], err, len))
        return false;
    r[0] = a[0];
    r[1] = a[1];
    return true;
}

/* q's heads [head_offset, head_offset + H) of the whole heads, and the first_sample operand */
static bool check_attention_dropout(const ir_instr *in, const ir_type *q, const ir_type *first, char *err, size_t len)
{
    if (!check_dropout_key(in, err, len) || !check_first_sample(first, err, len))
        return false;
    double head_offset = in->attr[IR_ATTR_ATTENTION_DROPOUT_HEAD_OFFSET];
    double heads = in->attr[IR_ATTR_ATTENTION_DROPOUT_HEADS];
    if (!whole_in(head_offset, 1e9) || !whole_in(heads, 1e9) || head_offset + (double)q->dims[2] > heads)
        return fail(err, len, "%s: the heads of q %s from head_offset %g exceed heads %g", ir_ops[in->op].name, tstr(q),
                    head_offset, heads);
    return true;
}

/* (q, k, v, first_sample) -> y, lse */
bool ir_infer_attention_dropout(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err,
                                size_t len)
{
    return ir_infer_attention(m, in, a, r, err, len) && check_attention_dropout(in, &a[0], &a[3], err, len);
}

/* (dy, q, k, v, y, lse, first_sample) -> dq, dk, dv */
bool ir_infer_attention_dropout_grad(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err,
                                     size_t len)
{
    return ir_infer_attention_grad(m, in, a, r, err, len) && check_attention_dropout(in, &a[1], &a[6], err, len);
}

static bool check_logits_targets(const ir_type *logits, const ir_type *targets, char *err, size_t len)
{
    if (targets->dtype != IR_I32 || logits->ndim != targets->ndim + 1)
        return fail(err, len, "cross entropy wants logits[*,V] and i32 targets[*], got %s, %s", tstr(logits), tstr(targets));
    for (int i = 0; i < targets->ndim; i++)
        if (logits->dims[i] != targets->dims[i])
            return fail(err, len, "logits %s and targets %s differ", tstr(logits), tstr(targets));
    return true;
}

bool ir_infer_cross_entropy(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    r[0] = ir_scalar(IR_F32);
    return check_logits_targets(&a[0], &a[1], err, len);
}

/* (dloss[], logits, targets) -> dlogits */
bool ir_infer_cross_entropy_grad(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (a[0].ndim != 0)
        return fail(err, len, "dloss must be a scalar, got %s", tstr(&a[0]));
    r[0] = a[1];
    return check_logits_targets(&a[1], &a[2], err, len);
}

/* (logits, targets, dloss[]) -> dlogits, loss f32[] (dlogits first: it may take the logits' bytes) */
bool ir_infer_cross_entropy_with_grad(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err,
                                      size_t len)
{
    if (a[2].ndim != 0)
        return fail(err, len, "dloss must be a scalar, got %s", tstr(&a[2]));
    r[0] = a[0];
    r[1] = ir_scalar(IR_F32);
    return check_logits_targets(&a[0], &a[1], err, len);
}

/* The collective's mesh axis (attribute 0), or IR_AXIS_NONE with err set. */
static ir_axis need_axis(const ir_instr *in, char *err, size_t len)
{
    int axis = (int)in->attr[IR_ATTR_AXIS];
    if (axis > IR_AXIS_NONE && axis < IR_NUM_AXES)
        return (ir_axis)axis;
    fail(err, len, "%s needs a mesh axis (1 dp .. %d %s), got %g", ir_ops[in->op].name, IR_NUM_AXES - 1,
         ir_axis_name(IR_NUM_AXES - 1), in->attr[IR_ATTR_AXIS]);
    return IR_AXIS_NONE;
}

/* Ranks along a mesh axis: the layout is compiled into the module's config. */
static int64_t axis_ranks(const ir_module *m, ir_axis axis) { return ir_module_mesh(m).degree[axis]; }

/* cp_all_to_all: heads=1 x[B,Tl,H,D] -> [B,Tl n,H/n,D]; heads=0 the inverse (Tl: two equal chunks) */
bool ir_infer_cp_all_to_all(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    ir_axis axis = need_axis(in, err, len);
    if (axis == IR_AXIS_NONE || !need_ndim(&a[0], 4, "cp_all_to_all operand [B,T,H,D]", err, len) ||
        !need_float(&a[0], "cp_all_to_all operand", err, len))
        return false;
    int64_t n = axis_ranks(m, axis);
    double heads_attr = in->attr[IR_ATTR_CP_ALL_TO_ALL_HEADS];
    bool heads = heads_attr != 0;
    int64_t split = heads ? a[0].dims[2] : a[0].dims[1], chunks = heads ? 2 : 2 * n;
    if (n < 1 || split % n || (heads ? a[0].dims[1] : a[0].dims[1] / n) % 2 || a[0].dims[1] % chunks)
        return fail(err, len, "cp_all_to_all {heads=%g} over %lld %s ranks: %s does not split into them", heads_attr,
                    (long long)n, ir_axis_name(axis), tstr(&a[0]));
    r[0] = ir_tensor(a[0].dtype, 4, a[0].dims);
    r[0].dims[1] = heads ? a[0].dims[1] * n : a[0].dims[1] / n;
    r[0].dims[2] = heads ? a[0].dims[2] / n : a[0].dims[2] * n;
    ir_shard_push(&r[0], heads ? 2 : 1, axis);
    return true;
}

/* An in-place collective on one tensor over a named mesh axis. */
bool ir_infer_collective(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (need_axis(in, err, len) == IR_AXIS_NONE)
        return false;
    if (in->nres) /* of any dtype the comms reduce (an MoE layer's i32 counts summed over cp) */
        r[0] = a[0];
    for (int i = 0; !in->nres && i < in->nargs; i++) /* all_reduce_inplace: a bucket of gradients */
        if (!need_float(&a[i], "collective operand", err, len))
            return false;
    return true;
}

/* x (any shape, N elements) -> r[N/n] {shard=[axis]}: one rank's block of the flattened x
 * (reduce_scatter, local_shard). Blocks are equal, so n must divide N. */
bool ir_infer_shard(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    ir_axis axis = need_axis(in, err, len);
    if (axis == IR_AXIS_NONE || !need_float(&a[0], "sharded operand", err, len))
        return false;
    int64_t n = axis_ranks(m, axis), numel = ir_numel(&a[0]);
    if (n < 1 || numel % n)
        return fail(err, len, "%s over %s: %s has %lld elements, not a multiple of the %lld ranks",
                    ir_ops[in->op].name, ir_axis_name(axis), tstr(&a[0]), (long long)numel, (long long)n);
    int64_t block = numel / n;
    r[0] = ir_tensor(a[0].dtype, 1, &block);
    ir_shard_push(&r[0], 0, axis);
    return true;
}

/* Sequence parallelism: x[B,T,*] (complete: T is the whole sequence) <-> [B,T/n,*] slices. */
/* bytes: the collective moves x's bytes (a gather: any dtype, MoE's expert ids too), else it sums
 * floats */
static bool seq_operand(const ir_module *m, const ir_instr *in, const ir_type *a, bool bytes, int64_t *n, char *err,
                        size_t len)
{
    ir_axis axis = need_axis(in, err, len);
    if (axis == IR_AXIS_NONE || (!bytes && !need_float(&a[0], "sequence-parallel operand", err, len)))
        return false;
    if (a[0].ndim < 2)
        return fail(err, len, "%s wants [B,T,...], got %s", ir_ops[in->op].name, tstr(&a[0]));
    *n = axis_ranks(m, axis);
    return true;
}

/* The dimension a sequence collective splits: 1, the sequence, or with attribute batch = 1, 0. */
static bool seq_dim(const ir_instr *in, int *dim, char *err, size_t len)
{
    if (in->attr[IR_ATTR_BATCH] != 0 && in->attr[IR_ATTR_BATCH] != 1)
        return fail(err, len, "%s: batch must be 0 (split the sequence) or 1 (split the batch rows), got %g",
                    ir_ops[in->op].name, in->attr[IR_ATTR_BATCH]);
    *dim = ir_seq_dim(in);
    return true;
}

bool ir_infer_seq_gather(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    int64_t n = 1;
    int dim = 1;
    if (!seq_operand(m, in, a, true, &n, err, len) || !seq_dim(in, &dim, err, len))
        return false;
    r[0] = ir_tensor(a[0].dtype, a[0].ndim, a[0].dims);
    r[0].dims[dim] *= n;
    return true;
}

bool ir_infer_seq_scatter(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    int64_t n = 1;
    int dim = 1;
    if (!seq_operand(m, in, a, false, &n, err, len) || !seq_dim(in, &dim, err, len))
        return false;
    if (a[0].dims[dim] % n)
        return fail(err, len, "%s: dimension %d of %s does not split into %lld slices", ir_ops[in->op].name, dim,
                    tstr(&a[0]), (long long)n);
    r[0] = ir_tensor(a[0].dtype, a[0].ndim, a[0].dims);
    r[0].dims[dim] /= n;
    ir_shard_push(&r[0], dim, (ir_axis)in->attr[IR_ATTR_AXIS]);
    return true;
}

/* The sequence-parallel matmul ops' operands (x[..,K], w[K,N] or with tb w[N,K]): *n the ranks,
 * *cols N, *dim the dimension split (seq_dim). */
static bool seq_matmul_operands(const ir_module *m, const ir_instr *in, const ir_type *a, int64_t *n, int64_t *cols,
                                int *dim, char *err, size_t len)
{
    if (!seq_operand(m, in, a, false, n, err, len) || !seq_dim(in, dim, err, len))
        return false;
    const ir_type *w = &a[1];
    bool tb = in->attr[IR_ATTR_ALL_GATHER_MATMUL_TB] != 0;
    if (w->ndim != 2 || w->dtype != a[0].dtype || (tb ? w->dims[1] : w->dims[0]) != a[0].dims[a[0].ndim - 1])
        return fail(err, len, "%s: %s does not multiply %s (tb=%d)", ir_ops[in->op].name, tstr(w), tstr(&a[0]), tb);
    *cols = tb ? w->dims[0] : w->dims[1];
    return true;
}

/* (x split by sequence slices or, batch = 1, batch rows, w) -> (x gathered, that times op(w)) */
bool ir_infer_gather_matmul(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    int64_t n = 1, cols = 0;
    int dim = 1;
    if (!seq_matmul_operands(m, in, a, &n, &cols, &dim, err, len))
        return false;
    r[0] = ir_tensor(a[0].dtype, a[0].ndim, a[0].dims);
    r[0].dims[dim] *= n;
    r[1] = r[0];
    r[1].dims[r[1].ndim - 1] = cols;
    return true;
}

/* (x[B,T,...,K], w) -> (scratch [2,B,T,...,N], this rank's block of the sum: [B,T/n,...,N], or
 * with batch = 1 [B/n,T,...,N]) */
bool ir_infer_matmul_scatter(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    int64_t n = 1, cols = 0;
    int dim = 1;
    if (!seq_matmul_operands(m, in, a, &n, &cols, &dim, err, len))
        return false;
    if (a[0].dims[dim] % n || a[0].ndim + 1 > IR_MAX_DIMS)
        return fail(err, len, "%s: dimension %d of %s does not split into %lld blocks", ir_ops[in->op].name, dim,
                    tstr(&a[0]), (long long)n);
    ir_type y = ir_tensor(a[0].dtype, a[0].ndim, a[0].dims);
    y.dims[y.ndim - 1] = cols;
    int64_t dims[IR_MAX_DIMS] = {2};
    for (int d = 0; d < y.ndim; d++)
        dims[d + 1] = y.dims[d];
    r[0] = ir_tensor(y.dtype, y.ndim + 1, dims);
    r[1] = y;
    r[1].dims[dim] /= n;
    ir_shard_push(&r[1], dim, (ir_axis)in->attr[IR_ATTR_AXIS]);
    return true;
}

/* (x, w, c) -> (s = x op(w) + c, scratch like s, this rank's batch rows of s summed over the ranks) */
bool ir_infer_matmul_add_scatter(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err,
                                 size_t len)
{
    ir_type two[2];
    if (!ir_infer_matmul_scatter(m, in, a, two, err, len))
        return false;
    ir_type s = ir_tensor(a[0].dtype, a[0].ndim, a[0].dims);
    s.dims[s.ndim - 1] = two[1].dims[two[1].ndim - 1];
    if (a[2].dtype != s.dtype || a[2].ndim != s.ndim || ir_numel(&a[2]) != ir_numel(&s))
        return fail(err, len, "matmul_add_reduce_scatter: the addend %s is not the product's shape %s", tstr(&a[2]),
                    tstr(&s));
    r[0] = r[1] = s;
    r[2] = two[1];
    return true;
}

/* x[S] {shard=[axis]} -> r[n*S]: the inverse of ir_infer_shard's layout. */
bool ir_infer_gather(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    ir_axis axis = need_axis(in, err, len);
    if (axis == IR_AXIS_NONE || !need_float(&a[0], "gathered operand", err, len))
        return false;
    if (a[0].ndim != 1 || !ir_shard_splits(&a[0], 0, axis))
        return fail(err, len, "all_gather over %s wants a 1-D block {shard=[%s]}, got %s", ir_axis_name(axis),
                    ir_axis_name(axis), tstr(&a[0]));
    int64_t full = a[0].dims[0] * axis_ranks(m, axis);
    r[0] = ir_tensor(a[0].dtype, 1, &full);
    return true;
}

/* (x[R,*], splits[n,S]) -> (r[rows,*], came[n,S]): n the axis's ranks. */
bool ir_infer_all_to_all_v(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    ir_axis axis = need_axis(in, err, len);
    if (axis == IR_AXIS_NONE || !need_float(&a[0], "all_to_all_v's rows", err, len))
        return false;
    int64_t rows = (int64_t)in->attr[IR_ATTR_ALL_TO_ALL_V_ROWS], n = axis_ranks(m, axis);
    if (in->attr[IR_ATTR_ALL_TO_ALL_V_CAPACITY] < 0)
        return fail(err, len, "all_to_all_v's capacity=%g: 0 (rows is the exact worst case) or the capacity factor "
                    "that sized rows", in->attr[IR_ATTR_ALL_TO_ALL_V_CAPACITY]);
    if (a[0].ndim < 1 || rows < 1 || rows != in->attr[IR_ATTR_ALL_TO_ALL_V_ROWS])
        return fail(err, len, "all_to_all_v sends the rows of %s into room for rows=%g: both need rows", tstr(&a[0]),
                    in->attr[IR_ATTR_ALL_TO_ALL_V_ROWS]);
    if (a[1].ndim != 2 || a[1].dims[0] != n || (a[1].dtype != IR_I32 && a[1].dtype != IR_I64))
        return fail(err, len, "all_to_all_v over %s wants splits i32|i64[%lld, S] (a row of runs for each of its %lld "
                    "ranks), got %s", ir_axis_name(axis), (long long)n, (long long)n, tstr(&a[1]));
    r[0] = ir_tensor(a[0].dtype, a[0].ndim, a[0].dims);
    r[0].dims[0] = rows;
    r[1] = ir_tensor(a[1].dtype, 2, a[1].dims);
    return true;
}

/* (x[C,*], came[n,S]) -> x's type (and moe_sort_runs' counts i32[S]) */
static bool infer_runs(const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (!need_float(&a[0], "the rows", err, len))
        return false;
    if (a[0].ndim < 1 || a[1].ndim != 2 || (a[1].dtype != IR_I32 && a[1].dtype != IR_I64))
        return fail(err, len, "%s reorders the runs of %s by all_to_all_v's came i32|i64[n,S], got %s",
                    ir_ops[in->op].name, tstr(&a[0]), tstr(&a[1]));
    r[0] = a[0];
    if (in->op == IR_OP_MOE_SORT_RUNS)
        r[1] = ir_tensor(IR_I32, 1, &a[1].dims[1]);
    return true;
}

bool ir_infer_moe_sort_runs(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    return infer_runs(in, a, r, err, len);
}

bool ir_infer_moe_unsort_runs(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    return infer_runs(in, a, r, err, len);
}

/* --- vocab-parallel cross entropy --- */

static bool rows_type(const ir_type *logits, int extra, ir_type *r)
{
    *r = ir_tensor(IR_F32, logits->ndim - 1 + (extra > 0), logits->dims);
    if (extra > 0)
        r->dims[logits->ndim - 1] = extra;
    return true;
}

bool ir_infer_ce_row_max(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (a[0].ndim < 1)
        return fail(err, len, "ce_row_max wants logits[*,V], got %s", tstr(&a[0]));
    return rows_type(&a[0], 0, r);
}

static bool check_rows(const ir_type *rows, const ir_type *logits, int extra, const char *what, char *err, size_t len)
{
    ir_type want;
    rows_type(logits, extra, &want);
    if (rows->dtype != IR_F32 || rows->ndim != want.ndim)
        return fail(err, len, "%s %s does not fit logits %s", what, tstr(rows), tstr(logits));
    for (int i = 0; i < want.ndim; i++)
        if (rows->dims[i] != want.dims[i])
            return fail(err, len, "%s %s does not fit logits %s", what, tstr(rows), tstr(logits));
    return true;
}

/* (logits, targets, gmax) */
bool ir_infer_ce_row_stats(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (!check_logits_targets(&a[0], &a[1], err, len) || !check_rows(&a[2], &a[0], 0, "gmax", err, len))
        return false;
    return rows_type(&a[0], 2, r);
}

/* (stats, gmax) */
bool ir_infer_ce_loss(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (a[0].ndim < 2 || a[0].dims[a[0].ndim - 1] != 2 || a[1].ndim != a[0].ndim - 1)
        return fail(err, len, "ce_loss wants stats[*,2] and gmax[*], got %s, %s", tstr(&a[0]), tstr(&a[1]));
    r[0] = ir_scalar(IR_F32);
    return true;
}

/* (dloss, logits, targets, gmax, stats) */
bool ir_infer_ce_grad_sharded(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (a[0].ndim != 0)
        return fail(err, len, "dloss must be a scalar, got %s", tstr(&a[0]));
    if (!check_logits_targets(&a[1], &a[2], err, len) || !check_rows(&a[3], &a[1], 0, "gmax", err, len) ||
        !check_rows(&a[4], &a[1], 2, "stats", err, len))
        return false;
    r[0] = a[1];
    return true;
}

/* (dst, x) of accumulate and copy: same shape, any float dtypes */
bool ir_infer_accumulate(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (!same_shape(&a[0], &a[1]))
        return fail(err, len, "%s into %s from %s", ir_ops[in->op].name, tstr(&a[0]), tstr(&a[1]));
    return true;
}

/* (p, g, m, v, lr[], step[], coef[][, copy]) */
bool ir_infer_adamw(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (in->nargs != 7 && in->nargs != 8)
        return fail(err, len, "adamw takes 7 operands, or 8 with the working copy it refreshes; got %d", in->nargs);
    if (in->nargs == 8 && (!same_shape(&a[0], &a[7]) || !need_float(&a[7], "working copy", err, len)))
        return fail(err, len, "adamw's working copy %s does not match parameter %s", tstr(&a[7]), tstr(&a[0]));
    if (a[0].dtype == IR_I16 && (in->nargs != 8 || a[7].dtype != IR_BF16)) /* the master as (copy, remainder) */
        return fail(err, len, "adamw on an i16 remainder %s needs the bf16 working copy holding the master's high "
                    "half as operand 8", tstr(&a[0]));
    if (a[0].dtype != IR_F32 && a[0].dtype != IR_I16)
        return fail(err, len, "adamw's parameter must be the f32 master or its i16 remainder, got %s", tstr(&a[0]));
    for (int i = 1; i < 4; i++)
        if (!same_shape(&a[0], &a[i]))
            return fail(err, len, "adamw state %s does not match parameter %s", tstr(&a[i]), tstr(&a[0]));
    for (int i = 4; i < 7; i++)
        if (a[i].ndim != 0)
            return fail(err, len, "adamw operand %d must be a scalar, got %s", i, tstr(&a[i]));
    return true;
}

/* --- mixture of experts (ops.def): tokens as rows, [N, *] --- */

static bool need_i32(const ir_type *t, int ndim, const char *what, char *err, size_t len)
{
    if (t->dtype != IR_I32 || t->ndim != ndim)
        return fail(err, len, "%s must be an i32 tensor of %d dimensions, got %s", what, ndim, tstr(t));
    return true;
}

static bool need_matrix(const ir_type *t, const char *what, char *err, size_t len)
{
    return need_ndim(t, 2, what, err, len) && need_float(t, what, err, len);
}

/* logits[N,E] and the routing attributes topk (<= E) and score (0 softmax, 1 sigmoid) */
static bool check_router(const ir_instr *in, const ir_type *logits, char *err, size_t len)
{
    if (!need_matrix(logits, "router logits [N,E]", err, len))
        return false;
    double k = in->attr[IR_ATTR_MOE_ROUTE_TOPK], score = in->attr[IR_ATTR_MOE_ROUTE_SCORE];
    if (!whole_in(k, (double)logits->dims[1]) || k < 1)
        return fail(err, len, "topk %.10g must be a whole number in [1, %lld], the experts of logits %s", k,
                    (long long)logits->dims[1], tstr(logits));
    if (score != 0 && score != 1)
        return fail(err, len, "score %.10g must be 0 (softmax) or 1 (sigmoid)", score);
    return true;
}

/* ids[N,k] of logits[N,E] */
static bool check_ids(const ir_type *ids, const ir_type *logits, double k, char *err, size_t len)
{
    if (!need_i32(ids, 2, "expert ids [N,k]", err, len))
        return false;
    if (ids->dims[0] != logits->dims[0] || ids->dims[1] != (int64_t)k)
        return fail(err, len, "expert ids %s do not fit logits %s with topk %.10g", tstr(ids), tstr(logits), k);
    return true;
}

/* An expert bias h: an EXPERT_BIAS global's value, f32[2,E] (ir.h) */
static bool need_expert_bias(const ir_instr *in, const ir_type *h, int64_t E, char *err, size_t len)
{
    if (h->dtype != IR_F32 || h->ndim != 2 || h->dims[0] != 2 || h->dims[1] != E)
        return fail(err, len, "%s's expert bias must be f32[2,%lld] (the step's counts, the bias), got %s",
                    ir_ops[in->op].name, (long long)E, tstr(h));
    return true;
}

/* moe_route's group-limited choice: groups 0 (none), or a divisor of the E experts of which the
 * best group_topk (1..groups) are kept, each scored by its top k/group_topk, and the k chosen among
 * their experts (so group_topk <= k <= group_topk E/groups) */
static bool check_groups(const ir_instr *in, int64_t E, char *err, size_t len)
{
    double groups = in->attr[IR_ATTR_MOE_ROUTE_GROUPS], group_topk = in->attr[IR_ATTR_MOE_ROUTE_GROUP_TOPK];
    double k = in->attr[IR_ATTR_MOE_ROUTE_TOPK];
    if (groups == 0 && group_topk == 0)
        return true;
    if (!whole_in(groups, (double)E) || groups < 1 || E % (int64_t)groups)
        return fail(err, len, "groups %.10g must be a whole divisor of the %lld experts", groups, (long long)E);
    if (!whole_in(group_topk, groups) || group_topk < 1)
        return fail(err, len, "group_topk %.10g must be a whole number in [1, %.10g], the groups", group_topk, groups);
    if (k < group_topk || k > group_topk * ((double)E / groups))
        return fail(err, len, "topk %.10g must lie in [group_topk %.10g, %.10g], the experts of the kept groups", k,
                    group_topk, group_topk * ((double)E / groups));
    return true;
}

/* logits[N,E][, h f32[2,E]] */
bool ir_infer_moe_route(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (in->nargs > 2)
        return fail(err, len, "moe_route takes the logits and at most an expert bias, got %d operands", in->nargs);
    if (!check_router(in, &a[0], err, len))
        return false;
    if (in->nargs == 2 && (!need_expert_bias(in, &a[1], a[0].dims[1], err, len)))
        return false;
    if (in->nargs == 2 && in->attr[IR_ATTR_MOE_ROUTE_SCORE] != 1)
        return fail(err, len, "moe_route with an expert bias takes sigmoid scores (score 1), got score %.10g",
                    in->attr[IR_ATTR_MOE_ROUTE_SCORE]);
    if (!check_groups(in, a[0].dims[1], err, len))
        return false;
    int64_t dims[2] = {a[0].dims[0], (int64_t)in->attr[IR_ATTR_MOE_ROUTE_TOPK]};
    r[0] = ir_tensor(a[0].dtype, 2, dims);
    r[1] = ir_tensor(IR_I32, 2, dims);
    return true;
}

/* (h, ids[N,k][, w like ids]) */
bool ir_infer_moe_bias_count(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (in->nargs < 2 || in->nargs > 3)
        return fail(err, len, "moe_bias_count takes the expert bias, the ids and maybe the kept weights, got %d operands",
                    in->nargs);
    if (!need_i32(&a[1], 2, "expert ids [N,k]", err, len) || !need_expert_bias(in, &a[0], a[0].dims[a[0].ndim > 1], err, len))
        return false;
    if (in->nargs == 3 && !same_shape(&a[2], &a[1]))
        return fail(err, len, "moe_bias_count's weights %s must be [N,k] as the ids %s", tstr(&a[2]), tstr(&a[1]));
    return true;
}

/* (h, r like h) */
bool ir_infer_moe_bias_update(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (!need_expert_bias(in, &a[0], a[0].dims[a[0].ndim > 1], err, len) || !same_shape(&a[0], &a[1]) ||
        a[1].dtype != IR_F32)
        return fail(err, len, "moe_bias_update: its operands are the expert bias f32[2,E] and one like it, got %s and %s",
                    tstr(&a[0]), tstr(&a[1]));
    return true;
}

/* (dw, logits, ids) */
bool ir_infer_moe_route_grad(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err,
                             size_t len)
{
    if (!check_router(in, &a[1], err, len) || !check_ids(&a[2], &a[1], in->attr[IR_ATTR_MOE_ROUTE_GRAD_TOPK], err, len))
        return false;
    if (!need_matrix(&a[0], "dw [N,k]", err, len) || !same_shape(&a[0], &a[2]))
        return fail(err, len, "dw %s must be [N,k] as the ids %s", tstr(&a[0]), tstr(&a[2]));
    r[0] = a[1];
    return true;
}

/* (x, w, ids), all [N,k] */
bool ir_infer_moe_capacity(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (!need_matrix(&a[0], "moe_capacity x [N,k]", err, len) || !need_matrix(&a[1], "weights [N,k]", err, len) ||
        !need_i32(&a[2], 2, "expert ids [N,k]", err, len))
        return false;
    if (!same_shape(&a[0], &a[1]) || !same_shape(&a[0], &a[2]))
        return fail(err, len, "moe_capacity's x %s, weights %s and ids %s differ", tstr(&a[0]), tstr(&a[1]), tstr(&a[2]));
    double capacity = in->attr[IR_ATTR_MOE_CAPACITY_CAPACITY], policy = in->attr[IR_ATTR_MOE_CAPACITY_POLICY];
    if (!whole_in(capacity, 1e12) || (policy != 0 && policy != 1))
        return fail(err, len, "moe_capacity wants a whole capacity and policy 0 (probs) or 1 (position), got %.10g, %.10g",
                    capacity, policy);
    double cp_attr = in->attr[IR_ATTR_MOE_CAPACITY_CP], seq_attr = in->attr[IR_ATTR_MOE_CAPACITY_SEQ];
    int64_t cp = (int64_t)cp_attr, seq = (int64_t)seq_attr;
    if (cp_attr > 1 && (!whole_in(cp_attr, 1 << 20) || !whole_in(seq_attr, 1e12) || seq % (2 * cp) ||
                        a[0].dims[0] % seq))
        return fail(err, len, "moe_capacity over cp %.10g wants rows %s of whole sequences of seq=%.10g tokens, a "
                    "multiple of 2 cp", cp_attr, tstr(&a[0]), seq_attr);
    r[0] = a[0];
    return true;
}

bool ir_infer_moe_sort(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (in->nargs > 2)
        return fail(err, len, "moe_sort takes the ids and maybe the kept weights, got %d operands", in->nargs);
    if (!need_i32(&a[0], 2, "expert ids [N,k]", err, len))
        return false;
    if (in->nargs == 2 && (!same_shape(&a[1], &a[0]) || (a[1].dtype != IR_F32 && a[1].dtype != IR_BF16)))
        return fail(err, len, "moe_sort's kept weights %s must be f32 or bf16 [N,k] as the ids %s", tstr(&a[1]),
                    tstr(&a[0]));
    if (!whole_in(in->attr[IR_ATTR_MOE_SORT_EXPERTS], 1e9) || in->attr[IR_ATTR_MOE_SORT_EXPERTS] < 1)
        return fail(err, len, "experts %.10g must be a whole number >= 1", in->attr[IR_ATTR_MOE_SORT_EXPERTS]);
    int64_t n = ir_numel(&a[0]), e = (int64_t)in->attr[IR_ATTR_MOE_SORT_EXPERTS];
    r[0] = ir_tensor(IR_I32, 1, &n);
    r[1] = ir_tensor(IR_I32, 1, &e);
    return true;
}

/* perm i32[R] */
static bool check_perm(const ir_type *perm, int64_t rows, char *err, size_t len)
{
    if (!need_i32(perm, 1, "perm [N k]", err, len))
        return false;
    if (perm->dims[0] != rows)
        return fail(err, len, "perm %s must have the %lld routed rows", tstr(perm), (long long)rows);
    return true;
}

/* (x[N,H], perm[R]) -> [R,H], R a multiple of N */
bool ir_infer_moe_permute(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (!need_matrix(&a[0], "moe_permute x [N,H]", err, len) || !need_i32(&a[1], 1, "perm [N k]", err, len))
        return false;
    if (a[0].dims[0] == 0 || a[1].dims[0] % a[0].dims[0])
        return fail(err, len, "perm %s must hold k rows for each of the %lld tokens of %s", tstr(&a[1]),
                    (long long)a[0].dims[0], tstr(&a[0]));
    int64_t dims[2] = {a[1].dims[0], a[0].dims[1]};
    r[0] = ir_tensor(a[0].dtype, 2, dims);
    return true;
}

/* yp[N k,H], perm[N k], w[N,k] */
static bool check_combine(const ir_type *yp, const ir_type *perm, const ir_type *w, char *err, size_t len)
{
    if (!need_matrix(yp, "moe_unpermute yp [N k,H]", err, len) || !need_matrix(w, "weights [N,k]", err, len) ||
        !check_perm(perm, ir_numel(w), err, len))
        return false;
    if (yp->dims[0] != ir_numel(w))
        return fail(err, len, "yp %s must have a row for each of the %lld (token, slot) pairs of weights %s",
                    tstr(yp), (long long)ir_numel(w), tstr(w));
    return true;
}

bool ir_infer_moe_unpermute(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err,
                            size_t len)
{
    if (!check_combine(&a[0], &a[1], &a[2], err, len))
        return false;
    int64_t dims[2] = {a[2].dims[0], a[0].dims[1]};
    r[0] = ir_tensor(a[0].dtype, 2, dims);
    return true;
}

/* (dy[N,H], yp, perm, w) -> (dyp, dw) */
bool ir_infer_moe_unpermute_grad(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err,
                                 size_t len)
{
    if (!check_combine(&a[1], &a[2], &a[3], err, len) || !need_matrix(&a[0], "dy [N,H]", err, len))
        return false;
    if (a[0].dims[0] != a[3].dims[0] || a[0].dims[1] != a[1].dims[1])
        return fail(err, len, "dy %s does not fit yp %s and weights %s", tstr(&a[0]), tstr(&a[1]), tstr(&a[3]));
    r[0] = a[1];
    r[1] = a[3];
    return true;
}

/* (x[R,K], w[E,F,K] or [E,K,F], counts[E]) -> [R,F] */
bool ir_infer_moe_grouped_matmul(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err,
                                 size_t len)
{
    if (!need_matrix(&a[0], "grouped matmul x [R,K]", err, len) ||
        !need_ndim(&a[1], 3, "expert weights [E,F,K]", err, len) || !need_float(&a[1], "expert weights", err, len) ||
        !need_i32(&a[2], 1, "counts [E]", err, len))
        return false;
    bool tb = in->attr[IR_ATTR_MOE_GROUPED_MATMUL_TB] != 0;
    int64_t k = a[1].dims[tb ? 2 : 1], f = a[1].dims[tb ? 1 : 2];
    if (a[2].dims[0] != a[1].dims[0] || a[0].dims[1] != k)
        return fail(err, len, "grouped matmul of x %s by %s expert weights %s with counts %s: the experts or the "
                    "inner dimension differ", tstr(&a[0]), tb ? "[E,F,K]" : "[E,K,F]", tstr(&a[1]), tstr(&a[2]));
    int64_t dims[2] = {a[0].dims[0], f};
    r[0] = ir_tensor(a[0].dtype, 2, dims);
    return true;
}

/* (a[R,P], b[R,Q], counts[E]) -> [E,P,Q] */
bool ir_infer_moe_grouped_wgrad(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err,
                                size_t len)
{
    if (!need_matrix(&a[0], "grouped wgrad a [R,P]", err, len) || !need_matrix(&a[1], "grouped wgrad b [R,Q]", err, len) ||
        !need_i32(&a[2], 1, "counts [E]", err, len))
        return false;
    if (a[0].dims[0] != a[1].dims[0])
        return fail(err, len, "grouped wgrad operands %s and %s have different rows", tstr(&a[0]), tstr(&a[1]));
    int64_t dims[3] = {a[2].dims[0], a[0].dims[1], a[1].dims[1]};
    r[0] = ir_tensor(IR_F32, 3, dims);
    return true;
}

/* (dst, a, b, counts): dst has the shape of moe_grouped_wgrad(a, b, counts), in any float dtype */
bool ir_infer_moe_grouped_wgrad_accumulate(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r,
                                           char *err, size_t len)
{
    return check_accumulate(m, in, a, err, len, ir_infer_moe_grouped_wgrad);
}

/* FP8 experts (ops.def): the groups of x a per-expert scale covers, E, and whether they are rows
 * by counts (x[R,K], counts i32[E]) or x's leading index (an expert weight [E, ...]) */
static bool fp8_groups(const ir_instr *in, const ir_type *x, const ir_type *counts, int64_t *E, char *err, size_t len)
{
    if (!need_float(x, "operand", err, len) || ir_dtype_is_fp8(x->dtype))
        return fail(err, len, "%s of %s: it reads a wider float tensor", ir_ops[in->op].name, tstr(x));
    if (counts) {
        if (!need_matrix(x, "expert rows x [R,K]", err, len) || !need_i32(counts, 1, "counts [E]", err, len))
            return false;
        *E = counts->dims[0];
        return true;
    }
    if (x->ndim < 2)
        return fail(err, len, "%s of %s without counts: an expert weight [E, ...]", ir_ops[in->op].name, tstr(x));
    *E = x->dims[0];
    return true;
}

/* (x[R,K], counts[E]) or (w[E,...]) -> f32[E] */
bool ir_infer_fp8_grouped_amax(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err,
                               size_t len)
{
    int64_t E;
    if (in->nargs > 2 || !fp8_groups(in, &a[0], in->nargs == 2 ? &a[1] : NULL, &E, err, len))
        return in->nargs > 2 ? fail(err, len, "fp8_grouped_amax takes x and counts, or an expert weight alone") : false;
    r[0] = ir_tensor(IR_F32, 1, &E);
    return true;
}

/* (x, amax f32[E][, counts]) -> (q like x in the format's fp8 dtype, scale_inv f32[E]) */
bool ir_infer_fp8_grouped_quantize(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err,
                                   size_t len)
{
    double format = in->attr[IR_ATTR_FP8_GROUPED_QUANTIZE_FORMAT];
    if (format != IR_FP8_E4M3 && format != IR_FP8_E5M2)
        return fail(err, len, "fp8_grouped_quantize format %g: 0 (E4M3) or 1 (E5M2)", format);
    int64_t E = 0;
    if (in->nargs < 2 || in->nargs > 3)
        return fail(err, len, "fp8_grouped_quantize takes (x, amax, counts) or (an expert weight, amax)");
    if (!fp8_groups(in, &a[0], in->nargs == 3 ? &a[2] : NULL, &E, err, len))
        return false;
    if (a[1].dtype != IR_F32 || a[1].ndim != 1 || a[1].dims[0] != E)
        return fail(err, len, "fp8_grouped_quantize's amax operand: f32[%lld], an amax an expert, got %s", (long long)E,
                    tstr(&a[1]));
    r[0] = a[0];
    r[0].dtype = ir_fp8_dtype((ir_fp8_format)format);
    r[1] = a[1];
    return true;
}

/* Operand i of an FP8 grouped GEMM: an fp8 tensor and, at i + 1, its scale_inv f32[E], or
 * blockwise (the first operand's scale_inv 2-D) its tiles' or blocks' (ir_fp8_scale_blocks) */
static bool need_fp8_grouped(const ir_instr *in, const ir_type *a, int i, int64_t E, char *err, size_t len)
{
    int64_t rows, cols;
    if (ir_fp8_grouped_blockwise(&a[1]))
        return ir_dtype_is_fp8(a[i].dtype) && a[i + 1].ndim == 2 && ir_fp8_scale_blocks(&a[i], &a[i + 1], &rows, &cols)
                   ? true
                   : fail(err, len, "%s operand %d: blockwise, an fp8 tensor and its scale_inv in 1x128 tiles or "
                          "128x128 blocks (fp8_block_quantize's), got %s and %s", ir_ops[in->op].name, i, tstr(&a[i]),
                          tstr(&a[i + 1]));
    if (!ir_dtype_is_fp8(a[i].dtype) || a[i + 1].dtype != IR_F32 || a[i + 1].ndim != 1 || a[i + 1].dims[0] != E)
        return fail(err, len, "%s operand %d: an fp8 tensor and its scale_inv f32[%lld], a scale an expert, got %s and "
                    "%s", ir_ops[in->op].name, i, (long long)E, tstr(&a[i]), tstr(&a[i + 1]));
    return true;
}

/* (qx[R,K], sx[E], qw[E,F,K] or [E,K,F], sw[E], counts[E][, hdy f32[E, 1 + len]]) -> [R,F] in the
 * activations' dtype */
bool ir_infer_fp8_grouped_matmul(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err,
                                 size_t len)
{
    if (in->nargs != 5 && in->nargs != 6)
        return fail(err, len, "fp8_grouped_matmul takes 5 operands (qx, sx, qw, sw, counts) or 6 (and dy's amax "
                    "history), got %d", in->nargs);
    if (!need_i32(&a[4], 1, "counts [E]", err, len) || !need_fp8_grouped(in, a, 0, a[4].dims[0], err, len) ||
        !need_fp8_grouped(in, a, 2, a[4].dims[0], err, len) || (in->nargs == 6 && !need_fp8_history(in, &a[5], err, len)))
        return false;
    ir_type ops[3] = {a[0], a[2], a[4]};
    ops[0].dtype = ops[1].dtype = IR_F32; /* E4M3 x E5M2 mixes: the shapes are what matter */
    double tb = in->attr[IR_ATTR_FP8_GROUPED_MATMUL_TB];
    int64_t rows = 1, cols;
    if (ir_fp8_grouped_blockwise(&a[1]) && (tb == 0 || (ir_fp8_scale_blocks(&a[0], &a[1], &rows, &cols), rows != 1)))
        return fail(err, len, "fp8_grouped_matmul of block-scaled operands takes the rows in 1x128 tiles and the weight "
                    "K-major ([E,F,K], tb=1), as cuBLASLt's block-scaled GEMMs do");
    ir_instr plain = {.op = IR_OP_MOE_GROUPED_MATMUL, .nargs = 3, .attr = {[IR_ATTR_MOE_GROUPED_MATMUL_TB] = tb}};
    if (!ir_infer_moe_grouped_matmul(m, &plain, ops, r, err, len))
        return false;
    r[0].dtype = (ir_dtype)ir_cfg_choice(m, IR_CFG_PARAM_DTYPE);
    return true;
}

/* (qa[R,P], sa[E], qb[R,Q], sb[E], counts[E]) -> f32[E,P,Q]; blockwise qa[P,R'], qb[Q,R'] */
bool ir_infer_fp8_grouped_wgrad(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err,
                                size_t len)
{
    if (!need_i32(&a[4], 1, "counts [E]", err, len) || !need_fp8_grouped(in, a, 0, a[4].dims[0], err, len) ||
        !need_fp8_grouped(in, a, 2, a[4].dims[0], err, len))
        return false;
    ir_type ops[3] = {a[0], a[2], a[4]};
    ops[0].dtype = ops[1].dtype = IR_F32;
    if (!ir_fp8_grouped_blockwise(&a[1]))
        return ir_infer_moe_grouped_wgrad(m, in, ops, r, err, len);
    if (a[0].ndim != 2 || a[2].ndim != 2 || a[0].dims[1] != a[2].dims[1]) /* [P, R'] and [Q, R'] */
        return fail(err, len, "fp8_grouped_wgrad of block-scaled operands takes the experts' rows transposed, [P, R'] "
                    "and [Q, R'] (fp8_block_quantize with counts), got %s and %s", tstr(&a[0]), tstr(&a[2]));
    r[0] = ir_tensor(IR_F32, 3, (int64_t[]){a[4].dims[0], a[0].dims[0], a[2].dims[0]});
    return true;
}

/* (dst, qa, sa, qb, sb, counts): dst has the shape of fp8_grouped_wgrad(qa, sa, qb, sb, counts) */
bool ir_infer_fp8_grouped_wgrad_accumulate(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r,
                                           char *err, size_t len)
{
    return check_accumulate(m, in, a, err, len, ir_infer_fp8_grouped_wgrad);
}

/* The aux loss's logits[N,E], ids[N,k] and seq: 0, or the tokens of a sequence (a whole divisor of N) */
static bool check_aux_loss(const ir_instr *in, const ir_type *logits, const ir_type *ids, char *err, size_t len)
{
    if (!check_router(in, logits, err, len) || !check_ids(ids, logits, in->attr[IR_ATTR_MOE_AUX_LOSS_TOPK], err, len))
        return false;
    double seq = in->attr[IR_ATTR_MOE_AUX_LOSS_SEQ];
    if (seq != 0 && (!whole_in(seq, (double)logits->dims[0]) || seq < 1 || logits->dims[0] % (int64_t)seq))
        return fail(err, len, "seq %.10g must be 0 (one loss over all tokens) or the tokens of a sequence, a whole "
                    "divisor of the %lld rows of logits %s", seq, (long long)logits->dims[0], tstr(logits));
    return true;
}

/* (logits, ids) -> f32[] */
bool ir_infer_moe_aux_loss(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (!check_aux_loss(in, &a[0], &a[1], err, len))
        return false;
    r[0] = ir_scalar(IR_F32);
    return true;
}

bool ir_infer_moe_z_loss(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err, size_t len)
{
    if (!need_matrix(&a[0], "router logits [N,E]", err, len))
        return false;
    r[0] = ir_scalar(IR_F32);
    return true;
}

/* (dloss[], logits[, ids]) -> dlogits: the aux and z losses' gradients */
bool ir_infer_moe_loss_grad(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err,
                            size_t len)
{
    if (a[0].ndim != 0)
        return fail(err, len, "dloss must be a scalar, got %s", tstr(&a[0]));
    if (in->nargs == 3 ? !check_aux_loss(in, &a[1], &a[2], err, len)
                       : !need_matrix(&a[1], "router logits [N,E]", err, len))
        return false;
    r[0] = a[1];
    return true;
}

/* (x, loss[]) -> x */
bool ir_infer_moe_aux_attach(const ir_module *m, const ir_instr *in, const ir_type *a, ir_type *r, char *err,
                             size_t len)
{
    if (a[1].ndim != 0 || !need_float(&a[1], "the attached loss", err, len))
        return fail(err, len, "the attached loss must be a scalar, got %s", tstr(&a[1]));
    r[0] = a[0];
    return need_float(&a[0], "moe_aux_attach x", err, len);
}
