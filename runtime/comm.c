/* comm.c — the backend-independent half of comm.h: launcher environment, mesh groups, argument
 * checks and collective numbering in front of the MPI/NCCL backends. */
#include "comm_backend.h"
#include "common/knobs.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- launcher environment ------------------------------------------------------------------- */

typedef struct {
    const char *name;
    const char *rank, *size, *local_rank, *local_size; /* local_size NULL: SLURM's own rule */
} rt_launcher_vars;

/* ORDER: precedence of rt_rank_env_detect. */
static const rt_launcher_vars rt_launchers[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", NULL},
};

/* Parses the integer at the start of `s` into *out; `whole` demands nothing after it. */
static bool env_parse_int(const char *s, bool whole, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || errno || (whole && *end) || v < lo || v > hi)
        return false;
    *out = (int)v;
    return true;
}

/* Reads integer variable `var` (>= lo) into *out; false with err naming it when unset or bad. */
static bool env_int(const char *var, const char *who, long lo, int *out, char *err, size_t errlen)
{
    const char *s = getenv(var);
    if (!s) {
        snprintf(err, errlen, "%s is not set but the other %s variables are: set it, or unset them all", var, who);
        return false;
    }
    if (!env_parse_int(s, true, lo, 1L << 30, out)) {
        snprintf(err, errlen, "%s='%s' is not an integer >= %ld", var, s, lo);
        return false;
    }
    return true;
}

/* SLURM has no per-task local-size variable: the first count of SLURM_STEP_TASKS_PER_NODE (srun
 * sets it for the step) or SLURM_TASKS_PER_NODE ("4(x2),3" -> 4), this node's when nodes are
 * uniform. */
static bool env_slurm_local_size(int *out, char *err, size_t errlen)
{
    const char *var = getenv("SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_TASKS_PER_NODE";
    const char *s = getenv(var);
    if (s && env_parse_int(s, false, 1, 1L << 30, out))
        return true;
    snprintf(err, errlen, "%s='%s' gives no tasks per node: launch with srun", var, s ? s : "(unset)");
    return false;
}

static bool env_read_launcher(const rt_launcher_vars *l, rt_rank_env *e, char *err, size_t errlen)
{
    e->launcher = l->name;
    if (!env_int(l->rank, l->name, 0, &e->rank, err, errlen) || !env_int(l->size, l->name, 1, &e->world_size, err, errlen) ||
        !env_int(l->local_rank, l->name, 0, &e->local_rank, err, errlen))
        return false;
    if (!(l->local_size ? env_int(l->local_size, l->name, 1, &e->local_world, err, errlen)
                        : env_slurm_local_size(&e->local_world, err, errlen)))
        return false;
    const char *local_size = l->local_size ? l->local_size : "the tasks per node";
    if (e->rank >= e->world_size)
        snprintf(err, errlen, "%s=%d is out of range: it must be below %s=%d", l->rank, e->rank, l->size, e->world_size);
    else if (e->local_rank >= e->local_world)
        snprintf(err, errlen, "%s=%d is out of range: it must be below %s=%d", l->local_rank, e->local_rank, local_size,
                 e->local_world);
    else if (e->local_world > e->world_size)
        snprintf(err, errlen, "%s=%d exceeds %s=%d", local_size, e->local_world, l->size, e->world_size);
    else
        return true;
    return false;
}

/* torchrun-style variables and mpirun's both present must describe the same rank (scripts that
 * export RANK=$OMPI_COMM_WORLD_RANK do); otherwise two launchers were nested by mistake. */
static bool env_check_agree(const rt_rank_env *e, const rt_launcher_vars *other, char *err, size_t errlen)
{
    if (!getenv(other->rank))
        return true;
    rt_rank_env o = {0};
    if (!env_read_launcher(other, &o, err, errlen))
        return false;
    if (o.rank == e->rank && o.world_size == e->world_size)
        return true;
    snprintf(err, errlen, "RANK=%d WORLD_SIZE=%d but %s=%d %s=%d: two launchers (torchrun-style variables and %s) "
             "describe different ranks; launch with one of them, or unset RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE",
             e->rank, e->world_size, other->rank, o.rank, other->size, o.world_size, other->name);
    return false;
}

static bool env_master(rt_rank_env *e, char *err, size_t errlen)
{
    const char *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
    e->master_addr = addr && *addr ? addr : NULL;
    e->master_port = 0;
    if (port && !env_parse_int(port, true, 1, 65535, &e->master_port)) {
        snprintf(err, errlen, "MASTER_PORT='%s' is not a port number (1-65535)", port);
        return false;
    }
    return true;
}

bool rt_rank_env_detect(rt_rank_env *e, char *err, size_t errlen)
{
    *e = (rt_rank_env){.world_size = 1, .local_world = 1, .launcher = "single"};
    if (!env_master(e, err, errlen))
        return false;
    size_t n = sizeof rt_launchers / sizeof rt_launchers[0];
    for (size_t i = 0; i < n; i++) {
        const rt_launcher_vars *l = &rt_launchers[i];
        bool any = getenv(l->rank) || getenv(l->size) || (l->local_size && getenv(l->local_size));
        if (!any)
            continue;
        if (!env_read_launcher(l, e, err, errlen))
            return false;
        return i != 0 || env_check_agree(e, &rt_launchers[1], err, errlen);
    }
    return true;
}

rt_rank_env rt_rank_env_or_exit(void)
{
    char err[1024];
    rt_rank_env env;
    if (!rt_rank_env_detect(&env, err, sizeof err)) {
        fprintf(stderr, "train_rank: error: %s\n", err);
        exit(2);
    }
    return env;
}

int rt_rank_device(const rt_rank_env *e, int ndev) { return e->local_rank % ndev; }

/* ---- communicators -------------------------------------------------------------------------- */

static int rt_comm_self_world_rank = -1; /* for the "rank R" prefix of fatal errors */

_Noreturn void rt_comm_fatal(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "mcc: rank %d: error: ", rt_comm_self_world_rank);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fflush(stderr);
    exit(1);
}

