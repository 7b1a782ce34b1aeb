/* model.c — builds the logical forward graph of one micro-batch (GPT-2 or LLaMA style, with
 * mixture-of-experts layers where the spec has experts) from a
 * validated spec: the parameters as module globals, the `micro_step` function computing the
 * loss (autodiff adds its backward), the same forward again as `eval_step` (loss only, never
 * differentiated: validation without touching the gradients, and without dropout), and the
 * training settings the runtime needs as module config. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    ir_module *m;
    ir_func *f;
    const mcc_spec *s;
    int first_sample;               /* `input @first_sample` of a training step with dropout, else -1 */
    int64_t rows;                   /* batch rows the chain being built runs over */
    int layer;                      /* the layer being built, -1 outside the layers */
    bool train;                     /* a training step (the MoE router's losses and counts output), not eval_step */
} builder;

/* Declares a parameter (once: every step function shares it) in the layer being built, placed
 * over tp as `place` says, and returns a reference to it in the function. */
static int param(builder *b, const char *name, int ndim, const int64_t *dims, ir_init init, double std,
                 ir_placement place)
{
    int g = ir_global_find(b->m, name);
    if (g < 0) {
        g = ir_global_add(b->m, name, ir_tensor(IR_F32, ndim, dims), IR_GLOBAL_PARAM, init, std, ndim < 2);
        b->m->globals[g].layer = b->layer;
        b->m->globals[g].placement = place;
    }
    return ir_global_ref(b->m, b->f, g);
}

static int param1(builder *b, const char *name, int64_t n, ir_init init, ir_placement place)
{
    return param(b, name, 1, &n, init, 0, place);
}

/* y = x W^T (+ bias where the model has one: add_bias_linear): W is [out, in] as in torch.nn.Linear
 * and Megatron. Column-parallel splits W's rows and the bias with them; row-parallel W's columns,
 * the bias (added to the complete sum) replicated. */
static int linear_with(builder *b, const char *prefix, int x, int64_t in, int64_t out, double std, ir_placement place,
                       bool has_bias)
{
    char name[160];
    int64_t wdims[2] = {out, in};
    snprintf(name, sizeof name, "%s.weight", prefix);
    int y = ir_matmul(b->m, b->f, x, param(b, name, 2, wdims, IR_INIT_NORMAL, std, place), false, true);
    if (!has_bias)
        return y;
    snprintf(name, sizeof name, "%s.bias", prefix);
    ir_placement bias = place == IR_PLACE_COLUMN ? IR_PLACE_COLUMN : IR_PLACE_REPLICATED;
    return ir_op2(b->m, b->f, IR_OP_BIAS_ADD, y, param1(b, name, out, IR_INIT_ZEROS, bias));
}

static int linear(builder *b, const char *prefix, int x, int64_t in, int64_t out, double std, ir_placement place)
{
    return linear_with(b, prefix, x, in, out, std, place, b->s->add_bias_linear);
}

/* Dropout sites, the second word of the mask's key: 0 the embedding output, then per layer its
 * attention probabilities, its attention block's output and its MLP block's output (the
 * multi-token depths' layers numbered on after the model's), then each depth's embedding output
 * (numbered alike in tests/torch_ref.py). */
enum { SITE_ATTENTION, SITE_ATTENTION_OUT, SITE_MLP_OUT, SITES_PER_LAYER };
static int dropout_site(int layer, int kind) { return 1 + SITES_PER_LAYER * layer + kind; }
static int mtp_embedding_site(const mcc_spec *s, int depth)
{
    return dropout_site(s->num_layers + s->mtp_num_layers, 0) + depth - 1;
}

/* Dropout of x[B,T,d] with probability p in a training step (eval_step and p = 0: none). */
static int dropout(builder *b, int x, double p, int site)
{
    if (b->first_sample < 0 || p == 0)
        return x;
    /* x is whole here: dimension 1 holds [0, T) of T (the shard pass rewrites this for its slices) */
    double attrs[IR_NATTRS_DROPOUT] = {[IR_ATTR_DROPOUT_P] = p, [IR_ATTR_DROPOUT_SEED] = b->s->seed,
                                       [IR_ATTR_DROPOUT_SITE] = site, [IR_ATTR_DROPOUT_DIM] = 1,
                                       [IR_ATTR_DROPOUT_OFFSET] = 0,
                                       [IR_ATTR_DROPOUT_EXTENT] = (double)b->s->seq_length,
                                       [IR_ATTR_DROPOUT_CP] = 0}; /* the shard rules over cp set cp */
    int args[2] = {x, b->first_sample};
    return ir_emit(b->m, b->f, IR_OP_DROPOUT, args, 2, attrs, NULL, NULL);
}

/* The model's norm (RMSNorm or LayerNorm) of x over its last dimension, d wide. */
static int norm_of(builder *b, const char *prefix, int x, int64_t d)
{
    char w[160], bias[160];
    double eps = b->s->norm_epsilon;
    snprintf(w, sizeof w, "%s.weight", prefix);
    snprintf(bias, sizeof bias, "%s.bias", prefix);
    bool one_p = b->s->apply_layernorm_1p; /* the weight zero-centred: the norm scales by 1 + w */
    double attrs[IR_NATTRS_LAYERNORM] = {[IR_ATTR_EPS] = eps, [IR_ATTR_ONE_P] = one_p};
    int weight = param1(b, w, d, one_p ? IR_INIT_ZEROS : IR_INIT_ONES, IR_PLACE_REPLICATED);
    if (b->s->normalization == MCC_NORM_RMSNORM) {
        int args[2] = {x, weight};
        return ir_emit(b->m, b->f, IR_OP_RMSNORM, args, 2, attrs, NULL, NULL);
    }
    int args[3] = {x, weight, param1(b, bias, d, IR_INIT_ZEROS, IR_PLACE_REPLICATED)};
    return ir_emit(b->m, b->f, IR_OP_LAYERNORM, args, 3, attrs, NULL, NULL);
}

static int norm(builder *b, const char *prefix, int x) { return norm_of(b, prefix, x, b->s->hidden_size); }

/* Rotates the first `rotary` channels of each head of x [B,T,H,D] by their positions, with the
 * spec's frequencies (LLaMA 3.1's or YaRN's scaling). */
static int rope(builder *b, int x, int64_t D, int64_t rotary)
{
    const mcc_spec *s = b->s;
    bool yarn = s->rope_type == MCC_ROPE_YARN;
    double attrs[IR_NATTRS_ROPE] = {
        [IR_ATTR_ROPE_THETA] = s->rotary_base, [IR_ATTR_ROPE_INVERSE] = 0,
        [IR_ATTR_ROPE_CP] = 0, /* contiguous positions: the shard rules over cp set cp */
        [IR_ATTR_ROPE_SCALING] = yarn ? s->rotary_scaling_factor : s->use_rope_scaling ? s->rope_scaling_factor : 0,
        [IR_ATTR_ROPE_ROTARY_DIM] = rotary < D ? (double)rotary : 0,
        [IR_ATTR_ROPE_YARN_CONTEXT] = yarn ? s->yarn_original_max_position_embeddings : 0,
        [IR_ATTR_ROPE_BETA_FAST] = yarn ? s->yarn_beta_fast : 0, [IR_ATTR_ROPE_BETA_SLOW] = yarn ? s->yarn_beta_slow : 0,
        [IR_ATTR_ROPE_MSCALE] = yarn ? s->mscale : 0, [IR_ATTR_ROPE_MSCALE_ALL_DIM] = yarn ? s->mscale_all_dim : 0};
    return ir_emit(b->m, b->f, IR_OP_ROPE, &x, 1, attrs, NULL, NULL);
}

