/* data_test.c — tests `mcc data preprocess` (outputs and error messages) and the runtime reader
 * of Megatron indexed datasets (samples, wrap-around, every dtype, corrupt files).
 *   data_test preprocess FIXTURE_DIR OUT_DIR      writes OUT_DIR/fixture_{jsonl,jsonl_eod,txt_eod}_text_document
 *   data_test gpt2_errors VOCAB MERGES OUT_DIR    GPT2BPETokenizer runs that must fail, with 1 and 4 workers
 *   data_test dataset PREFIX TOKENS [...]         checks rt_dataset against the expected tokens
 *   data_test corrupt PREFIX OTHER OUT_DIR        damaged copies of PREFIX (and PREFIX.idx beside
 *                                                 OTHER.bin) must be refused, naming the entry  */
#include "frontend/data_preprocess.h"
#include "runtime/dataset.h"

#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/check.h"

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

/* A file of DIR named STEM... other than STEM.bin and STEM.idx (a temporary left behind), or NULL. */
static const char *dt_leftover(const char *dir, const char *stem) {
    static char name[256];
    DIR *d = opendir(dir);
    const struct dirent *e;
    size_t n = strlen(stem);
    bool found = false;
    while (d && !found && (e = readdir(d))) {
        found = strncmp(e->d_name, stem, n) == 0 && strcmp(e->d_name + n, ".bin") && strcmp(e->d_name + n, ".idx");
        if (found) snprintf(name, sizeof name, "%s", e->d_name);
    }
    if (d) closedir(d);
    return found ? name : NULL;
}

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
    CHECK(rc == 0 && strstr(out, "wrote"), "preprocess %s failed (rc %d): %s", input, rc, out);
}

/* The run must fail, say `needle`, and leave no partial PREFIX_text_document.bin/.idx (nor a
 * temporary) behind. prefix is DIR/NAME. */
static void dt_expect_error(const char *const *args, const char *prefix, const char *needle) {
    char out[4096];
    int rc = dt_preprocess(args, out, sizeof out);
    CHECK(rc != 0, "expected failure mentioning '%s', got rc 0", needle);
    CHECK(strstr(out, needle), "expected the error to mention '%s', got: %s", needle, out);
    char bin[4096], idx[4096];
    snprintf(bin, sizeof bin, "%s_text_document.bin", prefix);
    snprintf(idx, sizeof idx, "%s_text_document.idx", prefix);
    CHECK(!dt_exists(bin) && !dt_exists(idx), "a failed run left %s or %s behind", bin, idx);
    char dir[4096], stem[256];
    snprintf(dir, sizeof dir, "%.*s", (int)(strrchr(prefix, '/') - prefix), prefix);
    snprintf(stem, sizeof stem, "%s_text_document", strrchr(prefix, '/') + 1);
    const char *left = dt_leftover(dir, stem);
    CHECK(!left, "a failed run left %s in %s", left, dir);
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
                    "--merge-file is"); /* names the flag; the tokenizer's own tests check the rest */
    dt_expect_error((const char *[]){"--input", in, "--output-prefix", p, "--workers", "0", NULL}, p,
                    "--workers 0 is out of range: give an integer in 1..1024");
    dt_expect_error((const char *[]){"--input", in, "--output-prefix", p, "--workers=4x", NULL}, p,
                    "--workers expects an integer in 1..1024, got '4x'");
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

/* --json-keys=KEY picks that key and names the output PREFIX_KEY_document; the bytes come
 * back through the runtime reader. */
static void dt_json_key_case(const char *out_dir) {
    const char *in = dt_path(out_dir, "body.jsonl"), *p = dt_path(out_dir, "body");
    const char *text = "{\"text\": \"not me\", \"body\": \"ab\"}\n{\"body\": \"c\"}\n";
    dt_write_file(in, text, strlen(text));
    char out[4096], err[512];
    int rc = dt_preprocess((const char *[]){"--input", in, "--output-prefix", p, "--json-keys=body", NULL}, out,
                           sizeof out);
    CHECK(rc == 0, "--json-keys=body failed: %s", out);
    rt_dataset *d = rt_dataset_open(dt_path(out_dir, "body_body_document"), err, sizeof err);
    CHECK(d, "%s", err);
    if (!d) return;
    int32_t tok[3] = {0};
    int64_t got = dt_read_all(d, tok, 3);
    CHECK(got == 3 && tok[0] == 'a' && tok[1] == 'b' && tok[2] == 'c', "--json-keys=body: got %d tokens %d %d %d",
             (int)got, tok[0], tok[1], tok[2]);
    rt_dataset_close(d);
}

