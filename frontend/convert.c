/* convert.c — `mcc convert`: an mcc checkpoint to a Hugging Face model directory (config.json and
 * model.safetensors, sharded with model.safetensors.index.json above --max-shard-size) and back,
 * for GPT2LMHeadModel and LLaMA's family: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM
 * (q, k, v biases: add_qkv_bias), Qwen3ForCausalLM (each head's q and k normalised: qk_layernorm;
 * its own head_dim: kv_channels), and the MoE ones MixtralForCausalLM and Qwen3MoeForCausalLM.
 *
 * One table per architecture maps mcc's parameter names (frontend/model.c) to transformers'. A
 * rule's HF tensor is its mcc tensors' rows stacked in order (GPT-2's c_attn: q, k, v), cut to the
 * tokenizer's vocabulary where mcc pads it (embedding, output layer), and transposed where GPT-2's
 * Conv1D keeps weights [in, out] against mcc's [out, in]. One copy routine walks that map in both
 * directions, so export and import cannot disagree. mcc's rope is rotate-half (runtime/cpu_kernels.c:
 * dimension i turns with i + D/2), as transformers' LLaMA, so q and k need no permutation.
 * The LLaMA family shares one layer table (a row whose mcc tensor the model has not, a bias or a
 * q/k norm, is no tensor of the export); each architecture says which of mcc's models it computes
 * (cv_archs[].why_not), so a model is exported only as one that computes its function.
 * Mixtral is LLaMA's attention with an MoE layer in every layer: its router (block_sparse_moe.gate)
 * is mcc's, and each expert's w1 / w3 / w2 ([out, in], torch.nn.Linear's) is one slice of mcc's
 * experts.gate / up / down [E, out, in] (the silu one is w1, as the dense MLP's gate_proj).
 * Qwen3-MoE names them mlp.gate (the router) and mlp.experts.N.gate_proj / up_proj / down_proj, and
 * its dense layers (mlp_only_layers) are LLaMA's MLP.
 *
 * The checkpoint's manifest records the model's function (ir/config.def's IR_CFG_MODEL keys: norm
 * epsilon, rope base and scaling, heads, the tokenizer's vocabulary before padding, ...): --to hf
 * rebuilds the spec from it, or takes --spec and refuses one that differs, by field (an earlier
 * mcc's manifest records shapes alone: --spec then). --from hf writes that spec (the form of the files in models/) and a checkpoint of iteration 0
 * with the weights only, on one rank, which train_rank --load DIR --finetune starts from under any
 * layout. */
#include "frontend/convert.h"

#include "checkpoint/checkpoint.h"
#include "common/cli.h"
#include "common/os.h"
#include "frontend/model.h"
#include "frontend/spec.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef enum { CV_GPT2, CV_LLAMA, CV_MISTRAL, CV_QWEN2, CV_QWEN3, CV_MIXTRAL, CV_QWEN3_MOE, CV_DEEPSEEK_V3,
              CV_NUM_ARCHS } cv_arch;

/* --- the name map ---------------------------------------------------------------------------- */

enum { CV_STACKED = 1, CV_TRANSPOSED = 2, CV_VOCAB = 4, CV_EXPERTS = 8, CV_ROPE_HEADS = 16, CV_ROPE_LAST = 32,
       CV_BIAS_ROW = 64 };

/* One HF tensor and the mcc tensors it holds. In the tables, a per-layer rule's names are suffixes
 * of the layer's prefixes ("transformer.h.N.", "layers.N."), a model-wide rule's whole names. */
typedef struct {
    const char *hf, *mcc[3];
    unsigned flags;                 /* CV_TRANSPOSED: HF's is the transpose; CV_VOCAB: mcc's rows padded;
                                     * CV_EXPERTS: one HF tensor an expert, each a slice [out, in] of
                                     * mcc's [E, out, in], named under the table's hf_expert prefix;
                                     * CV_ROPE_HEADS / CV_ROPE_LAST: the last qk_pos_emb_head_dim rows of
                                     * each head (qk_head_dim + qk_pos_emb_head_dim rows) / of the
                                     * tensor are rope's channels, HF's interleaved (cv_rope_row);
                                     * CV_BIAS_ROW: HF's [E] is row 1 of mcc's EXPERT_BIAS [2, E] */
} cv_entry;

static const cv_entry gpt2_model[] = {
    {"transformer.wte.weight", {"embedding.word"}, CV_VOCAB},
    {"transformer.wpe.weight", {"embedding.position"}, 0},
    {"transformer.ln_f.weight", {"final_norm.weight"}, 0},
    {"transformer.ln_f.bias", {"final_norm.bias"}, 0},
};
static const cv_entry gpt2_layer[] = {
    {"ln_1.weight", {"input_norm.weight"}, 0},
    {"ln_1.bias", {"input_norm.bias"}, 0},
    {"attn.c_attn.weight", {"attention.q.weight", "attention.k.weight", "attention.v.weight"}, CV_TRANSPOSED},
    {"attn.c_attn.bias", {"attention.q.bias", "attention.k.bias", "attention.v.bias"}, 0},
    {"attn.c_proj.weight", {"attention.out.weight"}, CV_TRANSPOSED},
    {"attn.c_proj.bias", {"attention.out.bias"}, 0},
    {"ln_2.weight", {"post_attention_norm.weight"}, 0},
    {"ln_2.bias", {"post_attention_norm.bias"}, 0},
    {"mlp.c_fc.weight", {"mlp.up.weight"}, CV_TRANSPOSED},
    {"mlp.c_fc.bias", {"mlp.up.bias"}, 0},
    {"mlp.c_proj.weight", {"mlp.down.weight"}, CV_TRANSPOSED},
    {"mlp.c_proj.bias", {"mlp.down.bias"}, 0},
};
static const cv_entry llama_model[] = {
    {"model.embed_tokens.weight", {"embedding.word"}, CV_VOCAB},
    {"model.norm.weight", {"final_norm.weight"}, 0},
    {"lm_head.weight", {"output.weight"}, CV_VOCAB},
};
/* the LLaMA family's layer: biases (LLaMA's attention_bias / mlp_bias, Qwen2's q, k, v) and Qwen3's
 * q_norm / k_norm where the model has them; an MoE layer has no dense MLP */
static const cv_entry llama_layer[] = {
    {"input_layernorm.weight", {"input_norm.weight"}, 0},
    {"self_attn.q_proj.weight", {"attention.q.weight"}, 0},
    {"self_attn.q_proj.bias", {"attention.q.bias"}, 0},
    {"self_attn.k_proj.weight", {"attention.k.weight"}, 0},
    {"self_attn.k_proj.bias", {"attention.k.bias"}, 0},
    {"self_attn.v_proj.weight", {"attention.v.weight"}, 0},
    {"self_attn.v_proj.bias", {"attention.v.bias"}, 0},
    {"self_attn.o_proj.weight", {"attention.out.weight"}, 0},
    {"self_attn.o_proj.bias", {"attention.out.bias"}, 0},
    {"self_attn.q_norm.weight", {"attention.q_norm.weight"}, 0},
    {"self_attn.k_norm.weight", {"attention.k_norm.weight"}, 0},
    {"post_attention_layernorm.weight", {"post_attention_norm.weight"}, 0},
    {"mlp.gate_proj.weight", {"mlp.gate.weight"}, 0},
    {"mlp.gate_proj.bias", {"mlp.gate.bias"}, 0},
    {"mlp.up_proj.weight", {"mlp.up.weight"}, 0},
    {"mlp.up_proj.bias", {"mlp.up.bias"}, 0},
    {"mlp.down_proj.weight", {"mlp.down.weight"}, 0},
    {"mlp.down_proj.bias", {"mlp.down.bias"}, 0},
};
static const cv_entry mixtral_moe[] = {
    {"block_sparse_moe.gate.weight", {"mlp.router.weight"}, 0},
    {"w1.weight", {"mlp.experts.gate.weight"}, CV_EXPERTS},
    {"w2.weight", {"mlp.experts.down.weight"}, CV_EXPERTS},
    {"w3.weight", {"mlp.experts.up.weight"}, CV_EXPERTS},
};
static const cv_entry qwen_moe[] = {
    {"mlp.gate.weight", {"mlp.router.weight"}, 0},
    {"gate_proj.weight", {"mlp.experts.gate.weight"}, CV_EXPERTS},
    {"up_proj.weight", {"mlp.experts.up.weight"}, CV_EXPERTS},
    {"down_proj.weight", {"mlp.experts.down.weight"}, CV_EXPERTS},
};

/* DeepSeek-V3 (DeepseekV3ForCausalLM): multi-latent attention (frontend/model.c mla_block), a dense
 * MLP in the first first_k_dense_replace layers, then the MoE block: the router (mlp.gate) with its
 * expert bias (e_score_correction_bias, mcc's EXPERT_BIAS row 1), the routed experts and the shared
 * ones (n_shared_experts of moe_intermediate_size, mcc's one shared expert of their sum). */
static const cv_entry deepseek_layer[] = {
    {"input_layernorm.weight", {"input_norm.weight"}, 0},
    {"self_attn.q_a_proj.weight", {"attention.q_down.weight"}, 0},
    {"self_attn.q_a_layernorm.weight", {"attention.q_down_norm.weight"}, 0},
    {"self_attn.q_b_proj.weight", {"attention.q_up.weight"}, CV_ROPE_HEADS},
    {"self_attn.q_proj.weight", {"attention.q.weight"}, CV_ROPE_HEADS},
    {"self_attn.kv_a_proj_with_mqa.weight", {"attention.kv_down.weight"}, CV_ROPE_LAST},
    {"self_attn.kv_a_layernorm.weight", {"attention.kv_down_norm.weight"}, 0},
    {"self_attn.kv_b_proj.weight", {"attention.kv_up.weight"}, 0},
    {"self_attn.o_proj.weight", {"attention.out.weight"}, 0},
    {"post_attention_layernorm.weight", {"post_attention_norm.weight"}, 0},
    {"mlp.gate_proj.weight", {"mlp.gate.weight"}, 0},
    {"mlp.up_proj.weight", {"mlp.up.weight"}, 0},
    {"mlp.down_proj.weight", {"mlp.down.weight"}, 0},
    {"mlp.gate.weight", {"mlp.router.weight"}, 0},
    {"mlp.gate.e_score_correction_bias", {"mlp.router.expert_bias"}, CV_BIAS_ROW},
    {"mlp.shared_experts.gate_proj.weight", {"mlp.shared_expert.gate.weight"}, 0},
    {"mlp.shared_experts.up_proj.weight", {"mlp.shared_expert.up.weight"}, 0},
    {"mlp.shared_experts.down_proj.weight", {"mlp.shared_expert.down.weight"}, 0},
};
static const cv_entry deepseek_moe[] = {
    {"gate_proj.weight", {"mlp.experts.gate.weight"}, CV_EXPERTS},
    {"up_proj.weight", {"mlp.experts.up.weight"}, CV_EXPERTS},
    {"down_proj.weight", {"mlp.experts.down.weight"}, CV_EXPERTS},
};

static const char *gpt2_why_not(const mcc_spec *s);
static const char *deepseek_v3_why_not(const mcc_spec *s);
static const char *llama_why_not(const mcc_spec *s);
static const char *mistral_why_not(const mcc_spec *s);
static const char *qwen2_why_not(const mcc_spec *s);
static const char *qwen3_why_not(const mcc_spec *s);
static const char *mixtral_why_not(const mcc_spec *s);
static const char *qwen3_moe_why_not(const mcc_spec *s);

/* Each architecture: its names, its tables, and why_not: why it does not compute the function of
 * spec s (NULL: it does). */
static const struct {
    const char *name, *model_type;
    const cv_entry *model, *layer, *moe;
    int nmodel, nlayer, nmoe;
    const char *hf_layer, *hf_expert;  /* HF's layer prefix, an expert's prefix after it */
    const char *ignored[3];            /* suffixes of buffers no weight holds */
    const char *(*why_not)(const mcc_spec *s);
} cv_archs[CV_NUM_ARCHS] = {
#define CV_N(a) ((int)(sizeof a / sizeof a[0]))
#define CV_LLAMA_ROPE {".rotary_emb.inv_freq", NULL}
    [CV_GPT2] = {"GPT2LMHeadModel", "gpt2", gpt2_model, gpt2_layer, NULL, CV_N(gpt2_model), CV_N(gpt2_layer), 0,
                 "transformer.h.%d.", NULL, {".attn.bias", ".attn.masked_bias", NULL}, gpt2_why_not},
    [CV_LLAMA] = {"LlamaForCausalLM", "llama", llama_model, llama_layer, NULL, CV_N(llama_model), CV_N(llama_layer), 0,
                  "model.layers.%d.", NULL, CV_LLAMA_ROPE, llama_why_not},
    [CV_MISTRAL] = {"MistralForCausalLM", "mistral", llama_model, llama_layer, NULL, CV_N(llama_model),
                    CV_N(llama_layer), 0, "model.layers.%d.", NULL, CV_LLAMA_ROPE, mistral_why_not},
    [CV_QWEN2] = {"Qwen2ForCausalLM", "qwen2", llama_model, llama_layer, NULL, CV_N(llama_model), CV_N(llama_layer), 0,
                  "model.layers.%d.", NULL, CV_LLAMA_ROPE, qwen2_why_not},
    [CV_QWEN3] = {"Qwen3ForCausalLM", "qwen3", llama_model, llama_layer, NULL, CV_N(llama_model), CV_N(llama_layer), 0,
                  "model.layers.%d.", NULL, CV_LLAMA_ROPE, qwen3_why_not},
    [CV_MIXTRAL] = {"MixtralForCausalLM", "mixtral", llama_model, llama_layer, mixtral_moe, CV_N(llama_model),
                    CV_N(llama_layer), CV_N(mixtral_moe), "model.layers.%d.", "block_sparse_moe.experts.%d.",
                    CV_LLAMA_ROPE, mixtral_why_not},
    [CV_QWEN3_MOE] = {"Qwen3MoeForCausalLM", "qwen3_moe", llama_model, llama_layer, qwen_moe, CV_N(llama_model),
                      CV_N(llama_layer), CV_N(qwen_moe), "model.layers.%d.", "mlp.experts.%d.", CV_LLAMA_ROPE,
                      qwen3_moe_why_not},
    [CV_DEEPSEEK_V3] = {"DeepseekV3ForCausalLM", "deepseek_v3", llama_model, deepseek_layer, deepseek_moe,
                        CV_N(llama_model), CV_N(deepseek_layer), CV_N(deepseek_moe), "model.layers.%d.",
                        "mlp.experts.%d.", CV_LLAMA_ROPE, deepseek_v3_why_not},
#undef CV_LLAMA_ROPE
#undef CV_N
};

/* Architectures transformers has and mcc knows it cannot compute, each refused with its reason. */
static const struct {
    const char *name, *model_type, *why;
} cv_refused[] = {
    {"Qwen2MoeForCausalLM", "qwen2_moe", "its shared expert's sigmoid gate (shared_expert_gate) is not built"},
    {"DeepseekV2ForCausalLM", "deepseek_v2", "multi-latent attention is not built"},
};

