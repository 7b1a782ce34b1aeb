/* data_test.c — tests `mcc data preprocess` (outputs and error messages) and the runtime reader
 * of Megatron indexed datasets (samples, wrap-around, every dtype, corrupt files).
 *   data_test preprocess FIXTURE_DIR OUT_DIR      writes OUT_DIR/fixture_{jsonl,jsonl_eod,txt_eod}_text_document
 *   data_test gpt2_errors VOCAB MERGES OUT_DIR    GPT2BPETokenizer runs that must fail, with 1 and 4 workers
 *   data_test dataset PREFIX TOKENS [...]         checks rt_dataset against the expected tokens
 *   data_test corrupt PREFIX OUT_DIR              damaged copies of PREFIX must be refused      */
#include "frontend/data_preprocess.h"
#include "runtime/dataset.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int dt_failures;

#define DT_CHECK(cond, ...)                                              \
    do {                                                                 \
        if (!(cond)) {                                                   \
            fprintf(stderr, "%s:%d: FAIL: ", __FILE__, __LINE__);        \
            fprintf(stderr, __VA_ARGS__);                                \
            fputc('\n', stderr);                                         \
            dt_failures++;                                               \
        }                                                                \
    } while (0)

/* DIR/NAME in one of 8 rotating buffers: valid until 8 more calls. */
static char *dt_path(const char *dir, const char *name) {
    static char buf[8][4096];
    static int next;
    char *p = buf[next++ % 8];
    snprintf(p, sizeof buf[0], "%s/%s", dir, name);
    return p;
}

static void dt_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(2);
    }
}

static uint8_t *dt_read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot read %s\n", path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    rewind(f);
    uint8_t *data = malloc(*n + 1);
    if (!data || fread(data, 1, *n, f) != *n) exit(2);
    fclose(f);
    return data;
}

static bool dt_exists(const char *path) { return access(path, F_OK) == 0; }

/* ---- preprocess --------------------------------------------------------------------------- */

/* Runs `mcc data preprocess ARGS` in-process, capturing what it prints to stderr. */
static int dt_preprocess(const char *const *args, char *captured, size_t cap) {
    char *argv[16] = {"preprocess"};
    int argc = 1;
    for (; args[argc - 1]; argc++) argv[argc] = (char *)args[argc - 1];
    fflush(stderr);
    int saved = dup(2);
    FILE *tmp = tmpfile();
    dup2(fileno(tmp), 2);
    int rc = mcc_data_preprocess_main(argc, argv);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    captured[fread(captured, 1, cap - 1, tmp)] = '\0';
    fclose(tmp);
    return rc;
}

static void dt_expect_ok(const char *input, const char *prefix, bool eod) {
    char out[4096];
    const char *args[] = {"--input", input, "--output-prefix", prefix, eod ? "--append-eod" : NULL, NULL};
    int rc = dt_preprocess(args, out, sizeof out);
    DT_CHECK(rc == 0 && strstr(out, "wrote"), "preprocess %s failed (rc %d): %s", input, rc, out);
}

/* The run must fail, say `needle`, and leave no partial PREFIX_text_document.bin/.idx behind. */
static void dt_expect_error(const char *const *args, const char *prefix, const char *needle) {
    char out[4096];
    int rc = dt_preprocess(args, out, sizeof out);
    DT_CHECK(rc != 0, "expected failure mentioning '%s', got rc 0", needle);
    DT_CHECK(strstr(out, needle), "expected the error to mention '%s', got: %s", needle, out);
    char bin[4096], idx[4096];
    snprintf(bin, sizeof bin, "%s_text_document.bin", prefix);
    snprintf(idx, sizeof idx, "%s_text_document.idx", prefix);
    DT_CHECK(!dt_exists(bin) && !dt_exists(idx), "a failed run left %s or %s behind", bin, idx);
}

