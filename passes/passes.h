/* passes.h — the pass pipeline. Each pass lives in its own file with one entry point that
 * rewrites the module; mcc_passes lists them in the order the driver runs them. */
#ifndef MCC_PASSES_H
#define MCC_PASSES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "ir/ir.h"
#include "passes/pp_schedule.h"
#include "passes/target.h"

/* What every pass is handed besides the module, as XLA hands a pass its options: what the plan
 * does not say of itself. The module's config block holds what the plan records (the layout,
 * the lanes); a pass that needs a cost asks the target (comm_overlap, memory_plan). */
typedef struct {
    const mcc_target *target;       /* the machine the plan is for (target.h) */
    bool unfused_fp8_amax;          /* the fusion pass leaves FP8's fp8_amax instructions apart, not made by
                                       their values' producers (--unfused-fp8-amax: the fused program's
                                       check, tests/fp8_fusion_bitwise.sh) */
} mcc_pass_options;

typedef bool (*pass_fn)(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen);
/* A pass that cuts one module into several (pipeline: one a stage). *n 1 and *out NULL: m stays as
 * it is; else m is left to the caller to free and out[0..n) replace it. */
typedef bool (*pass_cut_fn)(ir_module *m, const mcc_pass_options *opts, ir_module ***out, int *n, char *err,
                            size_t errlen);

typedef struct {
    const char *name;
    pass_fn run;                    /* every stage's module, one at a time; NULL for a cutting pass */
    const char *what;
    pass_cut_fn cut;
} pass_info;

/* The program being compiled: one module per pipeline stage, in stage order (one before the
 * pipeline pass and without pipeline parallelism). */
typedef struct {
    ir_module **stage;
    int n;
} mcc_program;
/* A program of the one module m (owned by it from now). */
mcc_program mcc_program_of(ir_module *m);
void mcc_program_free(mcc_program *p);

bool pass_precision(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen);
bool pass_fp8(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen);
bool pass_expert_parallel(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen);
bool pass_autodiff(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen);
bool pass_recompute(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen);
bool pass_context_parallel(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen);
bool pass_shard(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen);
bool pass_pipeline(ir_module *m, const mcc_pass_options *opts, ir_module ***stages, int *nstages, char *err,
                   size_t errlen);
/* The plan's pipeline schedule at v virtual stages per rank: the config's; for auto (left only in a
 * hand-written module: `mcc compile` writes the one frontend/main.c build chose) the first of
 * pp_scheds that runs v and keeps the backward whole. Where its row splits the backward (splits_w:
 * ZB-H1) the pipeline pass cuts it into input gradients (kind backward) and weight gradients (kind
 * wgrad). W keeps B's gradients (wstash) besides the forward's stash until it runs, which 1F1B frees
 * at B (llama3-70b TP=4 x PP=4 x DP=4: 100 GiB of stash on a middle stage against 1F1B's 62 GiB on
 * its first), so the frontend's auto takes a split backward only where its plan fits. */
pp_sched_kind pass_pipeline_schedule(const ir_module *m, int v);
/* The virtual stage of each of the nlayers layers into stage_of: pp_split_layers's split
 * (Megatron's, with the config's overrides or its layout) over the p * v virtual stages, in order
 * (the pipeline pass's, which the recompute pass's block method also counts from). False with the
 * numbers in err. */
bool pass_pipeline_layer_stages(const ir_module *m, int p, int v, int *stage_of, int nlayers, char *err,
                                size_t errlen);
/* How a run of the shard pass's propagation splits values over its axis. */
typedef struct {
    int seq_dim;                    /* >= 0: sequence parallelism over the axis splits the residual stream
                                       along that dimension (1 the sequence, 0 batch rows); -1: none */
    bool tokens;                    /* the axis splits the micro-batch's tokens, each rank a sequence's
                                       balanced chunks (context parallelism, ir_cp_position): a value's
                                       split is of its tokens, a sum over them is the rank's share (each
                                       rank a replica of the model: data_parallel sums its gradients over
                                       dp_cp), and the rules lower what needs other ranks' tokens or a
                                       token's place in the sequence (attention, the position ops, an MoE
                                       router's sums) */
    ir_cp_comm comm;                /* tokens: how attention reaches the other ranks' keys (cp_comm_type) */
    bool experts;                   /* the axis splits an MoE layer's experts (expert parallelism, the
                                       expert weights [E, ...] along dimension 0): the rows routed to
                                       them go to their experts' ranks and come back (all_to_all_v) */
} pass_axis_split;
/* The shard pass's propagation over one mesh axis of degree n, from the placements the globals'
 * and inputs' types record ({shard=[.., axis]}): rewrites every function into the local graph each
 * rank along the axis runs, inserting the collectives over it, split as `split` says. pass_shard is
 * this for tp, from Megatron's placements; pass_context_parallel for cp, from the tokens';
 * pass_expert_parallel for ep, from the experts'. */
