/* codegen.h — code generation: the per-rank plan into an object file (LLVM), linked with the
 * runtime library into a train_rank executable. */
#ifndef MCC_CODEGEN_H
#define MCC_CODEGEN_H

#include <stdbool.h>
#include <stddef.h>

#include "ir/ir.h"

/* What the plan object carries besides the IR: the device table's symbol and its kernels. */
typedef struct {
    const char *device_symbol;      /* "rt_cpu_device" | "rt_cuda_device" */
    const void *data;               /* kernel image (cubin); may be empty */
    size_t size;
} cg_plan_image;

/* Writes the object file holding the plan (symbols mcc_plan_text: its text, every pipeline stage's
 * module as ir_print_stages writes them, NUL-terminated;
 * mcc_plan_size, mcc_plan_device, and a cubin's mcc_plan_image/_size) to fd, checking every write,
 * and closes fd; false with err saying why (the caller names the file). */
bool cg_emit_plan_object(ir_module *const *stages, int nstages, const cg_plan_image *image, int fd, char *err,
                         size_t errlen);
/* The CPU's kernel image, an object defining mcc_plan_image (the elementwise kernels' table,
 * indexed by op) and mcc_plan_image_size: its path in path[len], mcc's cache entry (made here the
 * first time, common/cache.h), or where the cache cannot be written `fallback`, written here and
 * *temporary (the caller removes it). False with err saying why. */
bool cg_cpu_kernels_object(const char *fallback, char *path, size_t len, bool *temporary, char *err, size_t errlen);
/* Compiles the target's kernels (NVRTC for config target = cuda), emits the plan object next to
 * out_path and links it with libmccrt (and libmccrt_cuda) into the executable, under temporary
 * names renamed to out_path only when whole: on failure out_path is untouched and err names the
 * file that could not be written. */
/* stages: one plan a pipeline stage (one without pipeline parallelism), each run by every rank of
 * its stage, its rank terms resolved by train_rank at load. */
bool cg_write_executable(ir_module *const *stages, int nstages, const char *out_path, char *err, size_t errlen);

#endif
