/* comm_nccl.c — the NCCL backend of comm.h (GPU ranks): non-blocking communicators, collectives
 * enqueued on the caller's stream, point to point between neighbours on two-member
 * communicators (one per direction) with sends on streams of their own, and a watchdog thread
 * that ends the process (after ncclCommAbort) when one does not complete within
 * MCC_COLLECTIVE_TIMEOUT_S. */
#include "runtime/comm_backend.h"
#include "common/os.h"
#include "cuda_ctx.h"
#include "common/knobs.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NCCL_RING 1024     /* collectives in flight the watchdog tracks */
#define NCCL_MAX_GROUPS 64 /* live communicators, aborted together on a timeout */

/* One enqueued collective (or send, or recv): done when its event is. */
typedef struct {
    cudaEvent_t done;
    rt_comm *c;
    ncclComm_t comm;                /* the NCCL communicator it runs on (c's, or a pair's) */
    int peer;                       /* a send's or recv's peer (group rank), else -1 */
    uint64_t seq;
    rt_coll_kind coll;              /* the collective (or send, or recv) */
    const char *graph;              /* a graph launch (rt_nccl_watch_graph): the function whose CUDA graph
                                       holds the collectives, not one collective; else NULL */
    double deadline;
} nccl_pending;

static struct {
    pthread_mutex_t mu;
    pthread_t watchdog;
    volatile int stop, timed_out;
    nccl_pending ring[NCCL_RING]; /* [head, tail) pending, oldest first; indices mod NCCL_RING */
    unsigned head, tail;
    rt_comm *groups[NCCL_MAX_GROUPS];
    int ngroups, device;
    double timeout_s;
} nccl = {.mu = PTHREAD_MUTEX_INITIALIZER};

static ncclComm_t nccl_of(const rt_comm *c) { return (ncclComm_t)c->impl; }

static void nccl_nap(long us)
{
    struct timespec t = {0, us * 1000};
    nanosleep(&t, NULL);
}

static void nccl_check(rt_comm *c, ncclResult_t r, const char *call, rt_coll_kind coll)
{
    if (r != ncclSuccess && r != ncclInProgress)
        rt_comm_fatal("%s on group '%s': %s failed: %s (%s)", rt_coll_names[coll], c->name, call, ncclGetErrorString(r),
                      ncclGetLastError(nccl_of(c)));
}

/* A non-blocking communicator finishes init/split/enqueue asynchronously: wait until it does,
 * or until `deadline`; returns its final state (ncclInProgress on timeout). */
static ncclResult_t nccl_settle(ncclComm_t comm, double deadline)
{
    ncclResult_t st = ncclInProgress;
    /* An enqueue settles within microseconds: spin first, since a nap per collective (hundreds
     * of them a step under tensor parallelism) would cost more than the collectives. */
    for (int polls = 0; ncclCommGetAsyncError(comm, &st) == ncclSuccess && st == ncclInProgress; polls++) {
        if (os_now_s() >= deadline)
            break;
        if (polls < 20000)
            sched_yield();
        else
            nccl_nap(100);
    }
    return st;
}

/* ---- watchdog ------------------------------------------------------------------------------- */

static void nccl_p2p_abort(rt_comm *c);

_Noreturn static void nccl_timeout(const nccl_pending *p, ncclResult_t async)
{
    char members[256], what[160];
    rt_comm_format_members(p->c, members, sizeof members);
    bool sending = p->peer >= 0 && p->coll == RT_COLL_SEND;
    if (p->peer >= 0)
        snprintf(what, sizeof what, "%s #%llu %s world rank %d", rt_coll_names[p->coll], (unsigned long long)p->seq,
                 sending ? "to" : "from", p->c->world_ranks[p->peer]);
    else
        snprintf(what, sizeof what, "%s%s #%llu", p->graph ? (async != ncclSuccess && async != ncclInProgress
                                                              ? "a collective in the CUDA graph of "
                                                              : "the collectives in the CUDA graph of ") : "",
                 p->graph ? p->graph : rt_coll_names[p->coll], (unsigned long long)p->seq);
    if (async != ncclSuccess && async != ncclInProgress)
        fprintf(stderr, "mcc: rank %d: error: %s on group '%s' (%s) failed: %s (%s)\n", p->c->world_ranks[p->c->rank],
                what, p->c->name, members, ncclGetErrorString(async), ncclGetLastError(p->comm));
    else
        fprintf(stderr, "mcc: rank %d: error: %s on group '%s' (%s) did not complete within %g s "
                "(MCC_COLLECTIVE_TIMEOUT_S): %s or the interconnect hangs; aborting NCCL and ending this rank%s\n",
                p->c->world_ranks[p->c->rank], what, p->c->name, members, nccl.timeout_s,
                p->peer < 0 ? "a member did not arrive (the members that report no timeout for it are elsewhere)"
                            : sending ? "the peer did not post the matching recv" : "the peer did not send it",
                p->graph ? " (MCC_CUDA_GRAPHS=eager-collectives runs them one by one, and names the one that hangs)" : "");
    fflush(stderr);
    nccl.timed_out = 1;
    for (int i = 0; i < nccl.ngroups; i++) {
        nccl_p2p_abort(nccl.groups[i]);
        ncclCommAbort(nccl_of(nccl.groups[i]));
    }
    _exit(1); /* exit() could block in CUDA's teardown behind the hung kernel */
}

/* The abort lets the main thread's wait return: should it reach exit() before the watchdog's
 * _exit(1), the process must still fail. */
