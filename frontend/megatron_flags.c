/* megatron_flags.c — what each flag of a Megatron-LM training script that is not a spec field
 * means to mcc (megatron_flags.h). The rows cover every flag that Megatron-LM's arguments.py
 * defines and that its examples/ scripts running pretrain_gpt.py pass (NVIDIA/Megatron-LM at
 * d98e8a6, 2026-08-22), with torchrun's DISTRIBUTED_ARGS beside them; tests/megatron_scripts.sh
 * pastes four of those scripts whole. A flag that asks for a number mcc already computes is
 * accepted with a note; one that asks for a different function is refused with its meaning. */
#include "frontend/megatron_flags.h"

#include "common/cli.h"

#include <stdlib.h>
#include <string.h>
#include <stdbool.h>

/* ORDER mcc_megatron_kind */
static const char *const megatron_kind_text[] = {"accepted, nothing to change", "mapped", "accepted",
                                                 "accepted, not used", "refused"};

#define SAME(flag, n, values, why) {flag, n, values, MF_SAME, NULL, NULL, why}
#define SAME_IF(flag, n, values, holds, why) {flag, n, values, MF_SAME, NULL, holds, why}
#define SETS(flag, sets, why) {flag, 0, NULL, MF_SETS, sets, NULL, why}
#define IMPLIED(flag, why) {flag, 0, NULL, MF_IMPLIED, NULL, NULL, why}
#define UNUSED(flag, n, values, why) {flag, n, values, MF_UNUSED, NULL, NULL, why}
#define REFUSED(flag, n, why) {flag, n, NULL, MF_REFUSED, NULL, NULL, why}

#define FUSION_SAME "the fusion pass decides which kernels it fuses; what is computed is the same"
#define TOKENIZER_ELSEWHERE "the tokenizer runs before training, in `mcc data preprocess` (give it there); " \
                            "pass the vocabulary as --vocab-size"
#define CKPT_OWN "train_rank writes its own checkpoints, which any parallel layout loads; `mcc convert --to hf` " \
                 "exports them"
#define NOT_LOGGED "not logged: train_rank logs loss, lr, grad norm, throughput, memory and validation loss/ppl " \
                   "(--metrics-file, --tensorboard-dir)"
#define PROFILE_NSYS "every plan function runs inside an NVTX range named after it: `nsys profile -t cuda,nvtx " \
                     "./train_rank ...` records a profile"
#define MEMORY_PLANNED "memory is planned ahead, not allocated on demand: `mcc compile --memory-report` says what " \
                       "is live at the peak"
#define FSDP_BUFFERS "a Megatron-FSDP buffer setting; mcc shards with --use-distributed-optimizer (ZeRO-1)"
#define TORCHRUN_OWN "torchrun's: give it to torchrun (mcc compile prints the launch lines)"

