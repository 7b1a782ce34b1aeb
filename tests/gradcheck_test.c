/* gradcheck_test.c — finite-difference check of every op that has a gradient rule, through the
 * whole path a model takes: the op in a graph, pass_autodiff applying the op table's rule, the
 * memory plan, the text form, and the CPU kernels. Each case builds
 *     loss = cross_entropy(reshape(op(params...)) to [rows, last], fixed targets)
 * and compares d loss / d param from autodiff with finite differences of that loss recomputed in
 * double from the fp32 logits (the plan's own loss is rounded to fp32, which alone would hide a
 * gradient 0.1% off). An op with a gradient rule but no case here fails the test, so new rules
 * cannot skip it. */
#include "ir/ir.h"
#include "passes/passes.h"
#include "runtime/program.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    ir_module *m;
    ir_func *f;
} graph;

static int param(graph *g, const char *name, int ndim, const int64_t *dims)
{
    int k = ir_global_add(g->m, name, ir_tensor(IR_F32, ndim, dims), IR_GLOBAL_PARAM, IR_INIT_NORMAL, 1.0, false);
    return ir_global_ref(g->m, g->f, k);
}

/* Token ids are inputs filled with fixed values by the test: an op's integer operand has role
 * tokens (the test fills it so), the loss's targets. */
static int ids(graph *g, ir_role_kind role, const char *name, int ndim, const int64_t *dims)
{
    return ir_input(g->m, g->f, ir_role_of(role), name, ir_tensor(IR_I32, ndim, dims));
}

static int emit(graph *g, ir_op op, const int *args, int nargs, double a0, double a1)
{
    double attrs[IR_MAX_ATTRS] = {a0, a1};
    return ir_emit(g->m, g->f, op, args, nargs, attrs, NULL, NULL);
}

/* The micro-batch's first sample (an input the test sets: FIRST_SAMPLE, above 2^32 so that the
 * counter's high word is exercised). */
#define FIRST_SAMPLE 6000000007ll
static int first_sample(graph *g)
{
    return ir_input(g->m, g->f, ir_role_of(IR_ROLE_FIRST_SAMPLE), "first_sample", ir_scalar(IR_I64));
}

/* dropout (p 0.3) of x[2,5,6] as the sequence slice [3, 8) of 10 positions, or attention dropout
 * of heads [2, 6) of 8: the mask is fixed by the attributes and first_sample, so the op is linear
 * in x and central differences see exactly its gradient; a rule that forgets the mask fails. */
static int dropout_case(graph *g, ir_op op, const int *args, int nargs)
{
    double attrs[IR_MAX_ATTRS] = {0.3, 1234, 5, 2, 8}; /* attention: head_offset, heads (cp 0: one rank's) */
    if (op == IR_OP_DROPOUT)
        attrs[3] = 1, attrs[4] = 3, attrs[5] = 10; /* dim, offset, extent */
    int a[4];
    for (int i = 0; i < nargs; i++)
        a[i] = args[i];
    a[nargs] = first_sample(g);
    return ir_emit(g->m, g->f, op, a, nargs + 1, attrs, NULL, NULL);
}

/* build_case's answer for an op whose rule finite differences cannot check: fp8_matmul's (and the
 * experts' fp8_grouped_matmul's) is straight-through, the gradient of the unquantized product,
 * while its loss is a step function of the operands (each rounded to the FP8 grid);
 * numerics_vs_torch_fp8_* check it against PyTorch (the experts': numerics_vs_torch_fp8*_tiny-moe). */
#define STRAIGHT_THROUGH (-2)
/* ... and for moe_aux_attach, whose rule adds a loss to the objective that the plan's loss output
 * (what finite differences see) leaves out, as Megatron's MoEAuxLossAutoScaler does:
 * numerics_vs_torch_tiny-moe checks the objective's gradients against PyTorch. */
#define OBJECTIVE_ONLY (-3)

