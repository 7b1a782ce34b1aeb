/* tokenizer_gpt2.c — GPT-2's BPE (OpenAI's encoder.py, Megatron's GPT2BPETokenizer) from
 * --vocab-file (token -> id, tokens spelled in the byte alphabet) and --merge-file (by rank). */
#include "frontend/tokenizer_bpe_impl.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int32_t tok_vocab_id(json_t *vocab, const char *token) {
    json_t *v = json_object_get(vocab, token);
    return v ? (int32_t)json_integer_value(v) : -1;
}

/* Checks ids are 0..n-1, each once, and stores each token's bytes (its characters mapped back
 * through bytes_to_unicode). */
static bool tok_load_tokens(tok_bpe *t, json_t *vocab, const char *path, char *err, size_t errlen) {
    char *bytes = malloc(1024);
    size_t cap = 1024;
    const char *key;
    json_t *val;
    bool ok = true;
    json_object_foreach(vocab, key, val) {
        json_int_t id = json_is_integer(val) ? json_integer_value(val) : -1;
        bool in_range = id >= 0 && id < t->nvocab;
        size_t n = strlen(key);
        if (n > cap) bytes = realloc(bytes, cap = n);
        if (!bytes) abort();
        uint32_t bad;
        if (!in_range || !tok_byte_level_bytes(key, bytes, &n, &bad) || !tok_bpe_set_token(t, (int32_t)id, bytes, n)) {
            if (!in_range || t->tok_len[id] != UINT32_MAX)
                snprintf(err, errlen, "--vocab-file %s: token \"%s\" has id %s; ids must be the integers 0..%d, "
                         "each once (a GPT-2 vocab.json / encoder.json)", path, key,
                         json_is_integer(val) ? (in_range ? "used twice" : "out of range") : "that is not an integer",
                         t->nvocab - 1);
            else
                snprintf(err, errlen, "--vocab-file %s: token \"%s\" has a character (U+%04X) outside GPT-2's "
                         "byte alphabet; a byte-level BPE vocab spells every byte as one printable character",
                         path, key, bad);
            ok = false;
            break;
        }
    }
    free(bytes);
    if (!ok) return false;
    tok_bpe_words_init(t, (size_t)t->nvocab);
    for (int32_t id = 0; id < t->nvocab; id++) tok_bpe_add_word(t, id); /* bytes_to_unicode is one-to-one */
    int b = tok_bpe_find_bytes(t);
    if (b >= 0) {
        uint32_t cp[256];
        tok_byte_chars(cp);
        char ch[3] = {(char)(cp[b] < 0x80 ? cp[b] : 0xc0 | cp[b] >> 6), (char)(cp[b] < 0x80 ? 0 : 0x80 | (cp[b] & 0x3f))};
        snprintf(err, errlen, "--vocab-file %s lacks the token \"%s\" for byte 0x%02x; a GPT-2 byte-level vocab has "
                 "one token for each of the 256 bytes", path, ch, b);
        return false;
    }
    return true;
}

/* One merge line "left right" of rank `rank`. A merge whose sides are not tokens can never apply
 * (BPE only ever holds tokens), so it is skipped; one whose result is not a token is an error. */
static bool tok_add_merge_line(tok_bpe *t, json_t *vocab, char *line, int32_t rank, const char *path, int lineno,
                               const char *vocab_path, char *err, size_t errlen) {
    char *save, *left = strtok_r(line, " \t", &save), *right = strtok_r(NULL, " \t", &save);
    if (!left || !right || strtok_r(NULL, " \t", &save)) {
        snprintf(err, errlen, "--merge-file %s line %d: expected two tokens separated by a space (\"Ġ t\"); "
                 "is this GPT-2's merges.txt / vocab.bpe?", path, lineno);
        return false;
    }
    int32_t l = tok_vocab_id(vocab, left), r = tok_vocab_id(vocab, right);
    if (l < 0 || r < 0) return true;
    size_t nl = strlen(left), nr = strlen(right);
    char *joined = malloc(nl + nr + 1);
    if (!joined) abort();
    memcpy(joined, left, nl);
    memcpy(joined + nl, right, nr + 1);
    int32_t merged = tok_vocab_id(vocab, joined);
    if (merged < 0)
        snprintf(err, errlen, "--merge-file %s line %d: merging \"%s\" and \"%s\" makes \"%s\", which --vocab-file %s "
                 "lacks; the two files must come from the same tokenizer", path, lineno, left, right, joined,
                 vocab_path);
    free(joined);
    if (merged < 0) return false;
    /* A repeated merge takes its last rank, as in encoder.py's dict(zip(merges, range(...))). */
    tok_bpe_add_merge(t, l, r, rank, merged);
    return true;
}

/* Like encoder.py, takes the lines between the "#version" header and the last newline. */
static bool tok_load_merges(tok_bpe *t, json_t *vocab, const char *path, const char *vocab_path, char *err,
                            size_t errlen) {
    size_t n;
    char *text = tok_read_file("--merge-file", path, &n, err, errlen);
    if (!text) return false;
    size_t nlines = 0;
    for (size_t i = 0; i < n; i++) nlines += text[i] == '\n';
    tok_bpe_merges_init(t, nlines);
    bool ok = strncmp(text, "#version", 8) == 0;
    if (!ok)
        snprintf(err, errlen, "--merge-file %s: line 1 is not the \"#version: ...\" header of GPT-2's merges.txt / "
                 "vocab.bpe; did you swap --vocab-file and --merge-file?", path);
    char *line = text;
    for (int lineno = 1; ok; lineno++) {
        char *nl = memchr(line, '\n', n - (size_t)(line - text));
        if (!nl) break;
        *nl = '\0';
        if (nl > line && nl[-1] == '\r') nl[-1] = '\0';
        if (lineno > 1) ok = tok_add_merge_line(t, vocab, line, lineno - 2, path, lineno, vocab_path, err, errlen);
        line = nl + 1;
    }
    free(text);
    return ok;
}

tok_bpe *tok_gpt2_load(const char *vocab_file, const char *merge_file, char *err, size_t errlen) {
    json_error_t je;
    json_t *vocab = json_load_file(vocab_file, 0, &je);
    if (!vocab || !json_is_object(vocab)) {
        if (vocab) snprintf(err, errlen, "--vocab-file %s: expected a JSON object of token -> id (GPT-2's "
                            "vocab.json / encoder.json)", vocab_file);
        else snprintf(err, errlen, "--vocab-file %s: %s (line %d); expected GPT-2's vocab.json / encoder.json",
                      vocab_file, je.text, je.line);
        json_decref(vocab);
        return NULL;
    }
    tok_bpe *t = tok_bpe_new((int32_t)json_object_size(vocab));
    bool ok = tok_load_tokens(t, vocab, vocab_file, err, errlen) &&
              tok_load_merges(t, vocab, merge_file, vocab_file, err, errlen) &&
              tok_bpe_compile(t, TOK_GPT2_PATTERN, "GPT-2's pre-tokenizer", err, errlen);
    if (tok_vocab_id(vocab, "<|endoftext|>") >= 0) tok_bpe_set_eod(t, tok_vocab_id(vocab, "<|endoftext|>"), "<|endoftext|>");
    json_decref(vocab);
    if (!ok) {
        tok_bpe_free(t);
        return NULL;
    }
    return t;
}