static const mcc_megatron_flag megatron_flags[] = {
    /* precision and implementation: what mcc does anyway */
    SAME("--bf16", 0, NULL,
         "the CUDA target trains in bf16 with fp32 master weights anyway (the CPU target computes in fp32)"),
    REFUSED("--fp16", 0,
            "mcc trains in bf16 only (fp16 needs loss scaling, which it does not have): pass --bf16 or nothing"),
    SAME("--use-mcore-models", 0, NULL, "mcc builds Megatron Core's GPT model, its only one"),
    SAME("--use-flash-attn", 0, NULL,
         "attention is always one fused flash-attention kernel (mcc's, or cuDNN's where found)"),
    SAME("--attention-backend", 1, "flash|fused|unfused|local|auto",
         "attention is mcc's fused kernel (or cuDNN's): every backend computes the same softmax(QK^T / sqrt(d)) V"),
    SAME("--attention-softmax-in-fp32", 0, NULL, "the attention kernel computes its softmax in fp32"),
    SAME("--transformer-impl", 1, "transformer_engine|local", "mcc compiles its own kernels: there is no implementation to choose"),
    SAME("--no-masked-softmax-fusion", 0, NULL, "the causal mask and softmax run inside the attention kernel either way"),
    SAME("--no-bias-gelu-fusion", 0, NULL, FUSION_SAME),
    SAME("--no-bias-swiglu-fusion", 0, NULL, FUSION_SAME),
    SAME("--no-bias-dropout-fusion", 0, NULL, FUSION_SAME),
    SAME("--no-rope-fusion", 0, NULL, FUSION_SAME),
    SAME("--cross-entropy-loss-fusion", 0, NULL, "the loss is one fused kernel over the logits anyway"),
    SAME("--no-gradient-accumulation-fusion", 0, NULL,
         "weight gradients accumulate in their fp32 buffers either way; only the kernel that adds them differs"),
    SAME("--distributed-backend", 1, "nccl", "GPU ranks communicate through NCCL (CPU ranks through MPI)"),
    SAME("--empty-unused-memory-level", 1, "0|1|2", MEMORY_PLANNED "; there is no caching allocator to empty"),
    SAME("--no-create-attention-mask-in-dataloader", 0, NULL,
         "the causal mask is applied inside the attention kernel; no mask tensor is made"),
    UNUSED("--disable-bf16-reduced-precision-matmul", 0, NULL,
           "mcc's GEMMs accumulate in fp32 (cuBLASLt's 32F compute type) anyway"),
    /* the model: other spellings and implied settings */
    IMPLIED("--group-query-attention", "implied by --num-query-groups: fewer groups than heads is grouped-query attention"),
    SETS("--disable-bias-linear", "add_bias_linear=false", "read as --add-bias-linear false"),
    SAME_IF("--no-position-embedding", 0, NULL, "position_embedding_type=rope",
            "with rope there is no learned position table to leave out (a model without any position "
            "information is not built: give --position-embedding-type rope)"),
    SAME("--softmax-type", 1, "vanilla", "attention's softmax is the plain one (off-by-one and learnable sinks are not built)"),
    REFUSED("--window-size", 1, "sliding-window attention is not built: drop it for full causal attention"),
    REFUSED("--window-attn-skip-freq", 1, "sliding-window attention is not built: drop it for full causal attention"),
    REFUSED("--quick-geglu", 0, "the GLU with x * sigmoid(1.702 x) (gpt-oss) is not built: use --swiglu"),
    REFUSED("--glu-linear-offset", 1, "gpt-oss's SwiGLU with an offset on the linear half is not built: use --swiglu"),
    REFUSED("--activation-func-clamp-value", 1, "gpt-oss's clamped SwiGLU is not built: use --swiglu"),
    /* mixture of experts */
    SAME("--moe-grouped-gemm", 0, NULL, "an MoE layer's experts always run as grouped GEMMs (moe_grouped_matmul)"),
    SAME("--moe-permute-fusion", 0, NULL, "the tokens' permutation to their experts and back is one kernel each way"),
    SAME("--moe-token-dispatcher-type", 1, "alltoall|allgather|flex",
         "expert parallelism dispatches tokens by all-to-all (all_to_all_v): the dispatcher changes how tokens "
         "travel, not what is computed"),
    UNUSED("--moe-flex-dispatcher-backend", 1, "deepep|hybridep",
           "the flex dispatcher's transport; mcc dispatches by all-to-all over NCCL"),
    UNUSED("--moe-per-layer-logging", 0, NULL,
           "train_rank logs the routers' aux loss, z loss and load imbalance over all layers, not per layer"),
    /* optimizer, data-parallel sharding, FP8 */
    SAME("--calculate-per-token-loss", 0, NULL,
         "every micro-batch holds micro_batch_size x seq_length tokens and none is masked from the loss, so the "
         "mean over the global batch's tokens is the mean of the micro-batches' means that mcc takes"),
    SAME_IF("--accumulate-allreduce-grads-in-fp32", 0, NULL, "grad_reduce_in_bf16=false",
            "gradients are accumulated and reduced across data-parallel ranks in fp32 (not beside "
            "--grad-reduce-in-bf16, which asks for bf16)"),
    SAME("--num-distributed-optimizer-instances", 1, "1",
         "one distributed optimizer over all data-parallel ranks (several instances, Megatron's hierarchical "
         "sharding, are not built)"),
    UNUSED("--overlap-param-gather", 0, NULL,
           "the ZeRO all-gather of the updated parameters runs after the optimizer step (param_sync), not inside "
           "the next forward: the same numbers, its time not hidden"),
    UNUSED("--fp8-param-gather", 0, NULL,
           "the weights stay bf16 and are cast to FP8 for their GEMMs; the ZeRO all-gather moves bf16 (Megatron "
           "casts the fp32 master instead: a rare rounding tie may differ)"),
    SETS("--use-megatron-fsdp", "use_distributed_optimizer=true",
         "read as --use-distributed-optimizer: mcc shards optimizer state and fp32 masters over dp (ZeRO-1), not "
         "parameters and gradients (FSDP's ZeRO-3); the memory plan says whether that fits"),
    UNUSED("--data-parallel-sharding-strategy", 1, "no_shard|optim|optim_grads|optim_grads_params", FSDP_BUFFERS),
    UNUSED("--outer-dp-sharding-strategy", 1, NULL, FSDP_BUFFERS),
    UNUSED("--fsdp-double-buffer", 0, NULL, FSDP_BUFFERS),
    UNUSED("--fsdp-manual-registration", 0, NULL, FSDP_BUFFERS),
    UNUSED("--fsdp-db-use-persist-buf-on-alloc-fail", 0, NULL, FSDP_BUFFERS),
    UNUSED("--megatron-fsdp-max-pool-double-buffer", 0, NULL, FSDP_BUFFERS),
    UNUSED("--use-nccl-ub", 0, NULL, "NCCL user buffers for Megatron-FSDP; mcc's NCCL calls use its planned buffers"),
    UNUSED("--init-model-with-meta-device", 0, NULL,
           "train_rank allocates every buffer once, from the plan, and initializes parameters in place"),
    /* the FSDP gradient dtypes, a row a value: bf16 buffers and bf16 reductions together are mcc's
       --grad-reduce-in-bf16, which main-grads bf16 sets and comm bf16 then holds; one without the other
       is refused (mcc reduces its gradients in their own dtype) */
    SAME_IF("--megatron-fsdp-grad-comm-dtype", 1, "fp32", "grad_reduce_in_bf16=false",
            "gradients are reduced across data-parallel ranks in fp32 (refused beside bf16 gradient buffers: mcc "
            "reduces gradients in their own dtype)"),
    SAME_IF("--megatron-fsdp-grad-comm-dtype", 1, "bf16", "grad_reduce_in_bf16=true",
            "gradients reduced in bf16, beside bf16 gradient buffers (--megatron-fsdp-main-grads-dtype bf16 or "
            "--grad-reduce-in-bf16): mcc reduces gradients in their own dtype"),
    SAME_IF("--megatron-fsdp-main-grads-dtype", 1, "fp32", "grad_reduce_in_bf16=false",
            "gradients accumulate in fp32 buffers (refused beside --grad-reduce-in-bf16)"),
    {"--megatron-fsdp-main-grads-dtype", 1, "bf16", MF_SETS, "grad_reduce_in_bf16=true", NULL,
     "read as --grad-reduce-in-bf16: gradients accumulate in bf16 buffers and are reduced in bf16 (so "
     "--megatron-fsdp-grad-comm-dtype, if given, must be bf16 too)"},
    SAME("--megatron-fsdp-main-params-dtype", 1, "fp32", "master weights are fp32"),
    REFUSED("--step-batch-size-schedule", 1,
            "Megatron ramps the global batch size up over the samples seen; mcc's batch is fixed when it compiles: "
            "drop it to train at --global-batch-size throughout"),
    SETS("--fp8-hybrid", "fp8_format=hybrid", "read as --fp8-format hybrid"),
    SETS("--no-fp8-wgrad", "fp8_wgrad=false", "read as --fp8-wgrad false"),
    SETS("--no-store-param-remainders", "store_param_remainders=false", "read as --store-param-remainders false"),
    SETS("--recompute-activations", "recompute_granularity=selective",
         "read as --recompute-granularity selective (Megatron's older flag)"),
    /* data */
    UNUSED("--tokenizer-type", 1, NULL, TOKENIZER_ELSEWHERE),
    UNUSED("--tokenizer-model", 1, NULL, TOKENIZER_ELSEWHERE),
    UNUSED("--vocab-file", 1, NULL, TOKENIZER_ELSEWHERE),
    UNUSED("--merge-file", 1, NULL, TOKENIZER_ELSEWHERE),
    UNUSED("--tiktoken-pattern", 1, NULL, TOKENIZER_ELSEWHERE),
    UNUSED("--num-workers", 1, NULL, "train_rank reads samples from mapped files in its step loop, with no loader workers"),
    UNUSED("--data-cache-path", 1, NULL, "train_rank builds the datasets' indices in memory at start-up; it keeps no cache"),
    UNUSED("--no-mmap-bin-files", 0, NULL, "train_rank maps the .bin files; the tokens read are the same"),
    REFUSED("--sft", 0,
            "supervised fine-tuning data (conversations with the prompt masked from the loss) is not built: "
            "train_rank trains on every token of --data-path"),
    REFUSED("--per-split-data-args-path", 1,
            "a JSON file of per-split data paths is not read: give --data-path, which --split divides"),
    /* checkpoints, logging, profiling */
    UNUSED("--ckpt-format", 1, NULL, CKPT_OWN),
    UNUSED("--auto-detect-ckpt-format", 0, NULL, CKPT_OWN),
    UNUSED("--dist-ckpt-strictness", 1, NULL,
           "a checkpoint's tensors must match the plan's by name and shape: a mismatch is an error naming it"),
    SAME("--log-throughput", 0, NULL, "train_rank's log line always has TFLOP/s/GPU, tokens/s/GPU and MFU"),
    SAME("--log-memory-to-tensorboard", 0, NULL,
         "train_rank writes mem-allocated-bytes with every log line (--tensorboard-dir)"),
    SAME("--log-validation-ppl-to-tensorboard", 0, NULL,
         "train_rank writes 'lm loss validation ppl' with every validation (--tensorboard-dir)"),
    UNUSED("--log-params-norm", 0, NULL, NOT_LOGGED),
    UNUSED("--log-num-zeros-in-grad", 0, NULL, NOT_LOGGED),
    UNUSED("--log-timers-to-tensorboard", 0, NULL, NOT_LOGGED),
    UNUSED("--logging-level", 1, NULL, "train_rank prints its log lines and errors alone"),
    UNUSED("--wandb-project", 1, NULL,
           "mcc has no Weights & Biases client: write TensorBoard files (--tensorboard-dir DIR) and upload them "
           "with `wandb sync --sync-tensorboard DIR`"),
    UNUSED("--wandb-exp-name", 1, NULL, "mcc has no Weights & Biases client (see --wandb-project)"),
    UNUSED("--wandb-save-dir", 1, NULL, "mcc has no Weights & Biases client (see --wandb-project)"),
    UNUSED("--profile", 0, NULL, PROFILE_NSYS),
    UNUSED("--profile-step-start", 1, NULL, PROFILE_NSYS),
    UNUSED("--profile-step-end", 1, NULL, PROFILE_NSYS),
    UNUSED("--profile-ranks", -1, NULL, PROFILE_NSYS),
    UNUSED("--record-memory-history", 0, NULL, MEMORY_PLANNED),
    UNUSED("--memory-snapshot-path", 1, NULL, MEMORY_PLANNED),
    UNUSED("--cuda-graph-impl", 1, NULL, "mcc decides itself which plan functions it runs as CUDA graphs"),
    UNUSED("--manual-gc", 0, NULL, "train_rank is C: there is no Python garbage collector to schedule"),
    UNUSED("--manual-gc-interval", 1, NULL, "train_rank is C: there is no Python garbage collector to schedule"),
    UNUSED("--no-check-for-nan-in-loss-and-grad", 0, NULL,
           "train_rank checks every step's loss and grad norm anyway: a non-finite one stops the run, or skips "
           "the step with train_rank --skip-nan-steps"),
    UNUSED("--distributed-timeout-minutes", 1, NULL, "train_rank sets no timeout of its own; NCCL's and MPI's apply"),
    UNUSED("--enable-experimental", 0, NULL, "nothing in mcc is held behind it"),
    /* torchrun's DISTRIBUTED_ARGS (--nproc_per_node and --nnodes are spec fields: they make the world) */
    UNUSED("--node_rank", 1, NULL, TORCHRUN_OWN),
    UNUSED("--master_addr", 1, NULL, TORCHRUN_OWN),
    UNUSED("--master_port", 1, NULL, TORCHRUN_OWN),
};
enum { NMEGATRON = sizeof megatron_flags / sizeof megatron_flags[0] };
_Static_assert((int)NMEGATRON <= (int)MCC_MEGATRON_MAX, "raise MCC_MEGATRON_MAX: mcc_spec_flag_near sizes its list by it");