/* Projects x[B,T,d] to heads [B,T,heads,D] (biased with add_qkv_bias too), each head of q and k
 * normalised (qk_layernorm: the model's norm over D, one weight for every head, before rope) and
 * rotated when the model uses RoPE: v is neither. */
static int project_heads(builder *b, const char *prefix, int x, int64_t heads, bool qk)
{
    const mcc_spec *s = b->s;
    int64_t D = mcc_spec_head_dim(s);
    int y = linear_with(b, prefix, x, s->hidden_size, heads * D, s->init_method_std, IR_PLACE_COLUMN,
                        s->add_bias_linear || s->add_qkv_bias);
    int64_t dims[4] = {b->rows, s->seq_length, heads, D};
    y = ir_reshape(b->m, b->f, y, 4, dims);
    if (qk && s->qk_layernorm) {
        char name[160];
        snprintf(name, sizeof name, "%s_norm", prefix);
        y = norm_of(b, name, y, D);
    }
    if (!qk || s->position_embedding_type != MCC_POS_ROPE)
        return y;
    return rope(b, y, D, mcc_spec_rotary_dim(s));
}

/* Causal attention of heads q [B,T,H,D] over k, v, with dropout on its probabilities in a
 * training step when attention_dropout > 0. */
static int attend(builder *b, int layer, int q, int k, int v)
{
    const mcc_spec *s = b->s;
    if (b->first_sample < 0 || s->attention_dropout == 0) {
        int qkv[3] = {q, k, v};
        return ir_emit(b->m, b->f, IR_OP_ATTENTION, qkv, 3, NULL, NULL, NULL);
    }
    int args[4] = {q, k, v, b->first_sample};
    double attrs[IR_NATTRS_ATTENTION_DROPOUT] = {
        [IR_ATTR_ATTENTION_DROPOUT_P] = s->attention_dropout, [IR_ATTR_ATTENTION_DROPOUT_SEED] = s->seed,
        [IR_ATTR_ATTENTION_DROPOUT_SITE] = dropout_site(layer, SITE_ATTENTION),
        [IR_ATTR_ATTENTION_DROPOUT_HEADS] = s->num_attention_heads}; /* one rank's: passes set head_offset and cp */
    return ir_emit(b->m, b->f, IR_OP_ATTENTION_DROPOUT, args, 4, attrs, NULL, NULL);
}

/* Marks the matmul of linear output y (under its bias add, where it has one) as opening the region
 * of selective recompute's `module` (ops.def's matmul recompute=): recompute_modules recomputes it
 * and what follows it (passes/recompute.c). */
static void recompute_region(builder *b, int y, ir_recompute_module module)
{
    ir_instr *in = &b->f->instrs[b->f->vals[y].def];
    if (in->op == IR_OP_BIAS_ADD)
        in = &b->f->instrs[b->f->vals[in->args[0]].def];
    in->attr[IR_ATTR_MATMUL_RECOMPUTE] = 1 + (double)module;
}

/* x [B,T,in] projected to every head's `width` channels, [B,T,H,width]: column-parallel, no bias
 * (multi-latent attention's up projections: recompute_modules mla_up_proj recomputes them and what
 * follows them up to the attention's inputs) */
static int up_heads(builder *b, const char *prefix, int x, int64_t in, int64_t width)
{
    int64_t H = b->s->num_attention_heads;
    int y = linear_with(b, prefix, x, in, H * width, b->s->init_method_std, IR_PLACE_COLUMN, false);
    recompute_region(b, y, IR_RM_MLA_UP_PROJ);
    int64_t dims[4] = {b->rows, b->s->seq_length, H, width};
    return ir_reshape(b->m, b->f, y, 4, dims);
}

/* x [*,N] split into its first `size` channels, returned, and the rest, in *rest */
static int split_last_dim(builder *b, int x, int64_t size, int *rest)
{
    double attrs[IR_NATTRS_SPLIT_LAST_DIM] = {[IR_ATTR_SPLIT_LAST_DIM_SIZE] = (double)size};
    int r = ir_emit(b->m, b->f, IR_OP_SPLIT_LAST_DIM, &x, 1, attrs, NULL, NULL);
    *rest = r + 1;
    return r;
}

/* x [B,T,d] projected down to a latent [B,T,width] (with the rope key's channels for kv):
 * replicated, no bias (multi-latent attention's down projections) */
static int down(builder *b, const char *prefix, int x, int64_t width)
{
    const mcc_spec *s = b->s;
    return linear_with(b, prefix, x, s->hidden_size, width, s->init_method_std, IR_PLACE_REPLICATED, false);
}

/* Latent c [B,T,width] of the down projection under prefix, normalised by prefix_norm where the
 * model normalises its latents (qk_layernorm: Megatron's q_layernorm and kv_layernorm) */
static int latent_norm(builder *b, const char *prefix, int c, int64_t width)
{
    if (!b->s->qk_layernorm)
        return c;
    char name[160];
    snprintf(name, sizeof name, "%s_norm", prefix);
    return norm_of(b, name, c, width);
}

/* DeepSeek's multi-latent attention (Megatron's MLASelfAttention, HF's DeepseekV3Attention) of
 * x[B,T,d], H heads, Dn = qk_head_dim, Dr = qk_pos_emb_head_dim, Dv = v_head_dim:
 *   q: x q_down (normed) q_up, or x q -> [B,T,H,Dn+Dr] = (q_nope, q_pe), q_pe turned by rope;
 *   x kv_down -> [B,T,kv_lora_rank+Dr] = (c_kv, k_pe): k_pe [B,T,1,Dr] turned by rope, one for
 *   every head; c_kv (normed) kv_up -> [B,T,H,Dn+Dv] = (k_nope, v);
 *   attention of (q_nope q_pe) over (k_nope k_pe) and v, scale 1/sqrt(Dn+Dr) (with YaRN's rope
 *   times mscale(factor, mscale_all_dim)^2, Megatron's, applied to q): y [B,T,H,Dv], out.
 * The down projections and their norms are replicated: tensor parallelism splits the heads of
 * q_up (q) and kv_up, out is row-parallel, and the shard pass gathers a sequence-parallel x for
 * the down projections as for any linear. No biases but out's. The weights are HF's q_a_proj,
 * q_a_layernorm, q_b_proj (q_proj), kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj and o_proj row
 * for row, but that DeepSeek's interleave the rope channels' pairs (Megatron de-interleaves them):
 * rope here is rotate-half, so an import permutes those rows. */