/* The most tensors a model converts with (the largest HF models have ~10^5: DeepSeek-V3's 61 layers of
 * 256 experts): a config.json of more is refused, not given a table of its size. */
#define CV_MAX_TENSORS (1 << 20)

/* One HF tensor of a model: its rule resolved to whole names and the mcc globals' shapes. */
typedef struct {
    char hf[160];
    int nmcc;
    int g[3];                       /* the mcc parameters (globals of the model) it stacks */
    int expert;                     /* CV_EXPERTS: the slice of g[0] it is; 0 otherwise */
    unsigned flags;
    ir_type hf_type;                /* f32, HF's shape */
} cv_rule;

typedef struct {
    const mcc_spec *s;
    cv_arch arch;
    ir_module *m;                   /* the logical model: parameter names and whole shapes */
    int n;
    cv_rule *r;
    int mtp_layers;                 /* an import's: the multi-token prediction layers after the model's,
                                     * whose tensors (model.layers.L.. L+mtp-1) are not read */
} cv_model;

static void shape_str(const ir_type *t, char *buf, size_t len)
{
    int k = snprintf(buf, len, "[");
    for (int d = 0; d < t->ndim && k < (int)len; d++)
        k += snprintf(buf + k, len - k, "%s%lld", d ? ", " : "", (long long)t->dims[d]);
    if (k < (int)len)
        snprintf(buf + k, len - k, "]");
}

/* The HF shape of a rule: its mcc tensors' rows stacked (the vocabulary unpadded), transposed. */
static ir_type hf_type_of(const cv_model *cm, const cv_rule *r)
{
    const ir_type *t0 = &cm->m->globals[r->g[0]].type;
    if (r->flags & CV_EXPERTS)
        return ir_tensor(IR_F32, 2, t0->dims + 1);
    if (r->flags & CV_BIAS_ROW)
        return ir_tensor(IR_F32, 1, t0->dims + 1);
    int64_t rows = 0;
    for (int i = 0; i < r->nmcc; i++)
        rows += cm->m->globals[r->g[i]].type.dims[0];
    if (r->flags & CV_VOCAB)
        rows = cm->s->vocab_size;
    int64_t dims[2] = {rows, t0->ndim == 2 ? t0->dims[1] : 1};
    if (t0->ndim == 2 && (r->flags & CV_TRANSPOSED))
        dims[0] = dims[1], dims[1] = rows;
    return ir_tensor(IR_F32, t0->ndim, dims);
}

/* Adds the rule of entry e (layer >= 0: a per-layer entry; expert: CV_EXPERTS' slice) when the
 * model has its first tensor. */
static bool add_rule(cv_model *cm, const cv_entry *e, int layer, int expert, char *err, size_t errlen)
{
    cv_rule r = {.flags = e->flags, .expert = expert};
    if (layer >= 0) {
        int k = snprintf(r.hf, sizeof r.hf, cv_archs[cm->arch].hf_layer, layer);
        if (e->flags & CV_EXPERTS)
            k += snprintf(r.hf + k, sizeof r.hf - k, cv_archs[cm->arch].hf_expert, expert);
        snprintf(r.hf + k, sizeof r.hf - k, "%s", e->hf);
    } else {
        snprintf(r.hf, sizeof r.hf, "%s", e->hf);
    }
    for (; r.nmcc < 3 && e->mcc[r.nmcc]; r.nmcc++) {
        char name[160];
        if (layer >= 0)
            snprintf(name, sizeof name, "layers.%d.%s", layer, e->mcc[r.nmcc]);
        else
            snprintf(name, sizeof name, "%s", e->mcc[r.nmcc]);
        r.g[r.nmcc] = ir_global_find(cm->m, name);
        if (r.g[r.nmcc] < 0 && r.nmcc == 0)
            return true; /* the model has no such tensor (a bias of a model without biases) */
        if (r.g[r.nmcc] < 0)
            return ck_fail(err, errlen, "%s: the model has %s but not %s, which frontend/convert.c's table stacks "
                                        "with it", cv_archs[cm->arch].name, cm->m->globals[r.g[0]].name, name);
    }
    r.hf_type = hf_type_of(cm, &r);
    cm->r[cm->n++] = r;
    return true;
}

/* --- which architectures compute a model -------------------------------------------------------- */

/* GPT2LMHeadModel: LayerNorm, learned positions, GELU, biases, tied embeddings, no grouped-query
 * attention, heads that split hidden_size. */
static const char *gpt2_why_not(const mcc_spec *s)
{
    if (s->normalization != MCC_NORM_LAYERNORM)
        return "GPT2LMHeadModel normalises with LayerNorm: normalization is RMSNorm";
    if (s->position_embedding_type != MCC_POS_LEARNED)
        return "a LayerNorm model (GPT2LMHeadModel) has learned positions: position_embedding_type is rope";
    if (s->activation != MCC_ACT_GELU || s->squared_relu)
        return s->squared_relu ? "GPT2LMHeadModel has a GELU MLP: squared_relu is true (Nemotron-4's)"
                               : "a LayerNorm model (GPT2LMHeadModel) has a GELU MLP: swiglu is true";
    if (s->apply_layernorm_1p)
        return "GPT2LMHeadModel's LayerNorms scale by their weight: apply_layernorm_1p is true (Nemotron-4's)";
    if (!s->add_bias_linear)
        return "GPT2LMHeadModel has biases in every linear layer: add_bias_linear is false";
    if (s->untie_embeddings_and_output_weights)
        return "GPT2LMHeadModel ties the output layer to the embedding: untie_embeddings_and_output_weights is true";
    if (s->num_query_groups != s->num_attention_heads)
        return "GPT2LMHeadModel has no grouped-query attention: num_query_groups differs from num_attention_heads";
    if ((long long)s->kv_channels * s->num_attention_heads != s->hidden_size)
        return "GPT2LMHeadModel's heads split hidden_size: kv_channels is not hidden_size / num_attention_heads";
    if (s->qk_layernorm)
        return "GPT2LMHeadModel has no q/k norms: qk_layernorm is true";
    if (s->multi_latent_attention)
        return "GPT2LMHeadModel has standard attention: multi_latent_attention is true";
    return s->num_experts ? "GPT2LMHeadModel has no experts: num_experts is set" : NULL;
}

/* LLaMA's family: RMSNorm, rope, a SwiGLU MLP; dense, or with experts. */
static const char *llama_family_why_not(const mcc_spec *s, bool moe)
{
    if (s->normalization != MCC_NORM_RMSNORM)
        return "LLaMA's family (Llama, Mistral, Qwen, Mixtral) normalises with RMSNorm: normalization is LayerNorm";
    if (s->position_embedding_type != MCC_POS_ROPE)
        return "an RMSNorm model (LlamaForCausalLM) has rope: position_embedding_type is learned_absolute";
    if (s->activation != MCC_ACT_SWIGLU)
        return "an RMSNorm model (LlamaForCausalLM) has a SwiGLU MLP: swiglu is false";
    if (s->rotary_percent != 1)
        return "LLaMA's family turns every channel of a head by rope: rotary_percent is below 1";
    if (s->apply_layernorm_1p)
        return "LLaMA's family's RMSNorms scale by their weight: apply_layernorm_1p is true";
    if (s->rope_type == MCC_ROPE_YARN)
        return "rope_type yarn is not exported to LLaMA's family (its rope_scaling is written for LLaMA 3.1's scaling "
               "or none; transformers' yarn derives its factors from other fields): train with rope_type rope";
    if (s->multi_latent_attention)
        return "LLaMA's family has standard attention: multi_latent_attention is true (DeepseekV3ForCausalLM "
               "has multi-latent attention)";
    if (!moe && s->num_experts)
        return "a dense architecture has no experts: num_experts is set (MixtralForCausalLM and Qwen3MoeForCausalLM "
               "are MoE)";
    if (moe && !s->num_experts)
        return "an MoE architecture has experts: num_experts is 0";
    return NULL;
}

/* LlamaForCausalLM: attention_bias puts biases on q, k, v and o, mlp_bias on the MLP (mcc's
 * add_bias_linear both); no q/k norms. */
static const char *llama_why_not(const mcc_spec *s)
{
    const char *why = llama_family_why_not(s, false);
    if (!why && s->qk_layernorm)
        why = "LlamaForCausalLM has no q/k norms: qk_layernorm is true (Qwen3ForCausalLM has them)";
    if (!why && s->add_qkv_bias && !s->add_bias_linear)
        why = "LlamaForCausalLM's attention_bias biases q, k, v and o alike: add_qkv_bias alone is Qwen2ForCausalLM's";
    return why;
}

static const char *mistral_why_not(const mcc_spec *s)
{
    const char *why = llama_family_why_not(s, false);
    if (!why && s->qk_layernorm)
        why = "MistralForCausalLM has no q/k norms: qk_layernorm is true";
    if (!why && (s->add_bias_linear || s->add_qkv_bias))
        why = "MistralForCausalLM has no biases: add_bias_linear or add_qkv_bias is true";
    return why;
}

static const char *qwen2_why_not(const mcc_spec *s)
{
    const char *why = llama_family_why_not(s, false);
    if (!why && s->qk_layernorm)
        why = "Qwen2ForCausalLM has no q/k norms: qk_layernorm is true (Qwen3ForCausalLM has them)";
    if (!why && !(s->add_qkv_bias && !s->add_bias_linear))
        why = "Qwen2ForCausalLM has biases on q, k and v alone: add_qkv_bias must be true and add_bias_linear false";
    return why;
}

/* Qwen3's attention (Qwen3ForCausalLM, Qwen3MoeForCausalLM): each head's q and k normalised, no
 * biases mcc has (its attention_bias biases q, k, v and o, and never the MLP). */
static const char *qwen3_attention_why_not(const mcc_spec *s)
{
    if (!s->qk_layernorm)
        return "Qwen3's attention normalises each head's q and k: qk_layernorm is false";
    if (s->add_bias_linear || s->add_qkv_bias)
        return "Qwen3's attention_bias biases q, k, v and o and never the MLP, which neither add_bias_linear nor "
               "add_qkv_bias is";
    return NULL;
}

static const char *qwen3_why_not(const mcc_spec *s)
{
    const char *why = llama_family_why_not(s, false);
    return why ? why : qwen3_attention_why_not(s);
}

/* The router transformers' MoE models compute: the softmax of all the logits and its top k (Mixtral
 * renormalises them: Megatron's top k of the logits, softmaxed), unscaled, no expert bias; no
 * shared expert, no biases. */
static const char *moe_why_not(const mcc_spec *s, const char *arch)
{
    static char why[256];
    const char *what = llama_family_why_not(s, true);
    if (what)
        return what;
    what = s->moe_shared_expert_intermediate_size > 0  ? "has no shared expert: moe_shared_expert_intermediate_size is set"
           : s->add_bias_linear                        ? "has no biases: add_bias_linear is true"
           : s->moe_router_score_function != MCC_MOE_SOFTMAX ? "'s router is a softmax: moe_router_score_function is sigmoid"
           : s->moe_router_topk_scaling_factor != 0 && s->moe_router_topk_scaling_factor != 1
               ? " does not scale its routing weights: moe_router_topk_scaling_factor is set"
           : s->moe_router_enable_expert_bias ? "'s router has no expert bias: moe_router_enable_expert_bias is true"
                                              : NULL;
    if (!what)
        return NULL;
    snprintf(why, sizeof why, "%s%s%s", arch, what[0] == '\'' ? "" : " ", what);
    return why;
}

static const char *mixtral_why_not(const mcc_spec *s)
{
    const char *why = moe_why_not(s, "MixtralForCausalLM");
    for (int l = 0; !why && l < s->num_layers; l++)
        if (!mcc_spec_moe_layer(s, l))
            why = "MixtralForCausalLM has an MoE layer in every layer: moe_layer_freq makes some dense (set it 1)";
    if (!why && s->moe_router_pre_softmax)
        why = "MixtralForCausalLM renormalises its top-k weights: moe_router_pre_softmax is true (set it false)";
    if (!why && s->qk_layernorm)
        why = "MixtralForCausalLM has no q/k norms: qk_layernorm is true (Qwen3MoeForCausalLM has them)";
    if (!why && s->add_qkv_bias)
        why = "MixtralForCausalLM has no biases: add_qkv_bias is true";
    return why;
}

/* Qwen3-MoE: Qwen3's attention; its dense layers (mlp_only_layers) of ffn_hidden_size; its router
 * renormalises the top k (norm_topk_prob) or not (moe_router_pre_softmax). */
static const char *qwen3_moe_why_not(const mcc_spec *s)
{
    const char *why = moe_why_not(s, "Qwen3MoeForCausalLM");
    return why ? why : qwen3_attention_why_not(s);
}

/* The k of DeepSeek-V3's first_k_dense_replace: its first k layers dense, the rest MoE (-1: not
 * that pattern). */
static int deepseek_dense_layers(const mcc_spec *s)
{
    int k = 0;
    while (k < s->num_layers && !mcc_spec_moe_layer(s, k))
        k++;
    for (int l = k; l < s->num_layers; l++)
        if (!mcc_spec_moe_layer(s, l))
            return -1;
    return k;
}

/* Whether transformers' YaRN scales cos and sin as mcc's (Megatron's) concentration
 * mscale(f, mscale) / mscale(f, mscale_all_dim) does: transformers takes that ratio only where both
 * are non-zero, else mscale(f, 1). */
static bool yarn_concentration_same(double factor, double mscale, double mscale_all_dim)
{
    double mcc = ir_yarn_mscale(factor, mscale) / ir_yarn_mscale(factor, mscale_all_dim);
    double hf = mscale != 0 && mscale_all_dim != 0 ? mcc : ir_yarn_mscale(factor, 1);
    return fabs(mcc - hf) <= 1e-12 * fabs(hf);
}

/* DeepseekV3ForCausalLM (transformers' modeling_deepseek_v3): RMSNorm, SwiGLU, no biases;
 * multi-latent attention with both latents normed (q_a_layernorm, kv_a_layernorm; no q latent:
 * q_lora_rank null), rope of YaRN's frequencies or plain; the first first_k_dense_replace layers
 * dense, the rest MoE: a sigmoid router with the expert bias (e_score_correction_bias) for
 * choosing, groups each scored by the sum of its top 2 (Megatron's top k / group_topk), the top-k
 * weights renormalised (norm_topk_prob; Megatron's for k > 1) and scaled by routed_scaling_factor;
 * n_shared_experts of moe_intermediate_size on every token; dropless. */
