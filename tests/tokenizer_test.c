/* tokenizer_test.c — the GPT-2 BPE tokenizer gives GPT-2's exact ids and decodes back to the text.
 *   tokenizer_test ids VOCAB MERGES CASES.jsonl EXPECTED.jsonl
 *       each case's ids equal the reference's (node: gpt-3-encoder and js-tiktoken), decode
 *       round-trips, plus cases where JavaScript's \s differs from GPT-2's Python regex
 *   tokenizer_test errors VOCAB MERGES OUT_DIR
 *       bad vocab / merge files are refused with a message naming the file and the fix       */
#include "frontend/tokenizer_bpe.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tt_failures;

#define TT_CHECK(cond, ...)                                       \
    do {                                                          \
        if (!(cond)) {                                            \
            fprintf(stderr, "%s:%d: FAIL: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                         \
            fputc('\n', stderr);                                  \
            tt_failures++;                                        \
        }                                                         \
    } while (0)

static tok_bpe *tt_load(const char *vocab, const char *merges) {
    char err[1024];
    tok_bpe *t = tok_gpt2_load(vocab, merges, err, sizeof err);
    if (!t) {
        fprintf(stderr, "cannot load the GPT-2 tokenizer: %s\n", err);
        exit(2);
    }
    return t;
}

/* Encodes text, compares with want[0..nwant) and checks decode gives the text back. */
static void tt_check_case(const tok_bpe *t, tok_bpe_ctx *c, const char *label, const char *text, size_t n,
                          const int32_t *want, size_t nwant) {
    tok_ids got = {0};
    TT_CHECK(tok_bpe_encode(c, text, n, &got), "%s: encode refused valid UTF-8", label);
    size_t i = 0;
    while (i < got.n && i < nwant && got.v[i] == want[i]) i++;
    TT_CHECK(i == got.n && i == nwant, "%s (%.60s): %zu ids, want %zu; first difference at %zu: %d, want %d", label,
             text, got.n, nwant, i, i < got.n ? got.v[i] : -1, i < nwant ? want[i] : -1);
    size_t len = 0;
    char *back = tok_bpe_decode(t, got.v, got.n, &len);
    TT_CHECK(back && len == n && memcmp(back, text, n) == 0, "%s (%.60s): decode(encode(text)) is not the text",
             label, text);
    free(back);
    tok_ids_free(&got);
}

static json_t *tt_load_json(const char *line, const char *path, int lineno) {
    json_error_t je;
    json_t *j = json_loads(line, JSON_ALLOW_NUL, &je);
    if (!j) {
        fprintf(stderr, "%s line %d: %s\n", path, lineno, je.text);
        exit(2);
    }
    return j;
}

/* Compares against the reference ids, one case a line; each case runs twice to also check the
 * cached path of the same ctx gives the same ids. */
static int tt_reference_cases(const tok_bpe *t, tok_bpe_ctx *c, const char *cases, const char *expected) {
    FILE *fc = fopen(cases, "r"), *fe = fopen(expected, "r");
    if (!fc || !fe) {
        fprintf(stderr, "cannot read %s or %s\n", cases, expected);
        exit(2);
    }
    char *lc = NULL, *le = NULL;
    size_t capc = 0, cape = 0;
    int n = 0;
    while (getline(&lc, &capc, fc) > 0) {
        n++;
        TT_CHECK(getline(&le, &cape, fe) > 0, "%s has fewer lines than %s", expected, cases);
        if (tt_failures) break;
        json_t *doc = tt_load_json(lc, cases, n), *ids = tt_load_json(le, expected, n);
        json_t *text = json_object_get(doc, "text");
        size_t nwant = json_array_size(ids);
        int32_t *want = malloc((nwant + 1) * sizeof *want);
        for (size_t i = 0; i < nwant; i++) want[i] = (int32_t)json_integer_value(json_array_get(ids, i));
        char label[64];
        snprintf(label, sizeof label, "%s line %d", cases, n);
        for (int pass = 0; pass < 2; pass++)
            tt_check_case(t, c, label, json_string_value(text), json_string_length(text), want, nwant);
        free(want);
        json_decref(doc);
        json_decref(ids);
    }
    free(lc);
    free(le);
    fclose(fc);
    fclose(fe);
    return n;
}

/* Where JavaScript's \s (with U+FEFF, without U+0085) differs from GPT-2's Python `regex`
 * (Unicode White_Space), the ids below are from OpenAI's encoder.py run with `regex`. */
static void tt_python_whitespace_cases(const tok_bpe *t, tok_bpe_ctx *c) {
    tt_check_case(t, c, "U+0085 is whitespace", "a \xc2\x85!", 5, (const int32_t[]){64, 220, 126, 227, 0}, 5);
    tt_check_case(t, c, "U+FEFF is not whitespace", "a \xef\xbb\xbf!", 6, (const int32_t[]){64, 27332, 119, 123, 0}, 5);
}

/* Megatron-sized inputs: a 1 MB word, a 1 MB whitespace run; invalid UTF-8 is refused. */
static void tt_stress_cases(const tok_bpe *t, tok_bpe_ctx *c) {
    size_t n = 1 << 20;
    char *text = malloc(n + 1);
    for (int k = 0; k < 2; k++) {
        memset(text, k ? ' ' : 'x', n);
        tok_ids ids = {0};
        size_t len = 0;
        TT_CHECK(tok_bpe_encode(c, text, n, &ids), "%s run refused", k ? "space" : "letter");
        char *back = tok_bpe_decode(t, ids.v, ids.n, &len);
        TT_CHECK(back && len == n && memcmp(back, text, n) == 0, "1 MB %s run does not round-trip",
                 k ? "space" : "letter");
        free(back);
        tok_ids_free(&ids);
    }
    free(text);
    tok_ids ids = {0};
    tok_ids_push(&ids, 7);
    TT_CHECK(!tok_bpe_encode(c, "ok \xff\xfe bad", 9, &ids) && ids.n == 1,
             "invalid UTF-8 must be refused without appending ids");
    size_t len;
    TT_CHECK(!tok_bpe_decode(t, (const int32_t[]){50257}, 1, &len), "decode must refuse id 50257");
    tok_ids_free(&ids);
}

static int tt_mode_ids(char **argv) {
    tok_bpe *t = tt_load(argv[2], argv[3]);
    tok_bpe_ctx *c = tok_bpe_ctx_new(t);
    TT_CHECK(tok_bpe_vocab_size(t) == 50257, "vocab size %d, want 50257", tok_bpe_vocab_size(t));
    TT_CHECK(tok_bpe_eod(t) == 50256, "<|endoftext|> is %d, want 50256", tok_bpe_eod(t));
    int n = tt_reference_cases(t, c, argv[4], argv[5]);
    tt_python_whitespace_cases(t, c);
    tt_stress_cases(t, c);
    tok_bpe_ctx_free(c);
    tok_bpe_free(t);
    if (!tt_failures) printf("OK: %d reference cases match GPT-2's ids and round-trip\n", n);
    return tt_failures ? 1 : 0;
}

/* ---- errors ------------------------------------------------------------------------------- */

static const char *tt_write(const char *dir, const char *name, const char *text) {
    static char paths[4][4096];
    static int next;
    char *p = paths[next++ % 4];
    snprintf(p, sizeof paths[0], "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", p);
        exit(2);
    }
    return p;
}

static void tt_expect_error(const char *vocab, const char *merges, const char *needle) {
    char err[1024] = "";
    tok_bpe *t = tok_gpt2_load(vocab, merges, err, sizeof err);
    TT_CHECK(!t && strstr(err, needle), "loading %s + %s: expected an error mentioning '%s', got %s", vocab, merges,
             needle, t ? "success" : err);
    tok_bpe_free(t);
}

/* A vocab of the 256 byte tokens (ids 0..255), plus `extra` (JSON members, ids from 256). */
static const char *tt_byte_vocab(const char *dir, const char *extra) {
    static char json[8192];
    size_t n = (size_t)snprintf(json, sizeof json, "{");
    for (int b = 0, k = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
        unsigned cp = printable ? (unsigned)b : 256u + (unsigned)k++;
        n += (size_t)snprintf(json + n, sizeof json - n, "\"\\u%04x\": %d, ", cp, b);
    }
    snprintf(json + n, sizeof json - n, "%s}", extra);
    return tt_write(dir, "small_vocab.json", json);
}

static int tt_mode_errors(char **argv) {
    const char *vocab = argv[2], *merges = argv[3], *dir = argv[4];
    char missing[4096];
    snprintf(missing, sizeof missing, "%s/no-such-file.json", dir);
    tt_expect_error(missing, merges, "--vocab-file");
    tt_expect_error(vocab, missing, "--merge-file");
    tt_expect_error(merges, vocab, "--vocab-file");
    tt_expect_error(vocab, vocab, "did you swap --vocab-file and --merge-file");
    tt_expect_error(tt_write(dir, "list.json", "[1, 2]"), merges, "expected a JSON object of token -> id");
    tt_expect_error(tt_write(dir, "gap.json", "{\"a\": 0, \"b\": 2}"), merges, "ids must be the integers 0..1");
    tt_expect_error(tt_write(dir, "dup.json", "{\"a\": 0, \"b\": 0}"), merges, "used twice");
    tt_expect_error(tt_write(dir, "alien.json", "{\"a\": 0, \"\\u4e2d\": 1}"), merges, "outside GPT-2's byte alphabet");
    tt_expect_error(tt_write(dir, "bytes.json", "{\"a\": 0, \"b\": 1}"), merges, "lacks the token");
    const char *small = tt_byte_vocab(dir, "\"ab\": 256");
    tt_expect_error(small, tt_write(dir, "m1.txt", "#version: 0.2\na b\nb c\n"), "line 3: merging \"b\" and \"c\"");
    tt_expect_error(small, tt_write(dir, "m2.txt", "#version: 0.2\na b c\n"), "line 2: expected two tokens");

    /* The smallest working tokenizer: one merge, applied; a last line without '\n' is ignored as
     * in encoder.py; an unknown merge side is skipped. */
    char err[1024];
    tok_bpe *t = tok_gpt2_load(small, tt_write(dir, "m3.txt", "#version: 0.2\nq \\u4e2d\na b\nb a"), err, sizeof err);
    TT_CHECK(t, "small tokenizer: %s", err);
    if (t) {
        tok_bpe_ctx *c = tok_bpe_ctx_new(t);
        tt_check_case(t, c, "small tokenizer", "abab", 4, (const int32_t[]){256, 256}, 2);
        TT_CHECK(tok_bpe_eod(t) == -1, "no <|endoftext|> in the vocab: eod %d, want -1", tok_bpe_eod(t));
        tok_bpe_ctx_free(c);
        tok_bpe_free(t);
    }
    if (!tt_failures) printf("OK: bad vocab and merge files are refused with their messages\n");
    return tt_failures ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc == 6 && strcmp(argv[1], "ids") == 0) return tt_mode_ids(argv);
    if (argc == 5 && strcmp(argv[1], "errors") == 0) return tt_mode_errors(argv);
    fprintf(stderr, "usage: tokenizer_test ids VOCAB MERGES CASES EXPECTED | errors VOCAB MERGES OUT_DIR\n");
    return 2;
}
