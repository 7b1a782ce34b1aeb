/* link.c — links the plan object with the runtime library into train_rank, using the C
 * compiler and libraries recorded when mcc was built. */
#include "codegen.h"

#include "mcc_build_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

bool cg_write_executable(const ir_module *m, const char *out_path, char *err, size_t errlen)
{
    char obj[4096];
    snprintf(obj, sizeof obj, "%s.plan.o", out_path);
    if (!cg_emit_plan_object(m, obj, err, errlen))
        return false;
    /* Paths are quoted; the library lists come from CMake and are space-separated. */
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' %s '%s' %s %s -o '%s'", MCC_CC, MCC_SANITIZE_FLAGS, obj, MCC_RUNTIME_LIBS,
             MCC_SYSTEM_LIBS, out_path);
    int status = system(cmd);
    unlink(obj);
    if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        snprintf(err, errlen, "linking %s failed (command: %s); is the runtime library built (cmake --build)?",
                 out_path, cmd);
        return false;
    }
    return true;
}
