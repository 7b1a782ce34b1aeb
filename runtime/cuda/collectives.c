/* collectives.c — the CUDA launchers of the collective ops: NCCL on the device's stream, over
 * the communicator of the op's mesh axis (runtime/parallel.c). One rank along an axis: identity.
 * Those that are one on every device are runtime/collectives.c's. */
#include "cuda_ctx.h"
#include "runtime/collectives.h"
#include "runtime/parallel.h"

#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

void cuda_ALL_REDUCE(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    rt_collective_all_reduce(c, &rt_cuda_device, rt_cuda_stream(cx));
}

void cuda_REDUCE_SCATTER(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    rt_collective_reduce_scatter(c, &rt_cuda_device, rt_cuda_stream(cx));
}

void cuda_ALL_GATHER(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    rt_collective_all_gather(c, &rt_cuda_device, rt_cuda_stream(cx));
}

void cuda_LOCAL_SHARD(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    rt_collective_local_shard(c, &rt_cuda_device, rt_cuda_stream(cx));
}

void cuda_LOCAL_SLICE_SEQ(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    rt_collective_local_slice_seq(c, &rt_cuda_device, rt_cuda_stream(cx));
}

/* --- vocab-parallel cross entropy (kernels_templates/vocab_parallel.cuh) --- */

static const char *float_name(const ir_type *t) { return t->dtype == IR_BF16 ? "bf16" : "f32"; }

static void rows_launch(rt_cuda_ctx *cx, const char *stem, const ir_type *logits, long long N, void **params)
{
    char name[64];
    snprintf(name, sizeof name, "%s_%s", stem, float_name(logits));
    rt_cuda_launch(cx, name, (unsigned)(N < 65535 ? N : 65535), 1, 1, 256, 0, params);
}

static long long rows_of(const ir_type *t) { return ir_numel(t) / t->dims[t->ndim - 1]; }

void cuda_CE_ROW_MAX(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    void *m = c->res[0], *x = c->args[0];
    long long N = rows_of(c->arg_types[0]), V = c->arg_types[0]->dims[c->arg_types[0]->ndim - 1];
    void *p[] = {&m, &x, &N, &V};
    rows_launch(cx, "mcc_ce_row_max", c->arg_types[0], N, p);
}

void cuda_CE_ROW_STATS(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    void *st = c->res[0], *x = c->args[0], *targets = c->args[1], *gmax = c->args[2];
    long long N = rows_of(c->arg_types[0]), V = c->arg_types[0]->dims[c->arg_types[0]->ndim - 1];
    long long start = (long long)c->in->attr[IR_ATTR_CE_ROW_STATS_VOCAB_START];
    void *p[] = {&st, &x, &targets, &gmax, &N, &V, &start};
    rows_launch(cx, "mcc_ce_row_stats", c->arg_types[0], N, p);
}

void cuda_CE_LOSS(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    void *loss = c->res[0], *st = c->args[0], *gmax = c->args[1];
    long long N = ir_numel(c->arg_types[1]);
    void *p[] = {&loss, &st, &gmax, &N};
    rt_cuda_launch(cx, "mcc_ce_loss_f32", 1, 1, 1, 1024, 0, p);
}

void cuda_CE_GRAD_SHARDED(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    void *dx = c->res[0], *dloss = c->args[0], *x = c->args[1], *targets = c->args[2], *gmax = c->args[3],
         *st = c->args[4];
    long long N = rows_of(c->arg_types[1]), V = c->arg_types[1]->dims[c->arg_types[1]->ndim - 1];
    long long start = (long long)c->in->attr[IR_ATTR_CE_GRAD_SHARDED_VOCAB_START];
    void *p[] = {&dx, &dloss, &x, &targets, &gmax, &st, &N, &V, &start};
    rows_launch(cx, "mcc_ce_grad_sharded", c->arg_types[1], N, p);
}

/* --- sequence parallelism: [B,T,R] as n rank slices [B,T/n,R] --- */

/* Batch row b of the whole x[B,T,R] is one contiguous [T,R], and its rank slices [T/n,R] lie in
 * rank order inside it, while row b of a slice r[B,T/n,R] is contiguous too: so one collective
 * per batch row moves the data in place, with no regrouping copies and no scratch; the rows'
 * collectives form one NCCL group, launched as one. Split by batch rows (attribute batch = 1),
 * rank r's [B/n,T,R] is one contiguous block of the whole: one collective. */