static int mla_block(builder *b, int layer, int x)
{
    const mcc_spec *s = b->s;
    char p[128];
    int64_t Dn = s->qk_head_dim, Dr = s->qk_pos_emb_head_dim, Dv = s->v_head_dim, rank = s->kv_lora_rank;
    int q = x, q_pe, k_pe, v;
    int64_t q_in = s->hidden_size;
    if (s->q_lora_rank > 0) {
        snprintf(p, sizeof p, "layers.%d.attention.q_down", layer);
        q = latent_norm(b, p, down(b, p, x, s->q_lora_rank), s->q_lora_rank);
        q_in = s->q_lora_rank;
    }
    snprintf(p, sizeof p, "layers.%d.attention.%s", layer, s->q_lora_rank > 0 ? "q_up" : "q");
    int q_nope = split_last_dim(b, up_heads(b, p, q, q_in, Dn + Dr), Dn, &q_pe);
    snprintf(p, sizeof p, "layers.%d.attention.kv_down", layer);
    int c_kv = latent_norm(b, p, split_last_dim(b, down(b, p, x, rank + Dr), rank, &k_pe), rank);
    snprintf(p, sizeof p, "layers.%d.attention.kv_up", layer);
    int k_nope = split_last_dim(b, up_heads(b, p, c_kv, rank, Dn + Dv), Dn, &v);
    int64_t one_head[4] = {b->rows, s->seq_length, 1, Dr};
    k_pe = rope(b, ir_reshape(b->m, b->f, k_pe, 4, one_head), Dr, Dr);
    q = ir_op2(b->m, b->f, IR_OP_CONCAT_LAST_DIM, q_nope, rope(b, q_pe, Dr, Dr)); /* [B,T,H,Dn+Dr] */
    if (s->rope_type == MCC_ROPE_YARN) { /* Megatron's softmax scale mscale(f, mscale_all_dim)^2 / sqrt(Dn+Dr), on q */
        double m = ir_yarn_mscale(s->rotary_scaling_factor, s->mscale_all_dim), factor = m * m;
        if (factor != 1)
            q = ir_emit(b->m, b->f, IR_OP_SCALE, &q, 1, &factor, NULL, NULL);
    }
    int k = ir_op2(b->m, b->f, IR_OP_CONCAT_LAST_DIM, k_nope, k_pe);         /* k_pe broadcast over the heads */
    int y = attend(b, layer, q, k, v);                                       /* [B,T,H,Dv] */
    int64_t dims[3] = {b->rows, s->seq_length, s->num_attention_heads * Dv};
    y = ir_reshape(b->m, b->f, y, 3, dims);
    snprintf(p, sizeof p, "layers.%d.attention.out", layer);
    double out_std = s->init_method_std / sqrt(2.0 * s->num_layers);
    return dropout(b, linear(b, p, y, dims[2], s->hidden_size, out_std, IR_PLACE_ROW), s->hidden_dropout,
                   dropout_site(layer, SITE_ATTENTION_OUT));
}

static int attention_block(builder *b, int layer, int x)
{
    const mcc_spec *s = b->s;
    if (s->multi_latent_attention)
        return mla_block(b, layer, x);
    char p[128];
    /* Megatron scales the init of output projections by 1/sqrt(2 L). */
    double out_std = s->init_method_std / sqrt(2.0 * s->num_layers);
    snprintf(p, sizeof p, "layers.%d.attention.q", layer);
    int q = project_heads(b, p, x, s->num_attention_heads, true);
    snprintf(p, sizeof p, "layers.%d.attention.k", layer);
    int k = project_heads(b, p, x, s->num_query_groups, true);
    snprintf(p, sizeof p, "layers.%d.attention.v", layer);
    int v = project_heads(b, p, x, s->num_query_groups, false);
    int y = attend(b, layer, q, k, v); /* [B,T,H,D] */
    int64_t dims[3] = {b->rows, s->seq_length, (int64_t)s->num_attention_heads * mcc_spec_head_dim(s)};
    y = ir_reshape(b->m, b->f, y, 3, dims);
    snprintf(p, sizeof p, "layers.%d.attention.out", layer);
    return dropout(b, linear(b, p, y, dims[2], s->hidden_size, out_std, IR_PLACE_ROW), s->hidden_dropout,
                   dropout_site(layer, SITE_ATTENTION_OUT));
}

/* The MLP's activation of its up-projection h: SwiGLU's of the gate beside it (gate >= 0), else
 * squared relu (Nemotron-4's) or GELU. */
static int activation(builder *b, int h, int gate)
{
    if (gate >= 0)
        return ir_op2(b->m, b->f, IR_OP_SWIGLU, gate, h); /* silu(gate) * up, one kernel each way */
    return ir_op1(b->m, b->f, b->s->squared_relu ? IR_OP_SQUARED_RELU : IR_OP_GELU, h);
}

/* The MLP of width ffn under prefix (up, gate with swiglu, down) on x[*,d]; its up and gate open
 * `module`'s recompute region (mlp, or shared_experts: recompute_modules recomputes them and the
 * activation, keeping x). */
static int mlp(builder *b, const char *prefix, int x, int64_t ffn, ir_recompute_module module)
{
    const mcc_spec *s = b->s;
    char p[160];
    double std = s->init_method_std, out_std = std / sqrt(2.0 * s->num_layers);
    snprintf(p, sizeof p, "%s.up", prefix);
    int h = linear(b, p, x, s->hidden_size, ffn, std, IR_PLACE_COLUMN), gate = -1; /* [*,F] */
    recompute_region(b, h, module);
    if (s->activation == MCC_ACT_SWIGLU) {
        snprintf(p, sizeof p, "%s.gate", prefix);
        gate = linear(b, p, x, s->hidden_size, ffn, std, IR_PLACE_COLUMN);
        recompute_region(b, gate, module);
    }
    h = activation(b, h, gate);
    snprintf(p, sizeof p, "%s.down", prefix);
    return linear(b, p, h, ffn, s->hidden_size, out_std, IR_PLACE_ROW);
}

/* A router loss of MoE layer `layer`: coeff loss joins the objective through moe_aux_attach on x
 * (Megatron's MoEAuxLossAutoScaler), and the unscaled loss is output as @what.L, of which train_rank
 * reports the mean over the layers as Megatron's tracker does. One output a layer, not their sum: a
 * pipeline stage outputs its own layers' (no value crosses the stages for it). */
static int attach_loss(builder *b, ir_role_kind what, int layer, int x, int loss, double coeff)
{
    char name[64];
    snprintf(name, sizeof name, "%s.%d", ir_roles[what].name, layer);
    ir_output(b->m, b->f, ir_role_at(what, layer), name, loss);
    return ir_op2(b->m, b->f, IR_OP_MOE_AUX_ATTACH, x, ir_scale(b->m, b->f, loss, coeff));
}

/* This layer's EXPERT_BIAS global (ir.h), f32[2,E] zeros: the step's counts and the bias. */
static int expert_bias(builder *b, int layer)
{
    char name[128];
    snprintf(name, sizeof name, "layers.%d.mlp.router.expert_bias", layer);
    int g = ir_global_find(b->m, name);
    if (g < 0) {
        int64_t dims[2] = {2, b->s->num_experts};
        g = ir_global_add(b->m, name, ir_tensor(IR_F32, 2, dims), IR_GLOBAL_EXPERT_BIAS, IR_INIT_ZEROS, 0, false);
        b->m->globals[g].layer = layer;
    }
    return ir_global_ref(b->m, b->f, g);
}

/* The top-k choice of the N tokens of x[N,d] over the experts: the routing weights [N,k] (with the
 * aux loss attached in a training step), the expert ids [N,k] in *ids and, with a capacity factor,
 * moe_capacity's kept weights in *kept (else -1). The z loss is attached to the logits, the aux
 * loss to the weights, where Megatron's router attaches them. */
/* --moe-router-force-load-balancing: logits [N,E] replaced by standard normal values, Megatron's
 * RandomSTE (its gradient straight through to the router's): dropout's op with normal=1, drawn per
 * token of [B,T,E] as dropout draws its masks (each token's sample and place, so every layout
 * draws the same), at site ROUTER_NOISE_SITE + layer, apart from the dropout sites. */