/* Documents of n bytes 'a'+i%26 (i from 0) as one jsonl line, preprocessed to PREFIX. */
static void dt_write_dataset(const char *out_dir, const char *prefix, size_t n) {
    char *text = malloc(n + 16), out[4096];
    size_t at = (size_t)sprintf(text, "{\"text\": \"");
    for (size_t i = 0; i < n; i++) text[at++] = (char)('a' + i % 26);
    at += (size_t)sprintf(text + at, "\"}\n");
    const char *in = dt_path(out_dir, "replace.jsonl");
    dt_write_file(in, text, at);
    free(text);
    int rc = dt_preprocess((const char *[]){"--input", in, "--output-prefix", prefix, NULL}, out, sizeof out);
    CHECK(rc == 0, "preprocess %s failed: %s", in, out);
}

/* A run reading a dataset while it is preprocessed again keeps reading the old tokens (the new
 * files replace the names, not the bytes it has mapped), and new readers see the new ones. */
static void dt_replace_case(const char *out_dir) {
    const char *p = dt_path(out_dir, "replace"), *stem = dt_path(out_dir, "replace_text_document");
    enum { OLD_TOKENS = 20000, NEW_TOKENS = 10 }; /* the old dataset spans pages the new one lacks */
    dt_write_dataset(out_dir, p, OLD_TOKENS);
    char err[1024];
    rt_dataset *old = rt_dataset_open(stem, err, sizeof err);
    CHECK(old, "%s", err);
    if (!old) return;
    dt_write_dataset(out_dir, p, NEW_TOKENS);
    int32_t *tok = malloc(OLD_TOKENS * sizeof *tok);
    int64_t got = dt_read_all(old, tok, OLD_TOKENS), bad = 0;
    for (int64_t i = 0; i < got; i++) bad += tok[i] != 'a' + i % 26;
    CHECK(got == OLD_TOKENS && bad == 0, "the open dataset changed under its reader: %lld tokens, %lld differ",
             (long long)got, (long long)bad);
    rt_dataset_close(old);
    rt_dataset *now = rt_dataset_open(stem, err, sizeof err);
    CHECK(now && rt_dataset_num_tokens(now) == NEW_TOKENS, "the replaced dataset: %s",
             now ? "wrong token count" : err);
    rt_dataset_close(now);
    free(tok);
}

static void dt_mode_preprocess(const char *fixture_dir, const char *out_dir) {
    dt_expect_ok(dt_path(fixture_dir, "fixture.jsonl"), dt_path(out_dir, "fixture_jsonl"), false);
    dt_expect_ok(dt_path(fixture_dir, "fixture.jsonl"), dt_path(out_dir, "fixture_jsonl_eod"), true);
    dt_expect_ok(dt_path(fixture_dir, "fixture.txt"), dt_path(out_dir, "fixture_txt_eod"), true);
    dt_error_cases(out_dir);
    dt_json_key_case(out_dir);
    dt_replace_case(out_dir);
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
    char err[512];
    rt_dataset *d = rt_dataset_open(prefix, err, sizeof err);
    CHECK(d, "%s", err);
    if (d) {
        CHECK(rt_dataset_num_tokens(d) == n, "%s: %lld tokens, want %lld", prefix,
                 (long long)rt_dataset_num_tokens(d), (long long)n);
        /* every id within [0, max], none negative: the vocabulary max + 1 holds them, max does not */
        char why[4400] = "";
        bool fits = rt_dataset_check_tokens(d, max + 1, why, sizeof why);
        CHECK(fits == !negative && (fits || strstr(why, "negative token id")), "%s: vocab %lld: %s", prefix,
              (long long)max + 1, why);
        CHECK(negative || !rt_dataset_check_tokens(d, max, why, sizeof why), "%s: id %lld passed vocab %lld", prefix,
              (long long)max, (long long)max);
        char want_fix[64];
        snprintf(want_fix, sizeof want_fix, "--vocab-size %lld or more", (long long)max + 1);
        CHECK(negative || strstr(why, want_fix), "%s: vocab %lld: want '%s' in '%s'", prefix, (long long)max, want_fix,
              why);
        /* every sequence read in two pieces, concatenated, is the stream Python wrote */
        int32_t *got = malloc(((size_t)n + 1) * sizeof *got);
        int64_t at = dt_read_all(d, got, n), first = -1;
        for (int64_t k = 0; k < at && first < 0; k++)
            if (got[k] != want[k]) first = k;
        CHECK(at == n && first < 0, "%s: read %lld of %lld tokens; token %lld is %d, want %d", prefix, (long long)at,
                 (long long)n, (long long)first, first < 0 ? 0 : got[first], first < 0 ? 0 : want[first]);
        free(got);
        rt_dataset_close(d);
    }
    free(want);
    free(raw);
}