static void nccl_atexit(void)
{
    if (nccl.timed_out)
        _exit(1);
}

/* Retires finished collectives oldest first; ends the process on an async error or a deadline. */
static void *nccl_watchdog(void *arg)
{
    cudaSetDevice(nccl.device);
    while (!nccl.stop) {
        pthread_mutex_lock(&nccl.mu);
        bool any = nccl.head != nccl.tail;
        nccl_pending p = any ? nccl.ring[nccl.head % NCCL_RING] : (nccl_pending){0};
        pthread_mutex_unlock(&nccl.mu);
        if (!any) {
            nccl_nap(10000);
            continue;
        }
        cudaError_t q = cudaEventQuery(p.done);
        if (q == cudaSuccess) {
            pthread_mutex_lock(&nccl.mu);
            nccl.head++;
            pthread_mutex_unlock(&nccl.mu);
            continue;
        }
        if (q != cudaErrorNotReady)
            rt_comm_fatal("%s #%llu on group '%s': CUDA error %s while it ran", p.graph ? p.graph : rt_coll_names[p.coll],
                          (unsigned long long)p.seq,
                          p.c->name, cudaGetErrorString(q));
        /* Only past the deadline does this thread call into NCCL: the main thread enqueues on the
         * same communicators, and concurrent calls on one communicator are not safe (a run of
         * data-parallel steps crashed in the host heap while this polled every millisecond). */
        if (os_now_s() > p.deadline) {
            ncclResult_t async = ncclSuccess;
            ncclCommGetAsyncError(p.comm, &async);
            nccl_timeout(&p, async);
        }
        nccl_nap(1000);
    }
    return arg;
}

/* Records that `op` (all but its event and deadline) was enqueued on `stream`; the watchdog follows it. */
static void nccl_track_op(nccl_pending op, void *stream)
{
    for (;;) { /* a full ring drains as the GPU catches up (or the watchdog ends the process) */
        pthread_mutex_lock(&nccl.mu);
        if (nccl.tail - nccl.head < NCCL_RING)
            break;
        pthread_mutex_unlock(&nccl.mu);
        nccl_nap(100);
    }
    nccl_pending *p = &nccl.ring[nccl.tail % NCCL_RING];
    op.done = p->done, op.deadline = os_now_s() + nccl.timeout_s;
    *p = op;
    RT_CUDART_CHECK(cudaEventRecord(p->done, (cudaStream_t)stream));
    nccl.tail++;
    pthread_mutex_unlock(&nccl.mu);
}

/* Records that collective `coll` (or the collectives of function `graph`'s CUDA graph) was enqueued
 * on `stream`. */
static void nccl_track(rt_comm *c, rt_coll_kind coll, const char *graph, void *stream)
{
    nccl_track_op((nccl_pending){.c = c, .comm = nccl_of(c), .peer = -1, .seq = c->seq, .coll = coll, .graph = graph},
                  stream);
}

/* Checks an enqueue call, lets a non-blocking communicator finish it, and tracks it (unless the
 * stream is being captured into a graph: rt_nccl_watch_graph then follows the graph's launches). */
static void nccl_enqueued(rt_comm *c, ncclResult_t r, const char *call, rt_coll_kind coll, void *stream)
{
    nccl_check(c, r, call, coll);
    nccl_check(c, nccl_settle(nccl_of(c), os_now_s() + nccl.timeout_s), call, coll);
    enum cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (stream)
        RT_CUDART_CHECK(cudaStreamIsCapturing((cudaStream_t)stream, &capture));
    if (capture == cudaStreamCaptureStatusNone)
        nccl_track(c, coll, NULL, stream);
}

void rt_nccl_watch_graph(void *stream, const char *what)
{
    if (!nccl.ngroups)
        return;
    rt_comm *world = nccl.groups[0]; /* rt_comm_world_nccl registers it first */
    world->seq++;
    nccl_track(world, RT_COLL_ALL_REDUCE /* unused: graph names them */, what, stream);
}

/* ---- collectives ----------------------------------------------------------------------------- */

static ncclDataType_t nccl_type(ir_dtype dt)
{
    switch (dt) {
    case IR_F32: return ncclFloat32;
    case IR_BF16: return ncclBfloat16;
    case IR_F16: return ncclFloat16;
    case IR_FP8E4M3: case IR_FP8E5M2: return ncclUint8; /* moved as bytes */
    case IR_I32: return ncclInt32;
    case IR_I64: return ncclInt64;
    case IR_I16: /* NCCL has no 16-bit integer: only masters' remainders are i16, and no collective moves them */
    case IR_NUM_DTYPES: break;
    }
    rt_comm_fatal("NCCL collective: unknown dtype %d", (int)dt);
}

static ncclRedOp_t nccl_op(rt_reduce_op op) { return op == RT_SUM ? ncclSum : ncclMax; }

static void nccl_all_reduce(rt_comm *c, void *buf, size_t count, ir_dtype dt, rt_reduce_op op, void *stream)
{
    ncclResult_t r = ncclAllReduce(buf, buf, count, nccl_type(dt), nccl_op(op), nccl_of(c), (cudaStream_t)stream);
    nccl_enqueued(c, r, "ncclAllReduce", RT_COLL_ALL_REDUCE, stream);
}

static void nccl_all_gather(rt_comm *c, const void *send, void *recv, size_t count, ir_dtype dt, void *stream)
{
    ncclResult_t r = ncclAllGather(send, recv, count, nccl_type(dt), nccl_of(c), (cudaStream_t)stream);
    nccl_enqueued(c, r, "ncclAllGather", RT_COLL_ALL_GATHER, stream);
}

