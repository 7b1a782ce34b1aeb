/* knobs.h — every MCC_* environment variable in one table: its kind, default, choices or range,
 * which program reads it and what it does. mcc and train_rank validate the whole environment
 * once at start-up (knob_init): an MCC_ variable not in the table, or a value outside its
 * choices, stops the program naming the variable and the fix; each read site then asks the table
 * (knob_int(KNOB_TP_NCCL_CTAS)) and never parses text itself. README.md's Knobs table is this
 * one (tests/knobs.sh checks it). */
#ifndef MCC_KNOBS_H
#define MCC_KNOBS_H

#include <stdbool.h>
#include <stddef.h>

typedef enum { KNOB_BOOL, KNOB_INT, KNOB_NUM, KNOB_ENUM, KNOB_PATH } knob_kind;
typedef enum { KNOB_MCC = 1, KNOB_TRAIN_RANK = 2, KNOB_BENCH = 4 /* a bench script */ } knob_reader;

/* X(ID, kind, default, choices ("a|b": an enum's values; a bool's are "0|1"), min, max (an int in
 * [min, max], a num in (min, max]), reader, meaning). The variable is MCC_<ID>; an unset or empty
 * one takes the default. ORDER: README.md's Knobs table. */
#define KNOB_TABLE(X)                                                                                                 \
    X(ANCHORS, KNOB_PATH, "", NULL, 0, 0, KNOB_BENCH,                                                                 \
      "bench/torch_ddp_baseline.py: the folder of the PyTorch baseline torch_baseline.py (unset: devrun/anchors)")    \
    X(ATTENTION, KNOB_ENUM, "auto", "auto|mcc|cudnn", 0, 0, KNOB_TRAIN_RANK,                                          \
      "attention kernels: auto = cuDNN's where it has an engine for the shape, else mcc's; cudnn makes a missing "    \
      "engine an error")                                                                                              \
    X(CACHE_DIR, KNOB_PATH, "", NULL, 0, 0, KNOB_MCC,                                                                 \
      "where compiled kernels are cached, NVRTC's and the CPU's (unset: $XDG_CACHE_HOME/mcc, else ~/.cache/mcc)")                    \
    X(COLLECTIVE_TIMEOUT_S, KNOB_NUM, "300", NULL, 0, 1e9, KNOB_TRAIN_RANK,                                           \
      "seconds a collective may wait before every rank is ended, naming it")                                          \
    X(CPU_KERNELS, KNOB_ENUM, "llvm", "llvm|c", 0, 0, KNOB_TRAIN_RANK,                                                \
      "CPU elementwise ops: the plan's LLVM-generated kernels, or the C kernels (to compare the two)")                \
    X(CUDA_GRAPHS, KNOB_ENUM, "1", "1|0|eager-collectives", 0, 0, KNOB_TRAIN_RANK,                                    \
      "replay each step as CUDA graphs; 0: none; eager-collectives: none for functions with collectives (a hang "     \
      "names the collective)")                                                                                        \
    X(DGELU_EPILOGUE, KNOB_ENUM, "dgelu", "dgelu|bgrad|none", 0, 0, KNOB_TRAIN_RANK,                                  \
      "how matmul_dgelu_bgrad runs: the DGELU epilogue then sum_rows, the DGELU_BGRAD epilogue, or the plain GEMM "   \
      "then kernels")                                                                                                 \
    X(GEMM_AUTOTUNE, KNOB_BOOL, "0", "0|1", 0, 0, KNOB_TRAIN_RANK,                                                    \
      "1: time cuBLASLt's 8 best algorithms for each GEMM shape at the first step and keep the fastest (0: the "      \
      "heuristic's first)")                                                                                           \
    X(GPU_COMM, KNOB_ENUM, "auto", "auto|nccl|staged", 0, 0, KNOB_TRAIN_RANK,                                     \
      "GPU ranks' collectives: NCCL; staged: through host memory over MPI (mpirun), for ranks sharing a GPU, slow; "  \
      "auto: staged where a node's ranks outnumber its GPUs, else NCCL")                                             \
    X(GROUPED_GEMM_STREAMS, KNOB_INT, "1", NULL, 1, 8, KNOB_TRAIN_RANK,                                              \
      "streams a MoE grouped GEMM spreads its experts' GEMMs over, each with a 64 MiB cuBLASLt workspace (1: one "    \
      "after another on the compute stream)")                                                                        \
    X(HOST_HUGE_PAGES, KNOB_BOOL, "1", "0|1", 0, 0, KNOB_TRAIN_RANK,                                                  \
      "1: large page-locked host buffers (--optimizer-cpu-offload's state) asked for on transparent huge pages "     \
      "(madvise), 512 times fewer pages to fault in and pin at start-up; 0: the kernel's default pages")              \
    X(HOST_OPTIMIZER_ISA, KNOB_ENUM, "auto", "auto|avx512|avx2|generic", 0, 0, KNOB_TRAIN_RANK,                     \
      "instruction set of the host's AdamW under --optimizer-cpu-offload (auto: the best this CPU has; each gives "   \
      "the same bits)")                                                                                               \
    X(HOST_OPTIMIZER_THREADS, KNOB_INT, "0", NULL, 0, 1024, KNOB_TRAIN_RANK,                                         \
      "threads of the host's AdamW under --optimizer-cpu-offload (0: the CPUs the process may run on)")              \
    X(OVERLAP_GEMM_SMS, KNOB_INT, "0", NULL, 0, 4096, KNOB_TRAIN_RANK,                                                \
      "SMs for GEMMs planned while a collective runs beside them (0: all)")                                           \
    X(PROFILE, KNOB_BOOL, "0", "0|1", 0, 0, KNOB_TRAIN_RANK,                                                          \
      "1: print the GPU time per op and the costliest instructions (runs without CUDA graphs)")                       \
    X(PROFILE_DUMP, KNOB_PATH, "", NULL, 0, 0, KNOB_TRAIN_RANK,                                                       \
      "with MCC_PROFILE=1: every instruction's GPU time per call, its op, work and bytes, written to this file at "  \
      "exit (a tab-separated table: the step-time model's calibration, bench/calibrate.py)")                          \
    X(SIDE_NCCL_CTAS, KNOB_INT, "16", NULL, 1, 64, KNOB_TRAIN_RANK, "NCCL CTAs of the side lane (--comm-lanes side)") \
    X(TP_NCCL_CTAS, KNOB_INT, "64", NULL, 1, 64, KNOB_TRAIN_RANK, "NCCL CTAs of the tensor-parallel group")

