/* metrics.c — the --metrics-file writer (metrics.h). */
#include "metrics.h"

#include "common/knobs.h"

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

/* {"iteration": 0, "knobs": {"MCC_CPU_KERNELS": "c", ...}}: the MCC_ variables set, every value
 * as its text (checked by knob_init: a choice or a number, nothing to escape). False when none is
 * set, or when absurdly long numbers ("000...064") would not fit: then no record. */
static bool metrics_knobs_line(char *line, size_t n, size_t *len)
{
    size_t at = (size_t)snprintf(line, n, "{\"iteration\": 0, \"knobs\": {");
    int shown = 0;
    for (int k = 0; k < KNOB_COUNT && at < n; k++)
        if (knob_shown((knob_id)k))
            at += (size_t)snprintf(line + at, n - at, "%s\"%s\": \"%s\"", shown++ ? ", " : "", knob_table[k].name,
                                   knob_text((knob_id)k));
    if (at < n)
        at += (size_t)snprintf(line + at, n - at, "}}\n");
    *len = at;
    return shown && at < n;
}

bool rt_metrics_open(rt_metrics *m, const char *path, char *err, size_t errlen)
{
    *m = (rt_metrics){.fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644), .path = path};
    if (m->fd < 0)
        return snprintf(err, errlen, "--metrics-file %s: cannot open it for appending: %s", path, strerror(errno)), false;
    char line[4096];
    size_t len;
    bool cut;
    int e = metrics_knobs_line(line, sizeof line, &len) ? rt_append_whole(m->fd, line, len, &cut) : 0;
    if (e)
        return snprintf(err, errlen, "--metrics-file %s: cannot append the record of the knobs: %s", path, strerror(e)),
               false;
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
