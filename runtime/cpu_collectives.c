/* cpu_collectives.c — the CPU kernels of the collective ops: MPI between CPU ranks, over the
 * communicator of the op's mesh axis (runtime/parallel.c). One rank along an axis: identity. Those
 * that are one on every device are collectives.c's. */
#include "runtime/collectives.h"
#include "runtime/cpu_kernels.h"
#include "runtime/parallel.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

void cpu_ALL_REDUCE(const rt_kernel_call *c) { rt_collective_all_reduce(c, &rt_cpu_device, NULL); }
void cpu_REDUCE_SCATTER(const rt_kernel_call *c) { rt_collective_reduce_scatter(c, &rt_cpu_device, NULL); }
void cpu_ALL_GATHER(const rt_kernel_call *c) { rt_collective_all_gather(c, &rt_cpu_device, NULL); }
void cpu_LOCAL_SHARD(const rt_kernel_call *c) { rt_collective_local_shard(c, &rt_cpu_device, NULL); }
void cpu_LOCAL_SLICE_SEQ(const rt_kernel_call *c) { rt_collective_local_slice_seq(c, &rt_cpu_device, NULL); }

/* x -> r: x of the previous rank of the axis's ring (rt_ring_shift); one rank: x */
void cpu_RING_SHIFT(const rt_kernel_call *c)
{
    rt_comm *comm = rt_parallel_comm((ir_axis)c->in->attr[IR_ATTR_AXIS]);
    if (comm)
        rt_ring_shift(comm, c->args[0], c->res[0], (size_t)ir_numel(c->arg_types[0]), c->arg_types[0]->dtype, NULL);
    else
        memcpy(c->res[0], c->args[0], ir_bytes(c->arg_types[0]));
}

/* Ulysses' exchange (rt_parallel_cp_all_to_all); one rank: x as it is */
void cpu_CP_ALL_TO_ALL(const rt_kernel_call *c)
{
    rt_comm *comm = rt_parallel_comm((ir_axis)c->in->attr[IR_ATTR_AXIS]);
    size_t bytes = ir_bytes(c->arg_types[0]);
    if (!comm) {
        memcpy(c->res[0], c->args[0], bytes);
        return;
    }
    void *scratch = malloc(2 * bytes);
    rt_parallel_cp_all_to_all(c, comm, scratch, &rt_cpu_device, NULL);
    free(scratch);
}

/* (dst globals...): each := its sum over the axis's ranks, a bucket at a time */
void cpu_ALL_REDUCE_INPLACE(const rt_kernel_call *c)
{
    rt_parallel_all_reduce_bucket(c, RT_LANE_MAIN, NULL);
}

/* (x[R,*], splits[n,S]) -> (r[rows,*], came[n,S]): rt_all_to_all_v over the axis (one rank: its
 * own runs), r zero past the rows received; with unread_room (no reader looks past them) NaN there,
 * every byte 0xff, which the GPU leaves as it was, so that a reader of them fails the layout tests. */
void cpu_ALL_TO_ALL_V(const rt_kernel_call *c)
{
    const ir_type *xt = c->arg_types[0], *st = c->arg_types[1];
    int64_t n = st->dims[0], S = st->dims[1], rows = c->res_types[0]->dims[0];
    size_t row = (size_t)(ir_numel(xt) / xt->dims[0]), es = ir_dtype_size(xt->dtype);
    int64_t *splits = malloc(sizeof(int64_t) * 2 * (size_t)(n * S)), *came = splits + n * S;
    rt_parallel_a2av_splits(c->in, st, c->args[1], xt->dims[0], splits);
    rt_comm *comm = rt_parallel_comm_for(c->in, n);
    size_t got = comm ? rt_all_to_all_v(comm, c->args[0], splits, c->res[0], came, (int)S, (size_t)rows, row,
                                        xt->dtype, NULL)
                      : rt_parallel_a2av_self(c->in, splits, n * S, rows, came);
    if (!comm)
        memcpy(c->res[0], c->args[0], got * row * es);
    bool unread = c->in->attr[IR_ATTR_ALL_TO_ALL_V_UNREAD_ROOM] != 0;
    memset((char *)c->res[0] + got * row * es, unread ? 0xff : 0, ((size_t)rows - got) * row * es);
    rt_parallel_a2av_store(st, came, c->res[1]);
    free(splits);
}

