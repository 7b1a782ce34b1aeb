/* comm_test.c — comm.h and launch.h on CPU: launcher env detection, Megatron rank layout,
 * rt_launch_local, and (under mpirun -np 4) MPI collectives on the world and 2x2 tp/dp groups
 * with exact expected values, the variable all-to-all over ep groups (uneven and zero counts) and
 * its full receive buffer, and the collective timeout; point to point (under mpirun -np 2 or
 * 4) around rings and along chains, a peer that is no neighbour, and a recv that never completes.
 * usage: comm_test env | mesh | launch DIR | launch-fail | launch-signal | collectives | all-to-all-v |
 *        all-to-all-v-room | timeout | p2p | p2p-bad-peer | p2p-timeout */
#include "runtime/comm.h"
#include "runtime/launch.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm_check.h"

/* ---- env: each case sets variables ("A=1 B=2") and expects a summary or "error:<substring>" -- */

static const char *env_vars[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                                 "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                                 "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
                                 "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"};

static void env_set(const char *assignments)
{
    for (size_t i = 0; i < sizeof env_vars / sizeof env_vars[0]; i++)
        unsetenv(env_vars[i]);
    char buf[512];
    snprintf(buf, sizeof buf, "%s", assignments);
    for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
        char *eq = strchr(tok, '=');
        *eq = 0;
        setenv(tok, eq + 1, 1);
    }
}

