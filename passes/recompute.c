/* recompute.c — activation recomputation with Megatron's meaning (config recompute_granularity),
 * on the step function after autodiff: a forward value the backward reads is not kept from the
 * forward; the backward recomputes it right before its first use, from values it keeps. The
 * forward copy then dies at its last forward use, and the memory plan reuses its bytes.
 *
 * selective: the ops of recompute_modules, each from inputs the backward keeps anyway (and under FP8
 * their outputs' quantized copies, which the weight gradients read: `recomputed`):
 *   layernorm  LayerNorm/RMSNorm outputs (ops flagged IR_OPF_RECOMPUTE_SELECTIVE): the norm's
 *              input stays, its gradient reads it
 *   mlp_act    GELU/SiLU outputs and SwiGLU's product (IR_OPF_RECOMPUTE_ACTIVATION): the
 *              activation's input stays, its gradient reads it
 *   mla_up_proj multi-latent attention's up projections (matmuls marked recompute=mla_up_proj: q_up,
 *              or q without q_lora_rank, and kv_up) and what follows them up to the attention's
 *              inputs (their reshapes, splits, q's rope and scale, the concatenations): Megatron's
 *              qkv_up_checkpoint. The latents stay (the up projections' weight gradients read
 *              them), and so does k_pe's rope, [B,T,1,Dr] (Megatron's recomputes it too)
 *   mlp        a dense MLP's up and gate projections (matmuls marked recompute=mlp), their biases
 *              and the activation: the MLP's input stays (their weight gradients read it) and so
 *              does the activation's output (the down projection's weight gradient reads it) unless
 *              mlp_act is chosen too. Megatron's `mlp` checkpoints the MLP module from its input: the
 *              same values replayed, since the down projection's output is read by no backward
 *   shared_experts the same for an MoE layer's shared expert (recompute=shared_experts)
 *   moe        the routed experts' up and gate grouped GEMMs (those the activation reads) and the
 *              activation: the dispatched rows stay. Megatron's `moe` replays the whole MoE layer
 *              from its input, its routing and all-to-all too, and so also frees the dispatched rows
 *   moe_act    the routed experts' activation alone (mlp_act covers it and the dense ones)
 *   core_attn  nothing to do: the attention op keeps only its output and log-sum-exp, and its
 *              backward recomputes the probabilities always (flash attention)
 *   recompute_num_layers N > 0: only in layers [0, N).
 * full: layers are grouped into checkpoints; a checkpoint keeps only its input (the residual
 * stream entering its first layer) and every value of its layers the backward reads is replayed
 * from it: the whole forward of the checkpoint, once, in the backward of its layers. Counted, as
 * Megatron counts, from each virtual pipeline stage's first layer (pass_pipeline_layer_stages,
 * the split the pipeline pass makes later):
 *   uniform  groups of N consecutive layers (the last of a stage may be shorter)
 *   block    the first N layers of each stage, each its own checkpoint; the others keep all.
 *
 * It runs before shard and pipeline so that those passes treat a recomputed instruction as any
 * other: the shard pass splits it and inserts its collectives again (a recomputed sequence-
 * parallel layer all-gathers again, as Megatron's does), and the pipeline pass, cutting the
 * backward from the forward by position, stashes only what the backward still reads of the
 * forward: the checkpoints' inputs. A recomputed dropout draws the forward's mask: the mask is a
 * function of its attributes (seed, site, offset) and the element's sample and index
 * (runtime/dropout.c), which the recomputation reads unchanged (@first_sample is an input).
 *
 * The pass writes recompute_flops, the forward FLOPs a micro-batch's backward replays (the
 * logical graph's: the whole model before the parallel splits), for the compile report. */
#include "passes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    ir_module *m;
    const ir_func *src;
    ir_func *dst;
    int bwd;                        /* autodiff's backward starts after `output @loss` */
    int *map;                       /* source value -> new value (the forward's) */
    int *again;                     /* source value -> its recomputation in the backward, or -1 */
    const int *layer;               /* per source instruction: its layer (layers_of) */
    unsigned opf;                   /* selective: the IR_OPF_RECOMPUTE_* flags of the modules chosen */
    int num_layers;                 /* selective: only in layers [0, num_layers); 0: every layer */
    int nlayers;                    /* the model's: 1 + the largest layer a global has */
    bool *region;                   /* selective mla_up_proj, mlp, shared_experts, moe, moe_act: per source
                                       instruction, in a chosen module's region (mark_regions); NULL: none */
    int *ckpt;                      /* full: per layer, its checkpoint (the checkpoint's first layer), -1: none */
    int *group;                     /* full: per source instruction, its layer's checkpoint, -1: none */
    bool *kept;                     /* full: per source value, a checkpoint's value another's forward reads */
    bool *needed;                   /* full: per source value, recomputed because the backward reads it or
                                       a recomputation of it does */
    bool *replayed;                 /* full: per checkpoint (its first layer), whether its forward is replayed */
    double macs;                    /* the recomputed instructions' multiply-adds */
} recompute_ctx;