bool pass_shard_axis(ir_module *m, ir_axis axis, int n, pass_axis_split split, char *err, size_t errlen);
/* t with dimension dim (1, the sequence; 0, the tokens flattened into rows) the rank's share. */
ir_type pass_seq_local(ir_type t, int dim, ir_axis axis, int n);
/* Whether the shard pass has the rule of kind `kind` (ops.def's shard column). */
bool pass_shard_has_rule(ir_shard_rule kind);
bool pass_data_parallel(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen);
bool pass_optimizer(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen);
bool pass_schedule(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen);
bool pass_fusion(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen);
bool pass_loss_chunks(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen);
bool pass_row_bounds(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen);
bool pass_comm_overlap(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen);
bool pass_grad_ready(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen);
bool pass_memory_plan(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen);

/* The mesh axis a dense (not expert) parameter's data-parallel replicas span: dp, or under context
 * parallelism dp_cp (Megatron's data_parallel_group_with_cp: every cp rank's gradient is a sum over
 * its own tokens, so the replicas to sum are the dp x cp ranks). At cp 1 it is dp, not dp_cp of the
 * same ranks, so those plans read as before. */
static inline ir_axis pass_dense_replica_axis(const ir_module *m)
{
    return ir_cfg_int(m, IR_CFG_CONTEXT_PARALLEL_SIZE) > 1 ? IR_AXIS_DP_CP : IR_AXIS_DP;
}

/* The mesh axis global g's data-parallel replicas span, from its layout: an expert weight's (split
 * over ep by expert_parallel.c) the expert data-parallel ranks edp (dp cp / ep), any other's
 * pass_dense_replica_axis. Its gradient is summed over that axis, and ZeRO's blocks of it
 * (gradient, master, moments) are 1/degree of it. */
static inline ir_axis pass_replica_axis(const ir_module *m, int g)
{
    return ir_layout_split(&m->globals[g].layout, IR_AXIS_EP) ? IR_AXIS_EDP : pass_dense_replica_axis(m);
}

/* The distributed optimizer (ZeRO-1: config use_distributed_optimizer) shards the optimizer over
 * the replicas' axes (dp, or dp x cp); with one replica (dp cp 1) it is a no-op, as in Megatron.
 * data_parallel.c and optimizer.c build it. */
static inline bool pass_zero_on(const ir_module *m)
{
    return ir_cfg_bool(m, IR_CFG_USE_DISTRIBUTED_OPTIMIZER) && ir_module_mesh(m).degree[IR_AXIS_DP_CP] > 1;
}

/* The backend a pass builds for: the target's where `mcc compile` gives one (the registry's word,
 * passes/target.c), else the plan's config target; -1 for a target whose backend no ir_backend names. */
static inline int pass_backend(const ir_module *m, const mcc_pass_options *opts)
{
    return opts && opts->target ? ir_choice_find(IR_CHOICE_BACKEND, opts->target->backend)
                                : ir_cfg_choice(m, IR_CFG_TARGET);
}

/* Whether ZeRO shards parameter (or companion) g: the distributed optimizer is on and g's replicas
 * (pass_replica_axis) are more than one rank. An expert weight at edp 1 (ep = dp cp) has no
 * replica to share its state with: blocks of it would be the whole, and its gradient's block a
 * second copy of the gradient, so such a parameter keeps the plain optimizer's master, gradient
 * and moments, and --use-distributed-optimizer never raises a plan. */
static inline bool pass_zero_param(const ir_module *m, int g)
{
    return pass_zero_on(m) && ir_module_mesh(m).degree[pass_replica_axis(m, g)] > 1;
}

/* The dtype of the gradient accumulators (autodiff's @<p>.grad) and so of their data-parallel
 * reduction and ZeRO's blocks of them: bf16 under config grad_reduce_in_bf16 (Megatron's
 * --grad-reduce-in-bf16: half the gradient memory and reduced bytes), else f32. The GEMMs and
 * accumulates that write them compute in fp32 and round each stored value (the CPU's kernels as
 * the GPU's bf16 stores), and AdamW reads them into fp32 against the fp32 masters. */
