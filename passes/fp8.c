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
 * requantizes along each backward GEMM's K. */
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

/* The layer of matmul `in` when it is to run in FP8 (a layer's weight, outside the decoder's bf16
 * layers [0, start) and [end, decoder); the multi-token depths' layers after it always, as Megatron's
 * MTP under the global FP8 context), else -1. */
static int fp8_layer(const ir_module *m, const ir_func *f, const ir_instr *in, int start, int end, int decoder)
{
    int layer = in->op == IR_OP_MATMUL && in->attr[IR_ATTR_MATMUL_TA] == 0 ? weight_layer(m, f, in->args[1]) : -1;
    return layer >= start && (layer < end || layer >= decoder) ? layer : -1;
}

/* Delayed scaling: the FP8_HISTORY global `<param of weight global w>.amax_history.<what>`, made
 * the first time it is asked for (the step function makes it, eval finds it), and its value in f. */
static int fp8_history(ir_module *m, ir_func *f, int w, const char *what)
{
    const ir_global *param = &m->globals[ir_global_param(m, w)];
    char name[512];
    snprintf(name, sizeof name, "%s.amax_history.%s", param->name, what);
    int g = ir_global_find(m, name);
    if (g < 0) {
        int64_t n = 1 + ir_cfg_int(m, IR_CFG_FP8_AMAX_HISTORY_LEN);
        int layer = param->layer;
        g = ir_global_add(m, name, ir_tensor(IR_F32, 1, &n), IR_GLOBAL_FP8_HISTORY, IR_INIT_ZEROS, 0, false);
        m->globals[g].layer = layer;
    }
    return ir_global_ref(m, f, g);
}

/* Blockwise: whether matmul `in`'s x [M, K] and weight tile by 128 (M too, the wgrad's reduction);
 * else the error names the fix. */
static bool fp8_block_tiles(const ir_func *f, const ir_instr *in, char *err, size_t errlen)
{
    const ir_type *x = &f->vals[in->args[0]].type, *w = &f->vals[in->args[1]].type;
    int64_t K = x->dims[x->ndim - 1], M = ir_numel(x) / K, N = w->dims[in->attr[IR_ATTR_MATMUL_TB] != 0 ? 0 : 1];
    if (M % IR_FP8_BLOCK == 0 && K % IR_FP8_BLOCK == 0 && N % IR_FP8_BLOCK == 0)
        return true;
    return snprintf(err, errlen, "--fp8-recipe blockwise: %s's matmul %%%d of %lld tokens x %lld by a weight to %lld "
                    "features: blockwise FP8 cuts each into 128-wide tiles: make hidden_size, ffn_hidden_size, the "
                    "attention projections and micro_batch_size x seq_length multiples of %d, or use "
                    "--fp8-recipe tensorwise", f->name, in->res[0], (long long)M, (long long)K, (long long)N,
                    IR_FP8_BLOCK), false;
}

/* Operand a (0 the activation, 1 the weight) of FP8 matmul `in`, quantized: blockwise in 1x128
 * tiles (128x128 blocks, a weight [K, N] transposed to K-major), else as the recipe says */
static int fp8_operand(ir_module *m, ir_func *dst, const ir_func *src, const ir_instr *in, int a, int x)
{
    ir_fp8_recipe recipe = (ir_fp8_recipe)ir_cfg_choice(m, IR_CFG_FP8_RECIPE);
    if (recipe == IR_FP8_BLOCKWISE)
        return ir_fp8_block_quantize(m, dst, x, a ? IR_FP8_BLOCK : 1, IR_FP8_BLOCK, a && in->attr[IR_ATTR_MATMUL_TB] == 0);
    const char *what[2] = {"x", "w"};
    int w = ir_global_of(src, in->args[1]);
    return ir_fp8_quantize(m, dst, x, recipe == IR_FP8_DELAYED ? fp8_history(m, dst, w, what[a]) : -1,
                           src->kind == IR_FUNC_STEP, IR_FP8_E4M3);
}

/* Rewrites function fi: each FP8 layer's matmul on quantized operands, each operand quantized once.
 * fp8_matmul's result is in param_dtype (ops.def): so must the matmul's be. */
static bool fp8_func(ir_module *m, int fi, int nlayers, char *err, size_t errlen)
{
    bool delayed = ir_cfg_choice(m, IR_CFG_FP8_RECIPE) == IR_FP8_DELAYED;
    bool blockwise = ir_cfg_choice(m, IR_CFG_FP8_RECIPE) == IR_FP8_BLOCKWISE;
    const ir_func *src = m->funcs[fi];
    bool hybrid = ir_cfg_choice(m, IR_CFG_FP8_FORMAT) == IR_FP8_FORMAT_HYBRID, wgrad = ir_cfg_bool(m, IR_CFG_FP8_WGRAD);
    int start = 0, end = nlayers;
    if (ir_cfg_bool(m, IR_CFG_FIRST_LAST_LAYERS_BF16)) {
        start = (int)ir_cfg_int(m, IR_CFG_NUM_LAYERS_AT_START_IN_BF16);
        end = nlayers - (int)ir_cfg_int(m, IR_CFG_NUM_LAYERS_AT_END_IN_BF16);
    }
    ir_dtype act = (ir_dtype)ir_cfg_choice(m, IR_CFG_PARAM_DTYPE);
    for (int i = 0; i < src->ninstrs; i++) {
        const ir_instr *in = &src->instrs[i];
        ir_dtype dt = in->nres ? src->vals[in->res[0]].type.dtype : IR_F32;
        if (fp8_layer(m, src, in, start, end, nlayers) >= 0 && act != dt)
            return snprintf(err, errlen, "%s: matmul %%%d gives %s, not the activations' param_dtype %s", src->name,
                            in->res[0], ir_dtype_name(dt), ir_dtype_name(act)), false;
        if (fp8_layer(m, src, in, start, end, nlayers) >= 0 && blockwise && !fp8_block_tiles(src, in, err, errlen))
            return false;
    }
    ir_func *dst = ir_func_new(m, src->name, src->kind);
    int *map = malloc(sizeof(int) * ((size_t)src->nvals + 1)), *quantized = malloc(sizeof(int) * ((size_t)src->nvals + 1));
    for (int v = 0; v < src->nvals; v++)
        quantized[v] = -1;
    for (int i = 0; i < src->ninstrs; i++) {
        const ir_instr *in = &src->instrs[i];
        if (fp8_layer(m, src, in, start, end, nlayers) < 0) {
            ir_copy_instr(m, dst, src, in, map);
            continue;
        }
        int w = ir_global_of(src, in->args[1]);
        bool step = src->kind == IR_FUNC_STEP;
        for (int a = 0; a < 2; a++)
            if (quantized[in->args[a]] < 0)
                quantized[in->args[a]] = fp8_operand(m, dst, src, in, a, map[in->args[a]]);
        bool tb = in->attr[IR_ATTR_MATMUL_TB] != 0 || blockwise; /* blockwise: the weight quantized K-major */
        int r = ir_fp8_matmul(m, dst, quantized[in->args[0]], quantized[in->args[1]], false, tb,
                              hybrid ? IR_FP8_E5M2 : IR_FP8_E4M3, wgrad,
                              delayed && step ? fp8_history(m, dst, w, "dy") : -1);
        ir_map_results(dst, src, in, r, map);
    }
    ir_func_replace(m, fi, dst);
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
