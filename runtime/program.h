/* program.h — a loaded plan: the parsed module, its globals and arenas allocated, and every
 * instruction bound to its kernel and buffers, ready to run function by function. */
#ifndef MCC_RT_PROGRAM_H
#define MCC_RT_PROGRAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/ir.h"
#include "runtime/cpu_kernels.h"

typedef struct {
    ir_func *f;
    char *arena;
    void **vptr;                    /* per value: its buffer */
    rt_kernel_call *calls;          /* per instruction */
    void **ptr_pool;                /* backing store of calls[].args/res */
    const ir_type **type_pool;
} rt_func_exec;

typedef struct {
    ir_module *m;
    void **globals;                 /* per module global */
    rt_func_exec *funcs;            /* per module function */
} rt_program;

/* Parses and verifies the plan, allocates globals (zeroed) and arenas. NULL + message on error. */
rt_program *rt_program_load(const char *plan_text, char *err, size_t errlen);
void rt_program_free(rt_program *p);
/* Initialises every parameter from its init rule. Element i of parameter `name` depends only on
 * (seed, name, i), so any sharding of the parameter sees the same values. */
void rt_program_init_params(rt_program *p, uint64_t seed);
void rt_program_run(rt_program *p, int func);
/* The buffer of `input @name` / `output @name` in a function, or NULL. */
void *rt_program_input(rt_program *p, int func, const char *name);
const void *rt_program_output(const rt_program *p, int func, const char *name);

#endif
