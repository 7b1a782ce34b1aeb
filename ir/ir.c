/* ir.c — the op table, types, module construction and the instruction builder. */
#include "ir.h"

#include <assert.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- op table ------------------------------------------------------------------------- */

#define X(id, text, nargs, nres, inplace, flags, attrs, infer, grad, shard) \
    bool infer(const ir_module *, const ir_instr *, const ir_type *, ir_type *, char *, size_t);
#include "ops.def"
#undef X
#define X(id, text, nargs, nres, inplace, flags, attrs, infer, grad, shard) void grad(struct ir_grad_ctx *, const ir_func *, const ir_instr *);
#include "ops.def"
#undef X

/* Each op's attribute list as ops.def spells it, "CP, CP_RANK"; the text form's names are these
 * in lower case. */
#define ATTR_TEXT(...) #__VA_ARGS__
static const char *const op_attr_specs[IR_NUM_OPS] = {
#define X(id, text, nargs, nres, inplace, flags, attrs, infer, grad, shard) [IR_OP_##id] = ATTR_TEXT attrs,
#include "ops.def"
#undef X
};
#undef ATTR_TEXT
#define X(id, text, nargs, nres, inplace, flags, attrs, infer, grad, shard) \
    _Static_assert(IR_NATTRS_##id <= IR_MAX_ATTRS, "ops.def: " text " has more than IR_MAX_ATTRS attributes");
#include "ops.def"
#undef X

ir_op_info ir_ops[IR_NUM_OPS] = {
#define X(id, text, nargs, nres, inplace, flags, attrs, infer, grad, shard) \
    [IR_OP_##id] = {text, nargs, nres, inplace, flags, {0}, 0, infer, grad, IR_SHARD_##shard, -1, 0, -1},
#include "ops.def"
#undef X
};

/* The families whose code indexes one op's names for all (ir.h) */
#define SAME_ATTR(a, b) _Static_assert((int)IR_ATTR_##a == (int)IR_ATTR_##b, "ops.def: " #a " and " #b " must match");
#define SAME_AXIS(op) SAME_ATTR(AXIS, op##_AXIS)
SAME_AXIS(ALL_GATHER_SEQ) SAME_AXIS(REDUCE_SCATTER_SEQ) SAME_AXIS(ALL_GATHER_MATMUL) SAME_AXIS(MATMUL_REDUCE_SCATTER)
SAME_AXIS(MATMUL_ADD_REDUCE_SCATTER) SAME_AXIS(ALL_REDUCE_INPLACE) SAME_AXIS(REDUCE_SCATTER) SAME_AXIS(ALL_GATHER)
SAME_AXIS(ALL_TO_ALL_V) SAME_AXIS(RING_SHIFT) SAME_AXIS(CP_ALL_TO_ALL) SAME_AXIS(LOCAL_SHARD) SAME_AXIS(LOCAL_SLICE_SEQ)
SAME_ATTR(BATCH, REDUCE_SCATTER_SEQ_BATCH) SAME_ATTR(BATCH, LOCAL_SLICE_SEQ_BATCH)
SAME_ATTR(BATCH, ALL_GATHER_MATMUL_BATCH) SAME_ATTR(BATCH, MATMUL_REDUCE_SCATTER_BATCH)
SAME_ATTR(BATCH, MATMUL_ADD_REDUCE_SCATTER_BATCH)
SAME_ATTR(SEQ_OVERLAP, REDUCE_SCATTER_SEQ_OVERLAP) SAME_ATTR(SEQ_OVERLAP, LOCAL_SLICE_SEQ_OVERLAP)
#define SAME_MATMUL(op) SAME_ATTR(TA, op##_TA) SAME_ATTR(TB, op##_TB)
SAME_MATMUL(MATMUL_BIAS) SAME_MATMUL(MATMUL_ACCUMULATE) SAME_MATMUL(MATMUL_ADD) SAME_MATMUL(MATMUL_BIAS_ADD)
SAME_MATMUL(MATMUL_BIAS_GELU) SAME_MATMUL(MATMUL_DGELU_BGRAD) SAME_MATMUL(FP8_MATMUL)
SAME_MATMUL(FP8_MATMUL_ACCUMULATE) SAME_MATMUL(FP8_MATMUL_ADD) SAME_ATTR(MATMUL_ACCUMULATE_ASSIGN, FP8_MATMUL_ACCUMULATE_ASSIGN)
SAME_ATTR(TB, ALL_GATHER_MATMUL_TB) SAME_ATTR(TB, MATMUL_REDUCE_SCATTER_TB) SAME_ATTR(TB, MATMUL_ADD_REDUCE_SCATTER_TB)
#define SAME_KEY(op) SAME_ATTR(DROPOUT_P, op##_P) SAME_ATTR(DROPOUT_SEED, op##_SEED) SAME_ATTR(DROPOUT_SITE, op##_SITE)
SAME_KEY(ATTENTION_DROPOUT) SAME_KEY(ATTENTION_DROPOUT_GRAD)
#define SAME_ATTENTION(a, b)                                                                                \
    SAME_ATTR(a##_CP, b##_CP) SAME_ATTR(a##_CP_RANK, b##_CP_RANK) SAME_ATTR(a##_RING, b##_RING)             \
    SAME_ATTR(a##_SHIFT, b##_SHIFT)
SAME_ATTENTION(ATTENTION, ATTENTION_GRAD) SAME_ATTENTION(ATTENTION_DROPOUT, ATTENTION_DROPOUT_GRAD)
SAME_ATTR(ATTENTION_DROPOUT_HEAD_OFFSET, ATTENTION_DROPOUT_GRAD_HEAD_OFFSET)
SAME_ATTR(ATTENTION_DROPOUT_HEADS, ATTENTION_DROPOUT_GRAD_HEADS)
#define SAME_ROUTER(op) SAME_ATTR(MOE_ROUTE_TOPK, op##_TOPK) SAME_ATTR(MOE_ROUTE_SCORE, op##_SCORE)
SAME_ROUTER(MOE_ROUTE_GRAD) SAME_ROUTER(MOE_AUX_LOSS) SAME_ROUTER(MOE_AUX_LOSS_GRAD)
SAME_ATTR(MOE_ROUTE_PRE_SOFTMAX, MOE_ROUTE_GRAD_PRE_SOFTMAX) SAME_ATTR(MOE_ROUTE_SCALING, MOE_ROUTE_GRAD_SCALING)
SAME_ATTR(EPS, LAYERNORM_GRAD_EPS) SAME_ATTR(EPS, LAYERNORM_GRAD_ADD_EPS) SAME_ATTR(EPS, RMSNORM_EPS)
SAME_ATTR(EPS, RMSNORM_GRAD_EPS) SAME_ATTR(EPS, RMSNORM_GRAD_ADD_EPS)
SAME_ATTR(ONE_P, LAYERNORM_GRAD_ONE_P) SAME_ATTR(ONE_P, LAYERNORM_GRAD_ADD_ONE_P) SAME_ATTR(ONE_P, RMSNORM_ONE_P)
SAME_ATTR(ONE_P, RMSNORM_GRAD_ONE_P) SAME_ATTR(ONE_P, RMSNORM_GRAD_ADD_ONE_P)
SAME_ATTR(SCALAR, FILL_VALUE)
SAME_ATTR(MOE_AUX_LOSS_SEQ, MOE_AUX_LOSS_GRAD_SEQ)
/* ir_attention_attrs: the dropout twins' cp, cp_rank, ring, shift in attention's order */
SAME_ATTR(ATTENTION_CP_RANK - IR_ATTR_ATTENTION_CP, ATTENTION_DROPOUT_CP_RANK - IR_ATTR_ATTENTION_DROPOUT_CP)
SAME_ATTR(ATTENTION_RING - IR_ATTR_ATTENTION_CP, ATTENTION_DROPOUT_RING - IR_ATTR_ATTENTION_DROPOUT_CP)
SAME_ATTR(ATTENTION_SHIFT - IR_ATTR_ATTENTION_CP, ATTENTION_DROPOUT_SHIFT - IR_ATTR_ATTENTION_DROPOUT_CP)
/* ir_pos_attrs: pos_add_grad's offset, extent, cp, cp_rank in pos_add's order */
SAME_ATTR(POS_ADD_EXTENT - IR_ATTR_POS_ADD_OFFSET, POS_ADD_GRAD_EXTENT - IR_ATTR_POS_ADD_GRAD_OFFSET)
SAME_ATTR(POS_ADD_CP - IR_ATTR_POS_ADD_OFFSET, POS_ADD_GRAD_CP - IR_ATTR_POS_ADD_GRAD_OFFSET)
SAME_ATTR(POS_ADD_CP_RANK - IR_ATTR_POS_ADD_OFFSET, POS_ADD_GRAD_CP_RANK - IR_ATTR_POS_ADD_GRAD_OFFSET)
#undef SAME_ROUTER
#undef SAME_ATTENTION
#undef SAME_KEY
#undef SAME_MATMUL
#undef SAME_AXIS
#undef SAME_ATTR

static bool ops_ready;

/* Attributes added to an op after plans with it were written, whose 0 keeps the op's earlier
 * meaning: printed only when set, so those plans' texts stay as they were (an attribute the text
 * leaves out parses as 0). */
static const struct {
    ir_op op;
    int attr;
} attrs_printed_when_set[] = {
    {IR_OP_LAYERNORM, IR_ATTR_ONE_P},     {IR_OP_LAYERNORM_GRAD, IR_ATTR_ONE_P}, {IR_OP_LAYERNORM_GRAD_ADD, IR_ATTR_ONE_P},
    {IR_OP_RMSNORM, IR_ATTR_ONE_P},       {IR_OP_RMSNORM_GRAD, IR_ATTR_ONE_P},   {IR_OP_RMSNORM_GRAD_ADD, IR_ATTR_ONE_P},
    {IR_OP_ROPE, IR_ATTR_ROPE_ROTARY_DIM},  {IR_OP_ROPE, IR_ATTR_ROPE_YARN_CONTEXT},      {IR_OP_ROPE, IR_ATTR_ROPE_BETA_FAST},
    {IR_OP_ROPE, IR_ATTR_ROPE_BETA_SLOW},   {IR_OP_ROPE, IR_ATTR_ROPE_MSCALE},            {IR_OP_ROPE, IR_ATTR_ROPE_MSCALE_ALL_DIM},
    {IR_OP_MOE_ROUTE, IR_ATTR_MOE_ROUTE_GROUPS}, {IR_OP_MOE_ROUTE, IR_ATTR_MOE_ROUTE_GROUP_TOPK},
    {IR_OP_MATMUL, IR_ATTR_MATMUL_RECOMPUTE},     {IR_OP_FP8_MATMUL, IR_ATTR_FP8_MATMUL_RECOMPUTE},
    {IR_OP_ALL_TO_ALL_V, IR_ATTR_ALL_TO_ALL_V_UNREAD_ROOM}, {IR_OP_DROPOUT, IR_ATTR_DROPOUT_NORMAL},
};

/* Splits each "A, B" attribute list once into lower-case names; they point into a static copy. */
void ir_ops_init(void)
{
    if (ops_ready)
        return;
    for (int op = 0; op < IR_NUM_OPS; op++) {
        char *copy = strdup(op_attr_specs[op]);
        for (char *c = copy; *c; c++)
            *c = (char)tolower((unsigned char)*c);
        int n = 0;
        for (char *tok = strtok(copy, ", "); tok && n < IR_MAX_ATTRS; tok = strtok(NULL, ", "))
            ir_ops[op].attr_names[n++] = tok;
        ir_ops[op].nattrs = n;
        if (!n)
            free(copy);
    }
    ops_ready = true;
    for (int op = 0; op < IR_NUM_OPS; op++) {
        ir_ops[op].axis_attr = ir_attr_index(op, "axis");
        ir_ops[op].amax_attr = ir_attr_index(op, "amax");
        if (ir_ops[op].amax_attr >= 0) /* the fusion pass's, 0 elsewhere: plans without it print as before */
            ir_ops[op].printed_when_set |= 1u << ir_ops[op].amax_attr;
    }
    for (size_t i = 0; i < sizeof attrs_printed_when_set / sizeof *attrs_printed_when_set; i++)
        ir_ops[attrs_printed_when_set[i].op].printed_when_set |= 1u << attrs_printed_when_set[i].attr;
}

bool ir_op_nargs_ok(ir_op op, int nargs)
{
    const ir_op_info *info = &ir_ops[op];
    if (info->nargs < 0)
        return nargs >= 1;
    return nargs == info->nargs || (ir_op_has(op, IR_OPF_ROW_BOUND) && nargs == info->nargs + 1);
}

int ir_op_by_name(const char *name)
{
    ir_ops_init();
    for (int op = 0; op < IR_NUM_OPS; op++)
        if (strcmp(ir_ops[op].name, name) == 0)
            return op;
    return -1;
}

int ir_attr_index(ir_op op, const char *name)
{
    ir_ops_init();
    for (int i = 0; i < ir_ops[op].nattrs; i++)
        if (strcmp(ir_ops[op].attr_names[i], name) == 0)
            return i;
    return -1;
}

/* --- types ------------------------------------------------------------------------------ */

static const char *const dtype_names[IR_NUM_DTYPES] = {"f32", "bf16", "f16", "fp8e4m3", "fp8e5m2", "i32", "i64", "i16"};
static const size_t dtype_sizes[IR_NUM_DTYPES] = {4, 2, 2, 1, 1, 4, 8, 2};
static const char *const axis_names[IR_NUM_AXES] = {"-", "dp", "pp", "tp", "cp", "ep", "edp", "dp_cp"};

const char *ir_dtype_name(ir_dtype t) { return dtype_names[t]; }
size_t ir_dtype_size(ir_dtype t) { return dtype_sizes[t]; }
const char *ir_axis_name(ir_axis a) { return axis_names[a]; }

static int name_index(const char *const *names, int n, const char *s)
{
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], s) == 0)
            return i;
    return -1;
}
int ir_dtype_by_name(const char *s) { return name_index(dtype_names, IR_NUM_DTYPES, s); }
int ir_axis_by_name(const char *s) { return name_index(axis_names, IR_NUM_AXES, s); }

ir_type ir_tensor(ir_dtype dt, int ndim, const int64_t *dims)
{
    ir_type t = {.dtype = dt, .ndim = ndim};
    for (int i = 0; i < ndim; i++)
        t.dims[i] = dims[i];
    return t;
}

ir_type ir_scalar(ir_dtype dt) { return ir_tensor(dt, 0, NULL); }

static int64_t scale_row_len(int64_t blocks) { return (blocks + IR_FP8_SCALE_ALIGN - 1) / IR_FP8_SCALE_ALIGN * IR_FP8_SCALE_ALIGN; }

bool ir_fp8_scale_blocks(const ir_type *q, const ir_type *s, int64_t *rows, int64_t *cols)
{
    int64_t C = q->ndim ? q->dims[q->ndim - 1] : 1, R = C ? ir_numel(q) / C : 0;
    if (s->dtype != IR_F32)
        return false;
    if (s->ndim == 1 && s->dims[0] == 1)
        return *rows = R, *cols = C, true;
    if (s->ndim != 2 || C % IR_FP8_BLOCK)
        return false;
    ir_type tile = ir_fp8_block_scale_type(R, C, 1, IR_FP8_BLOCK), block = ir_fp8_block_scale_type(R, C, IR_FP8_BLOCK, IR_FP8_BLOCK);
    if (s->dims[0] == tile.dims[0] && s->dims[1] == tile.dims[1]) /* never a block's too: R (128 or more)
                                                                     would round to C/128 rounded */
        return *rows = 1, *cols = IR_FP8_BLOCK, true;
    if (R % IR_FP8_BLOCK == 0 && s->dims[0] == block.dims[0] && s->dims[1] == block.dims[1])
        return *rows = *cols = IR_FP8_BLOCK, true;
    return false;
}

ir_type ir_fp8_block_scale_type(int64_t R, int64_t C, int64_t rows, int64_t cols)
{
    int64_t dims[2] = {C / cols, scale_row_len(R)};
    if (rows != 1)
        dims[0] = R / rows, dims[1] = scale_row_len(C / cols);
    return ir_tensor(IR_F32, 2, dims);
}

int64_t ir_fp8_scale_at(int64_t R, int64_t C, int64_t rows, int64_t cols, int64_t r, int64_t c)
{
    if (rows == R && cols == C) /* one scale */
        return 0;
    if (rows == 1)
        return c / cols * scale_row_len(R) + r;
    return r / rows * scale_row_len(C / cols) + c / cols;
}

int64_t ir_fp8_expert_rows(int64_t R, int64_t E)
{
    return (R + (IR_FP8_BLOCK - 1) * E + IR_FP8_BLOCK - 1) / IR_FP8_BLOCK * IR_FP8_BLOCK;
}

int64_t ir_fp8_expert_span(const int32_t *counts, int64_t e)
{
    int64_t first = 0;
    for (int64_t i = 0; i < e; i++)
        first += ((int64_t)counts[i] + IR_FP8_BLOCK - 1) / IR_FP8_BLOCK * IR_FP8_BLOCK;
    return first;
}

int64_t ir_numel(const ir_type *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->dims[i];
    return n;
}

size_t ir_bytes(const ir_type *t) { return (size_t)ir_numel(t) * ir_dtype_size(t->dtype); }

bool ir_type_eq(const ir_type *a, const ir_type *b)
{
    if (a->dtype != b->dtype || a->ndim != b->ndim || a->partial != b->partial)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->dims[i] != b->dims[i] || a->shard_pack[i] != b->shard_pack[i])
            return false;
    return true;
}

