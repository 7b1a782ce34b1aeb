/* spec.c — reads SPEC.json (jansson), applies --flag overrides and validates the result into an
 * mcc_spec. Every field is described once, in spec_fields; JSON keys, flags, defaults, type and
 * range checks all come from that table. The Megatron-LM flags that are not fields (no-ops here,
 * other spellings of a field, refused ones) are described once too, in frontend/megatron_flags.c. */
#include "frontend/spec.h"

#include "common/cli.h"
#include "frontend/megatron_flags.h"
#include "ir/ir.h"
#include "passes/pp_schedule.h"

#include <assert.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { SEC_MODEL, SEC_PARALLEL, SEC_TRAINING, SEC_COUNT } spec_section;
static const char *const spec_section_names[SEC_COUNT] = {"model", "parallel", "training"};

/* K_INT, K_BOOL and K_ENUM are stored as integers of the member's size; K_NUM as double; K_SET (a
 * set of choices: a JSON array of names or a comma-separated string, the flag's value comma- or
 * space-separated as Megatron's nargs) as an int whose bit k is choices[k]; K_LAYERS (Megatron's
 * moe_layer_freq: an integer N, or a list of 0s and 1s, one a layer) as an mcc_layer_pattern; K_TEXT
 * (what no closed choice is, read by its consumer: a pipeline layout) as a char array. */
typedef enum { K_INT, K_NUM, K_BOOL, K_ENUM, K_SET, K_LAYERS, K_TEXT } spec_kind;
typedef enum { R_ANY, R_POS, R_NONNEG, R_UNIT, R_DROPOUT } spec_range; /* R_UNIT, R_DROPOUT: [0, 1) */
typedef enum { D_VALUE, D_REQUIRED, D_DERIVED } spec_default;    /* D_DERIVED: spec_derive */

typedef struct {
    spec_section sec;
    const char *key;            /* JSON key; the flag is "--" + key with '-' for '_' */
    const char *alias;          /* extra flag name, or NULL */
    spec_kind kind;
    size_t off, size;
    spec_range range;
    spec_default need;
    double def;                 /* for D_VALUE */
    const char *const *choices; /* K_ENUM, K_SET: names in enum (bit) order, NULL-terminated */
    const char *help;           /* one line of meaning, for `mcc compile --help` */
} spec_field;

_Static_assert(sizeof(mcc_norm) == sizeof(int) && sizeof(mcc_pos) == sizeof(int) &&
               sizeof(mcc_act) == sizeof(int) && sizeof(mcc_lr_style) == sizeof(int) &&
               sizeof(mcc_wsd_style) == sizeof(int) && sizeof(mcc_pp_sched) == sizeof(int) &&
               sizeof(mcc_moment_dtype) == sizeof(int) && sizeof(mcc_fp8_format) == sizeof(int) &&
               sizeof(mcc_fp8_recipe) == sizeof(int) && sizeof(mcc_amax_algo) == sizeof(int) &&
               sizeof(mcc_moe_score) == sizeof(int) && sizeof(mcc_moe_balance) == sizeof(int) &&
               sizeof(mcc_moe_drop) == sizeof(int) && sizeof(mcc_moe_router_dtype) == sizeof(int) &&
               sizeof(mcc_rope_type) == sizeof(int),
               "enum members are stored as int");
/* The choices the plan's config carries too: their words are the IR's (ir.h ir_choices), spelled
 * there once; the spec's enums follow the IR's (the moments' by ir_dtype: the config's words are
 * dtype names, the spec's Megatron's). */
#define SAME(a, b) ((int)(a) == (int)(b))
_Static_assert(SAME(MCC_NORM_RMSNORM, IR_NORM_RMSNORM) && SAME(MCC_POS_ROPE, IR_POS_ROPE) && SAME(MCC_ROPE_YARN, IR_ROPE_YARN) &&
               SAME(MCC_RECOMPUTE_ACTIVATIONS, IR_RECOMPUTE_ACTIVATIONS) && SAME(MCC_RECOMPUTE_FULL, IR_RECOMPUTE_FULL) &&
               SAME(MCC_RECOMPUTE_UNIFORM, IR_RECOMPUTE_UNIFORM) && SAME(MCC_RECOMPUTE_BLOCK, IR_RECOMPUTE_BLOCK) &&
               SAME(MCC_CP_ALL_GATHER, IR_CP_ALL_GATHER) && SAME(MCC_CP_A2A, IR_CP_A2A) &&
               SAME(MCC_LR_INVERSE_SQRT, IR_LR_INVERSE_SQRT) && SAME(MCC_LR_WSD, IR_LR_WSD) &&
               SAME(MCC_WSD_MINUS_SQRT, IR_WSD_MINUS_SQRT) && SAME(MCC_PP_SCHED_INTERLEAVED, IR_PP_INTERLEAVED) &&
               SAME(MCC_PP_SCHED_ZB_H1, IR_PP_ZB_H1) && SAME(MCC_FP8_HYBRID, IR_FP8_FORMAT_HYBRID) &&
               SAME(MCC_FP8_E4M3, IR_FP8_FORMAT_E4M3) && SAME(MCC_FP8_TENSORWISE, IR_FP8_TENSORWISE) &&
               SAME(MCC_FP8_BLOCKWISE, IR_FP8_BLOCKWISE) &&
               SAME(MCC_AMAX_MAX, IR_AMAX_MAX) && SAME(MCC_MOE_SIGMOID, IR_MOE_SIGMOID) &&
               SAME(MCC_MOMENT_FP32, IR_F32) && SAME(MCC_MOMENT_BF16, IR_BF16) && MCC_ACT_SWIGLU == 1,
               "the spec's enums follow the IR's choices");
#undef SAME
#define recompute_module_names ir_recompute_module_words /* the IR's words (ir.h), MCC_RM_'s order */
_Static_assert(MCC_RM_CORE_ATTN == 1 << IR_RM_CORE_ATTN && MCC_RM_LAYERNORM == 1 << IR_RM_LAYERNORM &&
               MCC_RM_MLA_UP_PROJ == 1 << IR_RM_MLA_UP_PROJ && MCC_RM_MLP_ACT == 1 << IR_RM_MLP_ACT,
               "the spec's recompute_modules flags are the IR's words' bits");
static const char *const sp_split_names[] = {"sequence", "batch", NULL};                          /* ORDER mcc_sp_split */
static const char *const moment_dtype_names[] = {"fp32", "bf16", NULL}; /* ORDER mcc_moment_dtype: Megatron's words */
static const char *const spec_moe_balances[] = {"aux_loss", "seq_aux_loss", "sinkhorn", "none", NULL}; /* ORDER mcc_moe_balance */
static const char *const spec_moe_drops[] = {"probs", "position", NULL};             /* ORDER mcc_moe_drop */
static const char *const spec_router_dtypes[] = {"none", "fp32", "fp64", NULL};     /* ORDER mcc_moe_router_dtype */

#define FIELD(sec, key, member, alias, kind, range, need, def, choices, help)                     \
    {sec, key, alias, kind, offsetof(mcc_spec, member), sizeof(((mcc_spec *)0)->member), range, \
     need, def, choices, help}
#define MODEL(m, kind, range, need, def, ch, help) FIELD(SEC_MODEL, #m, m, NULL, kind, range, need, def, ch, help)
#define TRAIN(m, kind, range, need, def, help) FIELD(SEC_TRAINING, #m, m, NULL, kind, range, need, def, NULL, help)
#define PAR(m, alias, help) FIELD(SEC_PARALLEL, #m, m, alias, K_INT, R_POS, D_VALUE, 1, NULL, help)
#define PAR_BOOL(m, help) FIELD(SEC_PARALLEL, #m, m, NULL, K_BOOL, R_ANY, D_VALUE, false, NULL, help)

