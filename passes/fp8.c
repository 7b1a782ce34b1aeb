/* fp8.c — FP8 linear layers (config fp8_format hybrid | e4m3, fp8_recipe tensorwise | delayed): in
 * the step and eval functions, every matmul by a transformer layer's weight (not the output head,
 * whose weight belongs to no layer; attention's own products are no matmuls) becomes fp8_quantize
 * of its activation and of its weight, both E4M3, and an fp8_matmul of the two (ops.def). Under
 * delayed scaling each quantized tensor (the activation, the weight and the output gradient) has
 * an FP8_HISTORY global of its own (ir.h: `<weight>.amax_history.x`, `.w`, `.dy`, in the weight's
 * layer; an activation several matmuls share, named after the first), whose scale the quantizes
 * read and into which the step's quantizes fold their amax; the optimizer pass rolls it. It runs before
 * autodiff, which differentiates fp8_matmul into FP8 GEMMs (ir/grad.c): the gradient quantized once
 * in E5M2 (hybrid) or E4M3, the dgrad against the forward's quantized weight and, with fp8_wgrad,
 * the weight's gradient against its quantized activation (without: a plain matmul of the
 * unquantized ones). So the backward is born FP8; the fusion pass keeps it FP8 (a weight gradient
 * becomes one fp8_matmul_accumulate into its fp32 accumulator, a residual one fp8_matmul_add). With first_last_layers_bf16 the
 * first num_layers_at_start_in_bf16 and last num_layers_at_end_in_bf16 layers keep their matmuls.
 * Blockwise (DeepSeek-V3's): the activation fp8_block_quantize'd in 1x128 tiles along K, the weight
 * in 128x128 blocks (transposed where it is [K, N], so that both are K-major: the fp8_matmul is
 * x w^T, ta=0, tb=1, the one layout Hopper's FP8 GEMMs take), no history; the gradient rule
 * requantizes along each backward GEMM's K. The routed experts' grouped matmuls (MoE layers, by a
 * layer's expert weights [E, ...]) become the fp8_grouped_* ops with a scale per expert, as
 * Transformer Engine's GroupedLinear keeps a quantizer per expert GEMM (Megatron's and DeepSeek-V3's
 * MoE FP8): the rows' amax per expert by the counts, the weight's per expert, their histories
 * f32[E, 1 + len]; tensorwise and delayed. Blockwise experts: the rows fp8_block_quantize'd in 1x128
 * tiles (each row's its own, so a tile never takes two experts' rows), the weight [E, F, K] in
 * 128x128 blocks (each expert's own: F and K multiples of 128), an fp8_grouped_matmul of the two;
 * its gradient rule requantizes along each backward GEMM's K, the wgrad's tiles from each expert's
 * first row (ir/grad.c). The router's matmul keeps its dtype. */
#include "passes.h"

#include <stdlib.h>

/* The transformer layer whose weight value v is (a parameter or its working copy), else -1. */
static int weight_layer(const ir_module *m, const ir_func *f, int v)
{
    int k = ir_global_of(f, v);
    if (k < 0)
        return -1;
    const ir_global *g = &m->globals[k];
    return g->kind == IR_GLOBAL_PARAM || g->kind == IR_GLOBAL_COPY ? g->layer : -1;
}

/* Whether the plan asks for something this pass cannot build yet: the error names the fix. */
static bool fp8_refuse(const ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen)
{
    if (ir_cfg_int(m, IR_CFG_FP8_AMAX_HISTORY_LEN) < 1 || ir_cfg_int(m, IR_CFG_FP8_MARGIN) < 0)
        return snprintf(err, errlen, "fp8_amax_history_len %lld, fp8_margin %lld: the history holds at least 1 step "
                        "and the margin is not negative", ir_cfg_int(m, IR_CFG_FP8_AMAX_HISTORY_LEN),
                        ir_cfg_int(m, IR_CFG_FP8_MARGIN)), true;
    if (pass_backend(m, opts) < 0) /* cuda: kernels_templates/fp8.cuh, matmul.c */
        return snprintf(err, errlen, "--fp8-format %s for the %s target: FP8 is built for the cpu and cuda targets "
                        "only: use one of them, or drop --fp8-format", ir_cfg_text(m, IR_CFG_FP8_FORMAT),
                        opts->target->name), true;
    return false;
}

