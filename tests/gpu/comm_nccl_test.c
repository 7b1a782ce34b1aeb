/* comm_nccl_test.c — the NCCL backend on 2 GPUs, started by train_rank's own launcher
 * (rt_launch_local): every collective on the world and on a split group, f32 and bf16, exact;
 * and the watchdog: a rank that skips a collective ends the job with an error naming it.
 * usage: comm_nccl_test collectives | timeout   (starts 2 ranks; needs 2 GPUs) */
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

static int rank_collectives(void)
{
    rt_rank_env e;
    rt_comm *world = nccl_world(&e);
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s) == cudaSuccess, "cudaStreamCreate");
    comm_check_mem mem = {dev_alloc, dev_free, dev_upload, dev_download, dev_sync, s};
    int n = rt_comm_size(world), r = rt_comm_rank(world), all[8], rev_members[8];
    for (int k = 0; k < n; k++)
        all[k] = k, rev_members[k] = n - 1 - k;
    rt_comm *rev = rt_comm_split(world, 0, n - 1 - r, "reversed"); /* ncclCommSplit; key reverses the order */
    for (ir_dtype dt = IR_F32; dt <= IR_BF16; dt++)
        for (size_t count = 7; count <= 7000000; count *= 1000) { /* 7M: NCCL's large-message path */
            check_group(&mem, world, all, n, dt, count);
            check_group(&mem, rev, rev_members, n, dt, count);
        }
    rt_comm_free(rev);
    rt_comm_free(world);
    printf("rank %d: NCCL collectives %s\n", r, failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
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
    if (strcmp(cmd, "collectives") && strcmp(cmd, "timeout")) {
        fprintf(stderr, "usage: comm_nccl_test collectives | timeout\n");
        return 2;
    }
    if (!getenv("RANK")) /* the launcher: two ranks of this program */
        return rt_launch_local(2, argc, argv);
    return !strcmp(cmd, "collectives") ? rank_collectives() : rank_timeout();
}
