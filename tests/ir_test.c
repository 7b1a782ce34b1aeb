/* ir_test.c — the IR text form and verifier: print/parse round-trips, parse and verifier errors
 * with their messages, the memory-plan check against a brute-force oracle, and a parser fuzz.
 * Usage: ir_test [roundtrip|parse_errors|verify_errors|memory_check|fuzz] (none: all). */
#include "ir/ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"

#define DIMS(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}
#define ATTRS(...) ((double[IR_MAX_ATTRS]){__VA_ARGS__})

static int emit(ir_module *m, ir_func *f, ir_op op, const int *args, int nargs, const double *attrs)
{
    return ir_emit(m, f, op, args, nargs, attrs, NULL, NULL);
}
#define EMIT(op, attrs, ...) emit(m, f, IR_OP_##op, (int[]){__VA_ARGS__}, (int)(sizeof((int[]){__VA_ARGS__}) / sizeof(int)), attrs)

/* Places every value the simplest valid way: globals @global, reshapes @view, everything else
 * in its own 64-aligned arena slot. */
static void plan_bump(ir_func *f)
{
    int64_t at = 0;
    for (int i = 0; i < f->ninstrs; i++)
        for (int r = 0; r < f->instrs[i].nres; r++) {
            ir_value *v = &f->vals[f->instrs[i].res[r]];
            ir_op op = f->instrs[i].op;
            v->mem = op == IR_OP_GLOBAL ? IR_MEM_GLOBAL : op == IR_OP_RESHAPE ? IR_MEM_VIEW : IR_MEM_ARENA;
            if (v->mem == IR_MEM_ARENA) {
                v->offset = at;
                at += ((int64_t)ir_bytes(&v->type) + 63) / 64 * 64;
            }
        }
    f->arena_bytes = at;
}

/* `global @name` in f: the test names its globals. */
static int global_ref(ir_module *m, ir_func *f, const char *name) { return ir_global_ref(m, f, ir_global_find(m, name)); }

/* A training step in miniature (V=16, d=8, B=2, T=4, H=2, D=4): a micro-step covering most ops,
 * one multi-result op, hand-set shardings and an arena plan; an unplanned optimizer step. */
static ir_module *build_module(void)
{
    ir_module *m = ir_module_new();
    ir_config_set(m, "accum_steps", "2");
    ir_config_set(m, "lr", "0.001");
    ir_config_set(m, "data_path", "runs/\"quoted\" dir\\x\nsecond line");
    ir_global_add(m, "wte", ir_tensor(IR_F32, DIMS(16, 8)), IR_GLOBAL_PARAM, IR_INIT_NORMAL, 0.02, false);
    ir_global_add(m, "wpe", ir_tensor(IR_F32, DIMS(8, 8)), IR_GLOBAL_PARAM, IR_INIT_NORMAL, 0.1, false);
    ir_global_add(m, "ln.w", ir_tensor(IR_F32, DIMS(8)), IR_GLOBAL_PARAM, IR_INIT_ONES, 0, true);
    ir_global_add(m, "ln.b", ir_tensor(IR_F32, DIMS(8)), IR_GLOBAL_PARAM, IR_INIT_ZEROS, 0, true);
    m->globals[0].placement = IR_PLACE_VOCAB; /* roles round-trip: a placement, a layer */
    m->globals[2].layer = 0;
    ir_global_add_companion(m, "wte.grad", ir_tensor(IR_F32, DIMS(16, 8)), IR_GLOBAL_GRAD, 0);
    ir_global_add_companion(m, "wte.adam_m", ir_tensor(IR_F32, DIMS(16, 8)), IR_GLOBAL_ADAM_M, 0);
    ir_global_add_companion(m, "wte.adam_v", ir_tensor(IR_F32, DIMS(16, 8)), IR_GLOBAL_ADAM_V, 0);

    ir_func *f = ir_func_new(m, "micro_step", IR_FUNC_STEP);
    ir_type tok_t = ir_tensor(IR_I32, DIMS(2, 4));
    ir_shard_push(&tok_t, 0, IR_AXIS_DP);
    int tok = ir_input(m, f, ir_role_of(IR_ROLE_TOKENS), "tokens", tok_t);
    int tgt = ir_input(m, f, ir_role_of(IR_ROLE_TARGETS), "targets", ir_tensor(IR_I32, DIMS(2, 4)));
    int wte = global_ref(m, f, "wte"), wpe = global_ref(m, f, "wpe");
    int lnw = global_ref(m, f, "ln.w"), lnb = global_ref(m, f, "ln.b");
    int x = EMIT(EMBEDDING, NULL, wte, tok);                      /* [2,4,8] */
    x = EMIT(POS_ADD, NULL, x, wpe);
    int h = EMIT(LAYERNORM, ATTRS(1e-5), x, lnw, lnb);
    int q4 = ir_reshape(m, f, h, DIMS(2, 4, 2, 4));               /* [B,T,H,D] */
    int q = EMIT(ROPE, ATTRS(10000, 0), q4);
    int a = EMIT(ATTENTION, NULL, q, q4, q4);
    int dq = EMIT(ATTENTION_GRAD, NULL, a, q, q4, q4, a, a + 1);  /* dq, dk, dv from (dy, q, k, v, y, lse) */
    int s = ir_reshape(m, f, dq, DIMS(2, 4, 8));
    int g = ir_op1(m, f, IR_OP_GELU, s);
    int logits = ir_matmul(m, f, g, wte, false, true);             /* [2,4,16] */
    int loss = ir_op2(m, f, IR_OP_CROSS_ENTROPY, logits, tgt);
    ir_output(m, f, ir_role_of(IR_ROLE_LOSS), "loss", loss);
    int one = ir_fill(m, f, 1.0, ir_scalar(IR_F32));
    int dl = EMIT(CROSS_ENTROPY_GRAD, NULL, one, logits, tgt);
    int dw = ir_matmul(m, f, dl, g, true, false);                  /* [16,8] */
    int wg = global_ref(m, f, "wte.grad");
    EMIT(ACCUMULATE, NULL, wg, dw);
    ir_type xs_t = ir_tensor(IR_F32, DIMS(2, 4, 8));
    ir_shard_push(&xs_t, 0, IR_AXIS_DP);
    ir_shard_push(&xs_t, 2, IR_AXIS_TP);
    ir_role none = ir_role_of(IR_ROLE_NONE); /* a test's own values */
    ir_output(m, f, none, "xs_gelu", ir_op1(m, f, IR_OP_GELU, ir_input(m, f, none, "xs", xs_t)));
    ir_type ps_t = ir_tensor(IR_F32, DIMS(8));
    ps_t.partial = 1u << IR_AXIS_TP;
    ir_output(m, f, none, "psum", ir_scale(m, f, ir_input(m, f, none, "psum", ps_t), 0.1));
    plan_bump(f);

    f = ir_func_new(m, "optimizer", IR_FUNC_OPTIMIZER);
    int p = global_ref(m, f, "wte");
    wg = global_ref(m, f, "wte.grad");
    int mm = global_ref(m, f, "wte.adam_m"), vv = global_ref(m, f, "wte.adam_v");
    int lr = ir_input(m, f, ir_role_of(IR_ROLE_LR), "lr", ir_scalar(IR_F32));
    int step = ir_input(m, f, ir_role_of(IR_ROLE_STEP), "step", ir_scalar(IR_F32));
    int ss = EMIT(SUM_SQUARES, NULL, wg, wg);
    int coef = EMIT(CLIP_COEF, ATTRS(1.0), ss);
    ir_output(m, f, ir_role_of(IR_ROLE_GRAD_NORM), "grad_norm", ir_op1(m, f, IR_OP_SQRT, ss));
    EMIT(ADAMW, ATTRS(0.9, 0.95, 1e-8, 0.1), p, wg, mm, vv, lr, step, coef);
    EMIT(ZERO, NULL, wg);

    ir_sched_call(m, IR_PROG_TRAIN, 0, 0);
    ir_sched_call(m, IR_PROG_TRAIN, 0, 1);
    ir_sched_call(m, IR_PROG_TRAIN, 1, -1);
    return m;
}