enum { ROUTER_NOISE_SITE = 1 << 30 };
static int random_logits(builder *b, int layer, int logits)
{
    const ir_type *t = ir_vtype(b->f, logits);
    int64_t bte[3] = {b->rows, b->s->seq_length, t->dims[1]}, ne[2] = {t->dims[0], t->dims[1]};
    int args[2] = {ir_reshape(b->m, b->f, logits, 3, bte), b->first_sample};
    double attrs[IR_NATTRS_DROPOUT] = {[IR_ATTR_DROPOUT_SEED] = b->s->seed,
                                       [IR_ATTR_DROPOUT_SITE] = ROUTER_NOISE_SITE + layer,
                                       [IR_ATTR_DROPOUT_DIM] = 1, [IR_ATTR_DROPOUT_OFFSET] = 0,
                                       [IR_ATTR_DROPOUT_EXTENT] = (double)b->s->seq_length,
                                       [IR_ATTR_DROPOUT_NORMAL] = 1}; /* whole here, as dropout's */
    int noise = ir_emit(b->m, b->f, IR_OP_DROPOUT, args, 2, attrs, NULL, NULL);
    return ir_reshape(b->m, b->f, noise, 2, ne);
}

static int route(builder *b, int layer, int x, int *ids, int *kept)
{
    const mcc_spec *s = b->s;
    char name[128];
    int64_t wdims[2] = {s->num_experts, s->hidden_size};
    snprintf(name, sizeof name, "layers.%d.mlp.router.weight", layer);
    int weight = param(b, name, 2, wdims, IR_INIT_NORMAL, s->init_method_std, IR_PLACE_REPLICATED);
    if (s->moe_router_dtype == MCC_ROUTER_DTYPE_FP32) { /* Megatron's RouterGatingLinearFunction */
        x = ir_convert(b->m, b->f, x, true);
        weight = ir_convert(b->m, b->f, weight, true);
    }
    int logits = ir_matmul(b->m, b->f, x, weight, false, true); /* [N,E] */
    bool train = b->train;
    if (train && s->moe_router_force_load_balancing)
        logits = random_logits(b, layer, logits);
    if (train && s->moe_z_loss_coeff > 0)
        logits = attach_loss(b, IR_ROLE_MOE_Z_LOSS, layer, logits, ir_op1(b->m, b->f, IR_OP_MOE_Z_LOSS, logits),
                             s->moe_z_loss_coeff);
    double attrs[IR_NATTRS_MOE_ROUTE] = {[IR_ATTR_MOE_ROUTE_TOPK] = s->moe_router_topk,
                                         [IR_ATTR_MOE_ROUTE_SCORE] = s->moe_router_score_function,
                                         [IR_ATTR_MOE_ROUTE_PRE_SOFTMAX] = s->moe_router_pre_softmax,
                                         [IR_ATTR_MOE_ROUTE_SCALING] = s->moe_router_topk_scaling_factor,
                                         [IR_ATTR_MOE_ROUTE_GROUPS] = s->moe_router_num_groups,
                                         [IR_ATTR_MOE_ROUTE_GROUP_TOPK] = s->moe_router_group_topk};
    int route_args[2] = {logits, -1};
    if (s->moe_router_enable_expert_bias) /* Megatron's router.expert_bias: for choosing only */
        route_args[1] = expert_bias(b, layer);
    int w = ir_emit(b->m, b->f, IR_OP_MOE_ROUTE, route_args, route_args[1] >= 0 ? 2 : 1, attrs, NULL, NULL);
    *ids = w + 1;
    *kept = -1;
    if (s->moe_expert_capacity_factor > 0) { /* Megatron's get_capacity, over this micro-batch's N k pairs */
        int64_t N = ir_vtype(b->f, logits)->dims[0];
        double drop[IR_NATTRS_MOE_CAPACITY] = {
            [IR_ATTR_MOE_CAPACITY_CAPACITY] = ceil((double)N * s->moe_router_topk / s->num_experts *
                                                   s->moe_expert_capacity_factor),
            [IR_ATTR_MOE_CAPACITY_POLICY] = s->moe_token_drop_policy == MCC_MOE_DROP_POSITION,
            [IR_ATTR_MOE_CAPACITY_CP] = 0, [IR_ATTR_MOE_CAPACITY_SEQ] = 0}; /* cp, seq: the shard rule's over cp */
        int args[3] = {w, w, *ids};
        w = *kept = ir_emit(b->m, b->f, IR_OP_MOE_CAPACITY, args, 3, drop, NULL, NULL);
        if (train) { /* the weights, 0 where dropped: train_rank's dropped fraction */
            snprintf(name, sizeof name, "moe_kept_weights.%d", layer);
            ir_output(b->m, b->f, ir_role_at(IR_ROLE_MOE_KEPT_WEIGHTS, layer), name, w);
        }
    }
    if (train && s->moe_router_enable_expert_bias) { /* the step's tokens per expert, those kept at capacity */
        int count[3] = {route_args[1], *ids, w};
        ir_emit(b->m, b->f, IR_OP_MOE_BIAS_COUNT, count, s->moe_expert_capacity_factor > 0 ? 3 : 2, NULL, NULL, NULL);
    }
    bool seq_aux = s->moe_router_load_balancing_type == MCC_MOE_SEQ_AUX_LOSS;
    if (train && (s->moe_router_load_balancing_type == MCC_MOE_AUX_LOSS || seq_aux) && s->moe_aux_loss_coeff > 0) {
        int args[2] = {logits, *ids};
        double aux_attrs[IR_NATTRS_MOE_AUX_LOSS] = {[IR_ATTR_MOE_AUX_LOSS_TOPK] = attrs[IR_ATTR_MOE_ROUTE_TOPK],
                                                    [IR_ATTR_MOE_AUX_LOSS_SCORE] = attrs[IR_ATTR_MOE_ROUTE_SCORE],
                                                    [IR_ATTR_MOE_AUX_LOSS_SEQ] = seq_aux ? s->seq_length : 0};
        int aux = ir_emit(b->m, b->f, IR_OP_MOE_AUX_LOSS, args, 2, aux_attrs, NULL, NULL);
        w = attach_loss(b, IR_ROLE_MOE_AUX_LOSS, layer, w, aux, s->moe_aux_loss_coeff);
    }
    return w;
}

/* One expert MLP matrix, all experts' stacked: [E, out, in], each a torch.nn.Linear's weight. */
static int expert_matmul(builder *b, const char *prefix, int x, int counts, int64_t in, int64_t out, double std,
                         ir_placement place)
{
    char name[160];
    int64_t dims[3] = {b->s->num_experts, out, in};
    snprintf(name, sizeof name, "%s.weight", prefix);
    double tb = 1;
    int args[3] = {x, param(b, name, 3, dims, IR_INIT_NORMAL, std, place), counts};
    return ir_emit(b->m, b->f, IR_OP_MOE_GROUPED_MATMUL, args, 3, &tb, NULL, NULL);
}

/* Megatron's MoE layer, dropless, on one rank: the router's top-k choice per token, the N k
 * (token, slot) pairs sorted by expert (perm, counts), the tokens permuted into that order, each
 * expert's MLP as one grouped GEMM over its rows, and the combine weighted by the routing
 * weights; plus the shared expert on every token. Every buffer is static (N k rows); each
 * expert's share is data (counts). Expert parallelism would put its all-to-all between the
 * permute and the grouped GEMMs, and back before the combine. */
