/* collectives.c — the CUDA launchers of the collective ops: NCCL on the device's stream. */
#include "cuda_ctx.h"
#include "runtime/parallel.h"

void cuda_ALL_REDUCE(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    rt_comm *comm = rt_parallel_comm((ir_axis)c->in->attr[0]);
    if (comm)
        rt_all_reduce(comm, c->args[0], (size_t)ir_numel(c->arg_types[0]), c->arg_types[0]->dtype, RT_SUM,
                      rt_cuda_stream(cx));
}