/* Three routings of one logits[5,3] param, top 2 (no two of a row's logits nearer than the
 * differences' steps, which would swap the choice): softmax after the top k, softmax before it, and
 * sigmoid scores scaled by 2.5; then two group-limited routings of a logits[5,8] param, top 2:
 * softmax scaled by 1.5 in 2 groups of 4, the best one kept (each group scored by its top 2), and
 * sigmoid scaled by 2.5 in 4 groups of 2, the best 2 kept (each scored by its best). Their weights
 * summed ([5,2]). */
static int route_case(graph *g)
{
    int64_t d[2] = {5, 3}, grouped_d[2] = {5, 8};
    int logits = param(g, "logits", 2, d), grouped = param(g, "grouped", 2, grouped_d), sum = -1;
    double attrs[5][IR_NATTRS_MOE_ROUTE] = {{2, 0, 0, 0}, {2, 0, 1, 0}, {2, 1, 0, 2.5}, {2, 0, 0, 1.5, 2, 1},
                                            {2, 1, 0, 2.5, 4, 2}};
    for (int i = 0; i < 5; i++) {
        int w = ir_emit(g->m, g->f, IR_OP_MOE_ROUTE, i < 3 ? &logits : &grouped, 1, attrs[i], NULL, NULL);
        sum = sum < 0 ? w : ir_op2(g->m, g->f, IR_OP_ADD, sum, w);
    }
    return sum;
}

/* The dispatch and the experts: 4 tokens of x[4,6] routed by fixed ids [4,2] (the test's, below 9)
 * to 9 experts (one of them gets no rows), two grouped matmuls (w[E,F,K] and w[E,K,F]) and the
 * combine weighted by wts[4,2] -> [4,3]. */
static int experts_case(graph *g)
{
    int64_t x_d[2] = {4, 6}, pairs[2] = {4, 2}, w1_d[3] = {9, 5, 6}, w2_d[3] = {9, 5, 3};
    int id = ids(g, IR_ROLE_TOKENS, "ids", 2, pairs);
    double experts = 9, tb = 1, not_tb = 0;
    int perm = ir_emit(g->m, g->f, IR_OP_MOE_SORT, &id, 1, &experts, NULL, NULL), counts = perm + 1;
    int args[3] = {param(g, "x", 2, x_d), perm};
    int xp = ir_emit(g->m, g->f, IR_OP_MOE_PERMUTE, args, 2, NULL, NULL, NULL);
    int a1[3] = {xp, param(g, "w1", 3, w1_d), counts};
    int h = ir_emit(g->m, g->f, IR_OP_MOE_GROUPED_MATMUL, a1, 3, &tb, NULL, NULL);
    int a2[3] = {h, param(g, "w2", 3, w2_d), counts};
    int y = ir_emit(g->m, g->f, IR_OP_MOE_GROUPED_MATMUL, a2, 3, &not_tb, NULL, NULL);
    int a3[3] = {y, perm, param(g, "wts", 2, pairs)};
    return ir_emit(g->m, g->f, IR_OP_MOE_UNPERMUTE, a3, 3, NULL, NULL, NULL);
}

/* Token dropping of weights wts[5,2] routed by fixed ids (the test's: experts 3,1 8,6 4,2 0,7 5,3),
 * capacity 1 by position: the second pair of expert 3 is dropped, whatever the weights (so the
 * differences see no change of the choice; numerics_vs_torch_tiny-moe_capacity_probs checks the
 * probs policy). */
static int capacity_case(graph *g)
{
    int64_t pairs[2] = {5, 2};
    int w = param(g, "wts", 2, pairs), args[3] = {w, w, ids(g, IR_ROLE_TOKENS, "ids", 2, pairs)};
    double attrs[4] = {1, 1, 0, 0};
    return ir_emit(g->m, g->f, IR_OP_MOE_CAPACITY, args, 3, attrs, NULL, NULL);
}

/* A scalar loss s made a [1,6] output: s b, b a param [1,6]. */
static int scalar_case(graph *g, int s)
{
    int64_t one[2] = {1, 1}, b[2] = {1, 6};
    return ir_matmul(g->m, g->f, ir_reshape(g->m, g->f, s, 2, one), param(g, "b", 2, b), false, false);
}