/* The o-rows of a sequence collective (B, or 1 split by batch rows) and its local block's bytes
 * per o-row. */
static size_t seq_rows(const rt_kernel_call *c, const ir_type *local, size_t *slab)
{
    size_t rows = (size_t)ir_seq_orows(c->in, local);
    *slab = ir_bytes(local) / rows;
    return rows;
}

/* x[B,T/n,R] -> r[B,T,R]. overlap=1 (comm_overlap.c): on the comm stream, and there on the
 * group's copy lane when the arena is its window (the copy engines move the rows, no SMs taken;
 * each row goes out alone, as NCCL takes the copy engines for one collective at a time). */
void cuda_ALL_GATHER_SEQ(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    rt_cuda_gather_seq(cx, c, ir_overlapped(c->in) ? rt_cuda_comm_fork(cx) : rt_cuda_stream(cx));
}

void rt_cuda_gather_seq(rt_cuda_ctx *cx, const rt_kernel_call *c, CUstream stream)
{
    rt_comm *comm = rt_parallel_comm((ir_axis)c->in->attr[IR_ATTR_AXIS]);
    size_t slab, B = seq_rows(c, c->arg_types[0], &slab);
    if (!comm) {
        rt_cuda_device.copy2d(rt_cuda_stream(cx), c->res[0], slab, c->args[0], slab, slab * B, 1);
        return;
    }
    size_t n = (size_t)rt_comm_size(comm);
    /* the copy engines only beside computation (on the comm stream): alone, NCCL's kernels are faster */
    bool beside = stream == rt_cuda_comm_stream(cx);
    rt_comm *lane = beside ? rt_comm_copy_lane_for(comm, c->args[0], slab * B, c->res[0], slab * B * n) : comm;
    bool grouped = lane == comm;
    if (grouped)
        rt_comm_group_begin(lane);
    for (size_t b = 0; b < B; b++)
        rt_all_gather(lane, (const char *)c->args[0] + b * slab, (char *)c->res[0] + b * slab * n, slab,
                      IR_FP8E4M3 /* a 1-byte type: bytes */, stream);
    if (grouped)
        rt_comm_group_end(lane, stream);
}

/* A reduce-scatter of one block per rank (x[n blocks] -> r, this rank's block of the sum) as an
 * exchange: an all-to-all of the blocks into the group's exchange buffer, on the copy engines,
 * then this rank's block plus what came, summed. Both on the comm stream, which serializes the
 * buffer's uses; for a collective beside computation (overlap=1): alone, a copy-engine
 * collective's fixed synchronization makes it slower than NCCL's kernels. False, and nothing
 * enqueued, when the group's copy lane has no exchange buffer or x outside its window. */
static bool exchange_scatter(rt_cuda_ctx *cx, const rt_kernel_call *c, rt_comm *comm)
{
    const ir_type *t = c->res_types[0];
    size_t n = (size_t)rt_comm_size(comm), me = (size_t)rt_comm_rank(comm), block = ir_bytes(t);
    char *came = rt_parallel_exchange((ir_axis)c->in->attr[IR_ATTR_AXIS], block * n);
    rt_comm *lane = came ? rt_comm_copy_lane_for(comm, c->args[0], block * n, came, block * n) : comm;
    if (lane == comm)
        return false;
    const char *x = c->args[0];
    char *r = c->res[0];
    rt_all_to_all(lane, x, came, (size_t)ir_numel(t), t->dtype, rt_cuda_comm_fork(cx));
    rt_cuda_launch_on_comm(cx, true);
    rt_cuda_add(cx, c, r, x + me * block, came + (me == 0 ? 1 : 0) * block, t);
    for (size_t q = me == 0 ? 2 : 1; q < n; q++)
        if (q != me)
            rt_cuda_accumulate(cx, c, r, came + q * block, t);
    rt_cuda_launch_on_comm(cx, false);
    return true;
}

/* x[B,T,R] partial -> r[B,T/n,R]: this rank's slice of the sum. overlap=1 (comm_overlap.c): on
 * the comm stream and the group's side lane, joined by the device before its result's first
 * reader. Split by batch rows (one block per rank), on the copy lane: exchange_scatter. */
