/* link.c — compiles the target's kernels, writes the plan object and links it with the runtime
 * libraries into train_rank, using the C compiler and libraries recorded when mcc was built.
 * Nothing is written under the output's name until the executable is whole: the object and the
 * executable are made under temporary names in the output's directory, and a rename at the end
 * replaces the output (an existing one stays intact when anything fails). */
#include "codegen.h"

#include "mcc_build_config.h"
#ifdef MCC_HAVE_CUDA
#include "codegen/cuda/cuda_codegen.h"
#endif

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* The runtime libraries sit beside mcc in the build tree, or in MCC_INSTALLED_LIB_DIR (relative
 * to bin/) after `cmake --install`: found from mcc's own location, so neither the build tree's
 * nor the source tree's path is needed once installed. */
static bool runtime_lib_dir(char *dir, size_t len, char *err, size_t errlen)
{
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return snprintf(err, errlen, "cannot find mcc's own location (/proc/self/exe: %s)", strerror(errno)), false;
    exe[n] = 0;
    *strrchr(exe, '/') = 0;
    const char *const candidates[] = {MCC_INSTALLED_LIB_DIR, "."};
    for (int i = 0; i < 2; i++) {
        char lib[4200];
        /* a truncated path would name another file: such a location is skipped, not probed */
        if ((size_t)snprintf(dir, len, "%s/%s", exe, candidates[i]) >= len ||
            (size_t)snprintf(lib, sizeof lib, "%s/libmccrt.a", dir) >= sizeof lib)
            continue;
        if (access(lib, R_OK) == 0)
            return true;
    }
    snprintf(err, errlen, "the runtime library libmccrt.a is neither beside mcc (%s) nor in %s/%s: build it "
             "(cmake --build BUILD) or install mcc with it (cmake --install BUILD)", exe, exe, MCC_INSTALLED_LIB_DIR);
    return false;
}

/* An argument vector; the strings it owns (library paths) are freed with it. */
typedef struct {
    char *v[128];
    bool owned[128];
    int n;
} arg_list;

static void arg_add(arg_list *a, const char *s, bool owned) { a->owned[a->n] = owned, a->v[a->n++] = (char *)s; }

static void arg_add_all(arg_list *a, const char *const *list)
{
    for (; *list; list++)
        arg_add(a, *list, false);
}

static void arg_add_libs(arg_list *a, const char *dir, const char *const *names)
{
    for (; *names; names++) {
        size_t n = strlen(dir) + strlen(*names) + 2;
        char *path = malloc(n);
        snprintf(path, n, "%s/%s", dir, *names);
        arg_add(a, path, true);
    }
}

static void arg_free(arg_list *a)
{
    for (int i = 0; i < a->n; i++)
        if (a->owned[i])
            free(a->v[i]);
}

/* kernels: the CPU's kernels object, or NULL (CUDA's image is in obj) */
static void link_args(arg_list *a, bool cuda, const char *lib_dir, const char *obj, const char *kernels,
                      const char *exe)
{
    static const char *const sanitize[] = {MCC_SANITIZE_ARGS NULL}, *const linker[] = {MCC_LINKER_ARGS NULL},
                             *const rt_names[] = {MCC_RUNTIME_LIB_NAMES NULL},
                             *const cuda_names[] = {MCC_CUDA_RUNTIME_LIB_NAMES NULL},
                             *const cuda_libs[] = {MCC_CUDA_SYSTEM_LIBS NULL}, *const system_libs[] = {MCC_SYSTEM_LIBS NULL};
#define COUNT(list) (sizeof list / sizeof list[0])
    _Static_assert(COUNT(sanitize) + COUNT(linker) + COUNT(rt_names) + COUNT(cuda_names) + COUNT(cuda_libs) +
                           COUNT(system_libs) + 6 <
                       COUNT(a->v),
                   "arg_list holds mcc_build_config.h's lists, six more arguments and the terminating NULL");
#undef COUNT
    arg_add(a, MCC_CC, false);
    arg_add_all(a, sanitize);
    arg_add_all(a, linker);
    arg_add(a, "-Wl,--as-needed", false);
    arg_add(a, obj, false);
    if (kernels)
        arg_add(a, kernels, false);
    if (cuda) { /* libmccrt_cuda needs libmccrt: it comes first */
        arg_add_libs(a, lib_dir, cuda_names);
        arg_add_all(a, cuda_libs);
    }
    arg_add_libs(a, lib_dir, rt_names);
    arg_add_all(a, system_libs);
    arg_add(a, "-o", false);
    arg_add(a, exe, false);
}

/* Runs argv (no shell) with its stderr captured into log[loglen]; returns the wait status, or -1
 * with errno set when it could not be started. */