/* The aux loss of logits[5,3] routed top 2 (the scores' gaps all above the differences' steps), with softmax and with sigmoid scores, summed; and the z loss. */
static int router_loss_case(graph *g, ir_op op)
{
    int64_t d[2] = {6, 3};
    int logits = param(g, "logits", 2, d);
    if (op == IR_OP_MOE_Z_LOSS)
        return scalar_case(g, ir_op1(g->m, g->f, op, logits));
    /* topk, score, seq: over all 6 tokens, and per sequence (seq_aux_loss) of 3 and of 2 tokens */
    double route[IR_NATTRS_MOE_ROUTE] = {2, 0, 0, 0}, softmax[3] = {2, 0, 0}, sigmoid[3] = {2, 1, 0}, seq3[3] = {2, 0, 3}, seq2[3] = {2, 1, 2};
    logits = ir_scale(g->m, g->f, logits, 2); /* the loss is about 1, its gradients about 1/N: doubled, they
                                                  stand further above the loss's fp32 rounding over h */
    int args[2] = {logits, ir_emit(g->m, g->f, IR_OP_MOE_ROUTE, &logits, 1, route, NULL, NULL) + 1};
    int a = ir_emit(g->m, g->f, op, args, 2, softmax, NULL, NULL), b = ir_emit(g->m, g->f, op, args, 2, sigmoid, NULL, NULL);
    int c = ir_emit(g->m, g->f, op, args, 2, seq3, NULL, NULL), e = ir_emit(g->m, g->f, op, args, 2, seq2, NULL, NULL);
    int ab = ir_op2(g->m, g->f, IR_OP_ADD, a, b), ce = ir_op2(g->m, g->f, IR_OP_ADD, c, e);
    return scalar_case(g, ir_op2(g->m, g->f, IR_OP_ADD, ab, ce));
}

/* Builds the case for `op`; returns the value to differentiate, -1 if there is no case, or
 * STRAIGHT_THROUGH. */
