/* nvrtc.c — NVRTC compilation of the kernel templates to a sm_90 cubin, cached on disk by a
 * hash of source and options, so a second `mcc compile` costs nothing. A compile with a cold
 * cache takes about a minute: it says so before it starts and how long it took. */
#include "cuda_codegen.h"
#include "common/os.h"

#include "kernel_sources.h"
#include "common/knobs.h"

#include <errno.h>
#include <nvrtc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* cuda_bf16.h and friends come from the toolkit mcc was built with. */
static const char *const nvrtc_options[] = {"--gpu-architecture=sm_90", "--std=c++17", "-default-device",
                                            "--use_fast_math", "-lineinfo", "--include-path=" MCC_CUDA_INCLUDE_DIR};
#define NUM_OPTIONS (int)(sizeof nvrtc_options / sizeof nvrtc_options[0])

static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* The options of one compile: nvrtc_options, then the caller's -D definitions. */
typedef struct {
    const char *opt[NUM_OPTIONS + 16];
    int n;
} compile_options;

static compile_options options_with(const char *const *defines, int ndefines)
{
    compile_options o = {.n = 0};
    for (int i = 0; i < NUM_OPTIONS; i++)
        o.opt[o.n++] = nvrtc_options[i];
    for (int i = 0; i < ndefines && i < 16; i++)
        o.opt[o.n++] = defines[i];
    return o;
}

static uint64_t sources_hash(const compile_options *o)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < cg_num_kernel_sources; i++) {
        h = fnv1a(h, cg_kernel_sources[i].name, strlen(cg_kernel_sources[i].name) + 1);
        h = fnv1a(h, cg_kernel_sources[i].text, strlen(cg_kernel_sources[i].text) + 1);
    }
    for (int i = 0; i < o->n; i++)
        h = fnv1a(h, o->opt[i], strlen(o->opt[i]) + 1);
    int major = 0, minor = 0;
    nvrtcVersion(&major, &minor);
    int version[2] = {major, minor};
    return fnv1a(h, version, sizeof version);
}

static void cache_path(char *out, size_t len, uint64_t hash)
{
    const char *dir = knob_text(KNOB_CACHE_DIR), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char base[3072];
    if (dir)
        snprintf(base, sizeof base, "%s", dir);
    else if (xdg)
        snprintf(base, sizeof base, "%s/mcc", xdg);
    else
        snprintf(base, sizeof base, "%s/.cache/mcc", home ? home : "/tmp");
    char why[4200];
    os_mkdirs(base, why, sizeof why); /* a cache that cannot be written is noted when writing it */
    snprintf(out, len, "%s/kernels-%016llx.cubin", base, (unsigned long long)hash);
}

/* Written to a temporary name and renamed, so concurrent compiles never see half a file. A cache
 * that cannot be written costs the next compile its minute: say so. */
static void write_cache(const char *path, const void *data, size_t size)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    bool ok = f && fwrite(data, 1, size, f) == size;
    ok = f && fclose(f) == 0 && ok;
    if (ok && rename(tmp, path) == 0)
        return;
    fprintf(stderr, "mcc: note: cannot cache the CUDA kernels as %s (%s): the next compile compiles them again; "
                    "set MCC_CACHE_DIR to a writable directory\n", path, strerror(errno));
    remove(tmp);
}

/* Kernel templates in the sources (each `__global__`; the cubin holds their instantiations). */
static int count_kernel_templates(void)
{
    int n = 0;
    for (int i = 0; i < cg_num_kernel_sources; i++)
        for (const char *p = cg_kernel_sources[i].text; (p = strstr(p, "__global__")); p++)
            n++;
    return n;
}

static bool nvrtc_compile(const compile_options *o, void **image, size_t *size, char *err, size_t errlen)
{
    const char *main_src = NULL;
    const char *hdr_names[64], *hdr_texts[64];
    int nh = 0;
    for (int i = 0; i < cg_num_kernel_sources && nh < 64; i++) {
        if (!strcmp(cg_kernel_sources[i].name, "kernels.cu"))
            main_src = cg_kernel_sources[i].text;
        else
            hdr_names[nh] = cg_kernel_sources[i].name, hdr_texts[nh++] = cg_kernel_sources[i].text;
    }
    if (!main_src)
        return snprintf(err, errlen, "kernels_templates/kernels.cu is missing from this mcc build"), false;
    nvrtcProgram prog;
    nvrtcResult r = nvrtcCreateProgram(&prog, main_src, "kernels.cu", nh, hdr_texts, hdr_names);
    if (r != NVRTC_SUCCESS)
        return snprintf(err, errlen, "NVRTC: %s", nvrtcGetErrorString(r)), false;
    r = nvrtcCompileProgram(prog, o->n, o->opt);
    if (r != NVRTC_SUCCESS) {
        size_t loglen = 0;
        nvrtcGetProgramLogSize(prog, &loglen);
        char *log = malloc(loglen + 1);
        nvrtcGetProgramLog(prog, log);
        log[loglen] = 0;
        snprintf(err, errlen, "NVRTC could not compile the kernel templates (%s):\n%.6000s", nvrtcGetErrorString(r), log);
        free(log);
        nvrtcDestroyProgram(&prog);
        return false;
    }
    nvrtcGetCUBINSize(prog, size);
    *image = malloc(*size);
    nvrtcGetCUBIN(prog, *image);
    nvrtcDestroyProgram(&prog);
    return true;
}

bool cg_cuda_compile_kernels_with(const char *const *defines, int ndefines, void **image, size_t *size, char *err,
                                  size_t errlen)
{
    compile_options o = options_with(defines, ndefines);
    char path[4096];
    cache_path(path, sizeof path, sources_hash(&o));
    char why[4200];
    if ((*image = os_read_file(path, size, why, sizeof why)) && *size > 0)
        return true; /* a cache miss (no file, or an empty one) compiles */
    free(*image);
    fprintf(stderr, "mcc: compiling %d CUDA kernel templates with NVRTC for sm_90 (about a minute, once: cached as "
                    "%s for next time)\n", count_kernel_templates(), path);
    double t0 = os_now_s();
    if (!nvrtc_compile(&o, image, size, err, errlen))
        return false;
    fprintf(stderr, "mcc: compiled the CUDA kernels in %.1f s\n", os_now_s() - t0);
    write_cache(path, *image, *size);
    return true;
}

bool cg_cuda_compile_kernels(void **image, size_t *size, char *err, size_t errlen)
{
    return cg_cuda_compile_kernels_with(NULL, 0, image, size, err, errlen);
}
