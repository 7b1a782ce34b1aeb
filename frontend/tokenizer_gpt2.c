/* tokenizer_gpt2.c — GPT-2's byte-level BPE (OpenAI's encoder.py, Megatron's GPT2BPETokenizer):
 * regex pre-tokenization (PCRE2), bytes -> byte tokens, merges by rank, decode back to bytes. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "frontend/tokenizer_gpt2.h"

#include <errno.h>
#include <jansson.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* GPT-2's pre-tokenizer. Its \s is Python `regex`'s: the Unicode White_Space property. PCRE2's
 * \s (even with UCP) lacks U+0085 and JavaScript's adds U+FEFF, so the class is spelled out. */
#define TOK_WS "\\t-\\r\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"
static const char TOK_PATTERN[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" TOK_WS "\\p{L}\\p{N}]+"
                                  "|[" TOK_WS "]+(?![^" TOK_WS "])|[" TOK_WS "]+";

/* GPT-2's bytes_to_unicode maps bytes to code points below this. */
enum { TOK_BYTE_CHARS = 256 + 68 };
/* Per-thread cache of encoded words: cleared when full, so memory stays bounded. */
enum { TOK_CACHE_SLOTS = 1 << 16, TOK_CACHE_MAX_WORD = 256, TOK_CACHE_MAX_IDS = 1 << 20 };

/* One merge rule: (left, right) -> merged, applied in rank order. rank < 0 marks an empty slot. */
typedef struct {
    uint64_t pair; /* left << 32 | right */
    int32_t rank, merged;
} tok_merge;

struct tok_gpt2 {
    int32_t nvocab, eod;
    int32_t byte_id[256]; /* the single-byte tokens BPE starts from */
    uint32_t *tok_off;    /* [nvocab + 1]: id i's bytes are tok_bytes[tok_off[i] .. tok_off[i+1]) */
    char *tok_bytes;
    tok_merge *merges;    /* open addressing, merge_mask + 1 slots */
    size_t merge_mask;
    pcre2_code *re;
};

typedef struct {
    uint64_t hash;
    uint32_t key_off, key_len; /* key_len 0: empty slot (pre-tokens are never empty) */
    uint32_t ids_off, ids_len;
} tok_cache_slot;

struct tok_gpt2_ctx {
    const tok_gpt2 *t;
    pcre2_match_data *md;
    int32_t *word; /* BPE scratch: the symbols of one pre-token */
    size_t word_cap;
    tok_cache_slot *slots;
    size_t nused;
    char *keys;    /* cached pre-tokens back to back */
    size_t nkeys;
    tok_ids ids;   /* cached ids back to back */
};

void tok_ids_push(tok_ids *ids, int32_t id) {
    if (ids->n == ids->cap) {
        ids->cap = ids->cap ? 2 * ids->cap : 256;
        ids->v = realloc(ids->v, ids->cap * sizeof *ids->v);
        if (!ids->v) abort();
    }
    ids->v[ids->n++] = id;
}

void tok_ids_free(tok_ids *ids) {
    free(ids->v);
    *ids = (tok_ids){0};
}

static uint64_t tok_mix(uint64_t x) { /* splitmix64's finalizer */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static uint64_t tok_hash_bytes(const char *s, size_t n) { /* FNV-1a */
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ULL;
    return h;
}

/* ---- byte alphabet ------------------------------------------------------------------------ */

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 bytes to
 * U+0100.. in byte order, so every token is a printable string. */
static void tok_byte_chars(uint32_t cp[256]) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
        cp[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
    }
}

static size_t tok_utf8_put(uint32_t cp, char *out) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    out[0] = (char)(0xc0 | cp >> 6); /* below TOK_BYTE_CHARS: two bytes suffice */
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
}

/* Next code point of valid UTF-8 (jansson validated it), advancing *i. */
static uint32_t tok_utf8_next(const char *s, size_t *i) {
    const uint8_t *u = (const uint8_t *)s + *i;
    int len = u[0] < 0x80 ? 1 : u[0] < 0xe0 ? 2 : u[0] < 0xf0 ? 3 : 4;
    uint32_t cp = len == 1 ? u[0] : (uint32_t)(u[0] & (0x7f >> len));
    for (int k = 1; k < len; k++) cp = cp << 6 | (u[k] & 0x3f);
    *i += (size_t)len;
    return cp;
}

/* ---- loading ------------------------------------------------------------------------------ */