static int moe(builder *b, int layer, int x)
{
    const mcc_spec *s = b->s;
    char p[128];
    int64_t N = b->rows * s->seq_length, d = s->hidden_size, F = s->moe_ffn_hidden_size;
    int64_t flat[2] = {N, d}, bt[3] = {b->rows, s->seq_length, d};
    double std = s->init_method_std, out_std = std / sqrt(2.0 * s->num_layers), experts = s->num_experts;
    x = ir_reshape(b->m, b->f, x, 2, flat); /* [N,d] */
    int ids, kept, w = route(b, layer, x, &ids, &kept);
    int sort_args[2] = {ids, kept}; /* the dropped pairs neither counted nor computed */
    int perm = ir_emit(b->m, b->f, IR_OP_MOE_SORT, sort_args, kept >= 0 ? 2 : 1, &experts, NULL, NULL), counts = perm + 1;
    if (b->train) { /* the tokens per expert, for train_rank's load imbalance */
        snprintf(p, sizeof p, "moe_tokens_per_expert.%d", layer);
        ir_output(b->m, b->f, ir_role_at(IR_ROLE_MOE_TOKENS_PER_EXPERT, layer), p, counts);
    }
    int args[3] = {x, perm};
    int xp = ir_emit(b->m, b->f, IR_OP_MOE_PERMUTE, args, 2, NULL, NULL, NULL); /* [N k, d] */
    snprintf(p, sizeof p, "layers.%d.mlp.experts.up", layer);
    int h = expert_matmul(b, p, xp, counts, d, F, std, IR_PLACE_COLUMN), gate = -1; /* [N k, F] */
    if (s->activation == MCC_ACT_SWIGLU) {
        snprintf(p, sizeof p, "layers.%d.mlp.experts.gate", layer);
        gate = expert_matmul(b, p, xp, counts, d, F, std, IR_PLACE_COLUMN);
    }
    h = activation(b, h, gate);
    snprintf(p, sizeof p, "layers.%d.mlp.experts.down", layer);
    int combine[3] = {expert_matmul(b, p, h, counts, F, d, out_std, IR_PLACE_ROW), perm, w};
    int y = ir_emit(b->m, b->f, IR_OP_MOE_UNPERMUTE, combine, 3, NULL, NULL, NULL); /* [N,d] */
    if (s->moe_shared_expert_intermediate_size > 0) {
        snprintf(p, sizeof p, "layers.%d.mlp.shared_expert", layer);
        y = ir_op2(b->m, b->f, IR_OP_ADD, y, mlp(b, p, x, s->moe_shared_expert_intermediate_size, IR_RM_SHARED_EXPERTS));
    }
    return ir_reshape(b->m, b->f, y, 3, bt);
}

static int mlp_block(builder *b, int layer, int x)
{
    char p[128];
    snprintf(p, sizeof p, "layers.%d.mlp", layer);
    int y = mcc_spec_moe_layer(b->s, layer) ? moe(b, layer, x) : mlp(b, p, x, b->s->ffn_hidden_size, IR_RM_MLP);
    return dropout(b, y, b->s->hidden_dropout, dropout_site(layer, SITE_MLP_OUT));
}

/* The embedding of tokens [B,T] -> [B,T,d], its dropout at `site`. */
static int embed(builder *b, int tokens, int site)
{
    const mcc_spec *s = b->s;
    int64_t wdims[2] = {s->padded_vocab_size, s->hidden_size}; /* padded rows: dummy tokens */
    int table = param(b, "embedding.word", 2, wdims, IR_INIT_NORMAL, s->init_method_std, IR_PLACE_VOCAB);
    int x = ir_op2(b->m, b->f, IR_OP_EMBEDDING, table, tokens); /* [B,T,d] */
    if (s->position_embedding_type == MCC_POS_LEARNED) {
        int64_t pdims[2] = {s->max_position_embeddings, s->hidden_size};
        int pos = param(b, "embedding.position", 2, pdims, IR_INIT_NORMAL, s->init_method_std, IR_PLACE_REPLICATED);
        x = ir_op2(b->m, b->f, IR_OP_POS_ADD, x, pos);
    }
    return dropout(b, x, s->hidden_dropout, site); /* Megatron's embedding dropout */
}

static int logits_of(builder *b, int x)
{
    const mcc_spec *s = b->s;
    int w;
    if (s->untie_embeddings_and_output_weights) {
        int64_t dims[2] = {s->padded_vocab_size, s->hidden_size};
        w = param(b, "output.weight", 2, dims, IR_INIT_NORMAL, s->init_method_std, IR_PLACE_VOCAB);
    } else {
        w = ir_global_ref(b->m, b->f, ir_global_find(b->m, "embedding.word")); /* the tied input embedding */
    }
    return ir_matmul(b->m, b->f, x, w, false, true); /* [B,T,V] */
}

/* Writes moe_layer_freq as the spec reads it back: every N-th layer ("2"), or a list ("[0,1,1]"). */
static void layer_freq_text(const mcc_layer_pattern *p, char *buf, size_t len)
{
    if (p->n == 0) {
        snprintf(buf, len, "%d", p->every);
        return;
    }
    size_t used = 0;
    for (int l = 0; l < p->n && used < len; l++)
        used += (size_t)snprintf(buf + used, len - used, "%s%d", l ? "," : "[", p->moe[l]);
    if (used < len)
        snprintf(buf + used, len - used, "]");
}

/* Config keys keys[0..n) from the spec fields of their names (config.def names a key as its spec
 * field), each written as its type spells it: the plan's order is the keys' order. */
static void set_from_spec(ir_module *m, const mcc_spec *s, const ir_cfg *keys, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        ir_cfg k = keys[i];
        double v = mcc_spec_field(s, ir_cfgs[k].key);
        if (ir_cfgs[k].type == IR_CFGT_NUM)
            ir_cfg_set_num(m, k, v);
        else if (ir_cfgs[k].type == IR_CFGT_CHOICE)
            ir_cfg_set_choice(m, k, (int)v);
        else /* INT, BOOL */
            ir_cfg_set_int(m, k, (long long)v);
    }
}
#define SET_FROM_SPEC(m, s, ...) \
    set_from_spec(m, s, (const ir_cfg[]){__VA_ARGS__}, sizeof((const ir_cfg[]){__VA_ARGS__}) / sizeof(ir_cfg))

/* The keys of the model's function (config.def's IR_CFG_MODEL rows, beside num_layers,
 * hidden_size and vocab_size), which a checkpoint records and a load compares. */