static const spec_field spec_fields[] = {
    MODEL(num_layers, K_INT, R_POS, D_REQUIRED, 0, NULL, "transformer layers"),
    MODEL(hidden_size, K_INT, R_POS, D_REQUIRED, 0, NULL, "width of the residual stream"),
    MODEL(num_attention_heads, K_INT, R_POS, D_REQUIRED, 0, NULL, "attention (query) heads"),
    MODEL(num_query_groups, K_INT, R_POS, D_DERIVED, 0, NULL,
          "key/value heads, fewer than the heads for grouped-query attention (default: num_attention_heads)"),
    MODEL(kv_channels, K_INT, R_POS, D_DERIVED, 0, NULL,
          "each head's width (default: hidden_size / num_attention_heads; Qwen3 and Mistral-Nemo set their own)"),
    MODEL(ffn_hidden_size, K_INT, R_POS, D_DERIVED, 0, NULL,
          "MLP width (default: 4 * hidden_size; with swiglu 8 * hidden_size / 3 down to a multiple of 64)"),
    MODEL(seq_length, K_INT, R_POS, D_REQUIRED, 0, NULL, "tokens per sample"),
    MODEL(max_position_embeddings, K_INT, R_POS, D_DERIVED, 0, NULL,
          "rows of the learned position table (default: seq_length)"),
    MODEL(vocab_size, K_INT, R_POS, D_REQUIRED, 0, NULL,
          "the tokenizer's vocabulary (ByteLevel 257, GPT-2's BPE 50257), before padding"),
    MODEL(make_vocab_size_divisible_by, K_INT, R_POS, D_VALUE, 128, NULL,
          "pad the vocabulary to a multiple of this * tensor_model_parallel_size, as Megatron does"),
    MODEL(normalization, K_ENUM, R_ANY, D_VALUE, MCC_NORM_LAYERNORM, ir_norm_words,
          "the norm before attention, the MLP and the output"),
    MODEL(position_embedding_type, K_ENUM, R_ANY, D_VALUE, MCC_POS_LEARNED, ir_pos_words,
          "a learned position table, or rotary embeddings of queries and keys"),
    FIELD(SEC_MODEL, "swiglu", activation, NULL, K_BOOL, R_ANY, D_VALUE, MCC_ACT_GELU, NULL,
          "a SwiGLU MLP (silu(gate) * up) instead of GELU"),
    MODEL(untie_embeddings_and_output_weights, K_BOOL, R_ANY, D_VALUE, false, NULL,
          "an output matrix of its own instead of the word embedding's"),
    MODEL(add_bias_linear, K_BOOL, R_ANY, D_VALUE, true, NULL, "biases in every linear layer (LLaMA: false)"),
    MODEL(add_qkv_bias, K_BOOL, R_ANY, D_VALUE, false, NULL,
          "biases on the q, k and v projections even without add_bias_linear (Qwen2, Qwen2.5)"),
    MODEL(qk_layernorm, K_BOOL, R_ANY, D_VALUE, false, NULL,
          "the model's norm over each head of q and k before rope, a weight of kv_channels each (Qwen3, OLMo 2)"),
    MODEL(squared_relu, K_BOOL, R_ANY, D_VALUE, false, NULL,
          "the MLP's activation relu(x)^2 on its one up-projection, no gate, instead of GELU (Nemotron-4)"),
    MODEL(apply_layernorm_1p, K_BOOL, R_ANY, D_VALUE, false, NULL,
          "each norm's weight stored zero-centred (initialised 0), the norm scaling by 1 + weight (Nemotron-4; "
          "Megatron's name, RMSNorm's too, as Transformer Engine's zero_centered_gamma)"),
    MODEL(multi_latent_attention, K_BOOL, R_ANY, D_VALUE, false, NULL,
          "DeepSeek's multi-latent attention: q and the keys and values through low-rank latents, each head's q and k "
          "a part without position and a rope part, k's shared by the heads (DeepSeek-V2, V3)"),
    MODEL(q_lora_rank, K_INT, R_NONNEG, D_VALUE, 0, NULL,
          "multi-latent attention: the width of q's latent (0: q projected from the hidden state at once, Megatron's "
          "None)"),
    MODEL(kv_lora_rank, K_INT, R_POS, D_VALUE, 32, NULL, "multi-latent attention: the width of the keys' and values' latent"),
    MODEL(qk_head_dim, K_INT, R_POS, D_VALUE, 128, NULL,
          "multi-latent attention: each head's q and k channels without position (the softmax scale is 1 / sqrt(this + "
          "qk_pos_emb_head_dim))"),
    MODEL(qk_pos_emb_head_dim, K_INT, R_POS, D_VALUE, 64, NULL,
          "multi-latent attention: each head's q and k channels turned by rope (k's one part shared by the heads)"),
    MODEL(v_head_dim, K_INT, R_POS, D_VALUE, 128, NULL, "multi-latent attention: each head's value channels"),
    MODEL(mtp_num_layers, K_INT, R_NONNEG, D_VALUE, 0, NULL,
          "multi-token prediction (DeepSeek-V3): depths after the model, depth k predicting the token k + 1 ahead "
          "from depth k - 1's hidden states beside token t + k's embedding (the embedding and output head "
          "shared), through a layer of the last layer's kind; 0: none"),
    MODEL(mtp_loss_scaling_factor, K_NUM, R_NONNEG, D_VALUE, 0.1, NULL,
          "with mtp_num_layers: the weight of the depths' losses, this / mtp_num_layers times their sum joining "
          "the objective (the logged lm loss is the next token's alone)"),
    MODEL(init_method_std, K_NUM, R_POS, D_VALUE, 0.02, NULL,
          "std of the normal initialization (output projections: / sqrt(2 * num_layers))"),
    MODEL(norm_epsilon, K_NUM, R_POS, D_VALUE, 1e-5, NULL, "epsilon of the norms"),
    MODEL(rotary_base, K_NUM, R_POS, D_VALUE, 10000, NULL, "rope's base period (LLaMA 3: 500000)"),
    MODEL(rotary_percent, K_NUM, R_POS, D_VALUE, 1, NULL,
          "the share of each head's channels rope turns: the first int(kv_channels * this), the rest passed "
          "through (Nemotron-4: 0.5)"),
    MODEL(use_rope_scaling, K_BOOL, R_ANY, D_VALUE, false, NULL,
          "LLaMA 3.1's rope scaling (HF's rope_type llama3): frequencies of wavelength above 8192 positions divided "
          "by rope_scaling_factor, those below 2048 kept, a smooth blend between (Megatron's low_freq_factor 1, "
          "high_freq_factor 4, original_max_position_embeddings 8192)"),
    MODEL(rope_scaling_factor, K_NUM, R_POS, D_VALUE, 8, NULL,
          "with use_rope_scaling: the factor the low frequencies are divided by (LLaMA 3.1: 8, 3.2: 32)"),
    MODEL(rope_type, K_ENUM, R_ANY, D_VALUE, MCC_ROPE_PLAIN, ir_rope_type_words,
          "rope's frequencies: rope (plain, or LLaMA 3.1's with use_rope_scaling) or yarn (YaRN's, DeepSeek-V3's "
          "long-context rope: rotary_scaling_factor and the yarn_ and mscale fields; the default under "
          "multi_latent_attention, as Megatron's MLA, where mscale(f, mscale_all_dim)^2 scales the softmax too)"),
    MODEL(rotary_scaling_factor, K_NUM, R_POS, D_VALUE, 1, NULL,
          "with rope_type yarn: the factor the low frequencies are divided by (DeepSeek-V3: 40)"),
    MODEL(yarn_original_max_position_embeddings, K_INT, R_POS, D_VALUE, 4096, NULL,
          "with rope_type yarn: the context the model was first trained at (DeepSeek-V3: 4096)"),
    MODEL(yarn_beta_fast, K_NUM, R_POS, D_VALUE, 32, NULL,
          "with rope_type yarn: a frequency turning more than this often in the original context is kept"),
    MODEL(yarn_beta_slow, K_NUM, R_POS, D_VALUE, 1, NULL,
          "with rope_type yarn: one turning less often than this is divided by rotary_scaling_factor, a linear "
          "ramp between"),
    MODEL(mscale, K_NUM, R_NONNEG, D_VALUE, 1, NULL,
          "with rope_type yarn: rope's cos and sin are scaled by mscale(f, mscale) / mscale(f, mscale_all_dim), "
          "mscale(f, m) = 0.1 m ln f + 1, f = rotary_scaling_factor"),
    MODEL(mscale_all_dim, K_NUM, R_NONNEG, D_VALUE, 0, NULL,
          "with rope_type yarn: see mscale (DeepSeek-V3: both 1, so rope is a pure rotation)"),
    MODEL(attention_dropout, K_NUM, R_DROPOUT, D_VALUE, 0, NULL,
          "dropout probability of the attention probabilities (Megatron's default 0.1)"),
    MODEL(hidden_dropout, K_NUM, R_DROPOUT, D_VALUE, 0, NULL,
          "dropout of the embedding output and of each block's output (Megatron's default 0.1)"),
    /* mixture of experts (Megatron's names and defaults; frontend/model.c's MoE block) */
    MODEL(num_experts, K_INT, R_NONNEG, D_VALUE, 0, NULL,
          "routed experts of each MoE layer (0: a dense model, Megatron's None)"),
    MODEL(moe_ffn_hidden_size, K_INT, R_POS, D_DERIVED, 0, NULL, "each expert's MLP width (default: ffn_hidden_size)"),
    MODEL(moe_router_topk, K_INT, R_POS, D_VALUE, 2, NULL, "experts each token is routed to"),
    MODEL(moe_router_score_function, K_ENUM, R_ANY, D_VALUE, MCC_MOE_SOFTMAX, ir_moe_score_words,
          "the router's scores: softmax, or sigmoid (normalised over the chosen experts when topk > 1)"),
    MODEL(moe_router_pre_softmax, K_BOOL, R_ANY, D_VALUE, false, NULL,
          "softmax: choose the top k of the probabilities over all experts (default: softmax over the top-k logits)"),
    MODEL(moe_router_topk_scaling_factor, K_NUM, R_NONNEG, D_VALUE, 0, NULL,
          "the routing weights times this (0: not scaled)"),
    MODEL(moe_router_num_groups, K_INT, R_NONNEG, D_VALUE, 0, NULL,
          "group-limited routing: the experts as this many equal groups (DeepSeek-V3's nodes; 0: none)"),
    MODEL(moe_router_group_topk, K_INT, R_NONNEG, D_VALUE, 0, NULL,
          "group-limited routing: each token's experts chosen within its best this many groups, a group scored by "
          "the sum of its top moe_router_topk/moe_router_group_topk scores (0: none)"),
    MODEL(moe_router_dtype, K_ENUM, R_ANY, D_VALUE, MCC_ROUTER_DTYPE_NONE, spec_router_dtypes,
          "the router's GEMM and routing weights in fp32 (the combine then in the activations' dtype), or none: "
          "in the activations' dtype (bf16 on the GPU); fp64 is refused"),
    MODEL(moe_router_load_balancing_type, K_ENUM, R_ANY, D_VALUE, MCC_MOE_AUX_LOSS, spec_moe_balances,
          "aux_loss: the Switch load-balancing loss over each micro-batch, weighted by moe_aux_loss_coeff; "
          "seq_aux_loss: that loss over each sequence, averaged (DeepSeek's); none"),
    MODEL(moe_aux_loss_coeff, K_NUM, R_NONNEG, D_VALUE, 0, NULL, "the load-balancing loss's weight in the objective"),
    MODEL(moe_z_loss_coeff, K_NUM, R_NONNEG, D_VALUE, 0, NULL,
          "the router z loss's weight (mean squared log-sum-exp of the logits; 0: none)"),
    MODEL(moe_router_enable_expert_bias, K_BOOL, R_ANY, D_VALUE, false, NULL,
          "aux-loss-free balancing: a per-expert bias on the scores for choosing only, updated each step from "
          "the tokens per expert (sigmoid scores)"),
    MODEL(moe_router_bias_update_rate, K_NUM, R_NONNEG, D_VALUE, 1e-3, NULL,
          "with expert bias: its step per iteration, against each expert's load"),
    MODEL(moe_router_force_load_balancing, K_BOOL, R_ANY, D_VALUE, false, NULL,
          "for benchmarks: each training step routes by standard normal logits in place of the router's "
          "(drawn per token, so every layout draws the same), its gradient passed straight through to the "
          "router's (Megatron's RandomSTE); evaluation routes by the learned logits"),
    MODEL(moe_expert_capacity_factor, K_NUM, R_NONNEG, D_VALUE, 0, NULL,
          "tokens an expert takes, as a multiple of the even share; more are dropped (0: dropless)"),
    MODEL(moe_token_drop_policy, K_ENUM, R_ANY, D_VALUE, MCC_MOE_DROP_PROBS, spec_moe_drops,
          "with a capacity factor: drop the lowest-weight tokens (probs) or the last ones (position)"),
    MODEL(moe_pad_expert_input_to_capacity, K_BOOL, R_ANY, D_VALUE, false, NULL,
          "with a capacity factor: every expert's input padded to its capacity (zero-weight rows: the same numbers)"),
    MODEL(moe_shared_expert_intermediate_size, K_INT, R_NONNEG, D_VALUE, 0, NULL,
          "a shared expert of this width that every token passes through too (0: none)"),
    MODEL(moe_shared_expert_overlap, K_BOOL, R_ANY, D_VALUE, false, NULL,
          "the shared expert's work beside expert parallelism's all-to-alls (on the GPU's comm stream)"),
    MODEL(moe_layer_freq, K_LAYERS, R_ANY, D_VALUE, 1, NULL,
          "which layers are MoE: N (every N-th, from layer 0) or a list of 0/1 a layer, e.g. [0,0,0,1,1] or "
          "\"([0]*3+[1]*58)\" as Megatron's"),
    PAR(tensor_model_parallel_size, "tp", "tensor-parallel ranks: heads, MLP and vocabulary split over them"),
    PAR(pipeline_model_parallel_size, "pp", "pipeline stages: the layers split into that many stages, 1F1B"),
#define PP_INT(m, help) FIELD(SEC_PARALLEL, #m, m, NULL, K_INT, R_NONNEG, D_VALUE, 0, NULL, help)
    PP_INT(decoder_first_pipeline_num_layers, "layers of the first pipeline rank, the rest even over the others "
                                              "(0: the even split)"),
    PP_INT(decoder_last_pipeline_num_layers, "layers of the last pipeline rank (0: the even split)"),
    PAR_BOOL(account_for_embedding_in_pipeline_split, "count the embedding as a layer of the first stage in the split"),
    PAR_BOOL(account_for_loss_in_pipeline_split, "count the output head and loss as a layer of the last stage"),
    PP_INT(num_layers_per_virtual_pipeline_stage, "interleaved pipeline: layers per virtual stage (0: not given)"),
    FIELD(SEC_PARALLEL, "pipeline_model_parallel_layout", pipeline_model_parallel_layout, NULL, K_TEXT, R_ANY, D_VALUE,
          0, NULL, "every virtual stage's layers, Megatron's: E embedding, t decoder layer, m multi-token depth, L "
          "loss, '|' between stages (stage i on rank i mod pp), x*N and (...)*N repeat, e.g. \"Et|(tt|)*30mL\" "
          "(empty: the split above; passes/pp_schedule.h)"),
    PP_INT(num_virtual_stages_per_pipeline_rank, "interleaved pipeline: virtual stages per rank (0: not given, 1)"),
#undef PP_INT
    FIELD(SEC_PARALLEL, "pipeline_schedule", pipeline_schedule, NULL, K_ENUM, R_ANY, D_VALUE, MCC_PP_SCHED_AUTO,
          ir_pp_sched_words, "the pipeline's order of passes (auto: the fastest by the cost model that the virtual "
          "stages allow)"),
    PAR(data_parallel_size, "dp", "data-parallel replicas; the world size is tp * cp * dp * pp"),
    FIELD(SEC_PARALLEL, "world_size", world_size, NULL, K_INT, R_NONNEG, D_VALUE, 0, NULL,
          "the ranks the job starts (torchrun's nnodes x nproc_per_node): data_parallel_size derived from it as "
          "world_size / (tp * cp * pp), as Megatron derives it at launch (0: data_parallel_size as given)"),
    FIELD(SEC_PARALLEL, "nproc_per_node", nproc_per_node, NULL, K_INT, R_NONNEG, D_VALUE, 0, NULL,
          "torchrun's: the ranks (GPUs) of one node; with nnodes it makes world_size (0: not given)"),
    FIELD(SEC_PARALLEL, "nnodes", nnodes, NULL, K_INT, R_POS, D_VALUE, 1, NULL,
          "torchrun's: the nodes the job spans, nproc_per_node ranks each"),
    PAR(context_parallel_size, "cp", "context-parallel ranks: the sequence split over them in 2 cp chunks, rank r "
        "holding chunks r and 2 cp - 1 - r (Megatron's causal balance)"),
    FIELD(SEC_PARALLEL, "cp_comm_type", cp_comm_type, NULL, K_ENUM, R_ANY, D_VALUE, MCC_CP_P2P, ir_cp_comm_words,
          "how attention reaches the other cp ranks' keys and values: p2p (ring attention), all_gather, or a2a "
          "(Ulysses: heads and kv heads split over cp around attention)"),
    PAR(expert_model_parallel_size, NULL, "expert-parallel ranks: each MoE layer's experts split over them (divides "
        "data_parallel_size and num_experts)"),
    FIELD(SEC_PARALLEL, "expert_tensor_parallel_size", expert_tensor_parallel_size, NULL, K_INT, R_POS, D_DERIVED, 0,
          NULL, "tensor-parallel ranks of each expert (default: tensor_model_parallel_size, the one value built)"),
    PAR_BOOL(use_distributed_optimizer, "ZeRO-1: optimizer state and fp32 masters sharded over dp"),
    PAR_BOOL(sequence_parallel, "activations outside attention and MLP split over tp along the sequence"),
    /* batch: sequence parallelism's activations split by whole batch rows ([B/tp,T,...]), which in
     * mcc's [B,T,...] layout makes each all-gather and reduce-scatter one contiguous block (the
     * sequence split is one block per batch row); needs micro_batch_size % tp == 0 */
    FIELD(SEC_PARALLEL, "sequence_parallel_split", sequence_parallel_split, NULL, K_ENUM, R_ANY, D_VALUE,
          MCC_SP_SPLIT_SEQUENCE, sp_split_names,
          "split sequence parallelism's activations along the sequence (Megatron's) or by batch rows"),
    /* Megatron's name: the all-gathers and reduce-scatters of sequence parallelism fused with their
     * matmuls (fusion.c); a no-op without sequence_parallel */
    PAR_BOOL(tp_comm_overlap, "sequence parallelism's collectives fused with their matmuls"),
    /* the micro-batch's two halves as two chains whose sequence-parallel collectives run beside the
     * other's computation (comm_overlap.c); a no-op without sequence_parallel */
    PAR_BOOL(tp_comm_interleave, "two half micro-batches, each one's collectives beside the other's work"),
    FIELD(SEC_PARALLEL, "ddp_bucket_size", ddp_bucket_size, NULL, K_INT, R_POS, D_VALUE, 40000000, NULL,
          "gradient elements per data-parallel all-reduce"),
    PAR_BOOL(overlap_grad_reduce, "all-reduce each gradient bucket inside the backward, once it is final"),
    PAR_BOOL(grad_reduce_in_bf16, "gradients reduced across data-parallel ranks, and held in their buffers, in bf16 "
             "instead of fp32 (Megatron's; AdamW still updates fp32 masters; the CPU target rounds its gradient "
             "buffers to bf16 as the GPU's)"),
    TRAIN(micro_batch_size, K_INT, R_POS, D_VALUE, 1, "samples per rank in one forward and backward"),
    TRAIN(global_batch_size, K_INT, R_POS, D_DERIVED, 0,
          "samples per optimizer step, the rest accumulated (default: micro_batch_size * data_parallel_size)"),
    TRAIN(train_iters, K_INT, R_POS, D_VALUE, 10, "optimizer steps (train_rank's --train-iters default)"),
    TRAIN(lr, K_NUM, R_NONNEG, D_VALUE, 3e-4, "peak learning rate"),
    TRAIN(min_lr, K_NUM, R_NONNEG, D_VALUE, 0, "the learning rate the decay ends at"),
    FIELD(SEC_TRAINING, "lr_decay_style", lr_decay_style, NULL, K_ENUM, R_ANY, D_VALUE, MCC_LR_COSINE,
          ir_lr_style_words, "the learning rate's decay after warmup"),
    TRAIN(lr_warmup_iters, K_INT, R_NONNEG, D_VALUE, 0, "iterations of linear warmup"),
    TRAIN(lr_warmup_fraction, K_NUM, R_UNIT, D_VALUE, 0, "warmup as a fraction of the decay iterations instead"),
    TRAIN(lr_decay_iters, K_INT, R_NONNEG, D_VALUE, 0, "iterations the decay spans (0: train_iters)"),
    FIELD(SEC_TRAINING, "lr_wsd_decay_style", lr_wsd_decay_style, NULL, K_ENUM, R_ANY, D_VALUE, MCC_WSD_EXPONENTIAL,
          ir_wsd_style_words, "WSD: the shape of its final decay"),
    TRAIN(lr_wsd_decay_iters, K_INT, R_NONNEG, D_VALUE, 0, "WSD: the final iterations that decay"),
    /* Megatron's sample-based training: the run and the schedule's spans counted in samples, each
     * iteration advancing them by the global batch (spec_derive_schedule) */
    TRAIN(train_samples, K_INT, R_NONNEG, D_VALUE, 0,
          "samples to train on instead of train_iters: train_iters = train_samples / global_batch_size, "
          "the lr schedule then counted in samples (0: iteration-based)"),
    TRAIN(lr_warmup_samples, K_INT, R_NONNEG, D_VALUE, 0, "with train_samples: samples of linear warmup"),
    TRAIN(lr_decay_samples, K_INT, R_NONNEG, D_VALUE, 0,
          "with train_samples: samples the decay spans (0: train_samples)"),
    TRAIN(lr_wsd_decay_samples, K_INT, R_NONNEG, D_VALUE, 0, "with train_samples: WSD's final samples that decay"),
    TRAIN(lr_warmup_init, K_NUM, R_NONNEG, D_VALUE, 0, "the learning rate warmup starts from (at most lr)"),
    TRAIN(decoupled_lr, K_NUM, R_NONNEG, D_DERIVED, 0,
          "peak learning rate of the input embedding and the output layer, scheduled as lr is (default: lr)"),
    TRAIN(decoupled_min_lr, K_NUM, R_NONNEG, D_DERIVED, 0,
          "with decoupled_lr: the learning rate their decay ends at (default: min_lr)"),
    TRAIN(weight_decay, K_NUM, R_NONNEG, D_VALUE, 0.01, "AdamW's decoupled weight decay (none on biases and norms)"),
    TRAIN(clip_grad, K_NUM, R_NONNEG, D_VALUE, 1.0, "global gradient-norm clip (0: none, as in Megatron)"),
    TRAIN(adam_beta1, K_NUM, R_UNIT, D_VALUE, 0.9, "Adam's decay of the gradient's mean"),
    TRAIN(adam_beta2, K_NUM, R_UNIT, D_VALUE, 0.999, "Adam's decay of the gradient's square"),
    TRAIN(adam_eps, K_NUM, R_POS, D_VALUE, 1e-8, "Adam's epsilon"),
    FIELD(SEC_TRAINING, "optimizer_cpu_offload", optimizer_cpu_offload, "cpu_optimizer", K_BOOL, R_ANY, D_VALUE, false,
          NULL, "fp32 masters and Adam state in pinned host memory, AdamW run by the host (Megatron's name)"),
    TRAIN(optimizer_offload_fraction, K_NUM, R_POS, D_VALUE, 1.0,
          "with optimizer_cpu_offload: the fraction (0, 1] of the parameters' elements offloaded, first layers first"),
    TRAIN(overlap_cpu_optimizer_d2h_h2d, K_BOOL, R_ANY, D_VALUE, false,
          "with optimizer_cpu_offload: gradient copies down, the host step and parameter copies up overlap"),
    TRAIN(use_precision_aware_optimizer, K_BOOL, R_ANY, D_VALUE, false,
          "Adam's moments in the dtypes exp_avg_dtype and exp_avg_sq_dtype name (arithmetic in fp32)"),
    FIELD(SEC_TRAINING, "exp_avg_dtype", exp_avg_dtype, NULL, K_ENUM, R_ANY, D_VALUE, MCC_MOMENT_FP32,
          moment_dtype_names, "with use_precision_aware_optimizer: the dtype Adam's first moment is stored in"),
    FIELD(SEC_TRAINING, "exp_avg_sq_dtype", exp_avg_sq_dtype, NULL, K_ENUM, R_ANY, D_VALUE, MCC_MOMENT_FP32,
          moment_dtype_names, "with use_precision_aware_optimizer: the dtype Adam's second moment is stored in"),
    TRAIN(store_param_remainders, K_BOOL, R_ANY, D_VALUE, true,
          "with use_precision_aware_optimizer and bf16 parameters: each fp32 master kept as its bf16 working "
          "copy (high 16 bits) and a 16-bit remainder, 2 bytes a parameter less (--no-store-param-remainders: "
          "whole fp32 masters)"),
    TRAIN(seed, K_INT, R_NONNEG, D_VALUE, 1234, "of the initialization, the data order and the dropout masks"),
    TRAIN(eval_interval, K_INT, R_POS, D_VALUE, 1000, /* Megatron's defaults */
          "validate every N iterations (train_rank's --eval-interval default)"),
    TRAIN(eval_iters, K_INT, R_NONNEG, D_VALUE, 100,
          "global batches per validation, 0: none (train_rank's --eval-iters default)"),
    TRAIN(log_interval, K_INT, R_POS, D_VALUE, 1,
          "a log line every N iterations (train_rank's --log-interval default)"),
    /* Megatron's recompute fields (passes/recompute.c): selective recomputes the outputs of the
     * modules' ops from inputs the backward keeps anyway; full replays a layer's whole forward from
     * its input. activations: the older spelling of selective with recompute_modules mlp_act */
    FIELD(SEC_TRAINING, "recompute_granularity", recompute_granularity, NULL, K_ENUM, R_ANY, D_VALUE,
          MCC_RECOMPUTE_NONE, ir_recompute_words,
          "none; selective: the ops of recompute_modules; full: whole layers (recompute_method); "
          "activations: selective of mlp_act"),
    FIELD(SEC_TRAINING, "recompute_method", recompute_method, NULL, K_ENUM, R_ANY, D_VALUE,
          MCC_RECOMPUTE_METHOD_NONE, ir_recompute_method_words,
          "full: uniform checkpoints each group of recompute_num_layers layers; block the first "
          "recompute_num_layers layers of each pipeline stage"),
    FIELD(SEC_TRAINING, "recompute_modules", recompute_modules, NULL, K_SET, R_ANY, D_VALUE,
          MCC_RM_CORE_ATTN | MCC_RM_LAYERNORM | MCC_RM_MLP_ACT, recompute_module_names,
          "selective: what to recompute (core_attn: flash attention always does; layernorm: the norms' "
          "outputs; mlp_act: GELU/SiLU/SwiGLU's; mlp, shared_experts: the MLP's up and gate projections and "
          "activation; moe: the routed experts'; moe_act: their activation; mla_up_proj: MLA's up projections)"),
    TRAIN(recompute_num_layers, K_INT, R_NONNEG, D_VALUE, 0,
          "full: layers per checkpoint (uniform) or per stage (block); selective: the first N layers (0: all)"),
    /* mcc's: the output head, its cross entropy and their gradients chunk by chunk of the tokens
     * (passes/loss_chunks.c), so that one chunk's logits are live, not the whole vocabulary's */
    TRAIN(cross_entropy_chunks, K_INT, R_POS, D_VALUE, 1,
          "the output head and its cross entropy over N chunks of a micro-batch's tokens: one chunk's logits "
          "live at a time, W read and its gradient added once a chunk (1: whole)"),
    FIELD(SEC_TRAINING, "fp8_format", fp8_format, NULL, K_ENUM, R_ANY, D_VALUE, MCC_FP8_NONE, ir_fp8_format_words,
          "FP8 linear layers: hybrid (E4M3 forward, E5M2 gradients) or e4m3 throughout; none: bf16"),
    FIELD(SEC_TRAINING, "fp8_recipe", fp8_recipe, NULL, K_ENUM, R_ANY, D_VALUE, MCC_FP8_DELAYED, ir_fp8_recipe_words,
          "FP8 scaling: delayed (from each tensor's amax history), tensorwise (this step's amax) or blockwise "
          "(DeepSeek-V3's: a scale per 1x128 tile of activations and gradients, per 128x128 block of weights)"),
    TRAIN(fp8_amax_history_len, K_INT, R_POS, D_VALUE, 1, "delayed: the steps of amax each tensor's history holds"),
    FIELD(SEC_TRAINING, "fp8_amax_compute_algo", fp8_amax_compute_algo, NULL, K_ENUM, R_ANY, D_VALUE,
          MCC_AMAX_MOST_RECENT, ir_amax_algo_words, "delayed: the scale's amax, the history's most_recent or max"),
    TRAIN(fp8_margin, K_INT, R_NONNEG, D_VALUE, 0, "delayed: scale = fp8 max / amax / 2^margin"),
    TRAIN(fp8_wgrad, K_BOOL, R_ANY, D_VALUE, true, "FP8 weight-gradient GEMMs too (--no-fp8-wgrad: bf16)"),
    TRAIN(first_last_layers_bf16, K_BOOL, R_ANY, D_VALUE, false, "FP8: the first and last layers stay in bf16"),
    TRAIN(num_layers_at_start_in_bf16, K_INT, R_NONNEG, D_VALUE, 1, "with first_last_layers_bf16: leading layers in bf16"),
    TRAIN(num_layers_at_end_in_bf16, K_INT, R_NONNEG, D_VALUE, 1, "with first_last_layers_bf16: trailing layers in bf16"),
};
enum { SPEC_NFIELDS = sizeof spec_fields / sizeof spec_fields[0] };