static void nccl_reduce_scatter(rt_comm *c, const void *send, void *recv, size_t count, ir_dtype dt, rt_reduce_op op,
                                void *stream)
{
    ncclResult_t r = ncclReduceScatter(send, recv, count, nccl_type(dt), nccl_op(op), nccl_of(c), (cudaStream_t)stream);
    nccl_enqueued(c, r, "ncclReduceScatter", RT_COLL_REDUCE_SCATTER, stream);
}

/* NCCL's own all-to-all (2.28 on) runs on the copy engines when the communicator's policy is
 * zero-CTA and both buffers lie in a symmetric window (the copy lane); before it, send/recv pairs. */
static void nccl_all_to_all(rt_comm *c, const void *send, void *recv, size_t count, ir_dtype dt, void *stream)
{
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
    nccl_enqueued(c, ncclAlltoAll(send, recv, count, nccl_type(dt), nccl_of(c), (cudaStream_t)stream), "ncclAlltoAll",
                  RT_COLL_ALL_TO_ALL, stream);
#else
    size_t bytes = count * ir_dtype_size(dt);
    RT_CUDART_CHECK(cudaMemcpyAsync((char *)recv + (size_t)c->rank * bytes, (const char *)send + (size_t)c->rank * bytes,
                                    bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)stream));
    nccl_check(c, ncclGroupStart(), "ncclGroupStart", RT_COLL_ALL_TO_ALL);
    for (int q = 0; q < c->size; q++)
        if (q != c->rank) {
            nccl_check(c, ncclSend((const char *)send + (size_t)q * bytes, count, nccl_type(dt), q, nccl_of(c),
                                   (cudaStream_t)stream), "ncclSend", RT_COLL_ALL_TO_ALL);
            nccl_check(c, ncclRecv((char *)recv + (size_t)q * bytes, count, nccl_type(dt), q, nccl_of(c),
                                   (cudaStream_t)stream), "ncclRecv", RT_COLL_ALL_TO_ALL);
        }
    nccl_enqueued(c, ncclGroupEnd(), "ncclGroupEnd", RT_COLL_ALL_TO_ALL, stream);
#endif
}

/* One group of ncclSend to rank + 1 and ncclRecv from rank - 1 on the group's communicator: NCCL
 * runs the pair together, so the ring cannot deadlock (a lone send would wait for its receiver). */
static void nccl_ring_shift(rt_comm *c, const void *send, void *recv, size_t count, ir_dtype dt, void *stream)
{
    int prev = (c->rank + c->size - 1) % c->size, next = (c->rank + 1) % c->size;
    nccl_check(c, ncclGroupStart(), "ncclGroupStart", RT_COLL_RING_SHIFT);
    nccl_check(c, ncclSend(send, count, nccl_type(dt), next, nccl_of(c), (cudaStream_t)stream), "ncclSend",
               RT_COLL_RING_SHIFT);
    nccl_check(c, ncclRecv(recv, count, nccl_type(dt), prev, nccl_of(c), (cudaStream_t)stream), "ncclRecv",
               RT_COLL_RING_SHIFT);
    nccl_enqueued(c, ncclGroupEnd(), "ncclGroupEnd", RT_COLL_RING_SHIFT, stream);
}

/* The counts NCCL moves must be device memory: up into a scratch kept from call to call, the
 * fixed all-to-all, down, and a wait on the stream (the rows' sizes are wanted on the host, as
 * Megatron's dispatcher copies its counts to the host). Growing the scratch frees the old one,
 * a device-wide wait: it grows to the largest group's counts once. */
static struct {
    int64_t *dev;
    size_t bytes;
} nccl_counts;

static void nccl_all_to_all_counts(rt_comm *c, const int64_t *send, int64_t *recv, int n, void *stream)
{
    size_t count = (size_t)n * (size_t)c->size, bytes = sizeof(int64_t) * count;
    if (2 * bytes > nccl_counts.bytes) {
        if (nccl_counts.dev)
            RT_CUDART_CHECK(cudaFree(nccl_counts.dev));
        RT_CUDART_CHECK(cudaMalloc((void **)&nccl_counts.dev, 2 * bytes));
        nccl_counts.bytes = 2 * bytes;
    }
    cudaStream_t s = (cudaStream_t)stream;
    RT_CUDART_CHECK(cudaMemcpyAsync(nccl_counts.dev, send, bytes, cudaMemcpyHostToDevice, s));
    nccl_all_to_all(c, nccl_counts.dev, nccl_counts.dev + count, (size_t)n, IR_I64, stream);
    RT_CUDART_CHECK(cudaMemcpyAsync(recv, nccl_counts.dev + count, bytes, cudaMemcpyDeviceToHost, s));
    RT_CUDART_CHECK(cudaStreamSynchronize(s));
}