static void test_env(void)
{
    static const struct { const char *env, *want; } cases[] = {
        {"", "single 0/1 local 0/1 master -:0"},
        {"RANK=3 WORLD_SIZE=8 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 MASTER_ADDR=node0 MASTER_PORT=29500",
         "torchrun 3/8 local 1/2 master node0:29500"},
        {"OMPI_COMM_WORLD_RANK=5 OMPI_COMM_WORLD_SIZE=6 OMPI_COMM_WORLD_LOCAL_RANK=1 OMPI_COMM_WORLD_LOCAL_SIZE=2",
         "openmpi 5/6 local 1/2 master -:0"},
        {"SLURM_PROCID=2 SLURM_NTASKS=4 SLURM_LOCALID=0 SLURM_STEP_TASKS_PER_NODE=2(x2)", "slurm 2/4 local 0/2 master -:0"},
        {"SLURM_PROCID=3 SLURM_NTASKS=5 SLURM_LOCALID=0 SLURM_TASKS_PER_NODE=4,1", "slurm 3/5 local 0/4 master -:0"},
        /* mpirun under sbatch: the job step's SLURM values are not the ranks' */
        {"OMPI_COMM_WORLD_RANK=3 OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_LOCAL_RANK=3 OMPI_COMM_WORLD_LOCAL_SIZE=4 "
         "SLURM_PROCID=0 SLURM_NTASKS=1 SLURM_LOCALID=0", "openmpi 3/4 local 3/4 master -:0"},
        {"RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 "
         "OMPI_COMM_WORLD_LOCAL_RANK=1 OMPI_COMM_WORLD_LOCAL_SIZE=2", "torchrun 1/2 local 1/2 master -:0"},
        {"RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 "
         "OMPI_COMM_WORLD_LOCAL_RANK=0 OMPI_COMM_WORLD_LOCAL_SIZE=2", "error:but OMPI_COMM_WORLD_RANK=0"},
        {"RANK=4 WORLD_SIZE=4 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1", "error:RANK=4 is out of range: it must be below WORLD_SIZE=4"},
        {"RANK=x WORLD_SIZE=4 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1", "error:RANK='x' is not an integer"},
        {"RANK=0 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1", "error:WORLD_SIZE is not set"},
        {"RANK=0 WORLD_SIZE=4 LOCAL_RANK=2 LOCAL_WORLD_SIZE=2", "error:LOCAL_RANK=2 is out of range"},
        {"RANK=0 WORLD_SIZE=0 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1", "error:WORLD_SIZE='0' is not an integer >= 1"},
        {"RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=4", "error:LOCAL_WORLD_SIZE=4 exceeds WORLD_SIZE=2"},
        {"MASTER_PORT=70000", "error:MASTER_PORT='70000' is not a port number"},
        {"SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_LOCALID=0", "error:SLURM_TASKS_PER_NODE='(unset)'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        env_set(cases[i].env);
        rt_rank_env e;
        char err[512] = "", got[600];
        if (rt_rank_env_detect(&e, err, sizeof err))
            snprintf(got, sizeof got, "%s %d/%d local %d/%d master %s:%d", e.launcher, e.rank, e.world_size,
                     e.local_rank, e.local_world, e.master_addr ? e.master_addr : "-", e.master_port);
        else
            snprintf(got, sizeof got, "error:%s", err);
        bool ok = !strncmp(cases[i].want, "error:", 6) ? !strncmp(got, "error:", 6) && strstr(got, cases[i].want + 6)
                                                      : !strcmp(got, cases[i].want);
        CHECK(ok, "env '%s': got '%s', want '%s'", cases[i].env, got, cases[i].want);
    }
}

/* ---- mesh: groups written out by hand (the first from Megatron's docstring) ------------------- */

static void test_mesh(void)
{
    const unsigned TP = 1u << IR_AXIS_TP, CP = 1u << IR_AXIS_CP, DP = 1u << IR_AXIS_DP, PP = 1u << IR_AXIS_PP,
                   EP = 1u << IR_AXIS_EP, EDP = 1u << IR_AXIS_EDP, DP_CP = 1u << IR_AXIS_DP_CP;
    const struct {
        int tp, cp, dp, pp, ep;
        int rank;
        unsigned axes;
        const char *want;
    } cases[] = {
        /* 16 ranks, tp 2, pp 4, dp 2 (Megatron's initialize_model_parallel example) */
        {2, 1, 2, 4, 1, 5, TP, "4,5"},
        {2, 1, 2, 4, 1, 5, DP, "5,7"},
        {2, 1, 2, 4, 1, 5, PP, "1,5,9,13"},
        {2, 1, 2, 4, 1, 10, DP, "8,10"},
        {2, 1, 2, 4, 1, 10, PP, "2,6,10,14"},
        /* 8 ranks, tp 2, cp 2, dp 2: cp between tp and dp */
        {2, 2, 2, 1, 1, 3, TP, "2,3"},
        {2, 2, 2, 1, 1, 3, CP, "1,3"},
        {2, 2, 2, 1, 1, 3, DP, "3,7"},
        {2, 2, 2, 1, 1, 3, DP | CP, "1,3,5,7"},
        /* the derived axis dp_cp is that group: the ranks with rank 3's tp and pp coordinates */
        {2, 2, 2, 1, 1, 3, DP_CP, "1,3,5,7"},
        {2, 2, 2, 2, 1, 12, DP_CP, "8,10,12,14"},
        {2, 2, 2, 1, 1, 3, TP | DP, "2,3,6,7"},
        /* experts: 4 ranks, dp 4, ep 2 -> ep {0,1} {2,3}, expert-dp {0,2} {1,3} */
        {1, 1, 4, 1, 2, 2, EP, "2,3"},
        {1, 1, 4, 1, 2, 2, EDP, "0,2"},
        /* 8 ranks, tp 2, dp 4, ep 2: expert groups keep tp adjacent */
        {2, 1, 4, 1, 2, 5, EP, "5,7"},
        {2, 1, 4, 1, 2, 5, EDP, "1,5"},
        /* the dense view's cp and the expert view's ep make no group */
        {2, 2, 2, 1, 2, 3, CP | EP, ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ir_mesh m = ir_mesh_of(cases[i].tp, cases[i].cp, cases[i].dp, cases[i].pp, cases[i].ep);
        int ranks[64], n = ir_mesh_group(&m, cases[i].axes, cases[i].rank, ranks, 64);
        char got[256] = "", name[32];
        for (int k = 0, len = 0; k < n; k++)
            len += snprintf(got + len, sizeof got - (size_t)len, "%s%d", k ? "," : "", ranks[k]);
        ir_mesh_group_name(cases[i].axes, name, sizeof name);
        CHECK(!strcmp(got, cases[i].want), "mesh case %zu: %s group of rank %d is {%s}, want {%s}", i, name,
              cases[i].rank, got, cases[i].want);
    }
    char name[32];
    ir_mesh_group_name(DP | CP, name, sizeof name);
    CHECK(!strcmp(name, "dp_cp"), "the dp x cp group is named '%s'", name);
    ir_mesh m = ir_mesh_of(2, 2, 2, 2, 2);
    int c[IR_NUM_AXES];
    ir_mesh_coords(&m, 13, c); /* 13 = 1 + 2*(0 + 2*(1 + 2*1)) */
    CHECK(c[IR_AXIS_TP] == 1 && c[IR_AXIS_CP] == 0 && c[IR_AXIS_DP] == 1 && c[IR_AXIS_PP] == 1 && c[IR_AXIS_EP] == 0 &&
              c[IR_AXIS_EDP] == 1,
          "coords of 13 in tp2 cp2 dp2 pp2 ep2: tp %d cp %d dp %d pp %d ep %d edp %d", c[IR_AXIS_TP], c[IR_AXIS_CP],
          c[IR_AXIS_DP], c[IR_AXIS_PP], c[IR_AXIS_EP], c[IR_AXIS_EDP]);
    /* dp_cp's coordinate is the member's place in its group: cp fastest, then dp */
    CHECK(c[IR_AXIS_DP_CP] == 2 && m.degree[IR_AXIS_DP_CP] == 4, "dp_cp of 13 in tp2 cp2 dp2 pp2: %d of %d (want 2 of 4)",
          c[IR_AXIS_DP_CP], m.degree[IR_AXIS_DP_CP]);

    char err[512] = "";
    ir_mesh bad = ir_mesh_of(2, 1, 2, 1, 1);
    CHECK(!ir_mesh_check(&bad, 6, err, sizeof err) && strstr(err, "6 ranks") && strstr(err, "= 4"), "world 6 vs 4: '%s'", err);
    bad = ir_mesh_of(1, 1, 4, 1, 3);
    CHECK(!ir_mesh_check(&bad, 4, err, sizeof err) && strstr(err, "--expert-model-parallel-size 3"), "ep 3: '%s'", err);
    bad = ir_mesh_of(0, 1, 4, 1, 1);
    CHECK(!ir_mesh_check(&bad, 4, err, sizeof err) && strstr(err, "--tensor-model-parallel-size is 0"), "tp 0: '%s'", err);
}

/* ---- launch --------------------------------------------------------------------------------- */

/* A child of `launch`: its env must be torchrun's for 3 local ranks, and the flag gone. */
static int launch_child(int argc, char **argv)
{
    rt_rank_env e;
    char err[512], path[1024];
    if (!rt_rank_env_detect(&e, err, sizeof err)) {
        fprintf(stderr, "child: %s\n", err);
        return 1;
    }
    CHECK(argc == 3, "child got %d arguments, want 3 (the --nproc-per-node flag removed)", argc);
    CHECK(!strcmp(e.launcher, "torchrun") && e.world_size == 3 && e.local_world == 3 && e.local_rank == e.rank,
          "child env: %s rank %d/%d local %d/%d", e.launcher, e.rank, e.world_size, e.local_rank, e.local_world);
    CHECK(e.master_addr && !strcmp(e.master_addr, "127.0.0.1") && e.master_port > 0, "child master %s:%d",
          e.master_addr ? e.master_addr : "-", e.master_port);
    snprintf(path, sizeof path, "%s/rank%d", argv[2], e.rank);
    FILE *f = fopen(path, "w");
    CHECK(f, "child cannot write %s", path);
    if (f)
        fprintf(f, "%d\n", e.master_port), fclose(f);
    return failures ? 1 : 0;
}

static void test_launch(const char *self, const char *dir)
{
    char path[1024];
    int ports[3] = {0};
    for (int r = 0; r < 3; r++)
        snprintf(path, sizeof path, "%s/rank%d", dir, r), unlink(path);
    char *argv[] = {(char *)self, "launch-child", (char *)dir, "--nproc-per-node", "3", NULL};
    int code = rt_launch_local(3, 5, argv);
    CHECK(code == 0, "rt_launch_local(3) returned %d", code);
    for (int r = 0; r < 3; r++) {
        snprintf(path, sizeof path, "%s/rank%d", dir, r);
        FILE *f = fopen(path, "r");
        CHECK(f && fscanf(f, "%d", &ports[r]) == 1, "rank %d did not run (no %s)", r, path);
        if (f)
            fclose(f);
    }
    CHECK(ports[0] > 0 && ports[0] == ports[1] && ports[1] == ports[2], "ranks saw MASTER_PORT %d %d %d", ports[0],
          ports[1], ports[2]);
}

/* A child that sleeps 30 s, except rank `fail_rank`, which exits 3 at once. */
static int launch_child_sleep(int fail_rank)
{
    if (atoi(getenv("RANK")) == fail_rank)
        return 3;
    sleep(30);
    return 0;
}

/* Rank 1 fails: the launcher must stop the sleeping ranks and return 3. */
static void test_launch_fail(const char *self)
{
    char *argv[] = {(char *)self, "launch-child-sleep", "1", "--nproc-per-node=3", NULL};
    time_t t0 = time(NULL);
    int code = rt_launch_local(3, 4, argv);
    CHECK(code == 3, "a failing rank's status 3 should be returned, got %d", code);
    CHECK(time(NULL) - t0 < 4, "the other ranks were not stopped by SIGTERM: took %lds", (long)(time(NULL) - t0));
}

/* SIGTERM to the launcher reaches both sleeping ranks: it returns 128 + SIGTERM at once. */
static void test_launch_signal(const char *self)
{
    char *argv[] = {(char *)self, "launch-child-sleep", "-1", "--nproc-per-node", "2", NULL};
    time_t t0 = time(NULL);
    pid_t launcher = fork();
    if (launcher == 0)
        _exit(rt_launch_local(2, 5, argv));
    struct timespec settle = {0, 300 * 1000 * 1000};
    nanosleep(&settle, NULL);
    kill(launcher, SIGTERM);
    int st = 0;
    waitpid(launcher, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 128 + SIGTERM, "launcher after SIGTERM: status %d, want exit %d", st,
          128 + SIGTERM);
    CHECK(time(NULL) - t0 < 4, "SIGTERM was not forwarded to every rank: took %lds", (long)(time(NULL) - t0));
}

/* ---- MPI collectives on 4 ranks: world, and the tp/dp groups of tp 2 x dp 2 ------------------- */

/* Host buffers: MPI reduces host memory. */
static void *host_alloc(size_t n) { return malloc(n); }
static void host_copy(void *dst, const void *src, size_t n) { memcpy(dst, src, n); }
static void host_sync(void *stream) {}
static const comm_check_mem host_mem = {host_alloc, free, host_copy, host_copy, host_sync, NULL};

static rt_comm *mpi_world(void)
{
    rt_rank_env e;
    char err[512];
    rt_comm *world = rt_rank_env_detect(&e, err, sizeof err) ? rt_comm_world_mpi(&e, err, sizeof err) : NULL;
    if (!world) {
        fprintf(stderr, "FAIL: %s\n", err);
        exit(1);
    }
    return world;
}

static void test_collectives(void)
{
    rt_comm *world = mpi_world();
    CHECK(rt_comm_size(world) == 4, "run under mpirun -np 4 (world size %d)", rt_comm_size(world));
    int r = rt_comm_rank(world);
    ir_mesh m = ir_mesh_of(2, 1, 2, 1, 1);
    rt_comm *tp = rt_comm_mesh_group(world, &m, 1u << IR_AXIS_TP), *dp = rt_comm_mesh_group(world, &m, 1u << IR_AXIS_DP);
    const int all[] = {0, 1, 2, 3}, tp_members[] = {r & ~1, r | 1}, dp_members[] = {r % 2, r % 2 + 2};
    rt_comm *rev = rt_comm_split(world, 0, 3 - r, "reversed"); /* key orders members: world 3,2,1,0 */
    const int rev_members[] = {3, 2, 1, 0};
    for (ir_dtype dt = IR_F32; dt <= IR_BF16; dt++)
        for (size_t count = 7; count <= 70000; count *= 100) { /* 70000: MPI's large-message algorithms */
            check_group(&host_mem, world, all, 4, dt, count);
            check_group(&host_mem, tp, tp_members, 2, dt, count);
            check_group(&host_mem, dp, dp_members, 2, dt, count);
            check_group(&host_mem, rev, rev_members, 4, dt, count);
        }
    rt_comm_free(rev);
    rt_comm_free(dp);
    rt_comm_free(tp);
    if (failures)
        exit(1); /* before MPI_Finalize: mpirun then reports this rank's failure */
    rt_comm_free(world);
}

/* Variable all-to-all over the ep groups of three 4-rank meshes: tp 2 x dp 2 with ep 2 (groups
 * {0,2} {1,3}: tp between the members), dp 4 with ep 2 ({0,1} {2,3}) and with ep 4 (the world). */
static void test_all_to_all_v(void)
{
    rt_comm *world = mpi_world();
    CHECK(rt_comm_size(world) == 4, "run under mpirun -np 4 (world size %d)", rt_comm_size(world));
    const int meshes[][3] = {{2, 2, 2}, {1, 4, 2}, {1, 4, 4}}; /* tp, dp, ep */
    for (size_t i = 0; i < sizeof meshes / sizeof meshes[0]; i++) {
        ir_mesh m = ir_mesh_of(meshes[i][0], 1, meshes[i][1], 1, meshes[i][2]);
        rt_comm *ep = rt_comm_mesh_group(world, &m, 1u << IR_AXIS_EP);
        int members[4], n = ir_mesh_group(&m, 1u << IR_AXIS_EP, rt_comm_rank(world), members, 4);
        CHECK(rt_comm_size(ep) == n && n == meshes[i][2], "mesh %zu: ep group of %d, want %d", i, rt_comm_size(ep), n);
        for (int k = 0; k < n; k++)
            CHECK(rt_comm_world_rank(ep, k) == members[k], "mesh %zu: ep member %d is world rank %d, want %d", i, k,
                  rt_comm_world_rank(ep, k), members[k]);
        for (int kase = 0; kase < 3; kase++)
            for (int splits = 1; splits <= 3; splits += 2) {
                check_all_to_all_v(&host_mem, ep, IR_F32, splits, 5, kase);
                check_all_to_all_v(&host_mem, ep, IR_BF16, splits, 3, kase);
            }
        check_all_to_all_v(&host_mem, ep, IR_F32, 2, 7000, 0); /* rows past MPI's eager limit */
        rt_comm_free(ep);
    }
    if (failures)
        exit(1);
    rt_comm_free(world);
}

/* Rank 1 of the ep group {0,1} gets more rows than its buffer holds: the job ends, naming it. */
static void test_all_to_all_v_room(void)
{
    rt_comm *world = mpi_world();
    ir_mesh m = ir_mesh_of(1, 1, 4, 1, 2);
    rt_comm *ep = rt_comm_mesh_group(world, &m, 1u << IR_AXIS_EP);
    float send[6] = {0}, recv[4];
    int64_t splits[2] = {1, 2}, came[2]; /* 1 row to member 0, 2 to member 1: member 1 gets 4 */
    rt_all_to_all_v(ep, send, splits, recv, came, 1, rt_comm_rank(ep) == 1 ? 3 : 4, 1, IR_F32, NULL);
    if (rt_comm_rank(ep) == 1)
        fprintf(stderr, "FAIL: rank %d received more rows than its buffer holds\n", rt_comm_rank(world));
    exit(0);
}

/* Rank 3 never reaches the second all-reduce: every rank must end, naming it and the collective. */
static void test_timeout(void)
{
    rt_comm *world = mpi_world();
    float x = 1;
    rt_all_reduce(world, &x, 1, IR_F32, RT_SUM, NULL);
    if (rt_comm_rank(world) == 3)
        sleep(60);
    else
        rt_all_reduce(world, &x, 1, IR_F32, RT_SUM, NULL);
    fprintf(stderr, "FAIL: rank %d got past a collective that rank 3 skipped\n", rt_comm_rank(world));
    exit(0); /* the test script then sees no timeout message */
}

/* Point to point on the world (a ring of 2 or 4) and, on 4 ranks, the pp groups of tp 2 x pp 2
 * ({0,2} and {1,3}); 70000 f32 elements are past Open MPI's eager limit, where a blocking send
 * waits for its receiver. */
static void test_p2p(void)
{
    rt_comm *world = mpi_world();
    int n = rt_comm_size(world);
    CHECK(n == 2 || n == 4, "run under mpirun -np 2 or 4 (world size %d)", n);
    ir_mesh m = ir_mesh_of(2, 1, 1, 2, 1);
    rt_comm *pp = n == 4 ? rt_comm_mesh_group(world, &m, 1u << IR_AXIS_PP) : NULL;
    rt_comm_add_p2p(world);
    if (pp)
        rt_comm_add_p2p(pp);
    const ir_dtype dts[] = {IR_F32, IR_BF16, IR_I32};
    for (size_t t = 0; t < sizeof dts / sizeof dts[0]; t++)
        for (size_t count = 7; count <= 70000; count *= 10000) {
            check_p2p(&host_mem, world, true, dts[t], count, 6);
            check_p2p(&host_mem, world, false, dts[t], count, 6);
            if (pp)
                check_p2p(&host_mem, pp, true, dts[t], count, 6);
        }
    rt_comm_free(pp);
    if (failures)
        exit(1);
    rt_comm_free(world);
}

/* Member 0 sends to member 2 of 4, which is not its neighbour: refused, naming both. */
static void test_p2p_bad_peer(void)
{
    rt_comm *world = mpi_world();
    rt_comm_add_p2p(world);
    float x = 1;
    if (rt_comm_rank(world) == 0)
        rt_send(world, &x, 1, IR_F32, 2, NULL);
    else
        rt_barrier(world);
    fprintf(stderr, "FAIL: rank %d got past a send to a member that is not its neighbour\n", rt_comm_rank(world));
    exit(0);
}

/* Both members of 2 receive before either sends (a schedule that waits on itself): each recv
 * must end the job, naming the recv, its peer, and that the peer waits in a recv from it. */
static void test_p2p_timeout(void)
{
    rt_comm *world = mpi_world();
    rt_comm_add_p2p(world);
    float x = 1;
    int peer = 1 - rt_comm_rank(world);
    rt_recv(world, &x, 1, IR_F32, peer, NULL);
    rt_send(world, &x, 1, IR_F32, peer, NULL);
    fprintf(stderr, "FAIL: rank %d received a message never sent\n", rt_comm_rank(world));
    exit(0);
}

int main(int argc, char **argv)
{
    const char *cmd = argc > 1 ? argv[1] : "";
    if (!strcmp(cmd, "env"))
        test_env();
    else if (!strcmp(cmd, "mesh"))
        test_mesh();
    else if (!strcmp(cmd, "launch") && argc == 3)
        test_launch(argv[0], argv[2]);
    else if (!strcmp(cmd, "launch-child") && argc >= 3)
        return launch_child(argc, argv);
    else if (!strcmp(cmd, "launch-fail"))
        test_launch_fail(argv[0]);
    else if (!strcmp(cmd, "launch-signal"))
        test_launch_signal(argv[0]);
    else if (!strcmp(cmd, "launch-child-sleep") && argc >= 3)
        return launch_child_sleep(atoi(argv[2]));
    else if (!strcmp(cmd, "collectives"))
        test_collectives();
    else if (!strcmp(cmd, "all-to-all-v"))
        test_all_to_all_v();
    else if (!strcmp(cmd, "all-to-all-v-room"))
        test_all_to_all_v_room();
    else if (!strcmp(cmd, "timeout"))
        test_timeout();
    else if (!strcmp(cmd, "p2p"))
        test_p2p();
    else if (!strcmp(cmd, "p2p-bad-peer"))
        test_p2p_bad_peer();
    else if (!strcmp(cmd, "p2p-timeout"))
        test_p2p_timeout();
    else {
        fprintf(stderr, "usage: comm_test env | mesh | launch DIR | launch-fail | launch-signal | collectives | all-to-all-v "
                        "| all-to-all-v-room | timeout | p2p | p2p-bad-peer | p2p-timeout\n");
        return 2;
    }
    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    return failures ? 1 : 0;
}
