/* data_preprocess.c — `mcc data preprocess`: streams jsonl or plain text through a tokenizer
 * (GPT-2 BPE or byte-level) in --workers threads into PREFIX_KEY_document.bin/.idx, in input order. */
#include "frontend/data_preprocess.h"
#include "common/cli.h"
#include "common/os.h"
#include "frontend/indexed_builder.h"
#include "frontend/tokenizer_bpe.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#define DP_USAGE                                                                                   \
    "usage: mcc data preprocess --input FILE --output-prefix PREFIX [--json-keys KEY]\n"           \
    "         [--tokenizer-type GPT2BPETokenizer --vocab-file VOCAB.json --merge-file MERGES.txt]\n" \
    "         [--tokenizer-type TikTokenizer --tokenizer-model RANKS [--tiktoken-pattern llama3|v1|v2]\n" \
    "          [--tiktoken-num-special-tokens N] [--vocab-size N]]\n"                            \
    "         [--tokenizer-type HuggingFaceTokenizer --tokenizer-model tokenizer.json]\n"        \
    "         [--append-eod] [--workers N]\n"                                                      \
    "  FILE is jsonl (one {\"KEY\": \"...\"} object a line; KEY defaults to text) or plain text\n"    \
    "  (documents separated by blank lines), detected by its first non-space character being\n"     \
    "  '{'. Writes PREFIX_KEY_document.bin/.idx like Megatron's tools/preprocess_data.py.\n"        \
    "  --tokenizer-type ByteLevel (the default): ids 0..255 = bytes, end-of-document 256.\n"        \
    "  --tokenizer-type GPT2BPETokenizer: GPT-2's BPE from Megatron's --vocab-file/--merge-file;\n" \
    "    end of document <|endoftext|>.\n"                                                      \
    "  --tokenizer-type TikTokenizer: Megatron's, from tiktoken's ranks (LLaMA 3's tokenizer.model)\n" \
    "    or Megatron's JSON; pattern llama3 (default, LLaMA 3's) or Megatron's v1/v2. As Megatron,\n" \
    "    ids 0..N-1 are special (N = --tiktoken-num-special-tokens, default 1000: <unk> <s> </s>\n" \
    "    ...), rank r is id N+r, --vocab-size (default 131072) must not exceed N + the ranks, and\n" \
    "    --append-eod appends </s> = 2 (not LLaMA 3's <|end_of_text|>: HuggingFaceTokenizer has it).\n" \
    "  --tokenizer-type HuggingFaceTokenizer: a BPE tokenizer.json (or its directory) with its added\n" \
    "    tokens and template; end of document: tokenizer_config.json's eos_token beside it.\n"     \
    "  --workers N: tokenizing threads (default 1); the output is the same for every N.\n"

/* Input per chunk handed to a worker: large enough to amortize the hand-off, small enough that
 * 2 chunks per worker in flight bound the memory. */
enum { DP_CHUNK_BYTES = 1 << 16, DP_MAX_WORKERS = 1024 };

typedef struct {
    const char *input, *prefix, *json_key, *tokenizer_type, *vocab_file, *merge_file, *workers_arg;
    const char *tokenizer_model, *tiktoken_pattern, *num_special_arg, *vocab_size_arg;
    bool append_eod;
    int workers;
    int32_t num_special, vocab_size; /* TikTokenizer's */
} dp_options;

/* The tokenizers --tokenizer-type names; ORDER DP_TOK. */
typedef enum { DP_TOK_BYTE_LEVEL, DP_TOK_GPT2, DP_TOK_TIKTOKEN, DP_TOK_HF, DP_TOK_COUNT } dp_tok_kind;
static const char *const DP_TOKENIZERS[DP_TOK_COUNT] = {"ByteLevel", "GPT2BPETokenizer", "TikTokenizer",
                                                        "HuggingFaceTokenizer"};
/* Megatron's defaults: --tiktoken-num-special-tokens, and CustomTikTokenizer's vocab_size (2^17). */
enum { DP_TIKTOKEN_SPECIALS = 1000, DP_TIKTOKEN_VOCAB = 1 << 17, DP_MAX_VOCAB = 1 << 24 };