/* Grouped send/recv pairs at the counts' prefix sums; this rank's own block by a device copy. */
static void nccl_all_to_all_v(rt_comm *c, const void *send, const size_t *send_counts, void *recv,
                              const size_t *recv_counts, ir_dtype dt, void *stream)
{
    size_t es = ir_dtype_size(dt), sent = 0, came = 0;
    cudaStream_t s = (cudaStream_t)stream;
    nccl_check(c, ncclGroupStart(), "ncclGroupStart", RT_COLL_ALL_TO_ALL_V);
    for (int q = 0; q < c->size; q++) {
        const char *from = (const char *)send + sent * es;
        char *to = (char *)recv + came * es;
        if (q == c->rank) {
            if (send_counts[q])
                RT_CUDART_CHECK(cudaMemcpyAsync(to, from, send_counts[q] * es, cudaMemcpyDeviceToDevice, s));
        } else {
            if (send_counts[q])
                nccl_check(c, ncclSend(from, send_counts[q], nccl_type(dt), q, nccl_of(c), s), "ncclSend",
                           RT_COLL_ALL_TO_ALL_V);
            if (recv_counts[q])
                nccl_check(c, ncclRecv(to, recv_counts[q], nccl_type(dt), q, nccl_of(c), s), "ncclRecv",
                           RT_COLL_ALL_TO_ALL_V);
        }
        sent += send_counts[q], came += recv_counts[q];
    }
    nccl_enqueued(c, ncclGroupEnd(), "ncclGroupEnd", RT_COLL_ALL_TO_ALL_V, stream);
}

static void nccl_broadcast(rt_comm *c, void *buf, size_t count, ir_dtype dt, int root, void *stream)
{
    ncclResult_t r = ncclBroadcast(buf, buf, count, nccl_type(dt), root, nccl_of(c), (cudaStream_t)stream);
    nccl_enqueued(c, r, "ncclBroadcast", RT_COLL_BROADCAST, stream);
}

/* Waits on the host until everything enqueued before the last tracked collective is done. */
static void nccl_drain(void)
{
    pthread_mutex_lock(&nccl.mu);
    unsigned last = nccl.tail;
    pthread_mutex_unlock(&nccl.mu);
    for (;;) {
        pthread_mutex_lock(&nccl.mu);
        bool done = (int)(nccl.head - last) >= 0;
        pthread_mutex_unlock(&nccl.mu);
        if (done)
            return;
        nccl_nap(100);
    }
}

/* A one-element all-reduce on the legacy default stream (which waits for this rank's other
 * blocking streams), then a host wait that the watchdog bounds. */
static void nccl_barrier(rt_comm *c)
{
    float *one;
    RT_CUDART_CHECK(cudaMalloc((void **)&one, sizeof *one));
    ncclResult_t r = ncclAllReduce(one, one, 1, ncclFloat32, ncclSum, nccl_of(c), NULL);
    nccl_enqueued(c, r, "ncclAllReduce", RT_COLL_BARRIER, NULL);
    nccl_drain();
    RT_CUDART_CHECK(cudaFree(one));
}

/* ---- communicators --------------------------------------------------------------------------- */

static void nccl_register(rt_comm *c)
{
    if (nccl.ngroups == NCCL_MAX_GROUPS)
        rt_comm_fatal("more than %d NCCL communicators: free unused groups", NCCL_MAX_GROUPS);
    nccl.groups[nccl.ngroups++] = c;
}

static ncclConfig_t nccl_config(void)
{
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0; /* so a hung init/collective can be timed out and aborted */
    return cfg;
}

/* out->impl := ncclCommSplit of c's color/key with cfg, registered with the watchdog. */
static void nccl_split_comm(rt_comm *c, int color, int key, ncclConfig_t *cfg, rt_comm *out)
{
    ncclComm_t comm;
    double deadline = os_now_s() + nccl.timeout_s;
    nccl_check(c, ncclCommSplit(nccl_of(c), color, key, &comm, cfg), "ncclCommSplit", RT_COLL_SPLIT);
    nccl_check(c, nccl_settle(comm, deadline), "ncclCommSplit", RT_COLL_SPLIT);
    /* both are busy until done */
    nccl_check(c, nccl_settle(nccl_of(c), deadline), "ncclCommSplit (parent)", RT_COLL_SPLIT);
    out->impl = comm;
    nccl_register(out);
}

/* Member order of ncclCommSplit: same color, by key, ties by parent rank. Gathers every parent
 * member's (color, key, world rank) to learn the new group's world ranks. */
static void nccl_split(rt_comm *c, int color, int key, rt_comm *out)
{
    int n = c->size, mine[3] = {color, key, c->world_ranks[c->rank]}, *all = malloc(sizeof(int) * 3 * (size_t)n), *dev;
    RT_CUDART_CHECK(cudaMalloc((void **)&dev, sizeof(int) * 3 * (size_t)(n + 1)));
    RT_CUDART_CHECK(cudaMemcpy(dev + 3 * n, mine, sizeof mine, cudaMemcpyHostToDevice));
    rt_all_gather(c, dev + 3 * n, dev, 3, IR_I32, NULL);
    nccl_drain();
    RT_CUDART_CHECK(cudaMemcpy(all, dev, sizeof(int) * 3 * (size_t)n, cudaMemcpyDeviceToHost));
    RT_CUDART_CHECK(cudaFree(dev));
    int *order = malloc(sizeof(int) * (size_t)n), m = 0; /* parent ranks of the members, sorted */
    for (int k = 0; k < n; k++) {
        if (all[3 * k] != color)
            continue;
        int j = m++;
        for (; j > 0 && all[3 * order[j - 1] + 1] > all[3 * k + 1]; j--) /* stable: ties keep parent order */
            order[j] = order[j - 1];
        order[j] = k;
    }
    out->size = m;
    for (int j = 0; j < m; j++) {
        out->world_ranks[j] = all[3 * order[j] + 2];
        if (order[j] == c->rank)
            out->rank = j;
    }
    free(order);
    free(all);
    ncclConfig_t cfg = nccl_config();
    /* The tensor-parallel group's collectives mostly sit on the compute stream, between the GEMMs
     * that need them, so they may take as many CTAs as NCCL can use (llama-1B with TP=2 and SP:
     * 68.3k -> 69.9k tokens/s per GPU, bench/env_sweep.sh); MCC_TP_NCCL_CTAS sets another count. */
    if (out->axes == 1u << IR_AXIS_TP) {
        cfg.minCTAs = cfg.maxCTAs = (int)knob_int(KNOB_TP_NCCL_CTAS);
    }
    nccl_split_comm(c, color, key, &cfg, out);
}

