/* comm_mpi.c — the MPI backend of comm.h (CPU ranks under mpirun): non-blocking collectives and
 * point-to-point receives polled against MCC_COLLECTIVE_TIMEOUT_S, and on timeout a probe of the
 * other members over a side communicator to name those that did not arrive, then MPI_Abort;
 * sends from staging copies that never wait. Built only with MPI. */
#ifdef MCC_HAVE_MPI
#include "comm_backend.h"
#include "runtime/bf16.h"

#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Timeout probes: a timed-out rank sends PROBE on a group's side communicator to every other
 * member; a member that is polling (in any collective, or timed out itself) answers STATE with
 * how many collectives it has issued on that group and where it waits now. A member busy
 * outside collectives, or dead, does not answer within MPI_GRACE_S. */
enum { MPI_TAG_PROBE = 7001, MPI_TAG_STATE = 7002, MPI_TAG_P2P = 7003, MPI_TAG_RING = 7004 };
#define MPI_GRACE_S 2.0
#define MPI_MAX_GROUPS 64

typedef struct {
    MPI_Comm comm; /* the collectives */
    MPI_Comm side; /* probes and answers only, so they never match a collective's messages */
} mpi_group;

typedef struct {
    uint64_t issued;    /* collectives issued on the probed group */
    uint64_t sent_you, recvd_you; /* point-to-point messages sent to / received from the prober on that group */
    int32_t waiting;    /* 1 while inside a collective or recv */
    int32_t wait_peer;  /* the world rank a recv waits for, or -1 */
    uint64_t wait_seq;  /* where it waits: collective (or recv) number, kind (rt_coll_kind), group */
    int32_t wait_coll;
    char wait_group[40];
} mpi_state_msg;

/* A group's point-to-point state: sends in flight from their staging copies. */
typedef struct {
    MPI_Comm comm; /* a duplicate of the group's: its messages match nothing else */
    struct mpi_staged { MPI_Request req; void *copy; size_t bytes; uint64_t seq; int peer; } *sends;
    int nsends, cap;
} mpi_p2p;

static struct {
    rt_comm *groups[MPI_MAX_GROUPS]; /* live communicators, polled for probes */
    int ngroups;
    const rt_comm *wait_comm; /* the collective (or recv) this rank waits in, for answers */
    rt_coll_kind wait_coll;
    uint64_t wait_seq;
    int wait_peer;            /* group rank of a recv's sender, or -1 */
    double timeout_s;
    MPI_Op bf16_sum, bf16_max;
} mpi;

/* ---- bf16 reductions (MPI has no bf16): widen to f32, reduce, round to nearest even ---------- */

static void mpi_bf16_sum(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = rt_f32_to_bf16(rt_bf16_to_f32(a[i]) + rt_bf16_to_f32(b[i]));
}

static void mpi_bf16_max(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++) {
        float x = rt_bf16_to_f32(a[i]), y = rt_bf16_to_f32(b[i]);
        b[i] = x > y || x != x ? a[i] : b[i]; /* NaN wins, as in a float max that propagates it */
    }
}

/* ---- types ----------------------------------------------------------------------------------- */

static MPI_Datatype mpi_type(ir_dtype dt)
{
    switch (dt) {
    case IR_F32: return MPI_FLOAT;
    case IR_BF16: case IR_F16: return MPI_UINT16_T; /* moved as bits; bf16 reduced by mpi_bf16_* */
    case IR_FP8E4M3: case IR_FP8E5M2: return MPI_UINT8_T;
    case IR_I32: return MPI_INT32_T;
    case IR_I64: return MPI_INT64_T;
    case IR_I16: return MPI_INT16_T;
    case IR_NUM_DTYPES: break;
    }
    rt_comm_fatal("MPI collective: unknown dtype %d", (int)dt);
}

static MPI_Op mpi_op(ir_dtype dt, rt_reduce_op op)
{
    if (dt == IR_BF16)
        return op == RT_SUM ? mpi.bf16_sum : mpi.bf16_max;
    return op == RT_SUM ? MPI_SUM : MPI_MAX;
}