typedef struct {
    const char *name;  /* as --tokenizer-type spells it */
    tok_bpe *bpe;      /* NULL: ByteLevel */
    int32_t vocab_size, eod;
} dp_tokenizer;

typedef enum { DP_MODE_UNKNOWN, DP_MODE_JSONL, DP_MODE_TEXT } dp_mode;

/* One document's input: a jsonl line or a plain-text paragraph, and its token count once
 * tokenized. */
typedef struct {
    size_t off, len;   /* in the chunk's text */
    int64_t lineno;    /* its (first) input line, for messages */
    size_t ntok;
} dp_item;

/* A run of documents: filled by the reader, tokenized by one worker, written in order. */
typedef struct {
    char *text;
    size_t ntext, captext;
    dp_item *items;
    size_t nitems, capitems;
    int64_t nbytes_in;   /* input bytes it covers, for the MB/s */
    tok_ids ids;         /* the documents' tokens back to back (end-of-document included) */
    bool done, failed;   /* done: written by the worker under the pipeline's lock */
    char err[768];       /* failed: the first document's error */
} dp_chunk;

/* Chunks go round a ring: the reader fills slot submitted % nslots, workers take them in
 * order, the writer waits for slot written % nslots, so the output keeps the input order. */
typedef struct {
    const dp_options *opt;
    const dp_tokenizer *tok;
    dp_mode mode;        /* set by the reader before the first chunk is submitted */
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    dp_chunk *slots;
    size_t nslots;
    uint64_t submitted, taken;
    bool stop;
} dp_pipeline;

/* The main thread's reading and writing state. */
typedef struct {
    FILE *in;
    char *line;
    size_t cap;
    int64_t lineno, bytes_done; /* bytes_done: input bytes of the chunks written */
    bool in_doc, eof;    /* in_doc: plain text, inside a paragraph; eof: the input is all read */
    double t_start, t_last;
} dp_reader;

static bool dp_is_blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isspace((unsigned char)s[i])) return false;
    return true;
}

static void *dp_grow(void *p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return p;
    while (*cap < need) *cap = *cap ? 2 * *cap : 1024;
    p = realloc(p, *cap * elem);
    if (!p) abort();
    return p;
}

/* ---- arguments ---------------------------------------------------------------------------- */

static const struct {
    const char *flag;
    size_t field; /* offset of its const char * in dp_options */
    const char *example;
} DP_FLAGS[] = {
    {"--input", offsetof(dp_options, input), "corpus.jsonl"},
    {"--output-prefix", offsetof(dp_options, prefix), "data/corpus"},
    {"--json-keys", offsetof(dp_options, json_key), "text"},
    {"--tokenizer-type", offsetof(dp_options, tokenizer_type), "GPT2BPETokenizer"},
    {"--vocab-file", offsetof(dp_options, vocab_file), "gpt2-vocab.json"},
    {"--merge-file", offsetof(dp_options, merge_file), "gpt2-merges.txt"},
    {"--tokenizer-model", offsetof(dp_options, tokenizer_model), "tokenizer.json"},
    {"--tiktoken-pattern", offsetof(dp_options, tiktoken_pattern), "llama3"},
    {"--tiktoken-num-special-tokens", offsetof(dp_options, num_special_arg), "1000"},
    {"--vocab-size", offsetof(dp_options, vocab_size_arg), "129000"},
    {"--workers", offsetof(dp_options, workers_arg), "8"},
};