/* Per value of f: whether it is an MoE router's logits (operand 0 of the router's ops, moe_route,
 * its losses and the z loss's moe_aux_attach): the router's matmul keeps its dtype, as Megatron's
 * router (a plain torch linear, outside Transformer Engine's FP8 modules) and DeepSeek-V3's (its
 * gating in higher precision) do. Found by use, never by the weight's name. */
static bool *router_logits(const ir_func *f)
{
    bool *router = calloc((size_t)f->nvals + 1, sizeof(bool));
    for (int i = 0; i < f->ninstrs; i++) {
        ir_op op = f->instrs[i].op;
        if (op == IR_OP_MOE_ROUTE || op == IR_OP_MOE_Z_LOSS || op == IR_OP_MOE_AUX_LOSS || op == IR_OP_MOE_AUX_ATTACH)
            router[f->instrs[i].args[0]] = true;
    }
    return router;
}

/* The layer of matmul `in` when it is to run in FP8 (a layer's weight, outside the decoder's bf16
 * layers [0, start) and [end, decoder); the multi-token depths' layers after it always, as Megatron's
 * MTP under the global FP8 context), else -1. The routed experts' grouped matmuls run in FP8 as
 * Transformer Engine's GroupedLinear does under Megatron's MoE FP8 recipes; the shared experts are
 * plain matmuls, FP8 as a dense MLP's; the router's matmul (router[] its logits) is never. */
static int fp8_layer(const ir_module *m, const ir_func *f, const ir_instr *in, const bool *router, int start, int end,
                     int decoder)
{
    bool dense = in->op == IR_OP_MATMUL && in->attr[IR_ATTR_MATMUL_TA] == 0 && !router[in->res[0]];
    int layer = dense || in->op == IR_OP_MOE_GROUPED_MATMUL ? weight_layer(m, f, in->args[1]) : -1;
    return layer >= start && (layer < end || layer >= decoder) ? layer : -1;
}

/* Delayed scaling: the FP8_HISTORY global `<param of weight global w>.amax_history.<what>`, made
 * the first time it is asked for (the step function makes it, eval finds it), and its value in f:
 * f32[1 + len], or for an expert weight [E, ...] f32[E, 1 + len], a history an expert (Transformer
 * Engine's GroupedLinear keeps an FP8 meta entry per GEMM: a history per expert's input, weight and
 * output gradient). */
static int fp8_history(ir_module *m, ir_func *f, int w, const char *what, bool experts)
{
    const ir_global *param = &m->globals[ir_global_param(m, w)];
    char name[512];
    snprintf(name, sizeof name, "%s.amax_history.%s", param->name, what);
    int g = ir_global_find(m, name);
    if (g < 0) {
        int64_t dims[2] = {param->type.dims[0], 1 + ir_cfg_int(m, IR_CFG_FP8_AMAX_HISTORY_LEN)};
        int layer = param->layer;
        ir_type t = experts ? ir_tensor(IR_F32, 2, dims) : ir_tensor(IR_F32, 1, &dims[1]);
        g = ir_global_add(m, name, t, IR_GLOBAL_FP8_HISTORY, IR_INIT_ZEROS, 0, false);
        m->globals[g].layer = layer;
    }
    return ir_global_ref(m, f, g);
}

/* Blockwise: whether matmul `in`'s x [M, K] and weight tile by 128 (M too, the wgrad's reduction,
 * but for the experts, whose wgrad tiles each expert's rows from its first: ops.def); else the
 * error names the fix. */
static bool fp8_block_tiles(const ir_func *f, const ir_instr *in, char *err, size_t errlen)
{
    const ir_type *x = &f->vals[in->args[0]].type, *w = &f->vals[in->args[1]].type;
    bool experts = in->op == IR_OP_MOE_GROUPED_MATMUL; /* w [E, F, K] (tb=1) */
    int64_t K = x->dims[x->ndim - 1], M = ir_numel(x) / K;
    int64_t N = experts ? w->dims[1] : w->dims[in->attr[IR_ATTR_MATMUL_TB] != 0 ? 0 : 1];
    if ((experts || M % IR_FP8_BLOCK == 0) && K % IR_FP8_BLOCK == 0 && N % IR_FP8_BLOCK == 0)
        return true;
    if (experts)
        return snprintf(err, errlen, "--fp8-recipe blockwise: %s's expert matmul %%%d by expert weights of %lld x %lld "
                        "features: blockwise FP8 cuts each expert's weight into 128x128 blocks: make hidden_size and "
                        "moe_ffn_hidden_size multiples of %d, or use --fp8-recipe tensorwise", f->name, in->res[0],
                        (long long)N, (long long)K, IR_FP8_BLOCK), false;
    return snprintf(err, errlen, "--fp8-recipe blockwise: %s's matmul %%%d of %lld tokens x %lld by a weight to %lld "
                    "features: blockwise FP8 cuts each into 128-wide tiles: make hidden_size, ffn_hidden_size, the "
                    "attention projections and micro_batch_size x seq_length multiples of %d, or use "
                    "--fp8-recipe tensorwise", f->name, in->res[0], (long long)M, (long long)K, (long long)N,
                    IR_FP8_BLOCK), false;
}

