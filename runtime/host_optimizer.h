/* host_optimizer.h — running a plan's host function (kind host_optimizer) on the host. */
#ifndef MCC_RT_HOST_OPTIMIZER_H
#define MCC_RT_HOST_OPTIMIZER_H

#include "runtime/cpu_kernels.h"
#include "runtime/program.h"

#include <stdint.h>

/* Where p (just loaded) has a function of kind host_optimizer: registers what runs it (p->host:
 * its operands are host memory but for the copies that move a gradient down or a parameter up)
 * and starts the host AdamW's threads (MCC_HOST_OPTIMIZER_THREADS, 0: the CPUs it may run on; the
 * caller counts as one) into p->host_pool; rt_program_free joins them. Nothing for another plan. */
void rt_host_attach(rt_program *p);

/* The host's update beside the backward (passes/grad_ready.c: --clip-grad 0): whether p's plan has
 * ready marks, so that its host function may run while the last micro-batch's backward does. Then
 * rt_host_start runs host function func on a thread of its own (its inputs set first; each
 * parameter's copies wait for its mark, device.h copy_async) and rt_host_join waits for it to end,
 * every copy up done; rt_program_free joins one still running. */
bool rt_host_beside(const rt_program *p);
void rt_host_start(rt_program *p, int func);
void rt_host_join(rt_program *p);

/* The host's threads: `threads` of them, the caller counting as one (rt_host_attach opens
 * p->host_pool so; bench/host_adamw_bench.c opens its own to time the same work). */
typedef struct rt_host_pool rt_host_pool;

/* The instruction sets the host's AdamW and bf16 conversion are compiled for, best first; each
 * gives the same bits. ORDER: knob HOST_OPTIMIZER_ISA's choices after auto (common/knobs.h). */
typedef enum { RT_HOST_ISA_AVX512, RT_HOST_ISA_AVX2, RT_HOST_ISA_GENERIC, RT_HOST_NUM_ISAS } rt_host_isa;
extern const char *const rt_host_isa_names[RT_HOST_NUM_ISAS];
bool rt_host_isa_supported(rt_host_isa isa); /* whether this CPU runs it */

/* A pool whose loops are isa's (one this CPU supports). */
rt_host_pool *rt_host_pool_open(int threads, rt_host_isa isa);
void rt_host_pool_close(rt_host_pool *pool);

/* AdamW call c (operands as adamw's: master, gradient, m, v, lr, step, clip coefficient, and an
 * eighth where c->nargs is 8: the bf16 working copy written from the updated f32 master, as the GPU
 * kernel writes it) over its first n elements, split over the pool, in the device's arithmetic:
 * f32, the GPU kernel's fp32 formula; else the CPU device's kernel (rt_cpu_adamw_range, double). */
void rt_host_adamw(rt_host_pool *pool, const rt_kernel_call *c, bool f32, int64_t n);

/* dst[0, n) := src rounded to bf16 (nearest even, as the GPU), split over the pool: the host's half
 * of a converting copy up. */
void rt_host_to_bf16(rt_host_pool *pool, uint16_t *dst, const float *src, int64_t n);

#endif