static bool dp_parse_flags(int argc, char **argv, dp_options *o, char *err, size_t errlen) {
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *eq = strchr(arg, '=');
        size_t nlen = (strncmp(arg, "--", 2) == 0 && eq) ? (size_t)(eq - arg) : strlen(arg);
        if (strcmp(arg, "--append-eod") == 0) {
            o->append_eod = true;
            continue;
        }
        size_t f = 0, nflags = sizeof DP_FLAGS / sizeof *DP_FLAGS;
        while (f < nflags && !(strlen(DP_FLAGS[f].flag) == nlen && strncmp(arg, DP_FLAGS[f].flag, nlen) == 0)) f++;
        if (f == nflags) {
            snprintf(err, errlen, "unknown argument '%s'; %s", arg,
                     strncmp(arg, "--", 2) == 0 ? "run `mcc data preprocess --help` for the flags"
                                                : "--json-keys takes one key per run");
            return false;
        }
        const char *val = eq && nlen < strlen(arg) ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!val || !*val || strncmp(val, "--", 2) == 0) {
            snprintf(err, errlen, "%s needs a value, e.g. %s %s", DP_FLAGS[f].flag, DP_FLAGS[f].flag,
                     DP_FLAGS[f].example);
            return false;
        }
        *(const char **)((char *)o + DP_FLAGS[f].field) = val;
    }
    return true;
}

static dp_tok_kind dp_tok_kind_of(const char *name) {
    int k = 0;
    while (k < DP_TOK_COUNT && strcmp(DP_TOKENIZERS[k], name) != 0) k++;
    return (dp_tok_kind)k;
}

/* The flag given that the tokenizer does not read, or NULL. */
static const char *dp_unread_flag(const dp_options *o, dp_tok_kind kind) {
    if (kind != DP_TOK_GPT2 && (o->vocab_file || o->merge_file)) return o->vocab_file ? "--vocab-file" : "--merge-file";
    if (kind != DP_TOK_TIKTOKEN && kind != DP_TOK_HF && o->tokenizer_model) return "--tokenizer-model";
    if (kind != DP_TOK_TIKTOKEN && o->tiktoken_pattern) return "--tiktoken-pattern";
    if (kind != DP_TOK_TIKTOKEN && o->num_special_arg) return "--tiktoken-num-special-tokens";
    if (kind != DP_TOK_TIKTOKEN && o->vocab_size_arg) return "--vocab-size";
    return NULL;
}

static bool dp_check_options(dp_options *o, char *err, size_t errlen) {
    dp_tok_kind kind = dp_tok_kind_of(o->tokenizer_type);
    const char *unread = kind == DP_TOK_COUNT ? NULL : dp_unread_flag(o, kind);
    if (!o->input) snprintf(err, errlen, "missing --input FILE (a jsonl or plain-text corpus)");
    else if (!o->prefix) snprintf(err, errlen, "missing --output-prefix PREFIX (writes PREFIX_%s_document.bin/.idx)",
                                  o->json_key);
    else if (kind == DP_TOK_COUNT)
        snprintf(err, errlen, "unknown --tokenizer-type %s; mcc supports ByteLevel, GPT2BPETokenizer, TikTokenizer and "
                 "HuggingFaceTokenizer", o->tokenizer_type);
    else if (kind == DP_TOK_GPT2 && (!o->vocab_file || !o->merge_file))
        snprintf(err, errlen, "--tokenizer-type GPT2BPETokenizer needs --vocab-file (vocab.json / encoder.json) and "
                 "--merge-file (merges.txt / vocab.bpe)");
    else if ((kind == DP_TOK_TIKTOKEN || kind == DP_TOK_HF) && !o->tokenizer_model)
        snprintf(err, errlen, "--tokenizer-type %s needs --tokenizer-model %s", o->tokenizer_type,
                 kind == DP_TOK_HF ? "(a tokenizer.json, or the directory holding it)"
                                   : "(tiktoken's ranks, as LLaMA 3's tokenizer.model, or Megatron's JSON of them)");
    else if (unread)
        snprintf(err, errlen, "%s is not read by --tokenizer-type %s (this run's tokenizer); drop it or change the type",
                 unread, o->tokenizer_type);
    else
        return true;
    return false;
}

