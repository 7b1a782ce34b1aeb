/* spec.h — the validated training spec: model, parallel and training sections of SPEC.json,
 * after CLI overrides. Field names are Megatron-LM's argument names with '_' for '-'. */
#ifndef MCC_SPEC_H
#define MCC_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "passes/pp_schedule.h"

/* The enums of the choices a plan's config carries too (norm, position, recompute, cp_comm,
 * lr and WSD styles, pipeline schedule, FP8, the router's score) follow ir.h's (spec.c asserts
 * it), and their fields' words are ir.h's ir_*_words. */
typedef enum { MCC_NORM_LAYERNORM, MCC_NORM_RMSNORM } mcc_norm;
typedef enum { MCC_POS_LEARNED, MCC_POS_ROPE } mcc_pos;
typedef enum { MCC_ROPE_PLAIN, MCC_ROPE_YARN } mcc_rope_type;
typedef enum { MCC_ACT_GELU, MCC_ACT_SWIGLU } mcc_act;
typedef enum { MCC_LR_CONSTANT, MCC_LR_LINEAR, MCC_LR_COSINE, MCC_LR_INVERSE_SQRT, MCC_LR_WSD } mcc_lr_style;
/* Megatron's recompute_granularity: selective recomputes the ops of recompute_modules in the
 * backward, full each recomputed layer's whole forward from its input (recompute_method);
 * activations is an older spelling of selective with recompute_modules mlp_act (spec_derive) */
typedef enum { MCC_RECOMPUTE_NONE, MCC_RECOMPUTE_SELECTIVE, MCC_RECOMPUTE_ACTIVATIONS, MCC_RECOMPUTE_FULL } mcc_recompute;
/* Megatron's recompute_method (full only): uniform checkpoints groups of recompute_num_layers
 * layers, block the first recompute_num_layers layers of each pipeline stage one by one */
typedef enum { MCC_RECOMPUTE_METHOD_NONE, MCC_RECOMPUTE_UNIFORM, MCC_RECOMPUTE_BLOCK } mcc_recompute_method;
/* recompute_modules (selective), a set: Megatron's names, and mcc's mlp_act (the dense MLP's
 * GELU/SiLU/SwiGLU output). ORDER recompute_module_names (spec.c) */
enum {
    MCC_RM_CORE_ATTN = 1 << 0, MCC_RM_MLP = 1 << 1, MCC_RM_LAYERNORM = 1 << 2, MCC_RM_MOE_ACT = 1 << 3,
    MCC_RM_MOE = 1 << 4, MCC_RM_SHARED_EXPERTS = 1 << 5, MCC_RM_MLA_UP_PROJ = 1 << 6, MCC_RM_MLP_ACT = 1 << 7,
};
/* The comma-separated names of the modules in set `modules` ("" for none) into buf. */
void mcc_recompute_modules_text(int modules, char *buf, size_t n);
typedef enum { MCC_SP_SPLIT_SEQUENCE, MCC_SP_SPLIT_BATCH } mcc_sp_split;
/* Megatron's --cp-comm-type: how attention reaches the keys and values of the other cp ranks */
typedef enum { MCC_CP_P2P, MCC_CP_ALL_GATHER, MCC_CP_A2A } mcc_cp_comm;
typedef enum { MCC_MOMENT_FP32, MCC_MOMENT_BF16 } mcc_moment_dtype; /* Megatron's --exp-avg-dtype names */
typedef enum { MCC_WSD_EXPONENTIAL, MCC_WSD_LINEAR, MCC_WSD_COSINE, MCC_WSD_MINUS_SQRT } mcc_wsd_style;
/* --pipeline-schedule: auto, then passes/pp_schedule.h's pp_sched_kind in its order */
typedef enum { MCC_PP_SCHED_AUTO, MCC_PP_SCHED_1F1B, MCC_PP_SCHED_INTERLEAVED, MCC_PP_SCHED_ZB_H1 } mcc_pp_sched;
/* A pipeline_schedule other than auto as its row of pp_scheds, and back. */
static inline pp_sched_kind mcc_pp_sched_kind(mcc_pp_sched s) { return (pp_sched_kind)(s - MCC_PP_SCHED_1F1B); }
static inline mcc_pp_sched mcc_pp_sched_of(pp_sched_kind k) { return (mcc_pp_sched)(k + MCC_PP_SCHED_1F1B); }
/* FP8 (Megatron's --fp8-format): hybrid E4M3 forward, E5M2 gradients; e4m3 throughout */
typedef enum { MCC_FP8_NONE, MCC_FP8_HYBRID, MCC_FP8_E4M3 } mcc_fp8_format;
typedef enum { MCC_FP8_DELAYED, MCC_FP8_TENSORWISE, MCC_FP8_BLOCKWISE } mcc_fp8_recipe; /* Megatron's default: delayed */
typedef enum { MCC_AMAX_MOST_RECENT, MCC_AMAX_MAX } mcc_amax_algo; /* Megatron's default: most_recent */

