/* ir.h — the mcc intermediate representation: types, values, instructions, functions, modules.
 *
 * A module holds persistent globals (parameters, gradients, optimizer state), functions, each of
 * a kind (its role: the micro-batch step, the optimizer, ...), and a schedule: the programs of
 * steps a rank runs per training iteration and per validation batch. A function is a list of
 * instructions in SSA form; each instruction defines zero or more values, numbered %0, %1, ...
 * per function. Every op is described once, in ops.def. */
#ifndef MCC_IR_H
#define MCC_IR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define IR_MAX_DIMS 4
#define IR_MAX_ATTRS 11            /* rope's */
#define IR_MAX_RES 5 /* swiglu_grad_product's three and its two amax results */

typedef enum { IR_F32, IR_BF16, IR_F16, IR_FP8E4M3, IR_FP8E5M2, IR_I32, IR_I64, IR_I16, IR_NUM_DTYPES } ir_dtype;

/* The mesh axes, the one enum of them (the IR's, the runtime's groups: ir_mesh below): data,
 * pipeline, tensor, context, expert and expert-data parallel, and dp_cp, data parallel with
 * context parallel (Megatron's data_parallel_group_with_cp: the dp x cp ranks of one tp and pp
 * coordinate, which the dense parameters' replicas span under cp). edp and dp_cp are derived: their
 * ranks are other axes' (ir_axis_derived). A dimension may be split over an ordered list of axes,
 * outer to inner (the sequence over cp, then tp, under context and sequence parallelism);
 * `partial` is a bitmask of axes over which the value is a pending sum. */
typedef enum {
    IR_AXIS_NONE, IR_AXIS_DP, IR_AXIS_PP, IR_AXIS_TP, IR_AXIS_CP, IR_AXIS_EP, IR_AXIS_EDP, IR_AXIS_DP_CP, IR_NUM_AXES
} ir_axis;
#define IR_MAX_SHARD_AXES 3         /* axes one dimension may be split over */

typedef struct {
    ir_dtype dtype;
    int ndim;                       /* 0 = scalar */
    int64_t dims[IR_MAX_DIMS];
    uint16_t shard_pack[IR_MAX_DIMS]; /* per dimension its axes, 3 bits each, outer first: read
                                         and write it through ir_shard_* only */
    uint8_t partial;                /* bitmask of (1 << ir_axis) */
} ir_type;

typedef enum {
#define X(id, text, nargs, nres, inplace, flags, attrs, infer, grad, shard) IR_OP_##id,
#include "ops.def"
#undef X
    IR_NUM_OPS
} ir_op;

/* Each op's attribute positions, from its ops.def row (ATTRS): IR_ATTR_<ID>_<NAME> indexes
 * ir_instr.attr[] (IR_ATTR_ROPE_CP is rope's cp, 2), IR_NATTRS_<ID> counts them, one anonymous
 * enum per op. IR_ATTR_EACH_
 * applies IR_ATTR_ONE_ to each name of a list of up to IR_MAX_ATTRS; __VA_OPT__ (C23's, which
 * GCC and Clang take in C17) lets a list be empty. */
#define IR_ATTR_ONE_(op, name) IR_ATTR_##op##_##name,
#define IR_ATTR_0_(op, ...)
#define IR_ATTR_1_(op, a, ...) IR_ATTR_ONE_(op, a)
#define IR_ATTR_2_(op, a, ...) IR_ATTR_ONE_(op, a) IR_ATTR_1_(op, __VA_ARGS__)
#define IR_ATTR_3_(op, a, ...) IR_ATTR_ONE_(op, a) IR_ATTR_2_(op, __VA_ARGS__)
#define IR_ATTR_4_(op, a, ...) IR_ATTR_ONE_(op, a) IR_ATTR_3_(op, __VA_ARGS__)
#define IR_ATTR_5_(op, a, ...) IR_ATTR_ONE_(op, a) IR_ATTR_4_(op, __VA_ARGS__)
#define IR_ATTR_6_(op, a, ...) IR_ATTR_ONE_(op, a) IR_ATTR_5_(op, __VA_ARGS__)
#define IR_ATTR_7_(op, a, ...) IR_ATTR_ONE_(op, a) IR_ATTR_6_(op, __VA_ARGS__)
#define IR_ATTR_8_(op, a, ...) IR_ATTR_ONE_(op, a) IR_ATTR_7_(op, __VA_ARGS__)
#define IR_ATTR_9_(op, a, ...) IR_ATTR_ONE_(op, a) IR_ATTR_8_(op, __VA_ARGS__)
#define IR_ATTR_10_(op, a, ...) IR_ATTR_ONE_(op, a) IR_ATTR_9_(op, __VA_ARGS__)
#define IR_ATTR_11_(op, a, ...) IR_ATTR_ONE_(op, a) IR_ATTR_10_(op, __VA_ARGS__)
#define IR_ATTR_PICK_(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, each, ...) each
#define IR_ATTR_EACH_(op, ...)                                                                              \
    IR_ATTR_PICK_(__VA_ARGS__ __VA_OPT__(,) IR_ATTR_11_, IR_ATTR_10_, IR_ATTR_9_, IR_ATTR_8_, IR_ATTR_7_,   \
                  IR_ATTR_6_, IR_ATTR_5_, IR_ATTR_4_, IR_ATTR_3_, IR_ATTR_2_, IR_ATTR_1_, IR_ATTR_0_)(op, __VA_ARGS__)