/* TikTokenizer's numbers: Megatron's at least 3 special tokens (<unk> <s> </s>), then ranks. */
static bool dp_check_tiktoken(dp_options *o, char *err, size_t errlen) {
    long long specials = DP_TIKTOKEN_SPECIALS, vocab = DP_TIKTOKEN_VOCAB;
    if (o->num_special_arg &&
        !cli_parse_int("--tiktoken-num-special-tokens", o->num_special_arg, 3, DP_MAX_VOCAB - 1, &specials, err, errlen))
        return false;
    if (o->vocab_size_arg && !cli_parse_int("--vocab-size", o->vocab_size_arg, specials + 1, DP_MAX_VOCAB, &vocab, err,
                                            errlen))
        return false;
    if (vocab <= specials) {
        snprintf(err, errlen, "--tiktoken-num-special-tokens %lld leaves no ids for ranks below --vocab-size %lld",
                 specials, vocab);
        return false;
    }
    o->num_special = (int32_t)specials;
    o->vocab_size = (int32_t)vocab;
    return true;
}

/* --workers N: tokenizing threads, 1 when not given. */
static bool dp_check_workers(dp_options *o, char *err, size_t errlen) {
    long long workers = 1;
    if (o->workers_arg && !cli_parse_int("--workers", o->workers_arg, 1, DP_MAX_WORKERS, &workers, err, errlen))
        return false;
    o->workers = (int)workers;
    return true;
}

static bool dp_parse_args(int argc, char **argv, dp_options *o, char *err, size_t errlen) {
    *o = (dp_options){.json_key = "text", .tokenizer_type = "ByteLevel"};
    return dp_parse_flags(argc, argv, o, err, errlen) && dp_check_options(o, err, errlen) &&
           dp_check_tiktoken(o, err, errlen) && dp_check_workers(o, err, errlen);
}

static bool dp_tokenizer_open(const dp_options *o, dp_tokenizer *t, char *err, size_t errlen) {
    *t = (dp_tokenizer){.name = o->tokenizer_type, .vocab_size = MCC_DATA_VOCAB_SIZE, .eod = MCC_DATA_EOD_TOKEN};
    switch (dp_tok_kind_of(o->tokenizer_type)) {
    case DP_TOK_GPT2: t->bpe = tok_gpt2_load(o->vocab_file, o->merge_file, err, errlen); break;
    case DP_TOK_TIKTOKEN:
        t->bpe = tok_tiktoken_load(o->tokenizer_model, o->tiktoken_pattern ? o->tiktoken_pattern : "llama3",
                                   o->num_special, o->vocab_size, err, errlen);
        break;
    case DP_TOK_HF: t->bpe = tok_hf_load(o->tokenizer_model, err, errlen); break;
    default: return true; /* ByteLevel */
    }
    if (!t->bpe) return false;
    t->vocab_size = tok_bpe_vocab_size(t->bpe);
    t->eod = tok_bpe_eod(t->bpe);
    if (o->append_eod && t->eod < 0) {
        if (o->vocab_file)
            snprintf(err, errlen, "--append-eod: --vocab-file %s has no \"<|endoftext|>\" token to end documents with",
                     o->vocab_file);
        else
            snprintf(err, errlen, "--append-eod: --tokenizer-model %s names no end of document: no eos_token in the "
                     "tokenizer_config.json beside it, and no <|end_of_text|>, <|endoftext|> or </s> token",
                     o->tokenizer_model);
        tok_bpe_free(t->bpe);
        return false;
    }
    return true;
}

/* ---- workers: documents -> tokens --------------------------------------------------------- */

/* One jsonl line -> the UTF-8 bytes of the string at --json-keys. */
static bool dp_json_text(const dp_pipeline *p, const char *line, const dp_item *it, json_t **obj,
                         const char **text, size_t *len, char *err, size_t errlen) {
    const char *key = p->opt->json_key, *input = p->opt->input;
    json_error_t je;
    *obj = json_loadb(line, it->len, JSON_ALLOW_NUL, &je);
    json_t *val = json_is_object(*obj) ? json_object_get(*obj, key) : NULL;
    if (!*obj)
        snprintf(err, errlen, "--input %s line %" PRId64 ": bad JSON (%s, column %d); each line must be one "
                 "object like {\"%s\": \"...\"} (the file was read as jsonl because it starts with '{')",
                 input, it->lineno, je.text, je.column, key);
    else if (!json_is_object(*obj))
        snprintf(err, errlen, "--input %s line %" PRId64 ": expected a JSON object like {\"%s\": \"...\"}", input,
                 it->lineno, key);
    else if (!val)
        snprintf(err, errlen, "--input %s line %" PRId64 ": missing key \"%s\"; set --json-keys to the key that "
                 "holds the document text", input, it->lineno, key);
    else if (!json_is_string(val))
        snprintf(err, errlen, "--input %s line %" PRId64 ": \"%s\" is not a string; each document's text must "
                 "be one JSON string", input, it->lineno, key);
    *text = json_string_value(val);
    *len = json_string_length(val);
    return *text != NULL;
}

