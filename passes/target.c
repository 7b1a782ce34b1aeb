/* target.c — the known targets (target.h): what a pass may ask of the machine. */
#include "target.h"

#include <stdio.h>
#include <string.h>

#include "passes.h"

/* The host's optimizer step: llama3-8b on one H200 with full recompute and CPU offload (bench/RESULTS.md,
 * 2026-12-02) spent about 7 s of its 13.9 s step on the host's AdamW and copies for 8.03e9 parameters,
 * about 28 bytes each (the fp32 master, m and v read and written, the gradient read): 32 GB/s. */
#define HOST_ADAM_BYTES_PER_S 32e9

/* An H200 SXM's costs, which the CPU backend plans with too (below). gemm_bf16_flops and
 * link_bytes_per_s are bench/overlap_bench.c's: bf16 GEMMs of a step's shapes beside a
 * collective, and NVLink's all-gather each way (NVLink's 450 GB/s each way on paper). */
#define H200_COSTS .peak_bf16_flops = 989e12, .peak_fp8_flops = 1979e12, .gemm_bf16_flops = 850e12, \
                   .link_bytes_per_s = 250e9, .hbm_bytes_per_s = 4.8e12, \
                   .host_bytes_per_s = HOST_ADAM_BYTES_PER_S

/* The step-time model of each calibrated target (bench/calibrate.py writes its .def): the rows,
 * ending with a NULL class, and STEP(scale, us a kernel, us a step), the step from the rows' sum. */
#define STEP(scale, kernel_us, step_us)
#define X(cls, t0, a, b) {cls, t0, a, b},
static const mcc_cost_row h100_cost_rows[] = {
#include "passes/step_cost_h100.def"
    {NULL, 0, 0, 0}};
#undef X
#undef STEP
#define STEP(scale, kernel_us, step_us) {scale, 1e-6 * (kernel_us), 1e-6 * (step_us)}
#define X(cls, t0, a, b)
static const double h100_step[3] =
#include "passes/step_cost_h100.def"
    ;
#undef X
#undef STEP
#define CALIBRATED(t) .cost_rows = t##_cost_rows, .ncost_rows = sizeof t##_cost_rows / sizeof t##_cost_rows[0] - 1, \
                      .step_scale = t##_step[0], .kernel_s = t##_step[1], .step_overhead_s = t##_step[2]

static const mcc_target targets[] = {
    {.name = "h200", .backend = "cuda", H200_COSTS, .memory_bytes = 143771ll << 20 /* as CUDA reports it */,
     .sms = 132, .copy_engine_collectives = true},
    /* H100 SXM 80 GB (HBM3), on the same NVLink 4 as the H200 and at the same peaks (the
     * datasheet's). Measured on the lent H100 (bench/target_probe.py, 2026-12-07, RESULTS.md):
     * memory as CUDA reports it, and the GEMM rate, the median of a LLaMA-3 8B step's bf16 GEMM
     * shapes at 8192 tokens (alone, not beside a collective as the H200's 850 were). Its link is
     * taken as the H200's: measuring one needs two GPUs. */
    {.name = "h100", .backend = "cuda", .peak_bf16_flops = 989e12, .peak_fp8_flops = 1979e12,
     .gemm_bf16_flops = 729e12, .link_bytes_per_s = 250e9, .memory_bytes = 81079ll << 20, .sms = 132,
     .copy_engine_collectives = true, .hbm_bytes_per_s = 3.35e12, .host_bytes_per_s = HOST_ADAM_BYTES_PER_S,
     CALIBRATED(h100)},
    /* H100 PCIe without an NVLink bridge: the datasheet's figures, PCIe Gen5 x16 each way; its
     * GEMMs assumed at the H200's fraction of peak. Not measured here; the copy lane not assumed. */
    {.name = "h100-pcie", .backend = "cuda", .peak_bf16_flops = 756e12, .peak_fp8_flops = 1513e12,
     .gemm_bf16_flops = 650e12, .link_bytes_per_s = 64e9, .memory_bytes = 81559ll << 20, .sms = 114,
     .copy_engine_collectives = false, .hbm_bytes_per_s = 2.0e12, .host_bytes_per_s = HOST_ADAM_BYTES_PER_S},
    /* The CPU backend is the fp32 oracle of the GPU's plans: every parallel layout is proven equal
     * to the single rank on CPU ranks, so its plans take the H200's costs and schedule as the
     * GPU's do. Its memory is the host's (not checked); MPI has no copy lane. */
    {.name = "cpu", .backend = "cpu", H200_COSTS, .memory_bytes = 0, .sms = 0, .copy_engine_collectives = false},
};
enum { NTARGETS = sizeof targets / sizeof targets[0] };

/* --target cuda is the CUDA backend's default GPU. */
static const struct {
    const char *alias, *name;
} aliases[] = {{"cuda", "h200"}};

const mcc_target *mcc_target_by_name(const char *name)
{
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (!strcmp(name, aliases[i].alias))
            name = aliases[i].name;
    for (int i = 0; i < NTARGETS; i++)
        if (!strcmp(name, targets[i].name))
            return &targets[i];
    return NULL;
}

const char *mcc_target_names(void)
{
    static char names[256];
    if (!names[0]) { /* "h200|h100|h100-pcie|cpu|cuda (= h200)", from the tables */
        for (int i = 0; i < NTARGETS; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? "|" : "", targets[i].name);
        for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "|%s (= %s)", aliases[i].alias,
                     aliases[i].name);
    }
    return names;
}