static bool is_leaf(const ir_instr *in) { return in->nargs == 0; }

/* The layer of every forward instruction: a global's own (a parameter of layer L), the latest of
 * an instruction's operands'; -1 before the first layer (the embedding: tokens and a table of no
 * layer), nlayers after the last (what reads a parameter of no layer after a layer's values: the
 * final norm, the head, the loss). */
static void layers_of(const ir_module *m, const ir_func *f, int bwd, int nlayers, int *layer)
{
    enum { NO_LAYER = -2 };
    for (int i = 0; i < bwd; i++) {
        const ir_instr *in = &f->instrs[i];
        if (is_leaf(in)) {
            int g = in->global;
            layer[i] = g < 0 ? -1 : m->globals[g].layer >= 0 ? m->globals[g].layer : NO_LAYER;
            continue;
        }
        int l = -1;
        bool unlayered = false;
        for (int a = 0; a < in->nargs; a++) {
            int d = layer[f->vals[in->args[a]].def];
            unlayered |= d == NO_LAYER;
            l = d > l ? d : l;
        }
        layer[i] = unlayered && l >= 0 ? nlayers : l;
    }
    for (int i = bwd; i < f->ninstrs; i++)
        layer[i] = -1;
}

/* full: each layer's checkpoint (recompute_method, recompute_num_layers, counted from its virtual
 * stage's first layer), then each forward instruction's, and which values are kept: those a
 * forward instruction of another checkpoint (or of none) reads, a checkpoint's output. */
static bool full_groups(recompute_ctx *c, int nlayers, char *err, size_t errlen)
{
    const ir_module *m = c->m;
    const ir_func *f = c->src;
    int p = (int)ir_cfg_int(m, IR_CFG_PIPELINE_MODEL_PARALLEL_SIZE);
    int v = (int)ir_cfg_int(m, IR_CFG_NUM_VIRTUAL_STAGES_PER_PIPELINE_RANK);
    int n = (int)ir_cfg_int(m, IR_CFG_RECOMPUTE_NUM_LAYERS);
    int method = ir_cfg_choice(m, IR_CFG_RECOMPUTE_METHOD);
    bool block = method == IR_RECOMPUTE_BLOCK;
    if (method == IR_RECOMPUTE_METHOD_NONE)
        return snprintf(err, errlen, "config recompute_method \"none\": full recompute takes uniform or block"), false;
    if (n < 1)
        return snprintf(err, errlen, "config recompute_num_layers %d: full recompute needs at least 1", n), false;
    int *stage = malloc(sizeof(int) * ((size_t)nlayers + 1)), *ckpt = c->ckpt;
    bool ok = pass_pipeline_layer_stages(m, p > 1 ? p : 1, v > 1 ? v : 1, stage, nlayers, err, errlen);
    for (int l = 0, first = 0; ok && l < nlayers; l++) {
        first = l == 0 || stage[l] != stage[l - 1] ? l : first;
        ckpt[l] = block ? (l - first < n ? l : -1) : first + (l - first) / n * n;
    }
    for (int i = 0; ok && i < f->ninstrs; i++) {
        int l = c->layer[i];
        c->group[i] = i < c->bwd && !is_leaf(&f->instrs[i]) && l >= 0 && l < nlayers ? ckpt[l] : -1;
    }
    for (int i = 0; ok && i < c->bwd; i++)
        for (int a = 0; a < f->instrs[i].nargs; a++) {
            int arg = f->instrs[i].args[a], d = f->vals[arg].def;
            if (c->group[d] >= 0 && c->group[d] != c->group[i])
                c->kept[arg] = true;
        }
    free(stage);
    return ok;
}

