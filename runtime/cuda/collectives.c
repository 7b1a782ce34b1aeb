/* collectives.c — the CUDA launchers of the collective ops: NCCL on the device's stream, over
 * the communicator of the op's mesh axis (runtime/parallel.c). One rank along an axis: identity. */
#include "cuda_ctx.h"
#include "runtime/parallel.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* r := sum of x over the axis's ranks */
void cuda_ALL_REDUCE(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    rt_comm *comm = rt_parallel_comm((ir_axis)c->in->attr[0]);
    if (c->res[0] != c->args[0])
        RT_CU_CHECK(cuMemcpyDtoDAsync((CUdeviceptr)(uintptr_t)c->res[0], (CUdeviceptr)(uintptr_t)c->args[0],
                                      ir_bytes(c->arg_types[0]), rt_cuda_stream(cx)));
    if (comm)
        rt_all_reduce(comm, c->res[0], (size_t)ir_numel(c->arg_types[0]), c->arg_types[0]->dtype,
                      c->in->attr[1] != 0 ? RT_MAX : RT_SUM, rt_cuda_stream(cx));
}

/* Tensor parallelism's vocab-parallel cross entropy and sequence-parallel collectives run on CPU
 * ranks only in this build: `mcc compile` refuses --target cuda with tensor parallelism, so these
 * are never reached from a compiled plan. */
static void cuda_tensor_parallel_missing(const rt_kernel_call *c)
{
    fprintf(stderr, "train_rank: error: %s has no CUDA kernel yet (tensor parallelism runs on CPU ranks in "
                    "this build; recompile with --target cpu)\n", ir_ops[c->in->op].name);
    exit(1);
}

void cuda_CE_ROW_MAX(rt_cuda_ctx *cx, const rt_kernel_call *c) { cuda_tensor_parallel_missing(c); }
void cuda_CE_ROW_STATS(rt_cuda_ctx *cx, const rt_kernel_call *c) { cuda_tensor_parallel_missing(c); }
void cuda_CE_LOSS(rt_cuda_ctx *cx, const rt_kernel_call *c) { cuda_tensor_parallel_missing(c); }
void cuda_CE_GRAD_SHARDED(rt_cuda_ctx *cx, const rt_kernel_call *c) { cuda_tensor_parallel_missing(c); }
void cuda_ALL_GATHER_SEQ(rt_cuda_ctx *cx, const rt_kernel_call *c) { cuda_tensor_parallel_missing(c); }
void cuda_REDUCE_SCATTER_SEQ(rt_cuda_ctx *cx, const rt_kernel_call *c) { cuda_tensor_parallel_missing(c); }

/* (dst global): dst := sum of dst over the axis's ranks */
void cuda_ALL_REDUCE_INPLACE(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    rt_comm *comm = rt_parallel_comm((ir_axis)c->in->attr[0]);
    if (comm)
        rt_all_reduce(comm, c->args[0], (size_t)ir_numel(c->arg_types[0]), c->arg_types[0]->dtype, RT_SUM,
                      rt_cuda_stream(cx));
}

static CUdeviceptr dptr(const void *p) { return (CUdeviceptr)(uintptr_t)p; }

/* x (N elements) -> r[N/n]: block `rank` of the sum of x over the axis's n ranks */
void cuda_REDUCE_SCATTER(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    int64_t block = ir_numel(c->res_types[0]);
    rt_comm *comm = rt_parallel_comm_for(c->in, ir_numel(c->arg_types[0]) / block);
    if (comm)
        rt_reduce_scatter(comm, c->args[0], c->res[0], (size_t)block, c->arg_types[0]->dtype, RT_SUM,
                          rt_cuda_stream(cx));
    else
        RT_CU_CHECK(cuMemcpyDtoDAsync(dptr(c->res[0]), dptr(c->args[0]), ir_bytes(c->res_types[0]), rt_cuda_stream(cx)));
}

/* x[S] -> r[n*S]: every rank's block, in rank order */
void cuda_ALL_GATHER(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    int64_t block = ir_numel(c->arg_types[0]);
    rt_comm *comm = rt_parallel_comm_for(c->in, ir_numel(c->res_types[0]) / block);
    if (comm)
        rt_all_gather(comm, c->args[0], c->res[0], (size_t)block, c->arg_types[0]->dtype, rt_cuda_stream(cx));
    else
        RT_CU_CHECK(cuMemcpyDtoDAsync(dptr(c->res[0]), dptr(c->args[0]), ir_bytes(c->arg_types[0]), rt_cuda_stream(cx)));
}

/* x (N elements) -> r[N/n]: block `rank` of x, no communication */
void cuda_LOCAL_SHARD(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    size_t bytes = ir_bytes(c->res_types[0]);
    rt_comm *comm = rt_parallel_comm_for(c->in, ir_numel(c->arg_types[0]) / ir_numel(c->res_types[0]));
    RT_CU_CHECK(cuMemcpyDtoDAsync(dptr(c->res[0]), dptr(c->args[0]) + (comm ? rt_comm_rank(comm) : 0) * bytes, bytes,
                                  rt_cuda_stream(cx)));
}
