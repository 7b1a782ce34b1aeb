/* os.c — a monotonic clock, the CPUs to run on, reading a whole file, mkdir -p (os.h). */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "common/os.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

double os_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int os_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 ? (int)online : 1;
}

char *os_read_file(const char *path, size_t *n, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    for (size_t got; buf && (got = fread(buf + len, 1, cap - len, f)) > 0;) {
        len += got;
        char *bigger = len == cap ? realloc(buf, (cap *= 2) + 1) : buf;
        if (!bigger)
            free(buf);
        buf = bigger;
    }
    int bad = !buf ? ENOMEM : ferror(f) ? EIO : 0;
    fclose(f);
    if (bad) {
        snprintf(err, errlen, "%s: cannot read: %s", path, strerror(bad));
        free(buf);
        return NULL;
    }
    buf[len] = '\0';
    *n = len;
    return buf;
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

int os_write_all(int fd, const void *data, size_t n)
{
    const char *s = data;
    while (n) {
        ssize_t w = write(fd, s, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? errno : ENOSPC;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}
