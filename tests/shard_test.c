/* shard_test.c — mesh-generic sharding: a dimension split over several mesh axes in the text form
 * (print, parse, verify), every op of ir/ops.def with a sharding rule in the shard pass (or
 * marked as never reaching it), and the shard pass's propagation run over another axis than tp
 * (features split over cp, cp's own split of the tokens, ep's of the experts).
 * Usage: shard_test [text|rules|axis|tokens|experts] (none: all). */
#include "passes/passes.h"

#include <stdlib.h>
#include <string.h>

#include "tests/check.h"

/* --- the text form --------------------------------------------------------------------------- */

static const char *const multi_axis =
    "global @experts.w : f32[2,16,8] {shard=[ep,tp,-]} {kind=param, init=normal, std=0.02, layout=[ep:dim0, tp:dim1]}\n"
    "\n"
    "func f {kind=step, arena=0} {\n"
    "  %0 = input @x : f32[2,4,8] {shard=[dp,cp.tp,-]}\n"
    "  %1 = gelu %0 : f32[2,4,8] {shard=[dp,cp.tp,-]} {partial=ep}\n"
    "  %2 = scale %1 {factor=2} : f32[2,4,8] {shard=[edp.dp.pp,-,-]}\n"
    "  output @y %2\n"
    "}\n";

