/* target.h — the machine a plan is compiled for, as the passes see it: one description per known
 * target (target.c's table), chosen by `--target`, and handed to every pass in its options
 * (passes.h: mcc_pass_options), as XLA hands a pass its options. It lives beside the passes, its
 * readers: ir/ knows no device, and the runtime reads only what a pass or `mcc compile` wrote into
 * the plan (its lanes, its exchange buffers), never the description, so a plan runs as it was
 * predicted wherever it runs. */
#ifndef MCC_TARGET_H
#define MCC_TARGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One calibrated class of instructions (passes/step_cost.h): t = t0 + a FLOPs / wave efficiency + b bytes. */
typedef struct {
    const char *cls;
    double t0_us, us_per_gflop, us_per_gb;
} mcc_cost_row;

typedef struct {
    const char *name;              /* "h200": what --target takes (besides the aliases of target.c) */
    const char *backend;           /* "cuda" or "cpu": the codegen and runtime (config key `target`) */
    double peak_bf16_flops;        /* dense bf16 FLOP/s of one device, the datasheet's */
    double peak_fp8_flops;         /* dense fp8 FLOP/s */
    double gemm_bf16_flops;        /* what bf16 GEMMs of a transformer's shapes reach, measured: the
                                      cost of the work that hides a collective (comm_overlap) */
    double link_bytes_per_s;       /* intra-node link: the bytes per second an all-gather moves each
                                      way per rank, measured (bench/overlap_bench.c) */
    int64_t memory_bytes;          /* device memory as the device reports it: what a plan must fit
                                      in, with the runtime's overhead (0: not checked) */
    int sms;                       /* streaming multiprocessors (0: not a GPU) */
    bool copy_engine_collectives;  /* a group's copy engines can move its collectives' buffers (an
                                      NCCL window): `--comm-lanes copy`, and its exchange buffers */
    double hbm_bytes_per_s;        /* device memory's bandwidth, the datasheet's: the roofline of a
                                      memory-bound instruction no calibrated row costs */
    double host_bytes_per_s;       /* what the host's optimizer step (--optimizer-cpu-offload) moves a
                                      second, its copies included: not calibrated per instruction */
    const mcc_cost_row *cost_rows; /* the step-time model's calibration (passes/step_cost_<name>.def) */
    int ncost_rows;
    double step_scale;             /* the step from the rows' sum: step_scale x sum + kernel_s x kernels + step_overhead_s */
    double kernel_s;               /*   (the dense stream's slowdown beside the profile's kernels timed alone; the eager */
    double step_overhead_s;        /*   launch's share of a kernel a graph does not pay; the host's share of a step) */
} mcc_target;

/* The description --target NAME names (NULL: none; mcc_target_names lists them). */
const mcc_target *mcc_target_by_name(const char *name);
/* "h200|h100-pcie|cpu|cuda": what --target takes, for usage lines and errors. */
const char *mcc_target_names(void);

/* GEMM multiply-adds that take as long as one byte takes over the link: the work that hides a
 * collective's byte beside it (comm_overlap). A multiply-add is two FLOPs. */
double mcc_target_macs_per_wire_byte(const mcc_target *t);

/* The seconds `flops` of a step's GEMM and attention work take at the target's measured GEMM rate:
 * the cost model's step time (mcc compile prints it from the planned functions, recomputation
 * included). */
double mcc_target_compute_seconds(const mcc_target *t, double flops);

/* The lanes `--comm-lanes TEXT` asks for (copy|side|side,copy|none; NULL: the target's default,
 * the copy engines where they serve collectives, else none): which communicators carry a group's
 * collectives beside computation (config keys comm_side_lane, comm_copy_lane). False with the
 * flag, the reason and the fix in err for another text, or copy on a target without copy engines. */
bool mcc_target_parse_lanes(const mcc_target *t, const char *text, bool *side, bool *copy, char *err, size_t errlen);

#endif