/* MPI counts are int: larger buffers would need chunking, which no plan needs yet. */
static int mpi_count(const rt_comm *c, rt_coll_kind coll, size_t count)
{
    if (count > INT_MAX)
        rt_comm_fatal("%s on group '%s': %zu elements exceed MPI's int count", rt_coll_names[coll], c->name, count);
    return (int)count;
}

static mpi_group *mpi_of(const rt_comm *c) { return c->impl; }

/* ---- waiting with a deadline ----------------------------------------------------------------- */

static void mpi_nap(void)
{
    struct timespec ts = {0, 50 * 1000}; /* 50 us: leaves the core to oversubscribed ranks */
    nanosleep(&ts, NULL);
}

/* Answers every pending probe on every live group. */
static void mpi_answer_probes(void)
{
    for (int i = 0; i < mpi.ngroups; i++) {
        rt_comm *g = mpi.groups[i];
        int flag, dummy;
        MPI_Status st;
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_TAG_PROBE, mpi_of(g)->side, &flag, &st);
        if (!flag)
            continue;
        MPI_Recv(&dummy, 1, MPI_INT, st.MPI_SOURCE, MPI_TAG_PROBE, mpi_of(g)->side, MPI_STATUS_IGNORE);
        mpi_state_msg m = {.issued = g->seq, .sent_you = g->p2p_sent ? g->p2p_sent[st.MPI_SOURCE] : 0,
                           .recvd_you = g->p2p_recvd ? g->p2p_recvd[st.MPI_SOURCE] : 0,
                           .waiting = mpi.wait_comm != NULL, .wait_peer = -1};
        if (mpi.wait_comm) {
            m.wait_seq = mpi.wait_seq;
            if (mpi.wait_peer >= 0)
                m.wait_peer = mpi.wait_comm->world_ranks[mpi.wait_peer];
            m.wait_coll = (int32_t)mpi.wait_coll;
            snprintf(m.wait_group, sizeof m.wait_group, "%s", mpi.wait_comm->name);
        }
        MPI_Send(&m, sizeof m, MPI_BYTE, st.MPI_SOURCE, MPI_TAG_STATE, mpi_of(g)->side);
    }
}

/* Appends what member `w` (world rank) reported, if it has not reached collective `seq`;
 * `sep` goes before the entry. */
static size_t mpi_describe_member(char *out, size_t len, const char *sep, int w, bool answered, const mpi_state_msg *m,
                                  uint64_t seq)
{
    if (!answered)
        return (size_t)snprintf(out, len, "%s rank %d (no answer: busy outside collectives, or dead)", sep, w);
    if (m->issued >= seq)
        return 0;
    if (m->waiting && m->wait_peer >= 0)
        return (size_t)snprintf(out, len, "%s rank %d (waits in %s #%llu from world rank %d on group '%s')", sep, w,
                                rt_coll_names[m->wait_coll], (unsigned long long)m->wait_seq, m->wait_peer,
                                m->wait_group);
    if (m->waiting)
        return (size_t)snprintf(out, len, "%s rank %d (waits in %s #%llu on group '%s')", sep, w,
                                rt_coll_names[m->wait_coll], (unsigned long long)m->wait_seq, m->wait_group);
    return (size_t)snprintf(out, len, "%s rank %d (has issued %llu collectives on this group)", sep, w,
                            (unsigned long long)m->issued);
}

/* What member `peer` (group rank) of c reported to a recv from it (or a send to it) that timed out. */
static size_t mpi_describe_peer(char *out, size_t len, const rt_comm *c, int peer, bool sending, bool answered,
                                const mpi_state_msg *m)
{
    int w = c->world_ranks[peer];
    size_t n = (size_t)snprintf(out, len, "world rank %d ", w);
    if (!answered)
        return n + (size_t)snprintf(out + n, len - n, "does not answer (busy outside collectives and receives, or dead)");
    uint64_t k = sending ? m->recvd_you : m->sent_you;
    n += (size_t)snprintf(out + n, len - n, "has %s this rank %llu message%s on it", sending ? "received from" : "sent",
                          (unsigned long long)k, k == 1 ? "" : "s");
    if (!m->waiting)
        return n + (size_t)snprintf(out + n, len - n, " and is busy elsewhere");
    n += (size_t)snprintf(out + n, len - n, " and waits in %s #%llu", rt_coll_names[m->wait_coll],
                          (unsigned long long)m->wait_seq);
    if (m->wait_peer >= 0)
        n += (size_t)snprintf(out + n, len - n, " from world rank %d", m->wait_peer);
    return n + (size_t)snprintf(out + n, len - n, " on group '%s'", m->wait_group);
}