void cuda_REDUCE_SCATTER_SEQ(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    rt_comm *comm = rt_parallel_comm((ir_axis)c->in->attr[IR_ATTR_AXIS]);
    const ir_type *t = c->res_types[0];
    size_t slab, B = seq_rows(c, t, &slab), count = (size_t)ir_numel(t) / B;
    if (!comm) {
        rt_cuda_device.copy2d(rt_cuda_stream(cx), c->res[0], slab, c->args[0], slab, slab * B, 1);
        return;
    }
    if (B == 1 && ir_overlapped(c->in) && exchange_scatter(cx, c, comm))
        return;
    size_t n = (size_t)rt_comm_size(comm);
    bool overlap = ir_overlapped(c->in);
    CUstream stream = overlap ? rt_cuda_comm_fork(cx) : rt_cuda_stream(cx);
    rt_comm *lane = rt_comm_lane(comm, overlap ? RT_LANE_SIDE : RT_LANE_MAIN);
    rt_comm_group_begin(lane);
    for (size_t b = 0; b < B; b++)
        rt_reduce_scatter(lane, (const char *)c->args[0] + b * slab * n, (char *)c->res[0] + b * slab, count, t->dtype,
                          RT_SUM, stream);
    rt_comm_group_end(lane, stream);
}

/* A bucket reduced beside the backward, on the copy engines, run by run (rt_parallel_bucket_run,
 * padded): the run's n blocks exchanged into the group's exchange buffer by an all-to-all, this
 * rank's block summed with the n-1 that came (the only SM work), and the summed blocks
 * all-gathered back in place. All on the comm stream, which serializes the exchange buffer's
 * uses. False, and nothing enqueued, unless every run lies in the copy lane's window (the global
 * slab: program.c), fits the exchange buffer and splits into n blocks of whole 16-byte units. */
static bool exchange_all_reduce(rt_cuda_ctx *cx, const rt_kernel_call *c, rt_comm *comm)
{
    ir_axis axis = (ir_axis)c->in->attr[IR_ATTR_AXIS];
    size_t n = (size_t)rt_comm_size(comm), me = (size_t)rt_comm_rank(comm), span;
    rt_comm *lane = comm;
    for (int first = 0, next; first < c->nargs; first = next) {
        next = rt_parallel_bucket_run(c, first, true, &span);
        char *came = rt_parallel_exchange(axis, span);
        lane = came ? rt_comm_copy_lane_for(comm, c->args[first], span, came, span) : comm;
        if (lane == comm || span % (n * 16))
            return false;
    }
    CUstream stream = rt_cuda_comm_fork(cx);
    for (int first = 0, next; first < c->nargs; first = next) {
        next = rt_parallel_bucket_run(c, first, true, &span);
        ir_dtype dt = c->arg_types[first]->dtype;
        size_t block = span / n;
        ir_type t = {.dtype = dt, .ndim = 1, .dims = {(int64_t)(block / ir_dtype_size(dt))}};
        char *x = c->args[first], *came = rt_parallel_exchange(axis, span);
        rt_all_to_all(lane, x, came, (size_t)t.dims[0], dt, stream);
        rt_cuda_launch_on_comm(cx, true);
        for (size_t q = 0; q < n; q++)
            if (q != me)
                rt_cuda_accumulate(cx, c, x + me * block, came + q * block, &t);
        rt_cuda_launch_on_comm(cx, false);
        rt_all_gather(lane, x + me * block, x, (size_t)t.dims[0], dt, stream);
    }
    return true;
}

/* (dst globals...): each := its sum over the axis's ranks, a bucket at a time. overlap=1 (inside
 * the backward, --overlap-grad-reduce): on the comm stream, so the computation after it does not
 * wait for it; the function's end does; on the copy lane where the global slab is its window
 * (exchange_all_reduce), else the side lane. Only globals are touched, which nothing else in the
 * function reads or writes after the bucket. */
void cuda_ALL_REDUCE_INPLACE(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    bool overlap = ir_on_comm_stream(c->in);
    rt_comm *comm = rt_parallel_comm((ir_axis)c->in->attr[IR_ATTR_AXIS]);
    if (!comm || (overlap && exchange_all_reduce(cx, c, comm)))
        return;
    rt_parallel_all_reduce_bucket(c, overlap ? RT_LANE_SIDE : RT_LANE_MAIN,
                                  overlap ? rt_cuda_comm_fork(cx) : rt_cuda_stream(cx));
}

static CUdeviceptr dptr(const void *p) { return (CUdeviceptr)(uintptr_t)p; }