/* Operand a (0 the activation, 1 the weight) of FP8 matmul `in`, quantized: blockwise in 1x128
 * tiles (128x128 blocks, a dense weight [K, N] transposed to K-major; an expert weight is [E, F, K]),
 * else as the recipe says; a grouped matmul's with a scale per expert (its rows by the counts, its
 * weight by expert) */
static int fp8_operand(ir_module *m, ir_func *dst, const ir_func *src, const ir_instr *in, int a, int x, const int *map)
{
    ir_fp8_recipe recipe = (ir_fp8_recipe)ir_cfg_choice(m, IR_CFG_FP8_RECIPE);
    bool experts = in->op == IR_OP_MOE_GROUPED_MATMUL, step = src->kind == IR_FUNC_STEP;
    if (recipe == IR_FP8_BLOCKWISE)
        return ir_fp8_block_quantize(m, dst, x, a ? IR_FP8_BLOCK : 1, IR_FP8_BLOCK,
                                     a && !experts && in->attr[IR_ATTR_MATMUL_TB] == 0);
    const char *what[2] = {"x", "w"};
    int w = ir_global_of(src, in->args[1]);
    int history = recipe == IR_FP8_DELAYED ? fp8_history(m, dst, w, what[a], experts) : -1;
    if (experts)
        return ir_fp8_grouped_quantize(m, dst, x, a ? -1 : map[in->args[2]], history, step, IR_FP8_E4M3);
    return ir_fp8_quantize(m, dst, x, history, step, IR_FP8_E4M3);
}

/* FP8 matmul `in` of the quantized operands qx, qw: a dense layer's fp8_matmul, or the routed
 * experts' fp8_grouped_matmul */
static int fp8_product(ir_module *m, ir_func *dst, const ir_func *src, const ir_instr *in, int qx, int qw,
                       const int *map)
{
    bool delayed = ir_cfg_choice(m, IR_CFG_FP8_RECIPE) == IR_FP8_DELAYED;
    bool blockwise = ir_cfg_choice(m, IR_CFG_FP8_RECIPE) == IR_FP8_BLOCKWISE;
    bool hybrid = ir_cfg_choice(m, IR_CFG_FP8_FORMAT) == IR_FP8_FORMAT_HYBRID, wgrad = ir_cfg_bool(m, IR_CFG_FP8_WGRAD);
    bool experts = in->op == IR_OP_MOE_GROUPED_MATMUL;
    int w = ir_global_of(src, in->args[1]);
    int hdy = delayed && src->kind == IR_FUNC_STEP ? fp8_history(m, dst, w, "dy", experts) : -1;
    ir_fp8_format grad_format = hybrid ? IR_FP8_E5M2 : IR_FP8_E4M3;
    if (experts)
        return ir_fp8_grouped_matmul(m, dst, qx, qw, map[in->args[2]], in->attr[IR_ATTR_MOE_GROUPED_MATMUL_TB] != 0,
                                     grad_format, wgrad, hdy);
    bool tb = in->attr[IR_ATTR_MATMUL_TB] != 0 || blockwise; /* blockwise: the weight quantized K-major */
    int y = ir_fp8_matmul(m, dst, qx, qw, false, tb, grad_format, wgrad, hdy);
    dst->instrs[dst->vals[y].def].attr[IR_ATTR_FP8_MATMUL_RECOMPUTE] = in->attr[IR_ATTR_MATMUL_RECOMPUTE];
    return y;
}

/* Whether FP8 matmul `in` of src asks for what is not built: the error names the fix. fp8_matmul's
 * result is in param_dtype (ops.def): so must the matmul's be. */