static void set_model_config(ir_module *m, const mcc_spec *s)
{
    SET_FROM_SPEC(m, s, IR_CFG_NUM_ATTENTION_HEADS, IR_CFG_NUM_QUERY_GROUPS, IR_CFG_KV_CHANNELS,
                  IR_CFG_FFN_HIDDEN_SIZE, IR_CFG_MAX_POSITION_EMBEDDINGS);
    ir_cfg_set_int(m, IR_CFG_ORIG_VOCAB_SIZE, s->vocab_size);
    SET_FROM_SPEC(m, s, IR_CFG_NORMALIZATION, IR_CFG_NORM_EPSILON, IR_CFG_POSITION_EMBEDDING_TYPE);
    if (s->position_embedding_type == MCC_POS_ROPE)
        SET_FROM_SPEC(m, s, IR_CFG_ROTARY_BASE, IR_CFG_USE_ROPE_SCALING);
    if (s->position_embedding_type == MCC_POS_ROPE && s->use_rope_scaling)
        SET_FROM_SPEC(m, s, IR_CFG_ROPE_SCALING_FACTOR);
    if (s->position_embedding_type == MCC_POS_ROPE && s->rope_type == MCC_ROPE_YARN) /* absent: plain rope */
        SET_FROM_SPEC(m, s, IR_CFG_ROPE_TYPE, IR_CFG_ROTARY_SCALING_FACTOR, IR_CFG_YARN_ORIGINAL_MAX_POSITION_EMBEDDINGS,
                      IR_CFG_YARN_BETA_FAST, IR_CFG_YARN_BETA_SLOW, IR_CFG_MSCALE, IR_CFG_MSCALE_ALL_DIM);
    SET_FROM_SPEC(m, s, IR_CFG_SWIGLU, IR_CFG_ADD_BIAS_LINEAR, IR_CFG_ADD_QKV_BIAS, IR_CFG_QK_LAYERNORM,
                  IR_CFG_UNTIE_EMBEDDINGS_AND_OUTPUT_WEIGHTS, IR_CFG_NUM_EXPERTS);
    if (s->squared_relu) /* Nemotron-4's (absent: off, so other plans read as before) */
        SET_FROM_SPEC(m, s, IR_CFG_SQUARED_RELU);
    if (s->apply_layernorm_1p)
        SET_FROM_SPEC(m, s, IR_CFG_APPLY_LAYERNORM_1P);
    if (s->position_embedding_type == MCC_POS_ROPE && s->rotary_percent != 1)
        SET_FROM_SPEC(m, s, IR_CFG_ROTARY_PERCENT);
    if (s->multi_latent_attention) /* DeepSeek's (absent: standard attention, so other plans read as before) */
        SET_FROM_SPEC(m, s, IR_CFG_MULTI_LATENT_ATTENTION, IR_CFG_Q_LORA_RANK, IR_CFG_KV_LORA_RANK, IR_CFG_QK_HEAD_DIM,
                      IR_CFG_QK_POS_EMB_HEAD_DIM, IR_CFG_V_HEAD_DIM);
    if (s->num_experts == 0)
        return;
    SET_FROM_SPEC(m, s, IR_CFG_MOE_FFN_HIDDEN_SIZE, IR_CFG_MOE_ROUTER_TOPK, IR_CFG_MOE_ROUTER_SCORE_FUNCTION,
                  IR_CFG_MOE_ROUTER_PRE_SOFTMAX, IR_CFG_MOE_ROUTER_TOPK_SCALING_FACTOR,
                  IR_CFG_MOE_ROUTER_ENABLE_EXPERT_BIAS, IR_CFG_MOE_SHARED_EXPERT_INTERMEDIATE_SIZE);
    if (s->moe_router_num_groups) /* absent: plain top k, so other plans read as before */
        SET_FROM_SPEC(m, s, IR_CFG_MOE_ROUTER_NUM_GROUPS, IR_CFG_MOE_ROUTER_GROUP_TOPK);
    char freq[4 * MCC_MAX_LAYER_PATTERN];
    layer_freq_text(&s->moe_layer_freq, freq, sizeof freq);
    ir_cfg_set(m, IR_CFG_MOE_LAYER_FREQ, freq);
}

static void set_config(ir_module *m, const mcc_spec *s)
{
    set_model_config(m, s);
    SET_FROM_SPEC(m, s, IR_CFG_MICRO_BATCH_SIZE, IR_CFG_SEQ_LENGTH);
    ir_cfg_set_int(m, IR_CFG_VOCAB_SIZE, s->padded_vocab_size); /* what the plan has: the logits are this wide */
    SET_FROM_SPEC(m, s, IR_CFG_GLOBAL_BATCH_SIZE);
    ir_cfg_set_int(m, IR_CFG_ACCUM_STEPS, mcc_spec_accum_steps(s));
    SET_FROM_SPEC(m, s, IR_CFG_DATA_PARALLEL_SIZE, IR_CFG_TENSOR_MODEL_PARALLEL_SIZE,
                  IR_CFG_PIPELINE_MODEL_PARALLEL_SIZE);
    if (s->expert_model_parallel_size > 1) /* absent means 1: the plans of other layouts read as before */
        SET_FROM_SPEC(m, s, IR_CFG_EXPERT_MODEL_PARALLEL_SIZE);
    if (s->context_parallel_size > 1)
        SET_FROM_SPEC(m, s, IR_CFG_CONTEXT_PARALLEL_SIZE, IR_CFG_CP_COMM_TYPE);
    /* the pipeline's split and schedule, which passes/pipeline.c and schedule.c build */
    SET_FROM_SPEC(m, s, IR_CFG_DECODER_FIRST_PIPELINE_NUM_LAYERS, IR_CFG_DECODER_LAST_PIPELINE_NUM_LAYERS,
                  IR_CFG_ACCOUNT_FOR_EMBEDDING_IN_PIPELINE_SPLIT, IR_CFG_ACCOUNT_FOR_LOSS_IN_PIPELINE_SPLIT);
    if (*s->pipeline_model_parallel_layout) /* absent means none: other plans read as before */
        ir_cfg_set(m, IR_CFG_PIPELINE_MODEL_PARALLEL_LAYOUT, s->pipeline_model_parallel_layout);
    ir_cfg_set_int(m, IR_CFG_NUM_VIRTUAL_STAGES_PER_PIPELINE_RANK, s->virtual_pipeline_model_parallel_size);
    SET_FROM_SPEC(m, s, IR_CFG_PIPELINE_SCHEDULE);
    if (s->recompute_granularity != MCC_RECOMPUTE_NONE) /* absent means none: older plans read the same */
        SET_FROM_SPEC(m, s, IR_CFG_RECOMPUTE_GRANULARITY);
    if (s->recompute_granularity == MCC_RECOMPUTE_FULL)
        SET_FROM_SPEC(m, s, IR_CFG_RECOMPUTE_METHOD);
    if (s->recompute_granularity == MCC_RECOMPUTE_SELECTIVE) {
        char modules[256];
        mcc_recompute_modules_text(s->recompute_modules, modules, sizeof modules);
        ir_cfg_set(m, IR_CFG_RECOMPUTE_MODULES, modules);
    }
    if (s->recompute_granularity != MCC_RECOMPUTE_NONE && s->recompute_num_layers > 0)
        SET_FROM_SPEC(m, s, IR_CFG_RECOMPUTE_NUM_LAYERS);
    if (s->cross_entropy_chunks > 1) /* absent means 1: whole */
        SET_FROM_SPEC(m, s, IR_CFG_CROSS_ENTROPY_CHUNKS);
    if (s->fp8_format != MCC_FP8_NONE) /* absent means none */
        SET_FROM_SPEC(m, s, IR_CFG_FP8_FORMAT, IR_CFG_FP8_RECIPE, IR_CFG_FP8_AMAX_HISTORY_LEN,
                      IR_CFG_FP8_AMAX_COMPUTE_ALGO, IR_CFG_FP8_MARGIN, IR_CFG_FP8_WGRAD, IR_CFG_FIRST_LAST_LAYERS_BF16,
                      IR_CFG_NUM_LAYERS_AT_START_IN_BF16, IR_CFG_NUM_LAYERS_AT_END_IN_BF16);
    if (s->moe_router_enable_expert_bias)
        SET_FROM_SPEC(m, s, IR_CFG_MOE_ROUTER_BIAS_UPDATE_RATE);
    if (s->moe_shared_expert_overlap) /* absent means off */
        ir_cfg_set(m, IR_CFG_MOE_SHARED_EXPERT_OVERLAP, "1");
    if (s->sequence_parallel && s->tensor_model_parallel_size > 1) {
        SET_FROM_SPEC(m, s, IR_CFG_SEQUENCE_PARALLEL);
        if (s->sequence_parallel_split == MCC_SP_SPLIT_BATCH)
            ir_cfg_set(m, IR_CFG_SEQUENCE_PARALLEL_DIM, "0"); /* default 1: the sequence of [B,T,...] */
        if (s->tp_comm_overlap)
            SET_FROM_SPEC(m, s, IR_CFG_TP_COMM_OVERLAP);
        if (s->tp_comm_interleave)
            ir_cfg_set(m, IR_CFG_TP_COMM_INTERLEAVE, "2");
    }
    if (s->use_distributed_optimizer) /* absent means off: plans without it read as before */
        SET_FROM_SPEC(m, s, IR_CFG_USE_DISTRIBUTED_OPTIMIZER);
    if (s->optimizer_cpu_offload) /* absent means off */
        SET_FROM_SPEC(m, s, IR_CFG_OPTIMIZER_CPU_OFFLOAD, IR_CFG_OPTIMIZER_OFFLOAD_FRACTION);
    if (s->optimizer_cpu_offload && s->overlap_cpu_optimizer_d2h_h2d)
        SET_FROM_SPEC(m, s, IR_CFG_OVERLAP_CPU_OPTIMIZER_D2H_H2D);
    if (s->use_precision_aware_optimizer) /* absent: f32 moments */
        SET_FROM_SPEC(m, s, IR_CFG_EXP_AVG_DTYPE, IR_CFG_EXP_AVG_SQ_DTYPE);
    if (s->use_precision_aware_optimizer && s->store_param_remainders) /* precision.c: where parameters are bf16 */
        SET_FROM_SPEC(m, s, IR_CFG_STORE_PARAM_REMAINDERS);
    int replicas = s->data_parallel_size * s->context_parallel_size; /* a dense parameter's: dp x cp */
    if (replicas > 1) /* only plans with replicas bucket their gradients */
        SET_FROM_SPEC(m, s, IR_CFG_DDP_BUCKET_SIZE);
    if (replicas > 1 && s->overlap_grad_reduce)
        SET_FROM_SPEC(m, s, IR_CFG_OVERLAP_GRAD_REDUCE);
    if (s->grad_reduce_in_bf16) /* absent means f32 gradients */
        SET_FROM_SPEC(m, s, IR_CFG_GRAD_REDUCE_IN_BF16);
    SET_FROM_SPEC(m, s, IR_CFG_TRAIN_ITERS, IR_CFG_LR_WARMUP_ITERS, IR_CFG_SEED);
    ir_cfg_set_int(m, IR_CFG_NUM_PARAMS, mcc_spec_num_params(s));
    if (s->num_experts > 0) /* absent: num_params, a dense model's */
        ir_cfg_set_int(m, IR_CFG_NUM_ACTIVE_PARAMS, mcc_spec_num_active_params(s));
    SET_FROM_SPEC(m, s, IR_CFG_NUM_LAYERS, IR_CFG_HIDDEN_SIZE, IR_CFG_LR, IR_CFG_MIN_LR, IR_CFG_WEIGHT_DECAY,
                  IR_CFG_CLIP_GRAD, IR_CFG_ADAM_BETA1, IR_CFG_ADAM_BETA2, IR_CFG_ADAM_EPS, IR_CFG_LR_DECAY_STYLE,
                  IR_CFG_LR_WARMUP_FRACTION, IR_CFG_LR_DECAY_ITERS, IR_CFG_LR_WSD_DECAY_STYLE,
                  IR_CFG_LR_WSD_DECAY_ITERS);
    if (s->train_samples) /* sample-based: the schedule counts samples (absent: iterations) */
        SET_FROM_SPEC(m, s, IR_CFG_TRAIN_SAMPLES, IR_CFG_LR_WARMUP_SAMPLES, IR_CFG_LR_DECAY_SAMPLES,
                      IR_CFG_LR_WSD_DECAY_SAMPLES);
    if (s->lr_warmup_init) /* absent: warmup from 0 */
        SET_FROM_SPEC(m, s, IR_CFG_LR_WARMUP_INIT);
    if (s->decoupled_lr != s->lr || s->decoupled_min_lr != s->min_lr) /* absent: one schedule for all */
        SET_FROM_SPEC(m, s, IR_CFG_DECOUPLED_LR, IR_CFG_DECOUPLED_MIN_LR);
    SET_FROM_SPEC(m, s, IR_CFG_EVAL_INTERVAL, IR_CFG_EVAL_ITERS, IR_CFG_LOG_INTERVAL);
    /* For MFU: learned position embeddings are a lookup, not matmul work. */
    ir_cfg_set_int(m, IR_CFG_NUM_POSITION_PARAMS, s->position_embedding_type == MCC_POS_LEARNED
                                                      ? (int64_t)s->max_position_embeddings * s->hidden_size
                                                      : 0);
}