/* Collective `coll` #seq on c (or, peer >= 0, "recv"/"send" #seq from/to member peer) ran past
 * the deadline: find who did not arrive (the peer), say so, end the job. */
_Noreturn static void mpi_timeout(rt_comm *c, rt_coll_kind coll, uint64_t seq, int peer)
{
    int n = c->size, probe = 0;
    MPI_Request *req = malloc(sizeof(MPI_Request) * (size_t)n * 2);
    mpi_state_msg *ans = calloc((size_t)n, sizeof *ans);
    int *answered = calloc((size_t)n, sizeof *answered);
    int pending = 0;
    for (int i = 0; i < n; i++) {
        req[2 * i] = req[2 * i + 1] = MPI_REQUEST_NULL;
        if (i == c->rank || (peer >= 0 && i != peer))
            continue;
        MPI_Isend(&probe, 1, MPI_INT, i, MPI_TAG_PROBE, mpi_of(c)->side, &req[2 * i]);
        MPI_Irecv(&ans[i], sizeof ans[i], MPI_BYTE, i, MPI_TAG_STATE, mpi_of(c)->side, &req[2 * i + 1]);
        pending++;
    }
    for (double until = MPI_Wtime() + MPI_GRACE_S; pending > 0 && MPI_Wtime() < until; mpi_nap()) {
        mpi_answer_probes(); /* the others probe too */
        for (int i = 0; i < n; i++) {
            int done = 0;
            if (req[2 * i + 1] != MPI_REQUEST_NULL && !answered[i] &&
                MPI_Test(&req[2 * i + 1], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done)
                answered[i] = 1, pending--;
        }
    }
    char members[256], what[96], missing[2048] = "";
    size_t len = 0;
    rt_comm_format_members(c, members, sizeof members);
    if (peer >= 0) {
        bool sending = coll == RT_COLL_SEND;
        snprintf(what, sizeof what, "%s #%llu %s world rank %d", rt_coll_names[coll], (unsigned long long)seq,
                 sending ? "to" : "from", c->world_ranks[peer]);
        len = mpi_describe_peer(missing, sizeof missing, c, peer, sending, answered[peer], &ans[peer]);
    } else {
        snprintf(what, sizeof what, "%s #%llu", rt_coll_names[coll], (unsigned long long)seq);
        for (int i = 0; i < n && len < sizeof missing; i++)
            if (i != c->rank)
                len += mpi_describe_member(missing + len, sizeof missing - len, len ? ";" : "did not arrive:",
                                           c->world_ranks[i], answered[i], &ans[i], seq);
    }
    fprintf(stderr,
            "mcc: rank %d: error: %s on group '%s' (%s) did not complete within %g s (MCC_COLLECTIVE_TIMEOUT_S): %s\n"
            "mcc: rank %d: ending every rank (MPI_Abort); raise MCC_COLLECTIVE_TIMEOUT_S if a step legitimately takes longer\n",
            c->world_ranks[c->rank], what, c->name, members, mpi.timeout_s,
            len ? missing : "every member arrived, the collective itself hangs (network?)", c->world_ranks[c->rank]);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    abort();
}

/* Completes req, answering probes meanwhile; past the deadline, ends the job naming the laggards.
 * `seq` numbers the wait for the probes' answers; peer >= 0: a recv from that member. */
static void mpi_wait_for(rt_comm *c, MPI_Request *req, rt_coll_kind coll, uint64_t seq, int peer)
{
    mpi.wait_comm = c, mpi.wait_coll = coll, mpi.wait_seq = seq, mpi.wait_peer = peer;
    double deadline = MPI_Wtime() + mpi.timeout_s;
    for (unsigned spin = 0;; spin++) {
        int done = 0;
        MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (done)
            break;
        mpi_answer_probes();
        if (MPI_Wtime() > deadline)
            mpi_timeout(c, coll, seq, peer);
        if (spin > 1000)
            mpi_nap();
    }
    mpi.wait_comm = NULL;
}

static void mpi_wait(rt_comm *c, MPI_Request *req, rt_coll_kind coll) { mpi_wait_for(c, req, coll, c->seq, -1); }

/* ---- collectives ----------------------------------------------------------------------------- */

static void mpi_all_reduce(rt_comm *c, void *buf, size_t count, ir_dtype dt, rt_reduce_op op, void *stream)
{
    MPI_Request r;
    MPI_Iallreduce(MPI_IN_PLACE, buf, mpi_count(c, RT_COLL_ALL_REDUCE, count), mpi_type(dt), mpi_op(dt, op),
                   mpi_of(c)->comm, &r);
    mpi_wait(c, &r, RT_COLL_ALL_REDUCE);
}

static void mpi_all_gather(rt_comm *c, const void *send, void *recv, size_t count, ir_dtype dt, void *stream)
{
    MPI_Request r;
    int n = mpi_count(c, RT_COLL_ALL_GATHER, count);
    MPI_Iallgather(send, n, mpi_type(dt), recv, n, mpi_type(dt), mpi_of(c)->comm, &r);
    mpi_wait(c, &r, RT_COLL_ALL_GATHER);
}

static void mpi_all_to_all(rt_comm *c, const void *send, void *recv, size_t count, ir_dtype dt, void *stream)
{
    MPI_Request r;
    int n = mpi_count(c, RT_COLL_ALL_TO_ALL, count);
    MPI_Ialltoall(send, n, mpi_type(dt), recv, n, mpi_type(dt), mpi_of(c)->comm, &r);
    mpi_wait(c, &r, RT_COLL_ALL_TO_ALL);
}

static void mpi_all_to_all_counts(rt_comm *c, const int64_t *send, int64_t *recv, int n, void *stream)
{
    mpi_all_to_all(c, send, recv, (size_t)n, IR_I64, stream);
}

/* MPI_Alltoallv with packed displacements: the prefix sums of the counts. */
static void mpi_all_to_all_v(rt_comm *c, const void *send, const size_t *send_counts, void *recv,
                             const size_t *recv_counts, ir_dtype dt, void *stream)
{
    int n = c->size, *v = malloc(sizeof(int) * 4 * (size_t)n); /* send counts, displs, recv counts, displs */
    if (!v)
        rt_comm_fatal("all_to_all_v on group '%s': out of memory for %d members' counts", c->name, n);
    size_t sent = 0, came = 0;
    for (int q = 0; q < n; q++) {
        v[q] = mpi_count(c, RT_COLL_ALL_TO_ALL_V, send_counts[q]), v[n + q] = mpi_count(c, RT_COLL_ALL_TO_ALL_V, sent);
        v[2 * n + q] = mpi_count(c, RT_COLL_ALL_TO_ALL_V, recv_counts[q]);
        v[3 * n + q] = mpi_count(c, RT_COLL_ALL_TO_ALL_V, came);
        sent += send_counts[q], came += recv_counts[q];
    }
    MPI_Request r;
    MPI_Ialltoallv(send, v, v + n, mpi_type(dt), recv, v + 2 * n, v + 3 * n, mpi_type(dt), mpi_of(c)->comm, &r);
    mpi_wait(c, &r, RT_COLL_ALL_TO_ALL_V);
    free(v);
}

/* A receive from rank - 1 and a send to rank + 1 on the group's communicator (every member
 * issues its ring shifts in the same order, so they match in order), both waited for. */
static void mpi_ring_shift(rt_comm *c, const void *send, void *recv, size_t count, ir_dtype dt, void *stream)
{
    MPI_Request r[2];
    int n = mpi_count(c, RT_COLL_RING_SHIFT, count);
    int prev = (c->rank + c->size - 1) % c->size, next = (c->rank + 1) % c->size;
    MPI_Irecv(recv, n, mpi_type(dt), prev, MPI_TAG_RING, mpi_of(c)->comm, &r[0]);
    MPI_Isend(send, n, mpi_type(dt), next, MPI_TAG_RING, mpi_of(c)->comm, &r[1]);
    mpi_wait(c, &r[0], RT_COLL_RING_SHIFT);
    mpi_wait(c, &r[1], RT_COLL_RING_SHIFT);
}

static void mpi_reduce_scatter(rt_comm *c, const void *send, void *recv, size_t count, ir_dtype dt, rt_reduce_op op,
                               void *stream)
{
    MPI_Request r;
    MPI_Ireduce_scatter_block(send, recv, mpi_count(c, RT_COLL_REDUCE_SCATTER, count), mpi_type(dt), mpi_op(dt, op),
                              mpi_of(c)->comm, &r);
    mpi_wait(c, &r, RT_COLL_REDUCE_SCATTER);
}

static void mpi_broadcast(rt_comm *c, void *buf, size_t count, ir_dtype dt, int root, void *stream)
{
    MPI_Request r;
    MPI_Ibcast(buf, mpi_count(c, RT_COLL_BROADCAST, count), mpi_type(dt), root, mpi_of(c)->comm, &r);
    mpi_wait(c, &r, RT_COLL_BROADCAST);
}

static void mpi_barrier(rt_comm *c)
{
    MPI_Request r;
    MPI_Ibarrier(mpi_of(c)->comm, &r);
    mpi_wait(c, &r, RT_COLL_BARRIER);
}

/* ---- point to point ------------------------------------------------------------------------- */

static mpi_p2p *mpi_p2p_of(const rt_comm *c) { return c->p2p; }

static void mpi_p2p_setup(rt_comm *c)
{
    mpi_p2p *p = calloc(1, sizeof *p);
    if (!p)
        rt_comm_fatal("out of memory for the point-to-point state of group '%s'", c->name);
    MPI_Comm_dup(mpi_of(c)->comm, &p->comm);
    c->p2p = p;
}

/* Frees the staging copies of completed sends (all of them, waiting for each, when `all`). */
static void mpi_p2p_reclaim(rt_comm *c, bool all)
{
    mpi_p2p *p = mpi_p2p_of(c);
    int kept = 0;
    for (int i = 0; i < p->nsends; i++) {
        struct mpi_staged *s = &p->sends[i];
        int done = 0;
        if (all)
            mpi_wait_for(c, &s->req, RT_COLL_SEND, s->seq, s->peer);
        else
            MPI_Test(&s->req, &done, MPI_STATUS_IGNORE);
        if (all || done) {
            free(s->copy);
            c->p2p_staged -= s->bytes;
        } else {
            p->sends[kept++] = *s;
        }
    }
    p->nsends = kept;
}

static void mpi_send(rt_comm *c, const void *buf, size_t count, ir_dtype dt, int peer, void *stream)
{
    mpi_p2p *p = mpi_p2p_of(c);
    size_t bytes = count * ir_dtype_size(dt);
    int n = mpi_count(c, RT_COLL_SEND, count);
    mpi_p2p_reclaim(c, false);
    if (p->nsends == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 16;
        p->sends = realloc(p->sends, sizeof *p->sends * (size_t)p->cap);
    }
    void *copy = malloc(bytes ? bytes : 1);
    if (!p->sends || !copy)
        rt_comm_fatal("send #%llu on group '%s': out of memory staging %zu bytes", (unsigned long long)c->p2p_sent[peer],
                      c->name, bytes);
    memcpy(copy, buf, bytes);
    struct mpi_staged *s = &p->sends[p->nsends++];
    *s = (struct mpi_staged){.copy = copy, .bytes = bytes, .seq = c->p2p_sent[peer], .peer = peer};
    c->p2p_staged += bytes;
    MPI_Isend(copy, n, mpi_type(dt), peer, MPI_TAG_P2P, p->comm, &s->req);
}

static void mpi_recv(rt_comm *c, void *buf, size_t count, ir_dtype dt, int peer, void *stream)
{
    MPI_Request r;
    MPI_Irecv(buf, mpi_count(c, RT_COLL_RECV, count), mpi_type(dt), peer, MPI_TAG_P2P, mpi_p2p_of(c)->comm, &r);
    mpi_wait_for(c, &r, RT_COLL_RECV, c->p2p_recvd[peer], peer);
}

static void mpi_p2p_flush(rt_comm *c, void *stream) { mpi_p2p_reclaim(c, true); }

static void mpi_p2p_free(rt_comm *c)
{
    mpi_p2p *p = mpi_p2p_of(c);
    if (!p)
        return;
    mpi_p2p_reclaim(c, true);
    MPI_Comm_free(&p->comm);
    free(p->sends);
    free(p);
    c->p2p = NULL;
}

/* ---- groups ---------------------------------------------------------------------------------- */

static void mpi_register(rt_comm *c, MPI_Comm comm)
{
    if (mpi.ngroups == MPI_MAX_GROUPS)
        rt_comm_fatal("more than %d MPI communicators: free unused groups", MPI_MAX_GROUPS);
    mpi_group *g = malloc(sizeof *g);
    g->comm = comm;
    MPI_Comm_dup(comm, &g->side);
    c->impl = g;
    mpi.groups[mpi.ngroups++] = c;
}

static void mpi_split(rt_comm *c, int color, int key, rt_comm *out)
{
    MPI_Comm comm;
    MPI_Group group, world;
    MPI_Comm_split(mpi_of(c)->comm, color, key, &comm);
    MPI_Comm_rank(comm, &out->rank);
    MPI_Comm_size(comm, &out->size);
    int *ranks = malloc(sizeof(int) * (size_t)out->size);
    for (int i = 0; i < out->size; i++)
        ranks[i] = i;
    MPI_Comm_group(comm, &group);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_translate_ranks(group, out->size, ranks, world, out->world_ranks);
    MPI_Group_free(&group);
    MPI_Group_free(&world);
    free(ranks);
    mpi_register(out, comm);
}

static void mpi_free(rt_comm *c)
{
    for (int i = 0; i < mpi.ngroups; i++)
        if (mpi.groups[i] == c)
            mpi.groups[i] = mpi.groups[--mpi.ngroups];
    mpi_p2p_free(c);
    MPI_Comm_free(&mpi_of(c)->side);
    MPI_Comm_free(&mpi_of(c)->comm);
    free(c->impl);
    if (c->is_world) {
        MPI_Op_free(&mpi.bf16_sum);
        MPI_Op_free(&mpi.bf16_max);
        MPI_Finalize();
    }
}

static const rt_comm_ops mpi_ops = {mpi_all_reduce, mpi_all_gather, mpi_reduce_scatter, mpi_broadcast,
                                    mpi_barrier, mpi_split, mpi_free, NULL, NULL,
                                    NULL /* one lane */, NULL /* no windows */, mpi_all_to_all,
                                    mpi_p2p_setup, mpi_send, mpi_recv, mpi_p2p_flush, mpi_all_to_all_counts,
                                    mpi_all_to_all_v, mpi_ring_shift};

rt_comm *rt_comm_world_mpi(const rt_rank_env *e, char *err, size_t errlen)
{
    int inited, provided, rank, size;
    MPI_Initialized(&inited);
    if (!inited && MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        snprintf(err, errlen, "MPI_Init failed: launch CPU ranks with mpirun -np N");
        return NULL;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank != e->rank || size != e->world_size) {
        snprintf(err, errlen, "MPI sees rank %d of %d but the %s environment says rank %d of %d: CPU ranks talk over "
                 "MPI, so launch them with mpirun -np %d (not torchrun/--nproc-per-node)",
                 rank, size, e->launcher, e->rank, e->world_size, e->world_size);
        return NULL;
    }
    mpi.timeout_s = rt_collective_timeout_s();
    MPI_Op_create(mpi_bf16_sum, 1, &mpi.bf16_sum);
    MPI_Op_create(mpi_bf16_max, 1, &mpi.bf16_max);
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    rt_comm *c = rt_comm_new_world(&mpi_ops, NULL, rank, size);
    mpi_register(c, comm);
    return c;
}
#endif