/* print(parse(text)) must equal text; returns the parsed module (or NULL). */
static ir_module *check_reprints(const char *text, const char *what)
{
    char err[512];
    ir_module *m = ir_parse_module(text, err, sizeof err);
    CHECK(m, "%s does not parse: %s\n%s", what, err, text);
    if (!m)
        return NULL;
    char *again = ir_print_module(m);
    CHECK(strcmp(text, again) == 0, "%s does not reprint identically:\n--- printed\n%s--- reprinted\n%s", what, text, again);
    free(again);
    return m;
}

/* The format as documented, written by hand: the parser reads it and the printer writes it back. */
static const char *const golden_text =
    "config {\n"
    "  lr = \"0.001\"\n"
    "}\n"
    "\n"
    "global @embedding.word : f32[257,64] {kind=param, init=normal, std=0.02}\n"
    "global @layers.0.input_norm.weight : f32[64] {kind=param, init=ones, no_decay}\n"
    "global @embedding.word.grad : f32[257,64] {shard=[-,tp]} {kind=grad, init=zeros}\n"
    "\n"
    "func micro_step {kind=step, arena=8192} {\n"
    "  %0 = input @tokens {role=tokens} : i32[4,32] @+0\n"
    "  %1 = global @embedding.word : f32[257,64] @global\n"
    "  %2 = embedding %1, %0 {vocab_start=0, vocab_size=0} : f32[4,32,64] @+512\n"
    "  %3 = reshape %2 : f32[128,64] @view\n"
    "  %4 = matmul %3, %1 {ta=0, tb=1} : f32[128,257] @+0\n"
    "  %5 = fill {value=-inf} : f32[] {partial=tp}\n"
    "  output @logits %4 {role=logits}\n"
    "}\n"
    "\n"
    "schedule train {\n"
    "  call micro_step mb=0\n"
    "  send micro_step @logits mb=0 to=next\n"
    "}\n";

