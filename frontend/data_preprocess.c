/* data_preprocess.c — `mcc data preprocess`: streams jsonl or plain text through the byte-level
 * tokenizer into PREFIX.bin + PREFIX.idx, a Megatron indexed dataset (MMIDIDX, uint16 tokens). */
#include "frontend/data_preprocess.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define DP_USAGE                                                                                \
    "usage: mcc data preprocess --input FILE --output-prefix PREFIX [--append-eod] "            \
    "[--json-keys KEY]\n"                                                                       \
    "  FILE is jsonl (one {\"KEY\": \"...\"} object a line; KEY defaults to text) or plain text\n" \
    "  (documents separated by blank lines), detected by its first non-space character being\n"  \
    "  '{'. Writes PREFIX.bin and PREFIX.idx: byte-level tokens 0..255, end-of-document 256.\n"

/* .idx layout (little-endian, no padding):
 *   magic[9] "MMIDIDX\0\0" | u64 version=1 | u8 dtype code | u64 S | u64 D |
 *   i32 lengths[S] | i64 byte_pointers[S] | i64 doc_idx[D]                                   */
static const char DP_MAGIC[9] = "MMIDIDX\0\0";
enum { DP_DTYPE_UINT16 = 8, DP_TOKEN_BYTES = 2 }; /* Megatron's code for numpy.uint16: vocab < 65500 */

typedef struct {
    const char *input, *prefix, *json_key;
    bool append_eod;
} dp_options;

/* The dataset being written. Tokens stream to .bin; the per-document lengths stay in memory
 * (4 bytes a document) because the .idx begins with the counts. */
typedef struct {
    FILE *bin;
    char *bin_path, *idx_path;
    int32_t *doc_len;   /* [ndocs] tokens per document; 0 for an empty one (no sequence) */
    int64_t ndocs, cap;
    int64_t cur_len;    /* tokens of the document being written */
    int64_t ntokens;
    int write_errno;    /* first fwrite failure, reported at the next document boundary */
    bool created;       /* .bin was opened (truncated): on failure remove .bin and any stale .idx */
    size_t nbuf;
    uint8_t buf[1 << 16]; /* little-endian uint16 tokens awaiting fwrite */
} dp_writer;

typedef enum { DP_MODE_UNKNOWN, DP_MODE_JSONL, DP_MODE_TEXT } dp_mode;

/* State of one pass over the input. */
typedef struct {
    const dp_options *opt;
    dp_writer *w;
    dp_mode mode;       /* decided by the first non-blank line */
    bool in_doc;        /* plain text: inside a paragraph */
    int64_t bytes_in;
    double t_start, t_last;
} dp_reader;

static double dp_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static bool dp_is_blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isspace((unsigned char)s[i])) return false;
    return true;
}

/* ---- arguments ---------------------------------------------------------------------------- */

static bool dp_parse_args(int argc, char **argv, dp_options *o, char *err, size_t errlen) {
    *o = (dp_options){.json_key = "text"};
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *eq = strchr(arg, '=');
        size_t nlen = (strncmp(arg, "--", 2) == 0 && eq) ? (size_t)(eq - arg) : strlen(arg);
        const char **slot = NULL;
        if (nlen == 7 && strncmp(arg, "--input", nlen) == 0) slot = &o->input;
        else if (nlen == 15 && strncmp(arg, "--output-prefix", nlen) == 0) slot = &o->prefix;
        else if (nlen == 11 && strncmp(arg, "--json-keys", nlen) == 0) slot = &o->json_key;
        else if (strcmp(arg, "--append-eod") == 0) { o->append_eod = true; continue; }
        else {
            snprintf(err, errlen, "unknown argument '%s'; %s", arg,
                     strncmp(arg, "--", 2) == 0 ? "run `mcc data preprocess --help` for the flags"
                     : "--json-keys takes one key per run");
            return false;
        }
        const char *val = eq && nlen < strlen(arg) ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!val || !*val || strncmp(val, "--", 2) == 0) {
            snprintf(err, errlen, "%.*s needs a value, e.g. %.*s %s", (int)nlen, arg, (int)nlen, arg,
                     slot == &o->input ? "corpus.jsonl" : slot == &o->prefix ? "data/corpus" : "text");
            return false;
        }
        *slot = val;
    }
    if (!o->input) snprintf(err, errlen, "missing --input FILE (a jsonl or plain-text corpus)");
    else if (!o->prefix) snprintf(err, errlen, "missing --output-prefix PREFIX (writes PREFIX.bin and PREFIX.idx)");
    return o->input && o->prefix;
}