/* moe_sort_runs (sort) and moe_unsort_runs: the runs of x[C,*] received rank by rank (came[q,s]
 * rows of run s from rank q, packed) moved to run-by-run order, or back. The rows past them are
 * undefined (the CUDA kernel leaves them unwritten, work by the rows received): here they are NaN
 * (every byte 0xff, a NaN in each float dtype), so that a consumer reading them turns the layout
 * tests' loss and gradients NaN rather than reading zeros by luck. */
static void move_runs(const rt_kernel_call *c, bool sort)
{
    const ir_type *xt = c->arg_types[0], *ct = c->arg_types[1];
    int64_t n = ct->dims[0], S = ct->dims[1], C = xt->dims[0];
    size_t row = ir_bytes(xt) / (size_t)C;
    int64_t *came = malloc(sizeof(int64_t) * (size_t)(2 * n * S)), *at = came + n * S; /* at: (q, s)'s first row, sorted */
    rt_parallel_a2av_splits(c->in, ct, c->args[1], C, came);
    int64_t next = 0;
    for (int64_t s = 0; s < S; s++) {
        int64_t rows = 0;
        for (int64_t q = 0; q < n; q++)
            at[q * S + s] = next, next += came[q * S + s], rows += came[q * S + s];
        if (sort)
            ((int32_t *)c->res[1])[s] = (int32_t)rows;
    }
    const char *x = c->args[0];
    char *r = c->res[0];
    for (int64_t k = 0, from = 0; k < n * S; from += came[k++]) /* from: (q, s)'s first row, received */
        memcpy(r + (size_t)(sort ? at[k] : from) * row, x + (size_t)(sort ? from : at[k]) * row, (size_t)came[k] * row);
    memset(r + (size_t)next * row, 0xff, (size_t)(C - next) * row);
    free(came);
}

void cpu_MOE_SORT_RUNS(const rt_kernel_call *c) { move_runs(c, true); }
void cpu_MOE_UNSORT_RUNS(const rt_kernel_call *c) { move_runs(c, false); }

/* Sequence slices: a [B,T,R] tensor (R: the rest) as n rank slices [B,T/n,R] of the sequence,
 * or with attribute batch = 1 [B/n,T,R] of the batch rows: as [O,S,In] with S the split
 * dimension, O the dimensions before it (B, or none) and In those after, rank r's block of each
 * o-row is [S/n,In]. */
static void seq_dims(const rt_kernel_call *c, const ir_type *t, int64_t *O, int64_t *S, int64_t *In)
{
    int dim = ir_seq_dim(c->in);
    *O = ir_seq_orows(c->in, t);
    *S = t->dims[dim];
    *In = ir_numel(t) / (*O * *S);
}

/* full := every rank's local x (of type xt) in place: block i of every o-row is rank i's. */
static void seq_gather(const rt_kernel_call *c, const ir_type *xt, const void *x, void *full)
{
    rt_comm *comm = rt_parallel_comm((ir_axis)c->in->attr[IR_ATTR_AXIS]);
    int64_t O, Sl, In, n = comm ? rt_comm_size(comm) : 1;
    seq_dims(c, xt, &O, &Sl, &In);
    size_t es = ir_dtype_size(xt->dtype), slab = (size_t)(Sl * In) * es, bytes = ir_bytes(xt);
    char *all = malloc(bytes * (size_t)n); /* [n][O][Sl][In] */
    if (comm)
        rt_all_gather(comm, x, all, bytes, IR_FP8E4M3 /* a 1-byte type: bytes */, NULL);
    else
        memcpy(all, x, bytes);
    for (int64_t o = 0; o < O; o++)
        for (int64_t r = 0; r < n; r++)
            memcpy((char *)full + ((size_t)(o * n + r)) * slab, all + (size_t)r * bytes + (size_t)o * slab, slab);
    free(all);
}

