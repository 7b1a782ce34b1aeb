/* tokenizer_tiktoken.c — Megatron's TikTokenizer (CustomTikTokenizer in
 * megatron/training/tokenizer/tokenizer.py) from --tokenizer-model: tiktoken's ranks, by
 * tiktoken's rule (merge the adjacent pair whose concatenation has the lowest rank; a piece that
 * is itself a token is that token), with Megatron's special tokens before the ranks. */
#include "frontend/tokenizer_bpe_impl.h"

#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The pre-tokenizers --tiktoken-pattern names: LLaMA 3's (cl100k_base's, as LLaMA 3's
 * tokenizer.py spells it), and Megatron's PATTERN_TIKTOKEN (v1) and PATTERN_TIKTOKEN_V2. */
static const struct {
    const char *name, *pattern;
} TOK_TIKTOKEN_PATTERNS[] = {
    {"llama3", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
               "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    {"v1", "[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"},
    {"v2", "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
           "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
           "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
};
const char TOK_TIKTOKEN_PATTERN_NAMES[] = "llama3, v1, v2";

/* Megatron's special tokens: these three first, then <SPECIAL_3>, ... up to num_special. */
static const char *const TOK_MEGATRON_SPECIALS[] = {"<unk>", "<s>", "</s>"};
enum { TOK_MEGATRON_EOD = 2 }; /* </s>: CustomTikTokenizer.eod */

/* Standard base64 (with '=' padding) of s[0..n) into out; the length, or -1 when malformed. */
static long tok_base64(const char *s, size_t n, char *out) {
    static const char ALPHABET[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if (n % 4) return -1;
    long k = 0;
    for (size_t i = 0; i < n; i += 4) {
        uint32_t v = 0;
        int pad = 0;
        for (int j = 0; j < 4; j++) {
            const char *at = s[i + j] && s[i + j] != '=' ? strchr(ALPHABET, s[i + j]) : NULL;
            if (s[i + j] == '=' && i + 4 == n && j >= 2) pad++;
            else if (!at || pad) return -1;
            v = v << 6 | (uint32_t)(at ? at - ALPHABET : 0);
        }
        for (int j = 0; j < 3 - pad; j++) out[k++] = (char)(v >> (16 - 8 * j));
    }
    return k;
}

/* tiktoken's file: "base64(token) rank" a line (load_tiktoken_bpe), in any order. The ranks go
 * into *ranks, a tokenizer of one id per line (the ranks must be 0..n-1, so none is above). */
static bool tok_read_tiktoken(char *text, const char *path, tok_bpe **ranks, char *err, size_t errlen) {
    int32_t nlines = 0; /* the lines that are not blank: one rank each */
    for (const char *c = text; *c;) {
        size_t len = strcspn(c, "\n");
        nlines += strspn(c, " \t\r\v\f") < len;
        c += len + (c[len] == '\n');
    }
    *ranks = tok_bpe_new(nlines);
    int lineno = 0;
    for (char *line = text, *end; *line; line = end) {
        end = line + strcspn(line, "\n");
        if (*end) *end++ = '\0';
        lineno++;
        char b64[512], extra;
        long rank;
        int fields = sscanf(line, "%511s %ld %c", b64, &rank, &extra);
        if (fields <= 0) continue; /* an empty line */
        char bytes[384];
        long n = fields == 2 ? tok_base64(b64, strlen(b64), bytes) : -1;
        if (n < 0 || rank < 0) {
            snprintf(err, errlen, "--tokenizer-model %s line %d: expected \"base64(token) rank\" with a rank from 0, "
                     "as in tiktoken's files (LLaMA 3's tokenizer.model), or Megatron's JSON list of ranks", path, lineno);
            return false;
        }
        if (!tok_bpe_set_token(*ranks, rank < nlines ? (int32_t)rank : nlines, bytes, (size_t)n)) {
            if (rank < nlines)
                snprintf(err, errlen, "--tokenizer-model %s line %d: rank %ld appears twice; each rank is one token",
                         path, lineno, rank);
            else
                snprintf(err, errlen, "--tokenizer-model %s line %d: rank %ld, but the file has %d lines; its ranks "
                         "must be 0..n-1, each once", path, lineno, rank, nlines);
            return false;
        }
    }
    return true;
}

/* Megatron's JSON (reload_mergeable_ranks): [{"rank": i, "token_bytes": base64, "token_str": s}, ...]
 * in rank order, the first 256 the single bytes 0..255. */
static bool tok_read_megatron_json(const char *text, const char *path, tok_bpe **ranks, char *err, size_t errlen) {
    json_error_t je;
    json_t *list = json_loads(text, JSON_ALLOW_NUL, &je); /* token_str may hold "\u0000" */
    bool ok = json_is_array(list);
    *ranks = tok_bpe_new((int32_t)json_array_size(list));
    if (!ok)
        snprintf(err, errlen, "--tokenizer-model %s: %s; expected Megatron's TikTokenizer JSON, a list of {\"rank\", "
                 "\"token_bytes\", \"token_str\"}", path, list ? "not a JSON list" : je.text);
    for (size_t i = 0; ok && i < json_array_size(list); i++) {
        json_t *e = json_array_get(list, i), *rank = json_object_get(e, "rank"), *b64 = json_object_get(e, "token_bytes");
        char bytes[384];
        long n = json_is_string(b64) && json_string_length(b64) < 512
                     ? tok_base64(json_string_value(b64), json_string_length(b64), bytes) : -1;
        ok = json_is_integer(rank) && json_integer_value(rank) == (json_int_t)i && n >= 0 &&
             (i >= 256 || (n == 1 && (uint8_t)bytes[0] == i));
        if (!ok)
            snprintf(err, errlen, "--tokenizer-model %s: entry %zu must be {\"rank\": %zu, \"token_bytes\": base64 of the "
                     "token%s, \"token_str\": ...}, as Megatron's reload_mergeable_ranks requires", path, i, i,
                     i < 256 ? " (the single byte of that value)" : "");
        else tok_bpe_set_token(*ranks, (int32_t)i, bytes, (size_t)n);
    }
    json_decref(list);
    return ok;
}

/* Ids num_special + rank for ranks below keep, each once; the specials below num_special. */
static bool tok_tiktoken_tokens(tok_bpe *t, const tok_bpe *r, int32_t num_special, int32_t keep, const char *path,
                                char *err, size_t errlen) {
    for (int32_t i = 0; i < num_special; i++) {
        char name[32];
        if (i < 3) snprintf(name, sizeof name, "%s", TOK_MEGATRON_SPECIALS[i]);
        else snprintf(name, sizeof name, "<SPECIAL_%d>", i);
        tok_bpe_set_token(t, i, name, strlen(name));
    }
    tok_bpe_words_init(t, (size_t)keep);
    for (int32_t rank = 0; rank < keep; rank++) {
        if (r->tok_len[rank] == UINT32_MAX) {
            snprintf(err, errlen, "--tokenizer-model %s has no rank %d; its ranks must be 0..%d, each once", path, rank,
                     r->nvocab - 1);
            return false;
        }
        const char *bytes = r->tok_bytes + r->tok_start[rank];
        tok_bpe_set_token(t, num_special + rank, bytes, r->tok_len[rank]);
        if (!tok_bpe_add_word(t, num_special + rank)) {
            int32_t first = tok_bpe_word(t, bytes, r->tok_len[rank]) - num_special;
            snprintf(err, errlen, "--tokenizer-model %s: ranks %d and %d are the same bytes; each token is one rank",
                     path, first, rank);
            return false;
        }
    }
    int b = tok_bpe_find_bytes(t);
    if (b >= 0)
        snprintf(err, errlen, "--tokenizer-model %s has no token for the byte 0x%02x; a byte-level BPE has one for each "
                 "of the 256 bytes", path, b);
    return b < 0;
}

/* tiktoken merges two tokens when their concatenation is a token, at that token's rank: every
 * split of a token into two tokens is a merge. */
static void tok_tiktoken_merges(tok_bpe *t, int32_t first, int32_t end) {
    tok_bpe_merges_init(t, t->nbytes);
    for (int32_t id = first; id < end; id++) {
        const char *s = t->tok_bytes + t->tok_start[id];
        for (uint32_t k = 1; k < t->tok_len[id]; k++) {
            int32_t l = tok_bpe_word(t, s, k), r = l < 0 ? -1 : tok_bpe_word(t, s + k, t->tok_len[id] - k);
            if (r >= 0) tok_bpe_add_merge(t, l, r, id, id);
        }
    }
}

/* The file's ranks as a tokenizer of one id per rank, in *ranks (also on failure: free it). */
static bool tok_read_ranks(const char *path, tok_bpe **ranks, char *err, size_t errlen) {
    size_t n;
    char *text = tok_read_file("--tokenizer-model", path, &n, err, errlen);
    if (!text) return false;
    size_t i = 0;
    while (isspace((unsigned char)text[i])) i++;
    bool ok = strlen(text) == n || text[i] == '['; /* a NUL byte can be no rank line */
    if (!ok) snprintf(err, errlen, "--tokenizer-model %s holds a NUL byte; expected tiktoken's ranks", path);
    ok = ok && (text[i] == '[' ? tok_read_megatron_json(text, path, ranks, err, errlen)
                               : tok_read_tiktoken(text, path, ranks, err, errlen));
    free(text);
    return ok;
}

tok_bpe *tok_tiktoken_load(const char *path, const char *pattern, int32_t num_special, int32_t vocab_size,
                           char *err, size_t errlen) {
    size_t p = 0, npatterns = sizeof TOK_TIKTOKEN_PATTERNS / sizeof *TOK_TIKTOKEN_PATTERNS;
    while (p < npatterns && strcmp(TOK_TIKTOKEN_PATTERNS[p].name, pattern) != 0) p++;
    if (p == npatterns) {
        snprintf(err, errlen, "--tiktoken-pattern %s: unknown; one of %s", pattern, TOK_TIKTOKEN_PATTERN_NAMES);
        return NULL;
    }
    tok_bpe *r = NULL;
    if (!tok_read_ranks(path, &r, err, errlen)) {
        tok_bpe_free(r);
        return NULL;
    }
    /* Megatron keeps the first vocab_size - num_special ranks and requires every id below
     * vocab_size to be a token. */
    if (vocab_size - num_special > r->nvocab) {
        snprintf(err, errlen, "--tokenizer-model %s has %d ranks; with %d special tokens the vocabulary can be at most "
                 "%d: pass --vocab-size %d (Megatron's TikTokenizer, which defaults to 131072, requires every id "
                 "below it to be a token)", path, r->nvocab, num_special, num_special + r->nvocab, num_special + r->nvocab);
        tok_bpe_free(r);
        return NULL;
    }
    tok_bpe *t = tok_bpe_new(vocab_size);
    bool ok = tok_tiktoken_tokens(t, r, num_special, vocab_size - num_special, path, err, errlen);
    tok_bpe_free(r);
    if (ok) tok_tiktoken_merges(t, num_special, vocab_size);
    char what[64];
    snprintf(what, sizeof what, "--tiktoken-pattern %s", pattern);
    ok = ok && tok_bpe_compile(t, TOK_TIKTOKEN_PATTERNS[p].pattern, what, err, errlen);
    t->whole_words = true;
    tok_bpe_set_eod(t, TOK_MEGATRON_EOD, TOK_MEGATRON_SPECIALS[TOK_MEGATRON_EOD]);
    if (!ok) {
        tok_bpe_free(t);
        return NULL;
    }
    return t;
}