/* (x[R,*], splits[n,S]) -> (r[rows,*], came[n,S]): the splits come to the host (a wait on the
 * stream: ops.def's HOST_WAIT keeps the function out of CUDA graphs), rt_all_to_all_v on the
 * stream (one rank: a device copy), came goes back up, r's rows past those received are zeroed
 * unless unread_room (every reader a run sort: at DeepSeek-V3's ep 64 the room is 31/32 of r).
 * overlap=1 (comm_overlap.c, moe_shared_expert_overlap): all but the splits' copy on the comm stream
 * and the axis's side lane, beside the work the compute stream has before the results' first reader. */
void cuda_ALL_TO_ALL_V(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    const ir_type *xt = c->arg_types[0], *st = c->arg_types[1];
    int64_t n = st->dims[0], S = st->dims[1], rows = c->res_types[0]->dims[0];
    size_t row = (size_t)(ir_numel(xt) / xt->dims[0]), es = ir_dtype_size(xt->dtype), sb = ir_bytes(st);
    bool overlap = ir_overlapped(c->in);
    CUstream s = rt_cuda_stream(cx);
    int64_t *splits = malloc(sizeof(int64_t) * 2 * (size_t)(n * S) + sb), *came = splits + n * S;
    void *host = came + n * S;
    RT_CU_CHECK(cuMemcpyDtoHAsync(host, dptr(c->args[1]), sb, s));
    RT_CU_CHECK(cuStreamSynchronize(s));
    rt_parallel_a2av_splits(c->in, st, host, xt->dims[0], splits);
    rt_comm *comm = rt_parallel_comm_for(c->in, n);
    if (overlap)
        s = rt_cuda_comm_fork(cx);
    size_t got = comm ? rt_all_to_all_v(rt_comm_lane(comm, overlap ? RT_LANE_SIDE : RT_LANE_MAIN), c->args[0], splits,
                                        c->res[0], came, (int)S, (size_t)rows, row, xt->dtype, s)
                      : rt_parallel_a2av_self(c->in, splits, n * S, rows, came);
    if (!comm && got)
        rt_cuda_device.copy(s, c->res[0], c->args[0], got * row * es);
    if (got < (size_t)rows && c->in->attr[IR_ATTR_ALL_TO_ALL_V_UNREAD_ROOM] == 0)
        RT_CU_CHECK(cuMemsetD8Async(dptr(c->res[0]) + got * row * es, 0, ((size_t)rows - got) * row * es, s));
    rt_parallel_a2av_store(st, came, host);
    RT_CU_CHECK(cuMemcpyHtoDAsync(dptr(c->res[1]), host, sb, s)); /* pageable: staged before it returns */
    free(splits);
}

/* x -> r: x of the previous rank of the axis's ring (rt_ring_shift: NCCL's ncclSend to the next
 * and ncclRecv from the previous rank in one group). overlap=1 (the shard rules over cp: ring
 * attention's k, v and their gradients): on the comm stream and its side lane, as the sequence
 * collectives, beside the attention piece computed before the result's first use. */
void cuda_RING_SHIFT(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    rt_comm *comm = rt_parallel_comm((ir_axis)c->in->attr[IR_ATTR_AXIS]);
    bool overlap = ir_overlapped(c->in);
    CUstream stream = overlap ? rt_cuda_comm_fork(cx) : rt_cuda_stream(cx);
    if (comm)
        rt_ring_shift(rt_comm_lane(comm, overlap ? RT_LANE_SIDE : RT_LANE_MAIN), c->args[0], c->res[0],
                      (size_t)ir_numel(c->arg_types[0]), c->arg_types[0]->dtype, stream);
    else
        rt_cuda_device.copy(stream, c->res[0], c->args[0], ir_bytes(c->arg_types[0]));
}

/* Ulysses' exchange (rt_parallel_cp_all_to_all): strided copies into and out of scratch around one
 * all-to-all, all on the compute stream; one rank: x as it is. */
void cuda_CP_ALL_TO_ALL(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    rt_comm *comm = rt_parallel_comm((ir_axis)c->in->attr[IR_ATTR_AXIS]);
    size_t bytes = ir_bytes(c->arg_types[0]);
    CUstream s = rt_cuda_stream(cx);
    if (!comm)
        rt_cuda_device.copy(s, c->res[0], c->args[0], bytes);
    else
        rt_parallel_cp_all_to_all(c, comm, rt_cuda_scratch(cx, 2 * bytes), &rt_cuda_device, s);
}
