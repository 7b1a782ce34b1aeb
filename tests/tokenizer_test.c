/* tokenizer_test.c — the BPE tokenizers give their references' exact ids and decode back to the text.
 *   tokenizer_test ids VOCAB MERGES CASES.jsonl EXPECTED.jsonl
 *       GPT-2: each case's ids equal the reference's (node: gpt-3-encoder and js-tiktoken), decode
 *       round-trips, plus cases where JavaScript's \s differs from GPT-2's Python regex
 *   tokenizer_test errors VOCAB MERGES OUT_DIR
 *       bad vocab / merge files are refused with a message naming the file and the fix
 *   tokenizer_test tiktoken RANKS PATTERN CASES.jsonl EXPECTED.jsonl
 *       TikTokenizer (1000 special tokens first, as Megatron's) from tiktoken's file: the ids of
 *       js-tiktoken with the same ranks and pattern (Megatron's JSON format is checked on a small
 *       vocabulary in bpe_errors: it requires ranks 0..255 to be the bytes in order, which
 *       cl100k's are not)
 *   tokenizer_test hf DIR CASES.jsonl EXPECTED.jsonl
 *       HuggingFaceTokenizer on DIR/tokenizer.json: the ids of tokenizers.js
 *   tokenizer_test bpe_errors OUT_DIR
 *       bad tiktoken files and tokenizer.json fields are refused, naming the file and field */
#include "frontend/tokenizer_bpe.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/check.h"
/* -1: decode(encode(text)) is text exactly; else it may start with a template's special tokens. */
static long tt_template_bytes = -1;


static tok_bpe *tt_load(const char *vocab, const char *merges) {
    char err[1024];
    tok_bpe *t = tok_gpt2_load(vocab, merges, err, sizeof err);
    if (!t) {
        fprintf(stderr, "cannot load the GPT-2 tokenizer: %s\n", err);
        exit(2);
    }
    return t;
}

/* Encodes text, compares with want[0..nwant) and checks decode gives the text back (after the
 * special tokens a tokenizer.json's template puts first). */
static void tt_check_case(const tok_bpe *t, tok_bpe_ctx *c, const char *label, const char *text, size_t n,
                          const int32_t *want, size_t nwant) {
    tok_ids got = {0};
    CHECK(tok_bpe_encode(c, text, n, &got), "%s: encode refused valid UTF-8", label);
    size_t i = 0;
    while (i < got.n && i < nwant && got.v[i] == want[i]) i++;
    CHECK(i == got.n && i == nwant, "%s (%.60s): %zu ids, want %zu; first difference at %zu: %d, want %d", label,
             text, got.n, nwant, i, i < got.n ? got.v[i] : -1, i < nwant ? want[i] : -1);
    size_t len = 0;
    char *back = tok_bpe_decode(t, got.v, got.n, &len);
    CHECK(back && len >= n && memcmp(back + len - n, text, n) == 0 && (tt_template_bytes >= 0 || len == n),
             "%s (%.60s): decode(encode(text)) is not the text", label, text);
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
        CHECK(getline(&le, &cape, fe) > 0, "%s has fewer lines than %s", expected, cases);
        if (failures) break;
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
        CHECK(tok_bpe_encode(c, text, n, &ids), "%s run refused", k ? "space" : "letter");
        char *back = tok_bpe_decode(t, ids.v, ids.n, &len);
        CHECK(back && len >= n && memcmp(back + len - n, text, n) == 0 && (tt_template_bytes >= 0 || len == n),
                 "1 MB %s run does not round-trip", k ? "space" : "letter");
        free(back);
        tok_ids_free(&ids);
    }
    free(text);
    tok_ids ids = {0};
    tok_ids_push(&ids, 7);
    CHECK(!tok_bpe_encode(c, "ok \xff\xfe bad", 9, &ids) && ids.n == 1,
             "invalid UTF-8 must be refused without appending ids");
    size_t len;
    CHECK(!tok_bpe_decode(t, (const int32_t[]){tok_bpe_vocab_size(t)}, 1, &len), "decode must refuse id %d",
             tok_bpe_vocab_size(t));
    tok_ids_free(&ids);
}