static bool fp8_unbuilt(const ir_module *m, const ir_func *src, const ir_instr *in, char *err, size_t errlen)
{
    ir_dtype act = (ir_dtype)ir_cfg_choice(m, IR_CFG_PARAM_DTYPE), dt = src->vals[in->res[0]].type.dtype;
    bool blockwise = ir_cfg_choice(m, IR_CFG_FP8_RECIPE) == IR_FP8_BLOCKWISE, experts = in->op == IR_OP_MOE_GROUPED_MATMUL;
    if (act != dt)
        return snprintf(err, errlen, "%s: matmul %%%d gives %s, not the activations' param_dtype %s", src->name,
                        in->res[0], ir_dtype_name(dt), ir_dtype_name(act)), true;
    if (blockwise && experts && in->attr[IR_ATTR_MOE_GROUPED_MATMUL_TB] == 0) /* the model's are [E, F, K] */
        return snprintf(err, errlen, "--fp8-recipe blockwise: %s's grouped matmul %%%d reads its expert weights [E, K, "
                        "F] (tb=0): blockwise FP8 experts take them as [E, F, K] (tb=1), each a torch.nn.Linear's: use "
                        "--fp8-recipe tensorwise", src->name, in->res[0]), true;
    return blockwise && !fp8_block_tiles(src, in, err, errlen);
}

/* Rewrites function fi: each FP8 layer's matmul on quantized operands, each operand quantized once. */
static bool fp8_func(ir_module *m, int fi, int nlayers, char *err, size_t errlen)
{
    const ir_func *src = m->funcs[fi];
    int start = 0, end = nlayers;
    if (ir_cfg_bool(m, IR_CFG_FIRST_LAST_LAYERS_BF16)) {
        start = (int)ir_cfg_int(m, IR_CFG_NUM_LAYERS_AT_START_IN_BF16);
        end = nlayers - (int)ir_cfg_int(m, IR_CFG_NUM_LAYERS_AT_END_IN_BF16);
    }
    bool *router = router_logits(src);
    for (int i = 0; i < src->ninstrs; i++)
        if (fp8_layer(m, src, &src->instrs[i], router, start, end, nlayers) >= 0 &&
            fp8_unbuilt(m, src, &src->instrs[i], err, errlen)) {
            free(router);
            return false;
        }
    ir_func *dst = ir_func_new(m, src->name, src->kind);
    int *map = malloc(sizeof(int) * ((size_t)src->nvals + 1)), *quantized = malloc(sizeof(int) * ((size_t)src->nvals + 1));
    for (int v = 0; v < src->nvals; v++)
        quantized[v] = -1;
    for (int i = 0; i < src->ninstrs; i++) {
        const ir_instr *in = &src->instrs[i];
        if (fp8_layer(m, src, in, router, start, end, nlayers) < 0) {
            ir_copy_instr(m, dst, src, in, map);
            continue;
        }
        for (int a = 0; a < 2; a++)
            if (quantized[in->args[a]] < 0)
                quantized[in->args[a]] = fp8_operand(m, dst, src, in, a, map[in->args[a]], map);
        int r = fp8_product(m, dst, src, in, quantized[in->args[0]], quantized[in->args[1]], map);
        ir_map_results(dst, src, in, r, map);
    }
    ir_func_replace(m, fi, dst);
    free(router);
    free(map);
    free(quantized);
    return true;
}

bool pass_fp8(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen)
{
    if (ir_cfg_choice(m, IR_CFG_FP8_FORMAT) == IR_FP8_FORMAT_NONE)
        return true;
    if (fp8_refuse(m, opts, err, errlen))
        return false;
    int nlayers = 0;
    for (int g = 0; g < m->nglobals; g++)
        nlayers = m->globals[g].layer + 1 > nlayers ? m->globals[g].layer + 1 : nlayers;
    int decoder = (int)ir_cfg_int(m, IR_CFG_NUM_LAYERS); /* the layers after it: multi-token prediction's */
    if (decoder > 0 && decoder < nlayers)
        nlayers = decoder;
    ir_func_kind kinds[2] = {IR_FUNC_STEP, IR_FUNC_EVAL};
    for (int k = 0; k < 2; k++)
        if (ir_func_of_kind(m, kinds[k]) >= 0 && !fp8_func(m, ir_func_of_kind(m, kinds[k]), nlayers, err, errlen))
            return false;
    return true;
}
