/* cuda_codegen.h — compiling the CUDA kernels with NVRTC at `mcc compile` time. */
#ifndef MCC_CUDA_CODEGEN_H
#define MCC_CUDA_CODEGEN_H

#include <stdbool.h>
#include <stddef.h>

/* Compiles kernels_templates/kernels.cu (embedded in mcc) for sm_90 into a cubin, or takes it
 * from the cache ($MCC_CACHE_DIR, else $XDG_CACHE_HOME/mcc, else ~/.cache/mcc) keyed by a hash
 * of the sources, options and NVRTC version. *image is malloc'd. */
bool cg_cuda_compile_kernels(void **image, size_t *size, char *err, size_t errlen);
/* The same with up to 16 extra options, e.g. "-DMCC_ATTN_TILES_D128=128,64,8,64,128,8" (the
 * attention tile sweep of bench/attention_bench.c). */
bool cg_cuda_compile_kernels_with(const char *const *defines, int ndefines, void **image, size_t *size, char *err,
                                  size_t errlen);

#endif
