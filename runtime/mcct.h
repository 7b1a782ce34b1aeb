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
    int error;       /* errno of the first failed write or close, 0 while all went well */
    char path[4096]; /* for the caller's messages */
} rt_mcct;

/* Each returns false once an I/O error happened (w->error says which); the caller names w->path. */
bool rt_mcct_open(rt_mcct *w, const char *path);
bool rt_mcct_add(rt_mcct *w, const char *name, const ir_type *t, const void *data);
bool rt_mcct_close(rt_mcct *w); /* writes the count, flushes, fsyncs and closes, even after an error */
/* Flushes f, fsyncs it and closes it: false (errno set) when any of them fails, so a late write
 * error (a full disk seen only at the flush) is not lost. Every dump file's close. */
bool rt_file_close_synced(FILE *f);

#endif
