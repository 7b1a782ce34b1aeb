/* knobs.c — the MCC_* environment variables (knobs.h): the table, parsed and checked once. */
#include "common/knobs.h"

#include "common/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

const knob_info knob_table[KNOB_COUNT] = {
#define KNOB_ROW(id, kind, dflt, choices, min, max, reader, help)                                                         \
    {"MCC_" #id, kind, dflt, choices, min, max, reader, help},
    KNOB_TABLE(KNOB_ROW)
#undef KNOB_ROW
};

/* Each knob's parsed value: text is the environment's (validated) or the default. */
static struct {
    const char *text;
    bool set;
    long long i;
    double num;
} knob_values[KNOB_COUNT];
static knob_reader knob_program;
static bool knob_ready;

/* The index of text among choices ("a|b|c"), or -1. */
static int knob_choice_index(const char *choices, const char *text)
{
    size_t n = strlen(text);
    int i = 0;
    for (const char *c = choices; *c; i++) {
        size_t len = strcspn(c, "|");
        if (len == n && !strncmp(c, text, n))
            return i;
        c += len + (c[len] == '|');
    }
    return -1;
}

/* "MCC_ATTENTION=cudn: expects one of auto|mcc|cudnn (did you mean cudnn?); unset it for the
 * default (auto)". */
static bool knob_bad_choice(const knob_info *k, const char *text, char *err, size_t errlen)
{
    enum { MAX_CHOICES = 8 };
    char words[256], *names[MAX_CHOICES];
    snprintf(words, sizeof words, "%s", k->choices);
    int n = 0;
    for (char *w = strtok(words, "|"); w && n < MAX_CHOICES; w = strtok(NULL, "|"))
        names[n++] = w;
    const char *near = cli_closest(text, (const char *const *)names, n);
    snprintf(err, errlen, "%s=%.64s: expects one of %s%s%s%s; unset it for the default (%s)", k->name, text, k->choices,
             near ? " (did you mean " : "", near ? near : "", near ? "?)" : "", k->dflt);
    return false;
}

static bool knob_parse(knob_id id, const char *env, char *err, size_t errlen)
{
    const knob_info *k = &knob_table[id];
    bool set = env && *env;
    const char *text = set ? env : k->dflt;
    knob_values[id].text = text;
    knob_values[id].set = set;
    bool ok = true;
    char why[512];
    switch (k->kind) {
    case KNOB_BOOL:
    case KNOB_ENUM:
        if ((knob_values[id].i = knob_choice_index(k->choices, text)) < 0)
            return knob_bad_choice(k, text, err, errlen);
        break;
    case KNOB_INT:
        ok = cli_parse_int(k->name, text, (long long)k->min, (long long)k->max, &knob_values[id].i, why, sizeof why);
        break;
    case KNOB_NUM: /* in (min, max]: a timeout of 0 would end every collective at once */
        ok = cli_parse_num(k->name, text, k->min, true, k->max, &knob_values[id].num, why, sizeof why);
        break;
    case KNOB_PATH:
        break;
    }
    if (!ok)
        snprintf(err, errlen, "%s; unset it for the default (%s)", why, k->dflt);
    return ok;
}

static const struct {
    const char *name, *fix;
} knob_retired[] = {
#define KNOB_RETIRED_ROW(id, fix) {"MCC_" #id, fix},
    KNOB_RETIRED(KNOB_RETIRED_ROW)
#undef KNOB_RETIRED_ROW
};

/* An MCC_ variable the table lacks: a typo, or one this mcc no longer reads (with its fix). */
static bool knob_unknown(const char *var, size_t len, char *err, size_t errlen)
{
    char name[128];
    snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), var);
    for (size_t i = 0; i < sizeof knob_retired / sizeof knob_retired[0]; i++)
        if (!strcmp(name, knob_retired[i].name)) {
            snprintf(err, errlen, "%s is no longer read: %s", name, knob_retired[i].fix);
            return false;
        }
    const char *names[KNOB_COUNT];
    for (int i = 0; i < KNOB_COUNT; i++)
        names[i] = knob_table[i].name;
    const char *near = cli_closest(name, names, KNOB_COUNT);
    if (near) {
        snprintf(err, errlen, "%.64s is not an mcc environment variable: did you mean %s? (rename or unset it)", name,
                 near);
        return false;
    }
    size_t n = (size_t)snprintf(err, errlen, "%.64s is not an mcc environment variable; unset it. The knobs are:",
                                name);
    for (int i = 0; i < KNOB_COUNT && n < errlen; i++)
        n += (size_t)snprintf(err + n, errlen - n, " %s", knob_table[i].name);
    return false;
}

bool knob_init(knob_reader program, char *err, size_t errlen)
{
    knob_program = program;
    knob_ready = true;
    for (char **e = environ; *e; e++) {
        if (strncmp(*e, "MCC_", 4) != 0)
            continue;
        size_t len = strcspn(*e, "=");
        bool known = false;
        for (int i = 0; i < KNOB_COUNT && !known; i++)
            known = strlen(knob_table[i].name) == len && !strncmp(*e, knob_table[i].name, len);
        if (!known)
            return knob_unknown(*e, len, err, errlen);
    }
    for (int i = 0; i < KNOB_COUNT; i++)
        if (!knob_parse((knob_id)i, getenv(knob_table[i].name), err, errlen))
            return false;
    return true;
}

/* The values, read at the first use where no main called knob_init. */
static void knob_need(void)
{
    char err[1024];
    if (!knob_ready && !knob_init(KNOB_MCC | KNOB_TRAIN_RANK, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        exit(2);
    }
}

bool knob_on(knob_id k)
{
    knob_need();
    return knob_values[k].i == 1; /* "0|1" */
}

long long knob_int(knob_id k)
{
    knob_need();
    return knob_values[k].i;
}

double knob_num(knob_id k)
{
    knob_need();
    return knob_values[k].num;
}

int knob_choice(knob_id k)
{
    knob_need();
    return (int)knob_values[k].i;
}

const char *knob_text(knob_id k)
{
    knob_need();
    return knob_table[k].kind == KNOB_PATH && !knob_values[k].set ? NULL : knob_values[k].text;
}

bool knob_is_set(knob_id k)
{
    knob_need();
    return knob_values[k].set;
}

bool knob_shown(knob_id k) { return knob_is_set(k) && (knob_table[k].reader & knob_program); }

void knob_setenv(knob_id k, const char *value)
{
    char err[1024];
    knob_need();
    setenv(knob_table[k].name, value, 1);
    if (!knob_parse(k, getenv(knob_table[k].name), err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        exit(2);
    }
}
