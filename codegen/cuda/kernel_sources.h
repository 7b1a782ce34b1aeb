/* kernel_sources.h — the kernel templates (kernels_templates/) embedded in mcc at build time. */
#ifndef MCC_KERNEL_SOURCES_H
#define MCC_KERNEL_SOURCES_H

typedef struct {
    const char *name; /* file name, e.g. "norms.cuh" */
    const char *text;
} cg_kernel_source;

extern const cg_kernel_source cg_kernel_sources[];
extern const int cg_num_kernel_sources;

#endif