static int tt_mode_ids(char **argv) {
    tok_bpe *t = tt_load(argv[2], argv[3]);
    tok_bpe_ctx *c = tok_bpe_ctx_new(t);
    CHECK(tok_bpe_vocab_size(t) == 50257, "vocab size %d, want 50257", tok_bpe_vocab_size(t));
    CHECK(tok_bpe_eod(t) == 50256, "<|endoftext|> is %d, want 50256", tok_bpe_eod(t));
    int n = tt_reference_cases(t, c, argv[4], argv[5]);
    tt_python_whitespace_cases(t, c);
    tt_stress_cases(t, c);
    tok_bpe_ctx_free(c);
    tok_bpe_free(t);
    if (!failures) printf("OK: %d reference cases match GPT-2's ids and round-trip\n", n);
    return failures ? 1 : 0;
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
    CHECK(!t && strstr(err, needle), "loading %s + %s: expected an error mentioning '%s', got %s", vocab, merges,
             needle, t ? "success" : err);
    tok_bpe_free(t);
}

/* A vocab of the 256 byte tokens (ids 0..255), plus `extra` (JSON members, ids from 256). */
static const char *tt_byte_vocab_json(const char *extra) {
    static char json[8192];
    size_t n = (size_t)snprintf(json, sizeof json, "{");
    for (int b = 0, k = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
        unsigned cp = printable ? (unsigned)b : 256u + (unsigned)k++;
        n += (size_t)snprintf(json + n, sizeof json - n, "\"\\u%04x\": %d, ", cp, b);
    }
    snprintf(json + n, sizeof json - n, "%s}", extra);
    return json;
}

static const char *tt_byte_vocab(const char *dir, const char *extra) {
    return tt_write(dir, "small_vocab.json", tt_byte_vocab_json(extra));
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
    CHECK(t, "small tokenizer: %s", err);
    if (t) {
        tok_bpe_ctx *c = tok_bpe_ctx_new(t);
        tt_check_case(t, c, "small tokenizer", "abab", 4, (const int32_t[]){256, 256}, 2);
        CHECK(tok_bpe_eod(t) == -1, "no <|endoftext|> in the vocab: eod %d, want -1", tok_bpe_eod(t));
        tok_bpe_ctx_free(c);
        tok_bpe_free(t);
    }
    if (!failures) printf("OK: bad vocab and merge files are refused with their messages\n");
    return failures ? 1 : 0;
}

/* ---- TikTokenizer and HuggingFaceTokenizer ---------------------------------------------- */

static tok_ids tt_encode(tok_bpe_ctx *c, const char *text) {
    tok_ids ids = {0};
    CHECK(tok_bpe_encode(c, text, strlen(text), &ids), "encode refused \"%s\"", text);
    return ids;
}

/* cl100k's ranks give js-tiktoken's ids (+ 1000 special ids). */
static int tt_mode_tiktoken(char **argv) {
    const char *ranks = argv[2], *pattern = argv[3];
    char err[1024];
    tok_bpe *t = tok_tiktoken_load(ranks, pattern, 1000, 101256, err, sizeof err);
    if (!t) {
        fprintf(stderr, "cannot load %s: %s\n", ranks, err);
        return 2;
    }
    CHECK(tok_bpe_eod(t) == 2 && strcmp(tok_bpe_eod_name(t), "</s>") == 0, "eod %d %s, want Megatron's </s> = 2",
             tok_bpe_eod(t), tok_bpe_eod_name(t));
    tok_bpe_ctx *c = tok_bpe_ctx_new(t);
    int n = tt_reference_cases(t, c, argv[4], argv[5]);
    tok_ids ids = tt_encode(c, "</s><s><unk>");
    bool text = ids.n > 3;
    for (size_t i = 0; i < ids.n; i++) text = text && ids.v[i] >= 1000;
    CHECK(text, "special tokens in the text are text (encode_ordinary)");
    tok_ids_free(&ids);
    tt_stress_cases(t, c);
    tok_bpe_ctx_free(c);
    tok_bpe_free(t);
    /* --vocab-size below the ranks keeps the first ones, as Megatron's max_vocab cut does. */
    t = tok_tiktoken_load(ranks, pattern, 1000, 1000 + 300, err, sizeof err);
    CHECK(t, "cut to 300 ranks: %s", err);
    if (t) {
        c = tok_bpe_ctx_new(t);
        ids = tt_encode(c, "the thing");
        bool below = ids.n > 2;
        for (size_t i = 0; i < ids.n; i++) below = below && ids.v[i] < 1300;
        CHECK(below, "cut to 300 ranks: ids must stay below 1300 (%zu ids)", ids.n);
        tok_ids_free(&ids);
        tok_bpe_ctx_free(c);
        tok_bpe_free(t);
    }
    if (!failures) printf("OK: %d reference cases match js-tiktoken's ids (pattern %s)\n", n, pattern);
    return failures ? 1 : 0;
}