/* Transformer layer l on the residual stream x [b,T,d]. */
static int layer(builder *b, int l, int x)
{
    char p[64];
    b->layer = l;
    snprintf(p, sizeof p, "layers.%d.input_norm", l);
    x = ir_op2(b->m, b->f, IR_OP_ADD, x, attention_block(b, l, norm(b, p, x)));
    snprintf(p, sizeof p, "layers.%d.post_attention_norm", l);
    x = ir_op2(b->m, b->f, IR_OP_ADD, x, mlp_block(b, l, norm(b, p, x)));
    b->layer = -1;
    return x;
}

/* The layers over tokens [b,T] -> the hidden states [b,T,d] before the final norm. */
static int decoder(builder *b, int tokens)
{
    int x = embed(b, tokens, 0);
    for (int l = 0; l < b->s->num_layers; l++)
        x = layer(b, l, x);
    return x;
}

/* The model over tokens [b,T] -> logits [b,T,V]. */
static int logits_for(builder *b, int tokens) { return logits_of(b, norm(b, "final_norm", decoder(b, tokens))); }

/* x [B,T,...] -> [B,count,...]: x[:, t + by] at t, 0 past the sequence (ops.def's shift_seq). */
static int shift_seq(builder *b, int x, int64_t by, int64_t count)
{
    double attrs[IR_NATTRS_SHIFT_SEQ] = {[IR_ATTR_SHIFT_SEQ_BY] = (double)by, [IR_ATTR_SHIFT_SEQ_COUNT] = (double)count};
    return ir_emit(b->m, b->f, IR_OP_SHIFT_SEQ, &x, 1, attrs, NULL, NULL);
}

/* Under cp: the tokens rolled k left embedded (embed's lookup and dropout, rope positions), as
 * embed(shift_seq(tokens, k, T)) but the float rows rolled, as cp's shift_seq lowering adds its
 * windows: the lookup rolled k left, and the rows rolled in the embedding of token 0 (the lookup of
 * zeros, less itself rolled right and back: 0 but at the last k positions). */
static int embed_rolled(builder *b, int tokens, int64_t k, int site)
{
    const mcc_spec *s = b->s;
    int64_t T = s->seq_length, wdims[2] = {s->padded_vocab_size, s->hidden_size};
    int table = param(b, "embedding.word", 2, wdims, IR_INIT_NORMAL, s->init_method_std, IR_PLACE_VOCAB);
    int x = ir_op2(b->m, b->f, IR_OP_EMBEDDING, table, tokens);
    int z = ir_op2(b->m, b->f, IR_OP_EMBEDDING, table, shift_seq(b, tokens, T, T)); /* token 0 everywhere */
    int z_end = ir_op2(b->m, b->f, IR_OP_ADD, z, ir_scale(b->m, b->f, shift_seq(b, shift_seq(b, z, -k, T), k, T), -1));
    return dropout(b, ir_op2(b->m, b->f, IR_OP_ADD, shift_seq(b, x, k, T), z_end), s->hidden_dropout, site);
}

/* Multi-token prediction (Megatron's MultiTokenPredictionBlock, DeepSeek-V3's MTP modules) on h, the
 * model's hidden states [B,T,d] before its final norm. Depth k = 1..N, layer l = num_layers + k - 1
 * (its parameters layers.l.*, as DeepSeek-V3's checkpoints number them): the tokens rolled k left
 * (token t + k at t, 0 rolled in, as Megatron's roll_tensor) embedded by the shared table,
 * h_k = layer l(eh_proj [enorm(embedding) ; hnorm(h_k-1)]), a layer of the last layer's kind;
 * then its own final norm and the shared head over the T - k positions that have a target, cross
 * entropy against the targets rolled alike (the mean over them: Megatron's rolled loss mask). Each
 * depth's loss is output as @mtp_loss.k-1 (train_rank's log) and joins the objective scaled by
 * mtp_loss_scaling_factor / N, attached to the next token's loss (a complete scalar under every
 * split, where Megatron's MTPLossAutoScaler attaches it to the hidden states), which is returned
 * with them. */
