/* launch.h — train_rank --nproc-per-node N: start N local ranks of this executable, torchrun-style. */
#ifndef MCC_RT_LAUNCH_H
#define MCC_RT_LAUNCH_H

/* Runs N copies of /proc/self/exe with argv minus "--nproc-per-node N" (or "=N"), each with
 * RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE = N, MASTER_ADDR = 127.0.0.1 and MASTER_PORT =
 * a free port. Forwards SIGINT/SIGTERM/SIGHUP to them. Returns 0 when all exit 0; when one
 * fails, stops the others (SIGTERM, then SIGKILL after 5 s) and returns its exit status
 * (128 + signal when killed by one). */
int rt_launch_local(int nproc, int argc, char **argv);

#endif
