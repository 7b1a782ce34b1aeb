/* trace.h — named ranges on the device's timeline, so a profiler shows where a step's time goes:
 * NVTX ranges on CUDA (Nsight Systems: nsys profile ./train_rank ...; its CUDA projection puts
 * each range over the GPU work launched inside it), nothing on the CPU. rt_program_run wraps
 * each plan function in one named after the function; pushes and pops nest and must pair. */
#ifndef MCC_RT_TRACE_H
#define MCC_RT_TRACE_H

#include "runtime/program.h"

static inline void rt_trace_push(const rt_program *p, const char *name)
{
    if (p->dev->trace_push)
        p->dev->trace_push(name);
}

static inline void rt_trace_pop(const rt_program *p)
{
    if (p->dev->trace_pop)
        p->dev->trace_pop();
}

#endif
