/* collectives.c — the collective kernels both devices share (collectives.h), over the
 * communicator of the op's mesh axis (runtime/parallel.c). */
#include "runtime/collectives.h"
#include "runtime/parallel.h"

void rt_collective_all_reduce(const rt_kernel_call *c, const rt_device *dev, void *stream)
{
    rt_comm *comm = rt_parallel_comm((ir_axis)c->in->attr[IR_ATTR_AXIS]);
    if (c->res[0] != c->args[0])
        dev->copy(stream, c->res[0], c->args[0], ir_bytes(c->arg_types[0]));
    if (comm)
        rt_all_reduce(comm, c->res[0], (size_t)ir_numel(c->arg_types[0]), c->arg_types[0]->dtype,
                      c->in->attr[IR_ATTR_ALL_REDUCE_MAX] != 0 ? RT_MAX : RT_SUM, stream);
}

void rt_collective_reduce_scatter(const rt_kernel_call *c, const rt_device *dev, void *stream)
{
    int64_t block = ir_numel(c->res_types[0]);
    rt_comm *comm = rt_parallel_comm_for(c->in, ir_numel(c->arg_types[0]) / block);
    if (comm)
        rt_reduce_scatter(comm, c->args[0], c->res[0], (size_t)block, c->arg_types[0]->dtype, RT_SUM, stream);
    else
        dev->copy(stream, c->res[0], c->args[0], ir_bytes(c->res_types[0]));
}

void rt_collective_all_gather(const rt_kernel_call *c, const rt_device *dev, void *stream)
{
    int64_t block = ir_numel(c->arg_types[0]);
    rt_comm *comm = rt_parallel_comm_for(c->in, ir_numel(c->res_types[0]) / block);
    if (comm)
        rt_all_gather(comm, c->args[0], c->res[0], (size_t)block, c->arg_types[0]->dtype, stream);
    else
        dev->copy(stream, c->res[0], c->args[0], ir_bytes(c->arg_types[0]));
}

void rt_collective_local_shard(const rt_kernel_call *c, const rt_device *dev, void *stream)
{
    size_t bytes = ir_bytes(c->res_types[0]);
    rt_comm *comm = rt_parallel_comm_for(c->in, ir_numel(c->arg_types[0]) / ir_numel(c->res_types[0]));
    dev->copy(stream, c->res[0], (const char *)c->args[0] + (comm ? rt_comm_rank(comm) : 0) * bytes, bytes);
}

/* As [O,S,In] with S the split dimension, O the dimensions before it (B, or none: ir_seq_orows)
 * and In those after, rank q's block of each o-row is [S/n,In] (`slab` bytes), at q * slab. */
void rt_collective_local_slice_seq(const rt_kernel_call *c, const rt_device *dev, void *stream)
{
    rt_comm *comm = rt_parallel_comm((ir_axis)c->in->attr[IR_ATTR_AXIS]);
    size_t rows = (size_t)ir_seq_orows(c->in, c->res_types[0]), slab = ir_bytes(c->res_types[0]) / rows;
    size_t n = comm ? (size_t)rt_comm_size(comm) : 1, q = comm ? (size_t)rt_comm_rank(comm) : 0;
    dev->copy2d(stream, c->res[0], slab, (const char *)c->args[0] + q * slab, slab * n, slab, rows);
}
