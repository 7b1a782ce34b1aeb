/* check.h — the unit tests' check: CHECK(cond[, fmt, ...]) reports file:line, the condition and
 * an optional message, counts the failure in `failures` and goes on, so one run lists every
 * failed check. Test-only; one per test program. */
#ifndef MCC_TESTS_CHECK_H
#define MCC_TESTS_CHECK_H

#include <stdarg.h>
#include <stdio.h>

static int failures;

static inline void check_note(const char *fmt, ...)
{
    if (*fmt) {
        va_list ap;
        va_start(ap, fmt);
        fputs(": ", stderr);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
    }
    fputc('\n', stderr);
}

/* The message, when given, starts with a string literal (it is pasted after ""). */
#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "FAIL %s:%d: %s", __FILE__, __LINE__, #cond);                                              \
            check_note("" __VA_ARGS__);                                                                                \
            failures++;                                                                                                \
        }                                                                                                              \
    } while (0)

#endif