static int build_case(graph *g, ir_op op)
{
    int64_t v6[1] = {6}, m46[2] = {4, 6}, m56[2] = {5, 6}, m65[2] = {6, 5}, bthd[4] = {2, 5, 4, 6}, bthd2[4] = {2, 5, 2, 6};
    int64_t btd[3] = {2, 5, 6}, pd[2] = {7, 6}, vd[2] = {9, 6}, bt[2] = {2, 5}, bthv2[4] = {2, 5, 2, 4};
    int x, y, args[3];
    switch (op) {
    case IR_OP_ADD: case IR_OP_MUL: case IR_OP_SWIGLU:
        return ir_op2(g->m, g->f, op, param(g, "a", 2, m46), param(g, "b", 2, m46));
    case IR_OP_SCALE: x = param(g, "a", 2, m46); return emit(g, op, &x, 1, -1.5, 0);
    case IR_OP_CONVERT: /* to f32 and to the activations' dtype (f32 here: the CPU's), a gelu on one path */
        x = param(g, "a", 2, m46);
        return ir_op2(g->m, g->f, IR_OP_ADD, ir_convert(g->m, g->f, x, true),
                      ir_op1(g->m, g->f, IR_OP_GELU, ir_convert(g->m, g->f, x, false)));
    case IR_OP_BIAS_ADD: return ir_op2(g->m, g->f, op, param(g, "a", 2, m46), param(g, "b", 1, v6));
    case IR_OP_GELU: case IR_OP_SILU: case IR_OP_SQUARED_RELU: return ir_op1(g->m, g->f, op, param(g, "a", 2, m46));
    case IR_OP_RESHAPE: {
        int64_t d[2] = {6, 4};
        return ir_op1(g->m, g->f, IR_OP_GELU, ir_reshape(g->m, g->f, param(g, "a", 2, m46), 2, d));
    }
    case IR_OP_MATMUL: /* x W^T and x B, the two forms models use */
        x = param(g, "x", 2, m46);
        y = ir_matmul(g->m, g->f, x, param(g, "w", 2, m56), false, true); /* [4,5] */
        return ir_matmul(g->m, g->f, y, param(g, "b", 2, m56), false, false); /* [4,6] */
    case IR_OP_EMBEDDING: return ir_op2(g->m, g->f, op, param(g, "table", 2, vd), ids(g, IR_ROLE_TOKENS, "ids", 2, bt));
    case IR_OP_POS_ADD: return ir_op2(g->m, g->f, op, param(g, "x", 3, btd), param(g, "pos", 2, pd));
    case IR_OP_LAYERNORM: /* scaling by w, and by 1 + w (one_p: the weight zero-centred), summed */
        args[0] = param(g, "x", 2, m46), args[1] = param(g, "w", 1, v6), args[2] = param(g, "b", 1, v6);
        return ir_op2(g->m, g->f, IR_OP_ADD, emit(g, op, args, 3, 1e-5, 0), emit(g, op, args, 3, 1e-5, 1));
    case IR_OP_RMSNORM: /* by w, and by 1 + w (one_p), summed */
        args[0] = param(g, "x", 2, m46), args[1] = param(g, "w", 1, v6);
        return ir_op2(g->m, g->f, IR_OP_ADD, emit(g, op, args, 2, 1e-5, 0), emit(g, op, args, 2, 1e-5, 1));
    case IR_OP_ROPE: { /* the whole head of 6 channels, its first 4 (rotary_dim: a partial rotation), and YaRN's
                          rope (pairs unscaled and scaled, cos and sin times a concentration of 1.03), summed */
        double partial[IR_NATTRS_ROPE] = {[IR_ATTR_ROPE_THETA] = 10000, [IR_ATTR_ROPE_ROTARY_DIM] = 4};
        double yarn[IR_NATTRS_ROPE] = {[IR_ATTR_ROPE_THETA] = 10000, [IR_ATTR_ROPE_SCALING] = 4,
                                       [IR_ATTR_ROPE_YARN_CONTEXT] = 16, [IR_ATTR_ROPE_BETA_FAST] = 32,
                                       [IR_ATTR_ROPE_BETA_SLOW] = 1, [IR_ATTR_ROPE_MSCALE] = 0.707,
                                       [IR_ATTR_ROPE_MSCALE_ALL_DIM] = 0.5};
        x = param(g, "x", 4, bthd);
        int sum = ir_op2(g->m, g->f, IR_OP_ADD, emit(g, op, &x, 1, 10000, 0),
                         ir_emit(g->m, g->f, op, &x, 1, partial, NULL, NULL));
        return ir_op2(g->m, g->f, IR_OP_ADD, sum, ir_emit(g->m, g->f, op, &x, 1, yarn, NULL, NULL));
    }
    case IR_OP_ATTENTION: /* grouped-query: 4 query heads over 2 kv heads, values of 4 channels beside q and k's 6 */
        args[0] = param(g, "q", 4, bthd), args[1] = param(g, "k", 4, bthd2), args[2] = param(g, "v", 4, bthv2);
        return emit(g, op, args, 3, 0, 0);
    case IR_OP_SPLIT_LAST_DIM: { /* x [2,5,4,6] -> [2,5,4,2] and [2,5,1,4] summed over the heads, joined again */
        double attrs[IR_NATTRS_SPLIT_LAST_DIM] = {[IR_ATTR_SPLIT_LAST_DIM_SIZE] = 2, [IR_ATTR_SPLIT_LAST_DIM_SUM_HEADS] = 2};
        x = param(g, "x", 4, bthd);
        y = ir_emit(g->m, g->f, op, &x, 1, attrs, NULL, NULL);
        return ir_op2(g->m, g->f, IR_OP_CONCAT_LAST_DIM, ir_op1(g->m, g->f, IR_OP_GELU, y), y + 1);
    }
    case IR_OP_CONCAT_LAST_DIM: { /* a [2,5,4,6] beside b of one head [2,5,1,4] (broadcast), c's 4 heads
                                     [2,5,4,4] before a's, and b before a's (broadcast first), summed */
        int64_t b1[4] = {2, 5, 1, 4}, b4[4] = {2, 5, 4, 4};
        x = param(g, "a", 4, bthd), y = param(g, "b", 4, b1);
        int ab = ir_op2(g->m, g->f, op, x, y), ca = ir_op2(g->m, g->f, op, param(g, "c", 4, b4), x);
        return ir_op2(g->m, g->f, IR_OP_ADD, ir_op2(g->m, g->f, IR_OP_ADD, ab, ca), ir_op2(g->m, g->f, op, y, x));
    }
    case IR_OP_SHIFT_SEQ: /* x [2,5,6] by 2 to 3 positions, and by 3 to 3 (a 0 rolled in at the last) */
        x = param(g, "x", 3, btd);
        y = emit(g, op, &x, 1, 2, 3);
        return ir_op2(g->m, g->f, IR_OP_CONCAT_LAST_DIM, ir_op1(g->m, g->f, IR_OP_GELU, y), emit(g, op, &x, 1, 3, 3));
    case IR_OP_DROPOUT: x = param(g, "x", 3, btd); return dropout_case(g, op, &x, 1);
    case IR_OP_ATTENTION_DROPOUT:
        args[0] = param(g, "q", 4, bthd), args[1] = param(g, "k", 4, bthd2), args[2] = param(g, "v", 4, bthv2);
        return dropout_case(g, op, args, 3);
    case IR_OP_CROSS_ENTROPY: return param(g, "logits", 2, m65); /* the loss itself is the op */
    case IR_OP_ALL_TO_ALL_V: { /* one ep rank: splits "ids" [1,2] = {3, 1} keep x's first 4 of 7 rows in room for 6 */
        int64_t x76[2] = {7, 6}, s12[2] = {1, 2};
        args[0] = param(g, "x", 2, x76), args[1] = ids(g, IR_ROLE_TOKENS, "ids", 2, s12);
        return emit(g, op, args, 2, IR_AXIS_EP, 6); /* capacity 0 */
    }
    case IR_OP_CP_ALL_TO_ALL: { /* one cp rank: both directions, each rule emitting the other */
        int64_t b4hd[4] = {2, 4, 4, 6}; /* two chunks of 2 */
        x = emit(g, op, (int[]){param(g, "x", 4, b4hd)}, 1, IR_AXIS_CP, 1);
        return emit(g, op, &x, 1, IR_AXIS_CP, 0);
    }
    case IR_OP_MOE_SORT_RUNS: case IR_OP_MOE_UNSORT_RUNS: { /* came "ids" [2,2] = {3, 1, 8, 6}: all 18
                                                                rows received, none past them: the loss
                                                                reads every row, and rows past those
                                                                received are undefined (the CPU's NaN;
                                                                ops_test and the ep layouts check them) */
        int64_t x183[2] = {18, 3}, c22[2] = {2, 2};
        args[0] = param(g, "x", 2, x183), args[1] = ids(g, IR_ROLE_TOKENS, "ids", 2, c22);
        return emit(g, op, args, 2, 0, 0);
    }
    case IR_OP_FP8_MATMUL: case IR_OP_FP8_GROUPED_MATMUL: return STRAIGHT_THROUGH;
    case IR_OP_MOE_ROUTE: return route_case(g);
    case IR_OP_MOE_CAPACITY: return capacity_case(g);
    case IR_OP_MOE_PERMUTE: case IR_OP_MOE_UNPERMUTE: case IR_OP_MOE_GROUPED_MATMUL: return experts_case(g);
    case IR_OP_MOE_AUX_LOSS: case IR_OP_MOE_Z_LOSS: return router_loss_case(g, op);
    case IR_OP_MOE_AUX_ATTACH: return OBJECTIVE_ONLY;
    default: return -1;
    }
}

