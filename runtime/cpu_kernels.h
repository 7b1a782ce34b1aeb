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

#define X(id, text, nargs, nres, inplace, flags, attrs, infer, grad, shard) void cpu_##id(const rt_kernel_call *c);
#include "ir/ops.def"
#undef X

extern const rt_cpu_kernel rt_cpu_kernels[IR_NUM_OPS];
/* adamw's elements [begin, end) (cpu_ADAMW is [0, n)): the host optimizer's threads split it. */
void rt_cpu_adamw_range(const rt_kernel_call *c, int64_t begin, int64_t end);

/* The elementwise ops whose CPU kernels `mcc compile` generates as LLVM IR into the plan object
 * (codegen/cpu_kernels_llvm.c), each `void f(float *r, const float *a, const float *b, int64_t n,
 * float attr)` over n fp32 elements; the CPU device prefers them to the C kernels above. How an
 * op's operands map to r, a and b: */
typedef enum {
    RT_EW_NONE,                     /* not generated */
    RT_EW_UNARY,                    /* r := f(a = args[0]) */
    RT_EW_BINARY,                   /* r := f(a = args[0], b = args[1]) */
    RT_EW_INTO,                     /* dst args[0] := f(dst, b = args[1]): accumulate, copy */
    RT_EW_FILL,                     /* r := attr */
} rt_elementwise_kind;

/* The ops flagged IR_OPF_ELEMENTWISE (ops.def); their operand and result counts say the kind. */
static inline rt_elementwise_kind rt_elementwise_kind_of(ir_op op)
{
    if (!ir_op_has(op, IR_OPF_ELEMENTWISE))
        return RT_EW_NONE;
    if (ir_ops[op].nres == 0)
        return RT_EW_INTO;
    if (ir_ops[op].nargs == 0)
        return RT_EW_FILL;
    return ir_ops[op].nargs == 1 ? RT_EW_UNARY : RT_EW_BINARY;
}

typedef void (*rt_elementwise_fn)(float *r, const float *a, const float *b, int64_t n, float attr);

/* Runs one instruction's call on the CPU (runtime/cpu_device.c): its generated kernel where
 * `generated` (the plan object's table, or NULL) has one, else its C kernel; an instruction with a
 * row bound (ir_row_bound) on the rows its counts sum to alone, its results NaN past them. */
void rt_cpu_run_call(const rt_elementwise_fn *generated, const rt_kernel_call *c);

#endif