/* One damaged copy of a dataset: the .idx cut to idx_len, one little-endian field of it set (the
 * header byte `at`, or entry `entry` of the lengths, pointers or document index) and
 * idx_extra zero bytes appended; the .bin taken from bin_from (another dataset) when given, and
 * cut (bin_delta < 0) or grown by zero bytes. Opening it must fail naming `file` (corrupt.idx or
 * corrupt.bin) and `needle` (the entry and what is wrong). */
typedef enum { DT_HEADER, DT_LENGTHS, DT_POINTERS, DT_DOCS } dt_region;
typedef struct {
    size_t idx_len;
    dt_region region;
    int at; /* byte in the header, or the entry of the array; -1: no change */
    int64_t value;
    size_t idx_extra;
    const char *bin_from;
    int bin_delta;
    const char *file, *needle;
} dt_corrupt;

static void dt_put_le(uint8_t *p, uint64_t v, int nbytes) {
    for (int i = 0; i < nbytes; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void dt_expect_corrupt(const char *prefix, const char *out_dir, const dt_corrupt *c) {
    char idx_path[4096], bin_path[4096], err[1024] = "";
    size_t ni, nb;
    snprintf(idx_path, sizeof idx_path, "%s.idx", prefix);
    snprintf(bin_path, sizeof bin_path, "%s.bin", c->bin_from ? c->bin_from : prefix);
    uint8_t *idx = dt_read_file(idx_path, &ni), *bin = dt_read_file(bin_path, &nb);
    uint64_t nseq = 0;
    for (int i = 7; i >= 0; i--) nseq = nseq << 8 | idx[18 + i];
    static const int width[] = {1, 4, 8, 8};
    size_t base[] = {0, 34, 34 + 4 * nseq, 34 + 12 * nseq}, off = base[c->region] + (size_t)c->at * width[c->region];
    if (c->region == DT_HEADER) off = (size_t)c->at;
    if (c->at >= 0 && off + width[c->region] <= ni) dt_put_le(idx + off, (uint64_t)c->value, width[c->region]);
    idx = realloc(idx, ni + c->idx_extra);
    bin = realloc(bin, nb + (c->bin_delta > 0 ? (size_t)c->bin_delta : 0) + 1);
    memset(idx + ni, 0, c->idx_extra);
    if (c->bin_delta > 0) memset(bin + nb, 0, (size_t)c->bin_delta);
    const char *cp = dt_path(out_dir, "corrupt");
    dt_write_file(dt_path(out_dir, "corrupt.idx"), idx, c->idx_len < ni ? c->idx_len : ni + c->idx_extra);
    dt_write_file(dt_path(out_dir, "corrupt.bin"), bin, nb + (size_t)c->bin_delta);
    rt_dataset *d = rt_dataset_open(cp, err, sizeof err);
    CHECK(!d && strstr(err, c->needle) && strstr(err, dt_path(out_dir, c->file)) &&
                 strstr(err, "mcc data preprocess"),
             "corrupt dataset: expected a failure naming %s, '%s' and the fix, got %s", c->file, c->needle,
             d ? "success" : err);
    rt_dataset_close(d);
    free(idx);
    free(bin);
}

/* PREFIX: the fixture_jsonl_eod dataset (4 sequences of 52, 71, 69, 2 uint16 tokens; document
 * index 0 1 1 2 3 4 4); OTHER: fixture_jsonl, the same documents without end-of-document tokens. */
static void dt_mode_corrupt(const char *prefix, const char *other, const char *out_dir) {
    const dt_corrupt cases[] = {
        {SIZE_MAX, DT_HEADER, 0, 'X', 0, NULL, 0, "corrupt.idx", "bad magic"},
        {SIZE_MAX, DT_HEADER, 9, 2, 0, NULL, 0, "corrupt.idx", "index version 2"},
        {SIZE_MAX, DT_HEADER, 17, 7, 0, NULL, 0, "corrupt.idx", "dtype code 7"},
        {20, DT_HEADER, -1, 0, 0, NULL, 0, "corrupt.idx", "truncated"},
        {40, DT_HEADER, -1, 0, 0, NULL, 0, "corrupt.idx", "truncated"},
        /* lengths and pointers disagree */
        {SIZE_MAX, DT_POINTERS, 1, 106, 0, NULL, 0, "corrupt.idx", "sequence 1 starts at byte 106, but the sequences "
                                                                   "before it end earlier (a gap)"},
        {SIZE_MAX, DT_POINTERS, 2, 240, 0, NULL, 0, "corrupt.idx", "sequence 2 starts at byte 240, but the sequences "
                                                                   "before it end later (they overlap)"},
        {SIZE_MAX, DT_POINTERS, 0, 2, 0, NULL, 0, "corrupt.idx", "sequence 0 starts at byte 2"},
        {SIZE_MAX, DT_LENGTHS, 1, 72, 0, NULL, 0, "corrupt.idx", "sequence 2 starts at byte 246, but the sequences "
                                                                 "before it end later"},
        {SIZE_MAX, DT_LENGTHS, 3, -1, 0, NULL, 0, "corrupt.idx", "sequence 3 has length -1"},
        /* the document index */
        {SIZE_MAX, DT_DOCS, 0, 1, 0, NULL, 0, "corrupt.idx", "document index entry 0 of 7 is 1, the first must be 0"},
        {SIZE_MAX, DT_DOCS, 3, 0, 0, NULL, 0, "corrupt.idx", "document index entry 3 of 7 is 0, less than the entry "
                                                             "before it"},
        {SIZE_MAX, DT_DOCS, 2, 9, 0, NULL, 0, "corrupt.idx", "document index entry 2 of 7 is 9, beyond the sequence "
                                                             "count (4 sequences)"},
        /* the header's document count 5 and the last two entries cut: 0 1 1 2 3 ends short of 4 */
        {138 - 16, DT_HEADER, 26, 5, 0, NULL, 0, "corrupt.idx", "document index entry 4 of 5 is 3, the last must be "
                                                                "the sequence count"},
        /* bytes after the document index */
        {SIZE_MAX, DT_HEADER, -1, 0, 8, NULL, 0, "corrupt.idx", "8 trailing bytes after the document index"},
        /* the .bin: truncated, grown, of another dataset */
        {SIZE_MAX, DT_HEADER, -1, 0, 0, NULL, -1, "corrupt.bin", "corrupt.bin is 387 bytes, but"},
        {SIZE_MAX, DT_HEADER, -1, 0, 0, NULL, 2, "corrupt.bin", "has trailing bytes"},
        {SIZE_MAX, DT_HEADER, -1, 0, 0, other, 0, "corrupt.bin", "sequences (194 tokens of 2 bytes) end at byte 388"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) dt_expect_corrupt(prefix, out_dir, &cases[i]);
    char err[512] = "";
    rt_dataset *d = rt_dataset_open(dt_path(out_dir, "no-such-dataset"), err, sizeof err);
    CHECK(!d && strstr(err, "cannot open"), "missing dataset: got %s", d ? "success" : err);
    char suffixed[4096];
    snprintf(suffixed, sizeof suffixed, "%s.bin", prefix);
    d = rt_dataset_open(suffixed, err, sizeof err);
    CHECK(!d && strstr(err, "without .bin/.idx"), "prefix with .bin: got %s", d ? "success" : err);
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "preprocess") == 0) dt_mode_preprocess(argv[2], argv[3]);
    else if (argc == 5 && strcmp(argv[1], "gpt2_errors") == 0) dt_mode_gpt2_errors(argv[2], argv[3], argv[4]);
    else if (argc >= 4 && argc % 2 == 0 && strcmp(argv[1], "dataset") == 0)
        for (int i = 2; i < argc; i += 2) dt_check_dataset(argv[i], argv[i + 1]);
    else if (argc == 5 && strcmp(argv[1], "corrupt") == 0) dt_mode_corrupt(argv[2], argv[3], argv[4]);
    else {
        fprintf(stderr, "usage: data_test preprocess FIXTURE_DIR OUT_DIR | gpt2_errors VOCAB MERGES OUT_DIR | "
                        "dataset PREFIX TOKENS... | corrupt PREFIX OTHER OUT_DIR\n");
        return 2;
    }
    if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
    return failures ? 1 : 0;
}