/* Appends the tokens of one document (and its end-of-document token) to out. Like Megatron's
 * Encoder.encode, an empty document gets no end-of-document token. */
static bool dp_tokenize_item(const dp_pipeline *p, tok_bpe_ctx *ctx, const dp_chunk *ch, const dp_item *it,
                             tok_ids *out, char *err, size_t errlen) {
    const char *text = ch->text + it->off;
    size_t len = it->len, start = out->n;
    json_t *obj = NULL;
    bool ok = p->mode == DP_MODE_TEXT || dp_json_text(p, text, it, &obj, &text, &len, err, errlen);
    if (ok && ctx) {
        ok = tok_bpe_encode(ctx, text, len, out);
        if (!ok) /* jansson only yields valid UTF-8, so this is plain text */
            snprintf(err, errlen, "--input %s line %" PRId64 ": the paragraph starting here is not valid UTF-8; "
                     "%s reads UTF-8 text (ByteLevel takes any bytes)", p->opt->input, it->lineno, p->tok->name);
    } else if (ok) {
        for (size_t i = 0; i < len; i++) tok_ids_push(out, (uint8_t)text[i]);
    }
    if (ok && out->n > start && p->opt->append_eod) tok_ids_push(out, p->tok->eod);
    json_decref(obj);
    return ok;
}

static void dp_tokenize_chunk(const dp_pipeline *p, tok_bpe_ctx *ctx, dp_chunk *ch) {
    ch->ids.n = 0;
    for (size_t i = 0; i < ch->nitems && !ch->failed; i++) {
        size_t before = ch->ids.n;
        ch->failed = !dp_tokenize_item(p, ctx, ch, &ch->items[i], &ch->ids, ch->err, sizeof ch->err);
        ch->items[i].ntok = ch->ids.n - before;
    }
}

static void *dp_worker(void *arg) {
    dp_pipeline *p = arg;
    tok_bpe_ctx *ctx = p->tok->bpe ? tok_bpe_ctx_new(p->tok->bpe) : NULL;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->taken == p->submitted) pthread_cond_wait(&p->work, &p->mu);
        if (p->stop) break;
        dp_chunk *ch = &p->slots[p->taken++ % p->nslots];
        pthread_mutex_unlock(&p->mu);
        dp_tokenize_chunk(p, ctx, ch);
        pthread_mutex_lock(&p->mu);
        ch->done = true;
        pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    tok_bpe_ctx_free(ctx);
    return NULL;
}

/* ---- reader: input lines -> documents of a chunk ------------------------------------------ */

static dp_item *dp_new_item(dp_chunk *ch, int64_t lineno) {
    ch->items = dp_grow(ch->items, &ch->capitems, ch->nitems + 1, sizeof *ch->items);
    dp_item *it = &ch->items[ch->nitems++];
    *it = (dp_item){.off = ch->ntext, .lineno = lineno};
    return it;
}

static void dp_append_text(dp_chunk *ch, dp_item *it, const char *s, size_t n) {
    ch->text = dp_grow(ch->text, &ch->captext, ch->ntext + n, 1);
    memcpy(ch->text + ch->ntext, s, n);
    ch->ntext += n;
    it->len += n;
}

/* jsonl: each non-blank line is a document. Plain text: paragraphs (runs of non-blank lines,
 * joined by '\n') are documents. */
