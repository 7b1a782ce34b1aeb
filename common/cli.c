/* cli.c — the command-line pieces mcc and train_rank share (cli.h). strtoll/strtod read numbers;
 * what they leave unchecked (empty text, trailing words, overflow, the flag's range) is checked
 * here once, so no flag reads "" or "abc" as 0. */
#include "common/cli.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "an integer >= 0", "an integer in 1..8", "an integer". */
static void cli_int_range_text(long long min, long long max, char *buf, size_t n)
{
    if (min == LLONG_MIN && max == LLONG_MAX) snprintf(buf, n, "an integer");
    else if (max == LLONG_MAX) snprintf(buf, n, "an integer >= %lld", min);
    else if (min == LLONG_MIN) snprintf(buf, n, "an integer <= %lld", max);
    else snprintf(buf, n, "an integer in %lld..%lld", min, max);
}

bool cli_parse_int(const char *flag, const char *text, long long min, long long max, long long *out, char *err,
                   size_t errlen)
{
    char want[96];
    cli_int_range_text(min, max, want, sizeof want);
    if (!text) {
        snprintf(err, errlen, "%s needs a value: %s", flag, want);
        return false;
    }
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    bool whole = end != text && *end == '\0' && !(text[0] == ' ' || text[0] == '\t');
    if (!whole) {
        snprintf(err, errlen, "%s expects %s, got '%.64s'", flag, want, text);
        return false;
    }
    if (errno == ERANGE || v < min || v > max) {
        snprintf(err, errlen, "%s %.64s is out of range: give %s", flag, text, want);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_num(const char *flag, const char *text, double min, bool min_open, double max, double *out,
                   char *err, size_t errlen)
{
    char want[96];
    if (isinf(max)) snprintf(want, sizeof want, "a number %s %g", min_open ? ">" : ">=", min);
    else snprintf(want, sizeof want, "a number in %s%g, %g]", min_open ? "(" : "[", min, max);
    if (isinf(min) && isinf(max)) snprintf(want, sizeof want, "a finite number");
    if (!text) {
        snprintf(err, errlen, "%s needs a value: %s", flag, want);
        return false;
    }
    char *end;
    double v = strtod(text, &end);
    if (end == text || *end || text[0] == ' ' || text[0] == '\t' || !isfinite(v)) {
        snprintf(err, errlen, "%s expects %s, got '%.64s'", flag, want, text);
        return false;
    }
    if (v < min || (min_open && v == min) || v > max) {
        snprintf(err, errlen, "%s %.64s is out of range: give %s", flag, text, want);
        return false;
    }
    *out = v;
    return true;
}

char **cli_split_equals(int argc, char **argv, int *argc_out)
{
    size_t text = 0;
    int n = 0;
    for (int i = 0; i < argc; i++) {
        const char *eq = i > 0 && !strncmp(argv[i], "--", 2) ? strchr(argv[i], '=') : NULL;
        n += eq ? 2 : 1;
        text += eq ? strlen(argv[i]) + 1 : 0;
    }
    /* One block: the pointer array, then the copied "--flag" names. */
    size_t ptrs = ((size_t)n + 1) * sizeof(char *);
    char **args = malloc(ptrs + text + 1);
    if (!args) {
        fprintf(stderr, "error: out of memory reading the command line\n");
        exit(2);
    }
    char *names = (char *)args + ptrs;
    int k = 0;
    for (int i = 0; i < argc; i++) {
        const char *eq = i > 0 && !strncmp(argv[i], "--", 2) ? strchr(argv[i], '=') : NULL;
        if (!eq) {
            args[k++] = argv[i];
            continue;
        }
        size_t len = (size_t)(eq - argv[i]);
        memcpy(names, argv[i], len);
        names[len] = '\0';
        args[k++] = names;
        args[k++] = (char *)eq + 1;
        names += len + 1;
    }
    args[k] = NULL;
    *argc_out = k;
    return args;
}

void cli_argv_free(char **args) { free(args); }

static int cli_edit_distance(const char *a, const char *b)
{
    enum { MAXLEN = 64 };
    size_t na = strlen(a), nb = strlen(b);
    if (na >= MAXLEN || nb >= MAXLEN) return INT_MAX;
    int before[MAXLEN + 1], prev[MAXLEN + 1], cur[MAXLEN + 1];
    for (size_t j = 0; j <= nb; j++) prev[j] = (int)j;
    for (size_t i = 1; i <= na; i++) {
        cur[0] = (int)i;
        for (size_t j = 1; j <= nb; j++) {
            int sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            int del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && before[j - 2] + 1 < cur[j])
                cur[j] = before[j - 2] + 1; /* two neighbours swapped: one edit */
        }
        memcpy(before, prev, sizeof prev);
        memcpy(prev, cur, sizeof prev);
    }
    return prev[nb];
}

/* Within an edit (a swap of neighbours is one) for every 4 characters of the name past its
 * dashes, and one for a shorter name: a typo, not another word that happens to be near
 * (--ckpt-format is not --fp8-format, --mscale not --save). */
const char *cli_closest(const char *word, const char *const *names, int n)
{
    const char *best = NULL;
    int best_d = INT_MAX;
    for (int i = 0; i < n; i++) {
        int d = cli_edit_distance(word, names[i]), len = (int)strlen(names[i] + strspn(names[i], "-"));
        if (d < best_d && d <= (len >= 8 ? len / 4 : 1)) best_d = d, best = names[i];
    }
    return best;
}