static void test_roundtrip(void)
{
    char err[512];
    ir_module *m = build_module();
    CHECK(ir_verify(m, err, sizeof err), "the built module fails the verifier: %s", err);
    char *text = ir_print_module(m);
    ir_module *back = check_reprints(text, "the built module");
    if (back)
        CHECK(ir_verify(back, err, sizeof err), "the parsed module fails the verifier: %s", err);
    /* what the dump must show a reader */
    static const char *const shown[] = {
        "  data_path = \"runs/\\\"quoted\\\" dir\\\\x\\nsecond line\"\n",
        "global @wte : f32[16,8] {kind=param, init=normal, std=0.02, placement=vocab}\n",
        "global @ln.w : f32[8] {kind=param, init=ones, layer=0, no_decay}\n",
        "global @wte.adam_v : f32[16,8] {kind=adam_v, init=zeros, of=@wte}\n",
        "func micro_step {kind=step, arena=",
        "  %0 = input @tokens {role=tokens} : i32[2,4] {shard=[dp,-]} @+0\n",
        "  %2 = global @wte : f32[16,8] @global\n",
        "  %8 = layernorm %7, %4, %5 {eps=1e-05} : f32[2,4,8] @+",
        "  %9 = reshape %8 : f32[2,4,2,4] @view\n",
        "  %11, %12 = attention %10, %9, %9 {cp=0, cp_rank=0, ring=0, shift=0} : f32[2,4,2,4] @+1152, f32[2,2,4] @+1408\n",
        "  %13, %14, %15 = attention_grad %11, %10, %9, %9, %11, %12 {cp=0, cp_rank=0, ring=0, shift=0} : f32[2,4,2,4] @+1472, f32[2,4,2,4] @+1728, f32[2,4,2,4] @+1984\n",
        "  %18 = matmul %17, %2 {ta=0, tb=1} : f32[2,4,16] @+",
        "  output @loss %19 {role=loss}\n",
        "  %20 = fill {value=1} : f32[] @+",
        "  accumulate %23, %22\n",
        "  %25 = gelu %24 : f32[2,4,8] {shard=[dp,-,tp]} @+",
        "  %27 = scale %26 {factor=0.1} : f32[8] {partial=tp} @+",
        "func optimizer {kind=optimizer, arena=0} {\n",
        "  %6 = sum_squares %1, %1 : f32[]\n",
        "  adamw %0, %1, %2, %3, %4, %5, %7 {beta1=0.9, beta2=0.95, eps=1e-08, weight_decay=0.1}\n",
        "  zero %1\n",
        "schedule train {\n  call micro_step mb=0\n  call micro_step mb=1\n  call optimizer\n}\n",
    };
    for (size_t i = 0; i < sizeof shown / sizeof *shown; i++)
        CHECK(strstr(text, shown[i]), "the printed module lacks `%s`:\n%s", shown[i], text);
    free(text);
    ir_module_free(back);
    ir_module_free(m);

    ir_module_free(check_reprints(golden_text, "the documented example"));

    /* any numbering that defines before use is read, and printed densely */
    const char *sparse = "func f {kind=step, arena=0} {\n  %40 = input @x : f32[4]\n  %7 = gelu %40 : f32[4]\n  output @y %7\n}\n";
    m = ir_parse_module(sparse, err, sizeof err);
    text = m ? ir_print_module(m) : NULL;
    CHECK(text && strcmp(text, "func f {kind=step, arena=0} {\n  %0 = input @x : f32[4]\n  %1 = gelu %0 : f32[4]\n  output @y %1\n}\n") == 0,
          "sparse ids are not renumbered densely: %s", text ? text : err);
    free(text);
    ir_module_free(m);

    /* a mesh axis attribute prints by name and reads by name or number */
    const char *by_number = "config {\n  tensor_model_parallel_size = \"2\"\n}\n"
                            "func f {kind=step, arena=0} {\n  %0 = input @x : f32[4] {partial=tp}\n"
                            "  %1 = all_reduce %0 {axis=3, max=0} : f32[4]\n}\n";
    m = ir_parse_module(by_number, err, sizeof err);
    text = m ? ir_print_module(m) : NULL;
    CHECK(text && strstr(text, "  %1 = all_reduce %0 {axis=tp, max=0} : f32[4]\n"), "axis=3 does not print as tp: %s",
          text ? text : err);
    ir_module_free(check_reprints(text ? text : "", "axis=tp"));
    free(text);
    ir_module_free(m);

    /* an attribute added after plans with its op were written (rope's rotary_dim) prints only when
     * set: a plan without it reads and prints as before */
    const char *partial = "func f {kind=step, arena=0} {\n  %0 = input @x : f32[1,2,2,8]\n"
                          "  %1 = rope %0 {theta=10000, inverse=0, cp=0, cp_rank=0, scaling=0, rotary_dim=4} : f32[1,2,2,8]\n"
                          "  %2 = rope %1 {theta=10000, inverse=0, cp=0, cp_rank=0, scaling=0} : f32[1,2,2,8]\n}\n";
    m = ir_parse_module(partial, err, sizeof err);
    text = m ? ir_print_module(m) : NULL;
    CHECK(text && strcmp(text, partial) == 0 && m->funcs[0]->instrs[1].attr[IR_ATTR_ROPE_ROTARY_DIM] == 4 &&
              m->funcs[0]->instrs[2].attr[IR_ATTR_ROPE_ROTARY_DIM] == 0,
          "rotary_dim does not print only when set: %s", text ? text : err);
    free(text);
    ir_module_free(m);

    /* multi-latent attention's moves: a split along the last dimension (a part summed over the heads)
     * and a concat broadcasting a one-head operand, read and printed back; values narrower than q and
     * k give attention's y their width */
    const char *mla = "func f {kind=step, arena=0} {\n  %0 = input @x : f32[1,2,4,8]\n"
                      "  %1, %2 = split_last_dim %0 {size=6, sum_heads=2} : f32[1,2,4,6], f32[1,2,1,2]\n"
                      "  %3 = concat_last_dim %1, %2 : f32[1,2,4,8]\n"
                      "  %4, %5 = split_last_dim %3 {size=4, sum_heads=0} : f32[1,2,4,4], f32[1,2,4,4]\n"
                      "  %6, %7 = attention %3, %0, %4 {cp=0, cp_rank=0, ring=0, shift=0} : f32[1,2,4,4], f32[1,4,2]\n}\n";
    m = ir_parse_module(mla, err, sizeof err);
    text = m ? ir_print_module(m) : NULL;
    CHECK(text && strcmp(text, mla) == 0 && ir_verify(m, err, sizeof err),
          "split_last_dim, concat_last_dim and attention with narrower values do not round-trip: %s", text ? text : err);
    free(text);
    ir_module_free(m);

    /* comments and blank lines are ignored */
    m = ir_parse_module("; a comment\n\nfunc f {kind=step, arena=0} {  ; trailing\n\n  %0 = input @x : f32[4] ; x\n}\n", err, sizeof err);
    CHECK(m && m->nfuncs == 1 && m->funcs[0]->ninstrs == 1, "comments break the parser: %s", err);
    ir_module_free(m);
}

/* --- errors ---------------------------------------------------------------------------------- */

#define FUNC(body) "func f {kind=step, arena=0} {\n  %0 = input @x : f32[4,8]\n  %1 = input @w : f32[8,8]\n" body "}\n"