/* ---- writer ------------------------------------------------------------------------------- */

static char *dp_concat(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    char *s = malloc(na + nb + 1);
    if (!s) abort();
    memcpy(s, a, na);
    memcpy(s + na, b, nb + 1);
    return s;
}

static bool dp_writer_open(dp_writer *w, const char *prefix, char *err, size_t errlen) {
    memset(w, 0, sizeof *w);
    w->bin_path = dp_concat(prefix, ".bin");
    w->idx_path = dp_concat(prefix, ".idx");
    w->bin = fopen(w->bin_path, "wb");
    if (!w->bin) {
        snprintf(err, errlen, "--output-prefix %s: cannot create %s: %s; check that the directory exists and is writable",
                 prefix, w->bin_path, strerror(errno));
        return false;
    }
    w->created = true;
    return true;
}

static void dp_writer_flush(dp_writer *w) {
    if (w->nbuf && fwrite(w->buf, 1, w->nbuf, w->bin) != w->nbuf && !w->write_errno)
        w->write_errno = errno ? errno : EIO;
    w->nbuf = 0;
}

static void dp_put_token(dp_writer *w, unsigned tok) {
    if (w->nbuf + DP_TOKEN_BYTES > sizeof w->buf) dp_writer_flush(w);
    w->buf[w->nbuf++] = (uint8_t)(tok & 0xff);
    w->buf[w->nbuf++] = (uint8_t)(tok >> 8);
    w->cur_len++;
}

/* The byte-level tokenizer: one token per byte. */
static void dp_put_bytes(dp_writer *w, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) dp_put_token(w, (unsigned char)s[i]);
}

/* Closes the current document. Like Megatron's preprocess_data.py, an empty document adds no
 * sequence and gets no end-of-document token, but still gets a document-index entry. */
static bool dp_end_document(dp_writer *w, bool append_eod, char *err, size_t errlen) {
    if (w->cur_len > 0 && append_eod) dp_put_token(w, MCC_DATA_EOD_TOKEN);
    if (w->cur_len > INT32_MAX) {
        snprintf(err, errlen, "document %" PRId64 " has %" PRId64 " tokens, more than the int32 sequence "
                 "length of the .idx format allows; split it into several documents", w->ndocs + 1, w->cur_len);
        return false;
    }
    if (w->write_errno) {
        snprintf(err, errlen, "writing %s: %s; free disk space or choose another --output-prefix",
                 w->bin_path, strerror(w->write_errno));
        return false;
    }
    if (w->ndocs == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 1024;
        w->doc_len = realloc(w->doc_len, (size_t)w->cap * sizeof *w->doc_len);
        if (!w->doc_len) abort();
    }
    w->doc_len[w->ndocs++] = (int32_t)w->cur_len;
    w->ntokens += w->cur_len;
    w->cur_len = 0;
    return true;
}

static void dp_put_le(FILE *f, uint64_t v, int nbytes) {
    uint8_t b[8];
    for (int i = 0; i < nbytes; i++) b[i] = (uint8_t)(v >> (8 * i));
    fwrite(b, 1, (size_t)nbytes, f);
}