static int mtp_block(builder *b, int h, int tokens, int targets, int loss_main)
{
    const mcc_spec *s = b->s;
    int64_t T = s->seq_length, d = s->hidden_size, N = s->mtp_num_layers;
    for (int k = 1; k <= N; k++) {
        int l = s->num_layers + (k - 1);
        char p[64], q[64];
        b->layer = l;
        snprintf(p, sizeof p, "layers.%d.enorm", l);
        int e = norm(b, p, s->context_parallel_size > 1 ? embed_rolled(b, tokens, k, mtp_embedding_site(s, k))
                                                        : embed(b, shift_seq(b, tokens, k, T), mtp_embedding_site(s, k)));
        snprintf(p, sizeof p, "layers.%d.hnorm", l);
        snprintf(q, sizeof q, "layers.%d.eh_proj", l);
        int x = ir_op2(b->m, b->f, IR_OP_CONCAT_LAST_DIM, e, norm(b, p, h)); /* [B,T,2d] */
        h = layer(b, l, linear_with(b, q, x, 2 * d, d, s->init_method_std, IR_PLACE_REPLICATED, false));
        b->layer = l;
        snprintf(p, sizeof p, "layers.%d.final_norm", l);
        int loss;
        if (s->context_parallel_size > 1) {
            /* Over cp's chunks every position stays (a shift keeps the sequence whole): the hidden
             * states rolled k right meet the targets as they are, and the first k positions' logits
             * are 0, each a constant log V of the mean over the T positions, taken out again. */
            int logits = logits_of(b, shift_seq(b, norm(b, p, h), -k, T)); /* [B,T,V] */
            b->layer = -1;
            int all = ir_op2(b->m, b->f, IR_OP_CROSS_ENTROPY, logits, targets);
            double lost = (double)k * log((double)s->padded_vocab_size) / (double)(T - k);
            loss = ir_op2(b->m, b->f, IR_OP_ADD, ir_scale(b->m, b->f, all, (double)T / (double)(T - k)),
                          ir_fill(b->m, b->f, -lost, ir_scalar(IR_F32)));
        } else {
            int logits = logits_of(b, shift_seq(b, norm(b, p, h), 0, T - k)); /* [B,T-k,V] */
            b->layer = -1;
            loss = ir_op2(b->m, b->f, IR_OP_CROSS_ENTROPY, logits, shift_seq(b, targets, k, T - k));
        }
        snprintf(p, sizeof p, "%s.%d", ir_roles[IR_ROLE_MTP_LOSS].name, k - 1);
        ir_output(b->m, b->f, ir_role_at(IR_ROLE_MTP_LOSS, k - 1), p, loss);
        loss_main = ir_op2(b->m, b->f, IR_OP_MOE_AUX_ATTACH, loss_main,
                           ir_scale(b->m, b->f, loss, s->mtp_loss_scaling_factor / N));
    }
    return loss_main;
}

/* The mean loss over rows [first, first + count) of the micro-batch: a chain of its own; its
 * logits in *logits. Its dropout masks are drawn from its own first sample: the second half's
 * is @first_sample.half1, which train_rank sets to first_sample + count. */
static int half_loss(builder *b, int tokens, int targets, int64_t first, int64_t count, int *logits)
{
    if (b->first_sample >= 0 && first > 0)
        b->first_sample =
            ir_input(b->m, b->f, ir_role_at(IR_ROLE_FIRST_SAMPLE, 1), "first_sample.half1", ir_scalar(IR_I64));
    double rows[IR_NATTRS_ROWS] = {[IR_ATTR_ROWS_FIRST] = (double)first, [IR_ATTR_ROWS_COUNT] = (double)count};
    int t = ir_emit(b->m, b->f, IR_OP_ROWS, &tokens, 1, rows, NULL, NULL);
    int y = ir_emit(b->m, b->f, IR_OP_ROWS, &targets, 1, rows, NULL, NULL);
    b->rows = count;
    *logits = logits_for(b, t);
    b->rows = b->s->micro_batch_size;
    return ir_op2(b->m, b->f, IR_OP_CROSS_ENTROPY, *logits, y);
}

/* One step function over a micro-batch: inputs @tokens, @targets [B,T] -> output @loss (and
 * @logits when keep_logits). A training step with dropout also takes @first_sample, the global
 * index of the micro-batch's first sample (train_rank sets it), which its masks are drawn from.
 * `halves` (tp_comm_interleave): the model runs over the micro-batch's two halves as two
 * independent chains, the loss their mean, so that comm_overlap can run each chain's collectives
 * beside the other's work. */
static void build_step(ir_module *m, const mcc_spec *s, const char *name, bool keep_logits, bool train, bool halves)
{
    builder b = {m, ir_func_new(m, name, train ? IR_FUNC_STEP : IR_FUNC_EVAL), s, -1, s->micro_batch_size, -1, train};
    int64_t bt[2] = {s->micro_batch_size, s->seq_length};
    int tokens = ir_input(m, b.f, ir_role_of(IR_ROLE_TOKENS), "tokens", ir_tensor(IR_I32, 2, bt));
    int targets = ir_input(m, b.f, ir_role_of(IR_ROLE_TARGETS), "targets", ir_tensor(IR_I32, 2, bt));
    if (train && (s->attention_dropout > 0 || s->hidden_dropout > 0 || s->moe_router_force_load_balancing))
        b.first_sample = ir_input(m, b.f, ir_role_of(IR_ROLE_FIRST_SAMPLE), "first_sample", ir_scalar(IR_I64));
    if (halves) {
        int64_t half = s->micro_batch_size / 2;
        int la, lb, first = half_loss(&b, tokens, targets, 0, half, &la);
        int second = half_loss(&b, tokens, targets, half, half, &lb);
        int sum = ir_op2(m, b.f, IR_OP_ADD, first, second);
        double mean = 0.5;
        ir_output(m, b.f, ir_role_of(IR_ROLE_LOSS), "loss", ir_emit(m, b.f, IR_OP_SCALE, &sum, 1, &mean, NULL, NULL));
        if (keep_logits)
            ir_output(m, b.f, ir_role_of(IR_ROLE_LOGITS), "logits", ir_op2(m, b.f, IR_OP_CONCAT_ROWS, la, lb));
        return;
    }
    int h = decoder(&b, tokens);
    int logits = logits_of(&b, norm(&b, "final_norm", h));
    int loss = ir_op2(m, b.f, IR_OP_CROSS_ENTROPY, logits, targets);
    if (train && s->mtp_num_layers > 0) /* eval_step reports the next token's loss alone */
        loss = mtp_block(&b, h, tokens, targets, loss);
    ir_output(m, b.f, ir_role_of(IR_ROLE_LOSS), "loss", loss);
    if (keep_logits)
        ir_output(m, b.f, ir_role_of(IR_ROLE_LOGITS), "logits", logits);
}

ir_module *mcc_build_model(const mcc_spec *s, bool keep_logits)
{
    ir_module *m = ir_module_new();
    set_config(m, s);
    bool halves = s->tp_comm_interleave && s->sequence_parallel && s->tensor_model_parallel_size > 1;
    build_step(m, s, "micro_step", keep_logits, true, halves);
    build_step(m, s, "eval_step", false, false, false);
    return m;
}