double mcc_target_macs_per_wire_byte(const mcc_target *t) { return t->gemm_bf16_flops / 2 / t->link_bytes_per_s; }

double mcc_target_compute_seconds(const mcc_target *t, double flops) { return flops / t->gemm_bf16_flops; }

bool mcc_target_parse_lanes(const mcc_target *t, const char *text, bool *side, bool *copy, char *err, size_t errlen)
{
    const char *choices[] = {"none", "side", "copy", "side,copy"}; /* bit 0: side, bit 1: copy */
    int pick = t->copy_engine_collectives ? 2 : 0;
    if (text) {
        for (pick = 0; pick < 4 && strcmp(text, choices[pick]) != 0; pick++)
            ;
        if (pick == 4) {
            snprintf(err, errlen, "--comm-lanes %s: choose copy, side, side,copy or none", text);
            return false;
        }
    }
    *side = pick & 1, *copy = pick & 2;
    if (*copy && !t->copy_engine_collectives) {
        snprintf(err, errlen, "--comm-lanes %s: the %s target's copy engines do not serve collectives; give "
                              "--comm-lanes side or none", text, t->name);
        return false;
    }
    return true;
}

/* The module's attention dropout ops, and whether any is in a function context parallelism splits. */
static bool has_attention_dropout(const ir_module *m)
{
    for (int f = 0; f < m->nfuncs; f++)
        for (int i = 0; i < m->funcs[f]->ninstrs; i++)
            if ((m->funcs[f]->kind == IR_FUNC_STEP || m->funcs[f]->kind == IR_FUNC_EVAL) &&
                ir_attr_index(m->funcs[f]->instrs[i].op, "head_offset") >= 0)
                return true;
    return false;
}

/* The first attention (or its dropout twin) whose values are not as wide as its queries and keys
 * (multi-latent attention's): their widths in *d and *dv; false when there is none. */
static bool narrow_values_attention(const ir_module *m, bool *dropout, int64_t *d, int64_t *dv)
{
    for (int f = 0; f < m->nfuncs; f++)
        for (int i = 0; i < m->funcs[f]->ninstrs; i++) {
            const ir_func *fn = m->funcs[f];
            const ir_instr *in = &fn->instrs[i];
            if (in->op != IR_OP_ATTENTION && in->op != IR_OP_ATTENTION_DROPOUT)
                continue;
            *d = fn->vals[in->args[0]].type.dims[3], *dv = fn->vals[in->args[2]].type.dims[3];
            *dropout = in->op == IR_OP_ATTENTION_DROPOUT;
            if (*d != *dv)
                return true;
        }
    return false;
}

bool pass_target_check(const ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen)
{
    int cp = (int)ir_cfg_int(m, IR_CFG_CONTEXT_PARALLEL_SIZE);
    bool dropout = false;
    int64_t d = 0, dv = 0;
    /* Values narrower than q and k run on CUDA through cuDNN's fused attention alone
     * (runtime/cuda/attention.c), which mcc runs causal, without dropout, on whole sequences. */
    if (pass_backend(m, opts) == IR_BACKEND_CUDA && narrow_values_attention(m, &dropout, &d, &dv)) {
        if (dropout)
            return snprintf(err, errlen, "--attention-dropout with values of %lld channels beside queries and keys of "
                            "%lld (multi_latent_attention's v_head_dim and qk_head_dim + qk_pos_emb_head_dim) on the "
                            "cuda target: such attention runs only through cuDNN's fused attention, which mcc runs "
                            "without dropout: pass --attention-dropout 0 (DeepSeek-V3 trains without), a --v-head-dim "
                            "of %lld, or --target cpu", (long long)dv, (long long)d, (long long)d),
                   false;
        if (cp > 1 && ir_cfg_choice(m, IR_CFG_CP_COMM_TYPE) != IR_CP_A2A)
            return snprintf(err, errlen, "--context-parallel-size %d with --cp-comm-type %s and values of %lld channels "
                            "beside queries and keys of %lld (multi_latent_attention's) on the cuda target: such "
                            "attention runs only through cuDNN's fused attention, on whole sequences, and the ring's "
                            "pieces (or the gathered keys) need mcc's kernels, which take one head dimension: pass "
                            "--cp-comm-type a2a (attention on whole sequences of a block of heads), a --v-head-dim of "
                            "%lld, or --target cpu", cp, ir_cfg_text(m, IR_CFG_CP_COMM_TYPE), (long long)dv,
                            (long long)d, (long long)d),
                   false;
    }
    if (cp > 1 && pass_backend(m, opts) == IR_BACKEND_CUDA && ir_cfg_choice(m, IR_CFG_CP_COMM_TYPE) != IR_CP_A2A &&
        has_attention_dropout(m))
        return snprintf(err, errlen, "--attention-dropout with --context-parallel-size %d and --cp-comm-type %s on the "
                        "cuda target: the CUDA attention kernels draw the dropout mask by the rank's own positions, not "
                        "yet by the whole sequence's: pass --cp-comm-type a2a (attention on whole sequences of a block "
                        "of heads), or --attention-dropout 0, or --target cpu", cp, ir_cfg_text(m, IR_CFG_CP_COMM_TYPE)),
               false;
    return true;
}
