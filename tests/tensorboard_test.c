/* tensorboard_test.c — writes TensorBoard event files with runtime/tensorboard.c for the independent
 * reader tests/tensorboard_read.py to check, and checks the writer's errors.
 *   tensorboard_test write DIR    scalars into DIR (created with its parents), DIR/expected.tsv beside
 *   tensorboard_test errors DIR   directories that cannot be made, an overlong tag, and a write that
 *                                 hits the file size limit: DIR/limited keeps only whole records */
#include "runtime/tensorboard.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "tests/check.h"

typedef struct {
    const char *tag;
    int64_t step;
    double value;
} tb_scalar;

/* Writes the scalars to tb and, as the reader expects them, to expect ("tag<TAB>step<TAB>value"). */
static void write_scalars(rt_tb *tb, FILE *expect, const tb_scalar *s, int n)
{
    char err[1024];
    for (int i = 0; i < n; i++) {
        CHECK(rt_tb_scalar(tb, s[i].tag, s[i].step, s[i].value, err, sizeof err), "%s", err);
        fprintf(expect, "%s\t%lld\t%.17g\n", s[i].tag, (long long)s[i].step, s[i].value);
    }
}

static FILE *open_expect(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/expected.tsv", dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(2);
    }
    return f;
}

/* The name is events.out.tfevents.<unix time>.<hostname>.<pid>.<n>; two writers of one process in
 * one second get two files. */
static void test_write(const char *dir)
{
    char err[1024], host[256] = {0}, prefix[4096];
    gethostname(host, sizeof host - 1);
    rt_tb *tb = rt_tb_open(dir, err, sizeof err), *other = rt_tb_open(dir, err, sizeof err);
    if (!tb || !other) {
        fprintf(stderr, "FAIL: rt_tb_open %s: %s\n", dir, err);
        exit(1);
    }
    long long t = 0;
    int pid = -1, n = -1, end = 0;
    snprintf(prefix, sizeof prefix, "%s/events.out.tfevents.", dir);
    const char *name = rt_tb_path(tb);
    CHECK(!strncmp(name, prefix, strlen(prefix)) && sscanf(name + strlen(prefix), "%10lld.", &t) == 1 &&
                 !strncmp(name + strlen(prefix) + 11, host, strlen(host)) &&
                 sscanf(name + strlen(prefix) + 11 + strlen(host), ".%d.%d%n", &pid, &n, &end) == 2 &&
                 !name[strlen(prefix) + 11 + strlen(host) + end],
             "file name %s is not %s<time>.%s.<pid>.<n>", name, prefix, host);
    CHECK(llabs(t - (long long)time(NULL)) < 60 && pid == getpid(), "%s: time %lld or pid %d is not now's, %d", name,
             t, pid, (int)getpid());
    CHECK(strcmp(name, rt_tb_path(other)) != 0, "two writers share the file %s", name);
    unlink(rt_tb_path(other));
    rt_tb_close(other);

    /* Megatron's tags; steps and a tag long enough for multi-byte varints; values a float holds
     * exactly and not (stored as floats), NaN, a negative value. */
    char long_tag[201];
    memset(long_tag, 'x', 200);
    long_tag[200] = 0;
    const tb_scalar s[] = {
        {"lm loss", 1, 10.9375},      {"learning-rate", 1, 3e-4},      {"grad-norm", 1, 12.345678901234},
        {"iteration-time", 1, 0.25},  {"throughput", 1, 123.4},        {"lm loss", 2, NAN},
        {"lm loss", 300, 2.5},        {"lm loss validation", 300, -1}, {"lm loss validation ppl", 300, 12.182493960703473},
        {long_tag, 1LL << 40, 1e30},
    };
    FILE *expect = open_expect(dir);
    write_scalars(tb, expect, s, (int)(sizeof s / sizeof s[0]));
    fclose(expect);
    rt_tb_close(tb);
}

static void expect_open_fails(const char *dir, const char *want1, const char *want2)
{
    char err[1024] = "";
    rt_tb *tb = rt_tb_open(dir, err, sizeof err);
    CHECK(!tb && strstr(err, want1) && strstr(err, want2), "rt_tb_open(%s): want an error with '%s' and '%s', got '%s'",
             dir, want1, want2, tb ? "(opened)" : err);
    fprintf(stderr, "expected error: %s\n", err);
    rt_tb_close(tb);
}

/* A file size limit (ulimit -f) of `limit` bytes: scalars are written until one fails, which must
 * name the file; the reader then finds every record before it whole and the cut one gone. */
static void test_write_error(const char *dir, rlim_t limit)
{
    char err[1024] = "";
    rt_tb *tb = rt_tb_open(dir, err, sizeof err);
    if (!tb) {
        fprintf(stderr, "FAIL: rt_tb_open %s: %s\n", dir, err);
        exit(1);
    }
    struct rlimit old, small;
    getrlimit(RLIMIT_FSIZE, &old);
    small = old;
    small.rlim_cur = limit;
    signal(SIGXFSZ, SIG_IGN); /* the write then fails with EFBIG instead of killing the process */
    setrlimit(RLIMIT_FSIZE, &small);
    int written = 0;
    while (written < 100 && rt_tb_scalar(tb, "lm loss", written + 1, 1.0 / (written + 1), err, sizeof err))
        written++;
    setrlimit(RLIMIT_FSIZE, &old);
    CHECK(written > 0 && written < 100 && strstr(err, rt_tb_path(tb)) && strstr(err, "File too large"),
             "want the file and 'File too large' after some records, got %d records and '%s'", written, err);
    fprintf(stderr, "expected error after %d records: %s\n", written, err);
    FILE *expect = open_expect(dir);
    for (int i = 0; i < written; i++)
        fprintf(expect, "lm loss\t%d\t%.17g\n", i + 1, 1.0 / (i + 1));
    fclose(expect);
    rt_tb_close(tb);
}

static void test_errors(const char *dir)
{
    char path[4096], err[1024];
    snprintf(path, sizeof path, "%s/file", dir);
    rt_tb_close(rt_tb_open(dir, err, sizeof err)); /* creates dir */
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(2);
    }
    fclose(f);
    expect_open_fails(path, path, "is not a directory");
    snprintf(path, sizeof path, "%s/file/sub/dir", dir);
    char want[4096];
    snprintf(want, sizeof want, "TensorBoard: cannot create directory %s/file/sub: Not a directory", dir);
    expect_open_fails(path, want, "");
    expect_open_fails("/dev/full/tb", "TensorBoard: cannot create directory /dev/full/tb: Not a directory", "");
    expect_open_fails("", "TensorBoard: directory", "empty path");

    char long_tag[300];
    memset(long_tag, 'y', 299);
    long_tag[299] = 0;
    rt_tb *tb = rt_tb_open(dir, err, sizeof err);
    CHECK(tb && !rt_tb_scalar(tb, long_tag, 1, 1, err, sizeof err) && strstr(err, "longer than 256 bytes"),
             "an overlong tag must be refused, got '%s'", err);
    rt_tb_close(tb);

    snprintf(path, sizeof path, "%s/limited", dir);
    test_write_error(path, 400);
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "write"))
        test_write(argv[2]);
    else if (argc == 3 && !strcmp(argv[1], "errors"))
        test_errors(argv[2]);
    else {
        fprintf(stderr, "usage: tensorboard_test write|errors DIR\n");
        return 2;
    }
    if (failures)
        fprintf(stderr, "%d failure(s)\n", failures);
    return failures != 0;
}
