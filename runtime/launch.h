/* launch.h — train_rank --nproc-per-node N: start N local ranks of this executable, torchrun-style. */
#ifndef MCC_RT_LAUNCH_H
#define MCC_RT_LAUNCH_H

/* N of the first "--nproc-per-node N" in argv (also spelt "--nproc-per-node=N" and, as torchrun
 * does, "--nproc_per_node N" / "--nproc_per_node=N"), or 0 when absent. Exits naming the flag when
 * N is not an integer in 1..1024. */
int rt_launch_nproc(int argc, char **argv);

/* Runs N copies of /proc/self/exe with argv minus that flag and its value, each with
 * RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE = N, MASTER_ADDR = 127.0.0.1 and MASTER_PORT =
 * a free port. Forwards SIGINT/SIGTERM/SIGHUP to them. Returns 0 when all exit 0; when one
 * fails, stops the others (SIGTERM, then SIGKILL after 5 s) and returns its exit status
 * (128 + signal when killed by one, or when it stopped for a forwarded signal: then the others are
 * stopped the same way, without a failure message). */
int rt_launch_local(int nproc, int argc, char **argv);

#endif