static const char *deepseek_v3_why_not(const mcc_spec *s)
{
    static char why[512];
    if (s->normalization != MCC_NORM_RMSNORM || s->apply_layernorm_1p)
        return "DeepseekV3ForCausalLM normalises with RMSNorm scaled by its weight: normalization is LayerNorm or "
               "apply_layernorm_1p is true";
    if (s->position_embedding_type != MCC_POS_ROPE || s->activation != MCC_ACT_SWIGLU || s->squared_relu)
        return "DeepseekV3ForCausalLM has rope and SwiGLU MLPs: position_embedding_type is learned_absolute or swiglu "
               "is false";
    if (!s->multi_latent_attention)
        return "DeepseekV3ForCausalLM has multi-latent attention: multi_latent_attention is false";
    if (!s->qk_layernorm)
        return "DeepseekV3ForCausalLM normalises its latents (q_a_layernorm, kv_a_layernorm): qk_layernorm is false";
    if (s->add_bias_linear || s->add_qkv_bias)
        return "DeepseekV3ForCausalLM (attention_bias false) has no biases: add_bias_linear or add_qkv_bias is true";
    if (s->qk_pos_emb_head_dim % 2)
        return "DeepseekV3ForCausalLM's rope turns pairs of channels: qk_pos_emb_head_dim is odd";
    if (s->use_rope_scaling)
        return "DeepseekV3ForCausalLM's rope_scaling is YaRN's: use_rope_scaling (LLaMA 3.1's) is true";
    if (s->rope_type == MCC_ROPE_YARN && s->rotary_scaling_factor != 1 &&
        s->max_position_embeddings != s->rotary_scaling_factor * s->yarn_original_max_position_embeddings) {
        snprintf(why, sizeof why, "transformers' YaRN (up to 4.5x) takes its factor as max_position_embeddings / "
                                  "original_max_position_embeddings, not rotary_scaling_factor: max_position_embeddings "
                                  "is %d, not rotary_scaling_factor x yarn_original_max_position_embeddings (%g); set "
                                  "--max-position-embeddings %g", s->max_position_embeddings,
                 s->rotary_scaling_factor * s->yarn_original_max_position_embeddings,
                 s->rotary_scaling_factor * s->yarn_original_max_position_embeddings);
        return why;
    }
    if (s->rope_type == MCC_ROPE_YARN && !yarn_concentration_same(s->rotary_scaling_factor, s->mscale, s->mscale_all_dim))
        return "transformers' YaRN scales cos and sin by mscale(factor, mscale) / mscale(factor, mscale_all_dim) only "
               "where both are non-zero, else by mscale(factor, 1): mscale or mscale_all_dim is 0 and mscale is not 1";
    if (!s->num_experts)
        return "DeepseekV3ForCausalLM's layers after first_k_dense_replace are MoE: num_experts is 0";
    if (deepseek_dense_layers(s) < 0)
        return "DeepseekV3ForCausalLM's first first_k_dense_replace layers are dense and the rest MoE: moe_layer_freq "
               "makes a dense layer after an MoE one";
    if (s->moe_router_score_function != MCC_MOE_SIGMOID)
        return "DeepseekV3ForCausalLM's router is a sigmoid: moe_router_score_function is softmax";
    if (!s->moe_router_enable_expert_bias)
        return "DeepseekV3ForCausalLM's router adds its expert bias (e_score_correction_bias) for choosing: "
               "moe_router_enable_expert_bias is false (set it true)";
    if (s->moe_shared_expert_intermediate_size <= 0 || s->moe_shared_expert_intermediate_size % s->moe_ffn_hidden_size)
        return "DeepseekV3ForCausalLM has n_shared_experts shared experts of moe_intermediate_size: "
               "moe_shared_expert_intermediate_size is not a positive multiple of moe_ffn_hidden_size";
    if (s->moe_router_num_groups > 0 && s->moe_router_topk != 2 * s->moe_router_group_topk) {
        snprintf(why, sizeof why, "DeepseekV3ForCausalLM scores a group by the sum of its top 2 experts, mcc (Megatron) "
                                  "by its top moe_router_topk / moe_router_group_topk (%d / %d): set moe_router_topk "
                                  "twice moe_router_group_topk", s->moe_router_topk, s->moe_router_group_topk);
        return why;
    }
    if (s->moe_router_num_groups == 0 && s->num_experts < 2)
        return "DeepseekV3ForCausalLM scores its one group by its top 2 experts: num_experts is 1";
    if (s->moe_z_loss_coeff > 0)
        return "DeepseekV3ForCausalLM has no router z-loss: moe_z_loss_coeff is set (set it 0)";
    if (s->moe_expert_capacity_factor > 0)
        return "DeepseekV3ForCausalLM is dropless: moe_expert_capacity_factor is set";
    if (s->moe_router_load_balancing_type == MCC_MOE_SINKHORN)
        return "DeepseekV3ForCausalLM has no Sinkhorn routing: moe_router_load_balancing_type is sinkhorn";
    return NULL;
}

/* The architecture a model exports as by default: GPT-2 for LayerNorm; in LLaMA's family Qwen3's
 * with q/k norms, Qwen2's with q, k, v biases alone, else LLaMA's (Mistral's is LLaMA's function:
 * --architecture MistralForCausalLM names it); Mixtral or Qwen3-MoE with experts. */
static cv_arch default_arch(const mcc_spec *s)
{
    if (s->normalization == MCC_NORM_LAYERNORM)
        return CV_GPT2;
    if (s->multi_latent_attention)
        return CV_DEEPSEEK_V3;
    if (s->num_experts > 0)
        return s->qk_layernorm ? CV_QWEN3_MOE : CV_MIXTRAL;
    if (s->qk_layernorm)
        return CV_QWEN3;
    return s->add_qkv_bias && !s->add_bias_linear ? CV_QWEN2 : CV_LLAMA;
}

/* The names of the architectures mcc converts, for messages. */
static const char *arch_list(void)
{
    static char list[512];
    int k = 0;
    for (int a = 0; a < CV_NUM_ARCHS; a++)
        k += snprintf(list + k, sizeof list - (size_t)k, "%s%s", a ? ", " : "", cv_archs[a].name);
    return list;
}

static void model_free(cv_model *cm)
{
    ir_module_free(cm->m);
    free(cm->r);
}

/* The rules of spec s's model as architecture arch (CV_NUM_ARCHS: its default_arch), every
 * parameter of it in exactly one (false: nothing to free). */
static bool rules_of(const mcc_spec *s, const char *spec_path, cv_arch arch, cv_model *cm, char *err, size_t errlen)
{
    cm->arch = arch == CV_NUM_ARCHS ? default_arch(s) : arch;
    if (s->mtp_num_layers) /* DeepSeek-V3's checkpoints hold them as model.layers.L..: with its architecture */
        return ck_fail(err, errlen, "%s: multi-token prediction's depths (mtp_num_layers %d) are not converted yet "
                                    "(DeepseekV3ForCausalLM is not built): convert a model trained without them",
                       spec_path, s->mtp_num_layers);
    const char *why = cv_archs[cm->arch].why_not(s);
    if (why && arch == CV_NUM_ARCHS)
        return ck_fail(err, errlen, "%s: no Hugging Face architecture fits: %s (mcc converts %s)", spec_path, why,
                       arch_list());
    if (why)
        return ck_fail(err, errlen, "%s: %s does not compute this model: %s", spec_path, cv_archs[arch].name, why);
    int nlayer = cv_archs[cm->arch].nlayer, nmoe = cv_archs[cm->arch].nmoe, nmodel = cv_archs[cm->arch].nmodel;
    long long nrules = nmodel + ((long long)nlayer + (long long)nmoe * s->num_experts) * s->num_layers;
    if (nrules > CV_MAX_TENSORS) /* a rule a tensor: refused before a table of that size is made */
        return ck_fail(err, errlen, "%s: the model has %lld tensors in Hugging Face's naming (num_layers x num_experts "
                                    "expert tensors), more than mcc converts (%d)", spec_path, nrules, CV_MAX_TENSORS);
    cm->s = s;
    cm->m = mcc_build_model(s, false);
    cm->r = calloc((size_t)nrules, sizeof *cm->r);
    cm->n = 0;
    for (int i = 0; i < nmodel; i++)
        if (!add_rule(cm, &cv_archs[cm->arch].model[i], -1, 0, err, errlen))
            return false;
    for (int l = 0; l < s->num_layers; l++) {
        for (int i = 0; i < nlayer; i++)
            if (!add_rule(cm, &cv_archs[cm->arch].layer[i], l, 0, err, errlen))
                return false;
        for (int i = 0; i < nmoe; i++) {
            const cv_entry *e = &cv_archs[cm->arch].moe[i];
            for (int x = 0; x < (e->flags & CV_EXPERTS ? s->num_experts : 1); x++)
                if (!add_rule(cm, e, l, x, err, errlen))
                    return false;
        }
    }
    /* a parameter model.c adds without a line in the table is refused, not dropped (an expert
     * tensor's rules counted once, by its first slice's) */
    int *uses = calloc((size_t)cm->m->nglobals + 1, sizeof *uses); /* counted in one pass: a model has many layers */
    for (int i = 0; i < cm->n; i++)
        for (int j = 0; j < cm->r[i].nmcc; j++)
            uses[cm->r[i].g[j]] += cm->r[i].expert == 0;
    bool ok = true;
    for (int g = 0; ok && g < cm->m->nglobals; g++)
        if (cm->m->globals[g].kind == IR_GLOBAL_PARAM && uses[g] != 1)
            ok = ck_fail(err, errlen, "%s: parameter %s has no %s name in frontend/convert.c's table", spec_path,
                         cm->m->globals[g].name, cv_archs[cm->arch].name);
    free(uses);
    return ok;
}

static bool model_of(const mcc_spec *s, const char *spec_path, cv_arch arch, cv_model *cm, char *err, size_t errlen)
{
    *cm = (cv_model){0};
    bool ok = rules_of(s, spec_path, arch, cm, err, errlen);
    if (!ok)
        model_free(cm);
    return ok;
}

/* HF's row of mcc's row a of a CV_ROPE_HEADS / CV_ROPE_LAST tensor of `rows` rows. mcc's rope is
 * rotate-half (channel j turns with j + Dr/2), DeepSeek's checkpoints interleave the pairs (channel
 * 2j with 2j + 1): transformers' apply_rotary_pos_emb_interleave views a head's Dr rope channels as
 * (Dr/2, 2) and transposes them before its rotate-half, so its channel j is the checkpoint's 2j and
 * j + Dr/2 the checkpoint's 2j + 1. A group (a head of q: qk_head_dim + Dr rows; kv_down's whole
 * rows) keeps its first rows, those without position, in place. */
static int64_t cv_rope_row(const cv_model *cm, const cv_rule *r, int64_t a, int64_t rows)
{
    const mcc_spec *s = cm->s;
    int64_t Dr = s->qk_pos_emb_head_dim, group = r->flags & CV_ROPE_HEADS ? s->qk_head_dim + Dr : rows;
    int64_t base = a - a % group, j = a % group - (group - Dr);
    if (!(r->flags & (CV_ROPE_HEADS | CV_ROPE_LAST)) || j < 0)
        return a;
    return base + group - Dr + (j < Dr / 2 ? 2 * j : 2 * (j - Dr / 2) + 1);
}

/* Copies between a rule's mcc tensors (f32 bits, their whole shapes) and its HF tensor, toward HF
 * when to_hf: row `row` of the mcc tensors stacked is HF's row (column, transposed); rows past HF's
 * are the vocabulary's padding, zero when coming from HF. An mcc tensor given as NULL is skipped
 * (an import makes one mcc tensor at a time). */
static void cv_copy(const cv_model *cm, const cv_rule *r, uint32_t *const *mcc, uint32_t *hf, bool to_hf)
{
    const ir_type *t0 = &cm->m->globals[r->g[0]].type;
    if (r->flags & CV_EXPERTS) { /* expert r->expert's [out, in] of mcc's [E, out, in] */
        size_t n = (size_t)ir_numel(&r->hf_type);
        uint32_t *slice = mcc[0] + (size_t)r->expert * n;
        memcpy(to_hf ? hf : slice, to_hf ? slice : hf, n * sizeof *hf);
        return;
    }
    if (r->flags & CV_BIAS_ROW) { /* row 1 of [2, E] (row 0, the step's counts, zero at a step's end) */
        int64_t E = t0->dims[1];
        if (!to_hf)
            memset(mcc[0], 0, (size_t)E * sizeof *hf);
        memcpy(to_hf ? hf : mcc[0] + E, to_hf ? mcc[0] + E : hf, (size_t)E * sizeof *hf);
        return;
    }
    int64_t cols = t0->ndim == 2 ? t0->dims[1] : 1, row0 = 0;
    int64_t hf_rows = (r->flags & CV_TRANSPOSED) && t0->ndim == 2 ? r->hf_type.dims[1] : r->hf_type.dims[0];
    for (int i = 0; i < r->nmcc; row0 += cm->m->globals[r->g[i]].type.dims[0], i++) {
        int64_t rows = cm->m->globals[r->g[i]].type.dims[0];
        for (int64_t a = 0; mcc[i] && a < rows; a++)
            for (int64_t c = 0; c < cols; c++) {
                uint32_t *mv = &mcc[i][a * cols + c];
                int64_t row = cv_rope_row(cm, r, row0 + a, hf_rows);
                if (row >= hf_rows) {
                    if (!to_hf)
                        *mv = 0;
                    continue;
                }
                uint32_t *hv = &hf[(r->flags & CV_TRANSPOSED) ? c * hf_rows + row : row * cols + c];
                if (to_hf)
                    *hv = *mv;
                else
                    *mv = *hv;
            }
    }
}

/* --- config.json ---------------------------------------------------------------------------- */

/* The keys one architecture of LLaMA's family adds: biases, the sliding window it does not use
 * (mcc's attention sees every earlier position), the MoE block's. */
static void config_family_json(const cv_model *cm, json_t *c)
{
    const mcc_spec *s = cm->s;
    bool qwen = cm->arch == CV_QWEN2 || cm->arch == CV_QWEN3 || cm->arch == CV_QWEN3_MOE;
    if (cm->arch == CV_LLAMA) {
        json_object_set_new(c, "attention_bias", json_boolean(s->add_bias_linear));
        json_object_set_new(c, "mlp_bias", json_boolean(s->add_bias_linear));
    }
    if (cm->arch == CV_QWEN3 || cm->arch == CV_QWEN3_MOE)
        json_object_set_new(c, "attention_bias", json_false());
    if (qwen) { /* max_window_layers: the layers a sliding window would leave whole, all of them */
        json_object_set_new(c, "use_sliding_window", json_false());
        json_object_set_new(c, "max_window_layers", json_integer(s->num_layers));
    }
    if (cm->arch != CV_LLAMA)
        json_object_set_new(c, "sliding_window", json_null());
    if (cm->arch == CV_MIXTRAL) { /* output_router_logits: transformers' switch for the aux loss, off in its files */
        json_object_set_new(c, "num_local_experts", json_integer(s->num_experts));
        json_object_set_new(c, "router_jitter_noise", json_real(0));
    }
    if (cm->arch == CV_QWEN3_MOE) {
        json_t *dense = json_array();
        for (int l = 0; l < s->num_layers; l++)
            if (!mcc_spec_moe_layer(s, l))
                json_array_append_new(dense, json_integer(l));
        json_object_set_new(c, "num_experts", json_integer(s->num_experts));
        json_object_set_new(c, "moe_intermediate_size", json_integer(s->moe_ffn_hidden_size));
        json_object_set_new(c, "decoder_sparse_step", json_integer(1));
        json_object_set_new(c, "mlp_only_layers", dense);
        json_object_set_new(c, "norm_topk_prob", json_boolean(!s->moe_router_pre_softmax));
    }
    if (s->num_experts) {
        json_object_set_new(c, "num_experts_per_tok", json_integer(s->moe_router_topk));
        json_object_set_new(c, "router_aux_loss_coef", json_real(s->moe_aux_loss_coeff));
        json_object_set_new(c, "output_router_logits", json_false());
    }
}