static void test_parse_errors(void)
{
    static const struct {
        const char *text, *message;
    } cases[] = {
        {FUNC("  %2 = foo %0\n"), "line 4: unknown op `foo`"},
        {FUNC("  %2 = gelu %7 : f32[4,8]\n"), "line 4: unknown value %7"},
        {FUNC("  %2 = matmul %0, %1, %1 {ta=0, tb=0} : f32[4,8]\n"), "line 4: wrong operand count for matmul: expected 2, got 3"},
        {FUNC("  %2 = gelu %0 : f32[4,x]\n"), "line 4: bad type: expected a positive dimension, got `x`"},
        {FUNC("  %2 = gelu %0 : f33[4]\n"), "line 4: bad type: expected a dtype"},
        {FUNC("  %2 = gelu %0 : f32[4,8] {shard=[dp]}\n"), "line 4: bad type: shard lists 1 axes for 2 dimensions"},
        {FUNC("  %2 = gelu %0 : f32[1,1,1,1,1]\n"), "line 4: bad type: more than 4 dimensions"},
        {FUNC("  %2 = gelu %0\n"), "line 4: expected `:`, got end of line"},
        {FUNC("  %2 = matmul %0, %1 {ta=0, tc=1} : f32[4,8]\n"), "line 4: matmul has no attribute `tc` (its attributes: ta, tb, recompute)"},
        {FUNC("  %2 = matmul %0, %1 {ta=yes} : f32[4,8]\n"), "line 4: attribute `ta` needs a number"},
        {FUNC("  %2 = all_reduce %0 {axis=xp, max=0} : f32[4,8]\n"),
         "line 4: attribute `axis`: a mesh axis (dp, pp, tp, cp, ep, edp, dp_cp) or its number, got `xp`"},
        {FUNC("  %2, %3 = gelu %0 : f32[4,8]\n"), "line 4: wrong result count for gelu: expected 1, got 2"},
        {FUNC("  %2, %3, %4 = attention_grad %0, %0, %0, %0, %0, %0 : f32[4,8], f32[4,8]\n"), "line 4: wrong type count for attention_grad: expected 3, got 2"},
        {FUNC("  %0 = gelu %0 : f32[4,8]\n"), "line 4: value %0 is defined twice"},
        {FUNC("  %2 = gelu @x %0 : f32[4,8]\n"), "line 4: gelu takes no @name"},
        {FUNC("  output %0\n"), "line 4: expected @name after output, got `%0`"},
        {FUNC("  %2 = gelu %0 : f32[4,8] @somewhere\n"), "line 4: expected @+offset, @view or @global, got `@somewhere`"},
        {FUNC("  %2 = gelu %0 : f32[4,8] extra\n"), "line 4: expected end of line, got `extra`"},
        {"func f {kind=step, arena=0} {\n  %0 = input @x : f32[4]\n", "line 3: expected `}` closing the function, got end of input"},
        {"func f {kind=step, arena=-1} {\n}\n", "line 1: arena= needs a byte count >= 0"},
        {"global @w : f32[4] {kind=weight, init=zeros}\n", "line 1: unknown global kind `weight` (one of: param, grad, adam_m, adam_v, copy, grad_shard, master_shard, stash, fp8_history, expert_bias, remainder)"},
        {"global @w : f32[4] {kind=param, init=normal}\n", "line 1: global @w: std= goes with init=normal, and only with it"},
        {"global @w : f32[4] {init=ones}\n", "line 1: global @w needs kind= and init="},
        {"config {\n  lr = \"0.1\"\n  lr = \"0.2\"\n}\n", "line 3: config key `lr` is set twice"},
        {"config {\n  fp8_recipe = \"current\"\n}\n",
         "line 2: config fp8_recipe = \"current\": fp8_recipe takes delayed, tensorwise or blockwise"},
        {"config {\n  pipeline_schedule = \"gpipe\"\n}\n",
         "line 2: config pipeline_schedule = \"gpipe\": pipeline_schedule takes auto, 1f1b, interleaved or zb-h1"},
        {"config {\n  param_dtype = \"fp8e4m3\"\n}\n", "line 2: config param_dtype = \"fp8e4m3\": param_dtype takes f32, bf16 or f16"},
        {"config {\n  path = \"unterminated\n}\n", "line 2: expected a quoted string, got `\"unterminated`"},
        {"func f {arena=0} {\n}\n", "line 1: func f needs kind= (its role: step, eval,"},
        {"func f {kind=train} {\n}\n", "line 1: unknown function kind `train` (one of: step, eval, tied_send, tied_sum, reduce, grad_norm, optimizer, zero_grads, setup, forward, backward, wgrad, host_optimizer, param_sync)"},
        {"schedule {\n  micro_step x2\n}\n", "line 1: expected a schedule program (train, eval) after `schedule`; an older mcc's"},
        {"schedule test {\n}\n", "line 1: unknown schedule program `test` (one of: train, eval)"},
        {"schedule train {\n  call train\n}\n", "line 2: schedule train names unknown function `train`"},
        {"func f {kind=step} {\n}\nschedule train {\n  run f\n}\n", "line 4: unknown schedule step `run` (one of: call, send, recv)"},
        {"func f {kind=step} {\n}\nschedule train {\n  call f mb=-1\n}\n", "line 4: expected a micro-batch index >= 0 after mb=, got `-1`"},
        {"func f {kind=step} {\n}\nschedule train {\n  call f x2\n}\n", "line 4: expected end of line, got `x2`"},
        {"func f {kind=step} {\n}\nschedule train {\n  send f mb=0 to=next\n}\n", "line 4: expected the @name of the tensor sent or received, got `mb`"},
        {"func f {kind=step} {\n}\nschedule train {\n  recv f @x mb=0 to=next\n}\n", "line 4: expected from=next or from=prev, got `to`"},
        {"func f {kind=step} {\n}\nschedule train {\n  send f @x mb=0 to=left\n}\n", "line 4: expected to=next or to=prev, got `left`"},
        {"func f {kind=step} {\n}\nschedule eval {\n  call f mb=0\n}\nschedule eval {\n  call f mb=0\n}\n", "line 6: schedule eval is given twice"},
        {"module m\n", "line 1: expected `config`, `global`, `func` or `schedule`, got `module`"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char err[512] = "";
        ir_module *m = ir_parse_module(cases[i].text, err, sizeof err);
        CHECK(!m, "parse should fail with `%s`:\n%s", cases[i].message, cases[i].text);
        CHECK(strstr(err, cases[i].message), "parse error `%s` lacks `%s`", err, cases[i].message);
        ir_module_free(m);
    }
}

/* The module must parse and then fail the verifier with `message`. */
static void check_verify_fails(ir_module *m, const char *message, const char *what)
{
    char err[1024] = "";
    CHECK(m, "%s does not build or parse", what);
    if (!m)
        return;
    CHECK(!ir_verify(m, err, sizeof err), "the verifier accepts %s, expected `%s`", what, message);
    CHECK(strstr(err, message), "verifier error for %s is `%s`, expected it to contain `%s`", what, err, message);
    ir_module_free(m);
}

static void check_text_fails_verify(const char *text, const char *message)
{
    char err[512];
    ir_module *m = ir_parse_module(text, err, sizeof err);
    CHECK(m, "does not parse (%s):\n%s", err, text);
    if (m)
        check_verify_fails(m, message, text);
}

static void test_verify_errors(void)
{
    check_text_fails_verify(FUNC("  %2 = gelu %0 : f32[4,9]\n"),
                            "func f, instr 2 (`%2 = gelu %0 : f32[4,9]`): result %2 is recorded as f32[4,9] but its operands give f32[4,8]");
    check_text_fails_verify(FUNC("  %2 = matmul %0, %0 {ta=0, tb=0} : f32[4,8]\n"),
                            "instr 2 (`%2 = matmul %0, %0 {ta=0, tb=0} : f32[4,8]`): contracted sizes differ");
    check_text_fails_verify(FUNC("  %2 = concat_last_dim %0, %1 : f32[4,16]\n"),
                            "concat_last_dim of f32[4,8] and f32[8,8]: the dimensions but the last must agree (dimension -2 "
                            "may be 1 in one, broadcast over the other's heads)");
    check_text_fails_verify(FUNC("  %2, %3 = split_last_dim %0 {size=9, sum_heads=0} : f32[4,9], f32[4,1]\n"),
                            "split_last_dim {size=9} of f32[4,8]: size must leave both parts at least one channel");
    check_text_fails_verify(FUNC("  accumulate %0, %0\n"),
                            "func f, instr 2 (`accumulate %0, %0`): operand 0 (%0) of accumulate must be a `global @name` value, got the result of input");
    /* grad_ready (passes/grad_ready.c): the host finds a mark by its gradient global and the device by its slot */
    check_text_fails_verify(FUNC("  grad_ready %0 {slot=0}\n"),
                            "operand 0 (%0) of grad_ready must be a `global @name` value, got the result of input");
    check_text_fails_verify("global @w : f32[4] {kind=param, init=zeros}\nglobal @w.grad : f32[4] {kind=grad, init=zeros, of=@w}\n"
                            "func f {kind=step, arena=0} {\n"
                            "  %0 = global @w.grad : f32[4] @global\n  grad_ready %0 {slot=1.5}\n}\n",
                            "grad_ready's slot must be a whole number from 0 (a device event's index), got 1.5");
    check_text_fails_verify(FUNC("  %2 = global @nowhere : f32[4]\n"), "instr 2 (`%2 = global @nowhere : f32[4]`): unknown global @nowhere");
    check_text_fails_verify("global @w : f32[4] {kind=param, init=zeros}\nglobal @w : f32[4] {kind=param, init=zeros}\n",
                            "global @w is declared twice");
    check_text_fails_verify("func f {kind=step, arena=0} {\n}\nfunc f {kind=step, arena=0} {\n}\n", "function f is defined twice");
    /* host memory (--optimizer-cpu-offload): the host function and copies only */
    const char *host_globals = "global @w : f32[4] {kind=param, init=zeros}\n"
                               "global @w.adam_m : f32[4] {kind=adam_m, init=zeros, of=@w, host}\n";
    char text[512];
    snprintf(text, sizeof text, "%sfunc f {kind=optimizer, arena=0} {\n  %%0 = global @w.adam_m : f32[4] @global\n"
             "  zero %%0\n}\n", host_globals);
    check_text_fails_verify(text, "zero in f (instruction 1) reads the host global @w.adam_m: only host_optimizer and "
                            "copies touch host memory");
    snprintf(text, sizeof text, "%sfunc h {kind=host_optimizer, arena=0} {\n  %%0 = global @w : f32[4] @global\n"
             "  zero %%0\n}\n", host_globals);
    check_text_fails_verify(text, "zero in h (instruction 1) reads the device global @w: the host function reads "
                            "device memory only through a copy");
    /* a master held as bf16 copy + i16 remainder (store_param_remainders) has no storage of its own */
    const char *pair = "global @w : f32[4] {kind=param, init=zeros}\n"
                       "global @w.bf16 : bf16[4] {kind=copy, init=zeros, of=@w}\n";
    snprintf(text, sizeof text, "%sglobal @w.remainder : i16[4] {kind=remainder, init=zeros, of=@w}\n"
             "func f {kind=optimizer, arena=0} {\n  %%0 = global @w : f32[4] @global\n  zero %%0\n}\n", pair);
    check_text_fails_verify(text, "f (instruction 0) names @w, which has no storage: it is held as its bf16 copy and "
                            "remainder (store_param_remainders): name those");
    snprintf(text, sizeof text, "%sglobal @w.remainder : i16[2] {kind=remainder, init=zeros, of=@w}\n", pair);
    check_text_fails_verify(text, "global @w.remainder (kind=remainder) must be i16 beside a bf16 copy of @w of its "
                            "shape: the pair is the fp32 master");

    /* what the text form cannot express: built, then broken by hand */
    ir_module *m = build_module();
    ir_instr *gelu = &m->funcs[0]->instrs[14];
    gelu->args[0] = gelu->res[0] + 1;
    check_verify_fails(m, "func micro_step, instr 14 (gelu): operand 0 (%18) is used before it is defined", "a use before def");
    m = build_module();
    m->funcs[0]->instrs[15].nargs = 1;
    check_verify_fails(m, "func micro_step, instr 15 (matmul): wrong operand count for matmul: expected 2, got 1", "a short matmul");
    m = build_module();
    m->progs[IR_PROG_TRAIN].steps[2].func = 7;
    check_verify_fails(m, "schedule train, step 2 (`call ?`): names function #7, but the module has 2", "a call of no function");
    m = build_module();
    m->funcs[1]->kind = IR_FUNC_STEP;
    check_verify_fails(m, "functions micro_step and optimizer are both of kind step: a module has at most one", "two step functions");
    m = build_module();
    m->funcs[1]->vals[0].type.dims[1] = 0;
    check_verify_fails(m, "func optimizer: value %0 (defined by instr 0) has a malformed type: a dimension below 1", "a zero dimension");
    m = build_module(); /* the passes read a global instruction's index, the text its @name: they agree */
    m->funcs[1]->instrs[0].global = 4;
    check_verify_fails(m, "func optimizer, instr 0 (`%0 = global @wte : f32[16,8]`): global @wte holds the index of global 4, "
                       "@wte.grad: a pass left the two apart", "a global instruction holding another's index");
}

/* --- the memory plan ------------------------------------------------------------------------ */

static void test_memory_errors(void)
{
    char err[512];
    const char *reuse = "func f {kind=step, arena=128} {\n"
                        "  %0 = input @x : f32[16] @+0\n"
                        "  %1 = gelu %0 : f32[16] @+64\n"
                        "  %2 = gelu %1 : f32[16] @+0\n" /* %0 is dead: its bytes are free */
                        "  output @y %2\n"
                        "}\n";
    ir_module *m = ir_parse_module(reuse, err, sizeof err);
    CHECK(m && ir_verify(m, err, sizeof err), "reusing a dead value's bytes is rejected: %s", err);
    ir_module_free(m);
    /* in place: gelu may overwrite its dying operand (ops.def), sqrt may not */
    const char *in_place = "func f {kind=step, arena=128} {\n"
                           "  %0 = input @x : f32[16] @+0\n"
                           "  %1 = gelu %0 : f32[16] @+64\n"
                           "  %2 = gelu %1 : f32[16] @+64\n"
                           "  output @y %2\n"
                           "}\n";
    m = ir_parse_module(in_place, err, sizeof err);
    CHECK(m && ir_verify(m, err, sizeof err), "gelu over its dying operand is rejected: %s", err);
    ir_module_free(m);
    check_text_fails_verify("func f {kind=step, arena=128} {\n"
                            "  %0 = input @x : f32[16] @+0\n"
                            "  %1 = gelu %0 : f32[16] @+64\n"
                            "  %2 = sqrt %1 : f32[16] @+64\n"
                            "  output @y %2\n"
                            "}\n",
                            "%2 at bytes [64, 128) shares bytes with %1 at [64, 128), which is live from instr 1 to 2");

    check_text_fails_verify("func f {kind=step, arena=128} {\n  %0 = input @x : f32[16] @+0\n  %1 = gelu %0 : f32[16] @+0\n}\n",
                            "func f, instr 1 (`%1 = gelu %0 : f32[16] @+0`): %1 at bytes [0, 64) shares bytes with %0 at [0, 64), which is live from instr 0 to 1");
    check_text_fails_verify("func f {kind=step, arena=192} {\n"
                            "  %0 = input @x : f32[4,4] @+0\n"
                            "  %1 = reshape %0 : f32[16] @view\n"
                            "  %2 = gelu %0 : f32[4,4] @+64\n"
                            "  %3 = gelu %2 : f32[4,4] @+0\n" /* %0 is still read through its view %1 */
                            "  %4 = gelu %1 : f32[16] @+128\n"
                            "  output @y %4\n"
                            "  output @z %3\n"
                            "}\n",
                            "instr 3 (`%3 = gelu %2 : f32[4,4] @+0`): %3 at bytes [0, 64) shares bytes with %0 at [0, 64), which is live from instr 0 to 4");
    check_text_fails_verify("func f {kind=step, arena=128} {\n"
                            "  %0 = input @x : f32[16] @+0\n"
                            "  output @y %0\n"
                            "  %1 = input @z : f32[16] @+32\n" /* the output keeps %0 to the end */
                            "  output @w %1\n"
                            "}\n",
                            "%1: arena offset 32 is not a non-negative multiple of 64");
    check_text_fails_verify("func f {kind=step, arena=128} {\n"
                            "  %0 = input @x : f32[16] @+0\n"
                            "  output @y %0\n"
                            "  %1 = input @z : f32[16] @+0\n"
                            "  output @w %1\n"
                            "}\n",
                            "%1 at bytes [0, 64) shares bytes with %0 at [0, 64), which is live from instr 0 to 3");
    /* an overlapped reduce-scatter reads its operand until its result's first use (where the GPU
     * joins it): nothing may take those bytes before; without overlap they are free after it */
    const char *overlapped = "config {\n  tensor_model_parallel_size = \"2\"\n}\n"
                             "func f {kind=step, arena=768} {\n"
                             "  %0 = input @x : f32[2,8,4] {partial=tp} @+0\n"
                             "  %1 = scale %0 {factor=2} : f32[2,8,4] {partial=tp} @+256\n"
                             "  %2 = reduce_scatter_seq %1 {axis=tp, overlap=OVERLAP} : f32[2,4,4] {shard=[-,tp,-]} @+512\n"
                             "  %3 = scale %0 {factor=3} : f32[2,8,4] {partial=tp} @+256\n"
                             "  %4 = scale %2 {factor=2} : f32[2,4,4] {shard=[-,tp,-]} @+640\n"
                             "  output @y %4\n"
                             "  output @z %3\n"
                             "}\n";
    char text[1024];
    snprintf(text, sizeof text, "%.*s0%s", (int)(strstr(overlapped, "OVERLAP") - overlapped), overlapped,
             strstr(overlapped, "OVERLAP") + 7);
    m = ir_parse_module(text, err, sizeof err);
    CHECK(m && ir_verify(m, err, sizeof err), "a reduce-scatter's operand freed after it is rejected: %s", err);
    ir_module_free(m);
    snprintf(text, sizeof text, "%.*s1%s", (int)(strstr(overlapped, "OVERLAP") - overlapped), overlapped,
             strstr(overlapped, "OVERLAP") + 7);
    check_text_fails_verify(text, "%3 at bytes [256, 512) shares bytes with %1 at [256, 512), which is live from instr 1 to 4");
    check_text_fails_verify("func f {kind=step, arena=64} {\n  %0 = input @x : f32[32] @+0\n}\n",
                            "func f, instr 0 (`%0 = input @x : f32[32] @+0`): %0: bytes [0, 128) run past the end of the 64-byte arena");
    check_text_fails_verify("func f {kind=step, arena=64} {\n  %0 = input @x : f32[16]\n}\n", "%0 has no memory placement");
    check_text_fails_verify("func f {kind=step, arena=64} {\n  %0 = input @x : f32[16] @view\n}\n", "%0: only reshape and rows results can be @view");
    check_text_fails_verify("global @w : f32[4] {kind=param, init=zeros}\nfunc f {kind=step, arena=64} {\n  %0 = global @w : f32[4] @+0\n}\n",
                            "%0: @global is the placement of global results, and only of them");
}

/* Deterministic xorshift64*. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static int rnd(int n)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (int)(((rng_state * 2685821657736338717ull) >> 33) % (uint64_t)n);
}

/* y, result 0 of its instruction, sits exactly on x, an operand the op may overwrite (ops.def's
 * inplace bits) whose last use that instruction is, and which is no input. */
static bool handed_over(const ir_func *f, int x, int y, const int *root, const int *last)
{
    const ir_instr *in = &f->instrs[f->vals[y].def];
    if (in->res[0] != y || last[x] != f->vals[y].def || f->vals[x].offset != f->vals[y].offset ||
        f->instrs[f->vals[x].def].op == IR_OP_INPUT)
        return false;
    for (int a = 0; a < in->nargs; a++)
        if ((ir_ops[in->op].inplace & (1u << a)) && root[in->args[a]] == x)
            return true;
    return false;
}

/* The overlap rule stated as plainly as possible, pair by pair: an oracle for the sweep. */
static bool brute_force_plan_ok(const ir_func *f)
{
    int n = f->nvals, root[64], last[64];
    for (int i = 0; i < f->ninstrs; i++) {
        const ir_instr *in = &f->instrs[i];
        for (int a = 0; a < in->nargs; a++) {
            int r = root[in->args[a]], end = in->op == IR_OP_OUTPUT ? f->ninstrs : i;
            last[r] = end > last[r] ? end : last[r];
        }
        for (int r = 0; r < in->nres; r++) {
            root[in->res[r]] = in->op == IR_OP_RESHAPE ? root[in->args[0]] : in->res[r];
            last[in->res[r]] = i;
        }
    }
    for (int x = 0; x < n; x++)
        for (int y = x + 1; y < n; y++) {
            const ir_value *a = &f->vals[x], *b = &f->vals[y];
            if (a->mem != IR_MEM_ARENA || b->mem != IR_MEM_ARENA)
                continue;
            bool time = a->def <= last[y] && b->def <= last[x];
            bool bytes = a->offset < b->offset + (int64_t)ir_bytes(&b->type) && b->offset < a->offset + (int64_t)ir_bytes(&a->type);
            if (time && bytes && !handed_over(f, x, y, root, last))
                return false;
        }
    return true;
}

/* Random small planned functions (inputs, adds, views, outputs; 64- and 128-byte values in 8
 * slots): the verifier must agree with the pairwise oracle on every one, accepting some and
 * rejecting some. */
static void test_memory_check(void)
{
    int accepted = 0, rejected = 0;
    for (int trial = 0; trial < 3000; trial++) {
        ir_module *m = ir_module_new();
        ir_func *f = ir_func_new(m, "f", IR_FUNC_STEP);
        int vec[40], nvec = 0;
        for (int i = 0; i < 14; i++) {
            int kind = nvec < 2 ? 0 : rnd(5);
            int a = nvec ? vec[rnd(nvec)] : -1, b = nvec ? vec[rnd(nvec)] : -1;
            if (kind == 0)
                vec[nvec++] = ir_input(m, f, ir_role_of(IR_ROLE_NONE), "x", ir_tensor(IR_F32, DIMS(16 + 16 * rnd(2))));
            else if (kind == 4)
                ir_output(m, f, ir_role_of(IR_ROLE_NONE), "y", a);
            else if (kind == 3)
                vec[nvec++] = ir_reshape(m, f, a, DIMS(1, ir_vtype(f, a)->dims[ir_vtype(f, a)->ndim - 1]));
            else if (ir_type_eq(ir_vtype(f, a), ir_vtype(f, b)))
                vec[nvec++] = ir_op2(m, f, IR_OP_ADD, a, b);
        }
        for (int x = 0; x < f->nvals; x++) {
            bool view = f->instrs[f->vals[x].def].op == IR_OP_RESHAPE;
            f->vals[x].mem = view ? IR_MEM_VIEW : IR_MEM_ARENA;
            f->vals[x].offset = 64 * rnd(8);
        }
        f->arena_bytes = 640;
        char err[512];
        bool want = brute_force_plan_ok(f), got = ir_verify(m, err, sizeof err);
        CHECK(want == got, "trial %d: the verifier says %s (%s), the oracle %s", trial, got ? "ok" : "overlap", err,
              want ? "ok" : "overlap");
        accepted += got;
        rejected += !got;
        ir_module_free(m);
    }
    CHECK(accepted > 100 && rejected > 100, "random plans do not exercise both outcomes: %d accepted, %d rejected", accepted, rejected);
}

/* --- fuzz ------------------------------------------------------------------------------------ */

/* Whatever the parser accepts, the printer writes in a form the parser reads back the same. */
static void check_mutant(const char *text, size_t len, bool *parsed)
{
    char *copy = malloc(len + 1), err[512];
    memcpy(copy, text, len);
    copy[len] = '\0';
    ir_module *m = ir_parse_module(copy, err, sizeof err);
    if (m) {
        *parsed = true;
        ir_verify(m, err, sizeof err); /* must not crash, whatever it says */
        char *printed = ir_print_module(m);
        ir_module *again = ir_parse_module(printed, err, sizeof err);
        CHECK(again, "the printed form of an accepted mutant does not parse: %s\n%s", err, printed);
        char *reprinted = again ? ir_print_module(again) : NULL;
        CHECK(!again || strcmp(printed, reprinted) == 0, "an accepted mutant does not round-trip:\n%s", printed);
        free(reprinted);
        free(printed);
        ir_module_free(again);
        ir_module_free(m);
    } else {
        CHECK(strncmp(err, "line ", 5) == 0, "a parse error does not name the line: `%s`", err);
    }
    free(copy);
}

/* Rank terms (ir_rank_term): an attribute that differs between the ranks of a stage reads and
 * prints as `step*axis`, `base+step*axis` or a term per axis (`8*tp-2*cp`), and resolves to base +
 * the sum of step * coordinate. */
static void test_rank_terms(void)
{
    const char *text = "func f {kind=step, arena=0} {\n"
                       "  %0 = input @x : f32[4,8]\n"
                       "  %1 = input @first_sample {role=first_sample, index=0} : i64[]\n"
                       "  %2 = dropout %0, %1 {p=0.1, seed=1, site=0, dim=1, offset=8*tp, extent=16, cp=0, cp_rank=0} : f32[4,8] {shard=[-,tp]}\n"
                       "  %3 = dropout %2, %1 {p=0.1, seed=1, site=1, dim=1, offset=3+8*tp, extent=16, cp=0, cp_rank=0} : f32[4,8] {shard=[-,tp]}\n"
                       "  %4 = dropout %3, %1 {p=0.1, seed=1, site=2, dim=1, offset=3-8*dp, extent=16, cp=0, cp_rank=0} : f32[4,8] {shard=[-,tp]}\n"
                       "  %5 = dropout %4, %1 {p=0.1, seed=1, site=3, dim=1, offset=8*tp-2*cp, extent=16, cp=0, cp_rank=0} : f32[4,8] {shard=[-,tp]}\n"
                       "  output @y %5\n"
                       "}\n";
    ir_module *m = check_reprints(text, "rank terms");
    if (!m)
        return;
    char *printed = ir_print_module(m);
    CHECK(strcmp(printed, text) == 0, "rank terms do not print as written:\n%s", printed);
    free(printed);
    int coord[IR_NUM_AXES] = {0};
    coord[IR_AXIS_TP] = 2;
    coord[IR_AXIS_DP] = 1;
    coord[IR_AXIS_CP] = 3;
    ir_resolve_ranks(m, coord);
    const ir_instr *in = m->funcs[0]->instrs;
    CHECK(in[2].attr[4] == 16 && in[3].attr[4] == 19 && in[4].attr[4] == -5 && in[5].attr[4] == 10,
          "resolved offsets %g %g %g %g, expected 16 19 -5 10", in[2].attr[4], in[3].attr[4], in[4].attr[4], in[5].attr[4]);
    CHECK(!ir_rank_term_any(&in[2].per_rank[4]), "a resolved attribute keeps its rank term");
    ir_module_free(m);
    char err[512] = "";
    m = ir_parse_module("func f {kind=step, arena=0} {\n  %0 = input @x : f32[4]\n  %1 = scale %0 {factor=2*zz} : f32[4]\n}\n", err,
                        sizeof err);
    CHECK(!m && strstr(err, "line 3: attribute `factor`: a rank term is NUMBER*AXIS with a mesh axis"),
          "a rank term over an unknown axis gives `%s`", err);
    ir_module_free(m);
}

static void test_fuzz(void)
{
    ir_module *m = build_module();
    char *text = ir_print_module(m);
    size_t len = strlen(text);
    bool parsed = false;
    for (size_t cut = 0; cut < len; cut++)
        check_mutant(text, cut, &parsed);
    static const char subst[] = {'%', '9', '-', ' ', '\n', '{', '}', ',', '@', '"', ';', 'x', '0', '['};
    char *mutant = malloc(len + 1);
    for (size_t at = 0; at < len; at++)
        for (size_t s = 0; s < sizeof subst; s++) {
            memcpy(mutant, text, len + 1);
            mutant[at] = subst[s];
            check_mutant(mutant, len, &parsed);
        }
    CHECK(parsed, "no mutant parsed: the fuzz exercises only error paths");
    free(mutant);
    free(text);
    ir_module_free(m);
}

/* --- layout records ------------------------------------------------------------------------ */

/* [tp:dim1, dp:flat] over a whole [4,6] at tp 2, dp 3 (ZeRO's gradient block of a row-parallel
 * weight): each rank's 4 elements are its dp block of its tp columns, and the six ranks' parts
 * cover the whole tensor once. */
static void test_layout_index(void)
{
    ir_layout l = {0};
    ir_layout_add(&l, IR_AXIS_TP, IR_SPLIT_DIM, 1);
    ir_layout_add(&l, IR_AXIS_DP, IR_SPLIT_FLAT, 0);
    int degree[IR_NUM_AXES] = {1, 3, 1, 2, 1, 1}, hits[24] = {0};
    ir_type whole = ir_tensor(IR_F32, DIMS(4, 6)), part = ir_layout_block(&l, &whole, degree, 2);
    CHECK(part.ndim == 1 && part.dims[0] == 4, "a rank's part of [4,6] over tp 2 x dp 3 is %lld elements, not 4",
          (long long)part.dims[0]);
    for (int tp = 0; tp < 2; tp++)
        for (int dp = 0; dp < 3; dp++)
            for (int64_t i = 0; i < 4; i++) {
                int coord[IR_NUM_AXES] = {0, dp, 0, tp, 0, 0};
                int64_t at = ir_layout_index(&l, &whole, degree, coord, i);
                CHECK(at >= 0 && at < 24, "tp %d, dp %d, element %lld lands at %lld", tp, dp, (long long)i, (long long)at);
                if (at >= 0 && at < 24)
                    hits[at]++;
            }
    for (int k = 0; k < 24; k++)
        CHECK(hits[k] == 1, "whole element %d is held %d times", k, hits[k]);
    /* tp 1 holds columns 3..5; its dp 2 block starts at its element 8: row 2, column 3 + 2 */
    int coord[IR_NUM_AXES] = {0, 2, 0, 1, 0, 0};
    CHECK(ir_layout_index(&l, &whole, degree, coord, 0) == 2 * 6 + 5, "tp 1, dp 2's first element is at %lld, not 17",
          (long long)ir_layout_index(&l, &whole, degree, coord, 0));
    CHECK(ir_layout_offset(&l, &whole, degree, coord, 0) == 3 && ir_layout_offset(&l, &whole, degree, coord, 1) == 8,
          "offsets: tp 1's columns start at 3, dp 2's block at element 8");
}

/* A type split over cp is context parallelism's balanced split (Megatron's causal load balance):
 * of a sequence of 8 in 2 cp chunks of 2, rank 0 holds positions 0,1 and 6,7, rank 1 2..5; its
 * record prints `cp:balanced1` and reads back. */
static void test_layout_balanced(void)
{
    ir_type t = ir_tensor(IR_I32, DIMS(2, 4));
    ir_shard_push(&t, 1, IR_AXIS_CP);
    ir_layout l = ir_layout_of_type(&t), back;
    char text[64], err[256];
    CHECK(l.nsplits == 1 && l.splits[0].kind == IR_SPLIT_BALANCED, "a cp split of a type is not a balanced split");
    CHECK(!strcmp(ir_layout_str(&l, text, sizeof text), "cp:balanced1"), "printed %s, not cp:balanced1", text);
    CHECK(ir_parse_layout(text, &back, err, sizeof err) && back.nsplits == 1 && back.splits[0].kind == IR_SPLIT_BALANCED &&
          back.splits[0].dim == 1, "cp:balanced1 does not read back: %s", err);
    int degree[IR_NUM_AXES] = {1, 1, 1, 1, 2, 1, 1};
    ir_type whole = ir_layout_whole(&l, t, degree);
    static const int64_t want[2][4] = {{0, 1, 6, 7}, {2, 3, 4, 5}};
    for (int r = 0; r < 2; r++)
        for (int64_t b = 0; b < 2; b++)
            for (int64_t i = 0; i < 4; i++) {
                int coord[IR_NUM_AXES] = {0, 0, 0, 0, r, 0, 0};
                int64_t at = ir_layout_index(&l, &whole, degree, coord, b * 4 + i);
                CHECK(at == b * 8 + want[r][i], "cp rank %d, row %lld, token %lld lands at %lld, not %lld", r,
                      (long long)b, (long long)i, (long long)at, (long long)(b * 8 + want[r][i]));
            }
}

int main(int argc, char **argv)
{
    static const check_part tests[] = {
        {"roundtrip", test_roundtrip},         {"parse_errors", test_parse_errors}, {"verify_errors", test_verify_errors},
        {"memory_errors", test_memory_errors}, {"memory_check", test_memory_check}, {"rank_terms", test_rank_terms},
        {"fuzz", test_fuzz},                   {"layout_index", test_layout_index}, {"layout_balanced", test_layout_balanced},
    };
    return check_main(argc, argv, tests, sizeof tests / sizeof *tests);
}
