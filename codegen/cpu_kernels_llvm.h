/* cpu_kernels_llvm.h — the CPU backend's elementwise kernels as LLVM IR (cpu_kernels_llvm.c). */
#ifndef MCC_CPU_KERNELS_LLVM_H
#define MCC_CPU_KERNELS_LLVM_H

#include <llvm-c/Core.h>
#include <llvm-c/TargetMachine.h>
#include <stdbool.h>
#include <stddef.h>

/* The pass pipeline the kernels are optimised with. */
#define CG_CPU_KERNELS_PIPELINE "default<O2>"

/* Adds the kernels to mod and a constant `table`: [IR_NUM_OPS] function pointers (NULL for ops
 * not generated). They depend on nothing of the model: the same for every compile of one mcc. */
void cg_add_cpu_kernels(LLVMContextRef ctx, LLVMModuleRef mod, const char *table);
/* Optimises mod (CG_CPU_KERNELS_PIPELINE) for tm's target. */
bool cg_optimise_cpu_kernels(LLVMModuleRef mod, LLVMTargetMachineRef tm, char *err, size_t errlen);

#endif