/* DeepseekV3Config's keys (transformers' and DeepSeek's config.json): the attention's latents and
 * heads, the MoE block's, rope_scaling YaRN's at a factor other than 1 (else null: plain rope);
 * rope_interleave true (the rope rows interleaved: cv_rope_row). The load-balancing loss, which
 * transformers does not compute, as DeepSeek's config names it: aux_loss_alpha, seq_aux. */
static void config_deepseek_json(const cv_model *cm, json_t *c)
{
    const mcc_spec *s = cm->s;
    bool yarn = s->rope_type == MCC_ROPE_YARN && s->rotary_scaling_factor != 1;
    double scaling = s->moe_router_topk_scaling_factor != 0 ? s->moe_router_topk_scaling_factor : 1;
    bool aux = s->moe_router_load_balancing_type == MCC_MOE_AUX_LOSS ||
               s->moe_router_load_balancing_type == MCC_MOE_SEQ_AUX_LOSS;
    json_object_set_new(c, "hidden_size", json_integer(s->hidden_size));
    json_object_set_new(c, "intermediate_size", json_integer(s->ffn_hidden_size));
    json_object_set_new(c, "moe_intermediate_size", json_integer(s->moe_ffn_hidden_size));
    json_object_set_new(c, "num_hidden_layers", json_integer(s->num_layers));
    json_object_set_new(c, "num_attention_heads", json_integer(s->num_attention_heads));
    json_object_set_new(c, "num_key_value_heads", json_integer(s->num_attention_heads));
    json_object_set_new(c, "q_lora_rank", s->q_lora_rank > 0 ? json_integer(s->q_lora_rank) : json_null());
    json_object_set_new(c, "kv_lora_rank", json_integer(s->kv_lora_rank));
    json_object_set_new(c, "qk_nope_head_dim", json_integer(s->qk_head_dim));
    json_object_set_new(c, "qk_rope_head_dim", json_integer(s->qk_pos_emb_head_dim));
    json_object_set_new(c, "v_head_dim", json_integer(s->v_head_dim));
    json_object_set_new(c, "n_routed_experts", json_integer(s->num_experts));
    json_object_set_new(c, "n_shared_experts",
                        json_integer(s->moe_shared_expert_intermediate_size / s->moe_ffn_hidden_size));
    json_object_set_new(c, "num_experts_per_tok", json_integer(s->moe_router_topk));
    json_object_set_new(c, "n_group", json_integer(s->moe_router_num_groups > 0 ? s->moe_router_num_groups : 1));
    json_object_set_new(c, "topk_group", json_integer(s->moe_router_num_groups > 0 ? s->moe_router_group_topk : 1));
    json_object_set_new(c, "topk_method", json_string("noaux_tc"));
    json_object_set_new(c, "scoring_func", json_string("sigmoid"));
    json_object_set_new(c, "norm_topk_prob", json_boolean(s->moe_router_topk > 1));
    json_object_set_new(c, "routed_scaling_factor", json_real(scaling));
    json_object_set_new(c, "first_k_dense_replace", json_integer(deepseek_dense_layers(s)));
    json_object_set_new(c, "moe_layer_freq", json_integer(1));
    json_object_set_new(c, "num_nextn_predict_layers", json_integer(0));
    json_object_set_new(c, "aux_loss_alpha", json_real(aux ? s->moe_aux_loss_coeff : 0));
    json_object_set_new(c, "seq_aux", json_boolean(s->moe_router_load_balancing_type == MCC_MOE_SEQ_AUX_LOSS));
    json_object_set_new(c, "hidden_act", json_string("silu"));
    json_object_set_new(c, "max_position_embeddings", json_integer(s->max_position_embeddings));
    json_object_set_new(c, "rms_norm_eps", json_real(s->norm_epsilon));
    json_object_set_new(c, "rope_theta", json_real(s->rotary_base));
    json_object_set_new(c, "rope_interleave", json_true());
    json_object_set_new(c, "rope_scaling",
                        yarn ? json_pack("{s:s, s:s, s:f, s:I, s:f, s:f, s:f, s:f}", "type", "yarn", "rope_type", "yarn",
                                         "factor", s->rotary_scaling_factor, "original_max_position_embeddings",
                                         (json_int_t)s->yarn_original_max_position_embeddings, "beta_fast",
                                         s->yarn_beta_fast, "beta_slow", s->yarn_beta_slow, "mscale", s->mscale,
                                         "mscale_all_dim", s->mscale_all_dim)
                             : json_null());
    json_object_set_new(c, "attention_bias", json_false());
    json_object_set_new(c, "attention_dropout", json_real(s->attention_dropout));
}

static json_t *config_json(const cv_model *cm)
{
    const mcc_spec *s = cm->s;
    json_t *c = json_object();
    json_object_set_new(c, "architectures", json_pack("[s]", cv_archs[cm->arch].name));
    json_object_set_new(c, "model_type", json_string(cv_archs[cm->arch].model_type));
    json_object_set_new(c, "vocab_size", json_integer(s->vocab_size));
    if (cm->arch == CV_GPT2) {
        json_object_set_new(c, "n_embd", json_integer(s->hidden_size));
        json_object_set_new(c, "n_layer", json_integer(s->num_layers));
        json_object_set_new(c, "n_head", json_integer(s->num_attention_heads));
        json_object_set_new(c, "n_inner", json_integer(s->ffn_hidden_size));
        json_object_set_new(c, "n_positions", json_integer(s->max_position_embeddings));
        json_object_set_new(c, "n_ctx", json_integer(s->max_position_embeddings));
        json_object_set_new(c, "activation_function", json_string("gelu_new")); /* tanh, as mcc's GELU */
        json_object_set_new(c, "layer_norm_epsilon", json_real(s->norm_epsilon));
        json_object_set_new(c, "resid_pdrop", json_real(s->hidden_dropout));
        json_object_set_new(c, "embd_pdrop", json_real(s->hidden_dropout));
        json_object_set_new(c, "attn_pdrop", json_real(s->attention_dropout));
        json_object_set_new(c, "scale_attn_weights", json_true());
    } else if (cm->arch == CV_DEEPSEEK_V3) {
        config_deepseek_json(cm, c);
    } else {
        json_object_set_new(c, "hidden_size", json_integer(s->hidden_size));
        json_object_set_new(c, "intermediate_size",
                            json_integer(cm->arch == CV_MIXTRAL ? s->moe_ffn_hidden_size : s->ffn_hidden_size));
        json_object_set_new(c, "num_hidden_layers", json_integer(s->num_layers));
        json_object_set_new(c, "num_attention_heads", json_integer(s->num_attention_heads));
        json_object_set_new(c, "num_key_value_heads", json_integer(s->num_query_groups));
        json_object_set_new(c, "head_dim", json_integer(mcc_spec_head_dim(s)));
        json_object_set_new(c, "hidden_act", json_string("silu"));
        json_object_set_new(c, "max_position_embeddings", json_integer(s->max_position_embeddings));
        json_object_set_new(c, "rms_norm_eps", json_real(s->norm_epsilon));
        json_object_set_new(c, "rope_theta", json_real(s->rotary_base));
        json_object_set_new(c, "rope_scaling", s->use_rope_scaling ? json_pack("{s:s, s:f, s:f, s:f, s:I}", "rope_type", "llama3",
                                                 "factor", s->rope_scaling_factor, "low_freq_factor", IR_ROPE_LOW_FREQ_FACTOR,
                                                 "high_freq_factor", IR_ROPE_HIGH_FREQ_FACTOR,
                                                 "original_max_position_embeddings", (json_int_t)IR_ROPE_ORIGINAL_CONTEXT)
                                                                   : json_null());
        json_object_set_new(c, "attention_dropout", json_real(s->attention_dropout));
        config_family_json(cm, c);
    }
    json_object_set_new(c, "tie_word_embeddings", json_boolean(!s->untie_embeddings_and_output_weights));
    json_object_set_new(c, "initializer_range", json_real(s->init_method_std));
    json_object_set_new(c, "torch_dtype", json_string("float32"));
    return c;
}

/* Reading a config.json: each value named by its file and key when it is missing or wrong. */
typedef struct {
    const char *path;
    json_t *c;
    char *err;
    size_t errlen;
    int mtp_layers;                 /* DeepSeek-V3's num_nextn_predict_layers: its tensors not read */
} cv_config;

/* config.json's value of key, NULL when absent or null (transformers then takes its default). */
static json_t *cfg_get(cv_config *k, const char *key)
{
    json_t *v = json_object_get(k->c, key);
    return v && !json_is_null(v) ? v : NULL;
}

/* def < 0: required */
static bool cfg_int(cv_config *k, const char *key, long long def, long long *out)
{
    json_t *v = cfg_get(k, key);
    if (!v && def < 0)
        return ck_fail(k->err, k->errlen, "%s: \"%s\" is missing: the model's config.json must give it (save_pretrained "
                                          "writes it)", k->path, key);
    if (v && (!json_is_integer(v) || json_integer_value(v) <= 0 || json_integer_value(v) > INT_MAX))
        return ck_fail(k->err, k->errlen, "%s: \"%s\" must be a positive integer", k->path, key);
    return *out = v ? json_integer_value(v) : def, true;
}

/* zero: 0 is allowed (a coefficient), else the number must be positive */
static bool cfg_num(cv_config *k, const char *key, double def, bool zero, double *out)
{
    json_t *v = cfg_get(k, key);
    if (v && (!json_is_number(v) || json_number_value(v) < 0 || (!zero && json_number_value(v) == 0)))
        return ck_fail(k->err, k->errlen, "%s: \"%s\" must be a %s number", k->path, key, zero ? "non-negative" : "positive");
    return *out = v ? json_number_value(v) : def, true;
}

static bool cfg_bool(cv_config *k, const char *key, bool def, bool *out)
{
    json_t *v = cfg_get(k, key);
    if (v && !json_is_boolean(v))
        return ck_fail(k->err, k->errlen, "%s: \"%s\" must be true or false", k->path, key);
    return *out = v ? json_is_true(v) : def, true;
}

/* The value of key when it is a string in allowed (NULL-terminated; absent: def), else the error. */
static bool cfg_choice(cv_config *k, const char *key, const char *def, const char *const *allowed, const char *why)
{
    json_t *v = cfg_get(k, key);
    const char *got = !v ? def : json_is_string(v) ? json_string_value(v) : "(not a string)";
    for (int i = 0; allowed[i]; i++)
        if (!strcmp(got, allowed[i]))
            return true;
    return ck_fail(k->err, k->errlen, "%s: \"%s\" is \"%s\": %s", k->path, key, got, why);
}

/* The architecture config.json names ("architectures", else "model_type"). */
static bool config_arch(cv_config *k, cv_arch *arch)
{
    json_t *a = json_object_get(k->c, "architectures"), *t = json_object_get(k->c, "model_type");
    const char *name = json_is_array(a) && json_is_string(json_array_get(a, 0)) ? json_string_value(json_array_get(a, 0))
                       : json_is_string(t)                                      ? json_string_value(t)
                                                                                : NULL;
    for (int i = 0; name && i < CV_NUM_ARCHS; i++)
        if (!strcmp(name, cv_archs[i].name) || !strcmp(name, cv_archs[i].model_type))
            return *arch = (cv_arch)i, true;
    for (size_t i = 0; name && i < sizeof cv_refused / sizeof cv_refused[0]; i++)
        if (!strcmp(name, cv_refused[i].name) || !strcmp(name, cv_refused[i].model_type))
            return ck_fail(k->err, k->errlen, "%s: architecture \"%s\": %s in mcc, which converts %s", k->path, name,
                           cv_refused[i].why, arch_list());
    return ck_fail(k->err, k->errlen, "%s: architecture %s%s%s: mcc converts %s (\"architectures\": [\"...\"] or "
                                      "their \"model_type\")", k->path, name ? "\"" : "", name ? name : "not named",
                   name ? "\" is not one mcc knows" : "", arch_list());
}

/* The MoE fields of a MixtralForCausalLM's or Qwen3MoeForCausalLM's config.json (F: intermediate_size),
 * or NULL with the error. Their router is the softmax of all the logits and its top k: Mixtral
 * renormalises them always (Megatron's default, the top k of the logits softmaxed), Qwen3-MoE where
 * norm_topk_prob says (else moe_router_pre_softmax); router_aux_loss_coef is the load-balancing
 * loss's weight (Megatron's Switch loss of each layer, which transformers computes over all layers'
 * tokens at once, and only under output_router_logits). Mixtral's every layer is MoE; Qwen3-MoE's
 * dense layers are those of mlp_only_layers and those decoder_sparse_step skips, of width F. What
 * another MoE model's config adds (a shared expert, jitter) is refused by its key. */