/* Whether the backward recomputes source value v instead of reading the forward's. Selective: an op
 * of the modules, and an FP8 quantize (tensorwise, an expert's, blockwise) of a value so recomputed
 * (passes/fp8.c: a linear layer's input, which FP8's weight gradient reads only as its quantized
 * copy), from the forward's amax, kept (blockwise: its blocks' own, the same values): the same scale
 * gives the same bytes, and without it the quantized copy would keep what the recomputation frees
 * (selective recompute saved nothing under FP8). */
static bool recomputed(const recompute_ctx *c, int v)
{
    int d = c->src->vals[v].def;
    const ir_instr *in = &c->src->instrs[d];
    if (d >= c->bwd || is_leaf(in) || in->nres == 0 || ir_op_has(in->op, IR_OPF_STORES_GLOBAL))
        return false;
    if (c->group)
        return c->group[d] >= 0 && !c->kept[v];
    bool within = c->num_layers <= 0 || (c->layer[d] >= 0 && c->layer[d] < c->num_layers);
    if (c->region && c->region[d]) /* a region's, an FP8 GEMM's weight quantize among them */
        return within;
    if (in->op == IR_OP_FP8_QUANTIZE || in->op == IR_OP_FP8_GROUPED_QUANTIZE || in->op == IR_OP_FP8_BLOCK_QUANTIZE)
        return recomputed(c, in->args[0]);
    return ir_op_has(in->op, c->opf) && in->nres == 1 && within;
}

/* full: v and what its recomputation reads of its checkpoint are needed. */
static void mark_needed(recompute_ctx *c, int v)
{
    if (!recomputed(c, v) || c->needed[v])
        return;
    c->needed[v] = true;
    const ir_instr *def = &c->src->instrs[c->src->vals[v].def];
    for (int a = 0; a < def->nargs; a++)
        mark_needed(c, def->args[a]);
}

static void emit_again(recompute_ctx *c, const ir_instr *def, const int *args)
{
    int r = ir_emit(c->m, c->dst, def->op, args, def->nargs, def->attr, def->sym, &c->src->vals[def->res[0]].type);
    for (int k = 0; k < def->nres; k++)
        c->again[def->res[k]] = r + k;
    c->macs += ir_work_macs(c->dst, &c->dst->instrs[c->dst->ninstrs - 1]);
}

/* full: checkpoint `g`'s forward replayed (what of it is needed, in the forward's order) before
 * the first backward instruction of its layers, as Megatron's checkpoint replays it: every
 * recomputed value is then made before the backward that reads it begins (the fusion pass folds
 * a gradient's matmul with ops reading values made before it). */
static void replay(recompute_ctx *c, int g)
{
    if (g < 0 || c->replayed[g])
        return;
    c->replayed[g] = true;
    for (int i = 0; i < c->bwd; i++) {
        const ir_instr *in = &c->src->instrs[i];
        bool needed = false;
        for (int k = 0; k < in->nres; k++)
            needed |= c->needed[in->res[k]];
        if (c->group[i] != g || !needed)
            continue;
        int args[in->nargs ? in->nargs : 1];
        for (int a = 0; a < in->nargs; a++)
            args[a] = recomputed(c, in->args[a]) ? c->again[in->args[a]] : c->map[in->args[a]];
        emit_again(c, in, args);
    }
}

/* full: before backward instruction `in`, the replay of the checkpoint whose parameters it reads. */
static void replay_before(recompute_ctx *c, const ir_instr *in)
{
    for (int a = 0; c->group && a < in->nargs; a++) {
        const ir_instr *d = &c->src->instrs[c->src->vals[in->args[a]].def];
        int k = d->global;
        int l = k >= 0 ? c->m->globals[k].layer : -1;
        if (l >= 0 && l < c->nlayers)
            replay(c, c->ckpt[l]);
        if (recomputed(c, in->args[a]))
            replay(c, c->group[c->src->vals[in->args[a]].def]);
    }
}

/* Source value v as the backward should read it: recomputed (once, with every result of its
 * instruction) where `recomputed` says so; under full, by its checkpoint's replay. */
static int backward_value(recompute_ctx *c, int v)
{
    if (!recomputed(c, v))
        return c->map[v];
    if (c->group)
        replay(c, c->group[c->src->vals[v].def]);
    if (c->again[v] < 0) {
        const ir_instr *def = &c->src->instrs[c->src->vals[v].def];
        int args[def->nargs ? def->nargs : 1];
        for (int a = 0; a < def->nargs; a++)
            args[a] = backward_value(c, def->args[a]);
        emit_again(c, def, args);
    }
    return c->again[v];
}