enum { SPEC_MAX_HOLDS = 16 };

/* Loader state: where each field's value came from, for messages that point at the input. */
typedef struct {
    mcc_spec s;
    bool set[SPEC_NFIELDS];         /* given in the JSON or by a flag */
    const char *flag[SPEC_NFIELDS]; /* the flag that set it last (argv text), else NULL */
    char where_buf[SPEC_NFIELDS][80];
    char *err;
    size_t errlen;
    const mcc_megatron_flag *holds[SPEC_MAX_HOLDS]; /* the Megatron flags given whose `holds` is checked last */
    int nholds;
} spec_ctx;

/* Every check registers itself where it stands: SPEC_CHECK_HERE() is a static mcc_spec_check of
 * its own, its address put in the section mcc_spec_check_list, whose bounds the linker provides
 * (__start_/__stop_). So a new check is listed without a table to keep in step. */
#define SPEC_CHECK_HERE()                                                                          \
    ({                                                                                             \
        static mcc_spec_check check_ = {__func__, __LINE__, 0};                                    \
        static mcc_spec_check *const check_entry_ __attribute__((used, section("mcc_spec_check_list"))) = \
            &check_;                                                                               \
        &check_;                                                                                   \
    })
extern mcc_spec_check *const __start_mcc_spec_check_list[], *const __stop_mcc_spec_check_list[];

mcc_spec_check *const *mcc_spec_checks(int *n)
{
    *n = (int)(__stop_mcc_spec_check_list - __start_mcc_spec_check_list);
    return __start_mcc_spec_check_list;
}

/* Refuses the spec with the message fmt: a check (spec_fail is one at each place it is written). */
static bool spec_refuse(spec_ctx *c, mcc_spec_check *check, const char *fmt, ...)
{
    check->refusals++;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, c->errlen, fmt, ap);
    va_end(ap);
    return false;
}
#define spec_fail(c, ...) spec_refuse(c, SPEC_CHECK_HERE(), __VA_ARGS__)

static int spec_index(const spec_field *f) { return (int)(f - spec_fields); }

/* "model.hidden_size", or the flag that set the value ("--hidden-size", "--tp"). */
static const char *spec_where(spec_ctx *c, const spec_field *f)
{
    int i = spec_index(f);
    if (c->flag[i]) return c->flag[i];
    if (!c->where_buf[i][0]) /* the checks name a field many times a load, most of them on success */
        snprintf(c->where_buf[i], sizeof c->where_buf[i], "%s.%s", spec_section_names[f->sec], f->key);
    return c->where_buf[i];
}

static int spec_by_key(const void *a, const void *b)
{
    return strcmp(spec_fields[*(const int *)a].key, spec_fields[*(const int *)b].key);
}

/* The field of key, by a binary search of the fields sorted by key (made on first use): every
 * key of a spec file, every flag and every check finds its field here, and mcc tune loads a spec
 * for each of thousands of layouts. */
static const spec_field *spec_find(const char *key)
{
    static int sorted[SPEC_NFIELDS], nsorted;
    if (!nsorted) {
        for (int i = 0; i < SPEC_NFIELDS; i++) sorted[i] = i;
        qsort(sorted, SPEC_NFIELDS, sizeof sorted[0], spec_by_key);
        nsorted = SPEC_NFIELDS;
    }
    for (int lo = 0, hi = nsorted - 1; lo <= hi;) {
        int mid = (lo + hi) / 2, cmp = strcmp(key, spec_fields[sorted[mid]].key);
        if (!cmp) return &spec_fields[sorted[mid]];
        if (cmp < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return NULL;
}

static void *spec_member(mcc_spec *s, const spec_field *f) { return (char *)s + f->off; }

static void spec_store_int(spec_ctx *c, const spec_field *f, long long v)
{
    if (f->size == sizeof(bool)) *(bool *)spec_member(&c->s, f) = v != 0;
    else *(int *)spec_member(&c->s, f) = (int)v;
}

/* A scalar field's value in s: an int, bool or enum member as its integer. */
static double spec_field_value(const mcc_spec *s, const spec_field *f)
{
    const void *p = (const char *)s + f->off;
    if (f->kind == K_NUM) return *(const double *)p;
    return f->size == sizeof(bool) ? *(const bool *)p : *(const int *)p;
}

static double spec_value(spec_ctx *c, const spec_field *f) { return spec_field_value(&c->s, f); }

/* ---- storing one value (shared by JSON and flags) ------------------------------------------ */

static const char *spec_kind_text(spec_kind k)
{
    static const char *const text[] = {"an integer", "a number", "true or false", "a string",
                                       "names (a list, or one string, comma-separated)",
                                       "an integer N or a list of 0s and 1s, one a layer", "a string"};
    return text[k];
}

/* v as the user wrote it is `text` (v is clamped when even long long overflowed). */
static bool spec_set_int(spec_ctx *c, const spec_field *f, const char *where, long long v, const char *text)
{
    if (v < INT_MIN || v > INT_MAX)
        return spec_fail(c, "%s = %.32s does not fit in a 32-bit int: use a value of at most %d", where,
                         text, INT_MAX);
    spec_store_int(c, f, v);
    return true;
}

static void spec_store_num(spec_ctx *c, const spec_field *f, double v) { *(double *)spec_member(&c->s, f) = v; }

static bool spec_set_choice(spec_ctx *c, const spec_field *f, const char *where, const char *v)
{
    char allowed[256] = "";
    for (int i = 0; f->choices[i]; i++) {
        if (strcmp(v, f->choices[i]) == 0) {
            spec_store_int(c, f, i);
            return true;
        }
        size_t n = strlen(allowed);
        snprintf(allowed + n, sizeof allowed - n, "%s\"%s\"", i ? ", " : "", f->choices[i]);
    }
    return spec_fail(c, "%s: unknown value \"%.64s\"; allowed: %s", where, v, allowed);
}

/* K_SET: the names of `v` (comma-separated) added to the field's set; `first`: the set starts empty. */
static bool spec_add_choices(spec_ctx *c, const spec_field *f, const char *where, const char *v, bool first)
{
    int set = first ? 0 : (int)spec_value(c, f);
    char name[64];
    for (const char *p = v; *p;) {
        size_t n = strcspn(p, ",");
        snprintf(name, sizeof name, "%.*s", (int)(n < sizeof name - 1 ? n : sizeof name - 1), p);
        if (!spec_set_choice(c, f, where, name))
            return false;
        set |= 1 << (int)spec_value(c, f);
        p += n + (p[n] == ',');
    }
    spec_store_int(c, f, set);
    return true;
}

void mcc_recompute_modules_text(int modules, char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int k = 0; recompute_module_names[k]; k++)
        if (modules & 1 << k)
            used += (size_t)snprintf(buf + used, used < n ? n - used : 0, "%s%s", used ? "," : "",
                                     recompute_module_names[k]);
}

/* K_LAYERS: layer l of the pattern is MoE (1) or dense (0); refused past MCC_MAX_LAYER_PATTERN. */
static bool spec_layers_push(spec_ctx *c, const char *where, mcc_layer_pattern *p, long long v)
{
    if (v != 0 && v != 1)
        return spec_fail(c, "%s: the list's entries are 1 (an MoE layer) or 0 (a dense one), got %lld", where, v);
    if (p->n == MCC_MAX_LAYER_PATTERN)
        return spec_fail(c, "%s: the list has more than %d layers", where, MCC_MAX_LAYER_PATTERN);
    p->moe[p->n++] = (unsigned char)v;
    return true;
}

/* Megatron's moe_layer_freq text: an integer N, or a Python list expression as its recipes pass
 * it (Megatron evaluates it): terms "[a,b,...]" or "[a,...]*N" joined by '+', inside optional
 * quotes and parentheses, e.g. "([0]*3+[1]*58)". A small grammar of our own: no library parses
 * this subset of Python. */
static bool spec_set_layers(spec_ctx *c, const spec_field *f, const char *where, const char *v)
{
    mcc_layer_pattern *p = spec_member(&c->s, f);
    char text[4096], num[32];
    size_t n = strlen(v);
    if (n >= sizeof text)
        return spec_fail(c, "%s: the value is longer than %zu characters", where, sizeof text - 1);
    while (n && strchr("'\"() ", v[n - 1])) n--;
    while (n && strchr("'\"() ", *v)) v++, n--;
    snprintf(text, sizeof text, "%.*s", (int)n, v);
    if (!strchr(text, '[')) {
        long long every;
        if (!cli_parse_int(where, text, 1, INT_MAX, &every, c->err, c->errlen)) return false;
        *p = (mcc_layer_pattern){(int)every, 0, {0}};
        return true;
    }
    *p = (mcc_layer_pattern){0};
    for (char *t = text; *t;) {
        char *close = *t == '[' ? strchr(t, ']') : NULL;
        if (!close)
            return spec_fail(c, "%s \"%.64s\": expected a list such as [0,1,1] or [0]*3+[1]*58 at \"%.32s\"", where,
                             text, t);
        int first = p->n;
        for (char *e = t + 1; e < close;) {
            size_t len = strcspn(e, ",]");
            snprintf(num, sizeof num, "%.*s", (int)(len < sizeof num - 1 ? len : sizeof num - 1), e);
            long long x;
            if (!cli_parse_int(where, num, 0, INT_MAX, &x, c->err, c->errlen) || !spec_layers_push(c, where, p, x))
                return false;
            e += len + (e[len] == ',');
        }
        t = close + 1;
        long long times = 1;
        if (*t == '*') {
            size_t len = strcspn(++t, "+");
            snprintf(num, sizeof num, "%.*s", (int)(len < sizeof num - 1 ? len : sizeof num - 1), t);
            if (!cli_parse_int(where, num, 0, MCC_MAX_LAYER_PATTERN, &times, c->err, c->errlen)) return false;
            t += len;
        }
        int count = p->n - first;
        for (long long r = 1; r < times; r++)
            for (int k = 0; k < count; k++)
                if (!spec_layers_push(c, where, p, p->moe[first + k])) return false;
        if (times == 0) p->n = first;
        if (*t == '+') t++;
        else if (*t)
            return spec_fail(c, "%s \"%.64s\": expected '+' between lists at \"%.32s\"", where, text, t);
    }
    return true;
}

static bool spec_set_text(spec_ctx *c, const spec_field *f, const char *where, const char *v);

static bool spec_set_json(spec_ctx *c, const spec_field *f, const char *where, json_t *v)
{
    static const char *const type_names[] = {"an object", "an array", "a string", "an integer",
                                             "a real",    "true",     "false",    "null"};
    bool ok = (f->kind == K_INT && json_is_integer(v)) || (f->kind == K_NUM && json_is_number(v)) ||
              (f->kind == K_BOOL && json_is_boolean(v)) || (f->kind == K_ENUM && json_is_string(v)) ||
              (f->kind == K_SET && (json_is_string(v) || json_is_array(v))) ||
              (f->kind == K_LAYERS && (json_is_integer(v) || json_is_string(v) || json_is_array(v))) ||
              (f->kind == K_TEXT && json_is_string(v));
    if (!ok)
        return spec_fail(c, "%s must be %s (got %s)", where, spec_kind_text(f->kind),
                         type_names[json_typeof(v)]);
    switch (f->kind) {
    case K_INT: {
        char text[32];
        snprintf(text, sizeof text, "%lld", (long long)json_integer_value(v));
        return spec_set_int(c, f, where, json_integer_value(v), text);
    }
    case K_NUM: spec_store_num(c, f, json_number_value(v)); return true;
    case K_BOOL: spec_store_int(c, f, json_is_true(v)); return true;
    case K_ENUM: return spec_set_choice(c, f, where, json_string_value(v));
    case K_SET:
        if (json_is_string(v)) return spec_add_choices(c, f, where, json_string_value(v), true);
        spec_store_int(c, f, 0);
        for (size_t k = 0; k < json_array_size(v); k++) {
            json_t *e = json_array_get(v, k);
            if (!json_is_string(e))
                return spec_fail(c, "%s[%zu] must be a string (got %s)", where, k, type_names[json_typeof(e)]);
            if (!spec_add_choices(c, f, where, json_string_value(e), false)) return false;
        }
        return true;
    case K_TEXT: return spec_set_text(c, f, where, json_string_value(v));
    case K_LAYERS:
        if (json_is_string(v)) return spec_set_layers(c, f, where, json_string_value(v));
        if (json_is_integer(v)) {
            char text[32];
            snprintf(text, sizeof text, "%lld", (long long)json_integer_value(v));
            return spec_set_layers(c, f, where, text);
        }
        mcc_layer_pattern *p = spec_member(&c->s, f);
        *p = (mcc_layer_pattern){0};
        for (size_t k = 0; k < json_array_size(v); k++) {
            json_t *e = json_array_get(v, k);
            if (!json_is_integer(e))
                return spec_fail(c, "%s[%zu] must be 0 or 1 (got %s)", where, k, type_names[json_typeof(e)]);
            if (!spec_layers_push(c, where, p, json_integer_value(e))) return false;
        }
        return true;
    }
    return false;
}

/* A flag's value, read by common/cli.h's checked parser (the whole text, the flag named). An
 * integer's sign is checked here, its other limits (and every number's range, which JSON values
 * share) by spec_check_field. */
static bool spec_set_text(spec_ctx *c, const spec_field *f, const char *where, const char *v)
{
    if (f->kind == K_INT) {
        long long n;
        long long min = f->range == R_POS ? 1 : f->range == R_NONNEG ? 0 : INT_MIN;
        if (!cli_parse_int(where, v, min, INT_MAX, &n, c->err, c->errlen)) return false;
        spec_store_int(c, f, n);
        return true;
    }
    if (f->kind == K_NUM) {
        double d;
        if (!cli_parse_num(where, v, -INFINITY, false, INFINITY, &d, c->err, c->errlen)) return false;
        spec_store_num(c, f, d);
        return true;
    }
    if (f->kind == K_BOOL) { /* "true" or "false": spec_read_flags and the Megatron table pass no other */
        spec_store_int(c, f, strcmp(v, "true") == 0);
        return true;
    }
    if (f->kind == K_SET) return spec_add_choices(c, f, where, v, true);
    if (f->kind == K_LAYERS) return spec_set_layers(c, f, where, v);
    if (f->kind == K_TEXT) {
        if (strlen(v) >= f->size)
            return spec_fail(c, "%s: the value is longer than %zu characters", where, f->size - 1);
        snprintf(spec_member(&c->s, f), f->size, "%s", v);
        return true;
    }
    return spec_set_choice(c, f, where, v);
}

/* ---- unknown keys ------------------------------------------------------------------------- */

static bool spec_unknown_key(spec_ctx *c, spec_section sec, const char *key)
{
    const char *sname = spec_section_names[sec];
    const spec_field *elsewhere = spec_find(key);
    if (elsewhere)
        return spec_fail(c, "unknown key %s.%s: %s belongs in the \"%s\" section", sname, key, key,
                         spec_section_names[elsewhere->sec]);
    const char *keys[SPEC_NFIELDS];
    for (int i = 0; i < SPEC_NFIELDS; i++) keys[i] = spec_fields[i].key;
    const char *near = cli_closest(key, keys, SPEC_NFIELDS);
    if (near)
        return spec_fail(c, "unknown key %s.%.64s: did you mean \"%s\"?", sname, key, near);
    char known[1024] = "";
    for (int i = 0; i < SPEC_NFIELDS; i++) {
        size_t n = strlen(known);
        if (spec_fields[i].sec == sec)
            snprintf(known + n, sizeof known - n, "%s%s", n ? ", " : "", spec_fields[i].key);
    }
    return spec_fail(c, "unknown key %s.%.64s; the keys of \"%s\" are: %s", sname, key, sname, known);
}

/* ---- JSON --------------------------------------------------------------------------------- */

static bool spec_read_section(spec_ctx *c, spec_section sec, json_t *obj)
{
    const char *sname = spec_section_names[sec], *key;
    json_t *v;
    if (!json_is_object(obj))
        return spec_fail(c, "\"%s\" must be an object of settings, e.g. \"%s\": {...}", sname, sname);
    json_object_foreach(obj, key, v) {
        const spec_field *f = spec_find(key);
        if (!f || f->sec != sec) return spec_unknown_key(c, sec, key);
        c->set[spec_index(f)] = true;
        if (!spec_set_json(c, f, spec_where(c, f), v)) return false;
    }
    return true;
}

static bool spec_read_root(spec_ctx *c, const char *path, json_t *root)
{
    if (!json_is_object(root))
        return spec_fail(c, "%s: the spec must be a JSON object with \"model\", \"parallel\" and "
                            "\"training\" sections", path);
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (!strcmp(key, "description")) { /* free text for readers (what the model is, what it leaves out) */
            if (!json_is_string(v))
                return spec_fail(c, "%s: \"description\" must be a string (free text about the model)", path);
            continue;
        }
        int sec = 0;
        while (sec < SEC_COUNT && strcmp(key, spec_section_names[sec]) != 0) sec++;
        if (sec == SEC_COUNT) {
            const char *near = cli_closest(key, spec_section_names, SEC_COUNT);
            if (near) return spec_fail(c, "unknown top-level key \"%.64s\": did you mean \"%s\"?", key, near);
            return spec_fail(c, "unknown top-level key \"%.64s\": the sections are \"model\", \"parallel\" "
                                "and \"training\"", key);
        }
        if (!spec_read_section(c, sec, v)) return false;
    }
    return true;
}