double rt_collective_timeout_s(void) { return knob_num(KNOB_COLLECTIVE_TIMEOUT_S); }

const char *const rt_coll_names[RT_NUM_COLLS] = { /* ORDER RT_COLL */
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "all_to_all_v", "ring_shift", "broadcast",
    "barrier",    "send",       "recv",           "group",      "split",        "p2p setup",  "free",
};

static rt_comm *comm_alloc(const rt_comm_ops *ops, int max_members, const char *name)
{
    rt_comm *c = calloc(1, sizeof *c);
    c->world_ranks = calloc((size_t)max_members, sizeof(int));
    if (!c || !c->world_ranks)
        rt_comm_fatal("out of memory creating communicator '%s'", name);
    c->ops = ops;
    snprintf(c->name, sizeof c->name, "%s", name);
    return c;
}

rt_comm *rt_comm_new_world(const rt_comm_ops *ops, void *impl, int rank, int size)
{
    rt_comm *c = comm_alloc(ops, size, "world");
    c->impl = impl, c->rank = rank, c->size = size, c->is_world = true;
    for (int i = 0; i < size; i++)
        c->world_ranks[i] = i;
    rt_comm_self_world_rank = rank;
    return c;
}

/* rt_comm_split, the group along mesh axes `axes` (0: none), which the backend may tune by them. */
static rt_comm *comm_split(rt_comm *c, int color, int key, const char *name, unsigned axes)
{
    if (color < 0)
        rt_comm_fatal("splitting group '%s' into '%s': color %d must be >= 0", c->name, name, color);
    rt_comm *g = comm_alloc(c->ops, c->size, name);
    g->axes = axes;
    c->ops->split(c, color, key, g);
    return g;
}

rt_comm *rt_comm_split(rt_comm *c, int color, int key, const char *name) { return comm_split(c, color, key, name, 0); }