/* Whether op follows a region's opening matmuls into it: mla_up_proj's reshapes, splits, rope,
 * scale and concatenations up to the attention's inputs, an MLP's bias adds and activation up to
 * its down projection (a matmul, which no region follows into). */
static bool region_follower(ir_op op)
{
    return op == IR_OP_RESHAPE || op == IR_OP_SPLIT_LAST_DIM || op == IR_OP_ROPE || op == IR_OP_SCALE ||
           op == IR_OP_CONCAT_LAST_DIM || op == IR_OP_BIAS_ADD || ir_op_has(op, IR_OPF_RECOMPUTE_ACTIVATION);
}

/* Region member i, an FP8 GEMM, brings its weight's quantize (args[2], of a global) with it: the
 * backward quantizes the weight again from the global and the forward's amax rather than keep an FP8
 * copy of it (ir/grad.c), so the replayed GEMM does too. */
static void mark_fp8_weight(const ir_func *f, int i, bool *region)
{
    const ir_instr *in = &f->instrs[i];
    if (!region[i] || (in->op != IR_OP_FP8_MATMUL && in->op != IR_OP_FP8_GROUPED_MATMUL))
        return;
    int q = f->vals[in->args[2]].def;
    if (f->instrs[f->vals[f->instrs[q].args[0]].def].nargs == 0) /* of a global */
        region[q] = true;
}

/* The regions of the modules in `set` (bits of ir_recompute_module): the forward's matmuls (FP8 or
 * not) the builder marks recompute=K with K - 1 in the set (mla_up_proj, mlp, shared_experts) and,
 * in order, every follower reading one of them; moe: the grouped GEMMs (FP8 or not) an activation
 * reads (the routed experts' up and gate) and that activation; moe_act: that activation alone. An
 * FP8 GEMM's weight quantize joins it (mark_fp8_weight); its input's quantized copy stays, as the
 * input does (the weight gradient reads it), and the activation's is replayed (`recomputed`). */
static void mark_regions(const ir_func *f, int bwd, unsigned set, bool *region)
{
    for (int i = 0; i < bwd; i++) {
        const ir_instr *in = &f->instrs[i];
        if (in->op == IR_OP_MATMUL || in->op == IR_OP_FP8_MATMUL) {
            int k = (int)in->attr[in->op == IR_OP_MATMUL ? IR_ATTR_MATMUL_RECOMPUTE : IR_ATTR_FP8_MATMUL_RECOMPUTE] - 1;
            region[i] = k >= 0 && (set & 1u << k);
            mark_fp8_weight(f, i, region);
            continue;
        }
        bool experts = false; /* an activation of grouped GEMMs: the routed experts' */
        for (int a = 0; ir_op_has(in->op, IR_OPF_RECOMPUTE_ACTIVATION) && a < in->nargs; a++) {
            int d = f->vals[in->args[a]].def;
            if (f->instrs[d].op == IR_OP_MOE_GROUPED_MATMUL || f->instrs[d].op == IR_OP_FP8_GROUPED_MATMUL) {
                experts = true;
                region[d] = set & 1u << IR_RM_MOE;
                mark_fp8_weight(f, d, region);
            }
        }
        if (experts) {
            region[i] = set & (1u << IR_RM_MOE | 1u << IR_RM_MOE_ACT);
            continue;
        }
        for (int a = 0; region_follower(in->op) && !region[i] && a < in->nargs; a++)
            region[i] = region[f->vals[in->args[a]].def];
    }
}

/* The IR_OPF_RECOMPUTE_* flags of config recompute_modules (core_attn: none, see above) and, in
 * *regions, its modules recomputed as regions (mark_regions); false with the name for a word that
 * is no module (the spec refuses it first). Every module of ir_recompute_module is built. */
