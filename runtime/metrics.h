/* metrics.h — train_rank's --metrics-file: one JSON object a line (JSONL), appended to. Each
 * record is formatted whole, then written by one write(2) on an O_APPEND descriptor: nothing is
 * buffered, so a killed run's file ends with its last whole record, and a write error (a full
 * disk, a file size limit) is seen by the record that met it. */
#ifndef MCC_RT_METRICS_H
#define MCC_RT_METRICS_H

#include <stdbool.h>
#include <stddef.h>

/* A named value of a record; NaN or Inf is written as null (JSON has neither), as is an
 * absent value (pass NAN). */
typedef struct {
    const char *key;
    double value;
} rt_scalar;

typedef struct {
    int fd;
    const char *path;
} rt_metrics;

/* Appends data[n] to fd (opened O_APPEND) whole or not at all: one write(2) unless it fails;
 * after a short write (a full disk, a file size limit) the next write says why, and the part
 * written is cut off again. 0, or the errno of the failure, with *cut false if the part stays.
 * Every record writer's append (the metrics file, TensorBoard's event file). */
int rt_append_whole(int fd, const void *data, size_t n, bool *cut);

/* Opens (creating) path for appending and, when MCC_ variables are set, appends the run's first
 * record {"iteration": 0, "knobs": {"MCC_...": "value", ...}} (so each run appended to a file
 * says how it ran). False with the file and the reason in err. */
bool rt_metrics_open(rt_metrics *m, const char *path, char *err, size_t errlen);
/* Appends {"iteration": iteration, "<key>": value, ...} and a newline. On a write error the file
 * is cut back to its last whole record and it returns false with the file and the reason in err:
 * the caller should stop the run. */
bool rt_metrics_record(rt_metrics *m, int iteration, const rt_scalar *s, int n, char *err, size_t errlen);
/* False with the file and the reason in err when the close reports a late write error. */
bool rt_metrics_close(rt_metrics *m, char *err, size_t errlen);

#endif
