/* nvrtc.c — NVRTC compilation of the kernel templates to a sm_90 cubin, cached on disk by a
 * hash of source and options, so a second `mcc compile` costs nothing. A compile with a cold
 * cache takes about a minute: it says so before it starts and how long it took. */
#include "cuda_codegen.h"
#include "common/cache.h"
#include "common/os.h"

#include "kernel_sources.h"

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
    uint64_t h = CACHE_HASH_SEED;
    for (int i = 0; i < cg_num_kernel_sources; i++) {
        h = cache_hash(h, cg_kernel_sources[i].name, strlen(cg_kernel_sources[i].name) + 1);
        h = cache_hash(h, cg_kernel_sources[i].text, strlen(cg_kernel_sources[i].text) + 1);
    }
    for (int i = 0; i < o->n; i++)
        h = cache_hash(h, o->opt[i], strlen(o->opt[i]) + 1);
    int major = 0, minor = 0;
    nvrtcVersion(&major, &minor);
    int version[2] = {major, minor};
    return cache_hash(h, version, sizeof version);
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
    char path[CACHE_NAME_MAX];
    cache_entry(path, sizeof path, "kernels", sources_hash(&o), "cubin");
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
    cache_write(path, *image, *size, "the CUDA kernels");
    return true;
}

bool cg_cuda_compile_kernels(void **image, size_t *size, char *err, size_t errlen)
{
    return cg_cuda_compile_kernels_with(NULL, 0, image, size, err, errlen);
}
