/* emit_object.c — builds the plan object with the LLVM C API: the verified, planned module's
 * text as a constant the runtime parses at start-up, emitted for the host target. */
#include "codegen.h"

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

bool cg_emit_plan_object(const ir_module *m, const char *obj_path, char *err, size_t errlen)
{
    LLVMTargetMachineRef tm = host_machine(err, errlen);
    if (!tm)
        return false;
    char *text = ir_print_module(m);
    size_t len = strlen(text);
    LLVMContextRef ctx = LLVMContextCreate();
    LLVMModuleRef mod = LLVMModuleCreateWithNameInContext("mcc_plan", ctx);
    char *triple = LLVMGetTargetMachineTriple(tm);
    LLVMSetTarget(mod, triple);
    LLVMDisposeMessage(triple);
    add_constant(mod, "mcc_plan_text", LLVMConstStringInContext(ctx, text, (unsigned)len, 0));
    add_constant(mod, "mcc_plan_size", LLVMConstInt(LLVMInt64TypeInContext(ctx), len, 0));
    free(text);

    char *msg = NULL;
    bool ok = !LLVMTargetMachineEmitToFile(tm, mod, (char *)obj_path, LLVMObjectFile, &msg);
    if (!ok)
        snprintf(err, errlen, "cannot write %s: %s", obj_path, msg ? msg : "LLVM emission failed");
    LLVMDisposeMessage(msg);
    LLVMDisposeModule(mod);
    LLVMContextDispose(ctx);
    LLVMDisposeTargetMachine(tm);
    return ok;
}
