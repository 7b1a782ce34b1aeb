/* comm_nccl_test.c — the NCCL backend on 2 GPUs, started by train_rank's own launcher
 * (rt_launch_local): every collective on the world and on a split group, f32 and bf16, exact;
 * point to point with every send before any recv (f32, bf16, i32); and the watchdog: a rank that
 * skips a collective, or a send, ends the job with an error naming it.
 * usage: comm_nccl_test collectives | timeout | p2p | p2p-timeout   (starts 2 ranks; needs 2 GPUs)
 *        mpirun -np 4 comm_nccl_test staged   (the host-staged backend: ranks sharing one GPU) */
#include "comm_check.h"
#include "runtime/launch.h"

#include <cuda_runtime.h>
#include <unistd.h>

static void *dev_alloc(size_t n)
{
    void *p = NULL;
    CHECK(cudaMalloc(&p, n) == cudaSuccess, "cudaMalloc(%zu)", n);
    return p;
}
static void dev_free(void *p) { cudaFree(p); }
static void dev_upload(void *dst, const void *src, size_t n) { cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice); }
static void dev_download(void *dst, const void *src, size_t n) { cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost); }
static void dev_sync(void *stream) { CHECK(cudaStreamSynchronize((cudaStream_t)stream) == cudaSuccess, "stream sync"); }

static rt_comm *nccl_world(rt_rank_env *e)
{
    char err[512];
    rt_comm *world = rt_rank_env_detect(e, err, sizeof err) ? rt_comm_world_nccl(e, e->local_rank, NULL, err, sizeof err)
                                                            : NULL;
    if (!world) {
        fprintf(stderr, "FAIL: %s\n", err);
        exit(1);
    }
    return world;
}

/* Every collective on `world` and on a split group reversing its order (and, at 4 ranks, on
 * halves of it, as a 2x2 mesh's groups), f32 and bf16, exact; the variable all-to-all. The
 * caller frees `world`. */
static int check_collectives(rt_comm *world, const char *what)
{
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s) == cudaSuccess, "cudaStreamCreate");
    comm_check_mem mem = {dev_alloc, dev_free, dev_upload, dev_download, dev_sync, s};
    int n = rt_comm_size(world), r = rt_comm_rank(world), all[8], rev_members[8], half[8];
    for (int k = 0; k < n; k++)
        all[k] = k, rev_members[k] = n - 1 - k;
    rt_comm *rev = rt_comm_split(world, 0, n - 1 - r, "reversed"); /* key reverses the order */
    rt_comm *pair = n == 4 ? rt_comm_split(world, r / 2, r % 2, "pair") : NULL;
    for (int k = 0; k < 2; k++)
        half[k] = r / 2 * 2 + k;
    for (ir_dtype dt = IR_F32; dt <= IR_BF16; dt++)
        for (size_t count = 7; count <= 7000000; count *= 1000) { /* 7M: NCCL's large-message path */
            check_group(&mem, world, all, n, dt, count);
            check_group(&mem, rev, rev_members, n, dt, count);
            if (pair)
                check_group(&mem, pair, half, 2, dt, count);
        }
    for (int kase = 0; kase < 3; kase++) /* the variable all-to-all: counts over the device, then rows */
        for (int splits = 1; splits <= 3; splits += 2) {
            check_all_to_all_v(&mem, world, IR_F32, splits, 5, kase);
            check_all_to_all_v(&mem, rev, IR_BF16, splits, 3, kase);
        }
    if (pair)
        rt_comm_free(pair);
    rt_comm_free(rev);
    printf("rank %d: %s collectives %s\n", r, what, failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}

static int rank_collectives(void)
{
    rt_rank_env e;
    rt_comm *world = nccl_world(&e);
    int rc = check_collectives(world, "NCCL");
    rt_comm_free(world);
    return rc;
}

#ifdef MCC_HAVE_MPI
/* The host-staged backend (comm_staged.c: ranks sharing a GPU), under mpirun: collectives and
 * point to point on device buffers through page-locked host memory and MPI. */
static rt_comm *staged_world(rt_rank_env *e)
{
    char err[512];
    rt_comm *host = rt_rank_env_detect(e, err, sizeof err) ? rt_comm_world_mpi(e, err, sizeof err) : NULL;
    if (!host) {
        fprintf(stderr, "FAIL: %s\n", err);
        exit(1);
    }
    return rt_comm_world_staged(host);
}