static void dp_add_line(dp_pipeline *p, dp_reader *r, dp_chunk *ch, const char *line, size_t len) {
    bool blank = dp_is_blank(line, len);
    if (p->mode == DP_MODE_UNKNOWN && !blank) {
        size_t i = 0;
        while (isspace((unsigned char)line[i])) i++;
        p->mode = line[i] == '{' ? DP_MODE_JSONL : DP_MODE_TEXT;
    }
    if (blank) {
        r->in_doc = false;
        return;
    }
    if (p->mode == DP_MODE_JSONL) {
        dp_append_text(ch, dp_new_item(ch, r->lineno), line, len);
        return;
    }
    dp_item *it = r->in_doc ? &ch->items[ch->nitems - 1] : dp_new_item(ch, r->lineno);
    if (r->in_doc) dp_append_text(ch, it, "\n", 1);
    dp_append_text(ch, it, line, len);
    r->in_doc = true;
}

/* Reads whole documents into ch until it holds DP_CHUNK_BYTES or the input ends. Memory is
 * bounded by the chunk size plus the longest document. */
static bool dp_fill_chunk(dp_pipeline *p, dp_reader *r, dp_chunk *ch, char *err, size_t errlen) {
    ch->ntext = ch->nitems = 0;
    ch->nbytes_in = 0;
    ch->done = ch->failed = false;
    while (r->in_doc || ch->ntext < DP_CHUNK_BYTES) {
        ssize_t n = getline(&r->line, &r->cap, r->in);
        if (n < 0) {
            r->eof = true;
            r->in_doc = false;
            break;
        }
        r->lineno++;
        ch->nbytes_in += n;
        size_t len = (size_t)n;
        if (len && r->line[len - 1] == '\n') len--;
        dp_add_line(p, r, ch, r->line, len);
    }
    if (ferror(r->in)) {
        snprintf(err, errlen, "--input %s: read error after line %" PRId64 ": %s", p->opt->input, r->lineno,
                 strerror(errno));
        return false;
    }
    return true;
}

/* ---- writer ------------------------------------------------------------------------------- */

static void dp_progress(const dp_reader *r, const ib_builder *b, const dp_options *o, const dp_tokenizer *t,
                        bool final) {
    double now = os_now_s(), mb = r->bytes_done / 1e6, secs = now - r->t_start;
    if (final)
        fprintf(stderr, "mcc data preprocess: wrote %s, %s: %" PRId64 " documents, %" PRId64 " tokens (%s, vocab %d, "
                "%s), %.1f MB read in %.1f s (%.1f MB/s, %d workers)\n", ib_bin_path(b), ib_idx_path(b),
                ib_num_documents(b), ib_num_tokens(b), t->name, t->vocab_size, ib_dtype_name(b), mb, secs,
                secs > 0 ? mb / secs : 0.0, o->workers);
    else
        fprintf(stderr, "mcc data preprocess: %" PRId64 " documents, %.1f MB, %.1f MB/s\n", ib_num_documents(b), mb,
                secs > 0 ? mb / secs : 0.0);
}

/* Waits for the chunk's worker, then appends its documents to the dataset. */
static bool dp_write_chunk(dp_pipeline *p, dp_chunk *ch, dp_reader *r, ib_builder *b, char *err, size_t errlen) {
    pthread_mutex_lock(&p->mu);
    while (!ch->done) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
    if (ch->failed) {
        snprintf(err, errlen, "%s", ch->err);
        return false;
    }
    const int32_t *ids = ch->ids.v;
    for (size_t i = 0; i < ch->nitems; ids += ch->items[i++].ntok)
        if (!ib_add_document(b, ids, ch->items[i].ntok, err, errlen)) return false;
    r->bytes_done += ch->nbytes_in;
    double now = os_now_s();
    if (now - r->t_last >= 1.0) {
        r->t_last = now;
        dp_progress(r, b, p->opt, p->tok, false);
    }
    return true;
}