static json_t *moe_of_config(cv_config *k, cv_arch arch, long long F, long long L)
{
    bool mixtral = arch == CV_MIXTRAL, renorm = true;
    long long E, K, EF = F, step = 1;
    double coef, jitter;
    static const char *const softmax[] = {"softmax", NULL};
    static const char *const shared_keys[] = {"shared_expert_intermediate_size", "n_shared_experts"};
    char router[96];
    snprintf(router, sizeof router, "%s's router is a softmax", cv_archs[arch].name);
    bool ok = cfg_int(k, mixtral ? "num_local_experts" : "num_experts", -1, &E) &&
              cfg_int(k, "num_experts_per_tok", 2, &K) && (mixtral || cfg_int(k, "moe_intermediate_size", -1, &EF)) &&
              (mixtral || cfg_int(k, "decoder_sparse_step", 1, &step)) &&
              cfg_num(k, "router_aux_loss_coef", 0.001, true, &coef) && /* both configs' default */
              cfg_num(k, "router_jitter_noise", 0, true, &jitter) &&
              cfg_bool(k, "norm_topk_prob", mixtral, &renorm) && /* Qwen3MoeConfig's default: false */
              cfg_choice(k, "scoring_func", "softmax", softmax, router);
    for (size_t i = 0; ok && i < sizeof shared_keys / sizeof shared_keys[0]; i++) {
        json_t *v = cfg_get(k, shared_keys[i]);
        if (v && !(json_is_integer(v) && json_integer_value(v) == 0))
            ok = ck_fail(k->err, k->errlen, "%s: \"%s\" is set: %s has no shared expert (a DeepSeek or Qwen2 MoE is "
                                            "another architecture, which mcc does not convert)", k->path,
                         shared_keys[i], cv_archs[arch].name);
    }
    const char *bad = !ok                 ? NULL
                      : jitter             ? "router_jitter_noise\" is not 0: mcc's router adds no noise; set it 0"
                      : mixtral && !renorm ? "norm_topk_prob\" is false: transformers' Mixtral renormalises the top-k "
                                             "weights whatever it says, as mcc's softmax router does; drop it"
                                           : NULL;
    if (bad)
        ok = ck_fail(k->err, k->errlen, "%s: \"%s", k->path, bad);
    /* which layers are MoE: all (Mixtral), or those mlp_only_layers leaves sparse every step-th */
    json_t *only = mixtral ? NULL : cfg_get(k, "mlp_only_layers"), *freq = json_array();
    if (ok && only && !json_is_array(only))
        ok = ck_fail(k->err, k->errlen, "%s: \"mlp_only_layers\" must be a list of layer numbers", k->path);
    size_t i;
    json_t *v;
    json_array_foreach(ok ? only : NULL, i, v) if (ok && (!json_is_integer(v) || json_integer_value(v) < 0 ||
                                                         json_integer_value(v) >= L))
        ok = ck_fail(k->err, k->errlen, "%s: \"mlp_only_layers\"[%zu] is not a layer of the %lld (0 to %lld)", k->path,
                     i, L, L - 1);
    bool all = true;
    for (long long l = 0; ok && l < L; l++) {
        bool sparse = (l + 1) % step == 0;
        json_array_foreach(only, i, v) sparse &= json_integer_value(v) != l;
        all &= sparse;
        json_array_append_new(freq, json_integer(sparse));
    }
    json_t *out = ok ? json_pack("{s:I, s:I, s:I, s:s, s:b, s:s, s:f, s:o}", "num_experts", E, "moe_ffn_hidden_size", EF,
                                 "moe_router_topk", K, "moe_router_score_function", "softmax",
                                 "moe_router_pre_softmax", !renorm, "moe_router_load_balancing_type", "aux_loss",
                                 "moe_aux_loss_coeff", coef, "moe_layer_freq", all ? json_integer(1) : json_incref(freq))
                     : NULL;
    json_decref(freq);
    return out;
}

/* The sliding window a config.json names, against mcc's attention, which sees every earlier
 * position: none (Qwen's use_sliding_window false, Mistral's and Mixtral's sliding_window null), or
 * one no shorter than the training length *T, which then computes the same (a note says where it
 * stops doing so); a shorter one is refused. */
static bool window_of_config(cv_config *k, cv_arch arch, long long T)
{
    bool qwen = arch == CV_QWEN2 || arch == CV_QWEN3 || arch == CV_QWEN3_MOE, on = !qwen;
    if (qwen && !cfg_bool(k, "use_sliding_window", false, &on))
        return false;
    json_t *w = on ? cfg_get(k, "sliding_window") : NULL;
    if (!w)
        return true;
    if (qwen)
        return ck_fail(k->err, k->errlen, "%s: \"use_sliding_window\" is true: mcc's attention sees every earlier "
                                          "position; set it false to import with full attention", k->path);
    if (!json_is_integer(w) || json_integer_value(w) <= 0)
        return ck_fail(k->err, k->errlen, "%s: \"sliding_window\" must be a positive integer or null", k->path);
    long long W = json_integer_value(w);
    if (W < T)
        return ck_fail(k->err, k->errlen, "%s: \"sliding_window\" is set (%lld) and shorter than the training length %lld: "
                                          "mcc's attention sees every earlier position; set it null to import with full "
                                          "attention", k->path, W, T);
    fprintf(stderr, "mcc: note: %s: \"sliding_window\" %lld: mcc's attention sees every earlier position, the same as "
                    "the window up to %lld tokens (seq_length %lld); a longer --seq-length computes another function\n",
            k->path, W, W, T);
    return true;
}

/* config.json's rope_scaling: LLaMA 3.1's ("rope_type" llama3) with Megatron's constants (ir.h
 * IR_ROPE_*: every LLaMA 3.x config's), its factor into *factor; another kind or constant refused by key. */
static bool rope_scaling_of(cv_config *k, json_t *scaling, double *factor)
{
    json_t *type = json_object_get(scaling, "rope_type");
    type = type ? type : json_object_get(scaling, "type"); /* transformers' older key */
    const char *t = json_is_string(type) ? json_string_value(type) : "";
    if (!json_is_object(scaling) || strcmp(t, "llama3"))
        return ck_fail(k->err, k->errlen, "%s: \"rope_scaling\" is of rope_type \"%s\": mcc computes LLaMA 3.1's "
                                          "scaling alone (rope_type llama3, Megatron's --use-rope-scaling); the "
                                          "frequencies of another kind are not built", k->path, t);
    static const struct {
        const char *key;
        double megatron;
    } fixed[] = {{"low_freq_factor", IR_ROPE_LOW_FREQ_FACTOR}, {"high_freq_factor", IR_ROPE_HIGH_FREQ_FACTOR},
                 {"original_max_position_embeddings", IR_ROPE_ORIGINAL_CONTEXT}};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        json_t *v = json_object_get(scaling, fixed[i].key);
        if (v && (!json_is_number(v) || json_number_value(v) != fixed[i].megatron))
            return ck_fail(k->err, k->errlen, "%s: \"rope_scaling\".\"%s\" is not %g: mcc computes llama3's scaling "
                                              "with Megatron's constants (low_freq_factor 1, high_freq_factor 4, "
                                              "original_max_position_embeddings 8192), which every LLaMA 3.x has",
                           k->path, fixed[i].key, fixed[i].megatron);
    }
    json_t *f = json_object_get(scaling, "factor");
    if (!json_is_number(f) || json_number_value(f) <= 0)
        return ck_fail(k->err, k->errlen, "%s: \"rope_scaling\".\"factor\" must be a positive number (LLaMA 3.1: 8)",
                       k->path);
    *factor = json_number_value(f);
    return true;
}

/* A non-negative integer key (first_k_dense_replace), def where absent */
static bool cfg_count(cv_config *k, const char *key, long long def, long long *out)
{
    json_t *v = cfg_get(k, key);
    if (v && (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT_MAX))
        return ck_fail(k->err, k->errlen, "%s: \"%s\" must be a non-negative integer", k->path, key);
    return *out = v ? json_integer_value(v) : def, true;
}

/* config.json's rope_scaling of a DeepSeek-V3: YaRN's, into the spec's fields (m). transformers up
 * to 4.5x take the factor as max_position_embeddings / original_max_position_embeddings, later ones
 * and DeepSeek's code as "factor": a config where the two differ is refused. */
static bool deepseek_rope_of_config(cv_config *k, json_t *scaling, long long P, json_t *m)
{
    json_t *type = json_object_get(scaling, "rope_type");
    type = type ? type : json_object_get(scaling, "type");
    const char *t = json_is_string(type) ? json_string_value(type) : "";
    if (!json_is_object(scaling) || strcmp(t, "yarn"))
        return ck_fail(k->err, k->errlen, "%s: \"rope_scaling\" is of rope_type \"%s\": mcc's multi-latent attention "
                                          "computes YaRN's scaling (rope_type yarn) or none (null)", k->path, t);
    static const struct {
        const char *key, *field;
        double def;
    } keys[] = {{"factor", "rotary_scaling_factor", -1}, {"original_max_position_embeddings",
                "yarn_original_max_position_embeddings", -1}, {"beta_fast", "yarn_beta_fast", 32},
                {"beta_slow", "yarn_beta_slow", 1}, {"mscale", "mscale", 1}, {"mscale_all_dim", "mscale_all_dim", 0}};
    double v[6];
    for (int i = 0; i < 6; i++) {
        json_t *x = json_object_get(scaling, keys[i].key);
        if (x && !json_is_null(x) && (!json_is_number(x) || json_number_value(x) < 0))
            return ck_fail(k->err, k->errlen, "%s: \"rope_scaling\".\"%s\" must be a non-negative number", k->path,
                           keys[i].key);
        if ((!x || json_is_null(x)) && keys[i].def < 0)
            return ck_fail(k->err, k->errlen, "%s: \"rope_scaling\".\"%s\" is missing: YaRN's scaling needs it "
                                              "(DeepSeek-V3: factor 40, original_max_position_embeddings 4096)",
                           k->path, keys[i].key);
        v[i] = x && !json_is_null(x) ? json_number_value(x) : keys[i].def;
        if (i == 1 && (v[1] != (double)(int)v[1] || v[1] < 1))
            return ck_fail(k->err, k->errlen, "%s: \"rope_scaling\".\"original_max_position_embeddings\" must be a "
                                              "positive integer", k->path);
        json_object_set_new(m, keys[i].field, i == 1 ? json_integer((json_int_t)v[1]) : json_real(v[i]));
    }
    if (v[0] != 1 && (double)P != v[0] * v[1])
        return ck_fail(k->err, k->errlen, "%s: \"max_position_embeddings\" %lld is not \"rope_scaling\"'s factor x "
                                          "original_max_position_embeddings (%g): transformers up to 4.5x take that "
                                          "ratio as the factor, later ones \"factor\"; make them agree", k->path, P,
                       v[0] * v[1]);
    json_t *ms = json_object_get(scaling, "mscale"); /* absent: transformers' None, Megatron's 1 */
    if (!yarn_concentration_same(v[0], ms && !json_is_null(ms) ? v[4] : v[5] != 0 ? 0 : 1, v[5]))
        return ck_fail(k->err, k->errlen, "%s: \"rope_scaling\": transformers scales cos and sin by mscale(factor, 1) "
                                          "where mscale or mscale_all_dim is 0, mcc (Megatron) by mscale(factor, mscale) "
                                          "/ mscale(factor, mscale_all_dim): mscale %g and mscale_all_dim %g differ",
                       k->path, v[4], v[5]);
    json_object_set_new(m, "rope_type", json_string("yarn"));
    return true;
}

/* The model section of a DeepseekV3ForCausalLM's config.json (deepseek_v3_why_not's model), or NULL
 * with the error naming the key that does not map. */
static json_t *deepseek_of_config(cv_config *k)
{
    long long L, d, H, G, F, EF, P, V, qr = 0, kvr, Dn, Dr, Dv, E, shared, K, groups, keep, dense, freq, mtp;
    double eps, std, theta, scaling, alpha;
    bool tied, abias, renorm, seq_aux, interleave;
    static const char *const silu[] = {"silu", NULL}, *const sigmoid[] = {"sigmoid", NULL},
                             *const noaux[] = {"noaux_tc", NULL};
    bool ok = cfg_int(k, "num_hidden_layers", -1, &L) && cfg_int(k, "hidden_size", -1, &d) &&
              cfg_int(k, "num_attention_heads", -1, &H) && cfg_int(k, "num_key_value_heads", H, &G) &&
              cfg_int(k, "intermediate_size", -1, &F) && cfg_int(k, "moe_intermediate_size", -1, &EF) &&
              cfg_int(k, "max_position_embeddings", -1, &P) && cfg_int(k, "vocab_size", -1, &V) &&
              (!cfg_get(k, "q_lora_rank") || cfg_int(k, "q_lora_rank", -1, &qr)) &&
              cfg_int(k, "kv_lora_rank", -1, &kvr) && cfg_int(k, "qk_nope_head_dim", -1, &Dn) &&
              cfg_int(k, "qk_rope_head_dim", -1, &Dr) && cfg_int(k, "v_head_dim", -1, &Dv) &&
              cfg_int(k, "n_routed_experts", -1, &E) && cfg_count(k, "n_shared_experts", 1, &shared) &&
              cfg_int(k, "num_experts_per_tok", -1, &K) && cfg_int(k, "n_group", 1, &groups) &&
              cfg_int(k, "topk_group", 1, &keep) && cfg_count(k, "first_k_dense_replace", 3, &dense) &&
              cfg_int(k, "moe_layer_freq", 1, &freq) && cfg_count(k, "num_nextn_predict_layers", 0, &mtp) &&
              cfg_num(k, "routed_scaling_factor", 1, false, &scaling) && cfg_bool(k, "norm_topk_prob", true, &renorm) &&
              cfg_num(k, "aux_loss_alpha", 0, true, &alpha) && cfg_bool(k, "seq_aux", true, &seq_aux) &&
              cfg_num(k, "rms_norm_eps", 1e-6, false, &eps) && cfg_num(k, "rope_theta", 10000, false, &theta) &&
              cfg_num(k, "initializer_range", 0.02, false, &std) && cfg_bool(k, "tie_word_embeddings", false, &tied) &&
              cfg_bool(k, "attention_bias", false, &abias) && cfg_bool(k, "rope_interleave", true, &interleave) &&
              cfg_choice(k, "hidden_act", "silu", silu, "mcc's SwiGLU MLP is silu(gate) * up") &&
              cfg_choice(k, "scoring_func", "sigmoid", sigmoid, "DeepseekV3ForCausalLM's router is a sigmoid") &&
              cfg_choice(k, "topk_method", "noaux_tc", noaux, "DeepseekV3ForCausalLM chooses by the sigmoid and its "
                                                              "expert bias (noaux_tc)");
    if (ok && L > MCC_MAX_LAYERS)
        ok = ck_fail(k->err, k->errlen, "%s: \"num_hidden_layers\" is %lld: mcc builds at most %d layers", k->path, L,
                     MCC_MAX_LAYERS);
    char bad[512] = "";
    if (!ok)
        ;
    else if (cfg_get(k, "quantization_config"))
        snprintf(bad, sizeof bad, "quantization_config\" is set: mcc imports F32, BF16 and F16 weights; dequantize the "
                                  "model (DeepSeek-V3's FP8 blocks times weight_scale_inv) to BF16 first");
    else if (G != H)
        snprintf(bad, sizeof bad, "num_key_value_heads\" (%lld) is not num_attention_heads (%lld): multi-latent "
                                  "attention gives every head its keys and values", G, H);
    else if (abias)
        snprintf(bad, sizeof bad, "attention_bias\" is true: mcc's multi-latent attention has no biases");
    else if (!interleave)
        snprintf(bad, sizeof bad, "rope_interleave\" is false: mcc imports DeepSeek's interleaved rope rows "
                                  "(rope_interleave true) and permutes them; a model saved rotate-half is not read");
    else if (freq != 1)
        snprintf(bad, sizeof bad, "moe_layer_freq\" is %lld: transformers' DeepseekV3 makes every layer from "
                                  "first_k_dense_replace on MoE; set it 1", freq);
    else if (dense > L)
        snprintf(bad, sizeof bad, "first_k_dense_replace\" (%lld) is past num_hidden_layers (%lld)", dense, L);
    else if (dense == L)
        snprintf(bad, sizeof bad, "first_k_dense_replace\" is num_hidden_layers: no MoE layer; mcc converts a "
                                  "DeepSeek-V3 with experts");
    else if (shared == 0)
        snprintf(bad, sizeof bad, "n_shared_experts\" is 0: mcc's DeepSeek-V3 has a shared expert");
    else if (Dr % 2)
        snprintf(bad, sizeof bad, "qk_rope_head_dim\" is odd: rope turns pairs of channels");
    else if (K > E || E % groups || keep > groups)
        snprintf(bad, sizeof bad, "num_experts_per_tok\", \"n_group\" or \"topk_group\" does not fit n_routed_experts "
                                  "%lld (n_group must divide it, topk_group <= n_group)", E);
    else if (groups > 1 && K != 2 * keep)
        snprintf(bad, sizeof bad, "num_experts_per_tok\" (%lld) is not twice topk_group (%lld): transformers scores a "
                                  "group by its top 2 experts, mcc (Megatron) by its top num_experts_per_tok / "
                                  "topk_group", K, keep);
    else if (groups == 1 && E < 2)
        snprintf(bad, sizeof bad, "n_routed_experts\" is 1: transformers scores the group by its top 2 experts");
    else if (renorm != (K > 1))
        snprintf(bad, sizeof bad, "norm_topk_prob\" is %s: mcc's sigmoid router (Megatron's) renormalises the top-k "
                                  "weights exactly when num_experts_per_tok > 1", renorm ? "true" : "false");
    if (bad[0])
        ok = ck_fail(k->err, k->errlen, "%s: \"%s", k->path, bad);
    if (!ok)
        return NULL;
    if (mtp > 0) /* DeepSeek-V3's one: transformers ignores its tensors too (_keys_to_ignore_on_load_unexpected) */
        fprintf(stderr, "mcc: note: %s: \"num_nextn_predict_layers\" %lld: mcc builds no multi-token prediction "
                        "layer; the tensors of model.layers.%lld%s are not read\n", k->path, mtp, L,
                mtp > 1 ? " and after" : "");
    k->mtp_layers = (int)(mtp < 1000 ? mtp : 1000);
    json_t *m = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f}", "num_layers", L, "hidden_size", d,
                          "num_attention_heads", H, "num_query_groups", G, "ffn_hidden_size", F, "seq_length",
                          P < 4096 ? P : 4096, "max_position_embeddings", P, "vocab_size", V, "norm_epsilon", eps,
                          "init_method_std", std);
    json_object_update_new(m, json_pack("{s:s, s:s, s:f, s:b, s:b, s:b, s:b, s:b}", "normalization", "RMSNorm",
                                        "position_embedding_type", "rope", "rotary_base", theta, "swiglu", 1,
                                        "untie_embeddings_and_output_weights", !tied, "add_bias_linear", 0,
                                        "multi_latent_attention", 1, "qk_layernorm", 1));
    json_object_update_new(m, json_pack("{s:I, s:I, s:I, s:I, s:I}", "q_lora_rank", qr, "kv_lora_rank", kvr,
                                        "qk_head_dim", Dn, "qk_pos_emb_head_dim", Dr, "v_head_dim", Dv));
    json_t *layers = json_array();
    for (long long l = 0; l < L; l++)
        json_array_append_new(layers, json_integer(l >= dense));
    json_object_update_new(m, json_pack("{s:I, s:I, s:I, s:I, s:s, s:f, s:b, s:s, s:f, s:o}", "num_experts", E,
                                        "moe_ffn_hidden_size", EF, "moe_shared_expert_intermediate_size", shared * EF,
                                        "moe_router_topk", K, "moe_router_score_function", "sigmoid",
                                        "moe_router_topk_scaling_factor", scaling, "moe_router_enable_expert_bias", 1,
                                        "moe_router_load_balancing_type",
                                        alpha > 0 ? seq_aux ? "seq_aux_loss" : "aux_loss" : "none",
                                        "moe_aux_loss_coeff", alpha, "moe_layer_freq",
                                        dense ? layers : json_integer(1)));
    if (!dense)
        json_decref(layers);
    if (groups > 1)
        json_object_update_new(m, json_pack("{s:I, s:I}", "moe_router_num_groups", groups, "moe_router_group_topk", keep));
    json_t *scaling_cfg = cfg_get(k, "rope_scaling");
    if (scaling_cfg && !deepseek_rope_of_config(k, scaling_cfg, P, m)) {
        json_decref(m);
        return NULL;
    }
    return m;
}