static void dt_error_cases(const char *out_dir) {
    const char *p = dt_path(out_dir, "err"), *in = dt_path(out_dir, "err.jsonl");
    dt_expect_error((const char *[]){"--output-prefix", p, NULL}, p, "missing --input");
    dt_expect_error((const char *[]){"--input", in, NULL}, p, "missing --output-prefix");
    dt_expect_error((const char *[]){"--input", dt_path(out_dir, "no-such-file.jsonl"), "--output-prefix", p, NULL},
                    p, "cannot open");
    dt_expect_error((const char *[]){"--input", in, "--output-prefix", p, "--tokenizer-type", "SentencePiece", NULL},
                    p, "unknown --tokenizer-type SentencePiece");
    dt_expect_error((const char *[]){"--input", in, "--output-prefix", p, "--tokenizer-type", "GPT2BPETokenizer", NULL},
                    p, "GPT2BPETokenizer needs --vocab-file");
    dt_expect_error((const char *[]){"--input", in, "--output-prefix", p, "--merge-file", in, NULL}, p,
                    "--merge-file is only read by --tokenizer-type GPT2BPETokenizer");
    dt_expect_error((const char *[]){"--input", in, "--output-prefix", p, "--workers", "0", NULL}, p,
                    "--workers 0: needs a whole number");
    dt_expect_error((const char *[]){"--input", in, "--output-prefix", p, "--workers=4x", NULL}, p,
                    "--workers 4x: needs a whole number");
    dt_expect_error((const char *[]){"--input", in, "--output-prefix", p, "--json-keys", NULL}, p,
                    "--json-keys needs a value");

    const char *const cases[][2] = {
        {"{\"text\": \"ok\"}\n{\"text\": \"unterminated}\n", "line 2: bad JSON"},
        {"{\"text\": \"a\"}\n\n{\"body\": \"b\"}\n", "line 3: missing key \"text\""},
        {"{\"text\": 5}\n", "line 1: \"text\" is not a string"},
        {"{\"text\": \"\"}\n{\"text\": \"\"}\n", "empty output"},
        {"\n \n", "empty output"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dt_write_file(in, cases[i][0], strlen(cases[i][0]));
        dt_expect_error((const char *[]){"--input", in, "--output-prefix", p, NULL}, p, cases[i][1]);
    }
}

/* --json-keys=KEY picks that key and names the output PREFIX_KEY_document; the bytes come
 * back through the runtime reader. */
/* The concatenation of every sequence, each read in two pieces (from 0 and from its middle), into
 * out[max]; returns the tokens read (stops before a sequence that would overflow out). */
static int64_t dt_read_all(const rt_dataset *d, int32_t *out, int64_t max)
{
    int64_t at = 0;
    for (int64_t s = 0; s < rt_dataset_num_sequences(d); s++) {
        int32_t len = rt_dataset_sequence_length(d, s);
        if (at + len > max)
            break;
        rt_dataset_read(d, s, 0, len / 2, out + at);
        rt_dataset_read(d, s, len / 2, len - len / 2, out + at + len / 2);
        at += len;
    }
    return at;
}

static void dt_json_key_case(const char *out_dir) {
    const char *in = dt_path(out_dir, "body.jsonl"), *p = dt_path(out_dir, "body");
    const char *text = "{\"text\": \"not me\", \"body\": \"ab\"}\n{\"body\": \"c\"}\n";
    dt_write_file(in, text, strlen(text));
    char out[4096], err[512];
    int rc = dt_preprocess((const char *[]){"--input", in, "--output-prefix", p, "--json-keys=body", NULL}, out,
                           sizeof out);
    DT_CHECK(rc == 0, "--json-keys=body failed: %s", out);
    rt_dataset *d = rt_dataset_open(dt_path(out_dir, "body_body_document"), err, sizeof err);
    DT_CHECK(d, "%s", err);
    if (!d) return;
    int32_t tok[3] = {0};
    int64_t got = dt_read_all(d, tok, 3);
    DT_CHECK(got == 3 && tok[0] == 'a' && tok[1] == 'b' && tok[2] == 'c', "--json-keys=body: got %d tokens %d %d %d",
             (int)got, tok[0], tok[1], tok[2]);
    rt_dataset_close(d);
}

static void dt_mode_preprocess(const char *fixture_dir, const char *out_dir) {
    dt_expect_ok(dt_path(fixture_dir, "fixture.jsonl"), dt_path(out_dir, "fixture_jsonl"), false);
    dt_expect_ok(dt_path(fixture_dir, "fixture.jsonl"), dt_path(out_dir, "fixture_jsonl_eod"), true);
    dt_expect_ok(dt_path(fixture_dir, "fixture.txt"), dt_path(out_dir, "fixture_txt_eod"), true);
    dt_error_cases(out_dir);
    dt_json_key_case(out_dir);
}

/* GPT-2 runs that must fail: the first bad document is reported by its line even when a later
 * chunk (another worker) holds it, and no partial dataset remains. */
static void dt_mode_gpt2_errors(const char *vocab, const char *merges, const char *out_dir) {
    const char *p = dt_path(out_dir, "gpt2_err"), *in = dt_path(out_dir, "gpt2_err.txt");
    size_t n = 0, cap = 1 << 20;
    char *text = malloc(cap);
    for (int i = 0; n < cap - 1000; i++) n += (size_t)snprintf(text + n, cap - n, "paragraph %d, fine.\n\n", i);
    int bad_line = 2 * 20000 + 1; /* paragraph 20000, well past the first chunk */
    char *at = text;
    for (int line = 1; line < bad_line; line++) at = strchr(at, '\n') + 1;
    at[0] = (char)0xff;
    dt_write_file(in, text, n);
    char needle[64];
    snprintf(needle, sizeof needle, "line %d: the paragraph starting here is not valid UTF-8", bad_line);
    for (int w = 1; w <= 4; w += 3) {
        char workers[8];
        snprintf(workers, sizeof workers, "%d", w);
        dt_expect_error((const char *[]){"--input", in, "--output-prefix", p, "--tokenizer-type", "GPT2BPETokenizer",
                                         "--vocab-file", vocab, "--merge-file", merges, "--workers", workers, NULL},
                        p, needle);
    }
    free(text);
    dt_expect_error((const char *[]){"--input", in, "--output-prefix", p, "--tokenizer-type", "GPT2BPETokenizer",
                                     "--vocab-file", merges, "--merge-file", vocab, NULL},
                    p, "--vocab-file");
}

/* ---- runtime reader ----------------------------------------------------------------------- */

/* Checks size, max id and samples at several offsets (incl. wrap-around) against TOKENS, the
 * expected concatenation as int32 little-endian, written independently by megatron_indexed.py. */
static void dt_check_dataset(const char *prefix, const char *tokens_path) {
    size_t nbytes;
    uint8_t *raw = dt_read_file(tokens_path, &nbytes);
    int64_t n = (int64_t)(nbytes / 4);
    int32_t *want = malloc((size_t)n * sizeof *want);
    int64_t max = 0;
    bool negative = false;
    for (int64_t i = 0; i < n; i++) {
        want[i] = (int32_t)((uint32_t)raw[4 * i] | (uint32_t)raw[4 * i + 1] << 8 | (uint32_t)raw[4 * i + 2] << 16 |
                            (uint32_t)raw[4 * i + 3] << 24);
        negative |= want[i] < 0;
        max = want[i] > max ? want[i] : max;
    }
    int64_t want_max = negative ? INT32_MAX : max; /* rt_dataset_max_token's rule for negative ids */
    char err[512];
    rt_dataset *d = rt_dataset_open(prefix, err, sizeof err);
    DT_CHECK(d, "%s", err);
    if (d) {
        DT_CHECK(rt_dataset_num_tokens(d) == n, "%s: %lld tokens, want %lld", prefix,
                 (long long)rt_dataset_num_tokens(d), (long long)n);
        DT_CHECK(rt_dataset_max_token(d) == want_max, "%s: max token %d, want %lld", prefix, rt_dataset_max_token(d),
                 (long long)want_max);
        /* every sequence read in two pieces, concatenated, is the stream Python wrote */
        int32_t *got = malloc(((size_t)n + 1) * sizeof *got);
        int64_t at = dt_read_all(d, got, n), first = -1;
        for (int64_t k = 0; k < at && first < 0; k++)
            if (got[k] != want[k]) first = k;
        DT_CHECK(at == n && first < 0, "%s: read %lld of %lld tokens; token %lld is %d, want %d", prefix, (long long)at,
                 (long long)n, (long long)first, first < 0 ? 0 : got[first], first < 0 ? 0 : want[first]);
        free(got);
        rt_dataset_close(d);
    }
    free(want);
    free(raw);
}

/* Writes PREFIX's files as OUT_DIR/corrupt.{idx,bin}, idx cut to idx_len (and patched at byte
 * `at` when at >= 0), bin cut by bin_cut bytes; opening must fail with `needle`. */
static void dt_expect_corrupt(const char *prefix, const char *out_dir, size_t idx_len, int at, uint8_t value,
                              size_t bin_cut, const char *needle) {
    char idx_path[4096], bin_path[4096], err[512] = "";
    size_t ni, nb;
    snprintf(idx_path, sizeof idx_path, "%s.idx", prefix);
    snprintf(bin_path, sizeof bin_path, "%s.bin", prefix);
    uint8_t *idx = dt_read_file(idx_path, &ni), *bin = dt_read_file(bin_path, &nb);
    if (at >= 0) idx[at] = value;
    const char *cp = dt_path(out_dir, "corrupt");
    dt_write_file(dt_path(out_dir, "corrupt.idx"), idx, idx_len < ni ? idx_len : ni);
    dt_write_file(dt_path(out_dir, "corrupt.bin"), bin, nb - bin_cut);
    rt_dataset *d = rt_dataset_open(cp, err, sizeof err);
    DT_CHECK(!d && strstr(err, needle), "corrupt dataset (%s): expected failure mentioning '%s', got %s", needle,
             needle, d ? "success" : err);
    rt_dataset_close(d);
    free(idx);
    free(bin);
}

static void dt_mode_corrupt(const char *prefix, const char *out_dir) {
    dt_expect_corrupt(prefix, out_dir, SIZE_MAX, 0, 'X', 0, "bad magic");
    dt_expect_corrupt(prefix, out_dir, SIZE_MAX, 9, 2, 0, "index version 2");
    dt_expect_corrupt(prefix, out_dir, SIZE_MAX, 17, 7, 0, "dtype code 7");
    dt_expect_corrupt(prefix, out_dir, 20, -1, 0, 0, "truncated");
    dt_expect_corrupt(prefix, out_dir, 40, -1, 0, 0, "truncated");
    dt_expect_corrupt(prefix, out_dir, SIZE_MAX, -1, 0, 1, "lies outside");
    char err[512] = "";
    rt_dataset *d = rt_dataset_open(dt_path(out_dir, "no-such-dataset"), err, sizeof err);
    DT_CHECK(!d && strstr(err, "cannot open"), "missing dataset: got %s", d ? "success" : err);
    char suffixed[4096];
    snprintf(suffixed, sizeof suffixed, "%s.bin", prefix);
    d = rt_dataset_open(suffixed, err, sizeof err);
    DT_CHECK(!d && strstr(err, "without .bin/.idx"), "prefix with .bin: got %s", d ? "success" : err);
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "preprocess") == 0) dt_mode_preprocess(argv[2], argv[3]);
    else if (argc == 5 && strcmp(argv[1], "gpt2_errors") == 0) dt_mode_gpt2_errors(argv[2], argv[3], argv[4]);
    else if (argc >= 4 && argc % 2 == 0 && strcmp(argv[1], "dataset") == 0)
        for (int i = 2; i < argc; i += 2) dt_check_dataset(argv[i], argv[i + 1]);
    else if (argc == 4 && strcmp(argv[1], "corrupt") == 0) dt_mode_corrupt(argv[2], argv[3]);
    else {
        fprintf(stderr, "usage: data_test preprocess FIXTURE_DIR OUT_DIR | gpt2_errors VOCAB MERGES OUT_DIR | "
                        "dataset PREFIX TOKENS... | corrupt PREFIX OUT_DIR\n");
        return 2;
    }
    if (dt_failures) fprintf(stderr, "%d check(s) failed\n", dt_failures);
    return dt_failures ? 1 : 0;
}