rt_comm *rt_comm_mesh_group(rt_comm *world, const ir_mesh *m, unsigned axes)
{
    char err[512], name[32];
    if (!world->is_world)
        rt_comm_fatal("rt_comm_mesh_group needs the world communicator, got group '%s'", world->name);
    if (!ir_mesh_check(m, world->size, err, sizeof err))
        rt_comm_fatal("%s", err);
    ir_mesh_group_name(axes, name, sizeof name);
    int *ranks = malloc(sizeof(int) * (size_t)world->size);
    int n = ir_mesh_group(m, axes, world->rank, ranks, world->size), key = 0;
    if (n == 0)
        rt_comm_fatal("no mesh group over %s: it mixes the dense layers' axes with the expert layers'", name);
    while (ranks[key] != world->rank && key < n - 1)
        key++;
    rt_comm *g = comm_split(world, ranks[0], key, name, axes); /* smallest member names the group */
    free(ranks);
    return g;
}

static const char *lane_names[RT_NUM_LANES] = {"main", "side", "copy"};

void rt_comm_add_lane(rt_comm *c, rt_lane lane)
{
    if (lane == RT_LANE_MAIN || lane >= RT_NUM_LANES || c->lanes[lane] || !c->ops->lane)
        return;
    char name[sizeof c->name];
    snprintf(name, sizeof name, "%.30s/%s", c->name, lane_names[lane]);
    rt_comm *l = comm_alloc(c->ops, c->size, name);
    l->rank = c->rank, l->size = c->size;
    memcpy(l->world_ranks, c->world_ranks, sizeof(int) * (size_t)c->size);
    c->ops->lane(c, lane, l);
    c->lanes[lane] = l;
}

rt_comm *rt_comm_lane(rt_comm *c, rt_lane lane)
{
    return lane > RT_LANE_MAIN && lane < RT_NUM_LANES && c->lanes[lane] ? c->lanes[lane] : c;
}

bool rt_comm_window(rt_comm *c, void *base, size_t bytes)
{
    rt_comm *copy = c->lanes[RT_LANE_COPY];
    if (copy && !base) {
        copy->window = NULL;
        return false;
    }
    if (!copy || !c->ops->window || !c->ops->window(copy, base, bytes))
        return false;
    copy->window = base, copy->window_bytes = bytes;
    return true;
}

static bool in_window(const rt_comm *c, const void *p, size_t bytes)
{
    return c->window && (const char *)p >= c->window && (const char *)p + bytes <= c->window + c->window_bytes;
}

rt_comm *rt_comm_copy_lane_for(rt_comm *c, const void *send, size_t send_bytes, const void *recv, size_t recv_bytes)
{
    rt_comm *copy = c->lanes[RT_LANE_COPY];
    return copy && in_window(copy, send, send_bytes) && in_window(copy, recv, recv_bytes) ? copy : c;
}

void rt_comm_free(rt_comm *c)
{
    if (!c)
        return;
    for (int l = 0; l < RT_NUM_LANES; l++)
        rt_comm_free(c->lanes[l]);
    c->ops->free(c);
    free(c->p2p_sent);
    free(c->p2p_recvd);
    free(c->world_ranks);
    free(c);
}

int rt_comm_rank(const rt_comm *c) { return c->rank; }
int rt_comm_size(const rt_comm *c) { return c->size; }
int rt_comm_world_rank(const rt_comm *c, int group_rank) { return c->world_ranks[group_rank]; }
const char *rt_comm_name(const rt_comm *c) { return c->name; }

void rt_comm_format_members(const rt_comm *c, char *out, size_t outlen)
{
    size_t n = (size_t)snprintf(out, outlen, "world rank%s ", c->size > 1 ? "s" : "");
    for (int i = 0; i < c->size && n < outlen; i++)
        n += (size_t)snprintf(out + n, outlen - n, "%s%d", i ? "," : "", c->world_ranks[i]);
}

/* Sums and maxima are defined for the float types every backend reduces, and i32 (MPI's and
 * NCCL's own: an MoE layer's counts per expert, summed over cp). */
static void comm_check_reduce(const rt_comm *c, rt_coll_kind coll, ir_dtype dt, rt_reduce_op op)
{
    if (dt != IR_F32 && dt != IR_BF16 && dt != IR_I32)
        rt_comm_fatal("%s on group '%s': dtype %s cannot be reduced (f32, bf16 and i32 can)", rt_coll_names[coll],
                      c->name, ir_dtype_name(dt));
    if (op != RT_SUM && op != RT_MAX)
        rt_comm_fatal("%s on group '%s': unknown reduce op %d", rt_coll_names[coll], c->name, (int)op);
}

