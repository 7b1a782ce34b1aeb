/* emit_object.c — builds the plan object with the LLVM C API, for the host target: the planned
 * module's text (parsed by the runtime at start-up), a pointer to the device table it runs on
 * (rt_cpu_device or rt_cuda_device, which pulls that device's code out of the runtime
 * libraries at link time) and the device's kernel image: the cubin for CUDA; for the CPU, the
 * table of elementwise kernels generated here as LLVM IR (cpu_kernels_llvm.c). */
#include "codegen.h"
#include "cpu_kernels_llvm.h"

#include <llvm-c/Core.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static LLVMTargetMachineRef host_machine(char *err, size_t errlen)
{
    LLVMInitializeNativeTarget();
    LLVMInitializeNativeAsmPrinter();
    char *triple = LLVMGetDefaultTargetTriple(), *msg = NULL;
    LLVMTargetRef target;
    LLVMTargetMachineRef tm = NULL;
    if (LLVMGetTargetFromTriple(triple, &target, &msg))
        snprintf(err, errlen, "LLVM has no target for %s: %s", triple, msg);
    else
        tm = LLVMCreateTargetMachine(target, triple, "generic", "", LLVMCodeGenLevelDefault, LLVMRelocPIC,
                                     LLVMCodeModelDefault);
    LLVMDisposeMessage(msg);
    LLVMDisposeMessage(triple);
    return tm;
}

static void add_constant(LLVMModuleRef mod, const char *name, LLVMValueRef init)
{
    LLVMValueRef g = LLVMAddGlobal(mod, LLVMTypeOf(init), name);
    LLVMSetInitializer(g, init);
    LLVMSetGlobalConstant(g, 1);
    LLVMSetLinkage(g, LLVMExternalLinkage);
}

static void add_bytes(LLVMContextRef ctx, LLVMModuleRef mod, const char *name, const void *data, size_t size)
{
    add_constant(mod, name, LLVMConstStringInContext(ctx, data, (unsigned)size, 1));
    char size_name[128];
    snprintf(size_name, sizeof size_name, "%s_size", name);
    add_constant(mod, size_name, LLVMConstInt(LLVMInt64TypeInContext(ctx), size, 0));
}

/* The plans' texts back to back, each with its NUL. */
static char *plans_text(const ir_module *const *plans, int nplans, size_t *len)
{
    char *all = NULL;
    *len = 0;
    for (int r = 0; r < nplans; r++) {
        char *text = ir_print_module(plans[r]);
        size_t n = strlen(text) + 1;
        all = realloc(all, *len + n);
        memcpy(all + *len, text, n);
        *len += n;
        free(text);
    }
    return all;
}

bool cg_emit_plan_object(const ir_module *const *plans, int nplans, const cg_plan_image *image, const char *obj_path,
                         char *err, size_t errlen)
{
    LLVMTargetMachineRef tm = host_machine(err, errlen);
    if (!tm)
        return false;
    size_t len;
    char *text = plans_text(plans, nplans, &len);
    LLVMContextRef ctx = LLVMContextCreate();
    LLVMModuleRef mod = LLVMModuleCreateWithNameInContext("mcc_plan", ctx);
    char *triple = LLVMGetTargetMachineTriple(tm);
    LLVMSetTarget(mod, triple);
    LLVMDisposeMessage(triple);
    add_constant(mod, "mcc_plan_text", LLVMConstStringInContext(ctx, text, (unsigned)len, 0));
    add_constant(mod, "mcc_plan_size", LLVMConstInt(LLVMInt64TypeInContext(ctx), len, 0));
    add_constant(mod, "mcc_plan_count", LLVMConstInt(LLVMInt64TypeInContext(ctx), (unsigned long long)nplans, 0));
    free(text);
    LLVMValueRef device = LLVMAddGlobal(mod, LLVMInt8TypeInContext(ctx), image->device_symbol); /* extern */
    add_constant(mod, "mcc_plan_device", device);
    bool ok = true;
    if (image->size) {
        add_bytes(ctx, mod, "mcc_plan_image", image->data, image->size);
    } else { /* the CPU: generated kernels */
        ok = cg_emit_cpu_kernels(ctx, mod, tm, "mcc_plan_image", err, errlen);
        add_constant(mod, "mcc_plan_image_size", LLVMConstInt(LLVMInt64TypeInContext(ctx), sizeof(void *) * IR_NUM_OPS, 0));
    }

    char *msg = NULL;
    ok = ok && !LLVMTargetMachineEmitToFile(tm, mod, (char *)obj_path, LLVMObjectFile, &msg);
    if (!ok && msg)
        snprintf(err, errlen, "cannot write %s: %s", obj_path, msg);
    LLVMDisposeMessage(msg);
    LLVMDisposeModule(mod);
    LLVMContextDispose(ctx);
    LLVMDisposeTargetMachine(tm);
    return ok;
}