/* shard_pack: axis k of a dimension (outer first) in bits 3k..3k+2, 0 after the last. */
enum { SHARD_BITS = 3, SHARD_MASK = (1 << SHARD_BITS) - 1 };
_Static_assert(IR_NUM_AXES <= 1 << SHARD_BITS, "an ir_axis fits a shard_pack field");
_Static_assert(IR_MAX_SHARD_AXES * SHARD_BITS <= 16, "a dimension's axes fit shard_pack");

int ir_shard_axes(const ir_type *t, int dim, ir_axis out[IR_MAX_SHARD_AXES])
{
    int n = 0;
    for (unsigned pack = t->shard_pack[dim]; pack && n < IR_MAX_SHARD_AXES; pack >>= SHARD_BITS)
        out[n++] = (ir_axis)(pack & SHARD_MASK);
    return n;
}

bool ir_shard_splits(const ir_type *t, int dim, ir_axis axis)
{
    ir_axis axes[IR_MAX_SHARD_AXES];
    int n = ir_shard_axes(t, dim, axes);
    for (int k = 0; k < n; k++)
        if (axes[k] == axis)
            return true;
    return false;
}

int ir_shard_dim(const ir_type *t, ir_axis axis)
{
    for (int d = 0; d < t->ndim; d++)
        if (ir_shard_splits(t, d, axis))
            return d;
    return -1;
}

bool ir_shard_any(const ir_type *t)
{
    for (int d = 0; d < t->ndim; d++)
        if (t->shard_pack[d])
            return true;
    return false;
}

bool ir_shard_push(ir_type *t, int dim, ir_axis axis)
{
    ir_axis axes[IR_MAX_SHARD_AXES];
    int n = ir_shard_axes(t, dim, axes);
    if (n == IR_MAX_SHARD_AXES || axis == IR_AXIS_NONE || ir_shard_dim(t, axis) >= 0)
        return false;
    t->shard_pack[dim] |= (uint16_t)(axis << (SHARD_BITS * n));
    return true;
}

