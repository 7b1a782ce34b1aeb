/* tokenizer_gpt2.h — GPT-2's byte-level BPE tokenizer (Megatron's GPT2BPETokenizer): exact ids. */
#ifndef MCC_TOKENIZER_GPT2_H
#define MCC_TOKENIZER_GPT2_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A growable array of token ids; zero-initialize, append, free. */
typedef struct {
    int32_t *v;
    size_t n, cap;
} tok_ids;

void tok_ids_push(tok_ids *ids, int32_t id);
void tok_ids_free(tok_ids *ids);

/* The loaded vocabulary and merges: read-only after tok_gpt2_load, shared by all threads. */
typedef struct tok_gpt2 tok_gpt2;
/* One thread's encoder: regex match data, BPE scratch and a bounded cache of encoded words. */
typedef struct tok_gpt2_ctx tok_gpt2_ctx;

/* Reads Megatron's --vocab-file (vocab.json / encoder.json: token -> id) and --merge-file
 * (merges.txt / vocab.bpe: a "#version" line, then one "left right" merge a line, by rank).
 * On error returns NULL with a message naming the file, line or token and the fix in err. */
tok_gpt2 *tok_gpt2_load(const char *vocab_file, const char *merge_file, char *err, size_t errlen);
void tok_gpt2_free(tok_gpt2 *t);

/* Entries of the vocab file (Megatron's tokenizer.vocab_size: 50257 for GPT-2). */
int32_t tok_gpt2_vocab_size(const tok_gpt2 *t);
/* vocab["<|endoftext|>"] (50256 for GPT-2), or -1 when the vocab has no such token. */
int32_t tok_gpt2_eod(const tok_gpt2 *t);

tok_gpt2_ctx *tok_gpt2_ctx_new(const tok_gpt2 *t);
void tok_gpt2_ctx_free(tok_gpt2_ctx *c);

/* Appends the ids of text[0..n) to out, exactly as GPT-2's encoder.py does ("<|endoftext|>" in
 * the text is ordinary text). Returns false, appending nothing, when text is not valid UTF-8. */
bool tok_gpt2_encode(tok_gpt2_ctx *c, const char *text, size_t n, tok_ids *out);

/* The bytes of ids[0..n) concatenated, NUL-terminated, length in *len (malloc'd; free it).
 * Returns NULL when an id is outside the vocabulary. */
char *tok_gpt2_decode(const tok_gpt2 *t, const int32_t *ids, size_t n, size_t *len);

#endif
