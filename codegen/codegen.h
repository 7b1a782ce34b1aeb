/* codegen.h — code generation: the per-rank plan into an object file (LLVM), linked with the
 * runtime library into a train_rank executable. */
#ifndef MCC_CODEGEN_H
#define MCC_CODEGEN_H

#include <stdbool.h>
#include <stddef.h>

#include "ir/ir.h"

/* Writes the object file holding the module's plan (symbols mcc_plan_text, mcc_plan_size). */
bool cg_emit_plan_object(const ir_module *m, const char *obj_path, char *err, size_t errlen);
/* Emits the plan object next to out_path and links it with libmccrt into the executable. */
bool cg_write_executable(const ir_module *m, const char *out_path, char *err, size_t errlen);

#endif