/* MoE (Megatron's --moe-* fields): the router's score function, load balancing and token dropping */
typedef enum { MCC_MOE_SOFTMAX, MCC_MOE_SIGMOID } mcc_moe_score;          /* ORDER ops.def moe_route's score */
typedef enum { MCC_MOE_AUX_LOSS, MCC_MOE_SEQ_AUX_LOSS, MCC_MOE_SINKHORN, MCC_MOE_BALANCE_NONE } mcc_moe_balance;
typedef enum { MCC_MOE_DROP_PROBS, MCC_MOE_DROP_POSITION } mcc_moe_drop;
/* the router's GEMM and scores: in the activations' dtype (Megatron's None), fp32, or fp64 (refused) */
typedef enum { MCC_ROUTER_DTYPE_NONE, MCC_ROUTER_DTYPE_FP32, MCC_ROUTER_DTYPE_FP64 } mcc_moe_router_dtype;
/* moe_layer_freq (Megatron's): every `every`-th layer is MoE (layers 0, every, 2 every, ...), or,
 * when n > 0, layer l is MoE where moe[l] (a list of num_layers 0s and 1s) */
#define MCC_MAX_LAYER_PATTERN 1024
/* num_layers' bound (the largest models have ~130): the model is built layer by layer */
#define MCC_MAX_LAYERS MCC_MAX_LAYER_PATTERN
typedef struct {
    int every;                          /* first: the spec table stores the integer form here */
    int n;
    unsigned char moe[MCC_MAX_LAYER_PATTERN];
} mcc_layer_pattern;
typedef struct {
    /* model */
    int num_layers, hidden_size, num_attention_heads, num_query_groups, ffn_hidden_size;
    int kv_channels;                    /* a head's width (default hidden_size / num_attention_heads; Qwen3's 128
                                           may differ: q is [heads * kv_channels, hidden]) */
    int seq_length, max_position_embeddings, vocab_size; /* vocab_size: the tokenizer's, as given */
    int make_vocab_size_divisible_by;   /* Megatron's: the vocabulary is padded to a multiple of this x tp */
    mcc_norm normalization;             /* "LayerNorm" | "RMSNorm" */
    mcc_pos position_embedding_type;    /* "learned_absolute" | "rope" */
    mcc_act activation;                 /* from "swiglu": true/false (default false, as Megatron) */
    bool untie_embeddings_and_output_weights, add_bias_linear;
    bool add_qkv_bias;                  /* biases on q, k, v alone (Qwen2), Megatron's --add-qkv-bias */
    bool qk_layernorm;                  /* the norm over each head of q and k before rope (Qwen3, OLMo 2) */
    bool squared_relu;                  /* the MLP's activation relu(x)^2, no gate (Nemotron-4), Megatron's flag */
    bool apply_layernorm_1p;            /* each norm's weight stored zero-centred: it scales by 1 + w (Nemotron-4) */
    double rotary_percent;              /* rope turns a head's first kv_channels * this channels (Nemotron-4: 0.5) */
    /* DeepSeek's multi-latent attention (frontend/model.c's mla_block; Megatron's names): queries through
       a q_lora_rank latent (0: one projection), keys and values through a kv_lora_rank one; a head's q and k
       are qk_head_dim channels without position and qk_pos_emb_head_dim turned by rope (k's shared by the
       heads), its v v_head_dim */
    bool multi_latent_attention;
    int q_lora_rank, kv_lora_rank, qk_head_dim, qk_pos_emb_head_dim, v_head_dim;
    /* DeepSeek-V3's multi-token prediction (frontend/model.c's mtp_depth; Megatron's names): mtp_num_layers
       depths after the model, each a layer of the last layer's kind predicting one token further; their
       losses' mean times mtp_loss_scaling_factor joins the objective */
    int mtp_num_layers;
    double mtp_loss_scaling_factor;
    double init_method_std, norm_epsilon, rotary_base;
    bool use_rope_scaling;              /* LLaMA 3.1's rope frequencies (ir.h ir_rope_freq), Megatron's flag */
    double rope_scaling_factor;         /* with it: the low frequencies divided by this (Megatron's default 8) */
    mcc_rope_type rope_type;            /* yarn: YaRN's frequencies (ir.h ir_rope_scale), with the five below */
    double rotary_scaling_factor, yarn_beta_fast, yarn_beta_slow, mscale, mscale_all_dim;
    int yarn_original_max_position_embeddings;
    double attention_dropout;           /* dropout probability of the attention probabilities */
    double hidden_dropout;              /* of the embedding output and of each block's output before
                                           its residual add (Megatron's places); both default 0 */
    /* mixture of experts (frontend/model.c's MoE block); num_experts 0: a dense model */
    int num_experts, moe_ffn_hidden_size, moe_router_topk, moe_shared_expert_intermediate_size;
    mcc_moe_score moe_router_score_function; /* "softmax" | "sigmoid" */
    bool moe_router_pre_softmax;        /* softmax: the top k of the probabilities, not of the logits */
    double moe_router_topk_scaling_factor; /* the routing weights times this (0: Megatron's None) */
    int moe_router_num_groups, moe_router_group_topk; /* group-limited routing (0: none, Megatron's None) */
    mcc_moe_balance moe_router_load_balancing_type; /* "aux_loss" | "seq_aux_loss" | "sinkhorn" | "none" */
    double moe_aux_loss_coeff, moe_z_loss_coeff;
    bool moe_router_enable_expert_bias; /* aux-loss-free balancing: an EXPERT_BIAS global per MoE layer */
    bool moe_router_force_load_balancing; /* training steps route by random logits (model.c's route) */
    double moe_router_bias_update_rate;
    double moe_expert_capacity_factor;  /* 0: dropless (Megatron's None) */
    mcc_moe_drop moe_token_drop_policy; /* "probs" | "position" */
    mcc_moe_router_dtype moe_router_dtype; /* "none" | "fp32" | "fp64" */
    bool moe_pad_expert_input_to_capacity;
    bool moe_shared_expert_overlap;     /* the all-to-alls beside the shared expert (passes/comm_overlap.c) */
    mcc_layer_pattern moe_layer_freq;   /* which layers are MoE */
    /* parallel */
    int tensor_model_parallel_size, pipeline_model_parallel_size, data_parallel_size;
    int expert_model_parallel_size, expert_tensor_parallel_size; /* ep divides dp and num_experts; etp: 1 */
    int context_parallel_size;          /* the sequence split over cp ranks in 2 cp causally balanced chunks */
    int world_size;                     /* the ranks the job starts; > 0: data_parallel_size derived from it */
    int nproc_per_node, nnodes;         /* torchrun's: world_size = nnodes x nproc_per_node where given (0: not) */
    mcc_cp_comm cp_comm_type;           /* "p2p" (Megatron's default: ring attention) | "all_gather" | "a2a" (Ulysses) */
    bool use_distributed_optimizer;     /* ZeRO-1: optimizer state sharded over dp (no-op at dp 1) */
    bool sequence_parallel;             /* Megatron's SP: activations outside attention/MLP split along
                                           the sequence over tp (no-op at tp 1) */
    mcc_sp_split sequence_parallel_split; /* "sequence" (Megatron's) | "batch": the same activations split
                                           by whole batch rows, so each collective is one contiguous block */
    bool tp_comm_overlap;               /* sequence parallelism's collectives fused with their matmuls, which
                                           overlap them with this rank's own rows' GEMMs */
    bool tp_comm_interleave;            /* micro_step's forward built twice, over the micro-batch's two
                                           halves, each half's collectives beside the other's work */
    int ddp_bucket_size;                /* elements of gradient per data-parallel all-reduce */
    /* the stage split (Megatron's flags; 0: not given): passes/pp_schedule.h pp_split_layers */
    int decoder_first_pipeline_num_layers, decoder_last_pipeline_num_layers;
    bool account_for_embedding_in_pipeline_split, account_for_loss_in_pipeline_split;
    int num_layers_per_virtual_pipeline_stage, num_virtual_stages_per_pipeline_rank;
    char pipeline_model_parallel_layout[512]; /* Megatron's layout text ("": not given): pp_split_layers */
    mcc_pp_sched pipeline_schedule;     /* "auto" | "1f1b" | "interleaved" | "zb-h1" */
    int virtual_pipeline_model_parallel_size; /* derived, not a field: v from the two fields above (1: none) */
    bool overlap_grad_reduce;           /* all-reduce each bucket inside the backward, as soon as its
                                           gradients are final (one micro-batch per step, no ZeRO) */
    bool grad_reduce_in_bf16;           /* Megatron's: gradients accumulated, reduced over dp and held in
                                           bf16 buffers (AdamW still updates fp32 masters) */
    /* training */
    int micro_batch_size, global_batch_size, train_iters, lr_warmup_iters, seed;
    int lr_decay_iters;                 /* 0: train_iters (Megatron's default) */
    int lr_wsd_decay_iters;             /* WSD: the final iterations that decay */
    /* sample-based training (Megatron's): train_samples > 0 counts the run and the lr schedule's
       spans in samples, each iteration a global batch of them (train_iters derived from it); the
       *_iters spans are then 0, and these are 0 in an iteration-based run */
    int train_samples, lr_warmup_samples, lr_decay_samples, lr_wsd_decay_samples;
    double lr_warmup_fraction;          /* of the decay span; exclusive with lr_warmup_iters/_samples */
    double lr, min_lr, weight_decay, clip_grad, adam_beta1, adam_beta2, adam_eps;
    double lr_warmup_init;              /* the lr warmup starts from (Megatron's init_lr; default 0) */
    double decoupled_lr, decoupled_min_lr; /* the input embedding's and output layer's peak and final lr
                                           (derived: lr and min_lr when not given) */
    bool optimizer_cpu_offload;         /* fp32 masters and Adam state in host memory, updated there */
    double optimizer_offload_fraction;  /* of the parameters' elements, in declaration order (default 1) */
    bool overlap_cpu_optimizer_d2h_h2d; /* the host step's copies overlap it, parameter by parameter */
    bool use_precision_aware_optimizer; /* Megatron's switch for the moments' dtypes below */
    bool store_param_remainders;        /* with it: fp32 masters as bf16 copy + 16-bit remainder */
    mcc_moment_dtype exp_avg_dtype, exp_avg_sq_dtype; /* "fp32" | "bf16": Adam's m and v as stored */
    mcc_lr_style lr_decay_style;        /* "constant" | "linear" | "cosine" | "inverse-square-root" | "WSD" */
    mcc_recompute recompute_granularity; /* "none" | "selective" | "full" ("activations" read as selective) */
    mcc_recompute_method recompute_method; /* full: "uniform" | "block" */
    int recompute_modules;              /* selective: a set of MCC_RM_* */
    int recompute_num_layers;           /* full: layers per checkpoint (uniform) or per stage (block);
                                           selective: only in the first N layers (0: all) */
    int cross_entropy_chunks;           /* the head and its cross entropy over this many chunks of the tokens */
    mcc_wsd_style lr_wsd_decay_style;   /* "exponential" | "linear" | "cosine" | "minus_sqrt" */
    /* FP8 (passes/fp8.c): the transformer layers' linear GEMMs on E4M3/E5M2 operands */
    mcc_fp8_format fp8_format;          /* "none" | "hybrid" | "e4m3" */
    mcc_fp8_recipe fp8_recipe;          /* "delayed" | "tensorwise" (current scaling) | "blockwise" */
    int fp8_amax_history_len;           /* delayed: steps of amax a tensor's history holds (Megatron's 1) */
    mcc_amax_algo fp8_amax_compute_algo;/* delayed: the history's most_recent or max */
    int fp8_margin;                     /* delayed: scale = fp8 max / amax / 2^margin */
    bool fp8_wgrad;                     /* weight-gradient GEMMs in FP8 too (default true) */
    bool first_last_layers_bf16;        /* the first and last layers' GEMMs stay in high precision */
    int num_layers_at_start_in_bf16, num_layers_at_end_in_bf16; /* how many (Megatron's 1 and 1) */
    int eval_interval, eval_iters, log_interval; /* train_rank's defaults for its flags */
    /* derived, not a field: the vocabulary the model has (embedding rows, logits), vocab_size padded
       up to a multiple of make_vocab_size_divisible_by * tensor_model_parallel_size as Megatron's
       _vocab_size_with_padding does; the rows past vocab_size are dummy tokens no data holds */
    int padded_vocab_size;
} mcc_spec;

