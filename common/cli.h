/* cli.h — the command-line pieces mcc and train_rank share: one checked number parser (the whole
 * string, a range, the flag's name in the error) and "--flag=value" read as "--flag value". */
#ifndef MCC_CLI_H
#define MCC_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* The integer text spells, in [min, max]. On a bad value returns false with a message naming
 * the flag, what it got and the range in err ("--eval-iters: expects an integer >= 0, got ''"). */
bool cli_parse_int(const char *flag, const char *text, long long min, long long max, long long *out, char *err,
                   size_t errlen);

/* The finite number text spells, in [min, max] (min_open: min itself excluded). */
bool cli_parse_num(const char *flag, const char *text, double min, bool min_open, double max, double *out,
                   char *err, size_t errlen);

/* Whether text is one of the '|'-separated values ("single|cyclic"); numbers compare as numbers
 * ("1.0" is "1"). cli_value_index: which of them (0 the first), or -1. */
bool cli_value_listed(const char *values, const char *text);
int cli_value_index(const char *values, const char *text);

/* Whether text fits a flag's value as its help writes it: a placeholder ("DIR", "N", "[W1] PREFIX")
 * takes anything, lower-case choices ("single|cyclic") only themselves. */
bool cli_value_fits(const char *value, const char *text);

/* argv with every "--flag=value" as the two arguments "--flag" "value" (GNU and torchrun style);
 * argv[0] stays. The array is malloc'd (free it; the strings point into argv or into one block
 * freed with it by cli_argv_free), NULL-terminated, its length in *argc_out. */
char **cli_split_equals(int argc, char **argv, int *argc_out);
void cli_argv_free(char **args);

/* argv with every "@FILE" argument after argv[0] replaced by the words FILE holds (as argparse's
 * fromfile_prefix_chars, but split as a shell splits a line: blanks, quotes, backslash-newline,
 * '#' comments; a bash array's `NAME=(` and `)` lines skipped, so a script's flag arrays paste as
 * they are). One malloc'd block, freed by cli_argv_free; NULL with the file, line and reason in
 * err. */
char **cli_expand_files(int argc, char **argv, int *argc_out, char *err, size_t errlen);

/* The closest of n names to word, or NULL when none is close: "did you mean" for a spec key, a
 * flag, an MCC_ variable or its value. */
const char *cli_closest(const char *word, const char *const *names, int n);

/* Writes text into a Markdown table cell: '|' escaped, so a help line's "a|b" stays one cell (the
 * docs/ pages mcc generates from its tables). */
void cli_print_md_cell(FILE *out, const char *text);

#endif
