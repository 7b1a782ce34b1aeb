/* tokenizer_bpe.c — the byte-level BPE engine the GPT-2, tiktoken and tokenizer.json loaders
 * share: added tokens split out of the text, regex pre-tokenization (PCRE2), bytes -> byte
 * tokens, merges by rank (lowest first, leftmost among equals), decode back to bytes. */
#include "frontend/tokenizer_bpe_impl.h"
#include "common/os.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Unicode White_Space, which \s is in tiktoken's and Hugging Face's Rust regex and in GPT-2's
 * Python `regex`. PCRE2's \s (even with UCP) lacks U+0085 and JavaScript's adds U+FEFF, so
 * tok_bpe_compile spells \s out as this class. */
#define TOK_WS "\\t-\\r\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"

const char TOK_GPT2_PATTERN[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* Per-thread cache of encoded words: cleared when full, so memory stays bounded. */
enum { TOK_CACHE_SLOTS = 1 << 16, TOK_CACHE_MAX_WORD = 256, TOK_CACHE_MAX_IDS = 1 << 20 };

typedef struct {
    uint64_t hash;
    uint32_t key_off, key_len; /* key_len 0: empty slot (pre-tokens are never empty) */
    uint32_t ids_off, ids_len;
} tok_cache_slot;

/* A pair of adjacent symbols that can merge: symbols at pos and right, ids left_id, right_id. */
typedef struct {
    int32_t rank, pos, right, left_id, right_id, merged;
} tok_cand;

struct tok_bpe_ctx {
    const tok_bpe *t;
    pcre2_match_data *md;
    int32_t *sym, *next, *prev; /* BPE scratch: one pre-token's symbols, a linked list by position */
    size_t sym_cap;
    tok_cand *heap;             /* candidate merges, lowest (rank, pos) on top */
    size_t nheap, heap_cap;
    tok_cache_slot *slots;
    size_t nused;
    char *keys;                 /* cached pre-tokens back to back */
    size_t nkeys;
    tok_ids ids;                /* cached ids back to back */
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

static size_t tok_table_mask(size_t count) { /* a power of two above twice count, minus one */
    size_t slots = 2;
    while (slots < 2 * count + 2) slots <<= 1;
    return slots - 1;
}

/* ---- building ----------------------------------------------------------------------------- */

tok_bpe *tok_bpe_new(int32_t nvocab) {
    tok_bpe *t = calloc(1, sizeof *t);
    if (!t) abort();
    t->nvocab = nvocab;
    t->eod = -1;
    t->tok_start = calloc((size_t)nvocab + 1, sizeof *t->tok_start);
    t->tok_len = malloc(((size_t)nvocab + 1) * sizeof *t->tok_len);
    if (!t->tok_start || !t->tok_len) abort();
    for (int32_t i = 0; i < nvocab; i++) t->tok_len[i] = UINT32_MAX;
    return t;
}

bool tok_bpe_set_token(tok_bpe *t, int32_t id, const char *s, size_t n) {
    if (id < 0 || id >= t->nvocab || t->tok_len[id] != UINT32_MAX) return false;
    if (t->nbytes + n > t->capbytes) {
        while (t->nbytes + n > t->capbytes) t->capbytes = t->capbytes ? 2 * t->capbytes : 1 << 16;
        t->tok_bytes = realloc(t->tok_bytes, t->capbytes);
        if (!t->tok_bytes) abort();
    }
    memcpy(t->tok_bytes + t->nbytes, s, n);
    t->tok_start[id] = (uint32_t)t->nbytes;
    t->tok_len[id] = (uint32_t)n;
    t->nbytes += n;
    return true;
}

int32_t tok_bpe_first_unset(const tok_bpe *t) {
    for (int32_t i = 0; i < t->nvocab; i++)
        if (t->tok_len[i] == UINT32_MAX) return i;
    return -1;
}

void tok_bpe_set_eod(tok_bpe *t, int32_t id, const char *name) {
    t->eod = id;
    snprintf(t->eod_name, sizeof t->eod_name, "%s", name);
}

void tok_bpe_words_init(tok_bpe *t, size_t count) {
    t->word_mask = tok_table_mask(count);
    t->words = malloc((t->word_mask + 1) * sizeof *t->words);
    if (!t->words) abort();
    for (size_t i = 0; i <= t->word_mask; i++) t->words[i] = -1;
}

static int32_t *tok_word_slot(const tok_bpe *t, const char *s, size_t n) {
    for (size_t i = tok_hash_bytes(s, n) & t->word_mask;; i = (i + 1) & t->word_mask) {
        int32_t id = t->words[i];
        if (id < 0 || (t->tok_len[id] == n && memcmp(t->tok_bytes + t->tok_start[id], s, n) == 0)) return &t->words[i];
    }
}

bool tok_bpe_add_word(tok_bpe *t, int32_t id) {
    int32_t *slot = tok_word_slot(t, t->tok_bytes + t->tok_start[id], t->tok_len[id]);
    if (*slot >= 0) return false;
    *slot = id;
    return true;
}

int32_t tok_bpe_word(const tok_bpe *t, const char *s, size_t n) { return *tok_word_slot(t, s, n); }

int tok_bpe_find_bytes(tok_bpe *t) {
    for (int b = 0; b < 256; b++) {
        char ch = (char)b;
        t->byte_id[b] = tok_bpe_word(t, &ch, 1);
        if (t->byte_id[b] < 0) return b;
    }
    return -1;
}

void tok_bpe_merges_init(tok_bpe *t, size_t count) {
    t->merge_mask = tok_table_mask(count);
    t->merges = malloc((t->merge_mask + 1) * sizeof *t->merges);
    if (!t->merges) abort();
    for (size_t i = 0; i <= t->merge_mask; i++) t->merges[i].rank = -1;
}

static tok_merge *tok_merge_slot(const tok_bpe *t, int32_t left, int32_t right) {
    uint64_t pair = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    for (size_t i = tok_mix(pair) & t->merge_mask;; i = (i + 1) & t->merge_mask)
        if (t->merges[i].rank < 0 || t->merges[i].pair == pair) return &t->merges[i];
}

void tok_bpe_add_merge(tok_bpe *t, int32_t left, int32_t right, int32_t rank, int32_t merged) {
    *tok_merge_slot(t, left, right) = (tok_merge){(uint64_t)(uint32_t)left << 32 | (uint32_t)right, rank, merged};
}

void tok_bpe_add_added(tok_bpe *t, int32_t id) {
    t->added = realloc(t->added, (t->nadded + 1) * sizeof *t->added);
    if (!t->added) abort();
    size_t i = t->nadded++; /* insertion keeps them longest first: the longest match wins */
    for (; i > 0 && t->tok_len[t->added[i - 1]] < t->tok_len[id]; i--) t->added[i] = t->added[i - 1];
    t->added[i] = id;
    if (t->tok_len[id]) t->added_first_byte[(uint8_t)t->tok_bytes[t->tok_start[id]]] = true;
}

/* The pattern with \s as [TOK_WS] and \S as [^TOK_WS] (inside a class, \s as TOK_WS).
 * NULL when \S stands inside a class, which the spelled-out class cannot express. */
static char *tok_rewrite_ws(const char *p) {
    size_t n = strlen(p), cap = n * (sizeof TOK_WS + 3) + 1, k = 0;
    char *out = malloc(cap);
    if (!out) abort();
    bool in_class = false;
    for (size_t i = 0; i < n; i++) {
        const char *put = NULL;
        if (p[i] == '\\' && (p[i + 1] == 's' || p[i + 1] == 'S')) {
            if (in_class && p[i + 1] == 'S') {
                free(out);
                return NULL;
            }
            put = in_class ? TOK_WS : p[i + 1] == 's' ? "[" TOK_WS "]" : "[^" TOK_WS "]";
            i++;
        } else if (p[i] == '\\' && p[i + 1]) {
            out[k++] = p[i++];
        } else if (p[i] == '[' && !in_class) {
            in_class = true;
            out[k++] = p[i];
            if (p[i + 1] == '^') out[k++] = p[++i];
            if (p[i + 1] == ']') out[k++] = p[++i]; /* a ']' first in a class is literal */
            continue;
        } else if (p[i] == ']' && in_class) {
            in_class = false;
        }
        if (put) {
            memcpy(out + k, put, strlen(put));
            k += strlen(put);
        } else {
            out[k++] = p[i];
        }
    }
    out[k] = '\0';
    return out;
}

bool tok_bpe_compile(tok_bpe *t, const char *pattern, const char *what, char *err, size_t errlen) {
    char *spelled = tok_rewrite_ws(pattern);
    if (!spelled) {
        snprintf(err, errlen, "%s: \\S inside a [...] class is not supported; write the class without it", what);
        return false;
    }
    int code;
    PCRE2_SIZE at;
    t->re = pcre2_compile((PCRE2_SPTR)spelled, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code, &at, NULL);
    free(spelled);
    if (!t->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        snprintf(err, errlen, "%s: PCRE2 rejected the pre-tokenizer regex (with \\s spelled out) at offset %zu: %s; "
                 "PCRE2 needs Unicode support (libpcre2-8 10.x)", what, (size_t)at, (char *)msg);
        return false;
    }
    pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE); /* without JIT, pcre2_match interprets: slower, same result */
    return true;
}

/* ---- byte alphabet and files -------------------------------------------------------------- */

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 bytes to
 * U+0100.. in byte order, so every token is a printable string. */
void tok_byte_chars(uint32_t cp[256]) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
        cp[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
    }
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

/* The byte GPT-2's bytes_to_unicode spells as cp, or -1: the inverse of tok_byte_chars. The
 * unprintable bytes, in order, are 0x00-0x20, 0x7f-0xa0 and 0xad. */
static int tok_byte_of(uint32_t cp) {
    if (cp < 256) return (cp >= '!' && cp <= '~') || (cp >= 0xa1 && cp <= 0xac) || (cp >= 0xae && cp <= 0xff) ? (int)cp : -1;
    uint32_t k = cp - 256;
    return k < 33 ? (int)k : k < 67 ? (int)(0x7f + k - 33) : k == 67 ? 0xad : -1;
}

bool tok_byte_level_bytes(const char *s, char *out, size_t *n, uint32_t *bad) {
    *n = 0;
    for (size_t i = 0; s[i];) {
        uint32_t cp = tok_utf8_next(s, &i);
        int b = tok_byte_of(cp);
        if (b < 0) {
            *bad = cp;
            return false;
        }
        out[(*n)++] = (char)b;
    }
    return true;
}

char *tok_read_file(const char *flag, const char *path, size_t *n, char *err, size_t errlen) {
    char why[4200];
    char *text = os_read_file(path, n, why, sizeof why);
    if (!text) snprintf(err, errlen, "%s %s", flag, why);
    return text;
}

void tok_bpe_free(tok_bpe *t) {
    if (!t) return;
    pcre2_code_free(t->re);
    free(t->tok_start);
    free(t->tok_len);
    free(t->tok_bytes);
    free(t->merges);
    free(t->words);
    free(t->added);
    free(t);
}

int32_t tok_bpe_vocab_size(const tok_bpe *t) { return t->nvocab; }
int32_t tok_bpe_eod(const tok_bpe *t) { return t->eod; }
const char *tok_bpe_eod_name(const tok_bpe *t) { return t->eod_name; }

/* ---- encoding ----------------------------------------------------------------------------- */

tok_bpe_ctx *tok_bpe_ctx_new(const tok_bpe *t) {
    tok_bpe_ctx *c = calloc(1, sizeof *c);
    if (!c) abort();
    c->t = t;
    c->md = pcre2_match_data_create_from_pattern(t->re, NULL);
    c->slots = calloc(TOK_CACHE_SLOTS, sizeof *c->slots);
    c->keys = malloc((size_t)TOK_CACHE_SLOTS / 2 * TOK_CACHE_MAX_WORD);
    if (!c->md || !c->slots || !c->keys) abort();
    return c;
}

void tok_bpe_ctx_free(tok_bpe_ctx *c) {
    if (!c) return;
    pcre2_match_data_free(c->md);
    free(c->sym);
    free(c->next);
    free(c->prev);
    free(c->heap);
    free(c->slots);
    free(c->keys);
    tok_ids_free(&c->ids);
    free(c);
}

static tok_cache_slot *tok_cache_find(tok_bpe_ctx *c, uint64_t h, const char *s, size_t n) {
    for (size_t i = h & (TOK_CACHE_SLOTS - 1);; i = (i + 1) & (TOK_CACHE_SLOTS - 1)) {
        tok_cache_slot *e = &c->slots[i];
        if (!e->key_len || (e->hash == h && e->key_len == n && memcmp(c->keys + e->key_off, s, n) == 0)) return e;
    }
}

/* Remembers word s -> ids[0..nids). At half the slots (or too many ids) it starts over empty. */
static void tok_cache_put(tok_bpe_ctx *c, uint64_t h, const char *s, size_t n, const int32_t *ids, size_t nids) {
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

static bool tok_cand_less(const tok_cand *a, const tok_cand *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

/* Queues the merge of the symbol at pos with the next one, if the pair has a merge. */
static void tok_queue_pair(tok_bpe_ctx *c, int32_t pos) {
    int32_t right = c->next[pos];
    if (right < 0) return;
    const tok_merge *m = tok_merge_slot(c->t, c->sym[pos], c->sym[right]);
    if (m->rank < 0) return;
    if (c->nheap == c->heap_cap) {
        c->heap_cap = c->heap_cap ? 2 * c->heap_cap : 256;
        c->heap = realloc(c->heap, c->heap_cap * sizeof *c->heap);
        if (!c->heap) abort();
    }
    size_t i = c->nheap++;
    tok_cand x = {m->rank, pos, right, c->sym[pos], c->sym[right], m->merged};
    for (; i > 0 && tok_cand_less(&x, &c->heap[(i - 1) / 2]); i = (i - 1) / 2) c->heap[i] = c->heap[(i - 1) / 2];
    c->heap[i] = x;
}

static tok_cand tok_pop(tok_bpe_ctx *c) {
    tok_cand top = c->heap[0], last = c->heap[--c->nheap];
    size_t i = 0;
    for (size_t kid; (kid = 2 * i + 1) < c->nheap; i = kid) {
        if (kid + 1 < c->nheap && tok_cand_less(&c->heap[kid + 1], &c->heap[kid])) kid++;
        if (!tok_cand_less(&c->heap[kid], &last)) break;
        c->heap[i] = c->heap[kid];
    }
    c->heap[i] = last;
    return top;
}

/* BPE on sym[0..len): merges the adjacent pair of lowest rank, the leftmost among equals, until
 * no pair merges: tiktoken's byte_pair_merge and Hugging Face's BPE, and for a merges file in
 * training order (each merge after those making its sides, as GPT-2's) also encoder.py's bpe().
 * A heap of candidates keeps a 1 MB word O(n log n). Returns the symbols left, in sym. */
static size_t tok_bpe_merge(tok_bpe_ctx *c, size_t len) {
    for (size_t i = 0; i < len; i++) {
        c->next[i] = i + 1 < len ? (int32_t)i + 1 : -1;
        c->prev[i] = (int32_t)i - 1;
    }
    c->nheap = 0;
    for (size_t i = 0; i + 1 < len; i++) tok_queue_pair(c, (int32_t)i);
    while (c->nheap) {
        tok_cand x = tok_pop(c);
        /* Stale when either side has merged since: a merged symbol has another (longer) id. */
        if (c->sym[x.pos] != x.left_id || c->next[x.pos] != x.right || c->sym[x.right] != x.right_id) continue;
        c->sym[x.pos] = x.merged;
        c->sym[x.right] = -1;
        c->next[x.pos] = c->next[x.right];
        if (c->next[x.pos] >= 0) c->prev[c->next[x.pos]] = x.pos;
        if (c->prev[x.pos] >= 0) tok_queue_pair(c, c->prev[x.pos]);
        tok_queue_pair(c, x.pos);
    }
    size_t k = 0;
    for (int32_t p = 0; p >= 0; p = c->next[p]) c->sym[k++] = c->sym[p];
    return k;
}

/* One pre-token s[0..n) -> its ids, appended to out. */
static void tok_encode_piece(tok_bpe_ctx *c, const char *s, size_t n, tok_ids *out) {
    const tok_bpe *t = c->t;
    int32_t whole = t->whole_words ? tok_bpe_word(t, s, n) : -1;
    if (whole >= 0) {
        tok_ids_push(out, whole);
        return;
    }
    uint64_t h = tok_hash_bytes(s, n);
    const tok_cache_slot *e = tok_cache_find(c, h, s, n);
    if (e->key_len) {
        for (uint32_t i = 0; i < e->ids_len; i++) tok_ids_push(out, c->ids.v[e->ids_off + i]);
        return;
    }
    if (n > c->sym_cap) {
        c->sym_cap = 2 * n;
        c->sym = realloc(c->sym, c->sym_cap * sizeof *c->sym);
        c->next = realloc(c->next, c->sym_cap * sizeof *c->next);
        c->prev = realloc(c->prev, c->sym_cap * sizeof *c->prev);
        if (!c->sym || !c->next || !c->prev) abort();
    }
    for (size_t i = 0; i < n; i++) c->sym[i] = t->byte_id[(uint8_t)s[i]];
    size_t len = tok_bpe_merge(c, n);
    for (size_t i = 0; i < len; i++) tok_ids_push(out, c->sym[i]);
    tok_cache_put(c, h, s, n, c->sym, len);
}

/* Pre-tokenizes s[0..n) (no added tokens in it) and encodes each piece: the regex's matches,
 * and with keep_gaps the text between them. False: s is not UTF-8. */
static bool tok_encode_span(tok_bpe_ctx *c, const char *s, size_t n, tok_ids *out) {
    uint32_t opts = 0; /* the first match checks the whole span is UTF-8; later ones skip the check */
    for (PCRE2_SIZE off = 0, gap = 0;;) {
        int rc = off < n ? pcre2_match(c->t->re, (PCRE2_SPTR)s, n, off, opts, c->md, NULL) : PCRE2_ERROR_NOMATCH;
        opts = PCRE2_NO_UTF_CHECK;
        if (rc == PCRE2_ERROR_NOMATCH) {
            if (c->t->keep_gaps && gap < n) tok_encode_piece(c, s + gap, n - gap, out);
            return true;
        }
        if (rc < 0) return false; /* malformed UTF-8: the first match checked */
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
        if (ov[1] == ov[0]) { /* an empty match is no piece: search on from the next character */
            for (off = ov[0] + 1; off < n && ((uint8_t)s[off] & 0xc0) == 0x80;) off++;
            continue;
        }
        if (c->t->keep_gaps && ov[0] > gap) tok_encode_piece(c, s + gap, ov[0] - gap, out);
        tok_encode_piece(c, s + ov[0], ov[1] - ov[0], out);
        gap = off = ov[1];
    }
}

/* The added token (longest first) at text[i..n), or -1. */
static int32_t tok_added_at(const tok_bpe *t, const char *text, size_t i, size_t n) {
    if (!t->added_first_byte[(uint8_t)text[i]]) return -1;
    for (size_t k = 0; k < t->nadded; k++) {
        int32_t id = t->added[k];
        size_t len = t->tok_len[id];
        if (len && len <= n - i && memcmp(text + i, t->tok_bytes + t->tok_start[id], len) == 0) return id;
    }
    return -1;
}

bool tok_bpe_encode(tok_bpe_ctx *c, const char *text, size_t n, tok_ids *out) {
    const tok_bpe *t = c->t;
    size_t start = out->n, span = 0;
    for (int k = 0; k < t->nprefix; k++) tok_ids_push(out, t->prefix[k]);
    bool ok = true;
    for (size_t i = 0; ok && t->nadded && i < n; i++) {
        int32_t id = tok_added_at(t, text, i, n);
        if (id < 0) continue;
        ok = tok_encode_span(c, text + span, i - span, out);
        tok_ids_push(out, id);
        span = i + t->tok_len[id];
        i = span - 1;
    }
    ok = ok && tok_encode_span(c, text + span, n - span, out);
    for (int k = 0; ok && k < t->nsuffix; k++) tok_ids_push(out, t->suffix[k]);
    if (!ok) out->n = start;
    return ok;
}

char *tok_bpe_decode(const tok_bpe *t, const int32_t *ids, size_t n, size_t *len) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->nvocab) return NULL;
        total += t->tok_len[ids[i]];
    }
    char *out = malloc(total + 1);
    if (!out) abort();
    *len = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(out + *len, t->tok_bytes + t->tok_start[ids[i]], t->tok_len[ids[i]]);
        *len += t->tok_len[ids[i]];
    }
    out[total] = '\0';
    return out;
}
