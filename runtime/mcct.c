/* mcct.c — the .mcct tensor-file writer (format in mcct.h). */
#include "mcct.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

/* n bytes; after a short write nothing more, and w->error keeps why. */
static void put(rt_mcct *w, const void *p, size_t n)
{
    if (!w->error && fwrite(p, 1, n, w->f) != n)
        w->error = errno ? errno : EIO;
}

static void put_u32(rt_mcct *w, uint32_t v) { put(w, &v, 4); } /* x86-64 and aarch64: little-endian */

bool rt_mcct_open(rt_mcct *w, const char *path)
{
    *w = (rt_mcct){.f = fopen(path, "wb")};
    snprintf(w->path, sizeof w->path, "%s", path);
    if (!w->f)
        return w->error = errno, false;
    put(w, "MCCT", 4);
    put_u32(w, 1);
    put_u32(w, 0); /* count, patched by close */
    return !w->error;
}

bool rt_mcct_add(rt_mcct *w, const char *name, const ir_type *t, const void *data)
{
    put_u32(w, (uint32_t)strlen(name));
    put(w, name, strlen(name));
    put_u32(w, (uint32_t)t->dtype);
    put_u32(w, (uint32_t)t->ndim);
    for (int i = 0; i < t->ndim; i++)
        put(w, &t->dims[i], 8);
    put(w, data, ir_bytes(t));
    w->count++;
    return !w->error;
}

bool rt_file_close_synced(FILE *f)
{
    bool ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
    int e = errno;
    if (fclose(f) != 0)
        return false;
    errno = e;
    return ok;
}

bool rt_mcct_close(rt_mcct *w)
{
    if (!w->error && fseek(w->f, 8, SEEK_SET) != 0)
        w->error = errno;
    put_u32(w, w->count);
    if (!rt_file_close_synced(w->f) && !w->error)
        w->error = errno;
    w->f = NULL;
    return !w->error;
}