/* Reads SPEC.json (path NULL: none, the model from the flags alone with Megatron's defaults for what
 * they leave out), applies `--flag value` overrides (argv: the flags after the spec path),
 * validates everything. On an error writes a message naming the JSON path or flag and the fix
 * into err and returns false: every bad flag's, one a line, where the flags are bad. Unrecognised flags are left for the caller: their indices
 * are returned in rest/nrest (rest must hold argc entries). */
bool mcc_spec_load(const char *path, int argc, char **argv, mcc_spec *out, int *rest, int *nrest,
                   char *err, size_t errlen);
/* The model of `--field value` flags alone over the spec table's defaults (not Megatron's, and
 * no notes): `mcc convert --to hf` rebuilds a checkpoint's spec from its manifest so. */
bool mcc_spec_load_fields(int argc, char **argv, mcc_spec *out, int *rest, int *nrest, char *err, size_t errlen);
/* Whether key is a spec field's JSON key ("norm_epsilon"). */
bool mcc_spec_is_field(const char *key);
/* The stage split's flags as the spec gives them (v: the derived virtual stages): what every
 * reader of the split passes pp_split_layers, so the spec's layout, first/last and account flags
 * reach each the same way. */
pp_split_flags mcc_spec_split_flags(const mcc_spec *s);