static int run_captured(char *const *argv, char *log, size_t loglen)
{
    int fds[2];
    log[0] = 0;
    if (pipe(fds) != 0)
        return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDERR_FILENO);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    posix_spawn_file_actions_addclose(&fa, fds[1]);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    size_t used = 0;
    char chunk[4096];
    for (ssize_t got; (got = read(fds[0], chunk, sizeof chunk)) != 0;) {
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            break;
        size_t keep = (size_t)got < loglen - 1 - used ? (size_t)got : loglen - 1 - used; /* the first errors matter */
        memcpy(log + used, chunk, keep);
        used += keep;
    }
    while (used && (log[used - 1] == '\n' || log[used - 1] == ' '))
        used--;
    log[used] = 0;
    close(fds[0]);
    if (rc != 0)
        return errno = rc, -1;
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    return status;
}

/* The executable reaches the disk before it replaces the output. */
static bool sync_file(const char *path, const char *out_path, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY);
    bool ok = fd >= 0 && fsync(fd) == 0;
    if (!ok)
        snprintf(err, errlen, "cannot write %s: fsync of %s: %s", out_path, path, strerror(errno));
    if (fd >= 0)
        close(fd);
    return ok;
}

/* Links obj (and the CPU's kernels object) into exe and syncs it; false with err saying how the
 * linker ended and what it printed. */
static bool link_executable(bool cuda, const char *obj, const char *kernels, const char *exe, const char *out_path,
                            char *err, size_t errlen)
{
    char lib_dir[4200];
    if (!runtime_lib_dir(lib_dir, sizeof lib_dir, err, errlen))
        return false;
    arg_list a = {.n = 0};
    link_args(&a, cuda, lib_dir, obj, kernels, exe);
    char log[4096];
    int status = run_captured(a.v, log, sizeof log);
    arg_free(&a);
    if (status == 0 && *log)
        fprintf(stderr, "%s\n", log); /* the linker's warnings */
    if (status == 0)
        return sync_file(exe, out_path, err, errlen);
    if (status == -1)
        snprintf(err, errlen, "cannot write %s: cannot start the linker %s: %s", out_path, MCC_CC, strerror(errno));
    else if (WIFSIGNALED(status))
        snprintf(err, errlen, "cannot write %s: the linker (%s) was killed by signal %d (%s)%s\n%s", out_path, MCC_CC,
                 WTERMSIG(status), strsignal(WTERMSIG(status)),
                 WTERMSIG(status) == SIGXFSZ ? ": the file size limit (ulimit -f) is too small" : "", log);
    else
        snprintf(err, errlen, "cannot write %s: the linker (%s) exited with status %d:\n%s", out_path, MCC_CC,
                 WEXITSTATUS(status), log);
    return false;
}

bool cg_write_executable(ir_module *const *stages, int nstages, const char *out_path, char *err, size_t errlen)
{
    const ir_module *m = stages[0];
    bool cuda = ir_cfg_choice(m, IR_CFG_TARGET) == IR_BACKEND_CUDA;
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
    /* OUT.XXXXXX.o and OUT.XXXXXX: in OUT's directory, so the final rename stays on one file
     * system; mkstemps makes the object's name unique, the executable's is it without ".o". */
    char obj[4200], exe[4200];
    snprintf(obj, sizeof obj, "%s.XXXXXX.o", out_path);
    int fd = mkstemps(obj, 2);
    if (fd < 0) {
        free(cubin);
        snprintf(err, errlen, "cannot write %s: cannot create a temporary file in its directory (%s): %s", out_path,
                 obj, strerror(errno));
        return false;
    }
    snprintf(exe, sizeof exe, "%.*s", (int)(strlen(obj) - 2), obj);
    char why[2048];
    bool ok = cg_emit_plan_object(stages, nstages, &image, fd, why, sizeof why);
    free(cubin);
    if (!ok)
        snprintf(err, errlen, "cannot write %s: writing its plan object %s failed: %s", out_path, obj, why);
    /* the CPU's kernels: mcc's cached object, or where the cache cannot hold it OUT.XXXXXX.kernels.o */
    char kernels[4200] = "", fallback[sizeof exe + 16];
    bool temporary = false;
    snprintf(fallback, sizeof fallback, "%s.kernels.o", exe);
    if (ok && !cuda && !cg_cpu_kernels_object(fallback, kernels, sizeof kernels, &temporary, why, sizeof why)) {
        snprintf(err, errlen, "cannot write %s: writing its CPU kernels object %s failed: %s", out_path,
                 kernels[0] ? kernels : "(in mcc's cache)", why);
        ok = false;
    }
    ok = ok && link_executable(cuda, obj, cuda ? NULL : kernels, exe, out_path, err, errlen);
    unlink(obj);
    if (temporary)
        unlink(fallback);
    if (ok && rename(exe, out_path) != 0) {
        snprintf(err, errlen, "cannot write %s: renaming %s to it failed: %s", out_path, exe, strerror(errno));
        ok = false;
    }
    if (!ok)
        unlink(exe);
    return ok;
}