void ir_shard_drop(ir_type *t, ir_axis axis)
{
    for (int d = 0; d < t->ndim; d++) {
        ir_axis axes[IR_MAX_SHARD_AXES];
        int n = ir_shard_axes(t, d, axes);
        t->shard_pack[d] = 0;
        for (int k = 0, kept = 0; k < n; k++)
            if (axes[k] != axis)
                t->shard_pack[d] |= (uint16_t)(axes[k] << (SHARD_BITS * kept++));
    }
}

void ir_shard_clear(ir_type *t) { memset(t->shard_pack, 0, sizeof t->shard_pack); }

/* A dimension's axes as the text form writes them: `-` (whole), `tp`, `cp.tp` (outer first). */
static int shard_str(const ir_type *t, int dim, char *buf, size_t len)
{
    ir_axis axes[IR_MAX_SHARD_AXES];
    int k = ir_shard_axes(t, dim, axes), n = k ? 0 : snprintf(buf, len, "-");
    for (int i = 0; i < k; i++)
        n += snprintf(buf + n, n < (int)len ? len - n : 0, "%s%s", i ? "." : "", ir_axis_name(axes[i]));
    return n;
}

int ir_type_str(const ir_type *t, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s[", ir_dtype_name(t->dtype));
    for (int i = 0; i < t->ndim; i++)
        n += snprintf(buf + n, n < (int)len ? len - n : 0, "%s%lld", i ? "," : "", (long long)t->dims[i]);
    n += snprintf(buf + n, n < (int)len ? len - n : 0, "]");
    if (ir_shard_any(t)) {
        n += snprintf(buf + n, n < (int)len ? len - n : 0, " {shard=[");
        for (int i = 0; i < t->ndim; i++) {
            n += snprintf(buf + n, n < (int)len ? len - n : 0, "%s", i ? "," : "");
            n += shard_str(t, i, buf + n, n < (int)len ? len - n : 0);
        }
        n += snprintf(buf + n, n < (int)len ? len - n : 0, "]}");
    }
    for (int a = 1; a < IR_NUM_AXES; a++)
        if (t->partial & (1u << a))
            n += snprintf(buf + n, n < (int)len ? len - n : 0, " {partial=%s}", ir_axis_name(a));
    return n;
}

/* --- growable arrays -------------------------------------------------------------------- */

static void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n);
    if (!p) {
        fprintf(stderr, "mcc: out of host memory (%zu bytes)\n", n);
        abort();
    }
    return p;
}

#define GROW(arr, count, cap)                                                    \
    do {                                                                         \
        if ((count) == (cap)) {                                                  \
            (cap) = (cap) ? 2 * (cap) : 16;                                      \
            (arr) = xrealloc((arr), (size_t)(cap) * sizeof(*(arr)));             \
        }                                                                        \
    } while (0)

/* --- modules ---------------------------------------------------------------------------- */

ir_module *ir_module_new(void)
{
    ir_ops_init();
    ir_module *m = calloc(1, sizeof(*m));
    return m;
}

static void func_free(ir_func *f)
{
    for (int i = 0; i < f->ninstrs; i++) {
        free(f->instrs[i].args);
        free(f->instrs[i].sym);
    }
    free(f->instrs);
    free(f->vals);
    free(f->name);
    free(f);
}

void ir_module_free(ir_module *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->nglobals; i++)
        free(m->globals[i].name);
    free(m->global_index);
    for (int i = 0; i < m->nfuncs; i++)
        func_free(m->funcs[i]);
    for (int i = 0; i < m->nconfig; i++) {
        free(m->config[i].key);
        free(m->config[i].value);
    }
    for (int p = 0; p < IR_NUM_PROGS; p++) {
        for (int i = 0; i < m->progs[p].nsteps; i++)
            free(m->progs[p].steps[i].sym);
        free(m->progs[p].steps);
    }
    free(m->globals);
    free(m->funcs);
    free(m->config);
    free(m);
}

ir_func *ir_func_new(ir_module *m, const char *name, ir_func_kind kind)
{
    ir_func *f = calloc(1, sizeof(*f));
    f->name = strdup(name);
    f->kind = kind;
    GROW(m->funcs, m->nfuncs, m->cap_funcs);
    m->funcs[m->nfuncs++] = f;
    return f;
}

void ir_map_results(ir_func *dst, const ir_func *src, const ir_instr *in, int r, int *map)
{
    for (int k = 0; k < in->nres; k++) {
        map[in->res[k]] = r + k;
        ir_type *t = &dst->vals[r + k].type;
        const ir_type *s = &src->vals[in->res[k]].type;
        for (int d = 0; d < t->ndim && d < s->ndim; d++)
            t->shard_pack[d] = s->shard_pack[d];
        t->partial = s->partial;
    }
}

bool ir_on_comm_stream(const ir_instr *in)
{
    bool bucket = in->op == IR_OP_ALL_REDUCE_INPLACE && in->attr[IR_ATTR_ALL_REDUCE_INPLACE_OVERLAP] != 0;
    return ir_overlapped(in) || bucket;
}

int ir_seq_dim(const ir_instr *in) { return in->attr[IR_ATTR_BATCH] != 0 ? 0 : 1; }

int ir_placement_dim(ir_placement place, int ndim)
{
    switch (place) {
    case IR_PLACE_COLUMN: return ndim == 1 ? 0 : ndim - 2; /* weights [.., out, in] and biases [out] */
    case IR_PLACE_VOCAB: return 0;                         /* [vocabulary, hidden] */
    case IR_PLACE_ROW: return ndim >= 2 ? ndim - 1 : 1;    /* weights [.., out, in] (a vector has no in: past it) */
    default: return -1;
    }
}

int64_t ir_seq_orows(const ir_instr *in, const ir_type *t) { return ir_seq_dim(in) == 0 ? 1 : t->dims[0]; }

int64_t ir_view_offset_in(const ir_instr *in, const ir_type *operand)
{
    if (in->op != IR_OP_ROWS)
        return 0;
    return (int64_t)in->attr[IR_ATTR_ROWS_FIRST] * (int64_t)(ir_bytes(operand) / (size_t)operand->dims[0]);
}

int64_t ir_view_offset(const ir_func *f, const ir_instr *in) { return ir_view_offset_in(in, &f->vals[in->args[0]].type); }

bool ir_overlapped(const ir_instr *in)
{
    static int at[IR_NUM_OPS]; /* 1 + each op's attribute `overlap` (ir_op_flags checks it has one), 0: not
                                  looked up yet; the runtime asks per instruction a call */
    if (!ir_op_has(in->op, IR_OPF_OVERLAP))
        return false;
    if (!at[in->op])
        at[in->op] = 1 + ir_attr_index(in->op, "overlap");
    return in->attr[at[in->op] - 1] != 0;
}

bool ir_writes_global(const ir_func *f, const ir_instr *in)
{
    return ir_op_has(in->op, IR_OPF_STORES_GLOBAL) && ir_global_of(f, in->args[0]) >= 0;
}

bool ir_reads(const ir_instr *in, int v)
{
    for (int a = 0; a < in->nargs; a++)
        if (in->args[a] == v)
            return true;
    return false;
}

int ir_first_reader(const ir_func *f, int i, int v)
{
    int j = i + 1;
    while (j < f->ninstrs && !ir_reads(&f->instrs[j], v))
        j++;
    return j;
}

int ir_reads_until(const ir_func *f, int i)
{
    const ir_instr *in = &f->instrs[i];
    return ir_overlapped(in) ? ir_first_reader(f, i, in->res[0]) : i;
}

int ir_copy_instr(ir_module *m, ir_func *dst, const ir_func *src, const ir_instr *in, int *map)
{
    int args[in->nargs ? in->nargs : 1]; /* variadic ops (sum_squares) take every gradient */
    for (int a = 0; a < in->nargs; a++)
        args[a] = map[in->args[a]];
    int r = ir_emit_like(m, dst, in, args, in->nres ? &src->vals[in->res[0]].type : NULL);
    memcpy(dst->instrs[dst->ninstrs - 1].per_rank, in->per_rank, sizeof in->per_rank);
    ir_map_results(dst, src, in, r, map);
    return r;
}

bool ir_plan_version_ok(const ir_module *m, char *err, size_t errlen)
{
    long long v = ir_cfg_int(m, IR_CFG_PLAN_VERSION);
    if (v == IR_PLAN_VERSION)
        return true;
    snprintf(err, errlen, "the plan's format is version %lld but this mcc reads version %d: recompile (or remake "
             "the text with `mcc ir`) with this mcc", v, IR_PLAN_VERSION);
    return false;
}

void ir_set_per_rank(ir_func *f, int v, int k, double base, double step, ir_axis axis)
{
    ir_instr *in = &f->instrs[f->vals[v].def];
    in->attr[k] = base;
    in->per_rank[k] = (ir_rank_term){{0}};
    in->per_rank[k].step[axis] = step;
}

bool ir_rank_term_any(const ir_rank_term *t)
{
    for (int a = IR_AXIS_NONE + 1; a < IR_NUM_AXES; a++)
        if (t->step[a] != 0)
            return true;
    return false;
}

void ir_resolve_ranks(ir_module *m, const int coord[IR_NUM_AXES])
{
    for (int f = 0; f < m->nfuncs; f++)
        for (int i = 0; i < m->funcs[f]->ninstrs; i++) {
            ir_instr *in = &m->funcs[f]->instrs[i];
            for (int k = 0; k < IR_MAX_ATTRS; k++) {
                ir_rank_term *t = &in->per_rank[k];
                for (int a = IR_AXIS_NONE + 1; a < IR_NUM_AXES; a++)
                    in->attr[k] += t->step[a] * coord[a];
                *t = (ir_rank_term){{0}};
            }
        }
}

void ir_func_replace(ir_module *m, int index, ir_func *f)
{
    ir_func *old = m->funcs[index];
    m->funcs[index] = f;
    m->nfuncs--; /* f was the last */
    func_free(old);
}

