/* cuda_compile_test.c — needs no GPU: NVRTC compiles kernels_templates/ to an sm_90 cubin, and
 * every kernel the launchers can ask for (runtime/cuda/launchers.h, each family expanded over
 * f32/bf16) is a symbol in it; otherwise train_rank would stop at its first step on a GPU. */
#include "codegen/cuda/cuda_codegen.h"
#include "runtime/cuda/launchers.h"

#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ELF string tables hold symbol names NUL-separated: look for "\0name\0". */
static int has_symbol(const void *image, size_t size, const char *name)
{
    char key[128];
    size_t n = strlen(name);
    key[0] = 0;
    memcpy(key + 1, name, n + 1);
    return memmem(image, size, key, n + 2) != NULL;
}

/* Checks stem_<suffixes> for every combination of `ndtypes` float suffixes; returns the misses. */
static int check_family(const void *image, size_t size, const char *stem, int ndtypes)
{
    static const char *const sfx[] = RT_CUDA_FLOAT_SUFFIXES;
    int nsfx = (int)(sizeof sfx / sizeof sfx[0]), combos = 1, missing = 0;
    for (int i = 0; i < ndtypes; i++)
        combos *= nsfx;
    for (int k = 0; k < combos; k++) {
        char name[128];
        int len = snprintf(name, sizeof name, "%s", stem);
        for (int i = 0, rest = k; i < ndtypes; i++, rest /= nsfx)
            len += snprintf(name + len, sizeof name - (size_t)len, "_%s", sfx[rest % nsfx]);
        if (!has_symbol(image, size, name)) {
            fprintf(stderr, "FAIL: kernel %s (used by runtime/cuda/launchers.c) is not in the cubin\n", name);
            missing++;
        }
    }
    return missing;
}

int main(void)
{
    char err[8192];
    void *image = NULL;
    size_t size = 0;
    if (!cg_cuda_compile_kernels(&image, &size, err, sizeof err)) {
        fprintf(stderr, "FAIL: %s\n", err);
        return 1;
    }
    if (size < 4 || memcmp(image, "\x7f" "ELF", 4)) {
        fprintf(stderr, "FAIL: NVRTC returned %zu bytes that are not an ELF cubin\n", size);
        return 1;
    }
    int missing = 0;
#define K(id, stem, ndtypes) missing += check_family(image, size, stem, ndtypes);
    RT_CUDA_KERNELS(K)
#undef K
    free(image);
    if (missing)
        return 1;
    printf("cubin of %zu bytes holds all %d kernel families\n", size, (int)RT_CUDA_NUM_KERNELS);
    return 0;
}
