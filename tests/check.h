/* check.h — the unit tests' check: CHECK(cond[, fmt, ...]) reports file:line, the condition and
 * an optional message, counts the failure in `failures` and goes on, so one run lists every
 * failed check. Test-only; one per test program. */
#ifndef MCC_TESTS_CHECK_H
#define MCC_TESTS_CHECK_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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

/* A test program of named parts: `prog` runs them all, `prog NAME` the one (ctest gives each its
 * own test). Returns the exit status: 0, 1 when a check failed, 2 for an unknown name. */
typedef struct {
    const char *name;
    void (*run)(void);
} check_part;

static inline int check_main(int argc, char **argv, const check_part *parts, size_t n)
{
    int ran = 0;
    for (size_t i = 0; i < n; i++)
        if (argc < 2 || strcmp(argv[1], parts[i].name) == 0) {
            parts[i].run();
            ran = 1;
        }
    if (!ran) {
        printf("unknown test `%s`\n", argv[1]);
        return 2;
    }
    printf(failures ? "%d check(s) failed\n" : "ok\n", failures);
    return failures ? 1 : 0;
}

#endif
