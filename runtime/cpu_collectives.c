/* cpu_collectives.c — the CPU kernels of the collective ops: MPI between CPU ranks, over the
 * communicator of the op's mesh axis (runtime/parallel.c). One rank along an axis: identity. */
#include "runtime/cpu_kernels.h"
#include "runtime/parallel.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

/* r := sum (attr max: max) of x over the axis's ranks */
void cpu_ALL_REDUCE(const rt_kernel_call *c)
{
    rt_comm *comm = rt_parallel_comm((ir_axis)c->in->attr[0]);
    if (c->res[0] != c->args[0])
        memcpy(c->res[0], c->args[0], ir_bytes(c->arg_types[0]));
    if (comm)
        rt_all_reduce(comm, c->res[0], (size_t)ir_numel(c->arg_types[0]), c->arg_types[0]->dtype,
                      c->in->attr[1] != 0 ? RT_MAX : RT_SUM, NULL);
}

/* (dst globals...): each := its sum over the axis's ranks, a bucket at a time */
void cpu_ALL_REDUCE_INPLACE(const rt_kernel_call *c)
{
    rt_parallel_all_reduce_bucket(c, RT_LANE_MAIN, NULL);
}

/* x (N elements) -> r[N/n]: block `rank` of the sum of x over the axis's n ranks */
void cpu_REDUCE_SCATTER(const rt_kernel_call *c)
{
    int64_t block = ir_numel(c->res_types[0]);
    rt_comm *comm = rt_parallel_comm_for(c->in, ir_numel(c->arg_types[0]) / block);
    if (comm)
        rt_reduce_scatter(comm, c->args[0], c->res[0], (size_t)block, c->arg_types[0]->dtype, RT_SUM, NULL);
    else
        memcpy(c->res[0], c->args[0], ir_bytes(c->res_types[0]));
}

/* x[S] -> r[n*S]: every rank's block, in rank order */
void cpu_ALL_GATHER(const rt_kernel_call *c)
{
    int64_t block = ir_numel(c->arg_types[0]);
    rt_comm *comm = rt_parallel_comm_for(c->in, ir_numel(c->res_types[0]) / block);
    if (comm)
        rt_all_gather(comm, c->args[0], c->res[0], (size_t)block, c->arg_types[0]->dtype, NULL);
    else
        memcpy(c->res[0], c->args[0], ir_bytes(c->arg_types[0]));
}

/* x (N elements) -> r[N/n]: block `rank` of x, no communication */
void cpu_LOCAL_SHARD(const rt_kernel_call *c)
{
    size_t bytes = ir_bytes(c->res_types[0]);
    rt_comm *comm = rt_parallel_comm_for(c->in, ir_numel(c->arg_types[0]) / ir_numel(c->res_types[0]));
    memcpy(c->res[0], (const char *)c->args[0] + (comm ? rt_comm_rank(comm) : 0) * bytes, bytes);
}

/* Sequence slices: a [B,T,R] tensor (R: the rest) as n rank slices [B,T/n,R] of the sequence,
 * or with attribute batch = 1 [B/n,T,R] of the batch rows: as [O,S,In] with S the split
 * dimension, O the dimensions before it (B, or none) and In those after, rank r's block of each
 * o-row is [S/n,In]. */
static void seq_dims(const rt_kernel_call *c, const ir_type *t, int64_t *O, int64_t *S, int64_t *In)
{
    int dim = c->in->attr[2] != 0 ? 0 : 1;
    *O = dim == 1 ? t->dims[0] : 1;
    *S = t->dims[dim];
    *In = ir_numel(t) / (*O * *S);
}

/* x[.., S/n, ..] -> r: block i of every o-row is rank i's x */
void cpu_ALL_GATHER_SEQ(const rt_kernel_call *c)
{
    rt_comm *comm = rt_parallel_comm((ir_axis)c->in->attr[0]);
    int64_t O, Sl, In, n = comm ? rt_comm_size(comm) : 1;
    seq_dims(c, c->arg_types[0], &O, &Sl, &In);
    size_t es = ir_dtype_size(c->arg_types[0]->dtype), slab = (size_t)(Sl * In) * es, bytes = ir_bytes(c->arg_types[0]);
    char *all = malloc(bytes * (size_t)n); /* [n][O][Sl][In] */
    if (comm)
        rt_all_gather(comm, c->args[0], all, bytes, IR_FP8E4M3 /* a 1-byte type: bytes */, NULL);
    else
        memcpy(all, c->args[0], bytes);
    for (int64_t o = 0; o < O; o++)
        for (int64_t r = 0; r < n; r++)
            memcpy((char *)c->res[0] + ((size_t)(o * n + r)) * slab, all + (size_t)r * bytes + (size_t)o * slab, slab);
    free(all);
}