/* A lane (comm.h) of c: the same members, split off with the lane's configuration. Side: 16
 * CTAs, which beside cuBLAS's GEMMs hid 0.73-0.75 of a reduce-scatter's or all-gather's time
 * against 0.42-0.45 with 64 (bench/overlap_bench.c, two H200s). Copy: NCCL's zero-CTA policy,
 * under which all-gathers on a symmetric window run on the copy engines (0.88 hidden, and as fast
 * alone as 64 CTAs). */
static void nccl_lane(rt_comm *c, rt_lane lane, rt_comm *out)
{
    ncclConfig_t cfg = nccl_config();
    if (lane == RT_LANE_SIDE) {
        cfg.minCTAs = cfg.maxCTAs = (int)knob_int(KNOB_SIDE_NCCL_CTAS);
    } else if (lane == RT_LANE_COPY) {
        cfg.CTAPolicy = NCCL_CTA_POLICY_ZERO;
    }
    nccl_split_comm(c, 0, c->rank, &cfg, out);
}

/* Registers the window collectively on c (NCCL_WIN_COLL_SYMMETRIC: every member passes buffers
 * at the same offsets, which rt_parallel checks before calling this). */
static bool nccl_window(rt_comm *c, void *base, size_t bytes)
{
    ncclWindow_t win = NULL;
    ncclResult_t r = ncclCommWindowRegister(nccl_of(c), base, bytes, &win, NCCL_WIN_COLL_SYMMETRIC);
    if (r == ncclSuccess || r == ncclInProgress)
        r = nccl_settle(nccl_of(c), os_now_s() + nccl.timeout_s);
    if (r != ncclSuccess || !win) {
        fprintf(stderr, "train_rank: note: group '%s': ncclCommWindowRegister failed (%s: %s); its collectives keep "
                        "NCCL's kernels\n", c->name, ncclGetErrorString(r), ncclGetLastError(nccl_of(c)));
        return false;
    }
    c->window_handle = win;
    return true;
}

/* ---- point to point (comm.h says why it is built so) ------------------------------------------ */

/* A staging buffer: a send's copy of what it sends, busy until `done` (after its ncclSend). */
typedef struct {
    void *buf;
    size_t cap;
    cudaEvent_t done;
    bool busy;
} nccl_staging;

/* A neighbour: this rank only sends on `out` and only receives on `in` (two members each). */
typedef struct {
    int peer;            /* its group rank */
    ncclComm_t out, in;
    cudaStream_t stream; /* the sends to it */
    cudaEvent_t ready;   /* the caller's stream has made the staging copy */
} nccl_link;

typedef struct {
    nccl_link links[2]; /* next, previous (one when they are the same member) */
    int nlinks;
    nccl_staging *staging;
    int nstaging;
} nccl_p2p;

/* The ring's edges among n members: edge i joins i and (i + 1) % n (n = 2: the one edge 0).
 * Edges of one class share no member, so one ncclCommSplit makes all their communicators for a
 * direction: alternate edges, and for an odd ring the closing edge alone. */
static int p2p_nedges(int n) { return n == 2 ? 1 : n; }
static int p2p_edge_class(int n, int i) { return n % 2 && i == n - 1 ? 2 : i % 2; }

static nccl_link *p2p_link(rt_comm *c, int peer)
{
    nccl_p2p *p = c->p2p;
    for (int k = 0; k < p->nlinks; k++)
        if (p->links[k].peer == peer)
            return &p->links[k];
    rt_comm_fatal("group '%s': no point-to-point link to member %d", c->name, peer); /* comm.c checked it */
}

/* Members of c on edge `color` (NCCL_SPLIT_NOCOLOR: none) get a two-member communicator, lower
 * group rank first. Collective over c. */
static ncclComm_t nccl_p2p_split(rt_comm *c, int color)
{
    ncclConfig_t cfg = nccl_config();
    ncclComm_t comm = NULL;
    double deadline = os_now_s() + nccl.timeout_s;
    nccl_check(c, ncclCommSplit(nccl_of(c), color, c->rank, &comm, &cfg), "ncclCommSplit", RT_COLL_P2P_SETUP);
    if (color != NCCL_SPLIT_NOCOLOR)
        nccl_check(c, nccl_settle(comm, deadline), "ncclCommSplit", RT_COLL_P2P_SETUP);
    nccl_check(c, nccl_settle(nccl_of(c), deadline), "ncclCommSplit (parent)", RT_COLL_P2P_SETUP);
    return color != NCCL_SPLIT_NOCOLOR ? comm : NULL;
}

/* NCCL connects two ranks on their first send/recv, and the connection needs both (NVIDIA/nccl#783):
 * a first send would wait on the host for the peer's first recv. So one element goes each way
 * on every pair communicator here, all in one group (its calls progress together), while every
 * member is in the setup. */