/* The spec (the form of the files in models/) of the model config.json describes; the training section is left
 * to mcc's defaults (and flags), dropout off. */
static json_t *spec_of_config(cv_config *k, cv_arch arch)
{
    long long L, d, H, G, F, T, P, V, hd;
    double eps, std, theta;
    bool tied, abias, mbias, ok;
    json_t *arch_fields = NULL;
    if (arch == CV_DEEPSEEK_V3) {
        json_t *dm = deepseek_of_config(k);
        return dm ? json_pack("{s:o, s:{s:i, s:i, s:i}}", "model", dm, "parallel", "tensor_model_parallel_size", 1,
                              "pipeline_model_parallel_size", 1, "data_parallel_size", 1)
                  : NULL;
    }
    if (arch == CV_GPT2) {
        static const char *const tanh_gelu[] = {"gelu_new", "gelu_pytorch_tanh", "gelu_fast", NULL};
        ok = cfg_int(k, "n_layer", -1, &L) && cfg_int(k, "n_embd", -1, &d) && cfg_int(k, "n_head", -1, &H) &&
             cfg_int(k, "n_positions", -1, &P) && cfg_int(k, "vocab_size", -1, &V) &&
             cfg_int(k, "n_inner", 4 * d, &F) && cfg_num(k, "layer_norm_epsilon", 1e-5, false, &eps) &&
             cfg_num(k, "initializer_range", 0.02, false, &std) && cfg_bool(k, "tie_word_embeddings", true, &tied) &&
             cfg_choice(k, "activation_function", "gelu_new", tanh_gelu,
                        "mcc's GELU is the tanh approximation (gelu_new, gelu_pytorch_tanh)");
        bool by_layer = false, scaled = true;
        ok = ok && cfg_bool(k, "scale_attn_by_inverse_layer_idx", false, &by_layer) &&
             cfg_bool(k, "scale_attn_weights", true, &scaled);
        const char *bad = !ok       ? NULL /* not every value was read */
                          : !tied    ? "tie_word_embeddings\" is false: mcc's GPT-2 ties the output layer to the embedding"
                          : by_layer ? "scale_attn_by_inverse_layer_idx\" is true"
                          : !scaled  ? "scale_attn_weights\" is false"
                                     : NULL;
        if (bad)
            ok = ck_fail(k->err, k->errlen, "%s: \"%s%s", k->path, bad,
                         tied ? ": mcc's GPT-2 scales attention scores by 1/sqrt(head_dim) alone" : "");
        if (ok) {
            G = H;
            T = P;
            arch_fields = json_pack("{s:s, s:s}", "normalization", "LayerNorm", "position_embedding_type",
                                    "learned_absolute");
        }
    } else {
        static const char *const silu[] = {"silu", NULL};
        json_t *scaling = cfg_get(k, "rope_scaling");
        bool qwen3 = arch == CV_QWEN3 || arch == CV_QWEN3_MOE, moe = arch == CV_MIXTRAL || arch == CV_QWEN3_MOE;
        ok = cfg_int(k, "num_hidden_layers", -1, &L) && cfg_int(k, "hidden_size", -1, &d) &&
             cfg_int(k, "num_attention_heads", -1, &H) && cfg_int(k, "num_key_value_heads", H, &G) &&
             cfg_int(k, "intermediate_size", -1, &F) && cfg_int(k, "max_position_embeddings", -1, &P) &&
             cfg_int(k, "vocab_size", -1, &V) && cfg_int(k, "head_dim", d / H, &hd) &&
             cfg_num(k, "rms_norm_eps", 1e-6, false, &eps) && cfg_num(k, "rope_theta", 10000, false, &theta) &&
             cfg_num(k, "initializer_range", 0.02, false, &std) && cfg_bool(k, "tie_word_embeddings", false, &tied) &&
             cfg_bool(k, "attention_bias", false, &abias) && cfg_bool(k, "mlp_bias", false, &mbias) &&
             cfg_choice(k, "hidden_act", "silu", silu, "mcc's SwiGLU MLP is silu(gate) * up");
        if (ok && L > MCC_MAX_LAYERS) /* before anything is built a layer at a time */
            ok = ck_fail(k->err, k->errlen, "%s: \"num_hidden_layers\" is %lld: mcc builds at most %d layers", k->path,
                         L, MCC_MAX_LAYERS);
        double factor = 0;
        ok = ok && (!scaling || rope_scaling_of(k, scaling, &factor));
        T = ok && P < 4096 ? P : 4096; /* a training length, not the model's reach: --seq-length trains longer */
        ok = ok && window_of_config(k, arch, T);
        if (ok && arch == CV_LLAMA && abias != mbias)
            ok = ck_fail(k->err, k->errlen, "%s: \"attention_bias\" and \"mlp_bias\" differ: mcc's add_bias_linear gives "
                                            "every linear layer a bias or none", k->path);
        if (arch == CV_QWEN2) /* transformers' Qwen2 biases q, k and v whatever attention_bias says */
            abias = mbias = false;
        if (ok && arch != CV_LLAMA && abias) /* Qwen3's biases q, k, v and o, never the MLP */
            ok = ck_fail(k->err, k->errlen, "%s: \"attention_bias\" is true: %s", k->path,
                         qwen3 ? "Qwen3's attention_bias biases q, k, v and o and never the MLP, which mcc does not "
                                 "build (add_bias_linear biases the MLP too, add_qkv_bias not o)"
                               : "this architecture's layers have no biases");
        json_t *moe_fields = ok && moe ? moe_of_config(k, arch, F, L) : NULL;
        ok = ok && (!moe || moe_fields);
        if (ok) {
            arch_fields = json_pack("{s:s, s:s, s:f, s:b, s:b, s:b}", "normalization", "RMSNorm",
                                    "position_embedding_type", "rope", "rotary_base", theta, "swiglu", 1,
                                    "untie_embeddings_and_output_weights", !tied, "add_bias_linear", abias && mbias);
            if (hd * H != d) /* its own head width (Qwen3's 128 beside hidden_size 1024 and 16 heads) */
                json_object_set_new(arch_fields, "kv_channels", json_integer(hd));
            if (arch == CV_QWEN2) /* q, k and v biased, always */
                json_object_set_new(arch_fields, "add_qkv_bias", json_true());
            if (qwen3)
                json_object_set_new(arch_fields, "qk_layernorm", json_true());
            if (factor > 0)
                json_object_update_new(arch_fields, json_pack("{s:b, s:f}", "use_rope_scaling", 1, "rope_scaling_factor",
                                                              factor));
            if (moe_fields)
                json_object_update(arch_fields, moe_fields);
        }
        json_decref(moe_fields);
    }
    if (!ok)
        return NULL;
    json_t *m = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f}", "num_layers", L, "hidden_size", d,
                          "num_attention_heads", H, "num_query_groups", G, "ffn_hidden_size", F, "seq_length", T,
                          "max_position_embeddings", P, "vocab_size", V, "norm_epsilon", eps, "init_method_std", std);
    json_object_update(m, arch_fields);
    json_decref(arch_fields);
    return json_pack("{s:o, s:{s:i, s:i, s:i}}", "model", m, "parallel", "tensor_model_parallel_size", 1,
                     "pipeline_model_parallel_size", 1, "data_parallel_size", 1);
}

/* --- Hugging Face's files --------------------------------------------------------------------- */

/* Writes json to path, indented, with a final newline. */
static bool write_json(const char *path, json_t *j, char *err, size_t errlen)
{
    if (json_dump_file(j, path, JSON_INDENT(2)) != 0)
        return ck_fail(err, errlen, "%s: cannot write: %s", path, strerror(errno));
    FILE *f = fopen(path, "a");
    bool ok = f && fputc('\n', f) != EOF;
    if (f && fclose(f) != 0)
        ok = false;
    return ok || ck_fail(err, errlen, "%s: cannot write: %s", path, strerror(errno));
}

/* The shard each HF tensor goes to: consecutive tensors while a shard stays within max_bytes (a
 * larger tensor alone), as transformers' save_pretrained shards. Returns the number of shards. */
static int plan_shards(const cv_model *cm, long long max_bytes, int *shard)
{
    int n = 0;
    long long in_shard = 0;
    for (int i = 0; i < cm->n; i++) {
        long long b = (long long)ir_bytes(&cm->r[i].hf_type);
        if (i == 0 || in_shard + b > max_bytes)
            n++, in_shard = 0;
        in_shard += b;
        shard[i] = n - 1;
    }
    return n;
}

static void shard_name(int i, int n, char *buf, size_t len)
{
    if (n == 1)
        snprintf(buf, len, "model.safetensors");
    else
        snprintf(buf, len, "model-%05d-of-%05d.safetensors", i + 1, n);
}

/* The files of an HF directory, each tensor found by its name. */
typedef struct {
    int nfiles;
    ck_st_file *files;
    char **file_names;              /* as the index names them */
} hf_dir;

static void hf_close(hf_dir *h)
{
    for (int i = 0; i < h->nfiles; i++) {
        ck_st_close(&h->files[i]);
        free(h->file_names[i]);
    }
    free(h->files);
    free(h->file_names);
}

static bool hf_open_file(hf_dir *h, const char *dir, const char *name, char *err, size_t errlen)
{
    for (int i = 0; i < h->nfiles; i++)
        if (!strcmp(h->file_names[i], name))
            return true;
    if (strchr(name, '/') || !strcmp(name, "..") || !*name)
        return ck_fail(err, errlen, "%s/model.safetensors.index.json: file \"%s\" is not a file name in the directory",
                       dir, name);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    h->files = realloc(h->files, sizeof *h->files * (size_t)(h->nfiles + 1));
    h->file_names = realloc(h->file_names, sizeof *h->file_names * (size_t)(h->nfiles + 1));
    if (!ck_st_open(&h->files[h->nfiles], path, NULL, err, errlen)) {
        size_t k = strlen(err);
        if (strcmp(name, "model.safetensors"))
            snprintf(err + k, errlen - k, " (model.safetensors.index.json names it: download the model directory whole)");
        return false;
    }
    h->file_names[h->nfiles++] = strdup(name);
    return true;
}

/* Opens model.safetensors, or every file model.safetensors.index.json's weight_map names. */
static bool hf_open(hf_dir *h, const char *dir, char *err, size_t errlen)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (access(path, F_OK) == 0)
        return hf_open_file(h, dir, "model.safetensors", err, errlen);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    json_error_t je;
    json_t *index = json_load_file(path, 0, &je);
    if (!index)
        return ck_fail(err, errlen, "%s: neither model.safetensors nor model.safetensors.index.json is there (%s): "
                                    "mcc reads a model saved with safe_serialization (save_pretrained's default)",
                       dir, je.text);
    json_t *map = json_object_get(index, "weight_map");
    bool ok = json_is_object(map) ||
              ck_fail(err, errlen, "%s: \"weight_map\" must be an object of tensor name: file name", path);
    const char *key;
    json_t *v;
    json_object_foreach(map, key, v) {
        if (!ok)
            break;
        ok = json_is_string(v) ? hf_open_file(h, dir, json_string_value(v), err, errlen)
                               : ck_fail(err, errlen, "%s: weight_map[\"%s\"] must be a file name", path, key);
    }
    json_decref(index);
    return ok;
}

