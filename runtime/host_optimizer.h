/* host_optimizer.h — running a plan's host function (kind host_optimizer) on the host. */
#ifndef MCC_RT_HOST_OPTIMIZER_H
#define MCC_RT_HOST_OPTIMIZER_H

#include "runtime/program.h"

/* Where p (just loaded) has a function of kind host_optimizer: registers what runs it (p->host:
 * its operands are host memory but for the copies that move a gradient down or a parameter up)
 * and starts the host AdamW's threads (MCC_HOST_OPTIMIZER_THREADS, 0: the cores online; the
 * caller counts as one) into p->host_pool; rt_program_free joins them. Nothing for another plan. */
void rt_host_attach(rt_program *p);

#endif