/* Writes PREFIX.idx: one sequence per non-empty document; doc_idx[d] = sequences before doc d. */
static bool dp_write_index(const dp_writer *w, char *err, size_t errlen) {
    FILE *f = fopen(w->idx_path, "wb");
    if (!f) {
        snprintf(err, errlen, "cannot create %s: %s; check that the --output-prefix directory is writable",
                 w->idx_path, strerror(errno));
        return false;
    }
    int64_t nseq = 0;
    for (int64_t d = 0; d < w->ndocs; d++) nseq += w->doc_len[d] > 0;
    fwrite(DP_MAGIC, 1, sizeof DP_MAGIC, f);
    dp_put_le(f, 1, 8);
    dp_put_le(f, DP_DTYPE_UINT16, 1);
    dp_put_le(f, (uint64_t)nseq, 8);
    dp_put_le(f, (uint64_t)w->ndocs + 1, 8);
    for (int64_t d = 0; d < w->ndocs; d++)
        if (w->doc_len[d] > 0) dp_put_le(f, (uint64_t)w->doc_len[d], 4);
    int64_t ptr = 0;
    for (int64_t d = 0; d < w->ndocs; d++) {
        if (w->doc_len[d] == 0) continue;
        dp_put_le(f, (uint64_t)ptr, 8);
        ptr += (int64_t)w->doc_len[d] * DP_TOKEN_BYTES;
    }
    int64_t seq = 0;
    dp_put_le(f, 0, 8);
    for (int64_t d = 0; d < w->ndocs; d++) {
        seq += w->doc_len[d] > 0;
        dp_put_le(f, (uint64_t)seq, 8);
    }
    bool ok = !ferror(f);
    if (fclose(f) != 0) ok = false;
    if (!ok) snprintf(err, errlen, "writing %s failed; free disk space or choose another --output-prefix", w->idx_path);
    return ok;
}

static bool dp_writer_finish(dp_writer *w, char *err, size_t errlen) {
    dp_writer_flush(w);
    int rc = fclose(w->bin);
    w->bin = NULL;
    if (rc != 0 || w->write_errno) {
        snprintf(err, errlen, "writing %s: %s; free disk space or choose another --output-prefix",
                 w->bin_path, strerror(w->write_errno ? w->write_errno : errno));
        return false;
    }
    return dp_write_index(w, err, errlen);
}

/* Frees the writer; after a failure also removes the partial output so no half dataset remains. */
static void dp_writer_free(dp_writer *w, bool failed) {
    if (w->bin) fclose(w->bin);
    if (failed && w->created) {
        unlink(w->bin_path);
        unlink(w->idx_path);
    }
    free(w->bin_path);
    free(w->idx_path);
    free(w->doc_len);
}

/* ---- readers ------------------------------------------------------------------------------ */

static void dp_progress(dp_reader *r, bool final) {
    double now = dp_now();
    if (!final && now - r->t_last < 1.0) return;
    r->t_last = now;
    double mb = r->bytes_in / 1e6, secs = now - r->t_start;
    if (final)
        fprintf(stderr, "mcc data preprocess: wrote %s, %s: %" PRId64 " documents, %" PRId64
                " tokens (byte-level, vocab %d, uint16), %.1f MB read in %.1f s (%.1f MB/s)\n",
                r->w->bin_path, r->w->idx_path, r->w->ndocs, r->w->ntokens, MCC_DATA_VOCAB_SIZE, mb, secs,
                secs > 0 ? mb / secs : 0.0);
    else
        fprintf(stderr, "mcc data preprocess: %" PRId64 " documents, %.1f MB, %.1f MB/s\n", r->w->ndocs, mb,
                secs > 0 ? mb / secs : 0.0);
}