/* The last spec file parsed, kept for the process: mcc tune loads the same file once for every
 * layout it estimates (thousands), and reading and parsing it again was most of its time. */
static struct {
    char path[4096];
    json_t *root;
} spec_json_cache;

static bool spec_read_json(spec_ctx *c, const char *path)
{
    json_t *root = NULL;
    if (spec_json_cache.root && !strcmp(spec_json_cache.path, path)) {
        root = json_incref(spec_json_cache.root);
    } else {
        FILE *fp = fopen(path, "rb");
        if (!fp) return spec_fail(c, "cannot open spec file %s: %s", path, strerror(errno));
        json_error_t e;
        root = json_loadf(fp, JSON_REJECT_DUPLICATES, &e);
        fclose(fp);
        if (!root) return spec_fail(c, "%s:%d:%d: invalid JSON: %s", path, e.line, e.column, e.text);
        if (strlen(path) < sizeof spec_json_cache.path) {
            json_decref(spec_json_cache.root);
            spec_json_cache.root = json_incref(root);
            snprintf(spec_json_cache.path, sizeof spec_json_cache.path, "%s", path);
        }
    }
    bool ok = spec_read_root(c, path, root);
    json_decref(root);
    return ok;
}

/* ---- flags -------------------------------------------------------------------------------- */

/* "--hidden-size" for hidden_size. */
static void spec_flag_name(const spec_field *f, char *buf, size_t n)
{
    snprintf(buf, n, "--%s", f->key);
    for (char *p = buf + 2; *p; p++)
        if (*p == '_') *p = '-';
}

/* The field a "--flag" names ("--hidden-size", "--tp"), or NULL. */
static const spec_field *spec_flag_field(const char *arg)
{
    if (strncmp(arg, "--", 2) != 0) return NULL;
    char key[64];
    size_t n = strlen(arg + 2);
    if (n == 0 || n >= sizeof key) return NULL;
    for (size_t i = 0; i <= n; i++) key[i] = arg[2 + i] == '-' ? '_' : arg[2 + i];
    for (int i = 0; i < SPEC_NFIELDS; i++)
        if (spec_fields[i].alias && strcmp(spec_fields[i].alias, key) == 0) return &spec_fields[i];
    return spec_find(key);
}

/* The words after flag i that are its values: one, or (n < 0) all up to the next "--flag". */
static int spec_values_after(int argc, char **argv, int i, int n)
{
    int k = 0;
    while (i + 1 + k < argc && strncmp(argv[i + 1 + k], "--", 2) != 0 && (n < 0 || k < n))
        k++;
    return k;
}

/* Megatron flag m at argv[*i], its values after it (consumed through *i). */
static bool spec_read_megatron(spec_ctx *c, const mcc_megatron_flag *m, int argc, char **argv, int *i)
{
    const char *flag = argv[*i];
    int k = spec_values_after(argc, argv, *i, m->nvalues);
    const char *val = k ? argv[*i + 1] : NULL;
    *i += k;
    m = mcc_megatron_find_value(flag, val); /* a row a value, where its meaning depends on it */
    if (m->kind == MF_REFUSED) return spec_fail(c, "%s is refused: %s", flag, m->why);
    if (m->nvalues && (!k || (m->values && !cli_value_listed(m->values, val)))) {
        char all[256]; /* every row's values, where its meaning depends on the value */
        mcc_megatron_values(flag, all, sizeof all);
        return spec_fail(c, "%s %s: it takes %s (%s)", flag, val ? val : "without a value", all[0] ? all : "a value",
                         m->why);
    }
    if (m->kind == MF_SETS) {
        const char *eq = strchr(m->sets, '=');
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)(eq - m->sets), m->sets);
        const spec_field *f = spec_find(key);
        c->set[spec_index(f)] = true;
        c->flag[spec_index(f)] = m->flag;
        if (!spec_set_text(c, f, m->flag, eq + 1)) return false;
    }
    if (m->holds && c->nholds < SPEC_MAX_HOLDS) c->holds[c->nholds++] = m;
    fprintf(stderr, "mcc: %s%s%s: %s: %s\n", flag, val ? " " : "", val ? val : "", mcc_megatron_kind_text(m->kind),
            m->why);
    return true;
}

/* The value of field f as a flag would spell it ("4096", "rope", "true"), for notes. */
static void spec_value_text(spec_ctx *c, const spec_field *f, char *buf, size_t n)
{
    double v = spec_value(c, f);
    if (f->kind == K_ENUM) snprintf(buf, n, "%s", f->choices[(int)v]);
    else if (f->kind == K_BOOL) snprintf(buf, n, "%s", v != 0 ? "true" : "false");
    else if (f->kind == K_INT || f->kind == K_NUM) snprintf(buf, n, "%.10g", v);
    else if (f->kind == K_TEXT) snprintf(buf, n, "%s", (const char *)spec_member(&c->s, f));
    else snprintf(buf, n, "(a list)");
}

/* Spec field f set by flag argv[*i] (its value consumed through *i). A value the spec file gave
 * and the flag changes is said on stderr. */
static bool spec_read_field_flag(spec_ctx *c, const spec_field *f, int argc, char **argv, int *i)
{
    const char *flag = argv[*i], *val = *i + 1 < argc ? argv[*i + 1] : NULL;
    int idx = spec_index(f);
    char before[64] = "";
    if (c->set[idx] && !c->flag[idx]) spec_value_text(c, f, before, sizeof before);
    c->set[idx] = true;
    c->flag[idx] = flag;
    bool ok;
    if (f->kind == K_BOOL) { /* "--swiglu" alone means true */
        bool explicit = val && (strcmp(val, "true") == 0 || strcmp(val, "false") == 0);
        *i += explicit;
        ok = spec_set_text(c, f, flag, explicit ? val : "true");
    } else if (!val || strncmp(val, "--", 2) == 0) {
        return spec_fail(c, "%s needs a value (%s), e.g. %s %s", flag, spec_kind_text(f->kind), flag,
                         f->kind == K_ENUM ? f->choices[0] : "1");
    } else {
        ok = spec_set_text(c, f, flag, val);
        ++*i;
        /* a set's further names, space-separated as Megatron's nargs='*' takes them */
        while (ok && f->kind == K_SET && *i + 1 < argc && strncmp(argv[*i + 1], "--", 2) != 0 &&
               spec_add_choices(c, f, flag, argv[*i + 1], false))
            ++*i;
    }
    char after[64];
    spec_value_text(c, f, after, sizeof after);
    if (ok && *before && strcmp(before, after) != 0)
        fprintf(stderr, "mcc: note: %s %s replaces the spec file's %s.%s %s\n", flag, after,
                spec_section_names[f->sec], f->key, before);
    return ok;
}

static bool spec_check_required(spec_ctx *c);

/* Every flag: a spec field's, a Megatron flag's (megatron_flags.c), or the caller's (left in rest).
 * A bad flag does not stop the reading: each one's message is kept, one a line, so a pasted script
 * learns every problem in one run. */
static bool spec_read_flags(spec_ctx *c, int argc, char **argv, int *rest, int *nrest)
{
    char *all = calloc(1, c->errlen);
    if (!all) return snprintf(c->err, c->errlen, "out of memory reading the flags"), false;
    *nrest = 0;
    for (int i = 0; i < argc; i++) {
        const spec_field *f = spec_flag_field(argv[i]);
        const mcc_megatron_flag *m = f ? NULL : mcc_megatron_find(argv[i]);
        if (!f && !m) {
            rest[(*nrest)++] = i;
            continue;
        }
        int at = i;
        if (m ? spec_read_megatron(c, m, argc, argv, &i) : spec_read_field_flag(c, f, argc, argv, &i))
            continue;
        i = at + spec_values_after(argc, argv, at, -1); /* a bad value's words are not flags */
        size_t used = strlen(all);
        snprintf(all + used, c->errlen - used, "%s%s", used ? "\n" : "", c->err);
    }
    bool ok = !*all;
    if (!ok && !spec_check_required(c)) { /* what validation would say first, said now */
        size_t used = strlen(all);
        snprintf(all + used, c->errlen - used, "\n%s", c->err);
    }
    if (!ok) snprintf(c->err, c->errlen, "%s", all);
    free(all);
    return ok;
}

/* ---- defaults and validation -------------------------------------------------------------- */

static void spec_set_defaults(spec_ctx *c)
{
    for (int i = 0; i < SPEC_NFIELDS; i++) {
        const spec_field *f = &spec_fields[i];
        if (f->kind == K_NUM) spec_store_num(c, f, f->def);
        else spec_store_int(c, f, (long long)f->def);
    }
}

/* With no spec file the model comes from the flags alone, as pretrain_gpt.py builds it: where
 * Megatron's default differs from the spec table's (which keeps small test specs deterministic and
 * quiet), Megatron's, said once on stderr. */
static const struct {
    const char *key;
    double value;
} spec_megatron_defaults[] = {
    {"attention_dropout", 0.1}, {"hidden_dropout", 0.1}, {"lr_decay_style", MCC_LR_LINEAR}, {"log_interval", 100},
};

static void spec_set_megatron_defaults(spec_ctx *c)
{
    char said[256] = "";
    for (size_t i = 0; i < sizeof spec_megatron_defaults / sizeof spec_megatron_defaults[0]; i++) {
        const spec_field *f = spec_find(spec_megatron_defaults[i].key);
        if (f->kind == K_NUM) spec_store_num(c, f, spec_megatron_defaults[i].value);
        else spec_store_int(c, f, (long long)spec_megatron_defaults[i].value);
        char v[64];
        size_t n = strlen(said);
        spec_value_text(c, f, v, sizeof v);
        snprintf(said + n, sizeof said - n, "%s%s %s", n ? ", " : "", f->key, v);
    }
    fprintf(stderr, "mcc: note: no spec file: the model is the flags', Megatron's defaults for the rest (%s)\n", said);
}

/* Sets a D_DERIVED field the user left out to v, the value of `rule`. */
static bool spec_derive_int(spec_ctx *c, const char *key, long long v, const char *rule)
{
    const spec_field *f = spec_find(key);
    if (c->set[spec_index(f)]) return true;
    if (v > INT_MAX)
        return spec_fail(c, "%s: its default %s = %lld does not fit in a 32-bit int; set it explicitly",
                         spec_where(c, f), rule, v);
    spec_store_int(c, f, v);
    return true;
}

/* Defaults that depend on other fields (Megatron's rules). For swiglu the FFN width is Megatron's
 * int(8h/3) rounded down to a multiple of 64 (here at least 64), which keeps the 3-matrix MLP
 * about as large as the 2-matrix 4h one. */