int ir_func_index(const ir_module *m, const char *name)
{
    for (int i = 0; i < m->nfuncs; i++)
        if (strcmp(m->funcs[i]->name, name) == 0)
            return i;
    return -1;
}

#define TRAIN (1u << IR_PROG_TRAIN)
#define EVAL (1u << IR_PROG_EVAL)
const ir_func_kind_info ir_func_kinds[IR_NUM_FUNC_KINDS] = {
    /*                      name          programs      per micro-batch  unique */
    [IR_FUNC_STEP] =       {"step",       TRAIN,        true,            true},
    [IR_FUNC_EVAL] =       {"eval",       EVAL,         true,            false},
    [IR_FUNC_TIED_SEND] =  {"tied_send",  TRAIN,        false,           true},
    [IR_FUNC_TIED_SUM] =   {"tied_sum",   TRAIN,        false,           true},
    [IR_FUNC_REDUCE] =     {"reduce",     TRAIN,        false,           true},
    [IR_FUNC_GRAD_NORM] =  {"grad_norm",  0,            false,           true},
    [IR_FUNC_OPTIMIZER] =  {"optimizer",  TRAIN,        false,           true},
    [IR_FUNC_ZERO_GRADS] = {"zero_grads", 0,            false,           true},
    [IR_FUNC_SETUP] =      {"setup",      0,            false,           true},
    [IR_FUNC_FORWARD] =    {"forward",    TRAIN,        true,            false},
    [IR_FUNC_BACKWARD] =   {"backward",   TRAIN,        true,            false},
    [IR_FUNC_WGRAD] =      {"wgrad",      TRAIN,        true,            false},
    [IR_FUNC_HOST_OPTIMIZER] = {"host_optimizer", TRAIN,  false,           true},
    [IR_FUNC_PARAM_SYNC] = {"param_sync", TRAIN,        false,           true},
};
#undef TRAIN
#undef EVAL

int ir_func_of_kind(const ir_module *m, ir_func_kind k)
{
    for (int i = 0; i < m->nfuncs; i++)
        if (m->funcs[i]->kind == k)
            return i;
    return -1;
}

/* FNV-1a: the globals' names differ in their layer numbers and suffixes, which it spreads. */
static unsigned name_hash(const char *s)
{
    unsigned h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* The index slot of name: where it is, or the empty slot where it would go. */
static int index_slot(const ir_module *m, const char *name)
{
    unsigned mask = (unsigned)m->global_index_cap - 1, at = name_hash(name) & mask;
    while (m->global_index[at] >= 0 && strcmp(m->globals[m->global_index[at]].name, name) != 0)
        at = (at + 1) & mask;
    return (int)at;
}

/* Indexes global g (a name given twice keeps its first global, as a scan would find it). */
static void index_global(ir_module *m, int g)
{
    if (2 * (m->nglobals + 1) > m->global_index_cap) {
        free(m->global_index);
        m->global_index_cap = m->global_index_cap ? 2 * m->global_index_cap : 64;
        m->global_index = malloc(sizeof(int) * (size_t)m->global_index_cap);
        if (!m->global_index) {
            fprintf(stderr, "mcc: out of memory indexing %d globals\n", m->nglobals);
            exit(1);
        }
        for (int i = 0; i < m->global_index_cap; i++)
            m->global_index[i] = -1;
        for (int i = 0; i < g; i++) {
            int at = index_slot(m, m->globals[i].name);
            if (m->global_index[at] < 0)
                m->global_index[at] = i;
        }
    }
    int at = index_slot(m, m->globals[g].name);
    if (m->global_index[at] < 0)
        m->global_index[at] = g;
}

int ir_global_add(ir_module *m, const char *name, ir_type t, ir_global_kind kind, ir_init init, double std, bool no_decay)
{
    GROW(m->globals, m->nglobals, m->cap_globals);
    m->globals[m->nglobals] = (ir_global){strdup(name), t, kind, init, std, no_decay, .owner = -1, .layer = -1, .slots = 1};
    index_global(m, m->nglobals);
    return m->nglobals++;
}

int ir_global_add_companion(ir_module *m, const char *name, ir_type t, ir_global_kind kind, int owner)
{
    int g = ir_global_add(m, name, t, kind, IR_INIT_ZEROS, 0, false);
    m->globals[g].owner = owner;
    m->globals[g].layer = m->globals[owner].layer;
    m->globals[g].layout = m->globals[owner].layout;
    return g;
}

int ir_global_companion(const ir_module *m, int param, ir_global_kind kind)
{
    for (int i = 0; i < m->nglobals; i++)
        if (m->globals[i].owner == param && m->globals[i].kind == kind)
            return i;
    return -1;
}

int ir_param_remainder(const ir_module *m, int p)
{
    return m->globals[p].kind == IR_GLOBAL_PARAM ? ir_global_companion(m, p, IR_GLOBAL_REMAINDER) : -1;
}

bool ir_param_stored(const ir_module *m, int p)
{
    return m->globals[p].kind != IR_GLOBAL_PARAM ||
           (ir_param_remainder(m, p) < 0 && ir_global_companion(m, p, IR_GLOBAL_MASTER_SHARD) < 0);
}

size_t ir_global_slab_bytes(const ir_module *m, int g)
{
    const ir_global *gl = &m->globals[g];
    return !ir_param_stored(m, g) ? 0 : ir_global_span(ir_bytes(&gl->type)) * (size_t)gl->slots;
}

bool ir_param_held_elsewhere(const ir_module *m, int g)
{
    int sum = ir_func_of_kind(m, IR_FUNC_TIED_SUM);
    if (sum < 0 || ir_cfg_int(m, IR_CFG_PIPELINE_STAGE) == 0)
        return false;
    int grad = ir_global_companion(m, ir_global_param(m, g), IR_GLOBAL_GRAD);
    const ir_func *f = m->funcs[sum];
    for (int i = 0; i < f->ninstrs; i++)
        if (f->instrs[i].op == IR_OP_GLOBAL && f->instrs[i].global == grad)
            return true;
    return false;
}

int ir_param_value(const ir_module *m, int p)
{
    int shard = ir_global_companion(m, p, IR_GLOBAL_MASTER_SHARD);
    return shard >= 0 ? shard : p;
}

ir_host_staging ir_host_staging_of(const ir_module *m, const ir_func *f)
{
    ir_host_staging s = {0, 0, 0};
    for (int i = 0; f->kind == IR_FUNC_HOST_OPTIMIZER && i < f->ninstrs; i++) {
        const ir_instr *in = &f->instrs[i];
        int dst = in->nargs > 1 ? ir_global_of(f, in->args[0]) : -1;
        int src = in->nargs > 1 ? ir_global_of(f, in->args[1]) : -1;
        const ir_type *t = in->nargs > 1 ? &f->vals[in->args[in->op == IR_OP_ADAMW]].type : NULL;
        if (in->op == IR_OP_ADAMW && src >= 0 && !m->globals[src].host) { /* a streamed gradient */
            int64_t n = ir_numel(t);
            s.chunk = n > s.chunk ? n : s.chunk;
            s.grad_size = (int)ir_dtype_size(t->dtype) > s.grad_size ? (int)ir_dtype_size(t->dtype) : s.grad_size;
        }
        bool up = in->op == IR_OP_COPY && dst >= 0 && !m->globals[dst].host && (src < 0 || m->globals[src].host);
        if (up && t->dtype != f->vals[in->args[1]].type.dtype) { /* a converting copy up */
            s.chunk = ir_numel(t) > s.chunk ? ir_numel(t) : s.chunk;
            s.up_size = (int)ir_dtype_size(t->dtype) > s.up_size ? (int)ir_dtype_size(t->dtype) : s.up_size;
        }
    }
    s.chunk = s.chunk < IR_HOST_CHUNK ? s.chunk : IR_HOST_CHUNK;
    return s;
}

int64_t ir_host_staging_bytes(const ir_module *m, const ir_func *f)
{
    ir_host_staging s = ir_host_staging_of(m, f);
    return 2 * s.chunk * (s.grad_size + s.up_size);
}

int ir_grad_ready_slots(const ir_module *m)
{
    int n = 0;
    for (int fi = 0; fi < m->nfuncs; fi++)
        for (int i = 0; i < m->funcs[fi]->ninstrs; i++) {
            const ir_instr *in = &m->funcs[fi]->instrs[i];
            if (in->op == IR_OP_GRAD_READY && (int)in->attr[IR_ATTR_GRAD_READY_SLOT] >= n)
                n = (int)in->attr[IR_ATTR_GRAD_READY_SLOT] + 1;
        }
    return n;
}

int ir_global_find(const ir_module *m, const char *name)
{
    return m->global_index_cap ? m->global_index[index_slot(m, name)] : -1;
}

/* --- layout records ------------------------------------------------------------------ */

void ir_axis_degrees(const ir_module *m, int degree[IR_NUM_AXES])
{
    ir_mesh mesh = ir_module_mesh(m);
    memcpy(degree, mesh.degree, sizeof mesh.degree);
}

const ir_split *ir_layout_split(const ir_layout *l, ir_axis axis)
{
    for (int k = 0; k < l->nsplits; k++)
        if (l->splits[k].axis == axis)
            return &l->splits[k];
    return NULL;
}

void ir_layout_add(ir_layout *l, ir_axis axis, ir_split_kind kind, int dim)
{
    assert(l->nsplits < IR_NUM_AXES);
    l->splits[l->nsplits++] = (ir_split){(uint8_t)axis, (uint8_t)kind, (int8_t)(kind != IR_SPLIT_FLAT ? dim : 0)};
}

ir_layout ir_layout_of_type(const ir_type *t)
{
    ir_layout l = {0};
    for (int d = 0; d < t->ndim; d++) {
        ir_axis axes[IR_MAX_SHARD_AXES];
        for (int k = 0, n = ir_shard_axes(t, d, axes); k < n; k++) /* outer to inner */
            ir_layout_add(&l, axes[k], axes[k] == IR_AXIS_CP ? IR_SPLIT_BALANCED : IR_SPLIT_DIM, d);
    }
    return l;
}

ir_type ir_layout_whole(const ir_layout *l, ir_type t, const int degree[IR_NUM_AXES])
{
    for (int k = 0; k < l->nsplits; k++)
        if (l->splits[k].kind != IR_SPLIT_FLAT)
            t.dims[l->splits[k].dim] *= degree[l->splits[k].axis];
    ir_shard_clear(&t);
    t.partial = 0;
    return t;
}

ir_type ir_global_whole(const ir_module *m, int g, const int degree[IR_NUM_AXES])
{
    ir_type base = m->globals[ir_global_param(m, g)].type;
    base.dtype = m->globals[g].type.dtype;
    return ir_layout_whole(&m->globals[g].layout, base, degree);
}

ir_type ir_layout_block(const ir_layout *l, const ir_type *whole, const int degree[IR_NUM_AXES], int k)
{
    ir_type t = *whole;
    for (int s = 0; s < k; s++) {
        const ir_split *sp = &l->splits[s];
        if (sp->kind != IR_SPLIT_FLAT) {
            t.dims[sp->dim] /= degree[sp->axis];
        } else {
            int64_t n = ir_numel(&t) / degree[sp->axis];
            t = ir_tensor(t.dtype, 1, &n);
        }
    }
    return t;
}

int64_t ir_layout_offset(const ir_layout *l, const ir_type *whole, const int degree[IR_NUM_AXES],
                         const int coord[IR_NUM_AXES], int k)
{
    const ir_split *sp = &l->splits[k];
    ir_type part = ir_layout_block(l, whole, degree, k + 1);
    return (int64_t)coord[sp->axis] * (sp->kind != IR_SPLIT_FLAT ? part.dims[sp->dim] : ir_numel(&part));
}

int64_t ir_layout_index(const ir_layout *l, const ir_type *whole, const int degree[IR_NUM_AXES],
                        const int coord[IR_NUM_AXES], int64_t i)
{
    for (int k = l->nsplits - 1; k >= 0; k--) { /* from the rank's part out to the whole */
        const ir_split *sp = &l->splits[k];
        int64_t offset = ir_layout_offset(l, whole, degree, coord, k);
        if (sp->kind == IR_SPLIT_FLAT) {
            i += offset;
            continue;
        }
        ir_type part = ir_layout_block(l, whole, degree, k + 1), block = ir_layout_block(l, whole, degree, k);
        int64_t inner = 1;
        for (int d = sp->dim + 1; d < part.ndim; d++)
            inner *= part.dims[d];
        int64_t j = i % inner, mid = (i / inner) % part.dims[sp->dim], outer = i / (inner * part.dims[sp->dim]);
        int64_t at = sp->kind == IR_SPLIT_BALANCED
                         ? ir_cp_position(mid, part.dims[sp->dim], degree[sp->axis], coord[sp->axis])
                         : offset + mid;
        i = (outer * block.dims[sp->dim] + at) * inner + j;
    }
    return i;
}

const char *ir_layout_str(const ir_layout *l, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int k = 0; k < l->nsplits && n < len; k++) {
        const ir_split *sp = &l->splits[k];
        n += (size_t)snprintf(buf + n, len - n, "%s%s:", k ? ", " : "", ir_axis_name((ir_axis)sp->axis));
        if (n < len)
            n += (size_t)(sp->kind == IR_SPLIT_DIM        ? snprintf(buf + n, len - n, "dim%d", sp->dim)
                          : sp->kind == IR_SPLIT_BALANCED ? snprintf(buf + n, len - n, "balanced%d", sp->dim)
                                                          : snprintf(buf + n, len - n, "flat"));
    }
    return buf;
}

