/* emit_object.c — builds the objects a train_rank is linked from with the LLVM C API, for the host
 * target: the plan object, with the planned module's text (parsed by the runtime at start-up), a
 * pointer to the device table it runs on (rt_cpu_device or rt_cuda_device, which pulls that
 * device's code out of the runtime libraries at link time) and, for CUDA, the kernel image (the
 * cubin); and for the CPU the kernels object, the table of elementwise kernels generated as LLVM IR
 * (cpu_kernels_llvm.c), the same for every compile of one mcc, so made once and cached. */
#include "codegen.h"
#include "cpu_kernels_llvm.h"
#include "common/cache.h"
#include "common/os.h"

#include <llvm-c/Core.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm/Config/llvm-config.h> /* LLVM_VERSION_STRING: part of the kernels object's cache key */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* Every byte reaches the file or err says why (a full disk, the file size limit). */
static bool write_all(int fd, const char *data, size_t size, char *err, size_t errlen)
{
    int e = os_write_all(fd, data, size);
    if (e)
        return snprintf(err, errlen, "%s", strerror(e)), false;
    if (fsync(fd) != 0)
        return snprintf(err, errlen, "fsync: %s", strerror(errno)), false;
    return true;
}

/* The object is emitted into memory and written here, not by LLVMTargetMachineEmitToFile, whose
 * stream aborts the process (SIGABRT) when a write fails. */
static bool emit_to_fd(LLVMTargetMachineRef tm, LLVMModuleRef mod, int fd, char *err, size_t errlen)
{
    char *msg = NULL;
    LLVMMemoryBufferRef buf = NULL;
    if (LLVMTargetMachineEmitToMemoryBuffer(tm, mod, LLVMObjectFile, &msg, &buf)) {
        snprintf(err, errlen, "LLVM could not emit it: %s", msg ? msg : "no reason given");
        LLVMDisposeMessage(msg);
        return false;
    }
    bool ok = write_all(fd, LLVMGetBufferStart(buf), LLVMGetBufferSize(buf), err, errlen);
    LLVMDisposeMemoryBuffer(buf);
    return ok;
}

bool cg_emit_plan_object(ir_module *const *stages, int nstages, const cg_plan_image *image, int fd, char *err,
                         size_t errlen)
{
    LLVMTargetMachineRef tm = host_machine(err, errlen);
    if (!tm)
        return close(fd), false;
    char *text = ir_print_stages(stages, nstages);
    size_t len = strlen(text) + 1; /* with its NUL */
    LLVMContextRef ctx = LLVMContextCreate();
    LLVMModuleRef mod = LLVMModuleCreateWithNameInContext("mcc_plan", ctx);
    char *triple = LLVMGetTargetMachineTriple(tm);
    LLVMSetTarget(mod, triple);
    LLVMDisposeMessage(triple);
    add_constant(mod, "mcc_plan_text", LLVMConstStringInContext(ctx, text, (unsigned)len, 0));
    add_constant(mod, "mcc_plan_size", LLVMConstInt(LLVMInt64TypeInContext(ctx), len, 0));
    free(text);
    LLVMValueRef device = LLVMAddGlobal(mod, LLVMInt8TypeInContext(ctx), image->device_symbol); /* extern */
    add_constant(mod, "mcc_plan_device", device);
    if (image->size) /* the CPU's image is the kernels object's */
        add_bytes(ctx, mod, "mcc_plan_image", image->data, image->size);
    bool ok = emit_to_fd(tm, mod, fd, err, errlen);
    if (close(fd) != 0 && ok) {
        snprintf(err, errlen, "%s", strerror(errno));
        ok = false;
    }
    LLVMDisposeModule(mod);
    LLVMContextDispose(ctx);
    LLVMDisposeTargetMachine(tm);
    return ok;
}

/* The kernels object's cache key: the unoptimised IR (with the target triple), the pipeline, the
 * target CPU and LLVM's version. */
static uint64_t kernels_key(LLVMModuleRef mod)
{
    char *ir = LLVMPrintModuleToString(mod);
    uint64_t h = cache_hash(CACHE_HASH_SEED, ir, strlen(ir));
    LLVMDisposeMessage(ir);
    const char *rest[] = {CG_CPU_KERNELS_PIPELINE, "generic", LLVM_VERSION_STRING};
    for (size_t i = 0; i < sizeof rest / sizeof rest[0]; i++)
        h = cache_hash(h, rest[i], strlen(rest[i]) + 1);
    return h;
}

bool cg_cpu_kernels_object(const char *fallback, char *path, size_t len, bool *temporary, char *err, size_t errlen)
{
    *temporary = false;
    LLVMTargetMachineRef tm = host_machine(err, errlen);
    if (!tm)
        return false;
    LLVMContextRef ctx = LLVMContextCreate();
    LLVMModuleRef mod = LLVMModuleCreateWithNameInContext("mcc_cpu_kernels", ctx);
    char *triple = LLVMGetTargetMachineTriple(tm);
    LLVMSetTarget(mod, triple);
    LLVMDisposeMessage(triple);
    cg_add_cpu_kernels(ctx, mod, "mcc_plan_image");
    add_constant(mod, "mcc_plan_image_size", LLVMConstInt(LLVMInt64TypeInContext(ctx), sizeof(void *) * IR_NUM_OPS, 0));
    cache_entry(path, len, "cpu-kernels", kernels_key(mod), "o");
    struct stat st;
    bool ok = stat(path, &st) == 0 && st.st_size > 0; /* made by an earlier compile */
    LLVMMemoryBufferRef buf = NULL;
    char *msg = NULL;
    if (!ok && cg_optimise_cpu_kernels(mod, tm, err, errlen)) {
        if (LLVMTargetMachineEmitToMemoryBuffer(tm, mod, LLVMObjectFile, &msg, &buf))
            snprintf(err, errlen, "LLVM could not emit the CPU kernels: %s", msg ? msg : "no reason given");
        else if (cache_write(path, LLVMGetBufferStart(buf), LLVMGetBufferSize(buf), "the CPU kernels"))
            ok = true;
        else { /* the cache cannot hold it: a file of this compile's own */
            snprintf(path, len, "%s", fallback);
            int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            ok = fd >= 0 ? write_all(fd, LLVMGetBufferStart(buf), LLVMGetBufferSize(buf), err, errlen)
                         : (snprintf(err, errlen, "%s", strerror(errno)), false);
            ok = (fd < 0 || close(fd) == 0) && ok;
            *temporary = fd >= 0;
        }
    }
    LLVMDisposeMessage(msg);
    if (buf)
        LLVMDisposeMemoryBuffer(buf);
    LLVMDisposeModule(mod);
    LLVMContextDispose(ctx);
    LLVMDisposeTargetMachine(tm);
    return ok;
}
