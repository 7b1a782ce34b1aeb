/* mcct.c — the .mcct tensor-file writer (format in mcct.h). */
#include "mcct.h"

#include <stdint.h>
#include <string.h>

static void put_u32(FILE *f, uint32_t v) { fwrite(&v, 4, 1, f); } /* x86-64 and aarch64: little-endian */

bool rt_mcct_open(rt_mcct *w, const char *path)
{
    w->f = fopen(path, "wb");
    w->count = 0;
    if (!w->f)
        return false;
    fwrite("MCCT", 1, 4, w->f);
    put_u32(w->f, 1);
    put_u32(w->f, 0); /* count, patched by close */
    return true;
}

void rt_mcct_add(rt_mcct *w, const char *name, const ir_type *t, const void *data)
{
    put_u32(w->f, (uint32_t)strlen(name));
    fwrite(name, 1, strlen(name), w->f);
    put_u32(w->f, (uint32_t)t->dtype);
    put_u32(w->f, (uint32_t)t->ndim);
    for (int i = 0; i < t->ndim; i++)
        fwrite(&t->dims[i], 8, 1, w->f);
    fwrite(data, 1, ir_bytes(t), w->f);
    w->count++;
}

bool rt_mcct_close(rt_mcct *w)
{
    bool ok = fseek(w->f, 8, SEEK_SET) == 0;
    put_u32(w->f, w->count);
    ok = ok && !ferror(w->f);
    return fclose(w->f) == 0 && ok;
}