static void nccl_p2p_connect(rt_comm *c)
{
    nccl_p2p *p = c->p2p;
    int32_t *one;
    RT_CUDART_CHECK(cudaMalloc((void **)&one, 2 * sizeof *one));
    RT_CUDART_CHECK(cudaMemset(one, 0, 2 * sizeof *one));
    nccl_check(c, ncclGroupStart(), "ncclGroupStart", RT_COLL_P2P_SETUP);
    for (int k = 0; k < p->nlinks; k++) {
        int pair_peer = p->links[k].peer < c->rank ? 0 : 1;
        nccl_check(c, ncclSend(one, 1, ncclInt32, pair_peer, p->links[k].out, NULL), "ncclSend", RT_COLL_P2P_SETUP);
        nccl_check(c, ncclRecv(one + 1, 1, ncclInt32, pair_peer, p->links[k].in, NULL), "ncclRecv", RT_COLL_P2P_SETUP);
    }
    nccl_check(c, ncclGroupEnd(), "ncclGroupEnd", RT_COLL_P2P_SETUP);
    double deadline = os_now_s() + nccl.timeout_s;
    for (int k = 0; k < p->nlinks; k++) {
        ncclComm_t comms[2] = {p->links[k].out, p->links[k].in};
        for (int j = 0; j < 2; j++)
            if (nccl_settle(comms[j], deadline) != ncclSuccess)
                rt_comm_fatal("connecting group '%s' to its neighbour member %d (world rank %d) did not complete within "
                              "%g s (MCC_COLLECTIVE_TIMEOUT_S): every member must call rt_comm_add_p2p", c->name,
                              p->links[k].peer, c->world_ranks[p->links[k].peer], nccl.timeout_s);
    }
    RT_CUDART_CHECK(cudaStreamSynchronize(NULL));
    RT_CUDART_CHECK(cudaFree(one));
}

/* Every member splits alike (the classes and edges depend on the size only): per class of edges
 * and direction (0: i -> i + 1, 1: i + 1 -> i) one split, this rank in the edge it is on. */
static void nccl_p2p_setup(rt_comm *c)
{
    nccl_p2p *p = calloc(1, sizeof *p);
    int n = c->size, me = c->rank, neighbours[2] = {(me + 1) % n, (me + n - 1) % n};
    if (!p)
        rt_comm_fatal("out of memory for the point-to-point state of group '%s'", c->name);
    c->p2p = p;
    for (int k = 0; n > 1 && k < (n == 2 ? 1 : 2); k++) {
        nccl_link *l = &p->links[p->nlinks++];
        l->peer = neighbours[k];
        RT_CUDART_CHECK(cudaStreamCreateWithFlags(&l->stream, cudaStreamNonBlocking));
        RT_CUDART_CHECK(cudaEventCreateWithFlags(&l->ready, cudaEventDisableTiming));
    }
    for (int cls = 0; n > 1 && cls < 3; cls++)
        for (int dir = 0; dir < 2; dir++) {
            int color = NCCL_SPLIT_NOCOLOR, edges = 0;
            for (int i = 0; i < p2p_nedges(n); i++)
                if (p2p_edge_class(n, i) == cls) {
                    edges++;
                    if (i == me || (i + 1) % n == me)
                        color = i;
                }
            if (!edges)
                continue;
            ncclComm_t comm = nccl_p2p_split(c, color);
            if (!comm)
                continue;
            int from = dir == 0 ? color : (color + 1) % n, to = dir == 0 ? (color + 1) % n : color;
            if (from == me)
                p2p_link(c, to)->out = comm;
            else
                p2p_link(c, from)->in = comm;
        }
    if (n > 1)
        nccl_p2p_connect(c);
}

/* Point to point runs eagerly: a graph would replay its sends' staging and events. */
static void nccl_p2p_no_capture(rt_comm *c, rt_coll_kind what, void *stream)
{
    enum cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (stream)
        RT_CUDART_CHECK(cudaStreamIsCapturing((cudaStream_t)stream, &capture));
    if (capture != cudaStreamCaptureStatusNone)
        rt_comm_fatal("%s on group '%s' inside a CUDA graph capture: point to point runs between graph launches",
                      rt_coll_names[what], c->name);
}

/* A staging buffer of at least `bytes`: the smallest whose send has completed, else a new one. */
static nccl_staging *nccl_p2p_stage(rt_comm *c, size_t bytes)
{
    nccl_p2p *p = c->p2p;
    nccl_staging *best = NULL;
    for (int i = 0; i < p->nstaging; i++) {
        nccl_staging *s = &p->staging[i];
        cudaError_t q = s->busy ? cudaEventQuery(s->done) : cudaSuccess;
        if (q != cudaSuccess && q != cudaErrorNotReady)
            RT_CUDART_CHECK(q);
        if (s->busy && q == cudaSuccess)
            s->busy = false, c->p2p_staged -= s->cap;
        if (!s->busy && s->cap >= bytes && (!best || s->cap < best->cap))
            best = s;
    }
    if (!best) {
        nccl_staging *grown = realloc(p->staging, sizeof *grown * (size_t)(p->nstaging + 1));
        if (!grown)
            rt_comm_fatal("send on group '%s': out of memory", c->name);
        p->staging = grown;
        best = &p->staging[p->nstaging++];
        *best = (nccl_staging){.cap = bytes};
        RT_CUDART_CHECK(cudaMalloc(&best->buf, bytes ? bytes : 1));
        RT_CUDART_CHECK(cudaEventCreateWithFlags(&best->done, cudaEventDisableTiming));
    }
    best->busy = true;
    c->p2p_staged += best->cap;
    return best;
}