static void test_text(void)
{
    char err[512] = "";
    ir_module *m = ir_parse_module(multi_axis, err, sizeof err);
    CHECK(m, "the multi-axis module does not parse: %s", err);
    if (!m)
        return;
    char *again = ir_print_module(m);
    CHECK(!strcmp(again, multi_axis), "it does not reprint as written:\n%s", again);
    free(again);
    CHECK(ir_verify(m, err, sizeof err), "it fails the verifier: %s", err);
    const ir_type *x = ir_vtype(m->funcs[0], 0);
    ir_axis axes[IR_MAX_SHARD_AXES];
    CHECK(ir_shard_axes(x, 1, axes) == 2 && axes[0] == IR_AXIS_CP && axes[1] == IR_AXIS_TP,
          "the sequence of %%0 is split over cp, then tp (outer first)");
    CHECK(ir_shard_dim(x, IR_AXIS_TP) == 1 && ir_shard_dim(x, IR_AXIS_DP) == 0 && ir_shard_dim(x, IR_AXIS_EP) == -1,
          "ir_shard_dim finds each axis's dimension");
    CHECK(ir_shard_splits(x, 1, IR_AXIS_CP) && !ir_shard_splits(x, 0, IR_AXIS_CP), "ir_shard_splits is per dimension");
    ir_type t = *x;
    CHECK(!ir_shard_push(&t, 2, IR_AXIS_TP), "tp splits %%0 already: a second split over it is refused");
    ir_shard_drop(&t, IR_AXIS_CP);
    CHECK(ir_shard_axes(&t, 1, axes) == 1 && axes[0] == IR_AXIS_TP, "dropping cp keeps tp on the sequence");
    CHECK(ir_shard_push(&t, 1, IR_AXIS_CP) && ir_shard_axes(&t, 1, axes) == 2 && axes[1] == IR_AXIS_CP,
          "a pushed axis goes inside the others");
    ir_module_free(m);

    static const struct {
        const char *type, *message;
    } bad[] = {
        {"f32[2,4] {shard=[tp.cp.dp.pp,-]}", "line 2: bad type: dimension 0 is split over more than 3 axes"},
        {"f32[2,4] {shard=[tp,tp]}", "line 2: bad type: shard names axis tp twice"},
        {"f32[2,4] {shard=[cp.cp,-]}", "line 2: bad type: shard names axis cp twice"},
        {"f32[2,4] {shard=[cp.zz,-]}", "line 2: bad type: expected a mesh axis (-, dp, pp, tp, cp, ep, edp, dp_cp), or axes joined by dots"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char text[256];
        snprintf(text, sizeof text, "func f {kind=step, arena=0} {\n  %%0 = input @x : %s\n}\n", bad[i].type);
        m = ir_parse_module(text, err, sizeof err);
        CHECK(!m && strstr(err, bad[i].message), "`%s` gives `%s`, expected `%s`", bad[i].type, m ? "no error" : err,
              bad[i].message);
        ir_module_free(m);
    }

    /* the verifier: a value both split and partial over one axis; an axis splitting two
     * dimensions (the parser refuses it; built by hand) */
    m = ir_parse_module("func f {kind=step, arena=0} {\n  %0 = input @x : f32[2,4] {shard=[-,tp]} {partial=tp}\n}\n", err, sizeof err);
    CHECK(m && !ir_verify(m, err, sizeof err) && strstr(err, "both split over and partial over"),
          "split and partial over tp gives `%s`", err);
    ir_module_free(m);
    m = ir_parse_module("func f {kind=step, arena=0} {\n  %0 = input @x : f32[2,4] {shard=[tp,-]}\n}\n", err, sizeof err);
    if (m) {
        ir_type *y = &m->funcs[0]->vals[0].type;
        y->shard_pack[1] = y->shard_pack[0];
        CHECK(!ir_verify(m, err, sizeof err) && strstr(err, "a mesh axis that splits it twice"), "tp on two dimensions gives `%s`",
              err);
    }
    ir_module_free(m);
}

/* --- the rules ------------------------------------------------------------------------------- */

/* Every op has a sharding rule in the shard pass, or ops.def marks it NEVER; every rule kind is
 * some op's and has its rule. */
static void test_rules(void)
{
    bool used[IR_NUM_SHARD_RULES] = {false};
    for (int op = 0; op < IR_NUM_OPS; op++) {
        ir_shard_rule kind = ir_ops[op].shard;
        CHECK(kind >= IR_SHARD_NEVER && kind < IR_NUM_SHARD_RULES, "%s: shard column %d is no rule kind", ir_ops[op].name, kind);
        if (kind == IR_SHARD_NEVER || kind >= IR_NUM_SHARD_RULES)
            continue;
        used[kind] = true;
        CHECK(pass_shard_has_rule(kind), "%s: ops.def names sharding rule %d, which passes/shard.c's table lacks: add the "
              "rule, or mark the op NEVER if the shard pass never meets it", ir_ops[op].name, kind);
    }
    for (int k = IR_SHARD_NEVER + 1; k < IR_NUM_SHARD_RULES; k++)
        CHECK(used[k], "sharding rule kind %d is no op's: remove it", k);
}

/* --- the propagation over another axis ------------------------------------------------------- */

/* A column-parallel then a row-parallel matmul and a norm, the parameters placed over cp (the
 * globals' types), the batch split over dp by an earlier layout. */
static const char *const over_cp =
    "config {\n"
    "  context_parallel_size = \"2\"\n"
    "}\n"
    "\n"
    "global @w1 : f32[8,8] {shard=[cp,-]} {kind=param, init=normal, std=0.02, layout=[cp:dim0]}\n"
    "global @w2 : f32[8,8] {shard=[-,cp]} {kind=param, init=normal, std=0.02, layout=[cp:dim1]}\n"
    "global @ln.w : f32[8] {kind=param, init=ones, no_decay}\n"
    "global @ln.b : f32[8] {kind=param, init=zeros, no_decay}\n"
    "\n"
    "func f {kind=step, arena=0} {\n"
    "  %0 = input @x : f32[2,4,8] {shard=[dp,-,-]}\n"
    "  %1 = global @w1 : f32[8,8]\n"
    "  %2 = matmul %0, %1 {ta=0, tb=1} : f32[2,4,8] {shard=[dp,-,-]}\n"
    "  %3 = gelu %2 : f32[2,4,8] {shard=[dp,-,-]}\n"
    "  %4 = global @w2 : f32[8,8]\n"
    "  %5 = matmul %3, %4 {ta=0, tb=1} : f32[2,4,8] {shard=[dp,-,-]}\n"
    "  %6 = global @ln.w : f32[8]\n"
    "  %7 = global @ln.b : f32[8]\n"
    "  %8 = layernorm %5, %6, %7 {eps=1e-05} : f32[2,4,8] {shard=[dp,-,-]}\n"
    "  output @y %8\n"
    "}\n";

/* Module `text` after the shard pass over `axis` (degree 2) split as `split`, `place` (if any) first
 * giving it the placements the axis's pass gives. */
static char *shard_over(const char *text, ir_axis axis, pass_axis_split split, void (*place)(ir_module *m))
{
    char err[512] = "";
    ir_module *m = ir_parse_module(text, err, sizeof err);
    CHECK(m && ir_verify(m, err, sizeof err), "the module over %s: %s", ir_axis_name(axis), err);
    if (m && place)
        place(m);
    bool ok = m && pass_shard_axis(m, axis, 2, split, err, sizeof err);
    CHECK(ok, "the shard pass over %s fails: %s", ir_axis_name(axis), err);
    CHECK(!ok || ir_verify(m, err, sizeof err), "its result fails the verifier: %s", err);
    char *printed = ok ? ir_print_module(m) : strdup("");
    ir_module_free(m);
    return printed;
}

static void check_shows(const char *text, const char *const *lines, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        CHECK(strstr(text, lines[i]), "%s lacks `%s`:\n%s", what, lines[i], text);
    CHECK(!strstr(text, "=tp") && !strstr(text, "tp]"), "%s names tp:\n%s", what, text);
}

static void test_axis(void)
{
    /* the row-parallel product is partial over cp (axis 4): the norm needs it complete */
    char *text = shard_over(over_cp, IR_AXIS_CP, (pass_axis_split){.seq_dim = -1}, NULL);
    static const char *const reduced[] = {
        "= matmul %0, %1 {ta=0, tb=1} : f32[2,4,8] {shard=[dp,-,cp]}\n",
        "= matmul %3, %4 {ta=0, tb=1} : f32[2,4,8] {shard=[dp,-,-]} {partial=cp}\n",
        "= all_reduce %5 {axis=cp, max=0} : f32[2,4,8] {shard=[dp,-,-]}\n",
    };
    check_shows(text, reduced, sizeof reduced / sizeof *reduced, "the pass over cp");
    free(text);
    /* sequence parallelism over cp: reduce-scattered into the norm, all-gathered for the output */
    text = shard_over(over_cp, IR_AXIS_CP, (pass_axis_split){.seq_dim = 1}, NULL);
    static const char *const sliced[] = {
        "= reduce_scatter_seq %5 {axis=cp, overlap=0, batch=0} : f32[2,2,8] {shard=[dp,cp,-]}\n",
        "= layernorm %8, %6, %7 {eps=1e-05} : f32[2,2,8] {shard=[dp,cp,-]}\n",
        "= all_gather_seq %9 {axis=cp, overlap=0, batch=0} : f32[2,4,8] {shard=[dp,-,-]}\n",
    };
    check_shows(text, sliced, sizeof sliced / sizeof *sliced, "the pass over cp with sequence parallelism");
    free(text);
}

/* The propagation over cp with the tokens split (context parallelism's placements of the tokens,
 * as context_parallel.c gives them): the lookup, matmul and norm keep the rank's tokens, flattened
 * into rows they stay split, and the weight's gradient, a sum over them, is the rank's share,
 * stored as it is (no all_reduce, no partial mark: data_parallel sums it over dp_cp). */
static const char *const tokens_over_cp =
    "config {\n"
    "  context_parallel_size = \"2\"\n"
    "  seq_length = \"4\"\n"
    "}\n"
    "\n"
    "global @emb : f32[16,8] {kind=param, init=normal, std=0.02}\n"
    "global @w : f32[8,8] {kind=param, init=normal, std=0.02}\n"
    "global @w.grad : f32[8,8] {kind=grad, init=zeros, of=@w}\n"
    "\n"
    "func f {kind=step, arena=0} {\n"
    "  %0 = input @tokens {role=tokens} : i32[2,4]\n"
    "  %1 = global @emb : f32[16,8]\n"
    "  %2 = embedding %1, %0 {vocab_start=0, vocab_size=0} : f32[2,4,8]\n"
    "  %3 = global @w : f32[8,8]\n"
    "  %4 = matmul %2, %3 {ta=0, tb=1} : f32[2,4,8]\n"
    "  %5 = matmul %4, %2 {ta=1, tb=0} : f32[8,8]\n"
    "  %6 = global @w.grad : f32[8,8]\n"
    "  accumulate %6, %5\n"
    "  %7 = reshape %4 : f32[8,8]\n"
    "  output @y %7\n"
    "}\n";

/* context_parallel.c's placement: the step's tokens (value 0 here), the rank's chunks */
static void place_tokens(ir_module *m)
{
    ir_type *tokens = &m->funcs[0]->vals[0].type;
    *tokens = pass_seq_local(*tokens, 1, IR_AXIS_CP, 2);
}

static void test_tokens(void)
{
    pass_axis_split tokens = {.seq_dim = -1, .tokens = true, .comm = IR_CP_P2P};
    char *text = shard_over(tokens_over_cp, IR_AXIS_CP, tokens, place_tokens);
    static const char *const lines[] = {
        "= embedding %1, %0 {vocab_start=0, vocab_size=0} : f32[2,2,8] {shard=[-,cp,-]}\n",
        "= matmul %2, %3 {ta=0, tb=1} : f32[2,2,8] {shard=[-,cp,-]}\n",
        "= matmul %4, %2 {ta=1, tb=0} : f32[8,8]\n  %6 = global @w.grad : f32[8,8]\n  accumulate %6, %5\n",
        "= reshape %4 : f32[4,8] {shard=[cp,-]}\n",
    };
    check_shows(text, lines, sizeof lines / sizeof *lines, "the pass over cp's tokens");
    CHECK(!strstr(text, "all_reduce") && !strstr(text, "partial="), "a share is completed or marked partial:\n%s", text);
    free(text);
}

/* The propagation over ep with the experts split (expert parallelism's placements of the expert
 * weights, as expert_parallel.c gives them): the permuted rows dispatched to their experts' ranks
 * by the sort's counts, the grouped GEMM over the rows received by the local counts, and the rows
 * combined back before the unpermute. */
static const char *const experts_over_ep =
    "config {\n"
    "  expert_model_parallel_size = \"2\"\n"
    "  data_parallel_size = \"2\"\n"
    "}\n"
    "\n"
    "global @experts.w : f32[4,8,8] {kind=param, init=normal, std=0.02}\n"
    "\n"
    "func f {kind=step, arena=0} {\n"
    "  %0 = input @x : f32[4,8]\n"
    "  %1 = input @ids : i32[4,2]\n"
    "  %2, %3 = moe_sort %1 {experts=4} : i32[8], i32[4]\n"
    "  %4 = moe_permute %0, %2 : f32[8,8]\n"
    "  %5 = global @experts.w : f32[4,8,8]\n"
    "  %6 = moe_grouped_matmul %4, %5, %3 {tb=1} : f32[8,8]\n"
    "  %7 = input @w : f32[4,2]\n"
    "  %8 = moe_unpermute %6, %2, %7 : f32[4,8]\n"
    "  output @y %8\n"
    "}\n";

/* expert_parallel.c's placement: the rank's 2 of the 4 experts */
static void place_experts(ir_module *m)
{
    ir_global *w = &m->globals[0];
    w->type.dims[0] /= 2;
    ir_shard_push(&w->type, 0, IR_AXIS_EP);
    ir_layout_add(&w->layout, IR_AXIS_EP, IR_SPLIT_DIM, 0);
}

static void test_experts(void)
{
    pass_axis_split experts = {.seq_dim = -1, .experts = true};
    char *text = shard_over(experts_over_ep, IR_AXIS_EP, experts, place_experts);
    static const char *const lines[] = { /* 16 rows: 2 ranks x 4 tokens x min(top 2, 2 experts a rank) */
        "%5 = reshape %3 : i32[2,2]\n"
        "  %6, %7 = all_to_all_v %4, %5 {axis=ep, rows=16, capacity=0, overlap=0} : f32[16,8], i32[2,2]\n"
        "  %8, %9 = moe_sort_runs %6, %7 : f32[16,8], i32[2]\n",
        "= moe_grouped_matmul %8, %10, %9 {tb=1} : f32[16,8]\n",
        "= moe_unsort_runs %11, %7 : f32[16,8]\n",
        "= all_to_all_v %13, %7 {axis=ep, rows=8, capacity=0, overlap=0} : f32[8,8], i32[2,2]\n",
        "= moe_unpermute %14, %2, %12 : f32[4,8]\n",
    };
    check_shows(text, lines, sizeof lines / sizeof *lines, "the pass over ep's experts");
    free(text);
}

int main(int argc, char **argv)
{
    ir_ops_init();
    static const check_part tests[] = {{"text", test_text},     {"rules", test_rules},    {"axis", test_axis},
                                       {"tokens", test_tokens}, {"experts", test_experts}};
    return check_main(argc, argv, tests, sizeof tests / sizeof *tests);
}