/* torchrun's world: nnodes x nproc_per_node, where nproc_per_node is given (and world_size is not,
 * or agrees). */
static bool spec_derive_world(spec_ctx *c)
{
    mcc_spec *s = &c->s;
    const spec_field *nproc = spec_find("nproc_per_node"), *nnodes = spec_find("nnodes");
    if (!s->nproc_per_node) {
        if (c->set[spec_index(nnodes)] && s->nnodes > 1)
            return spec_fail(c, "%s %d without nproc_per_node: give the ranks of a node too (torchrun's "
                                "--nproc-per-node), which make world_size = nnodes x nproc_per_node",
                             spec_where(c, nnodes), s->nnodes);
        return true;
    }
    long long world = (long long)s->nproc_per_node * s->nnodes;
    if (world > INT_MAX) return spec_fail(c, "%s x %s is more than 2^31 ranks", spec_where(c, nnodes), spec_where(c, nproc));
    if (s->world_size && s->world_size != world)
        return spec_fail(c, "parallel.world_size %d disagrees with %s %d x %s %d = %lld: give one of the two",
                         s->world_size, spec_where(c, nnodes), s->nnodes, spec_where(c, nproc), s->nproc_per_node, world);
    s->world_size = (int)world;
    return true;
}

/* Megatron's data_parallel_size: the world the job starts over the ranks one replica takes
 * (tp * cp * pp), where world_size is given. A --dp flag beside it must agree; the spec file's
 * value gives way, with a note (a spec is the model, the launch decides its replicas). */
static bool spec_derive_dp(spec_ctx *c)
{
    mcc_spec *s = &c->s;
    if (!spec_derive_world(c)) return false;
    int replica = s->tensor_model_parallel_size * s->context_parallel_size * s->pipeline_model_parallel_size;
    if (s->world_size == 0 || replica <= 0)
        return true;
    if (s->world_size % replica)
        return spec_fail(c, "parallel.world_size (%d) is not a multiple of tp x cp x pp = %d x %d x %d = %d, the ranks "
                         "of one data-parallel replica: launch a multiple of %d ranks, or change the degrees",
                         s->world_size, s->tensor_model_parallel_size, s->context_parallel_size,
                         s->pipeline_model_parallel_size, replica, replica);
    int dp = s->world_size / replica, i = spec_index(spec_find("data_parallel_size"));
    if (c->set[i] && s->data_parallel_size != dp && c->flag[i])
        return spec_fail(c, "%s %d disagrees with parallel.world_size (%d): %d ranks over tp x cp x pp = %d make dp "
                         "%d; give one of the two", c->flag[i], s->data_parallel_size, s->world_size, s->world_size,
                         replica, dp);
    if (c->set[i] && s->data_parallel_size != dp)
        fprintf(stderr, "mcc: note: parallel.world_size %d over tp x cp x pp = %d makes data_parallel_size %d (the "
                        "spec file's %d gives way)\n", s->world_size, replica, dp, s->data_parallel_size);
    s->data_parallel_size = dp;
    return true;
}

/* The run's length and its lr schedule's spans in each of Megatron's two units, ORDER spec_lr_unit:
 * the *_iters fields and their *_samples twins, in the same order. */
typedef enum { SPEC_UNIT_ITERS, SPEC_UNIT_SAMPLES } spec_lr_unit;
static const char *const spec_lr_spans[2][4] = {
    {"train_iters", "lr_decay_iters", "lr_warmup_iters", "lr_wsd_decay_iters"},
    {"train_samples", "lr_decay_samples", "lr_warmup_samples", "lr_wsd_decay_samples"},
};
static const char *const spec_lr_unit_names[2] = {"iterations", "samples"};

static spec_lr_unit spec_unit(const mcc_spec *s) { return s->train_samples > 0 ? SPEC_UNIT_SAMPLES : SPEC_UNIT_ITERS; }

/* Megatron trains by iterations or by samples, and asserts that the other unit's fields are unset
 * (arguments.py). Here the unit of the train_ field a flag gives wins over the spec file's fields
 * of the other unit, which give way with a note; both units given at one level are refused.
 * Sample-based, train_iters is train_samples / global_batch_size, as Megatron's update_train_iters. */
static bool spec_derive_schedule(spec_ctx *c)
{
    mcc_spec *s = &c->s;
    int iters = spec_index(spec_find("train_iters")), samples = spec_index(spec_find("train_samples"));
    spec_lr_unit unit = c->flag[samples] || (c->set[samples] && !c->flag[iters]) ? SPEC_UNIT_SAMPLES : SPEC_UNIT_ITERS;
    const spec_field *train = spec_find(spec_lr_spans[unit][0]);
    for (int k = 0; k < 4; k++) {
        const spec_field *f = spec_find(spec_lr_spans[!unit][k]), *twin = spec_find(spec_lr_spans[unit][k]);
        int i = spec_index(f);
        if (!c->set[i])
            continue;
        char twin_flag[64], fix[96], where[80];
        spec_flag_name(twin, twin_flag, sizeof twin_flag);
        snprintf(fix, sizeof fix, "%s%s%s", k ? "give " : "drop one of the two", k ? twin_flag : "",
                 k ? " instead" : "");
        snprintf(where, sizeof where, "%s%s", spec_where(c, train), c->set[spec_index(train)] ? "" : ", the default");
        if (c->flag[i] || !c->flag[spec_index(train)])
            return spec_fail(c, "%s counts %s but this run counts %s (%s): Megatron trains by iterations or by "
                                "samples, not both; %s", spec_where(c, f), spec_lr_unit_names[!unit],
                             spec_lr_unit_names[unit], where, fix);
        fprintf(stderr, "mcc: note: %s trains by %s: the spec file's %s %.10g gives way\n", spec_where(c, train),
                spec_lr_unit_names[unit], spec_where(c, f), spec_value(c, f));
        spec_store_int(c, f, (long long)f->def);
        c->set[i] = false;
    }
    if (unit == SPEC_UNIT_ITERS || s->global_batch_size <= 0) /* a bad batch: spec_validate says so */
        return true;
    if (s->train_samples < s->global_batch_size)
        return spec_fail(c, "%s (%d) is less than one global batch (global_batch_size %d): no iteration to train",
                         spec_where(c, train), s->train_samples, s->global_batch_size);
    s->train_iters = s->train_samples / s->global_batch_size;
    return true;
}

/* Megatron's decoupled_lr (None: the embedding and output layer train at lr) and decoupled_min_lr
 * (None: min_lr). A decoupled_min_lr alone, which Megatron ignores, is refused. */
static bool spec_derive_decoupled(spec_ctx *c)
{
    mcc_spec *s = &c->s;
    const spec_field *lr = spec_find("decoupled_lr"), *min = spec_find("decoupled_min_lr");
    if (c->set[spec_index(min)] && !c->set[spec_index(lr)])
        return spec_fail(c, "%s is given without decoupled_lr: it ends the embedding and output layer's own "
                            "schedule, which --decoupled-lr starts (Megatron ignores it alone); give --decoupled-lr "
                            "too, or drop it", spec_where(c, min));
    if (!c->set[spec_index(lr)])
        s->decoupled_lr = s->lr;
    if (!c->set[spec_index(min)])
        s->decoupled_min_lr = s->min_lr;
    return true;
}

static bool spec_derive(spec_ctx *c)
{
    mcc_spec *s = &c->s;
    bool swiglu = s->activation == MCC_ACT_SWIGLU;
    long long h = s->hidden_size, ffn = swiglu ? 8 * h / 192 * 64 : 4 * h;
    return spec_derive_dp(c) &&
           spec_derive_int(c, "num_query_groups", s->num_attention_heads, "num_attention_heads") &&
           spec_derive_int(c, "kv_channels", s->num_attention_heads ? s->hidden_size / s->num_attention_heads : 0,
                           "hidden_size / num_attention_heads") &&
           spec_derive_int(c, "max_position_embeddings", s->seq_length, "seq_length") &&
           spec_derive_int(c, "global_batch_size", (long long)s->micro_batch_size * s->data_parallel_size,
                           "micro_batch_size * data_parallel_size") &&
           spec_derive_int(c, "ffn_hidden_size", swiglu && ffn < 64 ? 64 : ffn,
                           swiglu ? "8 * hidden_size / 3 rounded down to a multiple of 64" : "4 * hidden_size") &&
           spec_derive_int(c, "moe_ffn_hidden_size", s->ffn_hidden_size, "ffn_hidden_size") &&
           spec_derive_int(c, "expert_tensor_parallel_size", s->tensor_model_parallel_size, "tensor_model_parallel_size") &&
           spec_derive_schedule(c) && spec_derive_decoupled(c) &&
           (!s->multi_latent_attention ||
            spec_derive_int(c, "rope_type", MCC_ROPE_YARN, "yarn under multi_latent_attention, as Megatron's MLA"));
}

static bool spec_check_field(spec_ctx *c, const spec_field *f)
{
    const char *w = spec_where(c, f);
    double v = spec_value(c, f);
    if ((f->range == R_POS && !(v > 0)) || (f->range == R_NONNEG && !(v >= 0)))
        return spec_fail(c, "%s must be %s (got %.10g)", w, f->range == R_POS ? "> 0" : ">= 0", v);
    if (f->range == R_UNIT && !(v >= 0 && v < 1))
        return spec_fail(c, "%s must be in [0, 1) (got %.10g)", w, v);
    if (f->range == R_DROPOUT && !(v >= 0 && v < 1))
        return spec_fail(c, "%s must be a dropout probability in [0, 1) (got %.10g): 0 turns that dropout off, "
                            "Megatron's default is 0.1", w, v);
    return true;
}

/* A check across two fields: fails with "A (a) <what> B (b)[: hint]" unless ok (spec_check_pair
 * is a check of its own at each place it is written). */
static bool spec_check_pair_at(spec_ctx *c, mcc_spec_check *check, bool ok, const char *a, const char *what,
                               const char *b, const char *hint)
{
    if (ok) return true;
    const spec_field *fa = spec_find(a), *fb = spec_find(b);
    char wb[80];
    snprintf(wb, sizeof wb, "%s", spec_where(c, fb));
    return spec_refuse(c, check, "%s (%.10g) %s %s (%.10g)%s%s", spec_where(c, fa), spec_value(c, fa), what, wb,
                       spec_value(c, fb), hint ? ": " : "", hint ? hint : "");
}
#define spec_check_pair(c, ...) spec_check_pair_at(c, SPEC_CHECK_HERE(), __VA_ARGS__)

/* Megatron's scheduler asserts, in the run's unit (spec_lr_spans): warmup within the decay span,
 * one way of giving warmup, a WSD decay phase that fits, warmup from at most lr; and the decoupled
 * schedule's end at most its peak. A decay span of 0 stands for the run's length. */
static bool spec_check_lr(spec_ctx *c)
{
    mcc_spec *s = &c->s;
    const char *const *span = spec_lr_spans[spec_unit(s)];
    const spec_field *warmup = spec_find(span[2]), *wsd = spec_find(span[3]);
    const char *decay_key = spec_value(c, spec_find(span[1])) ? span[1] : span[0];
    double decay = spec_value(c, spec_find(decay_key));
    if (c->set[spec_index(warmup)] && c->set[spec_index(spec_find("lr_warmup_fraction"))])
        return spec_fail(c, "%s and %s are both given: set warmup either in %s or as a fraction of "
                            "the decay, not both", spec_where(c, warmup),
                         spec_where(c, spec_find("lr_warmup_fraction")), spec_lr_unit_names[spec_unit(s)]);
    if (!spec_check_pair(c, spec_value(c, warmup) <= decay, span[2], "must not exceed", decay_key, NULL) ||
        !spec_check_pair(c, s->lr_warmup_init <= s->lr, "lr_warmup_init", "must not exceed", "lr",
                         "warmup rises from lr_warmup_init to lr") ||
        !spec_check_pair(c, s->decoupled_min_lr <= s->decoupled_lr, "decoupled_min_lr", "must not exceed",
                         "decoupled_lr", "decoupled_min_lr defaults to min_lr; give --decoupled-min-lr"))
        return false;
    if (s->lr_decay_style != MCC_LR_WSD)
        return true;
    if (spec_value(c, wsd) == 0) {
        char flag[64];
        spec_flag_name(wsd, flag, sizeof flag);
        return spec_fail(c, "%s is WSD but %s is not set: give the %s of the final decay, e.g. %s %.0f",
                         spec_where(c, spec_find("lr_decay_style")), span[3], spec_lr_unit_names[spec_unit(s)], flag,
                         decay >= 10 ? floor(decay / 10) : 1);
    }
    return spec_check_pair(c, spec_value(c, wsd) <= decay, span[3], "must not exceed", decay_key, NULL);
}

/* Megatron's tensor-parallel split: heads, kv groups and ffn features divide by tp (the vocabulary
 * is padded to a multiple of it, spec_pad_vocab), and so does what sequence parallelism splits. */
static bool spec_check_tp(spec_ctx *c)
{
    const mcc_spec *s = &c->s;
    int tp = s->tensor_model_parallel_size;
    const char *keys[] = {"num_attention_heads", "num_query_groups", "ffn_hidden_size"};
    int values[] = {s->num_attention_heads, s->num_query_groups, s->ffn_hidden_size};
    for (int i = 0; i < 3; i++)
        if (values[i] % tp)
            return spec_fail(c, "%s (%d) must be divisible by %s (%d): each tensor-parallel rank takes an equal "
                                "share", spec_where(c, spec_find(keys[i])), values[i],
                             spec_where(c, spec_find("tensor_model_parallel_size")), tp);
    int cp = s->context_parallel_size; /* a context-parallel rank's tokens are split over tp */
    if (s->sequence_parallel && s->sequence_parallel_split == MCC_SP_SPLIT_SEQUENCE && s->seq_length % (tp * cp))
        return spec_fail(c, "%s splits the sequence over tensor-parallel ranks: %s (%d) must be divisible by %s (%d) "
                            "x %s (%d); change seq_length or split by batch rows (sequence_parallel_split batch)",
                         spec_where(c, spec_find("sequence_parallel")), spec_where(c, spec_find("seq_length")),
                         s->seq_length, spec_where(c, spec_find("tensor_model_parallel_size")), tp,
                         spec_where(c, spec_find("context_parallel_size")), cp);
    if (s->tp_comm_interleave && s->sequence_parallel && tp > 1) {
        int rows = s->sequence_parallel_split == MCC_SP_SPLIT_BATCH ? 2 * tp : 2;
        if (s->micro_batch_size % rows)
            return spec_fail(c, "%s splits the micro-batch into two halves%s: %s (%d) must be divisible by %d",
                             spec_where(c, spec_find("tp_comm_interleave")),
                             rows > 2 ? ", each split by batch rows over the tensor-parallel ranks" : "",
                             spec_where(c, spec_find("micro_batch_size")), s->micro_batch_size, rows);
        if (s->tp_comm_overlap)
            return spec_fail(c, "%s and %s are two ways of overlapping the same collectives: choose one",
                             spec_where(c, spec_find("tp_comm_interleave")), spec_where(c, spec_find("tp_comm_overlap")));
    }
    if (!s->sequence_parallel || s->sequence_parallel_split != MCC_SP_SPLIT_BATCH || tp == 1)
        return true;
    if (s->micro_batch_size % tp)
        return spec_fail(c, "%s batch splits whole batch rows over tensor-parallel ranks: %s (%d) must be divisible "
                            "by %s (%d); raise micro_batch_size or use sequence_parallel_split sequence",
                         spec_where(c, spec_find("sequence_parallel_split")), spec_where(c, spec_find("micro_batch_size")),
                         s->micro_batch_size, spec_where(c, spec_find("tensor_model_parallel_size")), tp);
    return true;
}

/* The pipeline's fields: the virtual stages from Megatron's two spellings, a stage split that
 * divides (passes/pp_schedule.c, whose messages name the flags), and a schedule the virtual stages
 * and micro-batches allow. */