static int32_t tok_vocab_id(json_t *vocab, const char *token) {
    json_t *v = json_object_get(vocab, token);
    return v ? (int32_t)json_integer_value(v) : -1;
}

/* Checks ids are 0..n-1, each once, and stores each token's bytes (its characters mapped back
 * through bytes_to_unicode). */
static bool tok_load_tokens(tok_gpt2 *t, json_t *vocab, const char *path, char *err, size_t errlen) {
    uint32_t cp_of[256];
    int byte_of[TOK_BYTE_CHARS];
    tok_byte_chars(cp_of);
    for (int ch = 0; ch < TOK_BYTE_CHARS; ch++) byte_of[ch] = -1;
    for (int b = 0; b < 256; b++) byte_of[cp_of[b]] = b;
    t->nvocab = (int32_t)json_object_size(vocab);
    uint32_t *len = calloc((size_t)t->nvocab + 1, sizeof *len);
    const char **key_of = calloc((size_t)t->nvocab, sizeof *key_of);
    t->tok_off = calloc((size_t)t->nvocab + 1, sizeof *t->tok_off);
    if (!len || !key_of || !t->tok_off) abort();
    const char *key;
    json_t *val;
    bool ok = true;
    json_object_foreach(vocab, key, val) {
        json_int_t id = json_is_integer(val) ? json_integer_value(val) : -1;
        if (id < 0 || id >= t->nvocab || key_of[id]) {
            snprintf(err, errlen, "--vocab-file %s: token \"%s\" has id %s; ids must be the integers 0..%d, "
                     "each once (a GPT-2 vocab.json / encoder.json)", path, key,
                     json_is_integer(val) ? (id < 0 || id >= t->nvocab ? "out of range" : "used twice")
                                          : "that is not an integer", t->nvocab - 1);
            ok = false;
            break;
        }
        key_of[id] = key;
        for (size_t i = 0, n = strlen(key); i < n; len[id]++) {
            uint32_t cp = tok_utf8_next(key, &i);
            if (cp >= TOK_BYTE_CHARS || byte_of[cp] < 0) {
                snprintf(err, errlen, "--vocab-file %s: token \"%s\" has a character (U+%04X) outside GPT-2's "
                         "byte alphabet; a byte-level BPE vocab spells every byte as one printable character",
                         path, key, cp);
                ok = false;
                break;
            }
        }
        if (!ok) break;
    }
    for (int32_t id = 0; ok && id < t->nvocab; id++) t->tok_off[id + 1] = t->tok_off[id] + len[id];
    t->tok_bytes = ok ? malloc((size_t)t->tok_off[t->nvocab] + 1) : NULL;
    for (int32_t id = 0; ok && id < t->nvocab; id++)
        for (size_t i = 0, k = t->tok_off[id]; key_of[id][i];) t->tok_bytes[k++] = (char)byte_of[tok_utf8_next(key_of[id], &i)];
    for (int b = 0; ok && b < 256; b++) {
        char ch[3] = {0};
        tok_utf8_put(cp_of[b], ch);
        t->byte_id[b] = tok_vocab_id(vocab, ch);
        if (t->byte_id[b] < 0) {
            snprintf(err, errlen, "--vocab-file %s lacks the token \"%s\" for byte 0x%02x; a GPT-2 byte-level "
                     "vocab has one token for each of the 256 bytes", path, ch, b);
            ok = false;
        }
    }
    free(len);
    free(key_of);
    return ok;
}

static tok_merge *tok_merge_slot(const tok_gpt2 *t, int32_t left, int32_t right) {
    uint64_t pair = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    for (size_t i = tok_mix(pair) & t->merge_mask;; i = (i + 1) & t->merge_mask)
        if (t->merges[i].rank < 0 || t->merges[i].pair == pair) return &t->merges[i];
}

static char *tok_read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 20;
    char *buf = malloc(cap + 1);
    *n = 0;
    for (size_t got; buf && (got = fread(buf + *n, 1, cap - *n, f)) > 0;) {
        *n += got;
        if (*n == cap) buf = realloc(buf, (cap *= 2) + 1);
    }
    if (!buf) abort();
    bool bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    buf[*n] = '\0';
    return buf;
}

/* One merge line "left right" of rank `rank`. A merge whose sides are not tokens can never apply
 * (BPE only ever holds tokens), so it is skipped; one whose result is not a token is an error. */
