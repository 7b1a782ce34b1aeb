/* cache.c — the on-disk cache of compiled kernels (cache.h). */
#include "common/cache.h"

#include "common/knobs.h"
#include "common/os.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

uint64_t cache_hash(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

void cache_entry(char *out, size_t len, const char *prefix, uint64_t hash, const char *ext)
{
    const char *dir = knob_text(KNOB_CACHE_DIR), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char base[3072];
    if (dir)
        snprintf(base, sizeof base, "%s", dir);
    else if (xdg)
        snprintf(base, sizeof base, "%s/mcc", xdg);
    else
        snprintf(base, sizeof base, "%s/.cache/mcc", home ? home : "/tmp");
    char why[4200];
    os_mkdirs(base, why, sizeof why); /* a cache that cannot be written is noted when writing it */
    snprintf(out, len, "%s/%s-%016llx.%s", base, prefix, (unsigned long long)hash, ext);
}

bool cache_write(const char *path, const void *data, size_t size, const char *what)
{
    char tmp[CACHE_NAME_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    bool ok = f && fwrite(data, 1, size, f) == size;
    ok = f && fclose(f) == 0 && ok;
    if (ok && rename(tmp, path) == 0)
        return true;
    fprintf(stderr, "mcc: note: cannot cache %s as %s (%s): the next compile makes them again; set MCC_CACHE_DIR "
                    "to a writable directory\n", what, path, strerror(errno));
    remove(tmp);
    return false;
}
