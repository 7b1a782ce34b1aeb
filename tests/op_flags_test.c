/* op_flags_test.c — the op table's flags column (ir/ops.def, IR_OPF_*) against what the passes
 * that read it need: the collectives are exactly the ops that talk to other ranks, the copy lane
 * and sequence collectives carry the attributes their readers index, no view computes, and the
 * elementwise ops map onto the generated CPU kernels' operand layouts as before the column. */
#include "runtime/cpu_kernels.h"
#include "tests/check.h"

#include <string.h>

/* Ops whose text names a collective: what IR_OPF_COLLECTIVE must cover, no more, no less. */
static bool named_collective(const char *name)
{
    return strstr(name, "all_reduce") != NULL || strstr(name, "all_gather") != NULL || strstr(name, "reduce_scatter") != NULL ||
           strstr(name, "all_to_all") != NULL || strstr(name, "ring_shift") != NULL;
}

static void test_collectives(void)
{
    for (int op = 0; op < IR_NUM_OPS; op++) {
        const char *name = ir_ops[op].name;
        CHECK(ir_op_has(op, IR_OPF_COLLECTIVE) == named_collective(name), "%s: flagged collective is %d, its name says %d",
              name, ir_op_has(op, IR_OPF_COLLECTIVE), named_collective(name));
        /* the copy lane and ir_seq_dim read attributes axis (0) and batch (2) */
        if (ir_op_has(op, IR_OPF_COPY_LANE))
            CHECK(ir_op_has(op, IR_OPF_COLLECTIVE) && ir_attr_index(op, "axis") == 0 && ir_attr_index(op, "batch") == 2,
                  "%s is a copy-lane op: it must be a collective with attributes axis (0) and batch (2)", name);
        /* ir_overlapped reads attribute overlap; comm_overlap writes a sequence collective's as attribute 1 */
        if (ir_op_has(op, IR_OPF_SEQ_COLLECTIVE))
            CHECK(ir_op_has(op, IR_OPF_COPY_LANE) && ir_op_has(op, IR_OPF_OVERLAP) && ir_attr_index(op, "overlap") == 1,
                  "%s is a sequence collective: it must be a copy-lane op that may overlap, attribute 1 overlap", name);
        if (ir_op_has(op, IR_OPF_OVERLAP))
            CHECK(ir_op_has(op, IR_OPF_COLLECTIVE) && ir_attr_index(op, "overlap") >= 0,
                  "%s may overlap: it must be a collective with an attribute overlap", name);
    }
    CHECK(!ir_op_has(IR_OP_LOCAL_SHARD, IR_OPF_COLLECTIVE), "local_shard moves nothing between ranks");
}

static void test_views_and_types(void)
{
    for (int op = 0; op < IR_NUM_OPS; op++) {
        const char *name = ir_ops[op].name;
        if (ir_op_has(op, IR_OPF_VIEW))
            CHECK(!ir_op_has(op, IR_OPF_ELEMENTWISE) && ir_ops[op].nargs == 1 && ir_ops[op].nres == 1,
                  "%s is a view: one operand, one result, and no computation", name);
        if (ir_op_has(op, IR_OPF_EXPLICIT_TYPE))
            CHECK(ir_ops[op].nres == 1 && ir_ops[op].nargs <= 1, "%s has an explicit type: one result", name);
        if (ir_op_has(op, IR_OPF_STORES_GLOBAL) || ir_op_has(op, IR_OPF_RECOMPUTE_ACTIVATION | IR_OPF_RECOMPUTE_SELECTIVE))
            CHECK(ir_ops[op].nres == (ir_op_has(op, IR_OPF_STORES_GLOBAL) ? 0 : 1),
                  "%s: a store has no result, a recomputed op one", name);
    }
    ir_op sym[] = {IR_OP_INPUT, IR_OP_GLOBAL, IR_OP_OUTPUT};
    int nsym = 0;
    for (int op = 0; op < IR_NUM_OPS; op++)
        nsym += ir_op_has(op, IR_OPF_SYM);
    CHECK(nsym == 3, "only input, global and output take an @name, %d ops are flagged", nsym);
    for (int i = 0; i < 3; i++)
        CHECK(ir_op_has(sym[i], IR_OPF_SYM), "%s takes an @name", ir_ops[sym[i]].name);
}

/* The kinds rt_elementwise_kind_of gave before the flags column (a switch over these ops): the
 * generated kernels' operand layout must not move. */
static void test_elementwise_kinds(void)
{
    static const struct {
        ir_op op;
        rt_elementwise_kind kind;
    } kinds[] = {
        {IR_OP_SCALE, RT_EW_UNARY},     {IR_OP_GELU, RT_EW_UNARY},      {IR_OP_SILU, RT_EW_UNARY},
        {IR_OP_SQRT, RT_EW_UNARY},      {IR_OP_ADD, RT_EW_BINARY},      {IR_OP_MUL, RT_EW_BINARY},
        {IR_OP_GELU_GRAD, RT_EW_BINARY}, {IR_OP_SILU_GRAD, RT_EW_BINARY}, {IR_OP_ACCUMULATE, RT_EW_INTO},
        {IR_OP_COPY, RT_EW_INTO},       {IR_OP_FILL, RT_EW_FILL},
        {IR_OP_SQUARED_RELU, RT_EW_UNARY}, {IR_OP_SQUARED_RELU_GRAD, RT_EW_BINARY},
    };
    int n = (int)(sizeof kinds / sizeof kinds[0]), flagged = 0;
    for (int op = 0; op < IR_NUM_OPS; op++)
        flagged += ir_op_has(op, IR_OPF_ELEMENTWISE);
    CHECK(flagged == n, "%d ops are flagged elementwise, the generated kernels serve %d", flagged, n);
    for (int i = 0; i < n; i++)
        CHECK(rt_elementwise_kind_of(kinds[i].op) == kinds[i].kind, "%s: elementwise kind %d, expected %d",
              ir_ops[kinds[i].op].name, rt_elementwise_kind_of(kinds[i].op), kinds[i].kind);
}

int main(void)
{
    ir_ops_init();
    test_collectives();
    test_views_and_types();
    test_elementwise_kinds();
    printf(failures ? "op_flags_test: %d FAILED\n" : "op_flags_test: all passed\n", failures);
    return failures != 0;
}