/* The main thread reads chunks ahead while workers tokenize, and writes each when done. */
static bool dp_stream(dp_pipeline *p, dp_reader *r, ib_builder *b, char *err, size_t errlen) {
    uint64_t written = 0;
    bool ok = true;
    while (ok) {
        if (r->eof || p->submitted - written == p->nslots) {
            if (written == p->submitted) break;
            ok = dp_write_chunk(p, &p->slots[written++ % p->nslots], r, b, err, errlen);
            continue;
        }
        dp_chunk *ch = &p->slots[p->submitted % p->nslots];
        ok = dp_fill_chunk(p, r, ch, err, errlen);
        if (ok && ch->nitems) {
            pthread_mutex_lock(&p->mu);
            p->submitted++;
            pthread_cond_signal(&p->work);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return ok;
}

/* Starts the workers, streams the input through them, stops them. */
static bool dp_run_workers(const dp_options *o, const dp_tokenizer *t, dp_reader *r, ib_builder *b, char *err,
                           size_t errlen) {
    dp_pipeline p = {.opt = o, .tok = t, .nslots = 2 * (size_t)o->workers};
    p.slots = calloc(p.nslots, sizeof *p.slots);
    pthread_t *threads = calloc((size_t)o->workers, sizeof *threads);
    if (!p.slots || !threads) abort();
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.work, NULL);
    pthread_cond_init(&p.done, NULL);
    json_object_seed(0); /* jansson seeds its hash once; do it before threads parse JSON */
    int started = 0;
    while (started < o->workers && pthread_create(&threads[started], NULL, dp_worker, &p) == 0) started++;
    bool ok = started == o->workers;
    if (!ok) snprintf(err, errlen, "--workers %d: could only start %d threads; use fewer workers", o->workers, started);
    ok = ok && dp_stream(&p, r, b, err, errlen);
    pthread_mutex_lock(&p.mu);
    p.stop = true;
    pthread_cond_broadcast(&p.work);
    pthread_mutex_unlock(&p.mu);
    for (int i = 0; i < started; i++) pthread_join(threads[i], NULL);
    for (size_t i = 0; i < p.nslots; i++) {
        free(p.slots[i].text);
        free(p.slots[i].items);
        tok_ids_free(&p.slots[i].ids);
    }
    free(p.slots);
    free(threads);
    pthread_mutex_destroy(&p.mu);
    pthread_cond_destroy(&p.work);
    pthread_cond_destroy(&p.done);
    return ok;
}

/* ---- command ------------------------------------------------------------------------------ */

/* Megatron's output name: {output_prefix}_{json_key}_document. */
static char *dp_output_name(const dp_options *o) {
    size_t n = strlen(o->prefix) + strlen(o->json_key) + sizeof "__document";
    char *s = malloc(n);
    if (!s) abort();
    snprintf(s, n, "%s_%s_document", o->prefix, o->json_key);
    return s;
}

static bool dp_run(const dp_options *o, char *err, size_t errlen) {
    dp_reader r = {.in = fopen(o->input, "rb"), .t_start = os_now_s()};
    if (!r.in) {
        snprintf(err, errlen, "--input %s: cannot open: %s", o->input, strerror(errno));
        return false;
    }
    r.t_last = r.t_start;
    dp_tokenizer t;
    char *name = dp_output_name(o);
    bool ok = dp_tokenizer_open(o, &t, err, errlen);
    ib_builder *b = ok ? ib_open(name, t.vocab_size, err, errlen) : NULL;
    ok = b && dp_run_workers(o, &t, &r, b, err, errlen);
    if (ok && ib_num_tokens(b) == 0) {
        snprintf(err, errlen, "--input %s: no text in its %" PRId64 " documents; empty output, nothing written",
                 o->input, ib_num_documents(b));
        ok = false;
    }
    ok = ok && ib_finish(b, err, errlen);
    if (ok) dp_progress(&r, b, o, &t, true);
    ib_close(b, !ok);
    tok_bpe_free(t.bpe);
    free(name);
    free(r.line);
    fclose(r.in);
    return ok;
}

int mcc_data_preprocess_main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(DP_USAGE, stdout);
            return 0;
        }
    }
    char err[1024];
    dp_options o;
    if (!dp_parse_args(argc, argv, &o, err, sizeof err) || !dp_run(&o, err, sizeof err)) {
        fprintf(stderr, "mcc data preprocess: error: %s\n", err);
        return 1;
    }
    return 0;
}