static bool spec_check_pp(spec_ctx *c)
{
    mcc_spec *s = &c->s;
    int p = s->pipeline_model_parallel_size, v;
    int first = s->decoder_first_pipeline_num_layers, last = s->decoder_last_pipeline_num_layers;
    char why[512] = "out of memory checking the stage split";
    pp_split_flags split = mcc_spec_split_flags(s);
    bool ok = pp_virtual_stages(&split, s->num_layers_per_virtual_pipeline_stage, s->num_virtual_stages_per_pipeline_rank,
                                &v, why, sizeof why);
    split.v = v;
    int *layers = ok ? malloc(sizeof(int) * (size_t)p * v) : NULL;
    ok = ok && layers && pp_split_layers(&split, layers, why, sizeof why);
    free(layers);
    if (ok && s->pipeline_schedule != MCC_PP_SCHED_AUTO)
        ok = pp_schedule_check(mcc_pp_sched_kind(s->pipeline_schedule), p, mcc_spec_accum_steps(s), v, why, sizeof why);
    if (!ok) return spec_fail(c, "%s", why);
    s->virtual_pipeline_model_parallel_size = v;
    /* no split given: the even one, unless the cost model balances better (the last rank also runs
     * the head: a layer's matmuls and attention against the head's, per token) */
    int bf, bl;
    /* full uniform recompute replays every layer's forward in its backward (a forward and a
     * backward of twice its cost become two forwards and the backward), not the head's; block
     * replays as many layers on every stage */
    double replay = s->recompute_granularity == MCC_RECOMPUTE_FULL && s->recompute_method == MCC_RECOMPUTE_UNIFORM
                        ? 4.0 / 3.0 : 1.0;
    if (p > 1 && v == 1 && !first && !last && !s->account_for_embedding_in_pipeline_split &&
        !s->account_for_loss_in_pipeline_split && !*s->pipeline_model_parallel_layout &&
        pp_balanced_split(s->num_layers, p,
                          replay * (2.0 * mcc_spec_layer_params(s) + 4.0 * s->seq_length * s->hidden_size), 0,
                          2.0 * (s->padded_vocab_size ? s->padded_vocab_size : s->vocab_size) * s->hidden_size, &bf,
                          &bl)) {
        s->decoder_first_pipeline_num_layers = bf;
        s->decoder_last_pipeline_num_layers = bl;
    }
    return true;
}

/* FP8's fields: each needs fp8_format, the bf16 layers first_last_layers_bf16 and leave a layer in
 * FP8, the amax history's fields the delayed recipe. */
static bool spec_check_fp8(spec_ctx *c)
{
    const mcc_spec *s = &c->s;
    const char *format = spec_where(c, spec_find("fp8_format"));
    const char *dependent[] = {"fp8_recipe",           "fp8_wgrad",  "first_last_layers_bf16", "fp8_amax_history_len",
                               "fp8_amax_compute_algo", "fp8_margin"};
    for (int i = 0; i < 6; i++)
        if (s->fp8_format == MCC_FP8_NONE && c->set[spec_index(spec_find(dependent[i]))])
            return spec_fail(c, "%s is set but %s is none: add --fp8-format hybrid (or e4m3), or drop %s",
                             spec_where(c, spec_find(dependent[i])), format, dependent[i]);
    const char *ends[] = {"num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16"};
    for (int i = 0; i < 2; i++)
        if (!s->first_last_layers_bf16 && c->set[spec_index(spec_find(ends[i]))])
            return spec_fail(c, "%s is set but first_last_layers_bf16 is off: add --first-last-layers-bf16 or drop %s",
                             spec_where(c, spec_find(ends[i])), ends[i]);
    if (s->fp8_format == MCC_FP8_NONE)
        return true;
    const char *delayed[] = {"fp8_amax_history_len", "fp8_amax_compute_algo", "fp8_margin"};
    for (int i = 0; i < 3; i++)
        if (s->fp8_recipe != MCC_FP8_DELAYED && c->set[spec_index(spec_find(delayed[i]))])
            return spec_fail(c, "%s is set but %s is %s: it configures delayed scaling; drop it, or use "
                                "--fp8-recipe delayed", spec_where(c, spec_find(delayed[i])),
                             spec_where(c, spec_find("fp8_recipe")), ir_fp8_recipe_words[s->fp8_recipe]);
    if (s->fp8_recipe == MCC_FP8_BLOCKWISE && s->fp8_format != MCC_FP8_E4M3)
        return spec_fail(c, "%s is blockwise but %s is hybrid: blockwise scaling is E4M3 throughout (gradients "
                            "too, as Transformer Engine's Float8BlockScaling): use --fp8-format e4m3",
                         spec_where(c, spec_find("fp8_recipe")), format);
    if (s->fp8_recipe == MCC_FP8_BLOCKWISE && (s->tensor_model_parallel_size > 1 || s->context_parallel_size > 1))
        return spec_fail(c, "%s is blockwise with tensor_model_parallel_size %d, context_parallel_size %d: blockwise "
                            "FP8 is built for data and pipeline parallelism only so far: use --fp8-recipe tensorwise",
                         spec_where(c, spec_find("fp8_recipe")), s->tensor_model_parallel_size,
                         s->context_parallel_size);
    int bf16 = s->first_last_layers_bf16 ? s->num_layers_at_start_in_bf16 + s->num_layers_at_end_in_bf16 : 0;
    if (bf16 >= s->num_layers)
        return spec_fail(c, "%s (%d) + %s (%d) leave none of the %d layers in FP8: lower them, or drop %s",
                         spec_where(c, spec_find(ends[0])), s->num_layers_at_start_in_bf16,
                         spec_where(c, spec_find(ends[1])), s->num_layers_at_end_in_bf16, s->num_layers, format);
    return true;
}

/* Context parallelism (passes/context_parallel.c): what it builds so far, the rest refused with the
 * fix; the sequence cut into 2 cp equal chunks. */
static bool spec_check_cp(spec_ctx *c)
{
    const mcc_spec *s = &c->s;
    int cp = s->context_parallel_size;
    const char *where = spec_where(c, spec_find("context_parallel_size"));
    if (cp == 1)
        return true;
    int tp = s->tensor_model_parallel_size, groups = s->num_query_groups ? s->num_query_groups : s->num_attention_heads;
    if (s->cp_comm_type == MCC_CP_A2A && (s->num_attention_heads % (tp * cp) || groups % (tp * cp)))
        return spec_fail(c, "%s a2a with %s (%d) and %s (%d) splits the heads over tp x cp = %d ranks, but %s is %d and "
                            "%s %d: choose heads and kv heads divisible by %d, or --cp-comm-type p2p",
                         spec_where(c, spec_find("cp_comm_type")), where, cp,
                         spec_where(c, spec_find("tensor_model_parallel_size")), tp, tp * cp,
                         spec_where(c, spec_find("num_attention_heads")), s->num_attention_heads,
                         spec_where(c, spec_find("num_query_groups")), groups, tp * cp);
    if (s->seq_length % (2 * cp))
        return spec_fail(c, "%s (%d) must be divisible by 2 x %s (%d): the sequence is cut into 2 cp equal chunks, "
                            "rank r holding chunks r and 2 cp - 1 - r", spec_where(c, spec_find("seq_length")),
                         s->seq_length, where, 2 * cp);
    return true;
}

/* Nemotron-4's fields (Megatron's rules): squared relu is not a GLU, and the partial rotation
 * turns an even number of a head's channels, at least two. */
static bool spec_check_nemotron(spec_ctx *c)
{
    const mcc_spec *s = &c->s;
    if (!spec_check_pair(c, !s->squared_relu || s->activation != MCC_ACT_SWIGLU, "squared_relu", "is not built with",
                         "swiglu", "Megatron asserts one activation: drop one of the two"))
        return false;
    const char *where = spec_where(c, spec_find("rotary_percent"));
    if (s->rotary_percent > 1)
        return spec_fail(c, "%s must be in (0, 1] (got %.10g): the share of each head's channels rope turns", where,
                         s->rotary_percent);
    if (s->rotary_percent == 1)
        return true;
    if (s->position_embedding_type != MCC_POS_ROPE)
        return spec_fail(c, "%s (%.10g) turns part of each head by rope, but %s is learned_absolute: give "
                         "position_embedding_type rope, or drop rotary_percent", where, s->rotary_percent,
                         spec_where(c, spec_find("position_embedding_type")));
    int rotary = mcc_spec_rotary_dim(s);
    if (rotary < 2 || rotary % 2)
        return spec_fail(c, "%s (%.10g) of %s (%d) turns int(%d x %.10g) = %d channels, which rope's rotate-half "
                         "needs even and at least 2: choose a share that gives an even count",
                         where, s->rotary_percent, spec_where(c, spec_find("kv_channels")), mcc_spec_head_dim(s),
                         mcc_spec_head_dim(s), s->rotary_percent, rotary);
    return true;
}

/* The fields that only an MoE model reads (refused in a dense one, as they would change nothing). */
static const char *const spec_moe_only[] = {
    "moe_router_topk", "moe_router_score_function", "moe_router_pre_softmax", "moe_router_topk_scaling_factor",
    "moe_router_num_groups", "moe_router_group_topk", "moe_router_dtype",
    "moe_router_load_balancing_type", "moe_aux_loss_coeff", "moe_z_loss_coeff", "moe_router_enable_expert_bias",
    "moe_router_force_load_balancing",
    "moe_router_bias_update_rate", "moe_expert_capacity_factor", "moe_token_drop_policy",
    "moe_pad_expert_input_to_capacity", "moe_shared_expert_intermediate_size", "moe_shared_expert_overlap", "moe_layer_freq",
    "moe_ffn_hidden_size", "expert_model_parallel_size", "expert_tensor_parallel_size"};

static bool spec_given(spec_ctx *c, const char *key) { return c->set[spec_index(spec_find(key))]; }

/* YaRN's fields: rope to scale, one scaling at a time, and a correction range whose pairs exist
 * (beta_slow below beta_fast, both turning at least once in the original context). */
static bool spec_check_yarn(spec_ctx *c)
{
    const mcc_spec *s = &c->s;
    const char *where = spec_where(c, spec_find("rope_type"));
    static const char *const yarn_fields[] = {"rotary_scaling_factor", "yarn_original_max_position_embeddings",
                                              "yarn_beta_fast", "yarn_beta_slow", "mscale", "mscale_all_dim"};
    for (size_t i = 0; s->rope_type != MCC_ROPE_YARN && i < sizeof yarn_fields / sizeof *yarn_fields; i++)
        if (spec_given(c, yarn_fields[i]))
            return spec_fail(c, "%s shapes YaRN's rope, but %s is rope: add --rope-type yarn (Megatron's multi-latent "
                                "attention takes yarn by default), or drop it", spec_where(c, spec_find(yarn_fields[i])),
                             where);
    if (s->rope_type != MCC_ROPE_YARN)
        return true;
    if (s->position_embedding_type != MCC_POS_ROPE)
        return spec_fail(c, "%s is yarn, but %s is learned_absolute: give position_embedding_type rope, or drop "
                            "rope_type", where, spec_where(c, spec_find("position_embedding_type")));
    if (s->use_rope_scaling)
        return spec_fail(c, "%s is yarn and %s asks for LLaMA 3.1's scaling: keep one of the two", where,
                         spec_where(c, spec_find("use_rope_scaling")));
    if (s->yarn_beta_slow >= s->yarn_beta_fast)
        return spec_fail(c, "%s (%.10g) must be below %s (%.10g): the ramp runs from the pairs turning beta_fast times "
                            "in the original context down to those turning beta_slow times",
                         spec_where(c, spec_find("yarn_beta_slow")), s->yarn_beta_slow,
                         spec_where(c, spec_find("yarn_beta_fast")), s->yarn_beta_fast);
    if (s->yarn_original_max_position_embeddings <= 6.283185307179586 * s->yarn_beta_slow)
        return spec_fail(c, "%s (%d) is too short for %s (%.10g): a pair must turn beta_slow times in it (more than "
                            "2 pi beta_slow positions)", spec_where(c, spec_find("yarn_original_max_position_embeddings")),
                         s->yarn_original_max_position_embeddings, spec_where(c, spec_find("yarn_beta_slow")),
                         s->yarn_beta_slow);
    return true;
}

/* Multi-token prediction's fields: the factor read only with depths; the depths after the model
 * (on the last pipeline stage: passes/pipeline.c) on rope positions, under cp over the rank's
 * chunks (passes/shard.c's shift_over_tokens; what is built). */
static bool spec_check_mtp(spec_ctx *c)
{
    const mcc_spec *s = &c->s;
    const char *where = spec_where(c, spec_find("mtp_num_layers"));
    if (s->mtp_num_layers == 0) {
        if (spec_given(c, "mtp_loss_scaling_factor"))
            return spec_fail(c, "%s is set but %s is 0: add --mtp-num-layers N, or drop mtp_loss_scaling_factor",
                             spec_where(c, spec_find("mtp_loss_scaling_factor")), where);
        return true;
    }
    if (s->mtp_num_layers >= s->seq_length || s->num_layers + s->mtp_num_layers > MCC_MAX_LAYERS)
        return spec_fail(c, "%s (%d) must be below %s (%d) and, with num_layers, at most %d layers: depth k predicts "
                            "the token k + 1 ahead", where, s->mtp_num_layers, spec_where(c, spec_find("seq_length")),
                         s->seq_length, MCC_MAX_LAYERS);
    int64_t chunk = s->context_parallel_size > 1 ? s->seq_length / (2 * (int64_t)s->context_parallel_size) : 0;
    if (chunk && s->mtp_num_layers > chunk)
        return spec_fail(c, "%s (%d) must be at most %s / (2 %s) (%lld) under context parallelism: depth k's roll "
                            "brings each balanced chunk's next k tokens from the chunk after it alone",
                         where, s->mtp_num_layers, spec_where(c, spec_find("seq_length")),
                         spec_where(c, spec_find("context_parallel_size")), (long long)chunk);
    static const char *const unbuilt[] = {"tp_comm_interleave", "position_embedding_type"};
    static const char *const why[] = {
        "the micro-batch's halves do not carry the depths: drop --tp-comm-interleave",
        "the depths read rope positions (learned ones are not rolled): give position_embedding_type rope"};
    bool on[] = {s->tp_comm_interleave, s->position_embedding_type != MCC_POS_ROPE};
    for (size_t i = 0; i < sizeof on / sizeof on[0]; i++)
        if (on[i])
            return spec_fail(c, "%s (multi-token prediction) is not built with %s: %s", where,
                             spec_where(c, spec_find(unbuilt[i])), why[i]);
    return true;
}

/* Multi-latent attention's fields (Megatron's MLATransformerConfig): read only with it; its heads
 * are its own (no query groups or biases on q, k, v; kv_channels unread), turned by rope over their
 * qk_pos_emb_head_dim channels whole. */
static const char *const spec_mla_only[] = {"q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim",
                                            "v_head_dim"};
static bool spec_check_mla(spec_ctx *c)
{
    const mcc_spec *s = &c->s;
    const char *mla = spec_where(c, spec_find("multi_latent_attention"));
    if (!s->multi_latent_attention) {
        for (size_t i = 0; i < sizeof spec_mla_only / sizeof spec_mla_only[0]; i++)
            if (spec_given(c, spec_mla_only[i]))
                return spec_fail(c, "%s is set but %s is off: add --multi-latent-attention, or drop %s",
                                 spec_where(c, spec_find(spec_mla_only[i])), mla, spec_mla_only[i]);
        return true;
    }
    /* kv_channels is not read (Megatron's, whose DeepSeek-V3 script passes it beside MLA, neither) */
    static const char *const standard[] = {"num_query_groups", "add_qkv_bias", "rotary_percent"};
    static const char *const instead[] = {"every head has keys and values of its own, made from the kv latent",
                                          "its projections have no biases (add_bias_linear adds the output's)",
                                          "rope turns the qk_pos_emb_head_dim channels whole"};
    for (size_t i = 0; i < sizeof standard / sizeof standard[0]; i++)
        if (spec_given(c, standard[i]) && (i == 0   ? s->num_query_groups != s->num_attention_heads
                                           : i == 1 ? s->add_qkv_bias
                                                    : s->rotary_percent != 1)) /* a value MLA computes alike: a
                                                                                * manifest's (mcc convert) */
            return spec_fail(c, "%s is standard attention's, but %s is on (%s): drop %s",
                             spec_where(c, spec_find(standard[i])), mla, instead[i], standard[i]);
    if (s->position_embedding_type != MCC_POS_ROPE)
        return spec_fail(c, "%s turns qk_pos_emb_head_dim channels of each head by rope, but %s is learned_absolute: "
                            "give position_embedding_type rope", mla, spec_where(c, spec_find("position_embedding_type")));
    if (s->qk_pos_emb_head_dim % 2)
        return spec_fail(c, "%s (%d) must be even: rope turns pairs of channels",
                         spec_where(c, spec_find("qk_pos_emb_head_dim")), s->qk_pos_emb_head_dim);
    return true;
}

