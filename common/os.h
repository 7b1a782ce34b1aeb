/* os.h — the few operating-system helpers mcc and train_rank both need, written once: a
 * monotonic clock, the CPUs to spread threads over, reading a whole file, writing one whole, and
 * mkdir -p that says what failed. */
#ifndef MCC_OS_H
#define MCC_OS_H

#include <stdbool.h>
#include <stddef.h>

/* Seconds on the monotonic clock (for durations only). */
double os_now_s(void);

/* The CPUs this process may run on (its affinity mask: a container's cpuset or taskset's share,
 * not every core the machine has online), at least 1: how many threads a static split of work
 * may start without two of them taking turns on one CPU while the rest wait for both. */
int os_cpus(void);

/* The whole file at path (a pipe too), NUL-terminated after its *n bytes (malloc'd: free it).
 * NULL with "PATH: cannot read: <reason>" in err. */
char *os_read_file(const char *path, size_t *n, char *err, size_t errlen);

/* Writes all n bytes at fd (in pieces of at most 1 GiB, retrying EINTR). 0, or the errno of the
 * failure (ENOSPC for a write that took nothing). */
int os_write_all(int fd, const void *data, size_t n);

/* Creates dir and its missing parents (mkdir -p). False with "cannot create directory D:
 * <reason>" or "D exists and is not a directory" in err. */
bool os_mkdirs(const char *dir, char *err, size_t errlen);

#endif
