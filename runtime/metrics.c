/* metrics.c — the --metrics-file writer (metrics.h). */
#include "metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int rt_append_whole(int fd, const void *data, size_t n, bool *cut)
{
    off_t start = lseek(fd, 0, SEEK_END); /* where to cut back to */
    for (size_t done = 0; done < n;) {
        ssize_t w = write(fd, (const char *)data + done, n - done); /* writes it all unless it fails */
        if (w < 0 && errno == EINTR)
            continue;
        if (w > 0) {
            done += (size_t)w;
            continue;
        }
        int e = w < 0 ? errno : ENOSPC;
        *cut = done == 0 || (start >= 0 && ftruncate(fd, start) == 0);
        return e;
    }
    return 0;
}

bool rt_metrics_open(rt_metrics *m, const char *path, char *err, size_t errlen)
{
    *m = (rt_metrics){.fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644), .path = path};
    if (m->fd < 0)
        return snprintf(err, errlen, "--metrics-file %s: cannot open it for appending: %s", path, strerror(errno)), false;
    return true;
}

/* v as JSON: integers (iterations, samples) exactly, other numbers to 9 digits, null for NaN/Inf. */
static int metrics_number(char *buf, size_t n, double v)
{
    if (!isfinite(v))
        return snprintf(buf, n, "null");
    if (v == floor(v) && fabs(v) < 9007199254740992.0) /* 2^53: every integer below is exact */
        return snprintf(buf, n, "%.0f", v);
    return snprintf(buf, n, "%.9g", v);
}

bool rt_metrics_record(rt_metrics *m, int iteration, const rt_scalar *s, int n, char *err, size_t errlen)
{
    char line[4096];
    size_t len = (size_t)snprintf(line, sizeof line, "{\"iteration\": %d", iteration);
    for (int i = 0; i < n && len < sizeof line; i++) {
        len += (size_t)snprintf(line + len, sizeof line - len, ", \"%s\": ", s[i].key);
        if (len < sizeof line)
            len += (size_t)metrics_number(line + len, sizeof line - len, s[i].value);
    }
    if (len + 2 >= sizeof line)
        return snprintf(err, errlen, "--metrics-file %s: a record of %d values is longer than %zu bytes", m->path, n,
                        sizeof line), false;
    line[len++] = '}', line[len++] = '\n';
    bool cut;
    int e = rt_append_whole(m->fd, line, len, &cut);
    if (e)
        return snprintf(err, errlen, "--metrics-file %s: cannot append the record of iteration %d: %s%s", m->path,
                        iteration, strerror(e), cut ? "" : " (and its partial line stays at the end)"), false;
    return true;
}

bool rt_metrics_close(rt_metrics *m, char *err, size_t errlen)
{
    if (close(m->fd) != 0)
        return snprintf(err, errlen, "--metrics-file %s: %s", m->path, strerror(errno)), false;
    return true;
}
