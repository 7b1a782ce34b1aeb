/* cli.h — the command-line pieces mcc and train_rank share: one checked number parser (the whole
 * string, a range, the flag's name in the error) and "--flag=value" read as "--flag value". */
#ifndef MCC_CLI_H
#define MCC_CLI_H

#include <stdbool.h>
#include <stddef.h>

/* The integer text spells, in [min, max]. On a bad value returns false with a message naming
 * the flag, what it got and the range in err ("--eval-iters: expects an integer >= 0, got ''"). */
bool cli_parse_int(const char *flag, const char *text, long long min, long long max, long long *out, char *err,
                   size_t errlen);

/* The finite number text spells, in [min, max] (min_open: min itself excluded). */
bool cli_parse_num(const char *flag, const char *text, double min, bool min_open, double max, double *out,
                   char *err, size_t errlen);

/* argv with every "--flag=value" as the two arguments "--flag" "value" (GNU and torchrun style);
 * argv[0] stays. The array is malloc'd (free it; the strings point into argv or into one block
 * freed with it by cli_argv_free), NULL-terminated, its length in *argc_out. */
char **cli_split_equals(int argc, char **argv, int *argc_out);
void cli_argv_free(char **args);

/* The closest of n names to word, or NULL when none is close: "did you mean" for a spec key, a
 * flag, an MCC_ variable or its value. */
const char *cli_closest(const char *word, const char *const *names, int n);

#endif