#define IR_ATTR_LIST_(op, attrs) IR_ATTR_EACH_ attrs
#define IR_ATTR_UNPAREN_(...) __VA_ARGS__
#define X(id, text, nargs, nres, inplace, flags, attrs, infer, grad, shard) \
    enum { IR_ATTR_EACH_(id, IR_ATTR_UNPAREN_ attrs) IR_NATTRS_##id };
#include "ops.def"
#undef X
/* Attributes a family of ops keeps at one position, for the code that serves the family (ir.c
 * asserts every member's): every collective's mesh axis (local_shard's and local_slice_seq's
 * too), the sequence collectives' batch (ir_seq_dim) and overlap (IR_OPF_SEQ_COLLECTIVE's), every
 * matmul's ta and tb, every norm's eps and one_p, an elementwise op's one attribute (fill's value, scale's
 * factor). Other shared code indexes by the family's first op: IR_ATTR_DROPOUT_P is
 * attention_dropout's p too. */
enum {
    IR_ATTR_AXIS = IR_ATTR_ALL_REDUCE_AXIS,
    IR_ATTR_BATCH = IR_ATTR_ALL_GATHER_SEQ_BATCH,
    IR_ATTR_SEQ_OVERLAP = IR_ATTR_ALL_GATHER_SEQ_OVERLAP,
    IR_ATTR_TA = IR_ATTR_MATMUL_TA,
    IR_ATTR_TB = IR_ATTR_MATMUL_TB,
    IR_ATTR_EPS = IR_ATTR_LAYERNORM_EPS,
    IR_ATTR_ONE_P = IR_ATTR_LAYERNORM_ONE_P,
    IR_ATTR_SCALAR = IR_ATTR_SCALE_FACTOR,
};

/* Where a value lives once the memory plan has run. */
typedef enum { IR_MEM_NONE, IR_MEM_ARENA, IR_MEM_GLOBAL, IR_MEM_VIEW } ir_mem_kind;

typedef struct {
    ir_type type;
    int def;                        /* defining instruction index */
    ir_mem_kind mem;
    int64_t offset;                 /* byte offset in the function's arena (IR_MEM_ARENA) */
} ir_value;

/* The part of an attribute that differs between the ranks of a stage, a linear function of the
 * rank's mesh coordinates: the attribute's value on a rank is attr + the sum over the axes of
 * step[axis] * (the rank's coordinate along axis), step[IR_AXIS_NONE] unused. One plan then
 * serves every rank of a stage (passes/shard.c writes a shard's offsets so; a head offset under
 * tp and a2a's cp has two terms); train_rank resolves the terms when it loads its plan
 * (ir_resolve_ranks). Every step 0: the attribute is the same on every rank. */
typedef struct {
    double step[IR_NUM_AXES];
} ir_rank_term;

/* What an input or output is to the runtime and the passes, which find it by this (ir_find_role),
 * never by its @name (for people and dumps). Text: `{role=loss}` after the operands; a pipeline
 * boundary's `{role=pp_act, stage=S, index=K}` (the K-th value entering stage S from S - 1, or
 * pp_grad: its gradient, which stage S sends back to S - 1); an MoE statistic's index its layer;
 * first_sample's index 1 the second chain's (tp_comm_interleave's halves). Older texts
 * without roles get them from the well-known names (parse.c's role_of_name, the one place).
 * ORDER: ir_roles (ir.c). */
typedef enum {
    IR_ROLE_NONE,            /* a test's or a pass's own value: nothing looks for it */
    IR_ROLE_TOKENS,          /* i32[B,T]: the micro-batch's token ids */
    IR_ROLE_TARGETS,         /* i32[B,T]: the next tokens (-1 ignored) */
    IR_ROLE_FIRST_SAMPLE,    /* i64: the micro-batch's first sample's global index (dropout's seed) */
    IR_ROLE_LOSS,            /* f32: the micro-batch's mean loss */
    IR_ROLE_LOGITS,          /* f32[B T,V]: --dump-logits */
    IR_ROLE_LR,              /* f32: the step's learning rate */
    IR_ROLE_DECOUPLED_LR,    /* f32: the embedding's and output layer's (--decoupled-lr) */
    IR_ROLE_STEP,            /* f32: the optimizer step, from 1 */
    IR_ROLE_GRAD_NORM,       /* f32: the global gradient norm */
    IR_ROLE_CLIP_COEF,       /* f32: the clipping factor, the optimizer's to host_optimizer's */
    IR_ROLE_PP_ACT,          /* a pipeline stage's activation to the next (stage, index) */
    IR_ROLE_PP_GRAD,         /* a pipeline stage's input gradient to the previous (stage, index) */
    IR_ROLE_MOE_TOKENS_PER_EXPERT, /* i32[E] of MoE layer `index`: the tokens routed to each expert */
    IR_ROLE_MOE_KEPT_WEIGHTS,/* layer `index`'s routing weights, 0 where capacity dropped the pair */
    IR_ROLE_MOE_AUX_LOSS,    /* f32: layer `index`'s unscaled load-balancing loss */
    IR_ROLE_MOE_Z_LOSS,      /* f32: layer `index`'s unscaled router z-loss */
    IR_ROLE_MTP_LOSS,        /* f32: multi-token prediction depth `index` + 1's unscaled loss */
    IR_ROLE_TIED_GRAD,       /* tied_send's output, tied_sum's input: the `index`-th shared gradient */
    IR_NUM_ROLES
} ir_role_kind;

typedef struct {
    ir_role_kind kind;
    int stage;                      /* PP_ACT, PP_GRAD: the stage whose input it is; else 0 */
    int index;                      /* the K-th of its kind (a layer, a boundary value); else 0 */
} ir_role;

/* Each role's text name, which of stage and index it carries, and whether a function may have
 * several of it (the MoE statistics: under tp_comm_interleave each half's chain outputs a layer's,
 * and train_rank takes them all); every other role is one value's (ir_verify). ORDER: ir_role_kind. */
typedef struct {
    const char *name;
    bool staged, indexed, many;
} ir_role_info;
extern const ir_role_info ir_roles[IR_NUM_ROLES];
int ir_role_by_name(const char *name); /* -1 if unknown */

typedef struct {
    ir_op op;
    int nargs, nres;
    int *args;                      /* value ids */
    int res[IR_MAX_RES];            /* value ids */
    double attr[IR_MAX_ATTRS];      /* named by the op table */
    ir_rank_term per_rank[IR_MAX_ATTRS]; /* attr[k]'s rank-dependent part */
    char *sym;                      /* @name: input, global, output (a global's: its name, for people and
                                       the text) */
    int global;                     /* global: the index of its global in the module's globals, what
                                       passes and the runtime find it by; -1 for every other op */
    ir_role role;                   /* input, output: what it is (IR_ROLE_NONE for every other op) */
} ir_instr;

/* A function's role, which passes and the runtime find it by (ir_func_of_kind), never its name.
 * ORDER FUNC_KIND: ir_func_kinds (ir.c) describes each. */
typedef enum {
    IR_FUNC_STEP,       /* step: one training micro-batch: forward, loss, backward into the gradients */
    IR_FUNC_EVAL,       /* eval: one validation micro-batch: forward and loss only */
    IR_FUNC_TIED_SEND,  /* tied_send: a pipeline end stage's gradients of the parameters it shares with the
                           other end (tied embeddings), as outputs sent to it */
    IR_FUNC_TIED_SUM,   /* tied_sum: the other end's gradients of those parameters received and added */
    IR_FUNC_REDUCE,     /* reduce: the gradients summed over data-parallel (and tp-partial) ranks */
    IR_FUNC_GRAD_NORM,  /* grad_norm: the gradient norm alone (--skip-nan-steps checks it before the update) */
    IR_FUNC_OPTIMIZER,  /* optimizer: clipping and the update (@lr, @step in; @grad_norm out) */
    IR_FUNC_ZERO_GRADS, /* zero_grads: clears the gradient accumulators (a skipped step) */
    IR_FUNC_SETUP,      /* setup: runs once after the parameters are initialised */
    IR_FUNC_FORWARD,    /* forward: a pipeline stage's forward of one micro-batch, stashing what its backward reads */
    IR_FUNC_BACKWARD,   /* backward: a pipeline stage's backward of one micro-batch, into the gradients (under
                           a zero-bubble schedule: the input gradients alone) */
    IR_FUNC_WGRAD,      /* wgrad: a zero-bubble pipeline stage's weight gradients of one micro-batch */
    IR_FUNC_HOST_OPTIMIZER, /* host_optimizer: the update of the parameters whose optimizer state lives in host
                               memory (--optimizer-cpu-offload), run by the host after `optimizer`: their
                               gradients copied down, AdamW on the host, the updated masters copied up */
    IR_FUNC_PARAM_SYNC, /* param_sync: after host_optimizer, on the device: those parameters' ZeRO all-gather,
                           working copies and gradient zeroing */
    IR_NUM_FUNC_KINDS
} ir_func_kind;

/* Whether the train schedule calls a function of this kind once a micro-batch (else once a step). */
static inline bool ir_func_per_micro_batch(ir_func_kind k)
{
    return k == IR_FUNC_STEP || k == IR_FUNC_FORWARD || k == IR_FUNC_BACKWARD || k == IR_FUNC_WGRAD;
}

typedef struct {
    char *name;
    ir_func_kind kind;
    ir_instr *instrs;
    int ninstrs, cap_instrs;
    ir_value *vals;
    int nvals, cap_vals;
    int64_t arena_bytes;            /* set by the memory plan */
} ir_func;

/* A global's role. PARAM: the fp32 master value (what is initialised, updated and checkpointed);
 * STASH: a pipeline stage's saved activation, written by its forward and read by its backward, in
 * one of `slots` buffers (one per micro-batch in flight; the schedule's call names the slot; not a
 * companion, never checkpointed). Every other role but FP8_HISTORY and EXPERT_BIAS is a companion of one PARAM (ir_global.owner):
 * GRAD its gradient accumulator,
 * GRAD_SHARD this rank's block of the reduced gradient (ZeRO), MASTER_SHARD this rank's block of
 * the fp32 master (ZeRO), ADAM_M/ADAM_V Adam's moments, COPY a lower-precision working copy that
 * the forward and backward read. Under offload (--optimizer-cpu-offload) an offloaded PARAM itself is
 * `host` (its fp32 value lives on the host only; the device keeps the COPY, f32 where param_dtype is
 * f32), and so are its MASTER_SHARD (ZeRO's block) and Adam's moments; its gradient stays on the
 * device, streamed down through the host's staging buffer (ir_host_staging_bytes).
 * FP8_HISTORY: FP8 delayed scaling's state of one quantized tensor (passes/fp8.c; not a companion:
 * a weight's, its input's and its output gradient's are three), f32[1 + fp8_amax_history_len]:
 * [0] the step's amax so far (the max over its micro-batches, zero between steps), [1..] the
 * history, [1] the last step's; replicated, updated by the optimizer, checkpointed.
 * EXPERT_BIAS: a MoE layer's aux-loss-free balancing state (frontend/model.c, Megatron's
 * moe_router_enable_expert_bias; not a companion), f32[2,E] on FP8_HISTORY's pattern: row 0 the
 * step's tokens per expert so far (moe_bias_count over its micro-batches, zero between steps),
 * row 1 the bias moe_route adds to the scores for choosing; replicated, updated by the optimizer
 * (moe_bias_update, the counts sum-reduced over dp), checkpointed.
 * REMAINDER: the low 16 bits of a PARAM's fp32 master whose high 16 bits are its bf16 COPY
 * (Megatron's store_param_remainders; precision.c), i16[like the PARAM]: such a PARAM has no
 * storage of its own (ir_global_slab_bytes 0), no function names it (ir_verify), the runtime reads
 * and writes it through its two halves (runtime/bf16.h rt_master_join/rt_master_split), and its
 * COPY is the master rounded to nearest with ties away from zero, not to even (what 16 bits can
 * hold exactly).
 * ORDER: ir_global_kind_names (print.c). */
typedef enum {
    IR_GLOBAL_PARAM, IR_GLOBAL_GRAD, IR_GLOBAL_ADAM_M, IR_GLOBAL_ADAM_V, IR_GLOBAL_COPY, IR_GLOBAL_GRAD_SHARD,
    IR_GLOBAL_MASTER_SHARD, IR_GLOBAL_STASH, IR_GLOBAL_FP8_HISTORY, IR_GLOBAL_EXPERT_BIAS, IR_GLOBAL_REMAINDER,
    IR_NUM_GLOBAL_KINDS
} ir_global_kind;
typedef enum { IR_INIT_ZEROS, IR_INIT_ONES, IR_INIT_NORMAL, IR_NUM_INITS } ir_init;

/* A STASH's span in a pipeline schedule: the function kind that writes a micro-batch's values
 * into it to the last that reads them. A micro-batch's buffer of each span is taken when its
 * writer runs and free after its last reader, so each span has its own buffers and a call names
 * one per span it touches. Under 1F1B and interleaved 1F1B every stash is FB (the backward reads
 * all); under a zero-bubble schedule what only the input-gradient part reads is FB (free after
 * it), what the weight gradients read is FW, and the backward's values they read are BW.
 * ORDER: ir_stash_span_names, ir_stash_slot_keys (print.c); pp_span (passes/pp_schedule.h). */
typedef enum { IR_STASH_FB, IR_STASH_FW, IR_STASH_BW, IR_NUM_STASH_SPANS } ir_stash_span;

/* How the model builder places a parameter over tp, as torchtitan's per-model plan does
 * (the shard pass reads it, passes/shard.c): column-parallel (output features split: weights
 * [out, in] and their biases [out] along dimension 0), row-parallel (input features split:
 * weights along dimension 1), vocab-parallel (vocabulary rows split, dimension 0), or
 * replicated. Stacked experts' weights [E, out, in] split as each expert's Linear (dimension 1
 * column, 2 row). ORDER: ir_placement_names (print.c). */
typedef enum { IR_PLACE_REPLICATED, IR_PLACE_COLUMN, IR_PLACE_ROW, IR_PLACE_VOCAB, IR_NUM_PLACEMENTS } ir_placement;
/* The dimension placement `place` splits of a tensor of ndim dimensions, or -1 (replicated). */
int ir_placement_dim(ir_placement place, int ndim);

/* A layout record: how a global's whole tensor is split over the mesh, one split per axis it is
 * split over, in the order they apply. A DIM split cuts dimension `dim` of the block the earlier
 * splits left into equal parts; a FLAT split cuts that block, flattened, into equal consecutive
 * blocks (ZeRO) and is the last. A rank holds, for each split, the part its coordinate along the
 * split's axis names: at offset coordinate x the part's extent, along the dimension or in the
 * flat order (ir_layout_offset). Printed `layout=[tp:dim0, dp:flat]`.
 * A BALANCED split (context parallelism's causal balance, Megatron's) cuts dimension `dim` into
 * 2 n equal chunks, n the axis's degree, and the rank at coordinate r holds chunks r and 2n-1-r,
 * in that order (ir_cp_position); printed `cp:balanced1`. A type's split over cp is one
 * (ir_layout_of_type): cp splits only the sequence, always so. */
typedef enum { IR_SPLIT_DIM, IR_SPLIT_FLAT, IR_SPLIT_BALANCED } ir_split_kind;

/* Where element t of a part of `local` elements, the rank at coordinate r of n holds under a
 * BALANCED split, lies in the whole dimension: its first chunk is chunk r, its second 2n-1-r.
 * n <= 1: t (a whole dimension). The CPU kernels' positions (rope, pos_add, attention's mask) and
 * the runtime's binding of a split input both come from it. */
static inline int64_t ir_cp_position(int64_t t, int64_t local, int n, int r)
{
    if (n <= 1)
        return t;
    int64_t chunk = local / 2;
    return t < chunk ? r * chunk + t : (2 * (int64_t)n - 1 - r) * chunk + (t - chunk);
}

/* LLaMA 3.1's rope scaling (HF's rope_type "llama3"), with Megatron's constants, which every
 * LLaMA 3.x config holds: a wavelength above IR_ROPE_ORIGINAL_CONTEXT / IR_ROPE_LOW_FREQ_FACTOR
 * positions has its frequency divided by the factor, one below ... / IR_ROPE_HIGH_FREQ_FACTOR kept,
 * and one between blended linearly in the original context's count of turns. */
#define IR_ROPE_LOW_FREQ_FACTOR 1.0
#define IR_ROPE_HIGH_FREQ_FACTOR 4.0
#define IR_ROPE_ORIGINAL_CONTEXT 8192.0
/* A rope op's frequency rule, from its attributes and its rotary width R (ir_rope_scale_of): pair
 * i (< R/2) turns theta^(-2i/R) radians a position, scaled as above when factor > 0, or as YaRN
 * when yarn (Megatron's YarnRotaryEmbedding, transformers' DeepSeek-V3 rope): theta^(-2i/R) / factor
 * blended into the unscaled frequency by a ramp over the pairs [yarn_low, yarn_high] (the pairs
 * that turn beta_fast and beta_slow times in the original context, rounded out to whole pairs), its
 * cos and sin multiplied by concentration (mscale(factor, mscale) / mscale(factor, mscale_all_dim),
 * mscale(s, m) = 0.1 m ln s + 1 for s > 1, else 1); concentration 1 otherwise. */
typedef struct {
    double theta, factor;
    bool yarn;
    double yarn_low, yarn_high, concentration;
} ir_rope_scale;
ir_rope_scale ir_rope_scale_of(const double *rope_attr, int64_t R);
/* YaRN's mscale(s, m) above (Megatron's _yarn_get_mscale): also MLA's softmax scale's factor */
double ir_yarn_mscale(double factor, double m);
/* The frequency of pair i of the rule: Megatron's _apply_scaling and transformers'
 * _compute_llama3_parameters, or YaRN's, in double (the CUDA kernels' rope.cuh is its twin;
 * tests/rope_scaling_ref.py an independent transcription of transformers'). */
double ir_rope_freq(const ir_rope_scale *s, int64_t i, int64_t R);

/* moe_capacity's rank of pair p of rows [N, k] (k pairs a row) by token order: p itself, or under
 * cp > 1, rows being a micro-batch's sequences of seq tokens gathered over cp in rank order (each
 * sequence's ranks' balanced chunks in turn), p's place with its row at its token's position. */
static inline int64_t ir_moe_pair_order(int64_t p, int64_t k, int64_t cp, int64_t seq)
{
    if (cp <= 1)
        return p;
    int64_t row = p / k, b = row / seq, q = row % seq, local = seq / cp;
    return (b * seq + ir_cp_position(q % local, local, (int)cp, (int)(q / local))) * k + p % k;
}

/* A run of tokens at consecutive whole-sequence positions: tokens [t, t + n) of a part lie at
 * positions [pos, pos + n). */
typedef struct {
    int64_t t, pos, n;
} ir_cp_run;

/* Tokens [first, first + n) of the `local` tokens the rank at coordinate r of n_ranks holds under a
 * BALANCED split (ir_cp_position; a sequence-parallel slice of a context-parallel rank's tokens),
 * as runs of consecutive positions, t counted from first: two where they cross the middle, else
 * one. n_ranks <= 1: one run at position first. Returns the count. */
static inline int ir_cp_runs(int64_t first, int64_t n, int64_t local, int n_ranks, int r, ir_cp_run run[2])
{
    int64_t chunk = local / 2, split = n_ranks > 1 && first < chunk && first + n > chunk ? chunk - first : n;
    run[0] = (ir_cp_run){0, ir_cp_position(first, local, n_ranks, r), split};
    if (split == n)
        return 1;
    run[1] = (ir_cp_run){split, ir_cp_position(chunk, local, n_ranks, r), n - split};
    return 2;
}

/* An attention op's (attention, attention_grad and their dropout twins) attributes cp, cp_rank,
 * ring, shift, indexed as attention's (IR_ATTR_ATTENTION_RING): the twins keep them after their
 * own (ir.c asserts the order). */
static inline const double *ir_attention_attrs(const ir_instr *in)
{
    bool twin = in->op == IR_OP_ATTENTION_DROPOUT || in->op == IR_OP_ATTENTION_DROPOUT_GRAD;
    return in->attr + (twin ? IR_ATTR_ATTENTION_DROPOUT_CP : IR_ATTR_ATTENTION_CP);
}

/* A position op's (pos_add, pos_add_grad) attributes offset, extent, cp, cp_rank, indexed as
 * pos_add's: pos_add_grad keeps them one further on, after its positions (ir.c asserts it). */
static inline const double *ir_pos_attrs(const ir_instr *in)
{
    return in->attr + (in->op == IR_OP_POS_ADD_GRAD ? IR_ATTR_POS_ADD_GRAD_OFFSET : IR_ATTR_POS_ADD_OFFSET);
}

/* The runs of positions of x[B,T,...]'s tokens, from position op in's attributes (ir_pos_attrs). */
static inline int ir_pos_runs(const ir_instr *in, int64_t T, ir_cp_run run[2])
{
    const double *a = ir_pos_attrs(in);
    double extent = a[IR_ATTR_POS_ADD_EXTENT];
    return ir_cp_runs((int64_t)a[IR_ATTR_POS_ADD_OFFSET], T, extent > 0 ? (int64_t)extent : T,
                      (int)a[IR_ATTR_POS_ADD_CP], (int)a[IR_ATTR_POS_ADD_CP_RANK], run);
}

typedef struct {
    uint8_t axis;                   /* ir_axis */
    uint8_t kind;                   /* ir_split_kind */
    int8_t dim;                     /* IR_SPLIT_DIM: the dimension of the whole tensor */
} ir_split;
typedef struct {
    int nsplits;
    ir_split splits[IR_NUM_AXES];
} ir_layout;

typedef struct {
    char *name;                     /* for humans and dumps: no pass reads a role from it */
    ir_type type;                   /* this rank's part */
    ir_global_kind kind;            /* its role */
    ir_init init;
    double std;                     /* IR_INIT_NORMAL */
    bool no_decay;                  /* parameters excluded from weight decay (biases, norms) */
    int owner;                      /* a companion: index of its PARAM; a PARAM: -1 */
    int layer;                      /* the transformer layer it belongs to (its owner's), or -1 */
    ir_placement placement;         /* a PARAM: how tp splits it (a companion: its owner's says) */
    ir_layout layout;               /* how its whole tensor is split over the mesh (none: whole) */
    int slots;                      /* a STASH: its buffers, each of `type` (every other role: 1) */
    bool host;                      /* lives in the host's (pinned) memory, not the device's: read and
                                       written by the host_optimizer function and by copies (printed
                                       `host`; --optimizer-cpu-offload) */
    ir_stash_span span;             /* a STASH: from which function to which it lives (`span=`; FB
                                       unprinted); every other role: FB */
} ir_global;

/* The schedule: per program, the steps one rank runs in order. `train` is one training
 * iteration, `eval` one global batch of validation (train_rank runs it --eval-iters times).
 * Both cover accum_steps micro-batches, each step naming the micro-batch it works on. A flat list,
 * not loops: a pipeline schedule (1F1B, interleaved) is a different sequence on every rank, which
 * a list says as it is. Text: `schedule train { call micro_step mb=0 ... call optimizer }`. */
typedef enum { IR_PROG_TRAIN, IR_PROG_EVAL, IR_NUM_PROGS } ir_prog;

typedef enum {
    IR_STEP_CALL,                   /* call F [mb=I]: runs function F (on micro-batch I, its data bound) */
    IR_STEP_SEND,                   /* send F @x mb=I to=next|prev: F's output @x of micro-batch I to a
                                       pipeline neighbour (train_rank has no pipeline runtime yet) */
    IR_STEP_RECV,                   /* recv F @x mb=I from=next|prev: F's input @x of micro-batch I */
    IR_NUM_STEP_OPS
} ir_step_op;

typedef struct {
    ir_step_op op;
    int func;                       /* index into module funcs */
    int mb;                         /* the micro-batch, 0..accum_steps-1; -1: none (reduce, optimizer) */
    char *sym;                      /* send/recv: the tensor's @name in func (for people); else NULL */
    ir_role role;                   /* send/recv: the role of func's output or input it moves (what the
                                       runtime finds it by; the parser reads it off the @name's) */
    int peer;                       /* send/recv: +1 the next pipeline stage, -1 the previous; else 0 */
    int slot[IR_NUM_STASH_SPANS];   /* a call of a function that reads or writes STASH globals: per
                                       span it touches, which of their buffers (`slot=K` the FB span's,
                                       `slot_fw=`, `slot_bw=`); else -1 */
} ir_sched_step;

typedef struct {
    ir_sched_step *steps;
    int nsteps, cap_steps;
} ir_program;

/* Key/value settings the runtime needs (training hyperparameters), printed as `config`. */
typedef struct {
    char *key;
    char *value;
} ir_config;

typedef struct {
    ir_global *globals;
    int nglobals, cap_globals;
    int *global_index;              /* open addressing over globals' names (ir_global_find), -1 empty;
                                       kept by ir_global_add */
    int global_index_cap;           /* a power of two, over twice nglobals */
    ir_func **funcs;
    int nfuncs, cap_funcs;
    ir_program progs[IR_NUM_PROGS]; /* the schedule; empty before pass_schedule */
    ir_config *config;
    int nconfig, cap_config;
} ir_module;

/* --- op table --- */
typedef bool (*ir_infer_fn)(const ir_module *m, const ir_instr *in, const ir_type *args, ir_type *res,
                            char *err, size_t errlen);
/* Instruction in's result types (infer.c): its op's infer_fn, then its amax results (ir_amax_results),
 * f32[1] each; the builder, the verifier and the parser's check share it. */
bool ir_infer_results(const ir_module *m, const ir_instr *in, const ir_type *args, ir_type *res, char *err,
                      size_t errlen);
struct ir_grad_ctx;
typedef void (*ir_grad_fn)(struct ir_grad_ctx *g, const ir_func *f, const ir_instr *in);

/* Op properties, ops.def's flags column: what a pass asks of an op without naming it. */
enum {
    IR_OPF_SYM = 1 << 0,            /* names its tensor with @sym: input, global, output */
    IR_OPF_EXPLICIT_TYPE = 1 << 1,  /* its result type is written in the instruction, not inferred */
    IR_OPF_VIEW = 1 << 2,           /* its result is a view of operand 0's bytes (@view after memory_plan) */
    IR_OPF_ELEMENTWISE = 1 << 3,    /* one loop over the elements runs it (rt_elementwise_kind_of) */
    IR_OPF_STORES_GLOBAL = 1 << 4,  /* writes operand 0, a global, from a value as gradients are
                                       written: := (copy) or += (accumulate, matmul_accumulate) */
    IR_OPF_COLLECTIVE = 1 << 5,     /* talks to other ranks: a collective, or one fused into the op */
    IR_OPF_COPY_LANE = 1 << 6,      /* a sequence-parallel collective whose buffers the copy engines
                                       may move (all_gather_seq, reduce_scatter_seq, the fused ones) */
    IR_OPF_SEQ_COLLECTIVE = 1 << 7, /* all_gather_seq, reduce_scatter_seq: attribute 1 `overlap`
                                       (passes/comm_overlap.c) runs it beside later instructions */
    IR_OPF_RECOMPUTE_ACTIVATION = 1 << 8, /* recompute_modules mlp_act: selective recompute recomputes
                                             its result in the backward */
    IR_OPF_RECOMPUTE_SELECTIVE = 1 << 9,  /* recompute_modules layernorm recomputes it */
    IR_OPF_HOST_WAIT = 1 << 10,     /* the host reads a device value to issue it (all_to_all_v's
                                       splits, the grouped GEMMs' counts): a function with one is not
                                       captured as a CUDA graph */
    IR_OPF_OVERLAP = 1 << 11,       /* a collective whose attribute `overlap` = 1 runs it beside the
                                       instructions before its result's first use (ir_overlapped: the
                                       GPU's comm stream): the sequence collectives, ring_shift,
                                       all_to_all_v */
    IR_OPF_ROW_BOUND = 1 << 12,     /* may take one operand past its row's count, a row bound
                                       (ir_row_bound: passes/row_bounds.c sets it on the ops over
                                       expert parallelism's receive buffers) */
};

/* Sharding rules, ops.def's shard column: which rule of the shard pass propagates an op's
 * placements over a mesh axis (passes/shard.c's table, indexed by kind: the rules are pass code,
 * which the IR library does not link). NEVER: the op never reaches the shard pass, which makes
 * it itself (collectives, the vocab-parallel cross entropy) or a later pass does (fusion, the
 * optimizer); tests/shard_test.c (`shard_test rules`) checks every other kind has its rule. */
typedef enum {
    IR_SHARD_NEVER,
    IR_SHARD_SOURCE,                /* input, fill: placed as their types record (an earlier pass's placements) */
    IR_SHARD_GLOBAL,                /* a global: the placement its type records */
    IR_SHARD_OUTPUT,                /* complete, every token */
    IR_SHARD_STORE,                 /* accumulate, copy: into a global placed alike */
    IR_SHARD_LINEAR,                /* add, scale: operands placed alike; partial sums stay partial */
    IR_SHARD_ELEMENTWISE,           /* complete operands placed alike */
    IR_SHARD_BIAS_ADD,
    IR_SHARD_RESHAPE,
    IR_SHARD_ROWS,
    IR_SHARD_CONCAT_ROWS,
    IR_SHARD_SPLIT_LAST_DIM,        /* split_last_dim: its results placed as x, split along other dimensions */
    IR_SHARD_CONCAT_LAST_DIM,       /* concat_last_dim: a one-head operand whole beside heads split over the axis */
    IR_SHARD_SHIFT_SEQ,             /* shift_seq: every token of its operand, placed as it off the sequence */
    IR_SHARD_MATMUL,
    IR_SHARD_SUM_ROWS,
    IR_SHARD_EMBEDDING,
    IR_SHARD_EMBEDDING_GRAD,
    IR_SHARD_STREAM,                /* norms, the position add: token by token on the residual stream */
    IR_SHARD_DROPOUT,
    IR_SHARD_ATTENTION,
    IR_SHARD_CROSS_ENTROPY,
    IR_SHARD_CROSS_ENTROPY_GRAD,
    IR_SHARD_ROPE,                  /* rope: elementwise, at its tokens' places in the sequence */
    IR_SHARD_MOE,                   /* the router's ops (route, losses, counts): whole operands, whole results;
                                       over split tokens, per row */
    IR_SHARD_MOE_SORT,              /* moe_sort: the router's; over split tokens its counts a sum over them */
    IR_SHARD_ROUTER_LOSS,           /* moe_aux_loss and its gradient: the router's; over split tokens a sum
                                       over every rank's rows */
    IR_SHARD_CAPACITY,              /* moe_capacity: as MOVE_ROWS; over split tokens ranked among every rank's */
    IR_SHARD_MOVE_ROWS,             /* rows of operand 0 moved, masked or combined (moe permutes): linear in
                                       it, its placement kept off the rows; the others whole */
    IR_SHARD_PERMUTE,               /* moe_permute: as MOVE_ROWS; over split experts its rows dispatched to
                                       their experts' ranks */
    IR_SHARD_UNPERMUTE,             /* moe_unpermute: as MOVE_ROWS; over split experts the rows combined back
                                       from the experts' ranks first */
    IR_SHARD_EXCHANGE,              /* all_to_all_v: as MOVE_ROWS; over split tokens its room the rank's rows' */
    IR_SHARD_GROUPED_MATMUL,        /* moe_grouped_matmul: a matmul per expert, weights [E, ...] */
    IR_SHARD_GROUPED_WGRAD,         /* moe_grouped_wgrad: a_e^T b_e, split as its operands' features */
    IR_SHARD_UNPERMUTE_GRAD,        /* moe_unpermute_grad: dyp as dy, dw a dot over the features */
    IR_SHARD_FP8_AMAX,              /* a split operand's amax max-all-reduced over the axis */
    IR_SHARD_FP8_QUANTIZE,          /* q placed as x (a partial sum completed first) */
    IR_SHARD_FP8_MATMUL,            /* matmul's, on the quantized operands */
    IR_SHARD_FP8_BLOCK_QUANTIZE,    /* x whole (a block's scale is its own): q, scale_inv whole */
    IR_SHARD_FP8_SCALING,           /* an FP8 history and amaxes: whole operands, whole results; over
                                       split experts, an expert's history and amaxes split with it */
    IR_SHARD_FP8_GROUPED_AMAX,      /* as FP8_AMAX, a scale per expert; over split experts the rank's */
    IR_SHARD_FP8_GROUPED_QUANTIZE,  /* as FP8_QUANTIZE, scale_inv placed as the amax */
    IR_SHARD_FP8_GROUPED_MATMUL,    /* as GROUPED_MATMUL, on the quantized operands */
    IR_SHARD_FP8_GROUPED_WGRAD,     /* as GROUPED_WGRAD, on the quantized operands */
    IR_SHARD_SEQ_COLLECTIVE,        /* a sequence collective of an earlier pass over another axis (context
                                       parallelism's over cp): the operand's placement passes through */
    IR_SHARD_CP,                    /* the context_parallel pass's own ops (ring_shift, attention_merge,
                                       cp_all_to_all, all_reduce over cp): complete operands, result k placed
                                       as operand k (split by heads over tp) */
    IR_NUM_SHARD_RULES
} ir_shard_rule;

typedef struct {
    const char *name;
    int nargs, nres;
    unsigned inplace;               /* bit k: result 0 may overwrite operand k where it dies (ops.def) */
    unsigned flags;                 /* IR_OPF_* */
    const char *attr_names[IR_MAX_ATTRS];
    int nattrs;
    ir_infer_fn infer;
    ir_grad_fn grad;
    ir_shard_rule shard;
    int axis_attr;                  /* its mesh axis attribute's index (IR_ATTR_AXIS), -1 if none: the
                                       text form names the axis, {axis=tp} */
    unsigned printed_when_set;      /* bit k: attribute k is printed only when nonzero (one added
                                       later, whose 0 is the op's earlier meaning: ir.c) */
    int amax_attr;                  /* its amax attribute's index, -1 if none: amax=k gives the
                                       instruction k more results, f32[1] each, the max |.| of its
                                       results 0..k-1 as fp8_amax's (ir_amax_results) */
} ir_op_info;

extern ir_op_info ir_ops[IR_NUM_OPS]; /* attr_names, axis_attr, printed_when_set, amax_attr filled by ir_ops_init() */
/* The amax results an instruction of op with attributes attr has (its amax attribute, 0 for an op
 * without one): FP8's fp8_amax of its first results made in the same pass as they are (the fusion
 * pass's), the last results of the instruction, result nres + k the amax of result k. */
static inline int ir_amax_results(ir_op op, const double *attr)
{
    double k = ir_ops[op].amax_attr >= 0 ? attr[ir_ops[op].amax_attr] : 0;
    return k >= 0 && k <= IR_MAX_RES ? (int)k : IR_MAX_RES + 1; /* out of range: more than any instruction has */
}
/* The results of an instruction of op with attributes attr: the op's, and its amax results */
static inline int ir_instr_nres(ir_op op, const double *attr) { return ir_ops[op].nres + ir_amax_results(op, attr); }
void ir_ops_init(void);             /* splits the attribute lists; idempotent, called by ir_module_new */
void ir_grad_none(struct ir_grad_ctx *g, const ir_func *f, const ir_instr *in); /* no gradient rule */
int ir_op_by_name(const char *name);/* -1 if unknown */
/* The index of op's attribute `name` (the text form's: the parser's), -1 if none; code knows its
 * ops' attributes as IR_ATTR_<OP>_<NAME> */
int ir_attr_index(ir_op op, const char *name);
/* Whether op has property `flag` (IR_OPF_*). */
static inline bool ir_op_has(ir_op op, unsigned flag) { return (ir_ops[op].flags & flag) != 0; }
/* Whether an instruction of op may have nargs operands: its row's count (at least one where
 * variadic), or one more where it takes a row bound (IR_OPF_ROW_BOUND). */
bool ir_op_nargs_ok(ir_op op, int nargs);
/* The row bound of `in`, or -1: an i32[S] value (an expert-parallel dispatch's local counts) whose
 * sum, read on the device, is how many leading rows of the instruction's [R, *] operands and
 * results hold data. Its kernels read and write those rows alone; the rows past them (the room of
 * a receive buffer sized for the dropless worst case) are undefined, and the CPU fills its results'
 * with NaN so that a reader of them fails the layout tests. Its operands are the rest of args. */
static inline int ir_row_bound(const ir_instr *in)
{
    return ir_op_has(in->op, IR_OPF_ROW_BOUND) && in->nargs == ir_ops[in->op].nargs + 1 ? in->args[in->nargs - 1] : -1;
}

/* --- types --- */
/* fp8_quantize's format attribute (ops.def) */
typedef enum { IR_FP8_E4M3, IR_FP8_E5M2 } ir_fp8_format;
static inline bool ir_dtype_is_fp8(ir_dtype t) { return t == IR_FP8E4M3 || t == IR_FP8E5M2; }
static inline ir_dtype ir_fp8_dtype(ir_fp8_format f) { return f == IR_FP8_E5M2 ? IR_FP8E5M2 : IR_FP8E4M3; }
/* FP8 blockwise scaling's block edge (ops.def's fp8_block_quantize), and the scales a row of
 * 128x128 blocks' scale_inv is padded to a multiple of (16 bytes: cuBLASLt's BLK128x128_32F) */
enum { IR_FP8_BLOCK = 128, IR_FP8_SCALE_ALIGN = 4 };
const char *ir_dtype_name(ir_dtype t);
int ir_dtype_by_name(const char *s);
size_t ir_dtype_size(ir_dtype t);
const char *ir_axis_name(ir_axis a);
int ir_axis_by_name(const char *s);
ir_type ir_tensor(ir_dtype dt, int ndim, const int64_t *dims);
ir_type ir_scalar(ir_dtype dt);
int64_t ir_numel(const ir_type *t);
size_t ir_bytes(const ir_type *t);
bool ir_type_eq(const ir_type *a, const ir_type *b);
/* An fp8 operand q[*, C] (viewed as [R, C]) and its scale_inv s, laid out as cuBLASLt's scale modes
 * read them (fp8_block_quantize writes them so, and the CPU reads them so: ops.def): f32[1], one
 * scale (*rows = R, *cols = C; SCALAR_32F); f32[C/128, R rounded up to IR_FP8_SCALE_ALIGN], one
 * per 1x128 tile, the tiles of a column of tiles side by side (*rows = 1, *cols = 128; VEC128_32F);
 * or f32[R/128, C/128 rounded up], one per 128x128 block, a row of blocks after another
 * (*rows = *cols = 128; BLK128x128_32F). Each row is padded to 16 bytes (with 1s). False when s is none of them. */
bool ir_fp8_scale_blocks(const ir_type *q, const ir_type *s, int64_t *rows, int64_t *cols);
/* The scale_inv type of q[R, C] in rows x cols blocks (1x128 or 128x128: ir_fp8_scale_blocks) */
ir_type ir_fp8_block_scale_type(int64_t R, int64_t C, int64_t rows, int64_t cols);
/* The index in that scale_inv (or in a single one) of element (r, c)'s scale */
int64_t ir_fp8_scale_at(int64_t R, int64_t C, int64_t rows, int64_t cols, int64_t r, int64_t c);
/* Whether FP8 grouped GEMM operand scale_inv s is blockwise (fp8_block_quantize's tiles or blocks,
 * 2-D: ir_fp8_scale_blocks), not a scale an expert (f32[E]) */
static inline bool ir_fp8_grouped_blockwise(const ir_type *s) { return s->ndim == 2; }
/* The columns R' of blockwise FP8 experts' transposed rows (fp8_block_quantize with counts: each of
 * the E experts' rows in a span of its own rounded up to 128, of R rows in all): the most any
 * counts need, R + 127 E rounded up to 128 */
int64_t ir_fp8_expert_rows(int64_t R, int64_t E);
/* Expert e's first column in those spans: its predecessors' rows each rounded up to 128 */
int64_t ir_fp8_expert_span(const int32_t *counts, int64_t e);
int ir_type_str(const ir_type *t, char *buf, size_t len); /* f32[4,64] {shard=[dp,-]}, f32[4,64] {shard=[cp.tp,-]} */
/* A dimension's split: the mesh axes it is split over, outer to inner (rank i of the outer
 * axis holds block i, which the inner axis splits again). The representation is ir.c's. */
int ir_shard_axes(const ir_type *t, int dim, ir_axis out[IR_MAX_SHARD_AXES]); /* how many; 0: whole */
bool ir_shard_splits(const ir_type *t, int dim, ir_axis axis); /* whether dim is split over axis */
int ir_shard_dim(const ir_type *t, ir_axis axis); /* the dimension split over axis, or -1 */
bool ir_shard_any(const ir_type *t);              /* whether any dimension is split */
/* Splits dimension dim over axis too, inside its other axes. False (t unchanged) when dim has
 * IR_MAX_SHARD_AXES already or axis already splits t (an axis splits a type at most once). */
bool ir_shard_push(ir_type *t, int dim, ir_axis axis);
void ir_shard_drop(ir_type *t, ir_axis axis);     /* t whole along axis; the other axes stay */
void ir_shard_clear(ir_type *t);                  /* t whole along every axis (partial stays) */

/* --- modules and functions --- */
ir_module *ir_module_new(void);
void ir_module_free(ir_module *m);
ir_func *ir_func_new(ir_module *m, const char *name, ir_func_kind kind);
int ir_func_index(const ir_module *m, const char *name); /* -1 if absent */
/* The function of kind k, or -1. Every kind but forward and backward has at most one (ir_verify). */
int ir_func_of_kind(const ir_module *m, ir_func_kind k);
/* Each function kind's text name and where the schedule may call it. ORDER FUNC_KIND. */
typedef struct {
    const char *name;
    unsigned progs;                 /* bit p: the program ir_prog p may call it; 0: only the runtime
                                       does (setup at start-up, grad_norm and zero_grads for
                                       --skip-nan-steps) */
    bool per_micro_batch;           /* called once on each micro-batch (mb=), else once a program */
    bool unique;                    /* at most one in a module */
} ir_func_kind_info;
extern const ir_func_kind_info ir_func_kinds[IR_NUM_FUNC_KINDS];
/* Puts `f` (made by ir_func_new, so last) in the place of function `index`, freeing the old one:
 * how a pass rewrites a function into a new one. */
void ir_func_replace(ir_module *m, int index, ir_func *f);
/* For passes that rewrite a function into a new one: src's instruction `in` produced the values
 * that are now dst's r, r+1, ...; records that in map and carries the source types' sharding
 * annotations over (ir_emit infers types afresh, without them). */
void ir_map_results(ir_func *dst, const ir_func *src, const ir_instr *in, int r, int *map);
/* Copies src's instruction `in` into dst (a function of src's module: a `global` keeps its index),
 * operands through map, its attributes' rank terms included, and maps its results. */
int ir_copy_instr(ir_module *m, ir_func *dst, const ir_func *src, const ir_instr *in, int *map);
/* Whether instruction `in` runs its collective on the GPU's comm stream, beside the computation
 * after it: an overlapped collective (ir_overlapped), or an all_reduce_inplace bucket inside the
 * backward (overlap = 1, joined at the function's end). */
bool ir_on_comm_stream(const ir_instr *in);
/* The dimension a sequence-parallel op (all_gather_seq, reduce_scatter_seq and the fused ones,
 * attribute 2 `batch`) splits: 1, the sequence of [B,T,...], or with batch = 1, 0. */
int ir_seq_dim(const ir_instr *in);
/* The rows ("o-rows") over which a sequence collective of local tensor t has one block per rank:
 * t's batch rows when it splits the sequence, one when it splits the batch rows. */
int64_t ir_seq_orows(const ir_instr *in, const ir_type *t);
/* Bytes a global of `bytes` occupies in the runtime's slab of globals: whole 256-byte units, so
 * every global starts aligned for vector loads, cuBLASLt and NCCL. */
static inline size_t ir_global_span(size_t bytes) { return (bytes + 255) / 256 * 256; }
/* The bytes global g of m takes in the slab: its span, once per slot (a STASH's buffers back to
 * back); none for a PARAM held elsewhere (!ir_param_stored). */
size_t ir_global_slab_bytes(const ir_module *m, int g);
/* Whether m has a collective with property `flag` (IR_OPF_*) over mesh axis `axis` (its
 * attribute 0). */
bool ir_has_collective(const ir_module *m, ir_axis axis, unsigned flag);
/* Where a view op's result starts in its operand (of type `operand`), in bytes (rows: first *
 * the bytes of a row); ir_view_offset finds the operand's type in f. */
int64_t ir_view_offset_in(const ir_instr *in, const ir_type *operand);
int64_t ir_view_offset(const ir_func *f, const ir_instr *in);
/* Whether `in` is a collective that runs beside the instructions after it (IR_OPF_OVERLAP with
 * overlap = 1: reduce_scatter_seq or all_gather_seq by passes/comm_overlap.c, ring attention's
 * ring_shift by the shard rules over cp (passes/shard.c), expert parallelism's all_to_all_v by
 * comm_overlap.c under moe_shared_expert_overlap), joined before the first instruction reading its
 * result. */
bool ir_overlapped(const ir_instr *in);
/* The last instruction at which instruction i may still read its operands: i itself, except for an
 * overlapped collective: the first instruction reading its result (f->ninstrs if none). */
int ir_reads_until(const ir_func *f, int i);
/* The index in its module's globals of the global value v refers to (`%v = global @name`), or -1. */
static inline int ir_global_of(const ir_func *f, int v) { return f->instrs[f->vals[v].def].global; }
/* Whether `in` writes the global that argument 0 refers to from a value, as gradients are
 * written: := (copy) or += (accumulate, matmul_accumulate). */
bool ir_writes_global(const ir_func *f, const ir_instr *in);
/* Whether `in` reads value v. */
bool ir_reads(const ir_instr *in, int v);
/* The first instruction after i that reads value v, or f->ninstrs. */
int ir_first_reader(const ir_func *f, int i, int v);
/* An instruction's work in multiply-adds: its GEMMs' and attention's (causal; the backward 2.5
 * times the forward; a grouped GEMM's on the rows routed to it with balanced routing, not its
 * buffer's room); the rest, memory-bound and short, counts nothing. What hides a collective
 * beside it (passes/comm_overlap.c, MCC_PROFILE). */
double ir_work_macs(const ir_func *f, const ir_instr *in);
/* The rows an op bounded by its counts touches with balanced routing, and (*buffer_rows) the R rows
 * of its row buffers ([R, *]), which behind expert parallelism's dispatch hold room for the
 * dropless worst case: a grouped GEMM's (moe_grouped_matmul, _wgrad, _wgrad_accumulate; each
 * expert's GEMM reads and writes only its counted rows, runtime/cuda/matmul.c), a run sort's
 * (moe_sort_runs, moe_unsort_runs: a block a row received, moe.cuh) and a row-bounded op's
 * (ir_row_bound: the elementwise kernels stop at the rows received), so their bytes are the rows',
 * not R's. Any other op walks its whole operands: 0, and *buffer_rows 0. */
double ir_grouped_rows(const ir_func *f, const ir_instr *in, double *buffer_rows);
/* A grouped GEMM's (moe_grouped_matmul, _wgrad, _wgrad_accumulate and their FP8 forms; and the
 * blockwise FP8 experts' fp8_block_quantize with counts) operand holding its rows and the one
 * counting them, into *buffer and *counts; false for any other op. */
bool ir_grouped_operands(const ir_instr *in, int *buffer, int *counts);
/* Makes attribute k of the instruction defining value v `base + step * coordinate(axis)`: what a
 * rank-dependent attribute (a shard's offset) is in a plan that serves every rank of a stage. */
void ir_set_per_rank(ir_func *f, int v, int k, double base, double step, ir_axis axis);
/* Whether rank term t has a step on some axis (the attribute differs between ranks). */
bool ir_rank_term_any(const ir_rank_term *t);
/* --- the mesh (mesh.c): degrees, Megatron's rank order, groups ---
 * Megatron's order "tp-cp-ep-dp-pp", tp fastest and pp slowest:
 *   world_rank = tp_i + tp * (cp_i + cp * (dp_i + dp * pp_i))
 * so a tensor-parallel group is tp adjacent ranks (one node's NVLink), and pipeline stages are
 * the slowest-moving index. Expert layers view the same ranks as tp x ep x edp x pp: the cp x dp
 * ranks of one (tp_i, pp_i) are renumbered j = cp_i + cp * dp_i and split into ep adjacent ranks
 * (ep_i = j % ep, edp_i = j / ep), which is Megatron's MoE folding with expert tp = tp.
 * Example, 16 ranks, tp 2, pp 4, dp 2: tp groups {0,1} {2,3} ...; dp groups {0,2} {1,3} {4,6}
 * ...; pp groups {0,4,8,12} {1,5,9,13} ....
 * The axis dp_cp is the dense view's cp and dp as one digit, j = cp_i + cp * dp_i. */
typedef struct {
    int degree[IR_NUM_AXES];        /* ranks along each axis; [IR_AXIS_NONE] 1, [IR_AXIS_EDP] cp*dp/ep,
                                       [IR_AXIS_DP_CP] dp*cp */
} ir_mesh;
/* Whether axis a is derived: its ranks are other axes' (edp, dp_cp), so the world is not its
 * multiple and a checkpoint's records leave it out (ir_mesh_of derives it from the others). */
bool ir_axis_derived(ir_axis a);
/* The mesh view digits axis a is made of, a bitmask of (1 << ir_axis): dp_cp's cp and dp, any other
 * axis itself. A split over a splits each of them. */
unsigned ir_axis_digits(ir_axis a);
/* The mesh of these degrees, edp and dp_cp derived (edp 0 when ep does not divide cp*dp:
 * ir_mesh_check says so). */
ir_mesh ir_mesh_of(int tp, int cp, int dp, int pp, int ep);
ir_mesh ir_module_mesh(const ir_module *m); /* the degrees m's config compiles in */
/* False with err naming the flag when a degree is < 1, world_size != tp*cp*dp*pp, or ep does
 * not divide cp*dp. */
bool ir_mesh_check(const ir_mesh *mesh, int world_size, char *err, size_t errlen);
/* The axes whose coordinates are the digits of a world rank (a bitmask of (1 << ir_axis)): the
 * dense layers' view tp, cp, dp, pp, or with `expert` the expert layers' tp, ep, edp, pp. */
unsigned ir_mesh_view(bool expert);
/* The world rank's coordinate along each mesh axis ([IR_AXIS_NONE] 0). */
void ir_mesh_coords(const ir_mesh *mesh, long long world_rank, int coord[IR_NUM_AXES]);
/* The group of world_rank along the axes of `axes` (a bitmask of (1 << ir_axis), e.g. dp and cp
 * for the dense gradients' dp x cp group): the ranks that differ from it only there, ascending,
 * into ranks[max_ranks]. Returns how many, or 0 when the axes mix the dense view (cp, dp) with
 * the expert layers' (ep, edp). */
int ir_mesh_group(const ir_mesh *mesh, unsigned axes, long long world_rank, int *ranks, int max_ranks);
/* The group's name: its axes' names joined by '_' in ir_axis order ("tp", "dp_cp"). */
void ir_mesh_group_name(unsigned axes, char *buf, size_t len);
/* Resolves every attribute's rank term for the rank at `coord`: the plan that rank runs. */
void ir_resolve_ranks(ir_module *m, const int coord[IR_NUM_AXES]);
int ir_global_add(ir_module *m, const char *name, ir_type t, ir_global_kind kind, ir_init init, double std, bool no_decay);
/* Declares a zero-initialised companion of PARAM `owner` in role `kind`: its layer and layout are
 * the owner's (a pass that splits it further appends to the layout). */
int ir_global_add_companion(ir_module *m, const char *name, ir_type t, ir_global_kind kind, int owner);
int ir_global_find(const ir_module *m, const char *name);
/* The companion of PARAM `param` in role `kind`, or -1. */
int ir_global_companion(const ir_module *m, int param, ir_global_kind kind);
/* Whether global g's parameter is shared with another pipeline stage that counts and saves it:
 * a stage other than the first whose tied_sum adds the other's gradient (tied embeddings,
 * passes/pipeline.c). The gradient norm and the checkpoint take it from the first. */
bool ir_param_held_elsewhere(const ir_module *m, int g);
/* Parameter p's REMAINDER companion where its fp32 master is held as its bf16 COPY (the high 16
 * bits) and that (the low 16: precision.c, store_param_remainders), else -1. */
int ir_param_remainder(const ir_module *m, int p);
/* Whether PARAM p has storage of its own: not where its fp32 value is held as its COPY and
 * REMAINDER, nor by ZeRO's MASTER_SHARD blocks (passes/optimizer.c). Such a parameter is named by
 * no function (ir_verify); the runtime initialises, loads, saves and dumps its holders. */
bool ir_param_stored(const ir_module *m, int p);
/* The global that holds parameter p's current fp32 value: its MASTER_SHARD (ZeRO's block, p then
 * having no storage) where one exists, else p (whose storage may be its COPY and REMAINDER:
 * ir_param_remainder). */
int ir_param_value(const ir_module *m, int p);
/* The host's staging buffer for function f (kind host_optimizer), in two halves used in turn. An
 * AdamW of f whose gradient is a device global streams it: `chunk` elements at a time go down into
 * a half (grad_size bytes an element), are updated, and the master's copy up that follows it, when
 * it changes the dtype, is converted into the same half after them (up_size bytes an element, 0
 * where no copy up converts) before the working dtype's bytes cross. chunk is the largest such
 * AdamW's elements, up to IR_HOST_CHUNK. All 0 for other functions. The memory plan counts
 * ir_host_staging_bytes (2 * chunk * (grad_size + up_size)) as host memory and train_rank allocates
 * it after the host function's arena. */
enum { IR_HOST_CHUNK = 16 << 20 }; /* 64 MiB of an f32 gradient */
typedef struct {
    int64_t chunk;
    int grad_size, up_size;
} ir_host_staging;
ir_host_staging ir_host_staging_of(const ir_module *m, const ir_func *f);
int64_t ir_host_staging_bytes(const ir_module *m, const ir_func *f);
/* The host's update beside the backward (passes/grad_ready.c): the slots m's grad_ready marks use
 * (the largest slot + 1: what a device makes room for), 0 where it has none. */
int ir_grad_ready_slots(const ir_module *m);
/* The PARAM global g is or belongs to. */
static inline int ir_global_param(const ir_module *m, int g) { return m->globals[g].owner >= 0 ? m->globals[g].owner : g; }

/* --- layout records --- */
/* The number of ranks along each mesh axis: ir_module_mesh's degrees. */
void ir_axis_degrees(const ir_module *m, int degree[IR_NUM_AXES]);
/* The split over `axis` in l, or NULL. */
const ir_split *ir_layout_split(const ir_layout *l, ir_axis axis);
/* Appends a split to l. */
void ir_layout_add(ir_layout *l, ir_axis axis, ir_split_kind kind, int dim);
/* The layout of a value whose type says which dimension each axis splits ({shard=[...]}). */
ir_layout ir_layout_of_type(const ir_type *t);
/* t, a part whose dimension splits are l's, with each multiplied back to the whole: unsplit. */
ir_type ir_layout_whole(const ir_layout *l, ir_type t, const int degree[IR_NUM_AXES]);
/* Global g's whole tensor, as one rank holds it: its owner's shape (its own for a PARAM) with
 * each dimension its layout splits multiplied back, in g's dtype, unsplit. */
ir_type ir_global_whole(const ir_module *m, int g, const int degree[IR_NUM_AXES]);
/* The block a rank holds after the first k splits of l over a whole tensor `whole` (k = 0: the
 * whole; k = nsplits: the rank's part). */
ir_type ir_layout_block(const ir_layout *l, const ir_type *whole, const int degree[IR_NUM_AXES], int k);
/* Where the rank at coordinates coord holds its part of split k, in the block the earlier
 * splits left: coordinate x the part's extent along the split dimension (DIM), or x its
 * elements (FLAT). */
int64_t ir_layout_offset(const ir_layout *l, const ir_type *whole, const int degree[IR_NUM_AXES],
                         const int coord[IR_NUM_AXES], int k);
/* The index in the whole tensor of element i of the part the rank at coord holds. */
int64_t ir_layout_index(const ir_layout *l, const ir_type *whole, const int degree[IR_NUM_AXES],
                        const int coord[IR_NUM_AXES], int64_t i);
/* "tp:dim0, dp:flat" into buf (empty for no splits); returns buf. */
const char *ir_layout_str(const ir_layout *l, char *buf, size_t len);
/* The inverse of ir_layout_str: text "tp:dim0, dp:flat" (empty: no splits) into *l; false with
 * the error in err (parse.c). */
bool ir_parse_layout(const char *text, ir_layout *l, char *err, size_t errlen);
/* Appends step s to program p (s.sym copied). */
void ir_sched_add(ir_module *m, ir_prog p, ir_sched_step s);
/* Appends `call func` (mb -1: not on a micro-batch) to program p. */
void ir_sched_call(ir_module *m, ir_prog p, int func, int mb);
extern const char *const ir_prog_names[IR_NUM_PROGS]; /* train, eval (print.c) */
/* Step s as the schedule block prints it (`call micro_step mb=0`), into buf (print.c). */
void ir_sched_step_str(const ir_module *m, const ir_sched_step *s, char *buf, size_t len);
/* The config block as text, any key: what the parser and printer carry (an older plan's or a
 * hand-written module's keys included). Passes and the runtime read through ir_cfg_* below. */
void ir_config_set(ir_module *m, const char *key, const char *value);
const char *ir_config_get(const ir_module *m, const char *key); /* NULL if absent */

/* The config keys, one table (config.def): IR_CFG_TENSOR_MODEL_PARALLEL_SIZE, ... */
typedef enum {
#define IR_CFG(name, key, type, dflt, meaning) IR_CFG_##name,
#include "config.def"
#undef IR_CFG
    IR_CFG_COUNT
} ir_cfg;
typedef enum { IR_CFGT_INT, IR_CFGT_NUM, IR_CFGT_TEXT, IR_CFGT_BOOL, IR_CFGT_CHOICE } ir_cfg_type;
/* The closed choices, each an enum whose value k is the k-th word of its list (ir_choices, ir.c;
 * ORDER each enum and its ir_*_words). A CHOICE(X) key of config.def holds one word of choice
 * IR_CHOICE_X; passes and the runtime read it as the enum (ir_cfg_choice), the config block and
 * plans spell it as the word, and the spec's fields share the word lists (frontend/spec.c). */
typedef enum {
    IR_CHOICE_BACKEND, IR_CHOICE_PARAM_DTYPE, IR_CHOICE_MOMENT_DTYPE, IR_CHOICE_PP_SCHED, IR_CHOICE_CP_COMM,
    IR_CHOICE_RECOMPUTE, IR_CHOICE_RECOMPUTE_METHOD, IR_CHOICE_FP8_FORMAT, IR_CHOICE_FP8_RECIPE, IR_CHOICE_AMAX_ALGO,
    IR_CHOICE_LR_STYLE, IR_CHOICE_WSD_STYLE, IR_CHOICE_NORM, IR_CHOICE_POS, IR_CHOICE_ROPE_TYPE, IR_CHOICE_MOE_SCORE, IR_NUM_CHOICES
} ir_choice;
typedef enum { IR_BACKEND_CPU, IR_BACKEND_CUDA } ir_backend;               /* target */
/* param_dtype and the moments' dtypes are ir_dtype values: their words are ir_dtype_name's */
typedef enum { IR_PP_AUTO, IR_PP_1F1B, IR_PP_INTERLEAVED, IR_PP_ZB_H1 } ir_pp_sched; /* auto, then pp_sched_kind */
typedef enum { IR_CP_P2P, IR_CP_ALL_GATHER, IR_CP_A2A } ir_cp_comm;
/* activations: an older spelling of selective with recompute_modules mlp_act */
typedef enum { IR_RECOMPUTE_NONE, IR_RECOMPUTE_SELECTIVE, IR_RECOMPUTE_ACTIVATIONS, IR_RECOMPUTE_FULL } ir_recompute;
typedef enum { IR_RECOMPUTE_METHOD_NONE, IR_RECOMPUTE_UNIFORM, IR_RECOMPUTE_BLOCK } ir_recompute_method;
/* fp8_format: none, hybrid (E4M3 forward, E5M2 gradients) or e4m3 throughout */
typedef enum { IR_FP8_FORMAT_NONE, IR_FP8_FORMAT_HYBRID, IR_FP8_FORMAT_E4M3 } ir_fp8_format_choice;
typedef enum { IR_FP8_DELAYED, IR_FP8_TENSORWISE, IR_FP8_BLOCKWISE } ir_fp8_recipe;
typedef enum { IR_AMAX_MOST_RECENT, IR_AMAX_MAX } ir_amax_algo;            /* ORDER fp8_history_amax's max= (ops.def) */
typedef enum { IR_LR_CONSTANT, IR_LR_LINEAR, IR_LR_COSINE, IR_LR_INVERSE_SQRT, IR_LR_WSD } ir_lr_style;
typedef enum { IR_WSD_EXPONENTIAL, IR_WSD_LINEAR, IR_WSD_COSINE, IR_WSD_MINUS_SQRT } ir_wsd_style;
typedef enum { IR_NORM_LAYERNORM, IR_NORM_RMSNORM } ir_norm;
typedef enum { IR_POS_LEARNED, IR_POS_ROPE } ir_pos;
typedef enum { IR_ROPE_PLAIN, IR_ROPE_YARN } ir_rope_type;        /* Megatron's --rope-type */
typedef enum { IR_MOE_SOFTMAX, IR_MOE_SIGMOID } ir_moe_score;             /* ORDER ops.def moe_route's score */
/* recompute_modules (selective), a set of Megatron's module names and mcc's mlp_act: config
 * recompute_modules spells it as a comma-separated list of these words, bit k for word k (the
 * spec's MCC_RM_ flags; ir_word_set reads it back). */
typedef enum {
    IR_RM_CORE_ATTN, IR_RM_MLP, IR_RM_LAYERNORM, IR_RM_MOE_ACT, IR_RM_MOE, IR_RM_SHARED_EXPERTS, IR_RM_MLA_UP_PROJ,
    IR_RM_MLP_ACT
} ir_recompute_module;
extern const char *const ir_recompute_module_words[];
/* The set of words[] that the comma-separated text names, as bits (bit k: words[k]) into *bits;
 * false with the first word not among them in bad (its text, NUL-terminated). */
bool ir_word_set(const char *const *words, const char *text, unsigned *bits, char *bad, size_t badlen);
/* The word lists, NULL-terminated (the spec's field table points at them). */
extern const char *const ir_backend_words[], *const ir_pp_sched_words[], *const ir_cp_comm_words[],
    *const ir_recompute_words[], *const ir_recompute_method_words[], *const ir_fp8_format_words[],
    *const ir_fp8_recipe_words[], *const ir_amax_algo_words[], *const ir_lr_style_words[], *const ir_wsd_style_words[],
    *const ir_norm_words[], *const ir_pos_words[], *const ir_rope_type_words[], *const ir_moe_score_words[];
typedef struct {
    const char *const *words; /* words[value] */
    int count;
} ir_choice_info;
extern const ir_choice_info ir_choices[IR_NUM_CHOICES];
/* The value whose word is `word` in choice c, or -1. */
int ir_choice_find(ir_choice c, const char *word);
/* c's words as "a, b or c", into buf (an error's list of what is allowed). */
void ir_choice_list(ir_choice c, char *buf, size_t len);
typedef struct {
    const char *key;
    ir_cfg_type type;
    ir_choice choice; /* a CHOICE key's */
    const char *dflt; /* as the config block would spell it */
    const char *meaning;
    bool model;       /* an IR_CFG_MODEL row: a key of the model's function, which a checkpoint records */
} ir_cfg_info;
extern const ir_cfg_info ir_cfgs[IR_CFG_COUNT];
/* The plan text's format, written as config plan_version: bumped when a change to the IR makes an
 * older text mean something else. */
#define IR_PLAN_VERSION 1
/* False with err saying so when m's config names a plan_version other than IR_PLAN_VERSION (a
 * text another mcc wrote); an absent key is this one's (hand-written modules). */
bool ir_plan_version_ok(const ir_module *m, char *err, size_t errlen);
/* The key named key ("fp8_recipe"), or -1. */
int ir_cfg_find(const char *key);
/* The key's text in m, its default's when absent (train_config.c range-checks it as text). */
const char *ir_cfg_value(const ir_module *m, ir_cfg k);
/* Typed reads; each asserts the key is of its type (a BOOL is an INT that is 0 or not). */
long long ir_cfg_int(const ir_module *m, ir_cfg k);
double ir_cfg_num(const ir_module *m, ir_cfg k);
bool ir_cfg_bool(const ir_module *m, ir_cfg k);
/* A TEXT key's text, or a CHOICE key's word (for messages: compare ir_cfg_choice's value). */
const char *ir_cfg_text(const ir_module *m, ir_cfg k);
/* A CHOICE key's value: its choice's enum (ir_fp8_recipe for IR_CFG_FP8_RECIPE, ...). The parser
 * refuses a word not in the choice, and ir_cfg_set one, so every module's word is one. */
int ir_cfg_choice(const ir_module *m, ir_cfg k);
/* The word of a CHOICE key's value v, or NULL when v is none of the choice's. */
const char *ir_cfg_choice_word(ir_cfg k, int v);
/* Whether text is a value key k may hold (a CHOICE key's: one of its words, else any); when not,
 * err says which words are. */
bool ir_cfg_valid(ir_cfg k, const char *text, char *err, size_t errlen);
/* Writes: integers as %lld, numbers as %.17g (they read back exactly), choices as their word. */
void ir_cfg_set(ir_module *m, ir_cfg k, const char *text);
void ir_cfg_set_int(ir_module *m, ir_cfg k, long long v);
void ir_cfg_set_num(ir_module *m, ir_cfg k, double v);
void ir_cfg_set_choice(ir_module *m, ir_cfg k, int v);

/* Appends an instruction. Result types come from the op's infer function, except for ops
 * whose type is explicit (input, fill, reshape): pass it in `explicit_type`. Returns the first
 * result's value id (or -1 for ops without results). On an inference error, aborts with the
 * message: builders only build well-typed graphs, the verifier catches the rest. A `global` is
 * ir_global_ref's, by its index (or ir_copy_instr's). */
int ir_emit(ir_module *m, ir_func *f, ir_op op, const int *args, int nargs, const double *attrs,
            const char *sym, const ir_type *explicit_type);

/* Convenience builders over ir_emit; an input's or output's role (ir_role) beside its name. */
int ir_input(ir_module *m, ir_func *f, ir_role role, const char *name, ir_type t);
int ir_global_ref(ir_module *m, ir_func *f, int g); /* `global @name` of m's global g */
/* Points the `global` instruction in at m's global g; its result keeps its type (the caller retypes). */
void ir_global_retarget(ir_module *m, ir_instr *in, int g);
/* An instruction as `in` (of a function of m): its op, attributes, @name, global and role, with
 * operands args (in->nargs of them); explicit_type as ir_emit's. */
int ir_emit_like(ir_module *m, ir_func *f, const ir_instr *in, const int *args, const ir_type *explicit_type);
void ir_output(ir_module *m, ir_func *f, ir_role role, const char *name, int x);
/* The role of a singleton kind (stage and index 0), or of the index-th of an indexed one. */
static inline ir_role ir_role_of(ir_role_kind kind) { return (ir_role){kind, 0, 0}; }
static inline ir_role ir_role_at(ir_role_kind kind, int index) { return (ir_role){kind, 0, index}; }
/* The instruction of f with op (IR_OP_INPUT or IR_OP_OUTPUT) and role r (kind, stage and index
 * all equal), or -1. */
int ir_find_role(const ir_func *f, ir_op op, ir_role r);
/* The value an input defines or an output reads. */
static inline int ir_io_value(const ir_instr *in) { return in->nres ? in->res[0] : in->args[0]; }
int ir_fill(ir_module *m, ir_func *f, double value, ir_type t);
int ir_op1(ir_module *m, ir_func *f, ir_op op, int a);
int ir_op2(ir_module *m, ir_func *f, ir_op op, int a, int b);
int ir_scale(ir_module *m, ir_func *f, int a, double factor);
/* a converted to f32 (to_f32) or to the activations' dtype, the plan's param_dtype */
int ir_convert(ir_module *m, ir_func *f, int a, bool to_f32);
int ir_matmul(ir_module *m, ir_func *f, int a, int b, bool ta, bool tb);
int ir_reshape(ir_module *m, ir_func *f, int a, int ndim, const int64_t *dims);
/* FP8 (ops.def): x quantized, returns q (its scale_inv is q + 1). history < 0: tensorwise, the
 * scale from x's own fp8_amax; else the value of x's FP8_HISTORY global (delayed): the scale from
 * its fp8_history_amax (the config's fp8_amax_compute_algo and fp8_margin), and with fold x's
 * amax folded into the history's step amax (the step's functions; eval reads it only). And the
 * matmul of two quantized operands (each followed by its scale_inv value), dy_history the output
 * gradient's FP8_HISTORY value under delayed scaling (-1: none), which its gradient rule uses. */
int ir_fp8_quantize(ir_module *m, ir_func *f, int x, int history, bool fold, ir_fp8_format format);
/* FP8 blockwise (ops.def): x (transposed: x^T) quantized in E4M3 per rows x cols block; returns q
 * (scale_inv q + 1) */
int ir_fp8_block_quantize(ir_module *m, ir_func *f, int x, int rows, int cols, bool transpose);
/* Blockwise FP8 experts' operands for the backward (ops.def's fp8_block_quantize): counts >= 0 the
 * experts' rows x[R, C] transposed in 1x128 tiles from each expert's first row (q [C, R'], the
 * wgrad's); counts < 0 an expert weight [E, A, C] in 128x128 blocks, each w[e] transposed (the
 * dgrad's) */
int ir_fp8_expert_block_quantize(ir_module *m, ir_func *f, int x, int counts);
int ir_fp8_matmul(ir_module *m, ir_func *f, int qa, int qb, bool ta, bool tb, ir_fp8_format grad_format, bool wgrad,
                  int dy_history);
/* FP8 experts (ops.def): x quantized with a scale per expert, returns q (scale_inv f32[E] q + 1):
 * counts >= 0 groups x's rows by expert, else x is an expert weight [E, ...]; history as
 * ir_fp8_quantize's, an expert weight's f32[E, 1 + len]. And the grouped GEMM of quantized expert
 * rows qx by quantized expert weights qw (each followed by its scale_inv), dy_history as
 * ir_fp8_matmul's. */
int ir_fp8_grouped_quantize(ir_module *m, ir_func *f, int x, int counts, int history, bool fold, ir_fp8_format format);
int ir_fp8_grouped_matmul(ir_module *m, ir_func *f, int qx, int qw, int counts, bool tb, ir_fp8_format grad_format,
                          bool wgrad, int dy_history);

static inline const ir_type *ir_vtype(const ir_func *f, int v) { return &f->vals[v].type; }

/* --- text form (print.c, parse.c) --- */
char *ir_print_module(const ir_module *m);                /* malloc'd */
char *ir_print_func(const ir_module *m, const ir_func *f); /* malloc'd */
ir_module *ir_parse_module(const char *text, char *err, size_t errlen); /* NULL on error */
/* A pipelined program is one module per stage (passes/pipeline.c); its text is theirs in stage
 * order, each after a line `; stage S of N` (a comment to a lone module's reader). One module prints
 * as itself. ir_text_stages: N (1 without the lines); ir_parse_stage reads stage S of such a text. */
char *ir_print_stages(ir_module *const *stages, int n); /* malloc'd */
int ir_text_stages(const char *text);
ir_module *ir_parse_stage(const char *text, int stage, char *err, size_t errlen);

/* --- verifier (verify.c): types, shapes, SSA order, memory plan bounds --- */
bool ir_verify(const ir_module *m, char *err, size_t errlen);

#endif
