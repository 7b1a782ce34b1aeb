/* comm_staged.c — collectives and point to point on device buffers through a host
 * communicator (MPI): each call waits for its stream, copies the device buffer into page-locked
 * host memory, runs the host backend's call, and copies the result back. For ranks that share a
 * GPU, which NCCL refuses ("Duplicate GPU detected"): a pipeline's stages run back to back on one
 * GPU, or a tensor-parallel plan is checked on one GPU against the CPU. It is slow (every
 * collective is a round trip through the host and waits on the host), so it is a test path, not a
 * way to train; cuda_device.c keeps functions with collectives out of CUDA graphs under it
 * (waiting on the host cannot be captured).
 *
 * Written here rather than taken from CUDA-aware MPI: Open MPI's CUDA support is a build option
 * that Debian's and Ubuntu's packages leave out, and the copies it would make are these. */
#include "cuda_ctx.h"
#include "runtime/comm_backend.h"

#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>

/* Page-locked staging, grown as needed; [0] what goes out, [1] what comes in. Ranks are
 * single-threaded callers of comm (comm.h), so one pair serves every group. */
static struct {
    void *buf[2];
    size_t bytes[2];
} pinned;

static void *staging(int which, size_t bytes)
{
    if (bytes > pinned.bytes[which]) {
        if (pinned.buf[which])
            RT_CUDART_CHECK(cudaFreeHost(pinned.buf[which]));
        RT_CUDART_CHECK(cudaMallocHost(&pinned.buf[which], bytes));
        pinned.bytes[which] = bytes;
    }
    return pinned.buf[which];
}

static rt_comm *host_of(rt_comm *c) { return c->impl; }

/* Device -> host after the stream's earlier work; host -> device, done when it returns. */
static void *down(int which, const void *dev, size_t bytes, void *stream)
{
    void *host = staging(which, bytes);
    RT_CUDART_CHECK(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, (cudaStream_t)stream));
    RT_CUDART_CHECK(cudaStreamSynchronize((cudaStream_t)stream));
    return host;
}

static void up(void *dev, const void *host, size_t bytes, void *stream)
{
    RT_CUDART_CHECK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, (cudaStream_t)stream));
    RT_CUDART_CHECK(cudaStreamSynchronize((cudaStream_t)stream));
}

static void staged_all_reduce(rt_comm *c, void *buf, size_t count, ir_dtype dt, rt_reduce_op op, void *stream)
{
    size_t bytes = count * ir_dtype_size(dt);
    void *host = down(0, buf, bytes, stream);
    rt_all_reduce(host_of(c), host, count, dt, op, NULL);
    up(buf, host, bytes, stream);
}

static void staged_all_gather(rt_comm *c, const void *send, void *recv, size_t count, ir_dtype dt, void *stream)
{
    size_t bytes = count * ir_dtype_size(dt);
    void *out = down(0, send, bytes, stream), *in = staging(1, bytes * (size_t)c->size);
    rt_all_gather(host_of(c), out, in, count, dt, NULL);
    up(recv, in, bytes * (size_t)c->size, stream);
}

static void staged_reduce_scatter(rt_comm *c, const void *send, void *recv, size_t count, ir_dtype dt,
                                  rt_reduce_op op, void *stream)
{
    size_t bytes = count * ir_dtype_size(dt);
    void *out = down(0, send, bytes * (size_t)c->size, stream), *in = staging(1, bytes);
    rt_reduce_scatter(host_of(c), out, in, count, dt, op, NULL);
    up(recv, in, bytes, stream);
}

static void staged_all_to_all(rt_comm *c, const void *send, void *recv, size_t count, ir_dtype dt, void *stream)
{
    size_t bytes = count * ir_dtype_size(dt) * (size_t)c->size;
    void *out = down(0, send, bytes, stream), *in = staging(1, bytes);
    rt_all_to_all(host_of(c), out, in, count, dt, NULL);
    up(recv, in, bytes, stream);
}

static void staged_ring_shift(rt_comm *c, const void *send, void *recv, size_t count, ir_dtype dt, void *stream)
{
    size_t bytes = count * ir_dtype_size(dt);
    void *out = down(0, send, bytes, stream), *in = staging(1, bytes);
    rt_ring_shift(host_of(c), out, in, count, dt, NULL);
    up(recv, in, bytes, stream);
}

