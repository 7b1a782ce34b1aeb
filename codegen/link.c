/* link.c — compiles the target's kernels, writes the plan object and links it with the runtime
 * libraries into train_rank, using the C compiler and libraries recorded when mcc was built. */
#include "codegen.h"

#include "mcc_build_config.h"
#ifdef MCC_HAVE_CUDA
#include "codegen/cuda/cuda_codegen.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

bool cg_write_executable(const ir_module *const *plans, int nplans, const char *out_path, char *err, size_t errlen)
{
    const ir_module *m = plans[0];
    const char *target = ir_config_get(m, "target");
    bool cuda = target && !strcmp(target, "cuda");
    cg_plan_image image = {cuda ? "rt_cuda_device" : "rt_cpu_device", "", 0};
    void *cubin = NULL;
    if (cuda) {
#ifdef MCC_HAVE_CUDA
        if (!cg_cuda_compile_kernels(&cubin, &image.size, err, errlen))
            return false;
        image.data = cubin;
#else
        snprintf(err, errlen, "--target cuda: this mcc was built without the CUDA toolkit; rebuild it where "
                              "CMake finds CUDA, or use --target cpu");
        return false;
#endif
    }
    char obj[4096];
    snprintf(obj, sizeof obj, "%s.plan.o", out_path);
    bool ok = cg_emit_plan_object(plans, nplans, &image, obj, err, errlen);
    free(cubin);
    if (!ok)
        return false;
    /* Paths are quoted; the library lists come from CMake and are space-separated. */
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' %s -Wl,--as-needed '%s' %s %s %s -o '%s'", MCC_CC, MCC_SANITIZE_FLAGS, obj,
             cuda ? MCC_CUDA_RUNTIME_LIBS : "", MCC_RUNTIME_LIBS, MCC_SYSTEM_LIBS, out_path);
    int status = system(cmd);
    unlink(obj);
    if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        snprintf(err, errlen, "linking %s failed (command: %s); is the runtime library built (cmake --build)?",
                 out_path, cmd);
        return false;
    }
    return true;
}