/* The copy in the caller's stream order, then the ncclSend on the link's stream after it: the
 * caller's stream never waits for the receiver. */
static void nccl_send(rt_comm *c, const void *buf, size_t count, ir_dtype dt, int peer, void *stream)
{
    nccl_p2p_no_capture(c, RT_COLL_SEND, stream);
    nccl_link *l = p2p_link(c, peer);
    size_t bytes = count * ir_dtype_size(dt);
    nccl_staging *s = nccl_p2p_stage(c, bytes);
    RT_CUDART_CHECK(cudaMemcpyAsync(s->buf, buf, bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)stream));
    RT_CUDART_CHECK(cudaEventRecord(l->ready, (cudaStream_t)stream));
    RT_CUDART_CHECK(cudaStreamWaitEvent(l->stream, l->ready, 0));
    nccl_check(c, ncclSend(s->buf, count, nccl_type(dt), peer < c->rank ? 0 : 1, l->out, l->stream), "ncclSend",
               RT_COLL_SEND);
    nccl_check(c, nccl_settle(l->out, os_now_s() + nccl.timeout_s), "ncclSend", RT_COLL_SEND);
    RT_CUDART_CHECK(cudaEventRecord(s->done, l->stream));
    nccl_track_op((nccl_pending){.c = c, .comm = l->out, .peer = peer, .seq = c->p2p_sent[peer], .coll = RT_COLL_SEND},
                  l->stream);
}

static void nccl_recv(rt_comm *c, void *buf, size_t count, ir_dtype dt, int peer, void *stream)
{
    nccl_p2p_no_capture(c, RT_COLL_RECV, stream);
    nccl_link *l = p2p_link(c, peer);
    nccl_check(c, ncclRecv(buf, count, nccl_type(dt), peer < c->rank ? 0 : 1, l->in, (cudaStream_t)stream), "ncclRecv",
               RT_COLL_RECV);
    nccl_check(c, nccl_settle(l->in, os_now_s() + nccl.timeout_s), "ncclRecv", RT_COLL_RECV);
    nccl_track_op((nccl_pending){.c = c, .comm = l->in, .peer = peer, .seq = c->p2p_recvd[peer], .coll = RT_COLL_RECV},
                  stream);
}

/* Waits for every send (the watchdog bounds each) and frees the staging: cudaFree waits for the
 * whole GPU, which the end of an iteration does anyway. */
static void nccl_p2p_flush(rt_comm *c, void *stream)
{
    nccl_p2p *p = c->p2p;
    for (int i = 0; i < p->nstaging; i++) {
        RT_CUDART_CHECK(cudaEventSynchronize(p->staging[i].done));
        RT_CUDART_CHECK(cudaFree(p->staging[i].buf));
        RT_CUDART_CHECK(cudaEventDestroy(p->staging[i].done));
    }
    free(p->staging);
    p->staging = NULL, p->nstaging = 0, c->p2p_staged = 0;
}

/* On a timeout: the pair communicators too, so that their kernels let go of the GPU. */
static void nccl_p2p_abort(rt_comm *c)
{
    nccl_p2p *p = c->p2p;
    for (int k = 0; p && k < p->nlinks; k++) {
        if (p->links[k].out)
            ncclCommAbort(p->links[k].out);
        if (p->links[k].in)
            ncclCommAbort(p->links[k].in);
    }
}

static void nccl_p2p_free(rt_comm *c)
{
    nccl_p2p *p = c->p2p;
    if (!p)
        return;
    nccl_p2p_flush(c, NULL);
    for (int k = 0; k < p->nlinks; k++) {
        nccl_link *l = &p->links[k];
        ncclComm_t comms[2] = {l->out, l->in};
        for (int j = 0; j < 2; j++) {
            if (!comms[j])
                continue;
            nccl_check(c, ncclCommFinalize(comms[j]), "ncclCommFinalize", RT_COLL_FREE);
            nccl_check(c, nccl_settle(comms[j], os_now_s() + nccl.timeout_s), "ncclCommFinalize", RT_COLL_FREE);
            ncclCommDestroy(comms[j]);
        }
        cudaStreamDestroy(l->stream);
        cudaEventDestroy(l->ready);
    }
    free(p);
    c->p2p = NULL;
}

static void nccl_free(rt_comm *c)
{
    nccl_drain();
    nccl_p2p_free(c);
    for (int i = 0; i < nccl.ngroups; i++)
        if (nccl.groups[i] == c)
            nccl.groups[i] = nccl.groups[--nccl.ngroups];
    if (c->window_handle)
        ncclCommWindowDeregister(nccl_of(c), (ncclWindow_t)c->window_handle);
    nccl_check(c, ncclCommFinalize(nccl_of(c)), "ncclCommFinalize", RT_COLL_FREE);
    nccl_check(c, nccl_settle(nccl_of(c), os_now_s() + nccl.timeout_s), "ncclCommFinalize", RT_COLL_FREE);
    ncclCommDestroy(nccl_of(c));
    if (c->is_world) {
        nccl.stop = 1;
        pthread_join(nccl.watchdog, NULL);
        for (int i = 0; i < NCCL_RING; i++)
            cudaEventDestroy(nccl.ring[i].done);
        cudaFree(nccl_counts.dev);
        nccl_counts.dev = NULL, nccl_counts.bytes = 0;
    }
}