const mcc_megatron_flag *mcc_megatron_find(const char *flag)
{
    char dashed[96]; /* torchrun spells its flags with '_' or '-' */
    snprintf(dashed, sizeof dashed, "%s", flag);
    for (int i = 0; i < NMEGATRON; i++) {
        const char *f = megatron_flags[i].flag;
        bool same = strlen(f) == strlen(dashed);
        for (size_t k = 0; same && f[k]; k++)
            same = f[k] == dashed[k] || (f[k] == '_' && dashed[k] == '-');
        if (same) return &megatron_flags[i];
    }
    return NULL;
}

/* The row after m of the same flag (a flag whose meaning depends on its value: one after another), or NULL. */
static const mcc_megatron_flag *next_row_of_flag(const mcc_megatron_flag *m)
{
    return m + 1 < megatron_flags + NMEGATRON && !strcmp(m[1].flag, m->flag) ? m + 1 : NULL;
}

const mcc_megatron_flag *mcc_megatron_find_value(const char *flag, const char *value)
{
    const mcc_megatron_flag *first = mcc_megatron_find(flag);
    for (const mcc_megatron_flag *m = first; value && m; m = next_row_of_flag(m))
        if (m->values && cli_value_listed(m->values, value))
            return m;
    return first;
}

void mcc_megatron_values(const char *flag, char *buf, size_t n)
{
    buf[0] = 0;
    for (const mcc_megatron_flag *m = mcc_megatron_find(flag); m; m = next_row_of_flag(m))
        if (m->values && strlen(buf) < n)
            snprintf(buf + strlen(buf), n - strlen(buf), "%s%s", buf[0] ? "|" : "", m->values);
}