static int tt_mode_hf(char **argv) {
    char err[1024];
    tok_bpe *t = tok_hf_load(argv[2], err, sizeof err);
    if (!t) {
        fprintf(stderr, "cannot load %s: %s\n", argv[2], err);
        return 2;
    }
    CHECK(strcmp(tok_bpe_eod_name(t), argv[3]) == 0, "eod %s, want %s", tok_bpe_eod_name(t), argv[3]);
    tt_template_bytes = 0;
    tok_bpe_ctx *c = tok_bpe_ctx_new(t);
    int n = tt_reference_cases(t, c, argv[4], argv[5]);
    tt_stress_cases(t, c);
    tok_bpe_ctx_free(c);
    tok_bpe_free(t);
    if (!failures) printf("OK: %d reference cases match tokenizers.js's ids for %s\n", n, argv[2]);
    return failures ? 1 : 0;
}

static const char *tt_writef(const char *dir, const char *name, const char *fmt, ...) {
    static char text[16384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    return tt_write(dir, name, text);
}

static void tt_expect_tiktoken_error(const char *file, const char *pattern, int32_t vocab, const char *needle) {
    char err[1024] = "";
    tok_bpe *t = tok_tiktoken_load(file, pattern, 3, vocab, err, sizeof err);
    CHECK(!t && strstr(err, needle), "loading %s: expected an error mentioning '%s', got %s", file, needle,
             t ? "success" : err);
    tok_bpe_free(t);
}

/* The 256 single bytes (ranks 0..255), then "ab" and "abab": tiktoken's file or Megatron's JSON. */
static const char *tt_small_ranks(const char *dir, bool megatron) {
    static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    static char text[32768];
    size_t n = (size_t)snprintf(text, sizeof text, "%s", megatron ? "[" : "");
    for (int b = 0; b < 258; b++) {
        char tok[16];
        if (b < 256) snprintf(tok, sizeof tok, "%c%c==", B64[b >> 2], B64[(b & 3) << 4]);
        else snprintf(tok, sizeof tok, "%s", b == 256 ? "YWI=" : "YWJhYg=="); /* "ab", "abab" */
        if (megatron)
            n += (size_t)snprintf(text + n, sizeof text - n, "%s{\"rank\": %d, \"token_bytes\": \"%s\", \"token_str\": \"\"}",
                                  b ? ", " : "", b, tok);
        else
            n += (size_t)snprintf(text + n, sizeof text - n, "%s %d\n", tok, b);
    }
    snprintf(text + n, sizeof text - n, "%s", megatron ? "]" : "");
    return tt_write(dir, megatron ? "small.json" : "small.tiktoken", text);
}

static void tt_tiktoken_errors(const char *dir) {
    char missing[4096];
    snprintf(missing, sizeof missing, "%s/no-such-file.tiktoken", dir);
    tt_expect_tiktoken_error(missing, "llama3", 300, "--tokenizer-model");
    tt_expect_tiktoken_error(tt_write(dir, "bad.tiktoken", "QQ== zero\n"), "llama3", 4, "line 1: expected \"base64(token) rank\"");
    tt_expect_tiktoken_error(tt_write(dir, "dup.tiktoken", "QQ== 0\nQg== 0\n"), "llama3", 5, "rank 0 appears twice");
    tt_expect_tiktoken_error(tt_write(dir, "gap.tiktoken", "QQ== 0\nQg== 2\n"), "llama3", 6, "line 2: rank 2, but the file has 2 lines");
    tt_expect_tiktoken_error(tt_write(dir, "same.tiktoken", "QQ== 0\nQQ== 1\n"), "llama3", 5, "ranks 0 and 1 are the same");
    tt_expect_tiktoken_error(tt_write(dir, "one.tiktoken", "QQ== 0\n"), "llama3", 4, "no token for the byte 0x00");
    tt_expect_tiktoken_error(tt_write(dir, "short.tiktoken", "QQ== 0\n"), "llama3", 9, "pass --vocab-size 4");
    tt_expect_tiktoken_error(tt_write(dir, "m.json", "[{\"rank\": 1, \"token_bytes\": \"AA==\", \"token_str\": \"\"}]"),
                             "llama3", 4, "entry 0 must be {\"rank\": 0");
    tt_expect_tiktoken_error(tt_small_ranks(dir, false), "v3", 261, "--tiktoken-pattern v3: unknown; one of llama3");
    for (int megatron = 0; megatron < 2; megatron++) {
        char err[1024];
        tok_bpe *t = tok_tiktoken_load(tt_small_ranks(dir, megatron), "llama3", 3, 261, err, sizeof err);
        CHECK(t, "small ranks: %s", err);
        if (!t) continue;
        tok_bpe_ctx *c = tok_bpe_ctx_new(t);
        /* "abab" is a token: one id; "ababab": ab + abab by rank; TikTokenizer refuses bad UTF-8. */
        tt_check_case(t, c, "small ranks", "abab ababab", 11, (const int32_t[]){260, 32 + 3, 260, 259}, 4);
        tok_ids ids = {0};
        CHECK(!tok_bpe_encode(c, "ab\xc3(", 4, &ids) && ids.n == 0, "invalid UTF-8 must be refused");
        tok_bpe_ctx_free(c);
        tok_bpe_free(t);
    }
}

/* A tokenizer.json over the 256 byte tokens, "aa" (256), "<eot>" (257), "<bos>" (258); the
 * fields given replace the defaults (NULL keeps them). */
static const char *tt_hf_json(const char *dir, const char *model_extra, const char *pre, const char *post,
                              const char *added, const char *top_extra) {
    static const char DEFAULT_ADDED[] =
        "[{\"id\": 257, \"content\": \"<eot>\", \"special\": true}, {\"id\": 258, \"content\": \"<bos>\"}]";
    static const char DEFAULT_POST[] =
        "{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<bos>\", \"type_id\": 0}}, "
        "{\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"special_tokens\": {\"<bos>\": {\"ids\": [258]}}}";
    static const char DEFAULT_PRE[] =
        "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": \"a+\"}, "
        "\"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", \"use_regex\": false}]}";
    static int k;
    char name[64];
    snprintf(name, sizeof name, "hf%d.json", k++);
    return tt_writef(dir, name, "{%s\"added_tokens\": %s, \"pre_tokenizer\": %s, "
                     "\"post_processor\": %s, \"model\": {\"type\": \"BPE\", %s\"vocab\": %s, \"merges\": [[\"a\", \"a\"]]}}",
                     top_extra ? top_extra : "", added ? added : DEFAULT_ADDED, pre ? pre : DEFAULT_PRE,
                     post ? post : DEFAULT_POST, model_extra ? model_extra : "", tt_byte_vocab_json("\"aa\": 256"));
}

static void tt_expect_hf_error(const char *file, const char *needle) {
    char err[1024] = "";
    tok_bpe *t = tok_hf_load(file, err, sizeof err);
    CHECK(!t && strstr(err, needle) && strstr(err, file), "loading %s: expected an error naming it and '%s', got %s",
             file, needle, t ? "success" : err);
    tok_bpe_free(t);
}

static void tt_hf_errors(const char *dir) {
    tt_expect_hf_error(tt_write(dir, "not.json", "vocab"), "expected a Hugging Face tokenizer.json");
    tt_expect_hf_error(tt_hf_json(dir, NULL, NULL, NULL, NULL, "\"normalizer\": {\"type\": \"NFC\"}, "), "normalizer is set");
    tt_expect_hf_error(tt_writef(dir, "wp.json", "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}"),
                       "model.type is WordPiece");
    tt_expect_hf_error(tt_hf_json(dir, "\"byte_fallback\": true, ", NULL, NULL, NULL, NULL), "model.byte_fallback is true");
    tt_expect_hf_error(tt_hf_json(dir, NULL, "{\"type\": \"Whitespace\"}", NULL, NULL, NULL), "pre_tokenizer must be");
    tt_expect_hf_error(tt_hf_json(dir, NULL, "{\"type\": \"ByteLevel\", \"add_prefix_space\": true}", NULL, NULL, NULL),
                       "pre_tokenizer.add_prefix_space is true");
    tt_expect_hf_error(tt_hf_json(dir, NULL, NULL, "{\"type\": \"BertProcessing\"}", NULL, NULL), "post_processor must be");
    tt_expect_hf_error(tt_hf_json(dir, NULL, NULL, NULL, "[{\"id\": 257, \"content\": \"<eot>\", \"lstrip\": true}, "
                                  "{\"id\": 258, \"content\": \"<bos>\"}]", NULL), "added_tokens[0].lstrip is true");
    tt_expect_hf_error(tt_hf_json(dir, NULL, NULL, NULL, "[{\"id\": 300, \"content\": \"<eot>\"}]", NULL),
                       "added_tokens lack id 257");
    tt_expect_hf_error(tt_hf_json(dir, NULL, "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
                                  "\"pattern\": {\"Regex\": \"[\\\\S]\"}, \"behavior\": \"Isolated\"}, "
                                  "{\"type\": \"ByteLevel\", \"use_regex\": false}]}", NULL, NULL, NULL), "\\S inside");

    /* The small one works: gaps between the Split's matches are pieces, "aa" merges, <eot> is
     * matched in the text, <bos> comes first, tokenizer_config.json's eos_token ends documents. */
    char sub[4096], err[1024];
    snprintf(sub, sizeof sub, "%s/hf_small", dir);
    mkdir(sub, 0755);
    const char *json = tt_hf_json(dir, NULL, NULL, NULL, NULL, NULL);
    char copy[4200];
    snprintf(copy, sizeof copy, "%s/tokenizer.json", sub);
    CHECK(rename(json, copy) == 0, "cannot move %s", json);
    tt_write(sub, "tokenizer_config.json", "{\"eos_token\": {\"content\": \"<eot>\"}}");
    tok_bpe *t = tok_hf_load(sub, err, sizeof err);
    CHECK(t, "small tokenizer.json: %s", err);
    if (t) {
        tok_bpe_ctx *c = tok_bpe_ctx_new(t);
        tt_template_bytes = 0;
        tt_check_case(t, c, "small tokenizer.json", "xaaay<eot>b", 11,
                      (const int32_t[]){258, 'x', 256, 'a', 'y', 257, 'b'}, 7);
        tt_template_bytes = -1;
        CHECK(tok_bpe_eod(t) == 257, "eod %d, want tokenizer_config.json's <eot> = 257", tok_bpe_eod(t));
        tok_bpe_ctx_free(c);
        tok_bpe_free(t);
    }
}

static int tt_mode_bpe_errors(char **argv) {
    tt_tiktoken_errors(argv[2]);
    tt_hf_errors(argv[2]);
    if (!failures) printf("OK: bad tiktoken files and tokenizer.json fields are refused with their messages\n");
    return failures ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc == 6 && strcmp(argv[1], "ids") == 0) return tt_mode_ids(argv);
    if (argc == 5 && strcmp(argv[1], "errors") == 0) return tt_mode_errors(argv);
    if (argc == 6 && strcmp(argv[1], "tiktoken") == 0) return tt_mode_tiktoken(argv);
    if (argc == 6 && strcmp(argv[1], "hf") == 0) return tt_mode_hf(argv);
    if (argc == 3 && strcmp(argv[1], "bpe_errors") == 0) return tt_mode_bpe_errors(argv);
    fprintf(stderr, "usage: tokenizer_test ids VOCAB MERGES CASES EXPECTED | errors VOCAB MERGES OUT_DIR |\n"
                    "  tiktoken RANKS PATTERN CASES EXPECTED | hf DIR EOD CASES EXPECTED | bpe_errors OUT_DIR\n");
    return 2;
}
