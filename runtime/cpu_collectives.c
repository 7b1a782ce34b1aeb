/* cpu_collectives.c — the CPU kernels of the collective ops: MPI between CPU ranks, over the
 * communicator of the op's mesh axis (runtime/parallel.c). One rank along an axis: identity. */
#include "runtime/cpu_kernels.h"
#include "runtime/parallel.h"

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

/* Sequence slices: a [B,T,R] tensor (R: the rest) as n rank slices [B,T/n,R] of the sequence. */
static void seq_dims(const ir_type *t, int64_t *B, int64_t *T, int64_t *R)
{
    *B = t->dims[0];
    *T = t->dims[1];
    *R = ir_numel(t) / (*B * *T);
}

/* x[B,T/n,R] -> r[B,T,R]: slice i of the sequence is rank i's x */
void cpu_ALL_GATHER_SEQ(const rt_kernel_call *c)
{
    rt_comm *comm = rt_parallel_comm((ir_axis)c->in->attr[0]);
    int64_t B, Tl, R, n = comm ? rt_comm_size(comm) : 1;
    seq_dims(c->arg_types[0], &B, &Tl, &R);
    size_t es = ir_dtype_size(c->arg_types[0]->dtype), slab = (size_t)(Tl * R) * es, bytes = ir_bytes(c->arg_types[0]);
    char *all = malloc(bytes * (size_t)n); /* [n][B][Tl][R] */
    if (comm)
        rt_all_gather(comm, c->args[0], all, bytes, IR_FP8E4M3 /* a 1-byte type: bytes */, NULL);
    else
        memcpy(all, c->args[0], bytes);
    for (int64_t b = 0; b < B; b++)
        for (int64_t r = 0; r < n; r++)
            memcpy((char *)c->res[0] + ((size_t)(b * n + r)) * slab, all + (size_t)r * bytes + (size_t)b * slab, slab);
    free(all);
}

/* x[B,T,R] partial -> r[B,T/n,R]: this rank's sequence slice of the sum over the ranks */
void cpu_REDUCE_SCATTER_SEQ(const rt_kernel_call *c)
{
    rt_comm *comm = rt_parallel_comm((ir_axis)c->in->attr[0]);
    int64_t B, T, R, n = comm ? rt_comm_size(comm) : 1;
    seq_dims(c->arg_types[0], &B, &T, &R);
    size_t es = ir_dtype_size(c->arg_types[0]->dtype), slab = (size_t)(T / n * R) * es;
    size_t block = ir_bytes(c->res_types[0]);
    char *ranked = malloc(block * (size_t)n); /* [n][B][T/n][R]: slice r of every batch row together */
    for (int64_t r = 0; r < n; r++)
        for (int64_t b = 0; b < B; b++)
            memcpy(ranked + (size_t)r * block + (size_t)b * slab, (const char *)c->args[0] + ((size_t)(b * n + r)) * slab,
                   slab);
    if (comm)
        rt_reduce_scatter(comm, ranked, c->res[0], (size_t)ir_numel(c->res_types[0]), c->arg_types[0]->dtype, RT_SUM,
                          NULL);
    else
        memcpy(c->res[0], ranked, block);
    free(ranked);
}