/* Knobs no longer read, each with what replaced it: setting one stops the program with that fix
 * (a plan's choice now, so that what mcc compile predicts is what train_rank does). */
#define KNOB_RETIRED(X)                                                                                               \
    X(COMM_LANES, "the lanes are compiled into the plan, so its memory report counts their buffers: unset it and "   \
                  "compile with `mcc compile --comm-lanes copy|side|side,copy|none` (default: the target's)")

typedef enum {
#define KNOB_ID(id, ...) KNOB_##id,
    KNOB_TABLE(KNOB_ID)
#undef KNOB_ID
    KNOB_COUNT
} knob_id;

typedef struct {
    const char *name; /* "MCC_TP_NCCL_CTAS" */
    knob_kind kind;
    const char *dflt, *choices;
    double min, max;
    knob_reader reader;
    const char *help;
} knob_info;

extern const knob_info knob_table[KNOB_COUNT];

/* Reads and checks every MCC_ variable of the environment for program (whose knobs the start-up
 * box and the metrics file show); false with the first problem and its fix in err. Called again
 * it reads the environment again. */
bool knob_init(knob_reader program, char *err, size_t errlen);

/* The knob's value (its default when unset). A program that skipped knob_init (a test, a bench)
 * reads the environment at the first call, and a bad value there exits with status 2. */
bool knob_on(knob_id k);              /* bool */
long long knob_int(knob_id k);        /* int */
double knob_num(knob_id k);           /* num */
const char *knob_text(knob_id k);     /* enum: the choice; path: the path, or NULL when unset */
int knob_choice(knob_id k);           /* enum: the choice's index in its choices (a reader's enum in their ORDER) */
bool knob_is_set(knob_id k);          /* given (non-empty) in the environment */
/* Set and read by the program knob_init was given: what the start-up box and the metrics file
 * list. */
bool knob_shown(knob_id k);

/* setenv(name, value) and the knob re-read: for a bench or test that switches an implementation
 * within one process (MCC_ATTENTION). A bad value exits with status 2. */
void knob_setenv(knob_id k, const char *value);

#endif