static bool tok_add_merge(tok_gpt2 *t, json_t *vocab, char *line, int32_t rank, const char *path, int lineno,
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
    *tok_merge_slot(t, l, r) = (tok_merge){(uint64_t)(uint32_t)l << 32 | (uint32_t)r, rank, merged};
    return true;
}

/* Like encoder.py, takes the lines between the "#version" header and the last newline. */
static bool tok_load_merges(tok_gpt2 *t, json_t *vocab, const char *path, const char *vocab_path, char *err,
                            size_t errlen) {
    size_t n;
    char *text = tok_read_file(path, &n);
    if (!text) {
        snprintf(err, errlen, "--merge-file %s: cannot read: %s", path, strerror(errno));
        return false;
    }
    size_t nlines = 0;
    for (size_t i = 0; i < n; i++) nlines += text[i] == '\n';
    t->merge_mask = 1;
    while (t->merge_mask < 2 * nlines + 2) t->merge_mask <<= 1;
    t->merges = malloc(t->merge_mask * sizeof *t->merges);
    if (!t->merges) abort();
    for (size_t i = 0; i < t->merge_mask; i++) t->merges[i].rank = -1;
    t->merge_mask--;
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
        if (lineno > 1) ok = tok_add_merge(t, vocab, line, lineno - 2, path, lineno, vocab_path, err, errlen);
        line = nl + 1;
    }
    free(text);
    return ok;
}

static bool tok_compile_regex(tok_gpt2 *t, char *err, size_t errlen) {
    int code;
    PCRE2_SIZE at;
    t->re = pcre2_compile((PCRE2_SPTR)TOK_PATTERN, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code, &at, NULL);
    if (!t->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        snprintf(err, errlen, "PCRE2 rejected GPT-2's pre-tokenizer regex at offset %zu: %s; PCRE2 needs Unicode "
                 "support (libpcre2-8 10.x)", (size_t)at, (char *)msg);
        return false;
    }
    pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE); /* without JIT, pcre2_match interprets: slower, same result */
    return true;
}

tok_gpt2 *tok_gpt2_load(const char *vocab_file, const char *merge_file, char *err, size_t errlen) {
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
    tok_gpt2 *t = calloc(1, sizeof *t);
    if (!t) abort();
    bool ok = tok_load_tokens(t, vocab, vocab_file, err, errlen) &&
              tok_load_merges(t, vocab, merge_file, vocab_file, err, errlen) && tok_compile_regex(t, err, errlen);
    t->eod = tok_vocab_id(vocab, "<|endoftext|>");
    json_decref(vocab);
    if (!ok) {
        tok_gpt2_free(t);
        return NULL;
    }
    return t;
}

void tok_gpt2_free(tok_gpt2 *t) {
    if (!t) return;
    pcre2_code_free(t->re);
    free(t->tok_off);
    free(t->tok_bytes);
    free(t->merges);
    free(t);
}

int32_t tok_gpt2_vocab_size(const tok_gpt2 *t) { return t->nvocab; }
int32_t tok_gpt2_eod(const tok_gpt2 *t) { return t->eod; }

/* ---- encoding ----------------------------------------------------------------------------- */

tok_gpt2_ctx *tok_gpt2_ctx_new(const tok_gpt2 *t) {
    tok_gpt2_ctx *c = calloc(1, sizeof *c);
    if (!c) abort();
    c->t = t;
    c->md = pcre2_match_data_create_from_pattern(t->re, NULL);
    c->slots = calloc(TOK_CACHE_SLOTS, sizeof *c->slots);
    c->keys = malloc((size_t)TOK_CACHE_SLOTS / 2 * TOK_CACHE_MAX_WORD);
    if (!c->md || !c->slots || !c->keys) abort();
    return c;
}

void tok_gpt2_ctx_free(tok_gpt2_ctx *c) {
    if (!c) return;
    pcre2_match_data_free(c->md);
    free(c->word);
    free(c->slots);
    free(c->keys);
    tok_ids_free(&c->ids);
    free(c);
}

static tok_cache_slot *tok_cache_find(tok_gpt2_ctx *c, uint64_t h, const char *s, size_t n) {
    for (size_t i = h & (TOK_CACHE_SLOTS - 1);; i = (i + 1) & (TOK_CACHE_SLOTS - 1)) {
        tok_cache_slot *e = &c->slots[i];
        if (!e->key_len || (e->hash == h && e->key_len == n && memcmp(c->keys + e->key_off, s, n) == 0)) return e;
    }
}

