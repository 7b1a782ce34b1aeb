/* tokenizer_bpe_impl.h — the BPE engine's state and the helpers its loaders build it with
 * (tokenizer_gpt2.c, tokenizer_tiktoken.c, tokenizer_hf.c); not for other callers. */
#ifndef MCC_TOKENIZER_BPE_IMPL_H
#define MCC_TOKENIZER_BPE_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include "frontend/tokenizer_bpe.h"

#include <pcre2.h>

/* One merge rule: (left, right) -> merged; the lowest rank among adjacent pairs merges first.
 * rank < 0 marks an empty slot. */
typedef struct {
    uint64_t pair; /* left << 32 | right */
    int32_t rank, merged;
} tok_merge;

enum { TOK_MAX_TEMPLATE = 8 };

struct tok_bpe {
    int32_t nvocab, eod;
    char eod_name[64];
    int32_t byte_id[256];   /* the single-byte tokens BPE starts from */
    uint32_t *tok_start, *tok_len; /* [nvocab]: id i's bytes are tok_bytes[tok_start[i] ..][0 .. tok_len[i]) */
    char *tok_bytes;
    size_t nbytes, capbytes;
    tok_merge *merges;      /* open addressing, merge_mask + 1 slots */
    size_t merge_mask;
    int32_t *words;         /* open addressing (-1: empty) over the ids BPE produces, by their bytes */
    size_t word_mask;
    bool whole_words;       /* a pre-token that is itself a word is one id, unmerged (tiktoken; HF's ignore_merges) */
    bool keep_gaps;         /* text between regex matches is a pre-token too (HF's Split, Isolated) */
    pcre2_code *re;
    int32_t *added;         /* ids matched in the text before pre-tokenizing (HF's added_tokens), longest first */
    size_t nadded;
    bool added_first_byte[256];
    int32_t prefix[TOK_MAX_TEMPLATE], suffix[TOK_MAX_TEMPLATE]; /* ids around every document (HF's template) */
    int nprefix, nsuffix;
};

/* An empty tokenizer of nvocab ids, none set yet, no end of document. */
tok_bpe *tok_bpe_new(int32_t nvocab);
/* Sets id's bytes; false when the id is out of range or already set. */
bool tok_bpe_set_token(tok_bpe *t, int32_t id, const char *s, size_t n);
/* The first id without bytes, or -1 when every id has them. */
int32_t tok_bpe_first_unset(const tok_bpe *t);
void tok_bpe_set_eod(tok_bpe *t, int32_t id, const char *name);

/* Words: room for `count`, then add each id BPE can produce; add fails on bytes already there. */
void tok_bpe_words_init(tok_bpe *t, size_t count);
bool tok_bpe_add_word(tok_bpe *t, int32_t id);
/* The word with bytes s[0..n), or -1. */
int32_t tok_bpe_word(const tok_bpe *t, const char *s, size_t n);
/* Sets byte_id from the words; returns the first byte that is no word, or -1. */
int tok_bpe_find_bytes(tok_bpe *t);

/* Merges: room for `count`, then add each; a repeated pair keeps its last rank. */
void tok_bpe_merges_init(tok_bpe *t, size_t count);
void tok_bpe_add_merge(tok_bpe *t, int32_t left, int32_t right, int32_t rank, int32_t merged);

/* Compiles the pre-tokenizer regex with \s and \S as Unicode White_Space, as in tiktoken's Rust
 * regex, Hugging Face's and GPT-2's Python `regex`. what names it in the error. */
bool tok_bpe_compile(tok_bpe *t, const char *pattern, const char *what, char *err, size_t errlen);
/* The regex of GPT-2's encoder.py (and of Hugging Face's ByteLevel pre-tokenizer). */
extern const char TOK_GPT2_PATTERN[];

/* Adds an added token (HF): its id's bytes are matched in the text before the regex runs. */
void tok_bpe_add_added(tok_bpe *t, int32_t id);

/* GPT-2's bytes_to_unicode: the code point each byte is spelled with in a byte-level vocab. */
void tok_byte_chars(uint32_t cp[256]);
/* A byte-level token string (UTF-8) -> its bytes in out (room for strlen(s)), length in *n.
 * False when a character is outside the 256 byte characters; it is then in *bad. */
bool tok_byte_level_bytes(const char *s, char *out, size_t *n, uint32_t *bad);

/* The whole file, NUL-terminated (malloc'd), length in *n; NULL on failure, with a message in
 * err naming the flag that gave the path. */
char *tok_read_file(const char *flag, const char *path, size_t *n, char *err, size_t errlen);

#endif
