/* host_optimizer.h — running a plan's host function (kind host_optimizer) on the host. */
#ifndef MCC_RT_HOST_OPTIMIZER_H
#define MCC_RT_HOST_OPTIMIZER_H

#include "runtime/program.h"

/* Runs function func (of kind host_optimizer) of p: its operands are host memory but for the copies
 * that move a gradient down or a parameter up (runtime/host_optimizer.c). */
void rt_host_run(rt_program *p, int func);
/* Starts the host AdamW's threads (MCC_HOST_OPTIMIZER_THREADS, 0: the cores online; the caller
 * counts as one) into p->host_pool, once, when a plan with a host function is loaded; close joins
 * them (rt_program_free). */
void rt_host_pool_open(rt_program *p);
void rt_host_pool_close(rt_program *p);

#endif