const mcc_megatron_flag *mcc_megatron_at(int i) { return &megatron_flags[i]; }
int mcc_megatron_count(void) { return NMEGATRON; }
const char *mcc_megatron_kind_text(mcc_megatron_kind k) { return megatron_kind_text[k]; }

void mcc_megatron_print_help(FILE *out, bool markdown)
{
    if (markdown)
        fprintf(out, "<!-- generated by `mcc help megatron-flags --markdown` from frontend/megatron_flags.c's table: "
                     "edit the table, not this file (tests/docs_check.py checks they agree) -->\n"
                     "# Megatron-LM flags that are not spec fields\n\nFlags of Megatron-LM's pretrain_gpt.py scripts "
                     "(and torchrun's) that `mcc compile` reads beside the spec fields (docs/spec-fields.md), and what "
                     "each means to mcc.\n\n| flag | kind | why |\n|---|---|---|\n");
    else
        fprintf(out, "Megatron-LM flags that are not fields (pretrain_gpt.py's spelling, and torchrun's):\n");
    for (int i = 0; i < NMEGATRON; i++) {
        const mcc_megatron_flag *m = &megatron_flags[i];
        char flag[96];
        snprintf(flag, sizeof flag, "%s%s%s", m->flag, m->nvalues ? " " : "",
                 m->nvalues ? (m->values ? m->values : m->nvalues < 0 ? "VALUE..." : "VALUE") : "");
        if (!markdown) {
            fprintf(out, "  %-38s %s: %s\n", flag, megatron_kind_text[m->kind], m->why);
            continue;
        }
        fprintf(out, "| `");
        cli_print_md_cell(out, flag);
        fprintf(out, "` | %s | ", megatron_kind_text[m->kind]);
        cli_print_md_cell(out, m->why);
        fprintf(out, " |\n");
    }
}