/* Remembers word s -> ids[0..nids). At half the slots (or too many ids) it starts over empty. */
static void tok_cache_put(tok_gpt2_ctx *c, uint64_t h, const char *s, size_t n, const int32_t *ids, size_t nids) {
    if (n > TOK_CACHE_MAX_WORD) return;
    if (c->nused == TOK_CACHE_SLOTS / 2 || c->ids.n + nids > TOK_CACHE_MAX_IDS) {
        memset(c->slots, 0, TOK_CACHE_SLOTS * sizeof *c->slots);
        c->nused = c->nkeys = c->ids.n = 0;
    }
    tok_cache_slot *e = tok_cache_find(c, h, s, n);
    *e = (tok_cache_slot){h, (uint32_t)c->nkeys, (uint32_t)n, (uint32_t)c->ids.n, (uint32_t)nids};
    memcpy(c->keys + c->nkeys, s, n);
    c->nkeys += n;
    for (size_t i = 0; i < nids; i++) tok_ids_push(&c->ids, ids[i]);
    c->nused++;
}

/* encoder.py's bpe(): while some adjacent pair has a merge, merge every occurrence (left to
 * right) of the lowest-ranked one. Works on ids: each symbol is a token of the vocab. */
static size_t tok_bpe_merge(const tok_gpt2 *t, int32_t *w, size_t len) {
    while (len > 1) {
        const tok_merge *best = NULL;
        for (size_t i = 0; i + 1 < len; i++) {
            const tok_merge *m = tok_merge_slot(t, w[i], w[i + 1]);
            if (m->rank >= 0 && (!best || m->rank < best->rank)) best = m;
        }
        if (!best) break;
        int32_t left = (int32_t)(best->pair >> 32), right = (int32_t)(uint32_t)best->pair;
        size_t k = 0;
        for (size_t i = 0; i < len; k++) {
            bool hit = w[i] == left && i + 1 < len && w[i + 1] == right;
            w[k] = hit ? best->merged : w[i];
            i += hit ? 2 : 1;
        }
        len = k;
    }
    return len;
}

/* One pre-token s[0..n) -> its ids, appended to out. */
static void tok_bpe(tok_gpt2_ctx *c, const char *s, size_t n, tok_ids *out) {
    uint64_t h = tok_hash_bytes(s, n);
    const tok_cache_slot *e = tok_cache_find(c, h, s, n);
    if (e->key_len) {
        for (uint32_t i = 0; i < e->ids_len; i++) tok_ids_push(out, c->ids.v[e->ids_off + i]);
        return;
    }
    if (n > c->word_cap) {
        c->word_cap = 2 * n;
        c->word = realloc(c->word, c->word_cap * sizeof *c->word);
        if (!c->word) abort();
    }
    for (size_t i = 0; i < n; i++) c->word[i] = c->t->byte_id[(uint8_t)s[i]];
    size_t len = tok_bpe_merge(c->t, c->word, n);
    for (size_t i = 0; i < len; i++) tok_ids_push(out, c->word[i]);
    tok_cache_put(c, h, s, n, c->word, len);
}

bool tok_gpt2_encode(tok_gpt2_ctx *c, const char *text, size_t n, tok_ids *out) {
    size_t start = out->n;
    uint32_t opts = 0; /* the first match checks the whole text is UTF-8; later ones skip the check */
    for (PCRE2_SIZE off = 0; off < n;) {
        int rc = pcre2_match(c->t->re, (PCRE2_SPTR)text, n, off, opts, c->md, NULL);
        /* Every code point matches one alternative; only malformed UTF-8 makes the match fail. */
        if (rc < 0) {
            out->n = start;
            return false;
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
        tok_bpe(c, text + ov[0], ov[1] - ov[0], out);
        off = ov[1];
        opts = PCRE2_NO_UTF_CHECK;
    }
    return true;
}

char *tok_gpt2_decode(const tok_gpt2 *t, const int32_t *ids, size_t n, size_t *len) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->nvocab) return NULL;
        total += t->tok_off[ids[i] + 1] - t->tok_off[ids[i]];
    }
    char *out = malloc(total + 1);
    if (!out) abort();
    *len = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t a = t->tok_off[ids[i]], b = t->tok_off[ids[i] + 1];
        memcpy(out + *len, t->tok_bytes + a, b - a);
        *len += b - a;
    }
    out[total] = '\0';
    return out;
}