/* Where tensor name is (GPT-2's own files omit the "transformer." prefix): file and entry. */
static bool hf_find(const hf_dir *h, const char *name, int *file, int *entry)
{
    const char *bare = strncmp(name, "transformer.", 12) == 0 ? name + 12 : NULL;
    for (int i = 0; i < h->nfiles; i++)
        if ((*entry = ck_st_find(&h->files[i], name)) >= 0 || (bare && (*entry = ck_st_find(&h->files[i], bare)) >= 0))
            return *file = i, true;
    return false;
}

/* Reads a tensor as f32 bits (F32, or BF16 and F16 widened exactly) into out (numel of them). */
static bool hf_read_f32(const ck_st_file *f, int e, uint32_t *out, char *err, size_t errlen)
{
    const ir_type *t = &f->t[e].type;
    int64_t n = ir_numel(t);
    if (t->dtype == IR_F32)
        return ck_st_read(f, e, out, err, errlen);
    if (t->dtype != IR_BF16 && t->dtype != IR_F16)
        return ck_fail(err, errlen, "%s: tensor %s is %s: mcc imports F32, BF16 and F16 weights", f->path,
                       f->t[e].name, ck_st_dtype_name(t->dtype));
    uint16_t *h = malloc(ir_bytes(t) + 1);
    bool ok = ck_st_read(f, e, h, err, errlen);
    for (int64_t i = 0; ok && i < n; i++) {
        uint32_t x = h[i];
        if (t->dtype == IR_BF16) {
            out[i] = x << 16;
            continue;
        }
        uint32_t sign = (x & 0x8000u) << 16, ex = (x >> 10) & 0x1f, man = x & 0x3ff;
        if (ex == 0x1f) /* inf, nan */
            out[i] = sign | 0x7f800000u | (man << 13);
        else if (ex) /* normal */
            out[i] = sign | ((ex + 112) << 23) | (man << 13);
        else if (!man)
            out[i] = sign;
        else { /* subnormal: normalise */
            int shift = 0;
            while (!(man & 0x400))
                man <<= 1, shift++;
            out[i] = sign | ((uint32_t)(113 - shift) << 23) | ((man & 0x3ff) << 13);
        }
    }
    free(h);
    return ok;
}

/* --- mcc convert --to hf ---------------------------------------------------------------------- */

/* Checks the checkpoint's parameters against the spec's model: the same names, the same shapes
 * but for the vocabulary's padding (another tp pads it otherwise), which must cover vocab_size. */
static bool check_checkpoint(const cv_model *cm, const ck_reader *ck, const char *spec, char *err, size_t errlen)
{
    char where[4200];
    snprintf(where, sizeof where, "%s/manifest.json", ck->dir);
    for (int i = 0; i < ck->ntensors; i++)
        if (ck->tensors[i].role == CK_ROLE_PARAM && ir_global_find(cm->m, ck->tensors[i].name) < 0)
            return ck_fail(err, errlen, "%s: parameter %s is not in %s's model: give the spec (and flags) the checkpoint "
                                        "was trained with", where, ck->tensors[i].name, spec);
    for (int g = 0; g < cm->m->nglobals; g++) {
        const ir_global *gl = &cm->m->globals[g];
        if (gl->kind != IR_GLOBAL_PARAM)
            continue;
        const ck_tensor *t = ck_find(ck, gl->name);
        if (!t || t->role != CK_ROLE_PARAM)
            return ck_fail(err, errlen, "%s: no parameter %s, which %s's model has: give the spec (and flags) the "
                                        "checkpoint was trained with", where, gl->name, spec);
        bool vocab = gl->placement == IR_PLACE_VOCAB;
        bool same = t->whole.dtype == IR_F32 && t->whole.ndim == gl->type.ndim;
        for (int d = 0; same && d < gl->type.ndim; d++)
            same = vocab && d == 0 ? t->whole.dims[0] >= cm->s->vocab_size : t->whole.dims[d] == gl->type.dims[d];
        if (!same) {
            char a[64], b[64];
            shape_str(&t->whole, a, sizeof a);
            shape_str(&gl->type, b, sizeof b);
            return ck_fail(err, errlen, "%s: %s is %s %s, %s's model has f32 %s%s: give the spec (and flags) the "
                                        "checkpoint was trained with", where, gl->name, ir_dtype_name(t->whole.dtype), a,
                           spec, b, vocab ? " (its rows: vocab_size or more)" : "");
        }
    }
    return true;
}

typedef struct {
    const char *spec;
    long long iteration, max_shard_bytes;
    cv_arch arch;                   /* --architecture, else CV_NUM_ARCHS: the model's default_arch */
} to_hf_opts;

/* The checkpoint's model must be the spec's: every key of the model's function the manifest records
 * (ir/config.def's IR_CFG_MODEL rows) the spec's, but the padded vocabulary (another tp pads it
 * otherwise: check_checkpoint's rows), then its parameters' names and shapes. */
static bool check_model(const cv_model *cm, const ck_reader *ck, const char *spec, char *err, size_t errlen)
{
    char why[1024], theirs[4200];
    bool flags = !strcmp(spec, ck->dir); /* no --spec: the manifest's model, the flags over it */
    snprintf(theirs, sizeof theirs, flags ? "the flags given" : "%s's model", spec);
    if (!ck_model_same(&ck->state, cm->m, IR_CFG_VOCAB_SIZE, theirs, why, sizeof why))
        return ck_fail(err, errlen, "%s/manifest.json: %s: give the spec (and flags) the checkpoint was trained with, "
                                    "or leave --spec out (the checkpoint records its model)", ck->dir, why);
    return check_checkpoint(cm, ck, spec, err, errlen);
}

/* The export's HF tensors made one at a time as the safetensors writer comes to them (rule first + i
 * of the shard being written) from the checkpoint's whole tensors: an expert stack is read once for
 * its experts' rules, which follow each other. */
typedef struct {
    const cv_model *cm;
    ck_reader *ck;
    int first;                      /* the shard's first rule */
    int held;                       /* the expert stack in experts, or -1 */
    uint32_t *experts;
} export_fill;

static bool fill_hf(void *ctx, int i, void *buf, char *err, size_t errlen)
{
    export_fill *ex = ctx;
    const cv_rule *r = &ex->cm->r[ex->first + i];
    const ir_module *m = ex->cm->m;
    if ((r->flags & CV_EXPERTS) && ex->held != r->g[0]) {
        free(ex->experts);
        ex->held = r->g[0];
        if (!(ex->experts = ck_read_whole(ex->ck, m->globals[r->g[0]].name, err, errlen)))
            return ex->held = -1, false;
    }
    uint32_t *mcc[3] = {0};
    bool ok = true;
    for (int j = 0; ok && j < r->nmcc; j++)
        ok = (mcc[j] = r->flags & CV_EXPERTS ? ex->experts : ck_read_whole(ex->ck, m->globals[r->g[j]].name, err, errlen));
    if (ok)
        cv_copy(ex->cm, r, mcc, buf, true);
    for (int j = 0; j < r->nmcc && !(r->flags & CV_EXPERTS); j++)
        free(mcc[j]);
    return ok;
}

static bool to_hf(ck_reader *ck, const char *out, const mcc_spec *s, const to_hf_opts *o, char *err, size_t errlen)
{
    cv_model cm;
    if (!model_of(s, o->spec, o->arch, &cm, err, errlen))
        return false;
    bool ok = check_model(&cm, ck, o->spec, err, errlen) && os_mkdirs(out, err, errlen);
    int *shard = calloc((size_t)cm.n, sizeof *shard), nshards = ok ? plan_shards(&cm, o->max_shard_bytes, shard) : 0;
    ck_st_tensor *st = calloc((size_t)cm.n, sizeof *st);
    json_t *map = json_object();
    long long total = 0;
    static const char *const meta[] = {"format", "pt"}; /* transformers refuses a file without it */
    export_fill ex = {&cm, ck, 0, -1, NULL};
    for (int sh = 0, first = 0; ok && sh < nshards; sh++) {
        int last = first;
        for (; last < cm.n && shard[last] == sh; last++) {
            st[last] = (ck_st_tensor){cm.r[last].hf, cm.r[last].hf_type, NULL, fill_hf, &ex};
            total += (long long)ir_bytes(&cm.r[last].hf_type);
        }
        char name[64], path[4200];
        shard_name(sh, nshards, name, sizeof name);
        snprintf(path, sizeof path, "%s/%s", out, name);
        ex.first = first;
        ok = ck_st_write(path, last - first, st + first, 1, meta, NULL, NULL, NULL, err, errlen);
        for (int i = first; i < last; i++)
            json_object_set_new(map, st[i].name, json_string(name));
        first = last;
    }
    free(ex.experts);
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors%s", out, nshards > 1 ? "" : ".index.json");
    if (ok && unlink(path) != 0 && errno != ENOENT) /* a stale file transformers would read instead */
        ok = ck_fail(err, errlen, "%s: cannot remove the file of an earlier export: %s", path, strerror(errno));
    if (ok && nshards > 1) {
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", out);
        json_t *index = json_pack("{s:{s:I}, s:O}", "metadata", "total_size", (json_int_t)total, "weight_map", map);
        ok = write_json(path, index, err, errlen);
        json_decref(index);
    }
    if (ok) {
        json_t *config = config_json(&cm);
        snprintf(path, sizeof path, "%s/config.json", out);
        ok = write_json(path, config, err, errlen);
        json_decref(config);
    }
    if (ok)
        fprintf(stderr, "mcc: wrote %s (%s, iteration %lld, %d tensors in %d file%s, vocabulary %d of %lld rows)\n", out,
                cv_archs[cm.arch].name, (long long)ck->state.iteration, cm.n, nshards, nshards > 1 ? "s" : "",
                s->vocab_size, (long long)cm.m->globals[ir_global_find(cm.m, "embedding.word")].type.dims[0]);
    json_decref(map);
    free(st);
    free(shard);
    model_free(&cm);
    return ok;
}

/* --- mcc convert --from hf -------------------------------------------------------------------- */

/* Whether HF tensor name is a buffer no weight holds (GPT-2's causal mask, a rotary table), a tensor
 * of DeepSeek-V3's multi-token prediction layers (cm->mtp_layers after the model's), or a
 * tied model's copy of the embedding as lm_head. */
static bool hf_ignored(const cv_model *cm, const char *name)
{
    size_t n = strlen(name);
    int layer, at = 0;
    if (cm->mtp_layers > 0 && sscanf(name, "model.layers.%d.%n", &layer, &at) == 1 && at > 0 &&
        layer >= cm->s->num_layers && layer < cm->s->num_layers + cm->mtp_layers)
        return true; /* DeepSeek-V3's multi-token prediction layers */
    for (int i = 0; cv_archs[cm->arch].ignored[i]; i++) {
        size_t k = strlen(cv_archs[cm->arch].ignored[i]);
        if (n >= k && !strcmp(name + n - k, cv_archs[cm->arch].ignored[i]))
            return true;
    }
    return !strcmp(name, "lm_head.weight") && !cm->s->untie_embeddings_and_output_weights;
}

/* Reads HF tensor `name` of the files as f32 (widened), numel of them, or NULL with the error. */
static uint32_t *hf_read_whole(const hf_dir *h, const char *name, int64_t numel, char *err, size_t errlen)
{
    int f, e;
    if (!hf_find(h, name, &f, &e))
        return NULL;
    uint32_t *out = ir_numel(&h->files[f].t[e].type) == numel ? malloc((size_t)numel * sizeof *out) : NULL;
    if (out && !hf_read_f32(&h->files[f], e, out, err, errlen)) {
        free(out);
        return NULL;
    }
    return out;
}

/* A tied model's file may hold lm_head.weight too (transformers then ties it anyway): it must be
 * the embedding, or the weights are not the model config.json describes. */
static bool tied_head_same(const cv_model *cm, const hf_dir *h, char *err, size_t errlen)
{
    int f, e;
    if (cm->s->untie_embeddings_and_output_weights || !hf_find(h, "lm_head.weight", &f, &e))
        return true;
    int64_t n = (int64_t)cm->s->vocab_size * cm->s->hidden_size;
    const char *embedding = cm->arch == CV_GPT2 ? "transformer.wte.weight" : "model.embed_tokens.weight";
    err[0] = 0;
    uint32_t *head = hf_read_whole(h, "lm_head.weight", n, err, errlen), *word = head ? hf_read_whole(h, embedding, n, err, errlen) : NULL;
    bool same = word && memcmp(head, word, (size_t)n * sizeof *head) == 0;
    free(head);
    free(word);
    if (!same && err[0]) /* a read failed: its error */
        return false;
    return same || ck_fail(err, errlen, "%s: tensor lm_head.weight is not the embedding, but config.json's "
                                        "\"tie_word_embeddings\" ties them: set it false if the model has an output "
                                        "layer of its own", h->files[f].path);
}

/* Checks the HF files against the model's rules before a byte is read: every rule's tensor there
 * with config.json's shape, and no tensor the model has not. */
static bool check_hf(const cv_model *cm, const hf_dir *h, const char *dir, char *err, size_t errlen)
{
    for (int i = 0; i < cm->n; i++) {
        const cv_rule *r = &cm->r[i];
        int f, e;
        if (!hf_find(h, r->hf, &f, &e))
            return ck_fail(err, errlen, "%s: no tensor %s in %s: a %s of config.json's sizes has it; the files are "
                                        "incomplete or of another model", dir, r->hf,
                           h->nfiles == 1 ? h->file_names[0] : "the files model.safetensors.index.json names",
                           cv_archs[cm->arch].name);
        const ir_type *t = &h->files[f].t[e].type;
        bool same = t->ndim == r->hf_type.ndim;
        for (int d = 0; same && d < t->ndim; d++)
            same = t->dims[d] == r->hf_type.dims[d];
        if (!same) {
            char a[64], b[64];
            shape_str(t, a, sizeof a);
            shape_str(&r->hf_type, b, sizeof b);
            bool heads = strstr(r->hf, "self_attn.") != NULL;
            return ck_fail(err, errlen, "%s: tensor %s is %s but config.json makes it %s%s: the weights and config.json "
                                        "are of different models", h->files[f].path, r->hf, a, b,
                           heads ? " (heads x head_dim: num_attention_heads or num_key_value_heads, and head_dim, "
                                   "else hidden_size / num_attention_heads)" : "");
        }
    }
    for (int f = 0; f < h->nfiles; f++)
        for (int e = 0; e < h->files[f].n; e++) {
            const char *name = h->files[f].t[e].name;
            bool known = hf_ignored(cm, name);
            for (int i = 0; !known && i < cm->n; i++)
                known = !strcmp(cm->r[i].hf, name) ||
                        (!strncmp(cm->r[i].hf, "transformer.", 12) && !strcmp(cm->r[i].hf + 12, name));
            if (!known)
                return ck_fail(err, errlen, "%s: tensor %s is not one of a %s of config.json's sizes: the weights and "
                                            "config.json are of different models", h->files[f].path, name,
                               cv_archs[cm->arch].name);
        }
    return tied_head_same(cm, h, err, errlen);
}