static void nccl_group_begin(rt_comm *c)
{
    nccl_check(c, ncclGroupStart(), "ncclGroupStart", RT_COLL_GROUP);
}

/* The group's collectives launch here; the watchdog tracks them as one (the events the members
 * recorded before the launch are done early, which only loosens their deadlines). */
static void nccl_group_end(rt_comm *c, void *stream)
{
    nccl_enqueued(c, ncclGroupEnd(), "ncclGroupEnd", RT_COLL_GROUP, stream);
}

static const rt_comm_ops nccl_ops = {nccl_all_reduce, nccl_all_gather, nccl_reduce_scatter, nccl_broadcast,
                                     nccl_barrier,    nccl_split,      nccl_free,           nccl_group_begin,
                                     nccl_group_end,  nccl_lane,       nccl_window,         nccl_all_to_all,
                                     nccl_p2p_setup,  nccl_send,       nccl_recv,           nccl_p2p_flush,
                                     nccl_all_to_all_counts, nccl_all_to_all_v, nccl_ring_shift};

/* The unique id every rank must share: over `bootstrap` when given, else derived from
 * NCCL_COMM_ID (set here from MASTER_ADDR/MASTER_PORT when the user has not). */
static bool nccl_unique_id(const rt_rank_env *e, rt_comm *bootstrap, ncclUniqueId *id, char *err, size_t errlen)
{
    _Static_assert(sizeof(ncclUniqueId) % sizeof(int32_t) == 0, "the id is broadcast as i32");
    if (bootstrap) {
        if (e->rank == 0 && ncclGetUniqueId(id) != ncclSuccess) {
            snprintf(err, errlen, "ncclGetUniqueId failed: %s", ncclGetLastError(NULL));
            return false;
        }
        rt_broadcast(bootstrap, id, sizeof *id / sizeof(int32_t), IR_I32, 0, NULL);
        return true;
    }
    if (!getenv("NCCL_COMM_ID")) {
        if (!e->master_addr || !e->master_port) {
            snprintf(err, errlen, "%d ranks (%s) but no way to find rank 0: set MASTER_ADDR and MASTER_PORT (torchrun "
                     "does), or NCCL_COMM_ID=host:port, or launch with mpirun", e->world_size, e->launcher);
            return false;
        }
        char v[300];
        /* torchrun's agent serves its own store on MASTER_PORT: NCCL takes the next port */
        snprintf(v, sizeof v, "%s:%d", e->master_addr, e->master_port + (getenv("TORCHELASTIC_RUN_ID") ? 1 : 0));
        setenv("NCCL_COMM_ID", v, 1);
    }
    if (ncclGetUniqueId(id) != ncclSuccess) {
        snprintf(err, errlen, "ncclGetUniqueId with NCCL_COMM_ID=%s failed: %s", getenv("NCCL_COMM_ID"),
                 ncclGetLastError(NULL));
        return false;
    }
    return true;
}

/* Starts the watchdog and its events once per process, on `device`. */
static bool nccl_start_watchdog(int device, char *err, size_t errlen)
{
    nccl.device = device;
    nccl.timeout_s = rt_collective_timeout_s();
    for (int i = 0; i < NCCL_RING; i++)
        if (cudaEventCreateWithFlags(&nccl.ring[i].done, cudaEventDisableTiming) != cudaSuccess) {
            snprintf(err, errlen, "cudaEventCreate failed on GPU %d", device);
            return false;
        }
    nccl.stop = 0;
    atexit(nccl_atexit);
    if (pthread_create(&nccl.watchdog, NULL, nccl_watchdog, NULL)) {
        snprintf(err, errlen, "cannot start the NCCL watchdog thread");
        return false;
    }
    return true;
}

rt_comm *rt_comm_world_nccl(const rt_rank_env *e, int device, rt_comm *bootstrap, char *err, size_t errlen)
{
    ncclUniqueId id;
    if (cudaSetDevice(device) != cudaSuccess) {
        snprintf(err, errlen, "rank %d: no GPU %d (LOCAL_RANK %d of %d on this node): check CUDA_VISIBLE_DEVICES and "
                 "the number of ranks per node", e->rank, device, e->local_rank, e->local_world);
        return NULL;
    }
    if (!nccl_unique_id(e, bootstrap, &id, err, errlen) || !nccl_start_watchdog(device, err, errlen))
        return NULL;
    ncclConfig_t cfg = nccl_config();
    ncclComm_t comm;
    ncclResult_t r = ncclCommInitRankConfig(&comm, e->world_size, id, e->rank, &cfg);
    if (r == ncclSuccess || r == ncclInProgress)
        r = nccl_settle(comm, os_now_s() + nccl.timeout_s);
    if (r != ncclSuccess) {
        snprintf(err, errlen, "NCCL init of rank %d of %d %s: %s; check that every rank started and that rank 0's "
                 "address (NCCL_COMM_ID=%s) is reachable",
                 e->rank, e->world_size, r == ncclInProgress ? "timed out (MCC_COLLECTIVE_TIMEOUT_S)" : "failed",
                 r == ncclInProgress ? "not every rank joined" : ncclGetErrorString(r),
                 getenv("NCCL_COMM_ID") ? getenv("NCCL_COMM_ID") : "(bootstrap communicator)");
        if (r == ncclInProgress)
            ncclCommAbort(comm);
        return NULL;
    }
    rt_comm *c = rt_comm_new_world(&nccl_ops, comm, e->rank, e->world_size);
    nccl_register(c);
    return c;
}