void ir_sched_add(ir_module *m, ir_prog p, ir_sched_step s)
{
    ir_program *prog = &m->progs[p];
    GROW(prog->steps, prog->nsteps, prog->cap_steps);
    s.sym = s.sym ? strdup(s.sym) : NULL;
    prog->steps[prog->nsteps++] = s;
}

void ir_sched_call(ir_module *m, ir_prog p, int func, int mb)
{
    ir_sched_add(m, p, (ir_sched_step){.op = IR_STEP_CALL, .func = func, .mb = mb, .slot = {-1, -1, -1}});
}

void ir_config_set(ir_module *m, const char *key, const char *value)
{
    for (int i = 0; i < m->nconfig; i++)
        if (strcmp(m->config[i].key, key) == 0) {
            free(m->config[i].value);
            m->config[i].value = strdup(value);
            return;
        }
    GROW(m->config, m->nconfig, m->cap_config);
    m->config[m->nconfig++] = (ir_config){strdup(key), strdup(value)};
}

const char *ir_config_get(const ir_module *m, const char *key)
{
    for (int i = 0; i < m->nconfig; i++)
        if (strcmp(m->config[i].key, key) == 0)
            return m->config[i].value;
    return NULL;
}

/* The choices' words, ORDER each one's enum (ir.h). */
const char *const ir_backend_words[] = {"cpu", "cuda", NULL};
const char *const ir_pp_sched_words[] = {"auto", "1f1b", "interleaved", "zb-h1", NULL};
const char *const ir_cp_comm_words[] = {"p2p", "all_gather", "a2a", NULL};
const char *const ir_recompute_words[] = {"none", "selective", "activations", "full", NULL};
const char *const ir_recompute_method_words[] = {"none", "uniform", "block", NULL};
const char *const ir_fp8_format_words[] = {"none", "hybrid", "e4m3", NULL};
const char *const ir_fp8_recipe_words[] = {"delayed", "tensorwise", "blockwise", NULL};
const char *const ir_amax_algo_words[] = {"most_recent", "max", NULL};
const char *const ir_lr_style_words[] = {"constant", "linear", "cosine", "inverse-square-root", "WSD", NULL};
const char *const ir_wsd_style_words[] = {"exponential", "linear", "cosine", "minus_sqrt", NULL};
const char *const ir_norm_words[] = {"LayerNorm", "RMSNorm", NULL};
const char *const ir_pos_words[] = {"learned_absolute", "rope", NULL};
const char *const ir_rope_type_words[] = {"rope", "yarn", NULL};
const char *const ir_recompute_module_words[] = {"core_attn",      "mlp",         "layernorm", "moe_act", "moe",
                                                 "shared_experts", "mla_up_proj", "mlp_act",   NULL}; /* ORDER ir_recompute_module */

bool ir_word_set(const char *const *words, const char *text, unsigned *bits, char *bad, size_t badlen)
{
    *bits = 0;
    for (const char *p = text; *p;) {
        size_t n = strcspn(p, ",");
        int k = 0;
        while (words[k] && !(strlen(words[k]) == n && !strncmp(words[k], p, n)))
            k++;
        if (!words[k])
            return snprintf(bad, badlen, "%.*s", (int)n, p), false;
        *bits |= 1u << k;
        p += n + (p[n] == ',');
    }
    return true;
}
const char *const ir_moe_score_words[] = {"softmax", "sigmoid", NULL};

#define WORDS(w) {w, (int)(sizeof w / sizeof w[0]) - 1}
_Static_assert(IR_F32 == 0 && IR_BF16 == 1 && IR_F16 == 2, "param_dtype's words are the first three dtypes'");
const ir_choice_info ir_choices[IR_NUM_CHOICES] = {
    [IR_CHOICE_BACKEND] = WORDS(ir_backend_words),
    [IR_CHOICE_PARAM_DTYPE] = {dtype_names, IR_F16 + 1},   /* f32, bf16, f16 */
    [IR_CHOICE_MOMENT_DTYPE] = {dtype_names, IR_BF16 + 1}, /* f32, bf16 */
    [IR_CHOICE_PP_SCHED] = WORDS(ir_pp_sched_words),
    [IR_CHOICE_CP_COMM] = WORDS(ir_cp_comm_words),
    [IR_CHOICE_RECOMPUTE] = WORDS(ir_recompute_words),
    [IR_CHOICE_RECOMPUTE_METHOD] = WORDS(ir_recompute_method_words),
    [IR_CHOICE_FP8_FORMAT] = WORDS(ir_fp8_format_words),
    [IR_CHOICE_FP8_RECIPE] = WORDS(ir_fp8_recipe_words),
    [IR_CHOICE_AMAX_ALGO] = WORDS(ir_amax_algo_words),
    [IR_CHOICE_LR_STYLE] = WORDS(ir_lr_style_words),
    [IR_CHOICE_WSD_STYLE] = WORDS(ir_wsd_style_words),
    [IR_CHOICE_NORM] = WORDS(ir_norm_words),
    [IR_CHOICE_POS] = WORDS(ir_pos_words),
    [IR_CHOICE_ROPE_TYPE] = WORDS(ir_rope_type_words),
    [IR_CHOICE_MOE_SCORE] = WORDS(ir_moe_score_words),
};
#undef WORDS
_Static_assert(IR_PP_ZB_H1 == 3 && IR_CP_A2A == 2 && IR_RECOMPUTE_FULL == 3 && IR_RECOMPUTE_BLOCK == 2 &&
               IR_FP8_FORMAT_E4M3 == 2 && IR_FP8_TENSORWISE == 1 && IR_FP8_BLOCKWISE == 2 && IR_AMAX_MAX == 1 && IR_LR_WSD == 4 &&
               IR_WSD_MINUS_SQRT == 3 && IR_NORM_RMSNORM == 1 && IR_POS_ROPE == 1 && IR_ROPE_YARN == 1 && IR_MOE_SIGMOID == 1 &&
               IR_BACKEND_CUDA == 1, "each choice's words follow its enum");

int ir_choice_find(ir_choice c, const char *word)
{
    return name_index(ir_choices[c].words, ir_choices[c].count, word);
}

void ir_choice_list(ir_choice c, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0, n = ir_choices[c].count; i < n && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", i == 0 ? "" : i == n - 1 ? " or " : ", ",
                                 ir_choices[c].words[i]);
}