static bool module_flags(const char *modules, unsigned *opf, unsigned *regions, char *err, size_t errlen)
{
    unsigned set;
    char bad[64] = "";
    if (!ir_word_set(ir_recompute_module_words, modules, &set, bad, sizeof bad))
        return snprintf(err, errlen, "config recompute_modules: \"%s\" is not a module this pass recomputes", bad),
               false;
    *regions = set & (1u << IR_RM_MLA_UP_PROJ | 1u << IR_RM_MLP | 1u << IR_RM_SHARED_EXPERTS | 1u << IR_RM_MOE |
                      1u << IR_RM_MOE_ACT);
    *opf = (set & 1u << IR_RM_LAYERNORM ? IR_OPF_RECOMPUTE_SELECTIVE : 0u) |
           (set & 1u << IR_RM_MLP_ACT ? IR_OPF_RECOMPUTE_ACTIVATION : 0u);
    return true;
}

bool pass_recompute(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen)
{
    (void)opts;
    int g = ir_cfg_choice(m, IR_CFG_RECOMPUTE_GRANULARITY);
    bool full = g == IR_RECOMPUTE_FULL, activations = g == IR_RECOMPUTE_ACTIVATIONS; /* an older text's selective */
    int fi = ir_func_of_kind(m, IR_FUNC_STEP);
    if (g == IR_RECOMPUTE_NONE || fi < 0)
        return true;
    const ir_func *src = m->funcs[fi];
    int backward = ir_find_role(src, IR_OP_OUTPUT, ir_role_of(IR_ROLE_LOSS));
    if (backward < 0)
        return snprintf(err, errlen, "%s has no `output @loss`", src->name), false;
    int nlayers = 0;
    for (int k = 0; k < m->nglobals; k++)
        nlayers = m->globals[k].layer + 1 > nlayers ? m->globals[k].layer + 1 : nlayers;
    size_t nv = (size_t)src->nvals + 1, ni = (size_t)src->ninstrs + 1;
    int *layer = malloc(sizeof(int) * ni);
    layers_of(m, src, backward + 1, nlayers, layer);
    size_t nl = (size_t)nlayers + 1;
    recompute_ctx c = {m, src, NULL, backward + 1, malloc(sizeof(int) * nv), malloc(sizeof(int) * nv), layer, 0,
                       (int)ir_cfg_int(m, IR_CFG_RECOMPUTE_NUM_LAYERS), nlayers, NULL,
                       full ? malloc(sizeof(int) * nl) : NULL, full ? malloc(sizeof(int) * ni) : NULL,
                       full ? calloc(nv, sizeof(bool)) : NULL, full ? calloc(nv, sizeof(bool)) : NULL,
                       full ? calloc(nl, sizeof(bool)) : NULL, 0};
    unsigned regions = 0;
    for (int v = 0; v < src->nvals; v++)
        c.again[v] = -1;
    bool ok = full ? full_groups(&c, nlayers, err, errlen)
                   : activations ? (c.opf = IR_OPF_RECOMPUTE_ACTIVATION, true)
                                 : module_flags(ir_cfg_text(m, IR_CFG_RECOMPUTE_MODULES), &c.opf, &regions, err, errlen);
    if (ok && regions) {
        c.region = calloc(ni, sizeof(bool));
        mark_regions(src, c.bwd, regions, c.region);
    }
    for (int i = backward + 1; ok && full && i < src->ninstrs; i++)
        for (int a = 0; a < src->instrs[i].nargs; a++)
            mark_needed(&c, src->instrs[i].args[a]);
    c.dst = ok ? ir_func_new(m, src->name, src->kind) : NULL;
    for (int i = 0; ok && i < src->ninstrs; i++) {
        const ir_instr *in = &src->instrs[i];
        int args[in->nargs ? in->nargs : 1];
        if (i > backward && in->op != IR_OP_OUTPUT)
            replay_before(&c, in);
        for (int a = 0; a < in->nargs; a++)
            args[a] = i > backward && in->op != IR_OP_OUTPUT ? backward_value(&c, in->args[a]) : c.map[in->args[a]];
        const ir_type *explicit_type = in->nres ? &src->vals[in->res[0]].type : NULL;
        int r = ir_emit_like(m, c.dst, in, args, explicit_type);
        for (int k = 0; k < in->nres; k++)
            c.map[in->res[k]] = r + k;
    }
    free(c.map);
    free(c.again);
    free(c.ckpt);
    free(c.group);
    free(c.kept);
    free(c.needed);
    free(c.replayed);
    free(c.region);
    free(layer);
    if (!ok)
        return false;
    ir_func_replace(m, fi, c.dst);
    ir_cfg_set_num(m, IR_CFG_RECOMPUTE_FLOPS, 2 * c.macs);
    return true;
}