/* Wraps y into the scalar loss and builds the module through autodiff and the memory plan; the
 * logits are an output too, for the test's loss in double. */
static ir_module *finish(graph *g, int y)
{
    const ir_type *t = ir_vtype(g->f, y);
    int64_t last = t->dims[t->ndim - 1], rows = ir_numel(t) / last, d2[2] = {rows, last};
    int logits = ir_reshape(g->m, g->f, y, 2, d2);
    int targets = ids(g, IR_ROLE_TARGETS, "targets", 1, &rows);
    ir_output(g->m, g->f, ir_role_of(IR_ROLE_LOSS), "loss", ir_op2(g->m, g->f, IR_OP_CROSS_ENTROPY, logits, targets));
    ir_output(g->m, g->f, ir_role_of(IR_ROLE_LOGITS), "logits", logits);
    char err[512];
    mcc_pass_options opts = {.target = mcc_target_by_name("cpu")}; /* the CPU backend runs the checks */
    if (!pass_autodiff(g->m, &opts, err, sizeof err) || !pass_memory_plan(g->m, &opts, err, sizeof err) ||
        !ir_verify(g->m, err, sizeof err)) {
        fprintf(stderr, "building the case failed: %s\n", err);
        exit(1);
    }
    return g->m;
}

/* Sets the input of role (if the plan has it) to ids below bound; returns them (the caller frees). */
static int32_t *fill_ids(rt_program *p, ir_role_kind role, int bound)
{
    int i = rt_program_find(p, 0, IR_OP_INPUT, ir_role_of(role));
    if (i < 0)
        return NULL;
    const ir_type *t = ir_vtype(p->m->funcs[0], p->m->funcs[0]->instrs[i].res[0]);
    int32_t *buf = malloc(ir_bytes(t));
    for (int64_t k = 0; k < ir_numel(t); k++)
        buf[k] = (int32_t)((k * 7 + 3) % bound);
    rt_program_set_input(p, 0, i, buf, ir_bytes(t));
    return buf;
}

