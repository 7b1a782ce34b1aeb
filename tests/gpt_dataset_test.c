/* gpt_dataset_test.c — checks rt_gpt_data (Megatron's GPT split/shuffle/blend semantics) against the
 * samples tests/megatron_gpt_dataset.py computes with numpy, and its refusals of bad flags.
 *   gpt_dataset_test expect DIR CASE [...]   every sample of every split equals DIR/CASE.SPLIT.tokens
 *   gpt_dataset_test errors DIR              bad --data-path/--split/--seed/--seq-length are refused */
#include "runtime/gpt_dataset.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"

static const char *const GT_SPLITS[RT_SPLITS] = {"train", "valid", "test"};

/* A case file (see megatron_gpt_dataset.py): its --data-path values and the config. */
typedef struct {
    char line[4096], split[64];
    char *paths[64];
    int npaths, seq_length;
    int64_t seed, num_samples[RT_SPLITS], len[RT_SPLITS];
} gt_case;

static void gt_read_case(const char *path, gt_case *c) {
    FILE *f = fopen(path, "r");
    if (!f || !fgets(c->line, sizeof c->line, f) || strncmp(c->line, "data-path ", 10) != 0 ||
        fscanf(f, "split %63s seq_length %d seed %" SCNd64 " num_samples %" SCNd64 " %" SCNd64 " %" SCNd64
                  " len %" SCNd64 " %" SCNd64 " %" SCNd64, c->split, &c->seq_length, &c->seed, &c->num_samples[0],
               &c->num_samples[1], &c->num_samples[2], &c->len[0], &c->len[1], &c->len[2]) != 9) {
        fprintf(stderr, "cannot read case %s: run megatron_gpt_dataset.py make first\n", path);
        exit(2);
    }
    fclose(f);
    c->npaths = 0;
    for (char *tok = strtok(c->line + 10, " \n"); tok && c->npaths < 63; tok = strtok(NULL, " \n"))
        c->paths[c->npaths++] = tok;
}

/* int32 [n, seq_length+1] expected samples; NULL (n 0) when the file is absent. */
static int32_t *gt_read_tokens(const char *path, int width, int64_t *n) {
    FILE *f = fopen(path, "rb");
    *n = 0;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long bytes = ftell(f);
    rewind(f);
    int32_t *t = malloc((size_t)bytes + 1);
    if (!t || fread(t, 1, (size_t)bytes, f) != (size_t)bytes) exit(2);
    fclose(f);
    *n = bytes / (int64_t)(sizeof *t * width);
    return t;
}

/* Parses the case's --data-path values as train_rank would (followed by the next flag). */
static rt_gpt_data *gt_open(gt_case *c, char *err, size_t errlen) {
    char *argv[66];
    memcpy(argv, c->paths, (size_t)c->npaths * sizeof *argv);
    argv[c->npaths] = "--split";
    rt_gpt_data_config cfg = {0};
    int used = -1;
    if (!rt_gpt_data_parse_paths(c->npaths + 1, argv, &used, &cfg, err, errlen)) return NULL;
    CHECK(used == c->npaths, "--data-path consumed %d values, expected %d (must stop at --split)", used, c->npaths);
    cfg.split = c->split;
    cfg.seq_length = c->seq_length;
    cfg.seed = c->seed;
    /* Megatron builds no dataset for a split of zero share (len 0) whatever it is asked;
     * rt_gpt_data refuses such a request, so none is made. */
    for (int s = 0; s < RT_SPLITS; s++) cfg.num_samples[s] = c->len[s] ? c->num_samples[s] : 0;
    rt_gpt_data *d = rt_gpt_data_open(&cfg, err, errlen);
    rt_gpt_data_config_free(&cfg);
    return d;
}

/* Every requested sample of every split, token by token; the first mismatch per split is shown. */
static void gt_expect(const char *dir, const char *name) {
    char path[4096], err[1024];
    gt_case c;
    snprintf(path, sizeof path, "%s/%s.case", dir, name);
    gt_read_case(path, &c);
    rt_gpt_data *d = gt_open(&c, err, sizeof err);
    CHECK(d, "%s: open failed: %s", name, err);
    if (!d) return;
    int width = c.seq_length + 1;
    int32_t *got = malloc((size_t)width * sizeof *got);
    for (int s = 0; s < RT_SPLITS; s++) {
        int64_t n;
        snprintf(path, sizeof path, "%s/%s.%s.tokens", dir, name, GT_SPLITS[s]);
        int32_t *want = gt_read_tokens(path, width, &n);
        CHECK(rt_gpt_data_num_samples(d, s) == c.len[s], "%s %s: %" PRId64 " samples, Megatron's len() is %" PRId64,
                 name, GT_SPLITS[s], rt_gpt_data_num_samples(d, s), c.len[s]);
        CHECK(n == (c.len[s] ? c.num_samples[s] : 0), "%s %s: expected file holds %" PRId64 " samples", name,
                 GT_SPLITS[s], n);
        int64_t bad = 0;
        for (int64_t i = 0; i < n && i < rt_gpt_data_num_samples(d, s); i++) {
            rt_gpt_data_sample(d, s, i, got);
            int k = 0;
            while (k < width && got[k] == want[i * width + k]) k++;
            if (k < width && !bad++)
                CHECK(0, "%s %s sample %" PRId64 " token %d: got %d, Megatron gives %d", name, GT_SPLITS[s], i, k,
                         got[k], want[i * width + k]);
        }
        CHECK(!bad, "%s %s: %" PRId64 " of %" PRId64 " samples differ", name, GT_SPLITS[s], bad, n);
        if (!bad && n) printf("ok %s %s: %" PRId64 " samples match\n", name, GT_SPLITS[s], n);
        free(want);
    }
    rt_gpt_data_print(d, stdout);
    free(got);
    rt_gpt_data_close(d);
}