/* What the MoE block does not build yet, each refused with what to pass instead. */
static bool spec_check_moe_built(spec_ctx *c)
{
    const mcc_spec *s = &c->s;
    const char *experts = spec_where(c, spec_find("num_experts"));
    if (s->moe_router_load_balancing_type == MCC_MOE_SINKHORN)
        return spec_fail(c, "%s %s is not built yet: pass aux_loss (the Switch loss over each micro-batch), "
                            "seq_aux_loss (over each sequence) or none",
                         spec_where(c, spec_find("moe_router_load_balancing_type")),
                         spec_moe_balances[s->moe_router_load_balancing_type]);
    if (s->moe_router_dtype == MCC_ROUTER_DTYPE_FP64)
        return spec_fail(c, "%s fp64 is not built: mcc's GEMMs run in fp32 at most (its routing is already computed "
                            "in double from the logits): pass fp32",
                         spec_where(c, spec_find("moe_router_dtype")));
    int tp = s->tensor_model_parallel_size;
    if (tp > 1 && !s->sequence_parallel) /* Megatron's rule: MoE with tensor parallelism needs it */
        return spec_fail(c, "%s (%d) with %s needs sequence_parallel (--sequence-parallel): the MoE layers run under "
                            "tensor parallelism only with the activations split along the sequence, as Megatron's",
                         spec_where(c, spec_find("tensor_model_parallel_size")), tp, experts);
    if (s->expert_tensor_parallel_size != tp)
        return spec_fail(c, "%s (%d) with %s (%d): only experts split over the tensor-parallel ranks themselves are "
                            "built: pass %d (the default), or drop it",
                         spec_where(c, spec_find("expert_tensor_parallel_size")), s->expert_tensor_parallel_size,
                         spec_where(c, spec_find("tensor_model_parallel_size")), tp, tp);
    if (tp > 1 && (s->moe_ffn_hidden_size % tp || (s->moe_shared_expert_intermediate_size % tp)))
        return spec_fail(c, "%s (%d) and moe_shared_expert_intermediate_size (%d) must divide by %s (%d): each "
                            "tensor-parallel rank holds a slice of every expert's features",
                         spec_where(c, spec_find("moe_ffn_hidden_size")), s->moe_ffn_hidden_size,
                         s->moe_shared_expert_intermediate_size, spec_where(c, spec_find("tensor_model_parallel_size")),
                         tp);
    int ep = s->expert_model_parallel_size;
    if (ep > 1 && (s->num_experts % ep || (s->data_parallel_size * s->context_parallel_size) % ep))
        return spec_fail(c, "%s (%d) must divide %s (%d) and data_parallel_size x context_parallel_size (%d): each ep "
                            "rank holds num_experts / ep experts, and the ep ranks are data- or context-parallel ranks "
                            "(edp = dp cp / ep hold the same experts)",
                         spec_where(c, spec_find("expert_model_parallel_size")), ep, experts, s->num_experts,
                         s->data_parallel_size * s->context_parallel_size);
    /* FP8 experts (passes/fp8.c): tensorwise and delayed, a scale per expert; blockwise, 1x128 tiles
     * that never straddle two experts' rows (tensor and context parallelism refused above) */
    if (s->fp8_format != MCC_FP8_NONE && s->context_parallel_size > 1)
        return spec_fail(c, "%s with %s and %s %d: FP8 experts under context parallelism are not built yet: drop "
                            "--fp8-format or --context-parallel-size",
                         spec_where(c, spec_find("fp8_format")), experts,
                         spec_where(c, spec_find("context_parallel_size")), s->context_parallel_size);
    if (s->add_bias_linear)
        return spec_fail(c, "%s with %s: experts with biases are not built yet: pass --disable-bias-linear "
                            "(Megatron's MoE recipes do)", spec_where(c, spec_find("add_bias_linear")), experts);
    return true;
}

/* Group-limited routing (Megatron's TransformerConfig rules, and that the top k fits the kept groups and
 * names at least one expert a group): both fields, or neither. */
static bool spec_check_groups(spec_ctx *c)
{
    const mcc_spec *s = &c->s;
    int groups = s->moe_router_num_groups, keep = s->moe_router_group_topk, k = s->moe_router_topk;
    if (groups == 0 && keep == 0)
        return true;
    if (groups == 0 || keep == 0)
        return spec_fail(c, "%s is set without %s: group-limited routing takes both (--moe-router-num-groups G "
                            "--moe-router-group-topk K), or drop it",
                         spec_where(c, spec_find(groups ? "moe_router_num_groups" : "moe_router_group_topk")),
                         groups ? "moe_router_group_topk" : "moe_router_num_groups");
    return spec_check_pair(c, s->num_experts % groups == 0, "moe_router_num_groups", "must divide", "num_experts",
                           "the groups are equal runs of experts") &&
           spec_check_pair(c, keep <= groups, "moe_router_group_topk", "must not exceed", "moe_router_num_groups",
                           NULL) &&
           spec_check_pair(c, keep <= k, "moe_router_group_topk", "must not exceed", "moe_router_topk",
                           "each kept group is scored by its top moe_router_topk/moe_router_group_topk experts") &&
           spec_check_pair(c, k <= keep * (s->num_experts / groups), "moe_router_topk", "must not exceed",
                           "moe_router_group_topk", "times the experts of a group: the top k lie in the kept groups");
}

/* Megatron's MoE rules (TransformerConfig.__post_init__ and arguments.py) and the pattern's length. */
static bool spec_check_moe(spec_ctx *c)
{
    mcc_spec *s = &c->s;
    if (s->num_experts == 0) {
        for (size_t i = 0; i < sizeof spec_moe_only / sizeof spec_moe_only[0]; i++)
            if (spec_given(c, spec_moe_only[i]))
                return spec_fail(c, "%s is set but num_experts is 0 (a dense model): add --num-experts N, or drop %s",
                                 spec_where(c, spec_find(spec_moe_only[i])), spec_moe_only[i]);
        return true;
    }
    if (!spec_check_pair(c, s->moe_router_topk <= s->num_experts, "moe_router_topk", "must not exceed", "num_experts",
                         "a token is routed to that many different experts"))
        return false;
    if (!spec_check_groups(c))
        return false;
    if (s->moe_router_enable_expert_bias && s->moe_router_score_function != MCC_MOE_SIGMOID)
        return spec_fail(c, "%s needs sigmoid scores (as Megatron): add --moe-router-score-function sigmoid",
                         spec_where(c, spec_find("moe_router_enable_expert_bias")));
    if (spec_given(c, "moe_router_bias_update_rate") && !s->moe_router_enable_expert_bias)
        return spec_fail(c, "%s is set but moe_router_enable_expert_bias is off: add --moe-router-enable-expert-bias "
                            "or drop it", spec_where(c, spec_find("moe_router_bias_update_rate")));
    if (s->moe_aux_loss_coeff > 0 && s->moe_router_load_balancing_type == MCC_MOE_BALANCE_NONE)
        return spec_fail(c, "%s is set but %s is none, which adds no loss: pass aux_loss, or drop the coefficient",
                         spec_where(c, spec_find("moe_aux_loss_coeff")),
                         spec_where(c, spec_find("moe_router_load_balancing_type")));
    if (s->moe_router_load_balancing_type == MCC_MOE_SEQ_AUX_LOSS && s->tensor_model_parallel_size > 1)
        return spec_fail(c, "%s seq_aux_loss with %s %d is not built yet: sequence parallelism splits a sequence over "
                            "the tp ranks, whose counts Megatron sums; pass aux_loss",
                         spec_where(c, spec_find("moe_router_load_balancing_type")),
                         spec_where(c, spec_find("tensor_model_parallel_size")), s->tensor_model_parallel_size);
    if (s->moe_shared_expert_overlap && s->moe_shared_expert_intermediate_size == 0)
        return spec_fail(c, "%s is set but the model has no shared expert, whose work it would put beside the "
                            "all-to-alls: set --moe-shared-expert-intermediate-size or drop it",
                         spec_where(c, spec_find("moe_shared_expert_overlap")));
    const char *capacity[] = {"moe_token_drop_policy", "moe_pad_expert_input_to_capacity"};
    for (int i = 0; i < 2; i++)
        if (spec_given(c, capacity[i]) && s->moe_expert_capacity_factor == 0)
            return spec_fail(c, "%s is set but moe_expert_capacity_factor is not: it chooses how tokens over an "
                                "expert's capacity are dropped; add --moe-expert-capacity-factor F or drop it",
                             spec_where(c, spec_find(capacity[i])));
    const mcc_layer_pattern *p = &s->moe_layer_freq;
    if (!p->every && p->n != s->num_layers) /* the list form (every 0), an empty list too */
        return spec_fail(c, "%s lists %d layers but num_layers is %d: give one 0 or 1 for each layer",
                         spec_where(c, spec_find("moe_layer_freq")), p->n, s->num_layers);
    return spec_check_moe_built(c);
}

/* Megatron's _vocab_size_with_padding: vocab_size rounded up to a multiple of
 * make_vocab_size_divisible_by * tp, so each tensor-parallel rank's share of the embedding and the
 * logits is equal and GEMM-friendly (GPT-2's 50257 -> 50304 at tp 1). */
static bool spec_pad_vocab(spec_ctx *c)
{
    mcc_spec *s = &c->s;
    long long multiple = (long long)s->make_vocab_size_divisible_by * s->tensor_model_parallel_size;
    long long padded = (s->vocab_size + multiple - 1) / multiple * multiple;
    if (padded > INT_MAX)
        return spec_fail(c, "%s (%d) padded to a multiple of %s * %s = %lld is %lld, which does not fit in a 32-bit "
                            "int: lower make_vocab_size_divisible_by", spec_where(c, spec_find("vocab_size")),
                         s->vocab_size, spec_where(c, spec_find("make_vocab_size_divisible_by")),
                         spec_where(c, spec_find("tensor_model_parallel_size")), multiple, padded);
    s->padded_vocab_size = (int)padded;
    return true;
}


/* Megatron's rules for its recompute fields (TransformerConfig.__post_init__), and activations read
 * as selective of mlp_act. Megatron refuses recompute_num_layers with selective; mcc takes it as
 * "only in the first N layers". */
static bool spec_check_recompute(spec_ctx *c)
{
    mcc_spec *s = &c->s;
    const spec_field *gran = spec_find("recompute_granularity"), *method = spec_find("recompute_method"),
                     *modules = spec_find("recompute_modules"), *layers = spec_find("recompute_num_layers");
    if (s->recompute_granularity == MCC_RECOMPUTE_ACTIVATIONS) {
        if (c->set[spec_index(modules)])
            return spec_fail(c, "%s is activations, the older spelling of selective with recompute_modules mlp_act, "
                                "and %s is set too: use selective with %s", spec_where(c, gran),
                             spec_where(c, modules), spec_where(c, modules));
        s->recompute_granularity = MCC_RECOMPUTE_SELECTIVE;
        s->recompute_modules = MCC_RM_MLP_ACT;
    }
    if (s->recompute_num_layers && s->recompute_granularity == MCC_RECOMPUTE_NONE)
        return spec_fail(c, "%s is set but %s is none: choose what to recompute (selective or full) or drop "
                            "recompute_num_layers", spec_where(c, layers), spec_where(c, gran));
    if (c->set[spec_index(modules)] && s->recompute_granularity != MCC_RECOMPUTE_SELECTIVE)
        return spec_fail(c, "%s is set but %s is %s: it chooses what selective recompute recomputes (full recomputes "
                            "whole layers): pass --recompute-granularity selective or drop it",
                         spec_where(c, modules), spec_where(c, gran), ir_recompute_words[s->recompute_granularity]);
    if (s->recompute_method != MCC_RECOMPUTE_METHOD_NONE && s->recompute_granularity != MCC_RECOMPUTE_FULL)
        return spec_fail(c, "%s is set but %s is %s: the method is full recompute's; pass --recompute-granularity "
                            "full or drop it", spec_where(c, method), spec_where(c, gran),
                         ir_recompute_words[s->recompute_granularity]);
    if (s->recompute_granularity == MCC_RECOMPUTE_FULL && s->recompute_method == MCC_RECOMPUTE_METHOD_NONE)
        return spec_fail(c, "%s is full, which needs %s: uniform (groups of recompute_num_layers layers) or block "
                            "(the first recompute_num_layers layers of each pipeline stage)", spec_where(c, gran),
                         spec_where(c, method));
    if (s->recompute_granularity == MCC_RECOMPUTE_FULL && s->recompute_num_layers < 1)
        return spec_fail(c, "%s is full, which needs %s of at least 1: the layers a checkpoint holds (uniform) or "
                            "those recomputed in each stage (block)", spec_where(c, gran), spec_where(c, layers));
    bool selective = s->recompute_granularity == MCC_RECOMPUTE_SELECTIVE;
    if (selective && (s->recompute_modules & MCC_RM_MLA_UP_PROJ) && !s->multi_latent_attention)
        return spec_fail(c, "%s: mla_up_proj recomputes multi-latent attention's up projections, and %s is false: "
                            "drop mla_up_proj", spec_where(c, modules), spec_where(c, spec_find("multi_latent_attention")));
    /* a module the model lacks has nothing to recompute: accepted, and said */
    int absent = !selective ? 0 : s->num_experts == 0 ? MCC_RM_MOE | MCC_RM_MOE_ACT | MCC_RM_SHARED_EXPERTS
                                  : s->moe_shared_expert_intermediate_size == 0 ? MCC_RM_SHARED_EXPERTS : 0;
    if (s->recompute_modules & absent) {
        char names[96];
        mcc_recompute_modules_text(s->recompute_modules & absent, names, sizeof names);
        fprintf(stderr, "mcc: %s %s: accepted, nothing to recompute: the model has no %s\n", spec_where(c, modules),
                names, s->num_experts == 0 ? "MoE layers" : "shared expert");
    }
    if (s->recompute_granularity == MCC_RECOMPUTE_SELECTIVE && s->recompute_modules == MCC_RM_CORE_ATTN)
        fprintf(stderr, "mcc: %s core_attn: accepted, nothing to change: attention is flash attention, which keeps "
                        "only its output and log-sum-exp and recomputes the probabilities in its backward anyway\n",
                spec_where(c, modules));
    return true;
}

/* Whether field f holds the value text spells (a choice's name, true/false, or a number). */
static bool spec_value_is(spec_ctx *c, const spec_field *f, const char *text)
{
    char now[64];
    spec_value_text(c, f, now, sizeof now);
    return strcmp(now, text) == 0 || (f->kind == K_NUM && spec_value(c, f) == strtod(text, NULL));
}

/* The Megatron flags that mean nothing more only beside a setting (--no-position-embedding with
 * rope): refused, with their reason, where the finished spec lacks it. */
static bool spec_check_holds(spec_ctx *c)
{
    for (int i = 0; i < c->nholds; i++) {
        const mcc_megatron_flag *m = c->holds[i];
        const char *eq = strchr(m->holds, '=');
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)(eq - m->holds), m->holds);
        if (!spec_value_is(c, spec_find(key), eq + 1))
            return spec_fail(c, "%s is refused here: %s", m->flag, m->why);
    }
    return true;
}

/* Every required field left out, in one message. */
static bool spec_check_required(spec_ctx *c)
{
    char flags[512] = "", keys[512] = "";
    int missing = 0;
    for (int i = 0; i < SPEC_NFIELDS; i++) {
        const spec_field *f = &spec_fields[i];
        if (f->need != D_REQUIRED || c->set[i]) continue;
        char flag[64];
        size_t nf = strlen(flags), nk = strlen(keys);
        spec_flag_name(f, flag, sizeof flag);
        snprintf(flags + nf, sizeof flags - nf, "%s%s N", nf ? " " : "", flag);
        snprintf(keys + nk, sizeof keys - nk, "%s%s.%s", nk ? ", " : "", spec_section_names[f->sec], f->key);
        missing++;
    }
    if (!missing) return true;
    return spec_fail(c, "%s %s required: pass %s, or give %s in SPEC.json", keys, missing > 1 ? "are" : "is", flags,
                     missing > 1 ? "them" : "it");
}

