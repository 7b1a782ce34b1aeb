/* train_flags.c — train_rank's command line: its settings (runtime/train_flags.def) and actions
 * as tables, one loop parsing them, --help generated from them. */
#include "train.h"

#include "common/cli.h"
#include "runtime/train_flags.h"

#include <stdlib.h>
#include <string.h>

/* train_rank's flags (runtime/train_flags.def): its parser, --help, and mcc compile's baking. */
static const struct {
    const char *flag, *value;
    train_flag_kind kind;
    size_t off;
    int min;
    const char *help;
} train_flags[] = {
#define RT_FLAG(flag, value, kind, member, min, help) {flag, value, TRAIN_FLAG_##kind, offsetof(train_args, member), min, help},
#include "train_flags.def"
#undef RT_FLAG
};
enum { NFLAGS = sizeof train_flags / sizeof train_flags[0] };

static void usage(FILE *out);

static void print_plan(void) { fwrite(mcc_plan_text, 1, mcc_plan_size, stdout); }
/* the mcc that compiled it: its libmccrt's */
static void print_version(void) { printf("train_rank (mcc %s)\n", MCC_VERSION); }
static void print_help(void) { usage(stdout); }

/* train_rank's actions: done at once, then it exits 0. Not settings, so not in train_flags.def
 * (which mcc compile bakes into the plan). A row without help is not listed; one without an
 * action is taken before the flags are parsed (launch.c's, which starts the ranks). */
static const struct {
    const char *flag, *value, *help;
    void (*act)(void);
} train_actions[] = {
    {"--print-plan", "", "print the compiled plan (IR) and exit", print_plan},
    {"--version", "", "print the version of the mcc that compiled this train_rank and exit", print_version},
    {"--help", "", NULL, print_help},
    {"-h", "", NULL, print_help},
    {"--nproc-per-node", "N",
     "start N local ranks of this executable, like torchrun (also spelt --nproc_per_node; or launch with torchrun, "
     "srun or mpirun: ranks come from their environment)", NULL},
};
enum { NACTIONS = sizeof train_actions / sizeof train_actions[0] };

/* A flag train_rank does not take: a setting compiled into the plan (a key of ir/config.def, as
 * --lr is lr) gets the recompile hint; any other, the pointer to --help. Exits 2. */
static _Noreturn void unknown_flag(const char *flag)
{
    char key[128];
    snprintf(key, sizeof key, "%s", flag + strspn(flag, "-"));
    for (char *c = key; *c; c++)
        *c = *c == '-' ? '_' : *c;
    if (ir_cfg_find(key) >= 0) {
        fprintf(stderr, "train_rank: error: %s is compiled into the plan (its config %s, which `train_rank "
                        "--print-plan` shows): recompile with `mcc compile SPEC %s VALUE ...`\n", flag, key, flag);
        exit(2);
    }
    fprintf(stderr, "train_rank: error: unknown or incomplete flag '%s' (train_rank --help lists its flags)\n", flag);
    exit(2);
}

/* Prints text wrapped at 100 columns from column col, every line after the first indented by indent. */
static void print_wrapped(FILE *out, const char *text, int col, int indent)
{
    while (*text) {
        int room = 100 - col, n = (int)strlen(text);
        if (n > room) {
            n = room;
            while (n > 0 && text[n] != ' ') n--;
            if (n == 0) n = room;
        }
        fprintf(out, "%.*s\n", n, text);
        text += n + (text[n] == ' ');
        if (*text) fprintf(out, "%*s", indent, "");
        col = indent;
    }
}

/* One --help row: the flag and its value, the help beside a short one, under a long one. */
static void usage_row(FILE *out, const char *flag, const char *value, const char *help)
{
    char head[64];
    snprintf(head, sizeof head, "  %s%s%s", flag, *value ? " " : "", value);
    if (strlen(head) < 24)
        fprintf(out, "%-24s ", head);
    else
        fprintf(out, "%s\n%25s", head, "");
    print_wrapped(out, help, 25, 25);
}

static void usage(FILE *out)
{
    fprintf(out, "usage: train_rank [flags]   (the flags mcc compile was given are the defaults: --print-plan shows "
                 "them as train_rank_args)\n");
    for (int i = 0; i < NFLAGS; i++)
        usage_row(out, train_flags[i].flag, train_flags[i].value, train_flags[i].help);
    for (int i = 0; i < NACTIONS; i++)
        if (train_actions[i].help)
            usage_row(out, train_actions[i].flag, train_actions[i].value, train_actions[i].help);
    fprintf(out, "Every flag also takes its value as --flag=value. SIGTERM or SIGINT stops the run after the\n"
                 "iteration in flight, its log line and metrics record written (exit status 128 + the signal).\n");
}

