/* cpu_kernels_llvm.h — the CPU backend's elementwise kernels as LLVM IR (cpu_kernels_llvm.c). */
#ifndef MCC_CPU_KERNELS_LLVM_H
#define MCC_CPU_KERNELS_LLVM_H

#include <llvm-c/Core.h>
#include <llvm-c/TargetMachine.h>
#include <stdbool.h>
#include <stddef.h>

/* Adds the kernels to mod and a constant `table`: [IR_NUM_OPS] function pointers (NULL for ops
 * not generated), then optimises mod for tm's target. */
bool cg_emit_cpu_kernels(LLVMContextRef ctx, LLVMModuleRef mod, LLVMTargetMachineRef tm, const char *table,
                         char *err, size_t errlen);

#endif
