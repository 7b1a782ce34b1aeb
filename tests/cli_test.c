/* cli_test.c — the shared command-line parser: whole strings only, ranges, the flag named in the
 * error, and "--flag=value" split in two. */
#include "common/cli.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tests/check.h"

static void int_refused(const char *text, long long min, long long max, const char *must_say)
{
    char err[256] = "";
    long long v = 12345;
    CHECK(!cli_parse_int("--eval-iters", text, min, max, &v, err, sizeof err));
    CHECK(v == 12345);
    CHECK(strstr(err, "--eval-iters") != NULL);
    CHECK(strstr(err, must_say) != NULL);
    fprintf(stderr, "  refused %s: %s\n", text ? text : "(none)", err);
}

int main(void)
{
    char err[256];
    long long v;
    CHECK(cli_parse_int("--rank", "7", 0, 8, &v, err, sizeof err) && v == 7);
    CHECK(cli_parse_int("--rank", "-3", LLONG_MIN, LLONG_MAX, &v, err, sizeof err) && v == -3);
    int_refused("", 0, LLONG_MAX, "got ''");
    int_refused("abc", 0, LLONG_MAX, "got 'abc'");
    int_refused("12x", 0, LLONG_MAX, "got '12x'");
    int_refused(" 5", 0, LLONG_MAX, "got ' 5'");
    int_refused("1.5", 0, LLONG_MAX, "an integer >= 0");
    int_refused("-1", 0, LLONG_MAX, "out of range");
    int_refused("9", 0, 8, "0..8");
    int_refused("99999999999999999999999", 0, LLONG_MAX, "out of range");
    int_refused(NULL, 1, LLONG_MAX, "needs a value");

    double d;
    CHECK(cli_parse_num("--gpu-memory", "80.5", 0, true, INFINITY, &d, err, sizeof err) && d == 80.5);
    CHECK(!cli_parse_num("--gpu-memory", "0", 0, true, INFINITY, &d, err, sizeof err) && strstr(err, "> 0"));
    CHECK(!cli_parse_num("--gpu-memory", "", 0, true, INFINITY, &d, err, sizeof err) && strstr(err, "--gpu-memory"));
    CHECK(!cli_parse_num("--gpu-memory", "nan", 0, true, INFINITY, &d, err, sizeof err));
    CHECK(!cli_parse_num("--gpu-memory", "inf", 0, true, INFINITY, &d, err, sizeof err));
    CHECK(!cli_parse_num("--p", "1.5", 0, false, 1, &d, err, sizeof err) && strstr(err, "[0, 1]"));

    /* a CHOICE flag (train_flags.def) holds its word's index: --dataloader-type's rt_sampler_kind */
    CHECK(cli_value_index("single|cyclic", "single") == 0 && cli_value_index("single|cyclic", "cyclic") == 1);
    CHECK(cli_value_index("single|cyclic", "cyc") == -1 && !cli_value_listed("single|cyclic", "external"));
    CHECK(cli_value_index("0.5|1|2", "1.0") == 1); /* numbers compare as numbers */

    char *argv[] = {"prog", "--tp=2", "--data-path", "a=b", "-o", "x", "--nproc-per-node=8", "--empty=", NULL};
    int n;
    char **args = cli_split_equals(8, argv, &n);
    const char *want[] = {"prog", "--tp", "2", "--data-path", "a=b", "-o", "x", "--nproc-per-node", "8", "--empty", ""};
    CHECK(n == 11);
    for (int i = 0; i < n && i < 11; i++)
        CHECK(strcmp(args[i], want[i]) == 0);
    CHECK(args[n] == NULL);
    cli_argv_free(args);

    if (failures)
        fprintf(stderr, "cli_test: %d check(s) failed\n", failures);
    else
        printf("cli_test: ok\n");
    return failures != 0;
}