/* Flag row f at argv[*i] into a, its values consumed through *i; false with the message in err. */
static bool parse_flag(train_args *a, int f, int argc, char **argv, int *i, char *err, size_t errlen)
{
    void *slot = (char *)a + train_flags[f].off;
    const char *flag = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    int consumed;
    long long n;
    switch (train_flags[f].kind) {
    case TRAIN_FLAG_SWITCH: *(bool *)slot = true; return true;
    case TRAIN_FLAG_ASYNC_ON: case TRAIN_FLAG_ASYNC_OFF: *(int *)slot = train_flags[f].kind == TRAIN_FLAG_ASYNC_ON; return true;
    case TRAIN_FLAG_PATHS:
        if (!rt_gpt_data_parse_paths(argc - *i - 1, argv + *i + 1, &consumed, &a->data, err, errlen)) return false;
        *i += consumed;
        return true;
    case TRAIN_FLAG_INT:
        ++*i;
        if (!cli_parse_int(flag, v, train_flags[f].min, 1000000000, &n, err, errlen)) return false;
        *(int *)slot = (int)n;
        return true;
    case TRAIN_FLAG_NUM: ++*i; return cli_parse_num(flag, v, 0, true, 1e9, (double *)slot, err, errlen);
    case TRAIN_FLAG_TEXT: case TRAIN_FLAG_CHOICE:
        if (!v || !strncmp(v, "--", 2))
            return snprintf(err, errlen, "%s needs a value: %s", flag, train_flags[f].value), false;
        if (!cli_value_fits(train_flags[f].value, v))
            return snprintf(err, errlen, "%s %s: it takes %s (--help says what each means)", flag, v,
                            train_flags[f].value), false;
        if (train_flags[f].kind == TRAIN_FLAG_CHOICE)
            *(int *)slot = cli_value_index(train_flags[f].value, v);
        else
            *(const char **)slot = v;
        ++*i;
        return true;
    }
    return false;
}

char **train_with_baked_flags(const ir_module *m, int argc, char **argv, int *nout, char **text)
{
    *text = strdup(ir_cfg_text(m, IR_CFG_TRAIN_RANK_ARGS));
    int n = **text ? 1 : 0;
    for (const char *c = *text; *c; c++) n += *c == '\n';
    char **args = calloc((size_t)(n + argc + 1), sizeof(char *));
    if (!*text || !args) {
        fprintf(stderr, "train_rank: error: out of memory reading the flags\n");
        exit(2);
    }
    args[0] = argv[0];
    int k = 1;
    for (char *c = *text, *end; n && c; c = end ? end + 1 : NULL) {
        args[k++] = c;
        if ((end = strchr(c, '\n'))) *end = '\0';
    }
    for (int i = 1; i < argc; i++) args[k++] = argv[i];
    *nout = k;
    return args;
}

/* The setting (is_action false) or action named arg: its row, or -1. */
static int find_flag(const char *arg, bool is_action)
{
    int n = is_action ? NACTIONS : NFLAGS;
    for (int f = 0; f < n; f++)
        if (!strcmp(arg, is_action ? train_actions[f].flag : train_flags[f].flag))
            return f;
    return -1;
}

train_args train_parse_args(int argc, char **argv, bool complete)
{
    train_args a = {.data = {.split = "969,30,1"}, .dataloader_type = RT_SAMPLER_SINGLE, .train_iters = -1,
                    .log_interval = -1, .eval_interval = -1, .eval_iters = -1, .ckpt = {.async_save = -1}};
    char err[1024];
    for (int i = 1; i < argc; i++) {
        int f = find_flag(argv[i], false), act = f < 0 ? find_flag(argv[i], true) : -1;
        if (f >= 0 && !parse_flag(&a, f, argc, argv, &i, err, sizeof err)) {
            fprintf(stderr, "train_rank: error: %s\n", err);
            exit(2);
        }
        if (f >= 0)
            continue;
        if (act < 0 || !train_actions[act].act)
            unknown_flag(argv[i]);
        train_actions[act].act();
        exit(0);
    }
    if (complete && !a.data.n && !a.data.mock) {
        fprintf(stderr, "train_rank: error: --data-path is required (make a dataset with `mcc data preprocess`), "
                        "or --mock-data for synthetic tokens\n");
        exit(2);
    }
    return a;
}
