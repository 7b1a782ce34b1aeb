/* overlap_bench.c — does a collective running beside a GEMM hide its time, or take it from the
 * GEMM? Two ranks on one node (RANK/WORLD_SIZE, NCCL bootstrapped from NCCL_COMM_ID), each
 * timing, for an all-gather, a reduce-scatter and an all-to-all (a reduce-scatter's exchange, whose
 * sum is then a local add) of tensor-parallel size (bf16, B*T x hidden):
 *   the GEMMs alone, the collectives alone, and both started together on two streams,
 * under NCCL's CTA counts and policies: fixed CTA counts, the default, EFFICIENCY (fewer CTAs),
 * symmetric windows (ncclMemAlloc + ncclCommWindowRegister: NCCL's symmetric kernels) and ZERO
 * (copy engines where NCCL can, on a symmetric window).
 * "hidden" = (gemm + coll - both) / coll: 1 means the collective cost nothing beside the GEMMs.
 * Run: bench/overlap_bench.sh (launches the two ranks). */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank;
#define CK(x) do { long e_ = (long)(x); if (e_) { fprintf(stderr, "rank %d: %s failed: %ld (line %d)\n", rank, #x, e_, __LINE__); exit(1); } } while (0)

enum { REPS = 10, TRIALS = 5 };

typedef struct {
    const char *name;
    ncclComm_t comm;
    void *send, *recv;  /* all-gather: send is the local shard; reduce-scatter, all-to-all: send is the full tensor */
} setup;

static size_t shard_elems; /* per rank: B*T/2 x hidden */
static cublasHandle_t blas;
static void *ga, *gb, *gc;
static int gm, gn, gk;

static void gemms(cudaStream_t s)
{
    float one = 1, zero = 0;
    CK(cublasSetStream(blas, s));
    for (int i = 0; i < REPS; i++)
        CK(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, gn, gm, gk, &one, gb, CUDA_R_16BF, gn, ga, CUDA_R_16BF, gk,
                        &zero, gc, CUDA_R_16BF, gn, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

enum { REDUCE_SCATTER, ALL_GATHER, ALL_TO_ALL, NKINDS };
static const char *const kind_names[NKINDS] = {"reduce_scatter", "all_gather", "all_to_all"};

static void colls(const setup *u, int kind, cudaStream_t s)
{
    for (int i = 0; i < REPS; i++) {
        if (kind == ALL_GATHER)
            CK(ncclAllGather(u->send, u->recv, shard_elems, ncclBfloat16, u->comm, s));
        else if (kind == REDUCE_SCATTER)
            CK(ncclReduceScatter(u->send, u->recv, shard_elems, ncclBfloat16, ncclSum, u->comm, s));
        else
            CK(ncclAlltoAll(u->send, u->recv, shard_elems, ncclBfloat16, u->comm, s));
    }
}

static cudaStream_t s1, s2;
static cudaEvent_t e0, e1, e2, fork_ev;

/* ms of: what = 1 gemms, 2 collectives, 3 both; median of TRIALS */
static float timed(const setup *u, int kind, int what)
{
    float t[TRIALS];
    for (int k = 0; k < TRIALS; k++) {
        CK(cudaDeviceSynchronize());
        CK(cudaEventRecord(e0, s1));
        CK(cudaStreamWaitEvent(s2, e0, 0));
        if (what & 1)
            gemms(s1);
        if (what & 2)
            colls(u, kind, s2);
        CK(cudaEventRecord(e2, s2));
        CK(cudaStreamWaitEvent(s1, e2, 0));
        CK(cudaEventRecord(e1, s1));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&t[k], e0, e1));
    }
    for (int i = 1; i < TRIALS; i++) /* insertion sort */
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            float x = t[j]; t[j] = t[j - 1]; t[j - 1] = x;
        }
    return t[TRIALS / 2];
}