void rt_all_reduce(rt_comm *c, void *buf, size_t count, ir_dtype dt, rt_reduce_op op, void *stream)
{
    comm_check_reduce(c, RT_COLL_ALL_REDUCE, dt, op);
    c->seq++;
    c->ops->all_reduce(c, buf, count, dt, op, stream);
}

void rt_all_gather(rt_comm *c, const void *send, void *recv, size_t count, ir_dtype dt, void *stream)
{
    c->seq++;
    c->ops->all_gather(c, send, recv, count, dt, stream);
}

void rt_reduce_scatter(rt_comm *c, const void *send, void *recv, size_t count, ir_dtype dt, rt_reduce_op op,
                       void *stream)
{
    comm_check_reduce(c, RT_COLL_REDUCE_SCATTER, dt, op);
    c->seq++;
    c->ops->reduce_scatter(c, send, recv, count, dt, op, stream);
}

void rt_all_to_all(rt_comm *c, const void *send, void *recv, size_t count, ir_dtype dt, void *stream)
{
    if (!c->ops->all_to_all)
        rt_comm_fatal("all_to_all on group '%s': this backend has none", c->name);
    c->seq++;
    c->ops->all_to_all(c, send, recv, count, dt, stream);
}

void rt_ring_shift(rt_comm *c, const void *send, void *recv, size_t count, ir_dtype dt, void *stream)
{
    if (!c->ops->ring_shift)
        rt_comm_fatal("ring_shift on group '%s': this backend has none", c->name);
    c->seq++;
    c->ops->ring_shift(c, send, recv, count, dt, stream);
}

/* Rows per member from the splits (q's runs summed); -1 at a negative run or an overflow. */
static int64_t a2av_member_rows(const int64_t *splits, int nsplit, int q)
{
    int64_t rows = 0;
    for (int j = 0; j < nsplit; j++) {
        int64_t r = splits[(size_t)q * (size_t)nsplit + (size_t)j];
        if (r < 0 || rows > INT64_MAX - r)
            return -1;
        rows += r;
    }
    return rows;
}

size_t rt_all_to_all_v(rt_comm *c, const void *send, const int64_t *send_splits, void *recv, int64_t *recv_splits,
                       int splits, size_t recv_cap, size_t row, ir_dtype dt, void *stream)
{
    if (!c->ops->all_to_all_v || !c->ops->all_to_all_counts)
        rt_comm_fatal("all_to_all_v on group '%s': this backend has none", c->name);
    if (splits < 1)
        rt_comm_fatal("all_to_all_v on group '%s': %d splits a member (at least 1)", c->name, splits);
    size_t *counts = malloc(sizeof *counts * 2 * (size_t)c->size), *recv_counts = counts + c->size;
    if (!counts)
        rt_comm_fatal("all_to_all_v on group '%s': out of memory for %d members' counts", c->name, c->size);
    for (int q = 0; q < c->size; q++) {
        int64_t rows = a2av_member_rows(send_splits, splits, q);
        if (rows < 0)
            rt_comm_fatal("all_to_all_v #%llu on group '%s': the rows for member %d are negative or overflow (a "
                          "split below 0: the routing's counts are wrong)", (unsigned long long)c->seq + 1, c->name, q);
        counts[q] = (size_t)rows * row;
    }
    c->seq++;
    c->ops->all_to_all_counts(c, send_splits, recv_splits, splits, stream);
    size_t total = 0;
    for (int q = 0; q < c->size; q++) {
        int64_t rows = a2av_member_rows(recv_splits, splits, q);
        if (rows < 0)
            rt_comm_fatal("all_to_all_v #%llu on group '%s': member %d (world rank %d) sends negative rows",
                          (unsigned long long)c->seq, c->name, q, c->world_ranks[q]);
        recv_counts[q] = (size_t)rows * row;
        total += (size_t)rows;
    }
    if (total > recv_cap)
        rt_comm_fatal("all_to_all_v #%llu on group '%s': %zu rows come to this rank but its receive buffer holds %zu: "
                      "the buffer must hold the worst case (every row of every member), or the senders must drop "
                      "what exceeds the capacity", (unsigned long long)c->seq, c->name, total, recv_cap);
    c->seq++;
    c->ops->all_to_all_v(c, send, counts, recv, recv_counts, dt, stream);
    free(counts);
    return total;
}

