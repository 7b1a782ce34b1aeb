/* indexed_builder.c — writes PREFIX.bin (tokens) and PREFIX.idx (MMIDIDX index), the layout of
 * Megatron's IndexedDatasetBuilder: the same bytes for the same documents. */
#include "frontend/indexed_builder.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* .idx layout (little-endian, no padding):
 *   magic[9] "MMIDIDX\0\0" | u64 version=1 | u8 dtype code | u64 S | u64 D |
 *   i32 lengths[S] | i64 byte_pointers[S] | i64 doc_idx[D]                                   */
static const char IB_MAGIC[9] = "MMIDIDX\0\0";
/* Megatron's DType codes of the two dtypes optimal_dtype picks. */
enum { IB_DTYPE_INT32 = 4, IB_DTYPE_UINT16 = 8, IB_UINT16_MAX_VOCAB = 65500 };

/* Tokens stream to .bin; the per-document lengths stay in memory (4 bytes a document) because
 * the .idx begins with the counts. */
struct ib_builder {
    FILE *bin;
    char *bin_path, *idx_path;
    int dtype_code, token_bytes;
    int32_t *doc_len; /* [ndocs] tokens per document; 0 for an empty one (no sequence) */
    int64_t ndocs, cap, ntokens;
    int write_errno;  /* first fwrite failure, reported by the next call */
    size_t nbuf;
    uint8_t buf[1 << 16]; /* little-endian tokens awaiting fwrite */
};

static char *ib_concat(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    char *s = malloc(na + nb + 1);
    if (!s) abort();
    memcpy(s, a, na);
    memcpy(s + na, b, nb + 1);
    return s;
}

ib_builder *ib_open(const char *prefix, int32_t vocab_size, char *err, size_t errlen) {
    ib_builder *b = calloc(1, sizeof *b);
    if (!b) abort();
    b->bin_path = ib_concat(prefix, ".bin");
    b->idx_path = ib_concat(prefix, ".idx");
    bool small = vocab_size < IB_UINT16_MAX_VOCAB;
    b->dtype_code = small ? IB_DTYPE_UINT16 : IB_DTYPE_INT32;
    b->token_bytes = small ? 2 : 4;
    b->bin = fopen(b->bin_path, "wb");
    if (!b->bin) {
        snprintf(err, errlen, "--output-prefix: cannot create %s: %s; check that the directory exists and is "
                 "writable", b->bin_path, strerror(errno));
        ib_close(b, false);
        return NULL;
    }
    return b;
}

static void ib_flush(ib_builder *b) {
    if (b->nbuf && fwrite(b->buf, 1, b->nbuf, b->bin) != b->nbuf && !b->write_errno)
        b->write_errno = errno ? errno : EIO;
    b->nbuf = 0;
}

static bool ib_write_failed(const ib_builder *b, char *err, size_t errlen) {
    if (b->write_errno)
        snprintf(err, errlen, "writing %s: %s; free disk space or choose another --output-prefix", b->bin_path,
                 strerror(b->write_errno));
    return b->write_errno != 0;
}

bool ib_add_document(ib_builder *b, const int32_t *ids, size_t n, char *err, size_t errlen) {
    if (n > INT32_MAX) {
        snprintf(err, errlen, "document %lld has %zu tokens, more than the int32 sequence length of the .idx "
                 "format allows; split it into several documents", (long long)b->ndocs + 1, n);
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if (b->nbuf + 4 > sizeof b->buf) ib_flush(b);
        for (int k = 0; k < b->token_bytes; k++) b->buf[b->nbuf++] = (uint8_t)((uint32_t)ids[i] >> (8 * k));
    }
    if (ib_write_failed(b, err, errlen)) return false;
    if (b->ndocs == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 1024;
        b->doc_len = realloc(b->doc_len, (size_t)b->cap * sizeof *b->doc_len);
        if (!b->doc_len) abort();
    }
    b->doc_len[b->ndocs++] = (int32_t)n;
    b->ntokens += (int64_t)n;
    return true;
}

static void ib_put_le(FILE *f, uint64_t v, int nbytes) {
    uint8_t bytes[8];
    for (int i = 0; i < nbytes; i++) bytes[i] = (uint8_t)(v >> (8 * i));
    fwrite(bytes, 1, (size_t)nbytes, f);
}

/* One sequence per non-empty document; doc_idx[d] = sequences before document d. */
static bool ib_write_index(const ib_builder *b, char *err, size_t errlen) {
    FILE *f = fopen(b->idx_path, "wb");
    if (!f) {
        snprintf(err, errlen, "cannot create %s: %s; check that the --output-prefix directory is writable",
                 b->idx_path, strerror(errno));
        return false;
    }
    int64_t nseq = 0;
    for (int64_t d = 0; d < b->ndocs; d++) nseq += b->doc_len[d] > 0;
    fwrite(IB_MAGIC, 1, sizeof IB_MAGIC, f);
    ib_put_le(f, 1, 8);
    ib_put_le(f, (uint64_t)b->dtype_code, 1);
    ib_put_le(f, (uint64_t)nseq, 8);
    ib_put_le(f, (uint64_t)b->ndocs + 1, 8);
    for (int64_t d = 0; d < b->ndocs; d++)
        if (b->doc_len[d] > 0) ib_put_le(f, (uint64_t)b->doc_len[d], 4);
    int64_t ptr = 0;
    for (int64_t d = 0; d < b->ndocs; d++) {
        if (b->doc_len[d] == 0) continue;
        ib_put_le(f, (uint64_t)ptr, 8);
        ptr += (int64_t)b->doc_len[d] * b->token_bytes;
    }
    int64_t seq = 0;
    ib_put_le(f, 0, 8);
    for (int64_t d = 0; d < b->ndocs; d++) {
        seq += b->doc_len[d] > 0;
        ib_put_le(f, (uint64_t)seq, 8);
    }
    bool ok = !ferror(f);
    if (fclose(f) != 0) ok = false;
    if (!ok) snprintf(err, errlen, "writing %s failed; free disk space or choose another --output-prefix", b->idx_path);
    return ok;
}

bool ib_finish(ib_builder *b, char *err, size_t errlen) {
    ib_flush(b);
    if (fclose(b->bin) != 0 && !b->write_errno) b->write_errno = errno ? errno : EIO;
    b->bin = NULL;
    return !ib_write_failed(b, err, errlen) && ib_write_index(b, err, errlen);
}

void ib_close(ib_builder *b, bool failed) {
    if (!b) return;
    if (b->bin) fclose(b->bin);
    if (failed) {
        unlink(b->bin_path);
        unlink(b->idx_path);
    }
    free(b->bin_path);
    free(b->idx_path);
    free(b->doc_len);
    free(b);
}

int64_t ib_num_documents(const ib_builder *b) { return b->ndocs; }
int64_t ib_num_tokens(const ib_builder *b) { return b->ntokens; }
const char *ib_dtype_name(const ib_builder *b) { return b->token_bytes == 2 ? "uint16" : "int32"; }
const char *ib_bin_path(const ib_builder *b) { return b->bin_path; }
const char *ib_idx_path(const ib_builder *b) { return b->idx_path; }