/* One check of the spec validator: a place in frontend/spec.c that refuses a spec, and how many
 * times it has refused one in this process. mcc_spec_checks lists them all, so that
 * tests/spec_test.c can fail when a check has no case in tests/bad_specs.txt. */
typedef struct {
    const char *func;
    int line;
    int refusals;
} mcc_spec_check;
mcc_spec_check *const *mcc_spec_checks(int *n);

/* Prints every spec field (flag, type, default, one line of meaning) and the Megatron flags mcc
 * accepts, maps or refuses: the body of `mcc compile --help`. */
void mcc_spec_print_help(FILE *out);

/* The spec fields alone, as --help lists them or as Markdown tables, a section each
 * (`mcc help fields --markdown`: docs/spec-fields.md). */
void mcc_spec_print_fields(FILE *out, bool markdown);

/* The flag nearest to a mistyped one among the spec fields' flags, the Megatron flags and
 * extra (a NULL-terminated list of the caller's own flags), or NULL when none is close. The
 * name may be in static storage, valid until the next call. */
const char *mcc_spec_flag_near(const char *flag, const char *const *extra);

/* Derived quantities. */
static inline int mcc_spec_head_dim(const mcc_spec *s) { return s->kv_channels; }
/* The channels of a head that rope turns, Megatron's int(kv_channels * rotary_percent) */
static inline int mcc_spec_rotary_dim(const mcc_spec *s) { return (int)(s->kv_channels * s->rotary_percent); }
static inline int mcc_spec_accum_steps(const mcc_spec *s)
{
    return s->global_batch_size / (s->micro_batch_size * s->data_parallel_size);
}
int64_t mcc_spec_num_params(const mcc_spec *s);
/* The parameters one token's forward multiplies by: an MoE layer's top-k experts, not all of them
 * (MFU's count); mcc_spec_num_params for a dense model. */
int64_t mcc_spec_num_active_params(const mcc_spec *s);
/* Whether layer l is a mixture-of-experts layer (num_experts > 0 and moe_layer_freq). */
bool mcc_spec_moe_layer(const mcc_spec *s, int l);
/* One transformer layer's parameters (norms, attention, MLP, biases), in double. */
double mcc_spec_layer_params(const mcc_spec *s);
/* One MoE layer's parameters: a dense layer's less its MLP, plus the router, the experts (the top k
 * of them when `active`: what a token's forward multiplies by) and the shared expert. */
double mcc_spec_moe_layer_params(const mcc_spec *s, bool active);
/* The value of the scalar field named key (an int, bool, number, or an enum's value) in s. */
double mcc_spec_field(const mcc_spec *s, const char *key);

#endif