/* The import's tensors made one at a time as the checkpoint writer comes to them: parameter g is
 * gathered from the rules that hold it (first[g] .. first[g + 1] of by_global: a GPT-2 q from
 * c_attn's rows, an expert stack from its experts' tensors), one HF tensor read at a time. */
typedef struct {
    const cv_model *cm;
    const hf_dir *h;
    const int *global;              /* the checkpoint's tensor i: the model's global */
    int *first, *by_global;         /* the rules of each global, grouped */
} import_fill;

static bool fill_param(void *ctx, int i, void *buf, char *err, size_t errlen)
{
    const import_fill *im = ctx;
    int g = im->global[i];
    for (int k = im->first[g]; k < im->first[g + 1]; k++) {
        const cv_rule *r = &im->cm->r[im->by_global[k]];
        int f, e;
        uint32_t *mcc[3] = {0}, *hf = malloc(ir_bytes(&r->hf_type));
        for (int j = 0; j < r->nmcc; j++)
            mcc[j] = r->g[j] == g ? buf : NULL;
        bool ok = hf_find(im->h, r->hf, &f, &e) && hf_read_f32(&im->h->files[f], e, hf, err, errlen);
        if (ok)
            cv_copy(im->cm, r, mcc, hf, false);
        free(hf);
        if (!ok)
            return false;
    }
    return true;
}

/* Writes the weights as the checkpoint of iteration 0 on one rank, every tensor whole (what any
 * layout loads: train_rank --load DIR --finetune), each made from the HF files as it is written:
 * no more than one parameter and one HF tensor in memory (a 70B import needs no 280 GB). */
static bool write_checkpoint(const cv_model *cm, const hf_dir *h, const char *dir, char *err, size_t errlen)
{
    int n = 0, ng = cm->m->nglobals, degree[IR_NUM_AXES], coord[IR_NUM_AXES] = {0};
    for (int a = 0; a < IR_NUM_AXES; a++)
        degree[a] = 1;
    import_fill im = {cm, h, NULL, calloc((size_t)ng + 2, sizeof(int)), NULL};
    int total = 0, *global = calloc((size_t)ng + 1, sizeof *global), *at = calloc((size_t)ng + 1, sizeof *at);
    for (int i = 0; i < cm->n; i++) /* count each global's rules, then place them */
        for (int j = 0; j < cm->r[i].nmcc; j++)
            im.first[cm->r[i].g[j] + 1]++, total++;
    for (int g = 0; g < ng; g++)
        im.first[g + 1] += im.first[g];
    im.by_global = calloc((size_t)total + 1, sizeof *im.by_global);
    for (int i = 0; i < cm->n; i++)
        for (int j = 0; j < cm->r[i].nmcc; j++) {
            int g = cm->r[i].g[j];
            im.by_global[im.first[g] + at[g]++] = i;
        }
    im.global = global;
    ck_part *parts = calloc((size_t)ng + 1, sizeof *parts);
    ck_tensor *tensors = calloc((size_t)ng + 1, sizeof *tensors);
    for (int g = 0; g < ng; g++) {
        const ir_global *gl = &cm->m->globals[g];
        bool bias = gl->kind == IR_GLOBAL_EXPERT_BIAS && im.first[g] < im.first[g + 1]; /* DeepSeek-V3's */
        if (gl->kind != IR_GLOBAL_PARAM && !bias)
            continue;
        global[n] = g;
        parts[n] = (ck_part){gl->name, gl->type, NULL, {0}, fill_param, &im};
        tensors[n++] = (ck_tensor){gl->name, bias ? CK_ROLE_EXPERT_BIAS : CK_ROLE_PARAM, gl->name, gl->type};
    }
    char *model[2 * IR_CFG_COUNT]; /* the model's function, as train_rank's save records it */
    ck_state st = {.seed = (uint64_t)cm->s->seed, .ranks = 1, .nmodel = ck_model_of(cm->m, model), .model = model};
    memcpy(st.degree, degree, sizeof degree);
    uint64_t bytes;
    bool ok = ck_begin(dir, 0, err, errlen) &&
              ck_write_rank(dir, 0, 0, degree, coord, n, parts, &bytes, err, errlen) &&
              ck_commit(dir, &st, n, tensors, 0, err, errlen);
    free(parts);
    free(tensors);
    free(global);
    free(at);
    free(im.first);
    free(im.by_global);
    return ok;
}

static bool from_hf(const char *in, const char *ckdir, const char *spec_out, char *err, size_t errlen)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", in);
    json_error_t je;
    json_t *c = json_load_file(path, 0, &je);
    if (!c)
        return ck_fail(err, errlen, "%s: cannot read (%s): a Hugging Face model directory has config.json beside its "
                                    "safetensors (save_pretrained writes both)", path, je.text);
    cv_config k = {path, c, err, errlen, 0};
    cv_arch arch = CV_NUM_ARCHS;
    json_t *spec_json = config_arch(&k, &arch) ? spec_of_config(&k, arch) : NULL;
    json_decref(c);
    if (!spec_json)
        return false;
    bool ok = os_mkdirs(ckdir, err, errlen) && write_json(spec_out, spec_json, err, errlen);
    json_decref(spec_json);
    mcc_spec s;
    int rest[1], nrest = 0;
    char why[2048];
    if (ok && !(ok = mcc_spec_load(spec_out, 0, NULL, &s, rest, &nrest, why, sizeof why)))
        ck_fail(err, errlen, "%s converts to a spec mcc refuses: %s", path, why);
    if (!ok)
        return false;
    cv_model cm;
    if (!model_of(&s, spec_out, arch, &cm, err, errlen))
        return false;
    cm.mtp_layers = k.mtp_layers;
    hf_dir h = {0};
    ok = hf_open(&h, in, err, errlen) && check_hf(&cm, &h, in, err, errlen) &&
         write_checkpoint(&cm, &h, ckdir, err, errlen);
    if (ok)
        fprintf(stderr, "mcc: wrote %s (iteration 0, weights only) and %s from %s (%s, vocabulary %d padded to %d)\n",
                ckdir, spec_out, in, cv_archs[arch].name, s.vocab_size, s.padded_vocab_size);
    hf_close(&h);
    model_free(&cm);
    return ok;
}

/* --- the command line ------------------------------------------------------------------------ */

static void usage(FILE *out)
{
    fprintf(out, "  mcc convert --to hf CKPT_DIR OUT_DIR [--spec SPEC.json] [--<field> VALUE ...] [--iteration N] "
                 "[--max-shard-size BYTES] [--architecture NAME]\n  mcc convert --from hf IN_DIR CKPT_DIR [--spec-out SPEC.json]\n"
                 "  (mcc-convert ARGS, linked without the compiler, is mcc convert ARGS)\n");
}

static int usage_error(const char *msg)
{
    fprintf(stderr, "mcc: error: %s\n", msg);
    usage(stderr);
    return 2;
}

/* The spec flags of the model the manifest records (its IR_CFG_MODEL keys are spec fields but the
 * padded vocab_size; orig_vocab_size is the spec's vocab_size), into argv: a flag's name in buf,
 * its value the manifest's own text (a flag's true or false); returns their count. seq_length,
 * which the export does not use, is the model's context. */
static int manifest_flags(const ck_state *st, char **argv, char (*buf)[64])
{
    int n = 0;
    for (int i = 0; i < st->nmodel; i++) {
        const char *key = st->model[2 * i], *v = st->model[2 * i + 1];
        if (!strcmp(key, ir_cfgs[IR_CFG_ORIG_VOCAB_SIZE].key))
            key = "vocab_size";
        else if (!mcc_spec_is_field(key) || !strcmp(key, ir_cfgs[IR_CFG_VOCAB_SIZE].key))
            continue;
        bool flag = false;
        for (int k = 0; k < IR_CFG_COUNT; k++)
            flag |= !strcmp(ir_cfgs[k].key, key) && ir_cfgs[k].type == IR_CFGT_BOOL;
        snprintf(buf[n], sizeof buf[n], "--%s", key);
        for (char *p = buf[n] + 2; *p; p++)
            *p = *p == '_' ? '-' : *p;
        argv[n] = buf[n];
        argv[n + 1] = flag ? (strtoll(v, NULL, 10) ? "true" : "false") : (char *)v;
        n += 2;
        if (!strcmp(key, ir_cfgs[IR_CFG_MAX_POSITION_EMBEDDINGS].key)) {
            argv[n] = "--seq-length";
            argv[n + 1] = (char *)v;
            n += 2;
        }
    }
    return n;
}

/* The spec of the export: --spec's with the flags, or (no --spec) the model the manifest records,
 * the flags over it (a flag that changes the model is then refused by check_model, by its field). */
static bool export_spec(const ck_reader *ck, const char *spec, int nflags, char **flags, mcc_spec *s, char *err,
                        size_t errlen)
{
    bool recorded = ck_model_recorded(&ck->state);
    if (!spec && !recorded)
        return ck_fail(err, errlen, "%s/manifest.json (an earlier mcc's) records the model's shapes alone, not its "
                                    "norm epsilon, rope base, heads or vocabulary before padding: give --spec SPEC.json, "
                                    "the spec (and flags) the checkpoint was trained with", ck->dir);
    if (spec && !recorded)
        fprintf(stderr, "mcc: note: %s/manifest.json (an earlier mcc's) records the model's shapes alone: its norm "
                        "epsilon, rope base, heads and vocabulary before padding are %s's\n", ck->dir, spec);
    int most = (spec ? 0 : 2 * ck->state.nmodel + 2) + nflags;
    char **argv = calloc((size_t)most + 1, sizeof *argv), (*buf)[64] = calloc((size_t)most + 1, sizeof *buf);
    int *rest = calloc((size_t)most + 1, sizeof *rest), nrest = 0;
    int n = spec ? 0 : manifest_flags(&ck->state, argv, buf);
    for (int k = 0; k < nflags; k++)
        argv[n + k] = flags[k];
    char why[4096];
    bool ok = spec ? mcc_spec_load(spec, nflags, flags, s, rest, &nrest, err, errlen)
                   : mcc_spec_load_fields(n + nflags, argv, s, rest, &nrest, why, sizeof why) ||
                         ck_fail(err, errlen, "%s/manifest.json's model with the flags given: %s", ck->dir, why);
    if (ok && nrest) {
        static const char *const own[] = {"--spec", "--iteration", "--max-shard-size", "--architecture", NULL};
        const char *flag = argv[rest[0]], *near = mcc_spec_flag_near(flag, own);
        ok = ck_fail(err, errlen, "unknown flag '%s' for mcc convert --to hf%s%s%s", flag, near ? ": did you mean " : "",
                     near ? near : "",
                     near ? "?" : " (its own: --spec, --iteration, --max-shard-size, --architecture; and the spec's "
                                  "fields)");
    }
    free(rest);
    free(argv);
    free(buf);
    return ok;
}

/* --architecture NAME: one of cv_archs, by its name or model_type. */
static bool arch_named(const char *name, cv_arch *arch, char *err, size_t errlen)
{
    for (int a = 0; name && a < CV_NUM_ARCHS; a++)
        if (!strcmp(name, cv_archs[a].name) || !strcmp(name, cv_archs[a].model_type))
            return *arch = (cv_arch)a, true;
    return ck_fail(err, errlen, "--architecture %s: mcc converts %s (or their model_type)", name ? name : "needs a name",
                   arch_list());
}

static int convert_to_hf(const char *ckdir, const char *out, int argc, char **argv)
{
    char err[4096];
    to_hf_opts o = {NULL, -1, 5000000000LL, CV_NUM_ARCHS}; /* transformers' default max_shard_size, "5GB" */
    char **spec_args = calloc((size_t)argc + 1, sizeof *spec_args);
    int nspec = 0;
    bool ok = true;
    for (int k = 0; ok && k < argc; k++) { /* our flags here; the rest are the spec's fields */
        const char *v = k + 1 < argc ? argv[k + 1] : NULL;
        if (!strcmp(argv[k], "--spec") && v)
            o.spec = argv[++k];
        else if (!strcmp(argv[k], "--iteration"))
            ok = cli_parse_int(argv[k], v, 0, LLONG_MAX, &o.iteration, err, sizeof err), k++;
        else if (!strcmp(argv[k], "--max-shard-size"))
            ok = cli_parse_int(argv[k], v, 1, LLONG_MAX, &o.max_shard_bytes, err, sizeof err), k++;
        else if (!strcmp(argv[k], "--architecture"))
            ok = arch_named(v, &o.arch, err, sizeof err), k++;
        else
            spec_args[nspec++] = argv[k];
    }
    ck_reader ck;
    bool opened = ok && (ok = ck_open(&ck, ckdir, o.iteration, NULL, err, sizeof err));
    mcc_spec s;
    if (opened) {
        ok = export_spec(&ck, o.spec, nspec, spec_args, &s, err, sizeof err);
        if (!o.spec)
            o.spec = ck.dir; /* the model's source in messages: the checkpoint's own */
    }
    ok = ok && to_hf(&ck, out, &s, &o, err, sizeof err);
    if (opened)
        ck_close(&ck);
    free(spec_args);
    return ok ? 0 : usage_error(err);
}

int mcc_convert_main(int argc, char **argv)
{
    if (argc == 1 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"))) /* mcc-convert --help */
        return printf("usage:\n"), usage(stdout), 0;
    if (argc < 4 || (strcmp(argv[0], "--to") && strcmp(argv[0], "--from")))
        return usage_error("expected --to hf CKPT_DIR OUT_DIR or --from hf IN_DIR CKPT_DIR");
    if (strcmp(argv[1], "hf")) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s %s: the format mcc converts is hf (Hugging Face transformers' model directory)",
                 argv[0], argv[1]);
        return usage_error(msg);
    }
    if (argv[2][0] == '-' || argv[3][0] == '-')
        return usage_error("the two directories come right after the format");
    if (!strcmp(argv[0], "--to"))
        return convert_to_hf(argv[2], argv[3], argc - 4, argv + 4);
    char err[4096], spec_out[4200];
    snprintf(spec_out, sizeof spec_out, "%s/spec.json", argv[3]);
    for (int k = 4; k < argc; k++) {
        if (!strcmp(argv[k], "--spec-out") && k + 1 < argc)
            snprintf(spec_out, sizeof spec_out, "%s", argv[++k]);
        else {
            snprintf(err, sizeof err, "unknown flag '%s' for mcc convert --from hf (its one flag: --spec-out SPEC.json)",
                     argv[k]);
            return usage_error(err);
        }
    }
    return from_hf(argv[2], argv[3], spec_out, err, sizeof err) ? 0 : usage_error(err);
}