void rt_comm_group_begin(rt_comm *c)
{
    if (c->ops->group_begin)
        c->ops->group_begin(c);
}

void rt_comm_group_end(rt_comm *c, void *stream)
{
    if (c->ops->group_end)
        c->ops->group_end(c, stream);
}

void rt_broadcast(rt_comm *c, void *buf, size_t count, ir_dtype dt, int root, void *stream)
{
    if (root < 0 || root >= c->size)
        rt_comm_fatal("broadcast on group '%s': root %d is not a member (group size %d)", c->name, root, c->size);
    c->seq++;
    c->ops->broadcast(c, buf, count, dt, root, stream);
}

void rt_barrier(rt_comm *c)
{
    c->seq++;
    c->ops->barrier(c);
}

/* ---- point to point -------------------------------------------------------------------------- */

void rt_comm_add_p2p(rt_comm *c)
{
    if (c->p2p_sent || !c->ops->p2p_setup)
        return;
    c->p2p_sent = calloc((size_t)c->size, sizeof *c->p2p_sent);
    c->p2p_recvd = calloc((size_t)c->size, sizeof *c->p2p_recvd);
    if (!c->p2p_sent || !c->p2p_recvd)
        rt_comm_fatal("out of memory for the point-to-point state of group '%s'", c->name);
    c->ops->p2p_setup(c);
}

/* Ends the process unless c is ready for point to point, peer is one of this member's ring
 * neighbours (rank -+ 1 modulo the size) and dt a dtype. */
static void comm_check_p2p(const rt_comm *c, rt_coll_kind coll, int peer, ir_dtype dt)
{
    const char *what = rt_coll_names[coll];
    if (!c->ops->send)
        rt_comm_fatal("%s on group '%s': this backend has no point to point", what, c->name);
    if (!c->p2p_sent)
        rt_comm_fatal("%s on group '%s': call rt_comm_add_p2p on the group first (collective over it)", what, c->name);
    if ((unsigned)dt >= IR_NUM_DTYPES)
        rt_comm_fatal("%s on group '%s': unknown dtype %d", what, c->name, (int)dt);
    int n = c->size, prev = (c->rank + n - 1) % n, next = (c->rank + 1) % n;
    if (n == 1)
        rt_comm_fatal("%s to/from member %d of group '%s': a group of one member has no neighbour to talk to", what,
                      peer, c->name);
    if (peer < 0 || peer >= n || peer == c->rank || (peer != prev && peer != next))
        rt_comm_fatal("%s on group '%s': peer %d is not a neighbour of member %d (group of %d: its neighbours are "
                      "members %d and %d)", what, c->name, peer, c->rank, n, prev, next);
}

void rt_send(rt_comm *c, const void *buf, size_t count, ir_dtype dt, int peer, void *stream)
{
    comm_check_p2p(c, RT_COLL_SEND, peer, dt);
    c->p2p_sent[peer]++;
    c->ops->send(c, buf, count, dt, peer, stream);
}

void rt_recv(rt_comm *c, void *buf, size_t count, ir_dtype dt, int peer, void *stream)
{
    comm_check_p2p(c, RT_COLL_RECV, peer, dt);
    c->p2p_recvd[peer]++;
    c->ops->recv(c, buf, count, dt, peer, stream);
}

void rt_p2p_flush(rt_comm *c, void *stream)
{
    if (c->p2p_sent)
        c->ops->p2p_flush(c, stream);
}

size_t rt_p2p_staged_bytes(const rt_comm *c) { return c->p2p_staged; }

#ifndef MCC_HAVE_MPI
rt_comm *rt_comm_world_mpi(const rt_rank_env *e, char *err, size_t errlen)
{
    snprintf(err, errlen, "this train_rank was built without MPI (%s launch, %d ranks): install Open MPI "
                          "(libopenmpi-dev) and rebuild mcc, or run on GPUs with NCCL",
             e->launcher, e->world_size);
    return NULL;
}
#endif