static int rank_staged(void)
{
    rt_rank_env e;
    rt_comm *world = staged_world(&e); /* one world: freeing it finalizes MPI */
    int rc = check_collectives(world, "staged");
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s) == cudaSuccess, "cudaStreamCreate");
    comm_check_mem mem = {dev_alloc, dev_free, dev_upload, dev_download, dev_sync, s};
    rt_comm_add_p2p(world);
    for (size_t count = 7; count <= 7000000; count *= 1000)
        check_p2p(&mem, world, true, IR_BF16, count, 6);
    printf("rank %d: staged point to point %s\n", e.rank, failures ? "FAILED" : "ok");
    rt_comm_free(world);
    return rc || failures ? 1 : 0;
}
#endif

/* Sends and receives between the two ranks, each sending all before it receives any: with a
 * send that waited for its receiver (an ncclSend on the caller's stream, or on one communicator
 * with the recvs) both would wait forever. 7M bf16 elements: NCCL's large-message path. */
static int rank_p2p(void)
{
    rt_rank_env e;
    rt_comm *world = nccl_world(&e);
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s) == cudaSuccess, "cudaStreamCreate");
    comm_check_mem mem = {dev_alloc, dev_free, dev_upload, dev_download, dev_sync, s};
    rt_comm_add_p2p(world);
    const ir_dtype dts[] = {IR_F32, IR_BF16, IR_I32};
    for (size_t t = 0; t < sizeof dts / sizeof dts[0]; t++)
        for (size_t count = 7; count <= 7000000; count *= 1000) {
            check_p2p(&mem, world, true, dts[t], count, 6);
            check_p2p(&mem, world, false, dts[t], count, 6);
        }
    rt_comm_free(world);
    printf("rank %d: NCCL point to point %s\n", e.rank, failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}

/* Rank 1 never sends what rank 0 receives: rank 0's watchdog must end it, naming the recv. */
static int rank_p2p_timeout(void)
{
    rt_rank_env e;
    rt_comm *world = nccl_world(&e);
    rt_comm_add_p2p(world);
    float *x = dev_alloc(sizeof *x);
    if (rt_comm_rank(world) == 1)
        sleep(60);
    else
        rt_recv(world, x, 1, IR_F32, 1, NULL);
    cudaDeviceSynchronize();
    sleep(5);
    fprintf(stderr, "FAIL: rank %d got past a recv that rank 1 never sent\n", rt_comm_rank(world));
    return 0;
}

/* Rank 1 never reaches the second all-reduce: rank 0's watchdog must end it, naming the
 * collective; the launcher then stops rank 1. */
static int rank_timeout(void)
{
    rt_rank_env e;
    rt_comm *world = nccl_world(&e);
    float *x = dev_alloc(sizeof *x);
    rt_all_reduce(world, x, 1, IR_F32, RT_SUM, NULL);
    if (rt_comm_rank(world) == 1)
        sleep(60);
    else
        rt_all_reduce(world, x, 1, IR_F32, RT_SUM, NULL);
    cudaDeviceSynchronize(); /* the watchdog's ncclCommAbort releases this, then ends the process */
    sleep(5);
    fprintf(stderr, "FAIL: rank %d got past a collective that rank 1 skipped\n", rt_comm_rank(world));
    return 0; /* exit 0: the test script sees no timeout error */
}

int main(int argc, char **argv)
{
    const char *cmd = argc > 1 ? argv[1] : "";
    static const struct { const char *name; int (*run)(void); } cmds[] = {
        {"collectives", rank_collectives}, {"timeout", rank_timeout}, {"p2p", rank_p2p}, {"p2p-timeout", rank_p2p_timeout}};
#ifdef MCC_HAVE_MPI
    if (!strcmp(cmd, "staged")) /* under mpirun -np 2 or 4, on one GPU */
        return rank_staged();
#endif
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(cmd, cmds[i].name))
            return getenv("RANK") ? cmds[i].run() : rt_launch_local(2, argc, argv); /* the launcher: two ranks */
    fprintf(stderr, "usage: comm_nccl_test collectives | timeout | p2p | p2p-timeout | staged (under mpirun)\n");
    return 2;
}
