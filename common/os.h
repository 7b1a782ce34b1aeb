/* os.h — the few operating-system helpers mcc and train_rank both need, written once: a
 * monotonic clock and mkdir -p that says what failed. */
#ifndef MCC_OS_H
#define MCC_OS_H

#include <stdbool.h>
#include <stddef.h>

/* Seconds on the monotonic clock (for durations only). */
double os_now_s(void);

/* Creates dir and its missing parents (mkdir -p). False with "cannot create directory D:
 * <reason>" or "D exists and is not a directory" in err. */
bool os_mkdirs(const char *dir, char *err, size_t errlen);

#endif
