/* tokenizer_bpe.h — byte-level BPE tokenizers with exact ids: GPT-2's (Megatron's
 * GPT2BPETokenizer), tiktoken's (Megatron's TikTokenizer, LLaMA 3's tokenizer.model) and a
 * Hugging Face BPE tokenizer.json (Megatron's HuggingFaceTokenizer). One engine: the loaders
 * differ, the pre-tokenizer regex, the merge loop and decoding are shared. */
#ifndef MCC_TOKENIZER_BPE_H
#define MCC_TOKENIZER_BPE_H

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

/* A loaded tokenizer: read-only after loading, shared by all threads. */
typedef struct tok_bpe tok_bpe;
/* One thread's encoder: regex match data, BPE scratch and a bounded cache of encoded words. */
typedef struct tok_bpe_ctx tok_bpe_ctx;

/* Loaders. Each returns NULL on error, with a message in err naming the file and flag, the line,
 * token or JSON field, and the fix. */

/* Megatron's --vocab-file (vocab.json / encoder.json: token -> id) and --merge-file (merges.txt /
 * vocab.bpe: a "#version" line, then one "left right" merge a line, by rank). */
tok_bpe *tok_gpt2_load(const char *vocab_file, const char *merge_file, char *err, size_t errlen);

/* Megatron's TikTokenizer from --tokenizer-model: tiktoken's file ("base64(token) rank" a line;
 * LLaMA 3's tokenizer.model) or Megatron's JSON list of {"rank", "token_bytes", "token_str"}.
 * pattern: "llama3" (LLaMA 3's and cl100k's pre-tokenizer) or Megatron's "v1" / "v2". As in
 * Megatron, ids 0..num_special-1 are <unk>, <s>, </s>, <SPECIAL_3>, ...; rank r is id
 * num_special + r; the vocabulary is vocab_size ids (the ranks beyond it are dropped) and the
 * end of document is </s> (id 2). */
tok_bpe *tok_tiktoken_load(const char *path, const char *pattern, int32_t num_special, int32_t vocab_size,
                           char *err, size_t errlen);
/* The patterns tok_tiktoken_load takes, for messages: "llama3, v1, v2". */
extern const char TOK_TIKTOKEN_PATTERN_NAMES[];

/* A Hugging Face tokenizer.json (path, or a directory holding one) whose model is BPE over
 * bytes: vocab and merges, a ByteLevel or Split(regex) + ByteLevel pre-tokenizer, added tokens
 * matched in the text, ignore_merges, a TemplateProcessing post-processor. End of document: the
 * eos_token of tokenizer_config.json beside it, else the added token <|end_of_text|>,
 * <|endoftext|> or </s>. */
tok_bpe *tok_hf_load(const char *path, char *err, size_t errlen);

void tok_bpe_free(tok_bpe *t);

/* Every id is below this (Megatron's tokenizer.vocab_size: 50257 for GPT-2). */
int32_t tok_bpe_vocab_size(const tok_bpe *t);
/* The end-of-document id --append-eod appends, or -1 when the tokenizer has none. */
int32_t tok_bpe_eod(const tok_bpe *t);
/* How the end of document is named, for messages ("<|endoftext|>", "</s>"). */
const char *tok_bpe_eod_name(const tok_bpe *t);

tok_bpe_ctx *tok_bpe_ctx_new(const tok_bpe *t);
void tok_bpe_ctx_free(tok_bpe_ctx *c);

/* Appends the ids of text[0..n) to out (special tokens as the loader said: GPT-2's and
 * TikTokenizer's "<|endoftext|>" is ordinary text, a tokenizer.json's added tokens are matched).
 * Returns false, appending nothing, when text is not valid UTF-8. */
bool tok_bpe_encode(tok_bpe_ctx *c, const char *text, size_t n, tok_ids *out);

/* The bytes of ids[0..n) concatenated, NUL-terminated, length in *len (malloc'd; free it).
 * Returns NULL when an id is outside the vocabulary. */
char *tok_bpe_decode(const tok_bpe *t, const int32_t *ids, size_t n, size_t *len);

#endif