/* A row's type: INT, NUM, TEXT, BOOL, or CHOICE(X), which names its choice too. */
#define IR_CFG_TYPE_INT .type = IR_CFGT_INT
#define IR_CFG_TYPE_NUM .type = IR_CFGT_NUM
#define IR_CFG_TYPE_TEXT .type = IR_CFGT_TEXT
#define IR_CFG_TYPE_BOOL .type = IR_CFGT_BOOL
#define IR_CFG_TYPE_CHOICE(c) .type = IR_CFGT_CHOICE, .choice = IR_CHOICE_##c
const ir_cfg_info ir_cfgs[IR_CFG_COUNT] = {
#define IR_CFG(name, k, type, d, m) [IR_CFG_##name] = {.key = #k, IR_CFG_TYPE_##type, .dflt = d, .meaning = m},
#define IR_CFG_MODEL(name, k, type, d, m) \
    [IR_CFG_##name] = {.key = #k, IR_CFG_TYPE_##type, .dflt = d, .meaning = m, .model = true},
#include "config.def"
#undef IR_CFG
#undef IR_CFG_MODEL
};

int ir_cfg_find(const char *key)
{
    for (int k = 0; k < IR_CFG_COUNT; k++)
        if (strcmp(ir_cfgs[k].key, key) == 0)
            return k;
    return -1;
}

const char *ir_cfg_value(const ir_module *m, ir_cfg k)
{
    const char *v = ir_config_get(m, ir_cfgs[k].key);
    return v ? v : ir_cfgs[k].dflt;
}

long long ir_cfg_int(const ir_module *m, ir_cfg k)
{
    assert(ir_cfgs[k].type == IR_CFGT_INT || ir_cfgs[k].type == IR_CFGT_BOOL);
    return strtoll(ir_cfg_value(m, k), NULL, 10);
}

double ir_cfg_num(const ir_module *m, ir_cfg k)
{
    assert(ir_cfgs[k].type == IR_CFGT_NUM);
    return strtod(ir_cfg_value(m, k), NULL);
}

bool ir_cfg_bool(const ir_module *m, ir_cfg k)
{
    assert(ir_cfgs[k].type == IR_CFGT_BOOL);
    return ir_cfg_int(m, k) != 0;
}

const char *ir_cfg_text(const ir_module *m, ir_cfg k)
{
    assert(ir_cfgs[k].type == IR_CFGT_TEXT || ir_cfgs[k].type == IR_CFGT_CHOICE);
    return ir_cfg_value(m, k);
}

int ir_cfg_choice(const ir_module *m, ir_cfg k)
{
    assert(ir_cfgs[k].type == IR_CFGT_CHOICE);
    int v = ir_choice_find(ir_cfgs[k].choice, ir_cfg_value(m, k));
    if (v < 0) { /* ir_config_set past ir_cfg_valid: a bug of the writer */
        fprintf(stderr, "mcc: internal error: config %s = \"%s\" is none of its words\n", ir_cfgs[k].key,
                ir_cfg_value(m, k));
        abort();
    }
    return v;
}

const char *ir_cfg_choice_word(ir_cfg k, int v)
{
    assert(ir_cfgs[k].type == IR_CFGT_CHOICE);
    return v >= 0 && v < ir_choices[ir_cfgs[k].choice].count ? ir_choices[ir_cfgs[k].choice].words[v] : NULL;
}

bool ir_cfg_valid(ir_cfg k, const char *text, char *err, size_t errlen)
{
    if (ir_cfgs[k].type != IR_CFGT_CHOICE || ir_choice_find(ir_cfgs[k].choice, text) >= 0)
        return true;
    char words[256];
    ir_choice_list(ir_cfgs[k].choice, words, sizeof words);
    return snprintf(err, errlen, "config %s = \"%s\": %s takes %s", ir_cfgs[k].key, text, ir_cfgs[k].key, words),
           false;
}

void ir_cfg_set(ir_module *m, ir_cfg k, const char *text)
{
    char err[512];
    if (!ir_cfg_valid(k, text, err, sizeof err)) { /* the builders write a choice's word (ir_cfg_set_choice) */
        fprintf(stderr, "mcc: internal error: %s\n", err);
        abort();
    }
    ir_config_set(m, ir_cfgs[k].key, text);
}

void ir_cfg_set_choice(ir_module *m, ir_cfg k, int v)
{
    const char *word = ir_cfg_choice_word(k, v);
    assert(word);
    ir_config_set(m, ir_cfgs[k].key, word);
}

void ir_cfg_set_int(ir_module *m, ir_cfg k, long long v)
{
    char text[32];
    snprintf(text, sizeof text, "%lld", v);
    ir_cfg_set(m, k, text);
}

void ir_cfg_set_num(ir_module *m, ir_cfg k, double v)
{
    char text[32];
    snprintf(text, sizeof text, "%.17g", v);
    ir_cfg_set(m, k, text);
}

/* --- the builder ------------------------------------------------------------------------ */

/* Appends `in` (its op, operand count and global set) with operands args, attributes attrs and @sym. */
static int emit(ir_module *m, ir_func *f, ir_instr in, const int *args, const double *attrs, const char *sym,
                const ir_type *explicit_type)
{
    const ir_op_info *info = &ir_ops[in.op];
    int nargs = in.nargs;
    if (attrs)
        memcpy(in.attr, attrs, sizeof(double) * (size_t)info->nattrs);
    in.nres = ir_instr_nres(in.op, in.attr);
    in.args = xrealloc(NULL, (size_t)(nargs ? nargs : 1) * sizeof(int));
    if (nargs)
        memcpy(in.args, args, (size_t)nargs * sizeof(int));
    in.sym = sym ? strdup(sym) : NULL;

    ir_type argt[nargs ? nargs : 1];
    memset(argt, 0, sizeof argt); /* an op without operands reads none, but its infer gets a pointer */
    for (int i = 0; i < nargs; i++)
        argt[i] = f->vals[args[i]].type;
    ir_type res[IR_MAX_RES] = {0};
    if (explicit_type)
        res[0] = *explicit_type;
    char err[256];
    if (!ir_infer_results(m, &in, argt, res, err, sizeof err)) {
        fprintf(stderr, "mcc: internal error building %s in %s: %s\n", info->name, f->name, err);
        abort();
    }
    GROW(f->instrs, f->ninstrs, f->cap_instrs);
    for (int r = 0; r < in.nres; r++) {
        GROW(f->vals, f->nvals, f->cap_vals);
        f->vals[f->nvals] = (ir_value){.type = res[r], .def = f->ninstrs, .offset = -1};
        in.res[r] = f->nvals++;
    }
    f->instrs[f->ninstrs++] = in;
    return in.nres ? in.res[0] : -1;
}

int ir_emit(ir_module *m, ir_func *f, ir_op op, const int *args, int nargs, const double *attrs,
            const char *sym, const ir_type *explicit_type)
{
    assert(op != IR_OP_GLOBAL); /* by its index: ir_global_ref */
    return emit(m, f, (ir_instr){.op = op, .nargs = nargs, .global = -1}, args, attrs, sym, explicit_type);
}

const ir_role_info ir_roles[IR_NUM_ROLES] = {
    [IR_ROLE_NONE] = {"none", false, false, false},
    [IR_ROLE_TOKENS] = {"tokens", false, false, false},
    [IR_ROLE_TARGETS] = {"targets", false, false, false},
    [IR_ROLE_FIRST_SAMPLE] = {"first_sample", false, true, false},
    [IR_ROLE_LOSS] = {"loss", false, false, false},
    [IR_ROLE_LOGITS] = {"logits", false, false, false},
    [IR_ROLE_LR] = {"lr", false, false, false},
    [IR_ROLE_DECOUPLED_LR] = {"decoupled_lr", false, false, false},
    [IR_ROLE_STEP] = {"step", false, false, false},
    [IR_ROLE_GRAD_NORM] = {"grad_norm", false, false, false},
    [IR_ROLE_CLIP_COEF] = {"clip_coef", false, false, false},
    [IR_ROLE_PP_ACT] = {"pp_act", true, true, false},
    [IR_ROLE_PP_GRAD] = {"pp_grad", true, true, false},
    [IR_ROLE_MOE_TOKENS_PER_EXPERT] = {"moe_tokens_per_expert", false, true, true},
    [IR_ROLE_MOE_KEPT_WEIGHTS] = {"moe_kept_weights", false, true, true},
    [IR_ROLE_MOE_AUX_LOSS] = {"moe_aux_loss", false, true, true},
    [IR_ROLE_MOE_Z_LOSS] = {"moe_z_loss", false, true, true},
    [IR_ROLE_MTP_LOSS] = {"mtp_loss", false, true, false},
    [IR_ROLE_TIED_GRAD] = {"tied_grad", false, true, false},
};

int ir_role_by_name(const char *name)
{
    for (int k = 0; k < IR_NUM_ROLES; k++)
        if (strcmp(ir_roles[k].name, name) == 0)
            return k;
    return -1;
}

int ir_find_role(const ir_func *f, ir_op op, ir_role r)
{
    for (int i = 0; i < f->ninstrs; i++) {
        const ir_role *q = &f->instrs[i].role;
        if (f->instrs[i].op == op && q->kind == r.kind && q->stage == r.stage && q->index == r.index)
            return i;
    }
    return -1;
}

/* The role of the instruction just appended to f. */
static void set_last_role(ir_func *f, ir_role role) { f->instrs[f->ninstrs - 1].role = role; }

int ir_input(ir_module *m, ir_func *f, ir_role role, const char *name, ir_type t)
{
    int v = ir_emit(m, f, IR_OP_INPUT, NULL, 0, NULL, name, &t);
    set_last_role(f, role);
    return v;
}

int ir_global_ref(ir_module *m, ir_func *f, int g)
{
    return emit(m, f, (ir_instr){.op = IR_OP_GLOBAL, .global = g}, NULL, NULL, m->globals[g].name, NULL);
}

int ir_emit_like(ir_module *m, ir_func *f, const ir_instr *in, const int *args, const ir_type *explicit_type)
{
    int r = in->op == IR_OP_GLOBAL ? ir_global_ref(m, f, in->global)
                                   : ir_emit(m, f, in->op, args, in->nargs, in->attr, in->sym, explicit_type);
    f->instrs[f->ninstrs - 1].role = in->role;
    return r;
}

void ir_global_retarget(ir_module *m, ir_instr *in, int g)
{
    free(in->sym);
    in->sym = strdup(m->globals[g].name);
    in->global = g;
}

void ir_output(ir_module *m, ir_func *f, ir_role role, const char *name, int x)
{
    ir_emit(m, f, IR_OP_OUTPUT, &x, 1, NULL, name, NULL);
    set_last_role(f, role);
}

int ir_fill(ir_module *m, ir_func *f, double value, ir_type t)
{
    return ir_emit(m, f, IR_OP_FILL, NULL, 0, &value, NULL, &t);
}

int ir_op1(ir_module *m, ir_func *f, ir_op op, int a) { return ir_emit(m, f, op, &a, 1, NULL, NULL, NULL); }

int ir_op2(ir_module *m, ir_func *f, ir_op op, int a, int b)
{
    int args[2] = {a, b};
    return ir_emit(m, f, op, args, 2, NULL, NULL, NULL);
}

int ir_scale(ir_module *m, ir_func *f, int a, double factor)
{
    return ir_emit(m, f, IR_OP_SCALE, &a, 1, &factor, NULL, NULL);
}

int ir_convert(ir_module *m, ir_func *f, int a, bool to_f32)
{
    double f32 = to_f32;
    return ir_emit(m, f, IR_OP_CONVERT, &a, 1, &f32, NULL, NULL);
}

int ir_matmul(ir_module *m, ir_func *f, int a, int b, bool ta, bool tb)
{
    int args[2] = {a, b};
    double attrs[IR_NATTRS_MATMUL] = {[IR_ATTR_MATMUL_TA] = ta, [IR_ATTR_MATMUL_TB] = tb};
    return ir_emit(m, f, IR_OP_MATMUL, args, 2, attrs, NULL, NULL);
}

int ir_fp8_quantize(ir_module *m, ir_func *f, int x, int history, bool fold, ir_fp8_format format)
{
    double attrs[IR_NATTRS_FP8_QUANTIZE] = {[IR_ATTR_FP8_QUANTIZE_FORMAT] = format};
    int amax = history >= 0 ? -1 : ir_emit(m, f, IR_OP_FP8_AMAX, &x, 1, NULL, NULL, NULL);
    if (history >= 0) {
        double algo = ir_cfg_choice(m, IR_CFG_FP8_AMAX_COMPUTE_ALGO); /* ORDER ir_amax_algo */
        amax = ir_emit(m, f, IR_OP_FP8_HISTORY_AMAX, &history, 1, &algo, NULL, NULL);
        attrs[IR_ATTR_FP8_QUANTIZE_MARGIN] = (double)ir_cfg_int(m, IR_CFG_FP8_MARGIN);
    }
    if (history >= 0 && fold) {
        int fold_args[2] = {history, ir_emit(m, f, IR_OP_FP8_AMAX, &x, 1, NULL, NULL, NULL)};
        ir_emit(m, f, IR_OP_FP8_AMAX_FOLD, fold_args, 2, NULL, NULL, NULL);
    }
    int args[2] = {x, amax};
    return ir_emit(m, f, IR_OP_FP8_QUANTIZE, args, 2, attrs, NULL, NULL);
}

int ir_fp8_grouped_quantize(ir_module *m, ir_func *f, int x, int counts, int history, bool fold, ir_fp8_format format)
{
    double attrs[IR_NATTRS_FP8_GROUPED_QUANTIZE] = {[IR_ATTR_FP8_GROUPED_QUANTIZE_FORMAT] = format};
    int groups[2] = {x, counts}, ngroups = counts >= 0 ? 2 : 1; /* rows by counts, or a weight's experts */
    int amax;
    if (history >= 0) {
        double algo = ir_cfg_choice(m, IR_CFG_FP8_AMAX_COMPUTE_ALGO); /* ORDER ir_amax_algo */
        amax = ir_emit(m, f, IR_OP_FP8_HISTORY_AMAX, &history, 1, &algo, NULL, NULL);
        attrs[IR_ATTR_FP8_GROUPED_QUANTIZE_MARGIN] = (double)ir_cfg_int(m, IR_CFG_FP8_MARGIN);
        if (fold) {
            int fold_args[2] = {history, ir_emit(m, f, IR_OP_FP8_GROUPED_AMAX, groups, ngroups, NULL, NULL, NULL)};
            ir_emit(m, f, IR_OP_FP8_AMAX_FOLD, fold_args, 2, NULL, NULL, NULL);
        }
    } else
        amax = ir_emit(m, f, IR_OP_FP8_GROUPED_AMAX, groups, ngroups, NULL, NULL, NULL);
    int args[3] = {x, amax, counts};
    return ir_emit(m, f, IR_OP_FP8_GROUPED_QUANTIZE, args, ngroups + 1, attrs, NULL, NULL);
}

int ir_fp8_grouped_matmul(ir_module *m, ir_func *f, int qx, int qw, int counts, bool tb, ir_fp8_format grad_format,
                          bool wgrad, int dy_history)
{
    int args[6] = {qx, qx + 1, qw, qw + 1, counts, dy_history};
    double attrs[IR_NATTRS_FP8_GROUPED_MATMUL] = {[IR_ATTR_FP8_GROUPED_MATMUL_TB] = tb,
                                                  [IR_ATTR_FP8_GROUPED_MATMUL_GRAD_FORMAT] = grad_format,
                                                  [IR_ATTR_FP8_GROUPED_MATMUL_WGRAD] = wgrad};
    return ir_emit(m, f, IR_OP_FP8_GROUPED_MATMUL, args, dy_history >= 0 ? 6 : 5, attrs, NULL, NULL);
}

int ir_fp8_block_quantize(ir_module *m, ir_func *f, int x, int rows, int cols, bool transpose)
{
    double attrs[IR_NATTRS_FP8_BLOCK_QUANTIZE] = {[IR_ATTR_FP8_BLOCK_QUANTIZE_ROWS] = rows,
                                                  [IR_ATTR_FP8_BLOCK_QUANTIZE_COLS] = cols,
                                                  [IR_ATTR_FP8_BLOCK_QUANTIZE_TRANSPOSE] = transpose};
    return ir_emit(m, f, IR_OP_FP8_BLOCK_QUANTIZE, &x, 1, attrs, NULL, NULL);
}

int ir_fp8_expert_block_quantize(ir_module *m, ir_func *f, int x, int counts)
{
    int64_t block = counts >= 0 ? 1 : IR_FP8_BLOCK;
    double attrs[IR_NATTRS_FP8_BLOCK_QUANTIZE] = {[IR_ATTR_FP8_BLOCK_QUANTIZE_ROWS] = (double)block,
                                                  [IR_ATTR_FP8_BLOCK_QUANTIZE_COLS] = IR_FP8_BLOCK,
                                                  [IR_ATTR_FP8_BLOCK_QUANTIZE_TRANSPOSE] = 1,
                                                  [IR_ATTR_FP8_BLOCK_QUANTIZE_EXPERTS] = counts < 0};
    int args[2] = {x, counts};
    return ir_emit(m, f, IR_OP_FP8_BLOCK_QUANTIZE, args, counts >= 0 ? 2 : 1, attrs, NULL, NULL);
}

int ir_fp8_matmul(ir_module *m, ir_func *f, int qa, int qb, bool ta, bool tb, ir_fp8_format grad_format, bool wgrad,
                  int dy_history)
{
    int args[5] = {qa, qa + 1, qb, qb + 1, dy_history};
    double attrs[IR_NATTRS_FP8_MATMUL] = {[IR_ATTR_FP8_MATMUL_TA] = ta, [IR_ATTR_FP8_MATMUL_TB] = tb,
                                          [IR_ATTR_FP8_MATMUL_GRAD_FORMAT] = grad_format,
                                          [IR_ATTR_FP8_MATMUL_WGRAD] = wgrad};
    return ir_emit(m, f, IR_OP_FP8_MATMUL, args, dy_history >= 0 ? 5 : 4, attrs, NULL, NULL);
}

int ir_reshape(ir_module *m, ir_func *f, int a, int ndim, const int64_t *dims)
{
    ir_type t = ir_tensor(f->vals[a].type.dtype, ndim, dims);
    return ir_emit(m, f, IR_OP_RESHAPE, &a, 1, NULL, NULL, &t);
}

bool ir_has_collective(const ir_module *m, ir_axis axis, unsigned flag)
{
    for (int f = 0; f < m->nfuncs; f++)
        for (int i = 0; i < m->funcs[f]->ninstrs; i++) {
            const ir_instr *in = &m->funcs[f]->instrs[i];
            bool over = ir_op_has(in->op, IR_OPF_COLLECTIVE) && (ir_axis)in->attr[IR_ATTR_AXIS] == axis;
            if (over && ir_op_has(in->op, flag))
                return true;
        }
    return false;
}

/* Multiply-adds of a GEMM whose operands are arguments first and first + 1 (attributes ta, tb). */
/* op(a) op(b) of operands ia and ib: a's elements times b's over the contracted extent. */
static double matmul_macs(const ir_func *f, const ir_instr *in, int ia, int ib)
{
    const ir_type *a = &f->vals[in->args[ia]].type, *b = &f->vals[in->args[ib]].type;
    double na = (double)ir_numel(a), last = (double)a->dims[a->ndim - 1];
    double contracted = in->attr[IR_ATTR_TA] != 0 ? na / last : last;
    return na * (double)ir_numel(b) / contracted;
}

/* The rows of a routed-rows buffer of R rows that balanced routing fills, as the source of its
 * counts bounds them: at most E x capacity where the sort was given moe_capacity's kept weights,
 * and behind expert parallelism's dispatch (the counts a run sort's, or all_to_all_v's came
 * itself) at most the rows a rank sends (it receives as many). */
static double routed_rows(const ir_func *f, int counts, double R)
{
    const ir_instr *src = &f->instrs[f->vals[counts].def];
    if (src->op == IR_OP_MOE_SORT_RUNS) { /* the local experts' counts: the rows its came delivered */
        const ir_instr *moved = &f->instrs[f->vals[src->args[0]].def];
        src = &f->instrs[f->vals[src->args[1]].def];
        if (src->op != IR_OP_ALL_TO_ALL_V && moved->op == IR_OP_ALL_TO_ALL_V)
            src = moved; /* a pipeline's backward: its came through a stash, the rows it sorts the
                            gradients' dispatch, which sends as many as the forward's */
    }
    double rows = R;
    if (src->op == IR_OP_ALL_TO_ALL_V) {
        rows = (double)f->vals[src->args[0]].type.dims[0];
    } else if (src->op == IR_OP_MOE_SORT && src->nargs == 2) {
        const ir_instr *cap = &f->instrs[f->vals[src->args[1]].def];
        double experts = (double)f->vals[src->res[1]].type.dims[0];
        rows = cap->op == IR_OP_MOE_CAPACITY ? cap->attr[IR_ATTR_MOE_CAPACITY_CAPACITY] * experts : R;
    }
    return rows < R ? rows : R;
}

bool ir_grouped_operands(const ir_instr *in, int *buffer, int *counts)
{
    switch (in->op) {
    case IR_OP_MOE_GROUPED_MATMUL: case IR_OP_MOE_GROUPED_WGRAD: *buffer = 0, *counts = 2; return true;
    case IR_OP_MOE_GROUPED_WGRAD_ACCUMULATE: *buffer = 1, *counts = 3; return true; /* after its destination */
    case IR_OP_FP8_GROUPED_MATMUL: case IR_OP_FP8_GROUPED_WGRAD: *buffer = 0, *counts = 4; return true; /* (qa, sa, qb, sb, counts) */
    case IR_OP_FP8_GROUPED_WGRAD_ACCUMULATE: *buffer = 1, *counts = 5; return true;
    case IR_OP_FP8_BLOCK_QUANTIZE: *buffer = 0, *counts = 1; return in->nargs == 2; /* blockwise experts' rows */
    default: return false;
    }
}

/* Whether grouped op `in`'s rows operand (at `buffer`) holds the experts' rows transposed, [P, R']:
 * a blockwise FP8 wgrad's (fp8_block_quantize with counts; its scale_inv beside it 2-D) */
static bool grouped_rows_transposed(const ir_func *f, const ir_instr *in, int buffer)
{
    bool fp8_wgrad = in->op == IR_OP_FP8_GROUPED_WGRAD || in->op == IR_OP_FP8_GROUPED_WGRAD_ACCUMULATE;
    return fp8_wgrad && ir_fp8_grouped_blockwise(&f->vals[in->args[buffer + 1]].type);
}

double ir_grouped_rows(const ir_func *f, const ir_instr *in, double *buffer_rows)
{
    int buffer, counts; /* the operand holding the rows, the one counting them */
    if (in->op == IR_OP_MOE_SORT_RUNS || in->op == IR_OP_MOE_UNSORT_RUNS) {
        buffer = 0, counts = 1; /* came */
    } else if (!ir_grouped_operands(in, &buffer, &counts)) {
        /* an op bounded by the rows received (row_bounds.c): its bound, a run sort's counts */
        if (ir_row_bound(in) < 0)
            return *buffer_rows = 0, 0;
        buffer = 0, counts = in->nargs - 1;
    }
    *buffer_rows = (double)f->vals[in->args[buffer]].type.dims[grouped_rows_transposed(f, in, buffer) ? 1 : 0];
    return routed_rows(f, in->args[counts], *buffer_rows);
}

double ir_work_macs(const ir_func *f, const ir_instr *in)
{
    switch (in->op) {
    case IR_OP_MATMUL: case IR_OP_MATMUL_ADD: case IR_OP_MATMUL_BIAS: case IR_OP_MATMUL_BIAS_ADD:
    case IR_OP_MATMUL_BIAS_GELU: case IR_OP_MATMUL_DGELU_BGRAD:
        return matmul_macs(f, in, 0, 1);
    case IR_OP_MATMUL_ACCUMULATE:
        return matmul_macs(f, in, 1, 2);
    case IR_OP_FP8_MATMUL: case IR_OP_FP8_MATMUL_ADD: /* (qa, sa, qb, sb[, hdy or c]) */
        return matmul_macs(f, in, 0, 2);
    case IR_OP_FP8_MATMUL_ACCUMULATE: /* (dst, qa, sa, qb, sb) */
        return matmul_macs(f, in, 1, 3);
    case IR_OP_MOE_GROUPED_MATMUL: case IR_OP_MOE_GROUPED_WGRAD: case IR_OP_MOE_GROUPED_WGRAD_ACCUMULATE:
    case IR_OP_FP8_GROUPED_MATMUL: case IR_OP_FP8_GROUPED_WGRAD: case IR_OP_FP8_GROUPED_WGRAD_ACCUMULATE: {
        /* each routed row once: rows x K x F (the accumulate's operands after its destination) */
        int first = in->op == IR_OP_MOE_GROUPED_WGRAD_ACCUMULATE || in->op == IR_OP_FP8_GROUPED_WGRAD_ACCUMULATE;
        const ir_type *a = &f->vals[in->args[first]].type;
        const ir_type *r = first ? &f->vals[in->args[0]].type : &f->vals[in->res[0]].type;
        double buffer_rows, features = (double)a->dims[grouped_rows_transposed(f, in, first) ? 0 : 1];
        return ir_grouped_rows(f, in, &buffer_rows) * features * (double)r->dims[r->ndim - 1]; /* a[R,K] by r[R,F];
                                                       wgrad a[R,P] (blockwise [P,R']) by r[E,P,Q] */
    }
    case IR_OP_ATTENTION: case IR_OP_ATTENTION_GRAD: { /* q [B,T,H,D] by k [B,Tk,Hk,D]: QK^T, and P by v
                                                        [B,Tk,Hk,Dv], causal: half of each (Tk: every cp
                                                        rank's keys gathered, or a ring piece's one
                                                        rank's); the backward 2.5x */
        bool fwd = in->op == IR_OP_ATTENTION;
        const ir_type *q = &f->vals[in->args[fwd ? 0 : 1]].type, *k = &f->vals[in->args[fwd ? 1 : 2]].type,
                      *v = &f->vals[in->args[fwd ? 2 : 3]].type;
        double w = 0.5 * (double)ir_numel(q) * (1.0 + (double)v->dims[3] / (double)q->dims[3]) * (double)k->dims[1];
        return fwd ? w : 2.5 * w;
    }
    default:
        return 0;
    }
}

double ir_yarn_mscale(double factor, double m) { return factor <= 1 ? 1.0 : 0.1 * m * log(factor) + 1.0; }

/* The pair (fractional) that turns `turns` times in the original context (Megatron's
 * _yarn_find_correction_dim) */
static double yarn_pair(double turns, double R, double theta, double context)
{
    return R * log(context / (turns * 6.283185307179586)) / (2 * log(theta));
}

ir_rope_scale ir_rope_scale_of(const double *a, int64_t R)
{
    ir_rope_scale s = {.theta = a[IR_ATTR_ROPE_THETA], .factor = a[IR_ATTR_ROPE_SCALING], .concentration = 1};
    double context = a[IR_ATTR_ROPE_YARN_CONTEXT];
    if (context <= 0)
        return s;
    s.yarn = true;
    /* Megatron's _yarn_find_correction_range with round_to_int (its default), then
     * _yarn_linear_ramp_mask's widening of an empty ramp */
    s.yarn_low = fmax(floor(yarn_pair(a[IR_ATTR_ROPE_BETA_FAST], (double)R, s.theta, context)), 0);
    s.yarn_high = fmin(ceil(yarn_pair(a[IR_ATTR_ROPE_BETA_SLOW], (double)R, s.theta, context)), (double)R - 1);
    if (s.yarn_high == s.yarn_low)
        s.yarn_high += 0.001;
    s.concentration = ir_yarn_mscale(s.factor, a[IR_ATTR_ROPE_MSCALE]) / ir_yarn_mscale(s.factor, a[IR_ATTR_ROPE_MSCALE_ALL_DIM]);
    return s;
}

double ir_rope_freq(const ir_rope_scale *s, int64_t i, int64_t R)
{
    double freq = pow(s->theta, -2.0 * (double)i / (double)R), factor = s->factor;
    if (s->yarn) { /* the ramp's share of the unscaled frequency: 1 below low, 0 above high */
        double ramp = fmin(fmax(((double)i - s->yarn_low) / (s->yarn_high - s->yarn_low), 0), 1);
        return freq / factor * ramp + freq * (1 - ramp);
    }
    if (factor <= 0)
        return freq;
    double wavelen = 6.283185307179586 / freq, turns = IR_ROPE_ORIGINAL_CONTEXT / wavelen;
    if (wavelen < IR_ROPE_ORIGINAL_CONTEXT / IR_ROPE_HIGH_FREQ_FACTOR)
        return freq;
    if (wavelen > IR_ROPE_ORIGINAL_CONTEXT / IR_ROPE_LOW_FREQ_FACTOR)
        return freq / factor;
    double smooth = (turns - IR_ROPE_LOW_FREQ_FACTOR) / (IR_ROPE_HIGH_FREQ_FACTOR - IR_ROPE_LOW_FREQ_FACTOR);
    return (1 - smooth) * freq / factor + smooth * freq;
}