/* The plan's logits [rows, V] and targets, where the loss is computed again in double. */
typedef struct {
    int64_t rows, V;
    float *logits;
    const int32_t *targets;
} loss_ref;

/* Runs the step; returns mean over rows of logsumexp(row) - row[target], in double. */
static double loss_of(rt_program *p, const loss_ref *r)
{
    rt_program_run(p, 0);
    int logits = rt_program_find(p, 0, IR_OP_OUTPUT, ir_role_of(IR_ROLE_LOGITS));
    rt_program_get_output(p, 0, logits, r->logits, (size_t)(r->rows * r->V) * sizeof(float));
    double total = 0;
    for (int64_t i = 0; i < r->rows; i++) {
        const float *x = r->logits + i * r->V;
        double mx = x[0], sum = 0;
        for (int64_t j = 1; j < r->V; j++)
            mx = fmax(mx, x[j]);
        for (int64_t j = 0; j < r->V; j++)
            sum += exp(x[j] - mx);
        total += mx + log(sum) - x[r->targets[i]];
    }
    return total / (double)r->rows;
}

/* Compares every parameter's autodiff gradient with finite differences. */
static bool check(ir_op op, ir_module *m)
{
    char *text = ir_print_module(m), err[512];
    if (getenv("GRADCHECK_DUMP"))
        fputs(text, stdout);
    rt_program *p = rt_program_load(text, &rt_cpu_device, NULL, 0, err, sizeof err);
    free(text);
    if (!p) {
        fprintf(stderr, "%s: plan does not load: %s\n", ir_ops[op].name, err);
        return false;
    }
    rt_program_init_params(p, 7);
    free(fill_ids(p, IR_ROLE_TOKENS, 9)); /* the embedding case's table has 9 rows */
    const ir_func *f = p->m->funcs[0];
    const ir_type *lt = ir_vtype(f, f->instrs[rt_program_find(p, 0, IR_OP_OUTPUT, ir_role_of(IR_ROLE_LOGITS))].args[0]);
    loss_ref ref = {lt->dims[0], lt->dims[1], malloc(ir_bytes(lt)), NULL};
    int32_t *targets = fill_ids(p, IR_ROLE_TARGETS, (int)ref.V);
    ref.targets = targets;
    int first_in = rt_program_find(p, 0, IR_OP_INPUT, ir_role_of(IR_ROLE_FIRST_SAMPLE));
    if (first_in >= 0) {
        int64_t first = FIRST_SAMPLE;
        rt_program_set_input(p, 0, first_in, &first, sizeof first);
    }
    loss_of(p, &ref); /* accumulates the gradients once; later runs keep adding, so keep a copy */
    float **grads = calloc((size_t)p->m->nglobals, sizeof(float *));
    for (int g = 0; g < p->m->nglobals; g++)
        if (p->m->globals[g].kind == IR_GLOBAL_GRAD) {
            size_t bytes = ir_bytes(&p->m->globals[g].type);
            grads[g] = memcpy(malloc(bytes), p->globals[g], bytes);
        }

    bool ok = true;
    for (int g = 0; g < p->m->nglobals; g++) {
        const ir_global *gl = &p->m->globals[g];
        if (gl->kind != IR_GLOBAL_PARAM)
            continue;
        char gname[128];
        snprintf(gname, sizeof gname, "%s.grad", gl->name);
        const float *grad = grads[ir_global_find(p->m, gname)];
        float *w = p->globals[g];
        double err2 = 0, ref2 = 0;
        for (int64_t i = 0; i < ir_numel(&gl->type); i++) {
            const float h = 3e-2f, keep = w[i];
            double at[4]; /* the loss at keep + {-2, -1, 1, 2} h */
            for (int k = 0; k < 4; k++) {
                w[i] = keep + (float)(k < 2 ? k - 2 : k - 1) * h;
                at[k] = loss_of(p, &ref);
            }
            w[i] = keep;
            double fd = (8 * (at[2] - at[1]) - (at[3] - at[0])) / (12.0 * h);
            err2 += (fd - grad[i]) * (fd - grad[i]);
            ref2 += fd * fd;
        }
        /* The five-point difference's truncation is O(h^4), and what is left is the fp32
         * forward's rounding over h: correct rules measure at most 2e-5 at h = 3e-2 (smaller h
         * gives more rounding, larger more truncation). 1e-4 fails a gradient 0.1% off. */
        double rel = sqrt(err2 / (ref2 > 1e-20 ? ref2 : 1e-20));
        bool pass = rel < 1e-4 && ref2 > 0;
        printf("%-16s d/d%-8s rel err %.2e %s\n", ir_ops[op].name, gl->name, rel, pass ? "ok" : "FAIL");
        ok &= pass;
    }
    for (int g = 0; g < p->m->nglobals; g++)
        free(grads[g]);
    free(grads);
    free(ref.logits);
    free(targets);
    rt_program_free(p);
    return ok;
}

int main(void)
{
    ir_ops_init();
    bool ok = true;
    for (int op = 0; op < IR_NUM_OPS; op++) {
        if (ir_ops[op].grad == ir_grad_none)
            continue;
        graph g = {ir_module_new(), NULL};
        g.f = ir_func_new(g.m, "micro_step", IR_FUNC_STEP);
        int y = build_case(&g, (ir_op)op);
        if (y == STRAIGHT_THROUGH) {
            printf("%-16s straight-through: checked against PyTorch (numerics_vs_torch_fp8_*)\n", ir_ops[op].name);
        } else if (y == OBJECTIVE_ONLY) {
            printf("%-16s a loss outside the loss output: checked against PyTorch (numerics_vs_torch_tiny-moe)\n",
                   ir_ops[op].name);
        } else if (y < 0) {
            printf("%s has a gradient rule but no gradcheck case: add one to build_case\n", ir_ops[op].name);
            ok = false;
        } else {
            ok &= check((ir_op)op, finish(&g, y));
        }
        ir_module_free(g.m);
    }
    printf(ok ? "gradcheck: all ops pass\n" : "gradcheck: FAILED\n");
    return ok ? 0 : 1;
}
