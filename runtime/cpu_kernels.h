/* cpu_kernels.h — the CPU backend's kernels, one per op of ir/ops.def (cpu_<op>), fp32.
 * The executor calls them through rt_cpu_kernels[op]. Matmuls go to the BLAS. */
#ifndef MCC_CPU_KERNELS_H
#define MCC_CPU_KERNELS_H

#include "ir/ir.h"

typedef struct {
    const ir_instr *in;             /* op and attributes */
    int nargs, nres;
    void *const *args;              /* operand buffers (globals for accumulate/zero/adamw dst) */
    const ir_type *const *arg_types;
    void *const *res;               /* result buffers, already allocated */
    const ir_type *const *res_types;
} rt_kernel_call;

typedef void (*rt_cpu_kernel)(const rt_kernel_call *c);

#define X(id, text, nargs, nres, attrs, infer, grad) void cpu_##id(const rt_kernel_call *c);
#include "ir/ops.def"
#undef X

extern const rt_cpu_kernel rt_cpu_kernels[IR_NUM_OPS];

#endif
