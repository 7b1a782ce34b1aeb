/* cpu_collectives.c — the CPU kernels of the collective ops: MPI between CPU ranks, over the
 * communicator of the op's mesh axis (runtime/parallel.c). One rank along an axis: identity. */
#include "runtime/cpu_kernels.h"
#include "runtime/parallel.h"

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

/* (dst global): dst := sum of dst over the axis's ranks */
void cpu_ALL_REDUCE_INPLACE(const rt_kernel_call *c)
{
    rt_comm *comm = rt_parallel_comm((ir_axis)c->in->attr[0]);
    if (comm)
        rt_all_reduce(comm, c->args[0], (size_t)ir_numel(c->arg_types[0]), c->arg_types[0]->dtype, RT_SUM, NULL);
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