static bool spec_validate(spec_ctx *c)
{
    if (!spec_check_required(c)) return false;
    for (int i = 0; i < SPEC_NFIELDS; i++)
        if (!spec_check_field(c, &spec_fields[i])) return false;
    if (!spec_pad_vocab(c)) return false;
    mcc_spec *s = &c->s;
    if (s->num_layers > MCC_MAX_LAYERS)
        return spec_fail(c, "%s is %d: mcc builds at most %d layers", spec_where(c, spec_find("num_layers")),
                         s->num_layers, MCC_MAX_LAYERS);
    long long batch_unit = (long long)s->micro_batch_size * s->data_parallel_size;
    if (!spec_check_pair(c, spec_given(c, "kv_channels") || s->hidden_size % s->num_attention_heads == 0, "hidden_size",
                         "must be divisible by", "num_attention_heads",
                         "the head dimension is their quotient, unless kv_channels gives it") ||
        !spec_check_pair(c, s->num_attention_heads % s->num_query_groups == 0, "num_attention_heads",
                         "must be divisible by", "num_query_groups", NULL) ||
        !spec_check_pair(c, s->position_embedding_type == MCC_POS_ROPE || s->seq_length <= s->max_position_embeddings,
                         "seq_length", "exceeds", "max_position_embeddings",
                         "raise max_position_embeddings or lower seq_length (learned_absolute positions)") ||
        !spec_check_pair(c, s->min_lr <= s->lr, "min_lr", "must not exceed", "lr", NULL) ||
        !spec_check_pair(c, s->recompute_num_layers <= s->num_layers, "recompute_num_layers", "must not exceed",
                         "num_layers", "0 recomputes in every layer") ||
        !spec_check_lr(c) || !spec_check_holds(c))
        return false;
    if (!spec_check_recompute(c))
        return false;
    if (s->global_batch_size % batch_unit)
        return spec_fail(c, "%s (%d) must be a multiple of micro_batch_size * data_parallel_size = %lld: change "
                            "global_batch_size or micro_batch_size", spec_where(c, spec_find("global_batch_size")),
                         s->global_batch_size, batch_unit);
    if (!spec_check_mla(c) || !spec_check_mtp(c))
        return false;
    if (s->position_embedding_type == MCC_POS_ROPE && mcc_spec_head_dim(s) % 2 && spec_given(c, "kv_channels"))
        return spec_fail(c, "%s (%d), the head dimension, must be even for rope", spec_where(c, spec_find("kv_channels")),
                         s->kv_channels);
    if (s->position_embedding_type == MCC_POS_ROPE && mcc_spec_head_dim(s) % 2 && !s->multi_latent_attention)
        return spec_fail(c, "the head dimension %s / %s = %d must be even for rope: change hidden_size or "
                            "num_attention_heads", spec_where(c, spec_find("hidden_size")),
                         spec_where(c, spec_find("num_attention_heads")), mcc_spec_head_dim(s));
    if (!spec_check_nemotron(c) || !spec_check_yarn(c))
        return false;
    if (s->use_rope_scaling && s->position_embedding_type != MCC_POS_ROPE)
        return spec_fail(c, "%s scales rope's frequencies, but %s is learned_absolute: give position_embedding_type "
                            "rope, or drop use_rope_scaling", spec_where(c, spec_find("use_rope_scaling")),
                         spec_where(c, spec_find("position_embedding_type")));
    if (!s->use_precision_aware_optimizer && (s->exp_avg_dtype != MCC_MOMENT_FP32 || s->exp_avg_sq_dtype != MCC_MOMENT_FP32))
        return spec_fail(c, "%s or %s is bf16 but use_precision_aware_optimizer is off: add "
                            "--use-precision-aware-optimizer (as Megatron asks), or keep fp32",
                         spec_where(c, spec_find("exp_avg_dtype")), spec_where(c, spec_find("exp_avg_sq_dtype")));
    if (s->optimizer_offload_fraction > 1)
        return spec_fail(c, "%s must be in (0, 1] (got %.10g): 1 offloads every parameter's optimizer state",
                         spec_where(c, spec_find("optimizer_offload_fraction")), s->optimizer_offload_fraction);
    if (!spec_check_pair(c, !s->grad_reduce_in_bf16 || !s->optimizer_cpu_offload, "grad_reduce_in_bf16",
                         "is not built with", "optimizer_cpu_offload",
                         "the host's AdamW streams fp32 gradients (and under ZeRO the fp32 masters come back "
                         "through the gradients' blocks): drop one of the two"))
        return false;
    if (!spec_check_tp(c) || !spec_check_pp(c) || !spec_check_fp8(c) || !spec_check_moe(c) || !spec_check_cp(c))
        return false;
    if (mcc_spec_num_params(s) < 0)
        return spec_fail(c, "the model has more than 2^53 parameters: reduce num_layers, hidden_size, "
                            "ffn_hidden_size or vocab_size");
    return true;
}

/* The spec of path (NULL: none) and the flags, over the table's defaults, and Megatron's where
 * megatron (a model from flags alone). */
static bool spec_load(const char *path, bool megatron, int argc, char **argv, mcc_spec *out, int *rest, int *nrest,
                      char *err, size_t errlen)
{
    spec_ctx *c = calloc(1, sizeof *c);
    if (!c) return snprintf(err, errlen, "out of memory reading the spec"), false;
    c->err = err;
    c->errlen = errlen;
    spec_set_defaults(c);
    if (megatron) spec_set_megatron_defaults(c);
    bool ok = (!path || spec_read_json(c, path)) && spec_read_flags(c, argc, argv, rest, nrest) &&
              spec_derive(c) && spec_validate(c);
    if (ok) *out = c->s;
    free(c);
    return ok;
}

bool mcc_spec_load(const char *path, int argc, char **argv, mcc_spec *out, int *rest, int *nrest,
                   char *err, size_t errlen)
{
    return spec_load(path, !path, argc, argv, out, rest, nrest, err, errlen);
}

bool mcc_spec_load_fields(int argc, char **argv, mcc_spec *out, int *rest, int *nrest, char *err, size_t errlen)
{
    return spec_load(NULL, false, argc, argv, out, rest, nrest, err, errlen);
}

bool mcc_spec_is_field(const char *key) { return spec_find(key) != NULL; }

pp_split_flags mcc_spec_split_flags(const mcc_spec *s)
{
    int first = s->decoder_first_pipeline_num_layers, last = s->decoder_last_pipeline_num_layers;
    return (pp_split_flags){.num_layers = s->num_layers, .mtp_layers = s->mtp_num_layers,
                            .p = s->pipeline_model_parallel_size, .v = s->virtual_pipeline_model_parallel_size,
                            .first = first ? first : -1, .last = last ? last : -1,
                            .account_embedding = s->account_for_embedding_in_pipeline_split,
                            .account_loss = s->account_for_loss_in_pipeline_split,
                            .layout = s->pipeline_model_parallel_layout};
}


double mcc_spec_field(const mcc_spec *s, const char *key)
{
    const spec_field *f = spec_find(key);
    assert(f && f->kind != K_SET && f->kind != K_LAYERS && f->kind != K_TEXT);
    return spec_field_value(s, f);
}

/* One norm's parameters over a width of w (LayerNorm's scale and bias, RMSNorm's scale). */
static double spec_norm_params_of(const mcc_spec *s, double w)
{
    return s->normalization == MCC_NORM_LAYERNORM ? 2.0 * w : w;
}

/* One norm's parameters over the hidden state. */
static double spec_norm_params(const mcc_spec *s) { return spec_norm_params_of(s, s->hidden_size); }

/* Multi-latent attention's weights (frontend/model.c's mla_block): q's projections (through its
 * latent and its norm, or one), the kv latent's (with the rope key's channels), its norm, the up
 * projection to every head's k and v, the output; no biases but the output's. */
static double spec_mla_params(const mcc_spec *s)
{
    double d = s->hidden_size, H = s->num_attention_heads, qk = s->qk_head_dim + s->qk_pos_emb_head_dim;
    double ql = s->q_lora_rank, kl = s->kv_lora_rank, norms = s->qk_layernorm;
    double q = ql > 0 ? d * ql + norms * spec_norm_params_of(s, ql) + ql * H * qk : d * H * qk;
    double kv = d * (kl + s->qk_pos_emb_head_dim) + norms * spec_norm_params_of(s, kl) +
                kl * H * (s->qk_head_dim + s->v_head_dim);
    return q + kv + H * s->v_head_dim * d + (s->add_bias_linear ? d : 0);
}

/* Standard attention's weights: q, k, v, out, q's and k's norms (qk_layernorm) and the biases. */
static double spec_attention_params(const mcc_spec *s)
{
    double d = s->hidden_size, hd = mcc_spec_head_dim(s);
    double q = s->num_attention_heads * hd, kv = s->num_query_groups * hd;
    double bias = s->add_bias_linear ? q + 2 * kv + d : s->add_qkv_bias ? q + 2 * kv : 0;
    double qk_norms = s->qk_layernorm ? 2 * spec_norm_params_of(s, hd) : 0;
    return q * d + 2 * kv * d + d * q + qk_norms + bias;
}

double mcc_spec_layer_params(const mcc_spec *s)
{
    double d = s->hidden_size, ff = s->ffn_hidden_size, mats = s->activation == MCC_ACT_SWIGLU ? 3 : 2;
    double mlp = ff * d * mats + (s->add_bias_linear ? ff * (mats - 1) + d : 0); /* up (+gate), down, biases */
    double attn = s->multi_latent_attention ? spec_mla_params(s) : spec_attention_params(s);
    return 2 * spec_norm_params(s) + attn + mlp;
}

/* A multi-token prediction depth's layer (l >= num_layers) is of the last layer's kind, as
 * Megatron's MTP block spec takes the decoder's last layer spec. */
bool mcc_spec_moe_layer(const mcc_spec *s, int l)
{
    const mcc_layer_pattern *p = &s->moe_layer_freq;
    if (l >= s->num_layers)
        l = s->num_layers - 1;
    return s->num_experts > 0 && (p->n ? l < p->n && p->moe[l] : l % p->every == 0);
}

/* No biases in an MoE layer (spec_check_moe_built). */
double mcc_spec_moe_layer_params(const mcc_spec *s, bool active)
{
    double d = s->hidden_size, mats = s->activation == MCC_ACT_SWIGLU ? 3 : 2;
    double experts = active ? s->moe_router_topk : s->num_experts;
    return mcc_spec_layer_params(s) - mats * s->ffn_hidden_size * d + s->num_experts * d +
           experts * mats * s->moe_ffn_hidden_size * d + mats * s->moe_shared_expert_intermediate_size * d;
}

/* Counted in double: every term is exact below 2^53, and larger models are reported as -1
 * instead of overflowing. */
static int64_t spec_params(const mcc_spec *s, bool active)
{
    double d = s->hidden_size;
    double embed = (double)s->padded_vocab_size * d * (s->untie_embeddings_and_output_weights ? 2 : 1);
    double pos = s->position_embedding_type == MCC_POS_LEARNED ? (double)s->max_position_embeddings * d : 0;
    /* the MoE layers counted, not visited: a bad spec's num_layers may be in the billions */
    const mcc_layer_pattern *p = &s->moe_layer_freq;
    double moe = 0;
    if (s->num_experts > 0 && p->n)
        for (int l = 0; l < p->n && l < s->num_layers; l++)
            moe += p->moe[l] != 0;
    else if (s->num_experts > 0)
        moe = p->every > 0 ? (double)((s->num_layers + p->every - 1) / p->every) : 0; /* layers 0, every, ... */
    double total = embed + pos + spec_norm_params(s) + moe * mcc_spec_moe_layer_params(s, active) +
                   (s->num_layers - moe) * mcc_spec_layer_params(s);
    /* each multi-token depth: its two input norms, its projection [d, 2d], a layer of the last one's kind, its norm */
    double last = mcc_spec_moe_layer(s, s->num_layers - 1) ? mcc_spec_moe_layer_params(s, active) : mcc_spec_layer_params(s);
    total += s->mtp_num_layers * (3 * spec_norm_params(s) + 2 * d * d + last);
    return total < 9007199254740992.0 ? (int64_t)total : -1;
}

int64_t mcc_spec_num_params(const mcc_spec *s) { return spec_params(s, false); }
int64_t mcc_spec_num_active_params(const mcc_spec *s) { return spec_params(s, true); }

/* ---- help and "did you mean" -------------------------------------------------------------- */

/* "--tensor-model-parallel-size, --tp". */
static void spec_flags_text(const spec_field *f, char *buf, size_t n)
{
    spec_flag_name(f, buf, n);
    if (f->alias) {
        size_t used = strlen(buf);
        snprintf(buf + used, n - used, ", --%s", f->alias);
    }
}

static void spec_default_text(const spec_field *f, char *buf, size_t n)
{
    if (f->need != D_VALUE) snprintf(buf, n, "%s", f->need == D_REQUIRED ? "required" : "derived");
    else if (f->kind == K_BOOL) snprintf(buf, n, "%s", f->def ? "true" : "false");
    else if (f->kind == K_ENUM) snprintf(buf, n, "%s", f->choices[(int)f->def]);
    else if (f->kind == K_SET) mcc_recompute_modules_text((int)f->def, buf, n); /* the one set field */
    else if (f->kind == K_TEXT) snprintf(buf, n, "\"\""); /* empty: not given */
    else snprintf(buf, n, "%.10g", f->def);
}

void mcc_spec_print_fields(FILE *out, bool markdown)
{
    static const char *const type_text[] = {"int", "number", "bool", "choice", "names", "layers", "text"}; /* ORDER spec_kind */
    if (markdown)
        fprintf(out, "<!-- generated by `mcc help fields --markdown` from frontend/spec.c's field table: edit the "
                     "table, not this file (tests/docs_check.py checks they agree) -->\n"
                     "# Spec fields\n\nSPEC.json's keys, `section.key`, each also set by its flag (a bool's flag "
                     "alone means true; `--flag=value` is `--flag value`).\n");
    else
        fprintf(out, "Spec fields: SPEC.json's keys (section.key), each also set by its flag (a bool's flag alone "
                     "means true):\n  %-38s %-7s %-16s %s\n", "FLAG", "TYPE", "DEFAULT", "MEANING");
    for (int i = 0; i < SPEC_NFIELDS; i++) {
        const spec_field *f = &spec_fields[i];
        char flags[80], def[32], choices[128] = "";
        bool new_section = i == 0 || f->sec != spec_fields[i - 1].sec;
        spec_flags_text(f, flags, sizeof flags);
        spec_default_text(f, def, sizeof def);
        for (int k = 0; (f->kind == K_ENUM || f->kind == K_SET) && f->choices[k]; k++) {
            size_t used = strlen(choices);
            snprintf(choices + used, sizeof choices - used, "%s%s", k ? "|" : " (", f->choices[k]);
        }
        if (*choices) strncat(choices, ")", sizeof choices - strlen(choices) - 1);
        if (!markdown) {
            if (new_section) fprintf(out, " %s:\n", spec_section_names[f->sec]);
            fprintf(out, "  %-38s %-7s %-16s %s%s\n", flags, type_text[f->kind], def, f->help, choices);
            continue;
        }
        if (new_section)
            fprintf(out, "\n## %s\n\n| field | flag | type | default | meaning |\n|---|---|---|---|---|\n",
                    spec_section_names[f->sec]);
        fprintf(out, "| `%s.%s` | `%s` | %s | %s | ", spec_section_names[f->sec], f->key, flags, type_text[f->kind], def);
        cli_print_md_cell(out, f->help);
        cli_print_md_cell(out, choices);
        fprintf(out, " |\n");
    }
}

void mcc_spec_print_help(FILE *out)
{
    mcc_spec_print_fields(out, false);
    mcc_megatron_print_help(out, false);
}

const char *mcc_spec_flag_near(const char *flag, const char *const *extra)
{
    enum { MAX_EXTRA = 64 };
    static char field_flags[2 * SPEC_NFIELDS][64]; /* the returned name may point here */
    static const char *names[2 * SPEC_NFIELDS + MCC_MEGATRON_MAX + MAX_EXTRA];
    int n = 0, nf = 0;
    for (int i = 0; i < SPEC_NFIELDS; i++) {
        spec_flag_name(&spec_fields[i], field_flags[nf], sizeof field_flags[nf]);
        names[n++] = field_flags[nf++];
        if (spec_fields[i].alias) {
            snprintf(field_flags[nf], sizeof field_flags[nf], "--%s", spec_fields[i].alias);
            names[n++] = field_flags[nf++];
        }
    }
    for (int i = 0; i < mcc_megatron_count(); i++) names[n++] = mcc_megatron_at(i)->flag;
    for (int i = 0; extra && extra[i] && i < MAX_EXTRA; i++) names[n++] = extra[i];
    return cli_closest(flag, names, n);
}
