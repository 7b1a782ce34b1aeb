/* indexed_builder.c — writes PREFIX.bin (tokens) and PREFIX.idx (MMIDIDX index), the layout of
 * Megatron's IndexedDatasetBuilder: the same bytes for the same documents. Both are written under
 * temporary names beside them and renamed over PREFIX.bin/.idx only once complete and synced, so
 * a failed run leaves an existing dataset as it was and a run reading it keeps its mappings. */
#include "frontend/indexed_builder.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
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
    char *bin_path, *idx_path;  /* the final names */
    char *bin_tmp, *idx_tmp;    /* written first: PREFIX.bin.tmp.PID, PREFIX.idx.tmp.PID */
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

/* SIGINT/SIGTERM (a user's Ctrl-C, a job's end) while writing: remove the temporaries, then die
 * of the signal as before. unlink is async-signal-safe; the paths are set before the handler is. */
static const char *volatile ib_pending[2];
static struct sigaction ib_old_int, ib_old_term;

static void ib_on_signal(int sig) {
    for (int i = 0; i < 2; i++)
        if (ib_pending[i]) unlink(ib_pending[i]);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void ib_guard(const ib_builder *b) {
    ib_pending[0] = b ? b->bin_tmp : NULL;
    ib_pending[1] = b ? b->idx_tmp : NULL;
    if (b) {
        struct sigaction sa = {.sa_handler = ib_on_signal};
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, &ib_old_int);
        sigaction(SIGTERM, &sa, &ib_old_term);
    } else {
        sigaction(SIGINT, &ib_old_int, NULL);
        sigaction(SIGTERM, &ib_old_term, NULL);
    }
}

/* A new file for writing; O_EXCL: a temporary name never truncates a file someone else holds. */
static FILE *ib_create(const char *path) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0666);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (fd >= 0 && !f) close(fd);
    return f;
}

static char *ib_temp_name(const char *final) {
    char suffix[32];
    snprintf(suffix, sizeof suffix, ".tmp.%ld", (long)getpid());
    return ib_concat(final, suffix);
}

ib_builder *ib_open(const char *prefix, int32_t vocab_size, char *err, size_t errlen) {
    ib_builder *b = calloc(1, sizeof *b);
    if (!b) abort();
    b->bin_path = ib_concat(prefix, ".bin");
    b->idx_path = ib_concat(prefix, ".idx");
    b->bin_tmp = ib_temp_name(b->bin_path);
    b->idx_tmp = ib_temp_name(b->idx_path);
    bool small = vocab_size < IB_UINT16_MAX_VOCAB;
    b->dtype_code = small ? IB_DTYPE_UINT16 : IB_DTYPE_INT32;
    b->token_bytes = small ? 2 : 4;
    ib_guard(b);
    b->bin = ib_create(b->bin_tmp);
    if (!b->bin) {
        snprintf(err, errlen, "--output-prefix: cannot create %s: %s; check that the directory exists and is "
                 "writable", b->bin_tmp, strerror(errno));
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

/* Flushes f to the disk and closes it: a rename must not publish data still in the page cache
 * (after a crash the new name could hold zeros). */
static bool ib_sync_close(FILE *f) {
    bool ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
    return fclose(f) == 0 && ok;
}

static void ib_put_le(FILE *f, uint64_t v, int nbytes) {
    uint8_t bytes[8];
    for (int i = 0; i < nbytes; i++) bytes[i] = (uint8_t)(v >> (8 * i));
    fwrite(bytes, 1, (size_t)nbytes, f);
}

/* One sequence per non-empty document; doc_idx[d] = sequences before document d. */
static bool ib_write_index(const ib_builder *b, char *err, size_t errlen) {
    FILE *f = ib_create(b->idx_tmp);
    if (!f) {
        snprintf(err, errlen, "cannot create %s: %s; check that the --output-prefix directory is writable",
                 b->idx_tmp, strerror(errno));
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
    errno = 0;
    bool ok = !ferror(f);
    ok = ib_sync_close(f) && ok;
    if (!ok)
        snprintf(err, errlen, "writing %s: %s; free disk space or choose another --output-prefix", b->idx_tmp,
                 strerror(errno ? errno : EIO));
    return ok;
}

/* The renames' directory entries reach the disk too. Best effort: some file systems refuse. */
static void ib_sync_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, (size_t)(slash - path) + 1) : strdup(".");
    int fd = dir ? open(dir, O_RDONLY | O_DIRECTORY) : -1;
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(dir);
}

/* The .bin is renamed before the .idx, and rt_dataset_open maps the .idx before the .bin: a
 * reader that sees the new .idx finds the new .bin, and a new dataset exists (has an .idx) only
 * once complete. A reader between the renames pairs the old .idx with the new .bin, which its
 * size check refuses (the .bin must end where the .idx's last sequence does). */
bool ib_finish(ib_builder *b, char *err, size_t errlen) {
    ib_flush(b);
    errno = 0;
    if (!ib_sync_close(b->bin) && !b->write_errno) b->write_errno = errno ? errno : EIO;
    b->bin = NULL;
    if (ib_write_failed(b, err, errlen) || !ib_write_index(b, err, errlen)) return false;
    const char *from = b->bin_tmp, *to = b->bin_path;
    bool ok = rename(from, to) == 0;
    if (ok) from = b->idx_tmp, to = b->idx_path, ok = rename(from, to) == 0;
    if (!ok)
        snprintf(err, errlen, "cannot rename %s to %s: %s; check that --output-prefix's directory is writable", from,
                 to, strerror(errno));
    ib_sync_dir(b->idx_path);
    return ok;
}

void ib_close(ib_builder *b, bool failed) {
    if (!b) return;
    if (b->bin) fclose(b->bin);
    if (failed) { /* only the temporaries: PREFIX.bin/.idx, if they exist, are a finished dataset */
        unlink(b->bin_tmp);
        unlink(b->idx_tmp);
    }
    ib_guard(NULL);
    free(b->bin_tmp);
    free(b->idx_tmp);
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