/* ---- refusals ------------------------------------------------------------------------------- */

typedef struct {
    const char *paths;  /* --data-path values, space-separated; "@" stands for DIR */
    const char *split;
    int seq_length;
    int64_t seed, valid_samples;
    const char *needle; /* the message must contain it (the flag it names) */
} gt_bad;

static void gt_refused(const char *dir, const gt_bad *b) {
    char buf[1024], *argv[16], err[1024] = "";
    int argc = 0, used;
    for (const char *p = b->paths; *p && argc < 16;) { /* split on spaces, expanding @ to DIR */
        size_t len = strcspn(p, " ");
        argv[argc] = malloc(len + strlen(dir) + 1);
        snprintf(argv[argc], len + strlen(dir) + 1, "%s%.*s", *p == '@' ? dir : "", (int)(len - (*p == '@')),
                 p + (*p == '@'));
        argc++;
        p += len + (p[len] == ' ');
    }
    rt_gpt_data_config cfg = {.split = b->split, .seq_length = b->seq_length, .seed = b->seed,
                              .num_samples = {100, b->valid_samples, 0}};
    rt_gpt_data *d = NULL;
    if (rt_gpt_data_parse_paths(argc, argv, &used, &cfg, err, sizeof err)) d = rt_gpt_data_open(&cfg, err, sizeof err);
    snprintf(buf, sizeof buf, "--data-path %s --split %s", b->paths, b->split);
    CHECK(!d, "%s was accepted", buf);
    CHECK(strstr(err, b->needle), "%s: message \"%s\" does not name %s", buf, err, b->needle);
    if (!d && strstr(err, b->needle)) printf("ok refused %s: %s\n", buf, err);
    rt_gpt_data_close(d);
    rt_gpt_data_config_free(&cfg);
    for (int i = 0; i < argc; i++) free(argv[i]);
}

static void gt_errors(const char *dir) {
    static const gt_bad cases[] = {
        {"", "1", 16, 1, 0, "--data-path"},
        {"@/a @/b", "1", 16, 1, 0, "--data-path"},                 /* several prefixes need weights */
        {"x @/a 0.7 @/b", "1", 16, 1, 0, "'x' is not a weight"},
        {"-1 @/a 2 @/b", "1", 16, 1, 0, "'-1' is not a weight"},
        {"0 @/a 0 @/b", "1", 16, 1, 0, "--data-path: the weights sum to 0"},
        {"@/missing", "1", 16, 1, 0, "--data-path @/missing"},
        {"@/a", "abc", 16, 1, 0, "--split 'abc': the train share expects a number >= 0, got 'abc'"},
        {"@/a", "a,b", 16, 1, 0, "--split 'a,b': the train share expects a number >= 0, got 'a'"},
        {"@/a", "1,2,3,4", 16, 1, 0, "--split 1,2,3,4: more than three"},
        {"@/a", "1..2", 16, 1, 0, "--split '1..2': the train share expects a number >= 0, got '1..2'"},
        {"@/a", "-1,2,3", 16, 1, 0, "--split '-1,2,3': the train share -1 is out of range"},
        {"@/a", "1,-2", 16, 1, 0, "the valid share -2 is out of range"},
        {"@/a", "", 16, 1, 0, "--split '': the train share expects a number >= 0, got ''"},
        {"@/a", "1,", 16, 1, 0, "--split '1,': the valid share expects a number >= 0, got ''"},
        {"@/a", "0,0", 16, 1, 0, "--split 0,0: the shares sum to 0"},
        {"@/a", "9999,1", 16, 1, 10, "--split 9999,1 gives the valid split 0 of the 1000 sequences"},
        /* quoted (a bash array keeps '99,1,0''s quotes) and spaced as scripts write it: the same shares */
        {"@/a", "'9999, 1'", 16, 1, 10, "--split '9999, 1' gives the valid split 0 of the 1000 sequences"},
        {"@/a", "\" 0 ,1, 0\"", 16, 1, 10, "gives the train split no share of the data"},
        {"@/a", "'a,b'", 16, 1, 0, "the train share expects a number >= 0, got 'a'"},
        /* a zero share for a split samples are wanted from (train_rank turns validation off for valid) */
        {"@/a", "0,1,0", 16, 1, 10, "--split 0,1,0 gives the train split no share of the data"},
        {"@/a", "100,0,0", 16, 1, 10, "--split 100,0,0 gives the valid split no share of the data, but 10 valid "
                                      "samples are wanted"},
        {"@/a", "1", 1, 1, 0, "--seq-length"},
        {"@/a", "1", 16, 4294967296, 0, "--seed"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        gt_bad b = cases[i];
        char needle[512];
        const char *at = strchr(b.needle, '@'); /* the message names the real path */
        if (at) {
            snprintf(needle, sizeof needle, "%.*s%s%s", (int)(at - b.needle), b.needle, dir, at + 1);
            b.needle = needle;
        }
        gt_refused(dir, &b);
    }
}

int main(int argc, char **argv) {
    if (argc >= 4 && !strcmp(argv[1], "expect")) {
        for (int i = 3; i < argc; i++) gt_expect(argv[2], argv[i]);
    } else if (argc == 3 && !strcmp(argv[1], "errors")) {
        gt_errors(argv[2]);
    } else {
        fprintf(stderr, "usage: gpt_dataset_test expect DIR CASE... | errors DIR\n");
        return 2;
    }
    printf("%d failed\n", failures);
    return failures ? 1 : 0;
}
