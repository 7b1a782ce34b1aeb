/* collectives.h — the collective ops' kernels that are one on every device: the same
 * communicator call, and on one rank along the axis the identity copy, which is the device's
 * (rt_device.copy, copy2d). The CPU's kernels (cpu_collectives.c) call them with the CPU device and
 * no stream, CUDA's launchers (cuda/collectives.c) with theirs and the compute stream. */
#ifndef MCC_RT_COLLECTIVES_H
#define MCC_RT_COLLECTIVES_H

#include "runtime/cpu_kernels.h"
#include "runtime/device.h"

/* all_reduce: r := sum (attribute max: max) of x over the axis's ranks */
void rt_collective_all_reduce(const rt_kernel_call *c, const rt_device *dev, void *stream);
/* reduce_scatter: x (N elements) -> r[N/n], block `rank` of the sum of x over the axis's n ranks */
void rt_collective_reduce_scatter(const rt_kernel_call *c, const rt_device *dev, void *stream);
/* all_gather: x[S] -> r[n*S], every rank's block, in rank order */
void rt_collective_all_gather(const rt_kernel_call *c, const rt_device *dev, void *stream);
/* local_shard: x (N elements) -> r[N/n], block `rank` of x, no communication */
void rt_collective_local_shard(const rt_kernel_call *c, const rt_device *dev, void *stream);
/* local_slice_seq: x complete [B,T,R] -> r [B,T/n,R], this rank's block of every batch row (with
 * batch = 1 its [B/n,T,R]): one strided copy, no communication */
void rt_collective_local_slice_seq(const rt_kernel_call *c, const rt_device *dev, void *stream);

#endif
