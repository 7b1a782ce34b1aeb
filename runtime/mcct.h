/* mcct.h — writes .mcct tensor files (dumps for the numerics tests). Little-endian:
 * "MCCT", u32 version 1, u32 count; per tensor: u32 name_len, name, u32 dtype (ir_dtype),
 * u32 ndim, i64 dims[ndim], raw row-major data. */
#ifndef MCC_RT_MCCT_H
#define MCC_RT_MCCT_H

#include <stdio.h>

#include "ir/ir.h"

typedef struct {
    FILE *f;
    unsigned count;
} rt_mcct;

bool rt_mcct_open(rt_mcct *w, const char *path);
void rt_mcct_add(rt_mcct *w, const char *name, const ir_type *t, const void *data);
bool rt_mcct_close(rt_mcct *w); /* writes the count; false on an I/O error */

#endif