/* r (of type rt) := this rank's block of the sum over the ranks of partial (of type pt). */
static void seq_scatter(const rt_kernel_call *c, const ir_type *pt, const void *partial, const ir_type *rt, void *r)
{
    rt_comm *comm = rt_parallel_comm((ir_axis)c->in->attr[IR_ATTR_AXIS]);
    int64_t O, S, In, n = comm ? rt_comm_size(comm) : 1;
    seq_dims(c, pt, &O, &S, &In);
    size_t es = ir_dtype_size(pt->dtype), slab = (size_t)(S / n * In) * es, block = ir_bytes(rt);
    char *ranked = malloc(block * (size_t)n); /* [n][O][S/n][In]: block r of every o-row together */
    for (int64_t q = 0; q < n; q++)
        for (int64_t o = 0; o < O; o++)
            memcpy(ranked + (size_t)q * block + (size_t)o * slab, (const char *)partial + ((size_t)(o * n + q)) * slab,
                   slab);
    if (comm)
        rt_reduce_scatter(comm, ranked, r, (size_t)ir_numel(rt), pt->dtype, RT_SUM, NULL);
    else
        memcpy(r, ranked, block);
    free(ranked);
}

/* x[.., S/n, ..] -> r: block i of every o-row is rank i's x */
void cpu_ALL_GATHER_SEQ(const rt_kernel_call *c) { seq_gather(c, c->arg_types[0], c->args[0], c->res[0]); }

/* x partial -> r: this rank's block of the sum over the ranks */
void cpu_REDUCE_SCATTER_SEQ(const rt_kernel_call *c)
{
    seq_scatter(c, c->arg_types[0], c->args[0], c->res_types[0], c->res[0]);
}

/* out[M,N] := x[M,K] op(w) + beta out */
static void gemm_w(const rt_kernel_call *c, const void *x, int64_t M, int64_t K, float beta, float *out)
{
    const ir_type *w = c->arg_types[1];
    bool tb = c->in->attr[IR_ATTR_TB] != 0;
    int64_t N = tb ? w->dims[0] : w->dims[1];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, x, K, c->args[1], w->dims[1],
                beta, out, N);
}

/* (x split over the ranks by sequence slices or batch rows, w) -> (r = x gathered, r op(w)) */
void cpu_ALL_GATHER_MATMUL(const rt_kernel_call *c)
{
    const ir_type *full = c->res_types[0];
    seq_gather(c, c->arg_types[0], c->args[0], c->res[0]);
    int64_t K = full->dims[full->ndim - 1];
    gemm_w(c, c->res[0], ir_numel(full) / K, K, 0.0f, c->res[1]);
}

/* (x, w) -> (scratch, r = this rank's block of the sum over the ranks of x op(w)) */
void cpu_MATMUL_REDUCE_SCATTER(const rt_kernel_call *c)
{
    const ir_type *x = c->arg_types[0];
    int64_t K = x->dims[x->ndim - 1];
    gemm_w(c, c->args[0], ir_numel(x) / K, K, 0.0f, c->res[0]);
    ir_type product = *c->res_types[1];
    memcpy(product.dims, x->dims, sizeof product.dims);
    product.dims[product.ndim - 1] = c->res_types[1]->dims[c->res_types[1]->ndim - 1];
    seq_scatter(c, &product, c->res[0], c->res_types[1], c->res[1]);
}

/* (x, w, a) -> (s = x op(w) + a, scratch, r = this rank's block of the sum of s over the ranks) */
void cpu_MATMUL_ADD_REDUCE_SCATTER(const rt_kernel_call *c)
{
    const ir_type *x = c->arg_types[0];
    int64_t K = x->dims[x->ndim - 1];
    memcpy(c->res[0], c->args[2], ir_bytes(c->res_types[0]));
    gemm_w(c, c->args[0], ir_numel(x) / K, K, 1.0f, c->res[0]);
    seq_scatter(c, c->res_types[0], c->res[0], c->res_types[2], c->res[2]);
}