/* x partial -> r: this rank's block of the sum over the ranks */
void cpu_REDUCE_SCATTER_SEQ(const rt_kernel_call *c)
{
    rt_comm *comm = rt_parallel_comm((ir_axis)c->in->attr[0]);
    int64_t O, S, In, n = comm ? rt_comm_size(comm) : 1;
    seq_dims(c, c->arg_types[0], &O, &S, &In);
    size_t es = ir_dtype_size(c->arg_types[0]->dtype), slab = (size_t)(S / n * In) * es;
    size_t block = ir_bytes(c->res_types[0]);
    char *ranked = malloc(block * (size_t)n); /* [n][O][S/n][In]: block r of every o-row together */
    for (int64_t r = 0; r < n; r++)
        for (int64_t o = 0; o < O; o++)
            memcpy(ranked + (size_t)r * block + (size_t)o * slab, (const char *)c->args[0] + ((size_t)(o * n + r)) * slab,
                   slab);
    if (comm)
        rt_reduce_scatter(comm, ranked, c->res[0], (size_t)ir_numel(c->res_types[0]), c->arg_types[0]->dtype, RT_SUM,
                          NULL);
    else
        memcpy(c->res[0], ranked, block);
    free(ranked);
}

/* (x[B/n,T,..,K] split by batch rows, w) -> (r = every rank's rows [B,T,..,K], r op(w)): the
 * all-gather (one contiguous block per rank, in rank order) then the matmul. */
void cpu_ALL_GATHER_MATMUL(const rt_kernel_call *c)
{
    rt_comm *comm = rt_parallel_comm((ir_axis)c->in->attr[0]);
    size_t bytes = ir_bytes(c->arg_types[0]);
    if (comm)
        rt_all_gather(comm, c->args[0], c->res[0], bytes, IR_FP8E4M3 /* a 1-byte type: bytes */, NULL);
    else
        memcpy(c->res[0], c->args[0], bytes);
    const ir_type *full = c->res_types[0], *w = c->arg_types[1];
    bool tb = c->in->attr[1] != 0;
    int64_t K = full->dims[full->ndim - 1], M = ir_numel(full) / K, N = tb ? w->dims[0] : w->dims[1];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, c->res[0], K, c->args[1],
                w->dims[1], 0.0f, c->res[1], N);
}

/* (x[B,T,..,K], w) -> (scratch, r = this rank's batch rows of the sum of x op(w) over the ranks):
 * the matmul into the scratch's first half, then the reduce-scatter (one contiguous block per
 * rank). */
void cpu_MATMUL_REDUCE_SCATTER(const rt_kernel_call *c)
{
    const ir_type *x = c->arg_types[0], *w = c->arg_types[1];
    bool tb = c->in->attr[1] != 0;
    int64_t K = x->dims[x->ndim - 1], M = ir_numel(x) / K, N = tb ? w->dims[0] : w->dims[1];
    float *partial = c->res[0];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, c->args[0], K, c->args[1],
                w->dims[1], 0.0f, partial, N);
    rt_comm *comm = rt_parallel_comm((ir_axis)c->in->attr[0]);
    if (comm)
        rt_reduce_scatter(comm, partial, c->res[1], (size_t)ir_numel(c->res_types[1]), c->res_types[1]->dtype, RT_SUM,
                          NULL);
    else
        memcpy(c->res[1], partial, ir_bytes(c->res_types[1]));
}

/* (x, w, c) -> (s = x op(w) + c, scratch, r = this rank's batch rows of s summed over the ranks) */
void cpu_MATMUL_ADD_REDUCE_SCATTER(const rt_kernel_call *c)
{
    const ir_type *x = c->arg_types[0], *w = c->arg_types[1];
    bool tb = c->in->attr[1] != 0;
    int64_t K = x->dims[x->ndim - 1], M = ir_numel(x) / K, N = tb ? w->dims[0] : w->dims[1];
    float *s = c->res[0];
    memcpy(s, c->args[2], ir_bytes(c->res_types[0]));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, c->args[0], K, c->args[1],
                w->dims[1], 1.0f, s, N);
    rt_comm *comm = rt_parallel_comm((ir_axis)c->in->attr[0]);
    if (comm)
        rt_reduce_scatter(comm, s, c->res[2], (size_t)ir_numel(c->res_types[2]), c->res_types[2]->dtype, RT_SUM, NULL);
    else
        memcpy(c->res[2], s, ir_bytes(c->res_types[2]));
}