int main(int argc, char **argv)
{
    rank = atoi(getenv("RANK") ? getenv("RANK") : "0");
    int world = atoi(getenv("WORLD_SIZE") ? getenv("WORLD_SIZE") : "2");
    long tokens = argc > 1 ? atol(argv[1]) : 16384, hidden = argc > 2 ? atol(argv[2]) : 2048;
    gm = argc > 3 ? atoi(argv[3]) : 16384, gn = argc > 4 ? atoi(argv[4]) : 2816, gk = argc > 5 ? atoi(argv[5]) : 2048;
    CK(cudaSetDevice(rank));
    shard_elems = (size_t)(tokens / world * hidden);
    ncclUniqueId id;
    CK(ncclGetUniqueId(&id));
    ncclComm_t world_comm;
    CK(ncclCommInitRank(&world_comm, world, id, rank));
    CK(cublasCreate(&blas));
    CK(cudaMalloc(&ga, (size_t)gm * gk * 2));
    CK(cudaMalloc(&gb, (size_t)gk * gn * 2));
    CK(cudaMalloc(&gc, (size_t)gm * gn * 2));
    CK(cudaMemset(ga, 0x3c, (size_t)gm * gk * 2)); /* bf16 ~0.0115: nonzero data */
    CK(cudaMemset(gb, 0x3c, (size_t)gk * gn * 2));
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1)); CK(cudaEventCreate(&e2)); CK(cudaEventCreate(&fork_ev));

    size_t full = shard_elems * (size_t)world * 2, bytes = full * 2; /* one full tensor and one shard... x2 room */
    /* the communicator variants: NCCL's CTA count or policy, and whether the buffers are a
     * symmetric window (ncclMemAlloc + ncclCommWindowRegister) */
    struct { const char *name; int ctas, policy, window; } v[] = {
        {"64 CTAs", 64, NCCL_CTA_POLICY_DEFAULT, 0}, {"16 CTAs", 16, NCCL_CTA_POLICY_DEFAULT, 0},
        {"8 CTAs", 8, NCCL_CTA_POLICY_DEFAULT, 0},   {"4 CTAs", 4, NCCL_CTA_POLICY_DEFAULT, 0},
        {"default", 0, NCCL_CTA_POLICY_DEFAULT, 0},  {"efficiency", 0, NCCL_CTA_POLICY_EFFICIENCY, 0},
        {"window", 0, NCCL_CTA_POLICY_DEFAULT, 1},   {"window 8 CTAs", 8, NCCL_CTA_POLICY_DEFAULT, 1},
        {"zero", 0, NCCL_CTA_POLICY_ZERO, 1},
    };
    enum { NV = sizeof v / sizeof v[0] };
    setup u[NV];
    for (int p = 0; p < NV; p++) {
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        cfg.CTAPolicy = v[p].policy;
        if (v[p].ctas)
            cfg.minCTAs = cfg.maxCTAs = v[p].ctas;
        u[p].name = v[p].name;
        CK(ncclCommSplit(world_comm, 0, rank, &u[p].comm, &cfg));
        char *base;
        if (v[p].window) {
            CK(ncclMemAlloc((void **)&base, bytes));
            ncclWindow_t win;
            CK(ncclCommWindowRegister(u[p].comm, base, bytes, &win, NCCL_WIN_COLL_SYMMETRIC));
        } else {
            CK(cudaMalloc((void **)&base, bytes));
        }
        CK(cudaMemset(base, 0x3c, bytes));
        u[p].send = base;
        u[p].recv = base + full;
    }
    CK(cudaDeviceSynchronize());
    /* warm-up: every path once (NCCL connects lazily; cuBLAS picks its kernel) */
    for (int p = 0; p < NV; p++)
        for (int g = 0; g < NKINDS; g++)
            timed(&u[p], g, 3);
    double gflop = 2.0 * gm * gn * gk * REPS / 1e9;
    float tg = timed(&u[0], 1, 1);
    if (rank == 0)
        printf("GEMM %dx%dx%d bf16, %d of them: %.3f ms (%.0f TFLOP/s); collectives of %zu MiB per rank, %d of them\n",
               gm, gn, gk, REPS, tg, gflop / tg, shard_elems * 2 >> 20, REPS);
    for (int g = ALL_GATHER; g < NKINDS + ALL_GATHER; g++) /* all_gather, all_to_all, reduce_scatter */
        for (int p = 0; p < NV; p++) {
            float tc = timed(&u[p], g % NKINDS, 2), tb = timed(&u[p], g % NKINDS, 3), tg2 = timed(&u[p], g % NKINDS, 1);
            double gb_s = (double)shard_elems * 2 * (world - 1) * REPS / (tc / 1e3) / 1e9;
            if (rank == 0)
                printf("%-14s %-14s alone %7.3f ms (%5.0f GB/s)  gemms alone %7.3f  both %7.3f  hidden %5.2f\n",
                       kind_names[g % NKINDS], u[p].name, tc, gb_s, tg2, tb, (tg2 + tc - tb) / tc);
        }
    for (int p = 0; p < NV; p++)
        ncclCommDestroy(u[p].comm);
    ncclCommDestroy(world_comm);
    return 0;
}