/* One jsonl line: one document, the UTF-8 bytes of the string at --json-keys. */
static bool dp_jsonl_line(dp_reader *r, const char *line, size_t len, int64_t lineno, char *err, size_t errlen) {
    const char *key = r->opt->json_key, *input = r->opt->input;
    json_error_t je;
    json_t *obj = json_loadb(line, len, JSON_ALLOW_NUL, &je);
    json_t *text = json_is_object(obj) ? json_object_get(obj, key) : NULL;
    if (!obj)
        snprintf(err, errlen, "--input %s line %" PRId64 ": bad JSON (%s, column %d); each line must be one "
                 "object like {\"%s\": \"...\"} (the file was read as jsonl because it starts with '{')",
                 input, lineno, je.text, je.column, key);
    else if (!json_is_object(obj))
        snprintf(err, errlen, "--input %s line %" PRId64 ": expected a JSON object like {\"%s\": \"...\"}",
                 input, lineno, key);
    else if (!text)
        snprintf(err, errlen, "--input %s line %" PRId64 ": missing key \"%s\"; set --json-keys to the key that "
                 "holds the document text", input, lineno, key);
    else if (!json_is_string(text))
        snprintf(err, errlen, "--input %s line %" PRId64 ": \"%s\" is not a string; each document's text must "
                 "be one JSON string", input, lineno, key);
    else
        dp_put_bytes(r->w, json_string_value(text), json_string_length(text));
    bool ok = json_is_string(text);
    json_decref(obj);
    return ok && dp_end_document(r->w, r->opt->append_eod, err, errlen);
}

/* One plain-text line: paragraphs (runs of non-blank lines, joined by '\n') are documents. */
static bool dp_text_line(dp_reader *r, const char *line, size_t len, char *err, size_t errlen) {
    if (dp_is_blank(line, len)) {
        if (!r->in_doc) return true;
        r->in_doc = false;
        return dp_end_document(r->w, r->opt->append_eod, err, errlen);
    }
    if (r->in_doc) dp_put_token(r->w, '\n');
    dp_put_bytes(r->w, line, len);
    r->in_doc = true;
    return true;
}

static bool dp_line(dp_reader *r, const char *line, size_t len, int64_t lineno, char *err, size_t errlen) {
    if (r->mode == DP_MODE_UNKNOWN) {
        if (dp_is_blank(line, len)) return true;
        size_t i = 0;
        while (isspace((unsigned char)line[i])) i++;
        r->mode = line[i] == '{' ? DP_MODE_JSONL : DP_MODE_TEXT;
    }
    if (r->mode == DP_MODE_TEXT) return dp_text_line(r, line, len, err, errlen);
    /* A blank line in jsonl (e.g. at the end of the file) is not a document. */
    return dp_is_blank(line, len) || dp_jsonl_line(r, line, len, lineno, err, errlen);
}

/* Streams the input line by line: memory is bounded by the longest line. */
static bool dp_read_input(FILE *in, dp_reader *r, char *err, size_t errlen) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int64_t lineno = 0;
    bool ok = true;
    while (ok && (n = getline(&line, &cap, in)) >= 0) {
        r->bytes_in += n;
        size_t len = (size_t)n;
        if (len && line[len - 1] == '\n') len--;
        ok = dp_line(r, line, len, ++lineno, err, errlen);
        dp_progress(r, false);
    }
    if (ok && ferror(in)) {
        snprintf(err, errlen, "--input %s: read error after line %" PRId64 ": %s", r->opt->input, lineno,
                 strerror(errno));
        ok = false;
    }
    if (ok && r->in_doc) ok = dp_end_document(r->w, r->opt->append_eod, err, errlen);
    free(line);
    return ok;
}

/* ---- command ------------------------------------------------------------------------------ */

static bool dp_run(const dp_options *o, char *err, size_t errlen) {
    FILE *in = fopen(o->input, "rb");
    if (!in) {
        snprintf(err, errlen, "--input %s: cannot open: %s", o->input, strerror(errno));
        return false;
    }
    dp_writer *w = malloc(sizeof *w);
    if (!w) abort();
    bool ok = dp_writer_open(w, o->prefix, err, errlen);
    dp_reader r = {.opt = o, .w = w, .t_start = dp_now()};
    r.t_last = r.t_start;
    ok = ok && dp_read_input(in, &r, err, errlen);
    if (ok && w->ntokens == 0) {
        snprintf(err, errlen, "--input %s: no text in its %" PRId64 " documents; empty output, nothing "
                 "written", o->input, w->ndocs);
        ok = false;
    }
    ok = ok && dp_writer_finish(w, err, errlen);
    if (ok) dp_progress(&r, true);
    fclose(in);
    dp_writer_free(w, !ok);
    free(w);
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
