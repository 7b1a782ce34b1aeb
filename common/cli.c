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

int cli_value_index(const char *values, const char *text)
{
    char *end;
    double x = strtod(text, &end);
    bool number = *text && !*end;
    int i = 0;
    for (const char *p = values; p; p = strchr(p, '|') ? strchr(p, '|') + 1 : NULL, i++) {
        size_t n = strcspn(p, "|");
        if (strlen(text) == n && strncmp(p, text, n) == 0) return i;
        if (number && strtod(p, &end) == x && (size_t)(end - p) == n) return i;
    }
    return -1;
}

bool cli_value_listed(const char *values, const char *text) { return cli_value_index(values, text) >= 0; }

bool cli_value_fits(const char *value, const char *text)
{
    return !*value || (*value >= 'A' && *value <= 'Z') || *value == '[' || cli_value_listed(value, text);
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

/* ---- @FILE -------------------------------------------------------------------------------- */

/* The words read so far: NUL-terminated, one after another. */
typedef struct {
    char *text;
    size_t len, cap;
    int n;
} cli_words;

static bool cli_words_put(cli_words *w, char ch)
{
    if (w->len == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 4096;
        char *t = realloc(w->text, cap);
        if (!t) return false;
        w->text = t, w->cap = cap;
    }
    w->text[w->len++] = ch;
    return true;
}

/* A bash array's own lines (`MODEL_ARGS=(` and `)`), which a script's flags are pasted with. */
static bool cli_array_syntax(const char *word)
{
    if (!strcmp(word, ")")) return true;
    size_t n = strspn(word, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_0123456789");
    return n > 0 && (!strcmp(word + n, "=(") || !strcmp(word + n, "+=("));
}

/* Splits file text into w as a shell splits words: blanks and newlines between words, '...' and
 * "..." quoting (\" and \\ inside double quotes), a backslash quoting the next character (a
 * newline: the line goes on), '#' starting a comment where a word could start. A '$' outside
 * single quotes is refused: the file holds flags as the program receives them, after the shell. */
static bool cli_split_words(const char *path, const char *t, cli_words *w, char *err, size_t errlen)
{
    int line = 1;
    for (const char *p = t; *p;) {
        if (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n' || (p[0] == '\\' && p[1] == '\n')) {
            line += *p == '\n' || p[0] == '\\';
            p += p[0] == '\\' ? 2 : 1;
            continue;
        }
        if (*p == '#') {
            p += strcspn(p, "\n");
            continue;
        }
        size_t start = w->len;
        char quote = 0;
        for (; *p && (quote || !strchr(" \t\r\n", *p)); p++) {
            char ch = *p;
            if (!quote && (ch == '\'' || ch == '"')) {
                quote = ch;
                continue;
            }
            if (quote && ch == quote) {
                quote = 0;
                continue;
            }
            if (ch == '$' && quote != '\'') {
                snprintf(err, errlen, "%s:%d: '%.40s' is a shell expansion: write the file with the values the shell "
                                      "gives (e.g. printf '%%s\\n' \"${ARGS[@]}\" > %s)", path, line, p, path);
                return false;
            }
            if (ch == '\\' && quote != '\'' && p[1] && (!quote || p[1] == '"' || p[1] == '\\'))
                ch = *++p;
            line += ch == '\n';
            if (!cli_words_put(w, ch)) return snprintf(err, errlen, "out of memory reading %s", path), false;
        }
        if (quote) return snprintf(err, errlen, "%s:%d: a %c quote is not closed", path, line, quote), false;
        if (!cli_words_put(w, '\0')) return snprintf(err, errlen, "out of memory reading %s", path), false;
        if (cli_array_syntax(w->text + start)) w->len = start;
        else w->n++;
    }
    return true;
}

static char *cli_read_file(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) return snprintf(err, errlen, "@%s: cannot open it: %s", path, strerror(errno)), NULL;
    char *t = NULL;
    size_t len = 0, cap = 0, got;
    do {
        if (len + 4096 + 1 > cap) {
            char *grown = realloc(t, cap = 2 * cap + 4096 + 1);
            if (!grown) break;
            t = grown;
        }
        got = fread(t + len, 1, cap - len - 1, f);
        len += got;
    } while (got > 0);
    bool bad = ferror(f) || !t;
    fclose(f);
    if (bad) {
        free(t);
        return snprintf(err, errlen, "@%s: cannot read it", path), NULL;
    }
    t[len] = '\0';
    return t;
}

/* Whether argv[i] names a file of arguments: "@FILE" after the program's name. */
static bool cli_is_file_arg(int i, const char *arg) { return i > 0 && arg[0] == '@' && arg[1]; }

char **cli_expand_files(int argc, char **argv, int *argc_out, char *err, size_t errlen)
{
    cli_words w = {0};
    int *from = calloc((size_t)argc + 1, sizeof(int)); /* the words' count before argv[i]'s */
    bool ok = from != NULL;
    for (int i = 0; ok && i < argc; i++) {
        from[i] = w.n;
        if (!cli_is_file_arg(i, argv[i])) {
            w.n++; /* the argument itself, which keeps its own text */
            continue;
        }
        char *text = cli_read_file(argv[i] + 1, err, errlen);
        ok = text && cli_split_words(argv[i] + 1, text, &w, err, errlen);
        free(text);
    }
    from[argc] = w.n;
    char **args = ok ? malloc(((size_t)w.n + 1) * sizeof(char *) + w.len + 1) : NULL;
    if (args) {
        char *text = (char *)(args + w.n + 1), *word = text;
        memcpy(text, w.text ? w.text : "", w.len);
        for (int i = 0, k = 0; i < argc; i++) {
            if (!cli_is_file_arg(i, argv[i])) {
                args[k++] = argv[i];
                continue;
            }
            for (; k < from[i + 1]; k++, word += strlen(word) + 1)
                args[k] = word;
        }
        args[w.n] = NULL;
        *argc_out = w.n;
    } else if (ok) {
        snprintf(err, errlen, "out of memory reading the command line");
    }
    free(w.text);
    free(from);
    return args;
}

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

void cli_print_md_cell(FILE *out, const char *text)
{
    for (const char *c = text; *c; c++) {
        if (*c == '|') fputc('\\', out);
        fputc(*c, out);
    }
}
