/* os.c — a monotonic clock and mkdir -p (os.h). */
#include "common/os.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

double os_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

bool os_mkdirs(const char *dir, char *err, size_t errlen)
{
    char path[4096];
    if (!*dir || snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) {
        snprintf(err, errlen, "directory '%.64s': %s", dir, *dir ? "path too long" : "empty path");
        return false;
    }
    for (char *p = path + 1;; p++) {
        if (*p && *p != '/')
            continue;
        char c = *p;
        *p = 0;
        if (mkdir(path, 0777) != 0 && errno != EEXIST) {
            snprintf(err, errlen, "cannot create directory %s: %s", path, strerror(errno));
            return false;
        }
        if (!c)
            break;
        *p = c;
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s exists and is not a directory", path);
        return false;
    }
    return true;
}