/* The counts are host memory already. */
static void staged_all_to_all_counts(rt_comm *c, const int64_t *send, int64_t *recv, int n, void *stream)
{
    rt_all_to_all(host_of(c), send, recv, (size_t)n, IR_I64, NULL);
}

static void staged_all_to_all_v(rt_comm *c, const void *send, const size_t *send_counts, void *recv,
                                const size_t *recv_counts, ir_dtype dt, void *stream)
{
    size_t es = ir_dtype_size(dt), sent = 0, came = 0;
    for (int q = 0; q < c->size; q++)
        sent += send_counts[q], came += recv_counts[q];
    void *out = down(0, send, sent * es, stream), *in = staging(1, came * es);
    rt_comm *h = host_of(c);
    h->seq++; /* the host backend's half, after the counts comm.c has checked */
    h->ops->all_to_all_v(h, out, send_counts, in, recv_counts, dt, NULL);
    up(recv, in, came * es, stream);
}

static void staged_broadcast(rt_comm *c, void *buf, size_t count, ir_dtype dt, int root, void *stream)
{
    size_t bytes = count * ir_dtype_size(dt);
    void *host = down(0, buf, bytes, stream);
    rt_broadcast(host_of(c), host, count, dt, root, NULL);
    up(buf, host, bytes, stream);
}

/* Every member has entered once this rank's device work is done too (as NCCL's barrier). */
static void staged_barrier(rt_comm *c)
{
    RT_CUDART_CHECK(cudaDeviceSynchronize());
    rt_barrier(host_of(c));
}

static void staged_split(rt_comm *c, int color, int key, rt_comm *out)
{
    rt_comm *g = rt_comm_split(host_of(c), color, key, out->name);
    out->impl = g;
    out->rank = g->rank;
    out->size = g->size;
    for (int i = 0; i < g->size; i++)
        out->world_ranks[i] = g->world_ranks[i];
}

static void staged_free(rt_comm *c)
{
    rt_comm_free(host_of(c));
    if (c->is_world)
        for (int i = 0; i < 2; i++)
            if (pinned.buf[i]) {
                cudaFreeHost(pinned.buf[i]);
                pinned.buf[i] = NULL, pinned.bytes[i] = 0;
            }
}

static void staged_p2p_setup(rt_comm *c) { rt_comm_add_p2p(host_of(c)); }

/* The host backend copies what it sends (comm.h: a send never waits), so the staging is free
 * again when this returns. */
static void staged_send(rt_comm *c, const void *buf, size_t count, ir_dtype dt, int peer, void *stream)
{
    void *host = down(0, buf, count * ir_dtype_size(dt), stream);
    rt_send(host_of(c), host, count, dt, peer, NULL);
    c->p2p_staged = rt_p2p_staged_bytes(host_of(c));
}

static void staged_recv(rt_comm *c, void *buf, size_t count, ir_dtype dt, int peer, void *stream)
{
    size_t bytes = count * ir_dtype_size(dt);
    void *host = staging(1, bytes);
    rt_recv(host_of(c), host, count, dt, peer, NULL);
    up(buf, host, bytes, stream);
}

static void staged_p2p_flush(rt_comm *c, void *stream)
{
    rt_p2p_flush(host_of(c), NULL);
    c->p2p_staged = rt_p2p_staged_bytes(host_of(c));
}

static const rt_comm_ops staged_ops = {staged_all_reduce, staged_all_gather, staged_reduce_scatter,
                                       staged_broadcast,  staged_barrier,    staged_split,
                                       staged_free,       NULL,              NULL, /* each call at once */
                                       NULL /* one lane */, NULL /* no windows */, staged_all_to_all,
                                       staged_p2p_setup,  staged_send,       staged_recv,
                                       staged_p2p_flush,  staged_all_to_all_counts, staged_all_to_all_v,
                                       staged_ring_shift};

rt_comm *rt_comm_world_staged(rt_comm *host_world)
{
    return rt_comm_new_world(&staged_ops, host_world, host_world->rank, host_world->size);
}
