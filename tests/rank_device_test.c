/* rank_device_test.c — the GPU a rank takes (rt_rank_device) under each launcher's variables:
 * ctest runs it under `env -i` with one launcher's environment.
 * usage: rank_device_test NDEV WANT — exits 0 when this environment's rank takes GPU WANT of NDEV. */
#include "runtime/comm.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    if (argc != 3)
        return fprintf(stderr, "usage: rank_device_test NDEV WANT\n"), 2;
    int ndev = atoi(argv[1]), want = atoi(argv[2]);
    char err[1024];
    rt_rank_env e;
    if (!rt_rank_env_detect(&e, err, sizeof err))
        return fprintf(stderr, "FAIL: %s\n", err), 1;
    int got = rt_rank_device(&e, ndev);
    printf("%s: rank %d/%d, local %d/%d -> GPU %d of %d\n", e.launcher, e.rank, e.world_size, e.local_rank,
           e.local_world, got, ndev);
    if (got != want)
        return fprintf(stderr, "FAIL: wanted GPU %d\n", want), 1;
    return 0;
}