static inline ir_dtype pass_grad_dtype(const ir_module *m)
{
    return ir_cfg_bool(m, IR_CFG_GRAD_REDUCE_IN_BF16) ? IR_BF16 : IR_F32;
}

extern const pass_info mcc_passes[];
extern const int mcc_npasses;

/* Runs the passes up to and including `last` (NULL: all) over the program, each handed opts,
 * verifying after each when `verify`. Returns false with a message naming the pass on failure. */
bool mcc_run_passes(mcc_program *prog, const mcc_pass_options *opts, const char *last, bool verify, char *err,
                    size_t errlen);
int mcc_pass_index(const char *name); /* -1 if unknown */
/* Runs the one pass `name` on a program read back from its text (mcc opt), with the verifier before
 * and after it. Returns false with a message naming the pass (or an unknown name) on failure. */
bool mcc_run_pass(mcc_program *prog, const mcc_pass_options *opts, const char *name, char *err, size_t errlen);
/* What the target cannot run of module m (a backend's supports_op, passes/target.c), refused before
 * the passes rewrite it, naming the flags and the fix in err: on the cuda target, attention dropout
 * under context parallelism's p2p and all_gather (the CUDA attention kernels' dropout twins draw the
 * mask by the rank's own positions, kernels_templates/attention.cuh; a2a runs them as one rank's). */
bool pass_target_check(const ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen);
/* A training plan's invariant past the IR's own (passes/plan_check.c): from autodiff on, micro_step
 * writes every parameter's gradient. mcc_run_passes checks it after each pass when `verify`. */
bool pass_check_gradients(const ir_module *m, char *err, size_t errlen);

/* Bytes per rank by role, from the planned module: what train_rank allocates for it (each global
 * in its ir_global_span, the largest arena, and comm_buffers: the exchange buffers the memory plan
 * gave the copy lane, config keys arena_exchange_bytes and slab_exchange_bytes). */
typedef struct {
    int64_t params, grads, optimizer_state, activations, comm_buffers;
    int64_t stash;                  /* a pipeline stage's saved activations: every stash global's slots */
    int64_t saved;                  /* without stages: a micro-batch's forward values the backward reads (in
                                       activations): what recompute shrinks */
    double step_flops;              /* a step's GEMM and attention FLOPs on this rank, as planned: every
                                       micro-batch's forward, backward and what the backward recomputes */
    double recompute_flops;         /* of a micro-batch, the forward the backward replays (config
                                       recompute_flops: the whole model's, before the parallel splits) */
    int64_t host;                   /* the host's page-locked memory (--optimizer-cpu-offload): the host
                                       globals and the host function's arena; not in the total */
    int stage, stages, in_flight;   /* which pipeline stage (of how many), its most micro-batches in flight */
    char layers[96];                /* the layers whose parameters the stage holds, "0, 3-4" (the split the
                                       pipeline pass made), a multi-token depth as "depth k"; "" when none */
    int64_t a2a_bytes;              /* the step's all_to_all_v receive buffers (expert parallelism's dispatch
                                       and combine; in activations), sized by the exact worst case, and of
                                       them a2a_capacity_bytes by a capacity factor (the largest expert
                                       capacity: a2a_capacity rows of each ep rank) */
    int64_t a2a_capacity_bytes;
    double a2a_capacity;
    int a2a_count;
    double a2a_sent_bytes;          /* a micro-batch's all_to_all_v bytes sent by a rank, routing balanced
                                       (each sends what it receives: dispatch, combine and their
                                       transposes), over a2a_exchanges of them; (ep-1)/ep leave the rank */
    int a2a_exchanges, ep;
    double sent_bytes[IR_NUM_AXES]; /* a step's bytes a rank sends over each mesh axis in its collectives
                                       (ring algorithms; memory_plan.c's comm_sent_bytes) */
    double sent_micro_batch_bytes;  /* of them, one micro-batch's (its functions' collectives, every axis); the
                                       rest are once a step's */
} mcc_memory_breakdown;
int64_t mcc_memory_total(const mcc_memory_breakdown *b);
mcc_memory_breakdown mcc_memory_of(const ir_module *m);
void mcc_memory_print(const mcc_memory_breakdown *b, FILE *out);
/* Where the activations peak (the function, the instruction) and what is live there, by the op
 * that made each value: which ops recomputation or fusion would pay for (mcc compile --memory-report). */
void mcc_memory_report(const ir_module *m, FILE *out);

#endif
