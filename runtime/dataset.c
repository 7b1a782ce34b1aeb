/* dataset.c — mmaps a Megatron indexed dataset (PREFIX.idx "MMIDIDX" + PREFIX.bin), validates it
 * and reads its sequences' tokens (gpt_dataset.c cuts the training samples). Plain C + POSIX. */
#include "runtime/dataset.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* .idx layout (little-endian, unaligned, no padding):
 *   magic[9] "MMIDIDX\0\0" | u64 version=1 | u8 dtype code | u64 S | u64 D |
 *   i32 lengths[S] | i64 byte_pointers[S] | i64 doc_idx[D]                                   */
enum { RT_DS_HEADER = 34 };
static const char RT_DS_MAGIC[9] = "MMIDIDX\0\0";
#define RT_DS_RERUN "rerun `mcc data preprocess` (or Megatron's preprocess_data.py) to rebuild it"

struct rt_dataset {
    const uint8_t *idx, *bin;   /* read-only mappings of the two files */
    size_t idx_size, bin_size;
    int dtype, esize;           /* Megatron dtype code and its size in bytes */
    int64_t nseq;
    const uint8_t *lengths;     /* i32[nseq] tokens per sequence, inside idx */
    const uint8_t *ptrs;        /* i64[nseq] byte offset of each sequence in .bin, inside idx */
    int64_t *start;             /* [nseq+1] first token of each sequence in the concatenation */
    char bin_path[4096];        /* for messages */
};

static uint64_t rt_ds_le(const uint8_t *p, int nbytes) {
    uint64_t v = 0;
    for (int i = nbytes - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* Bytes per token for Megatron's DType codes 1 u8, 2 i8, 3 i16, 4 i32, 5 i64, 8 u16;
 * 0 for the float codes (6 f64, 7 f32) and unknown ones: tokens must be integers. */
static int rt_ds_elem_size(int code) {
    switch (code) {
    case 1: case 2: return 1;
    case 3: case 8: return 2;
    case 4: return 4;
    case 5: return 8;
    default: return 0;
    }
}

static int64_t rt_ds_token(const rt_dataset *d, const uint8_t *p) {
    uint64_t v = rt_ds_le(p, d->esize);
    switch (d->dtype) {
    case 2: return (int8_t)v;
    case 3: return (int16_t)v;
    case 4: return (int32_t)v;
    case 5: return (int64_t)v;
    default: return (int64_t)v; /* u8, u16 */
    }
}

static int32_t rt_ds_length(const rt_dataset *d, int64_t s) { return (int32_t)rt_ds_le(d->lengths + 4 * s, 4); }
static int64_t rt_ds_ptr(const rt_dataset *d, int64_t s) { return (int64_t)rt_ds_le(d->ptrs + 8 * s, 8); }

static const uint8_t *rt_ds_map(const char *path, const char *prefix, size_t *size, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        size_t n = strlen(prefix);
        bool suffixed = n > 4 && (strcmp(prefix + n - 4, ".bin") == 0 || strcmp(prefix + n - 4, ".idx") == 0);
        snprintf(err, errlen, "cannot open %s: %s; %s", path, strerror(errno),
                 suffixed ? "pass the dataset prefix without .bin/.idx (as Megatron's --data-path)"
                          : "check --data-path names PREFIX of PREFIX.bin and PREFIX.idx");
        if (fd >= 0) close(fd);
        return NULL;
    }
    *size = (size_t)st.st_size;
    void *p = *size ? mmap(NULL, *size, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    if (p == MAP_FAILED)
        snprintf(err, errlen, "%s: %s; " RT_DS_RERUN, path, *size ? strerror(errno) : "empty file");
    close(fd);
    return p == MAP_FAILED ? NULL : p;
}

/* Megatron's document index: 0, non-decreasing, ending at the sequence count (document i holds
 * sequences doc_idx[i] .. doc_idx[i+1]-1). Names the first bad entry. */
static bool rt_ds_check_documents(const uint8_t *docs, uint64_t ndoc, uint64_t nseq, const char *path, char *err,
                                  size_t errlen) {
    if (ndoc == 0) {
        snprintf(err, errlen, "%s: the document index is empty (Megatron's starts with 0); " RT_DS_RERUN, path);
        return false;
    }
    uint64_t prev = 0;
    for (uint64_t i = 0; i < ndoc; i++) {
        uint64_t v = rt_ds_le(docs + 8 * i, 8);
        const char *why = i == 0 && v != 0           ? "the first must be 0"
                          : v < prev                 ? "less than the entry before it (it must not decrease)"
                          : v > nseq                 ? "beyond the sequence count"
                          : i + 1 == ndoc && v != nseq ? "the last must be the sequence count"
                                                     : NULL;
        if (why) {
            snprintf(err, errlen, "%s: document index entry %" PRIu64 " of %" PRIu64 " is %" PRId64 ", %s (%" PRIu64
                     " sequences); " RT_DS_RERUN, path, i, ndoc, (int64_t)v, why, nseq);
            return false;
        }
        prev = v;
    }
    return true;
}

static bool rt_ds_check_header(rt_dataset *d, const char *path, char *err, size_t errlen) {
    if (d->idx_size < RT_DS_HEADER || memcmp(d->idx, RT_DS_MAGIC, sizeof RT_DS_MAGIC) != 0) {
        snprintf(err, errlen, "%s: %s; " RT_DS_RERUN, path,
                 d->idx_size < RT_DS_HEADER ? "truncated: shorter than the 34-byte MMIDIDX header"
                                            : "bad magic: not a Megatron MMIDIDX index");
        return false;
    }
    uint64_t version = rt_ds_le(d->idx + 9, 8);
    d->dtype = d->idx[17];
    d->esize = rt_ds_elem_size(d->dtype);
    uint64_t nseq = rt_ds_le(d->idx + 18, 8), ndoc = rt_ds_le(d->idx + 26, 8);
    if (version != 1) {
        snprintf(err, errlen, "%s: index version %" PRIu64 ", but only version 1 exists; " RT_DS_RERUN, path, version);
        return false;
    }
    if (!d->esize) {
        snprintf(err, errlen, "%s: dtype code %d is not an integer token type (1 u8, 2 i8, 3 i16, 4 i32, 5 i64, "
                 "8 u16); " RT_DS_RERUN, path, d->dtype);
        return false;
    }
    uint64_t body = d->idx_size - RT_DS_HEADER;
    if (nseq > body / 12 || ndoc > (body - 12 * nseq) / 8) {
        snprintf(err, errlen, "%s: truncated: the header lists %" PRIu64 " sequences and %" PRIu64 " documents, "
                 "more than its %zu bytes hold; " RT_DS_RERUN, path, nseq, ndoc, d->idx_size);
        return false;
    }
    uint64_t end = RT_DS_HEADER + 12 * nseq + 8 * ndoc;
    if (d->idx_size != end) { /* the header describes another index than the one written after it */
        snprintf(err, errlen, "%s: %" PRIu64 " trailing bytes after the document index (the header's %" PRIu64
                 " sequences and %" PRIu64 " documents end at byte %" PRIu64 " of %zu); " RT_DS_RERUN, path,
                 d->idx_size - end, nseq, ndoc, end, d->idx_size);
        return false;
    }
    d->nseq = (int64_t)nseq;
    d->lengths = d->idx + RT_DS_HEADER;
    d->ptrs = d->lengths + 4 * nseq;
    return rt_ds_check_documents(d->ptrs + 8 * nseq, ndoc, nseq, path, err, errlen);
}

/* Checks every sequence's byte pointer is the running sum of the lengths before it (no gap, no
 * overlap), that the .bin ends exactly where the last sequence does, and builds d->start. A .bin
 * of another dataset beside a valid .idx fails here on its size. */
static bool rt_ds_index_sequences(rt_dataset *d, const char *idx_path, const char *bin_path, char *err,
                                  size_t errlen) {
    d->start = malloc(((size_t)d->nseq + 1) * sizeof *d->start);
    if (!d->start) {
        snprintf(err, errlen, "%s: out of memory for %" PRId64 " sequence offsets", idx_path, d->nseq);
        return false;
    }
    d->start[0] = 0;
    for (int64_t s = 0; s < d->nseq; s++) {
        int64_t len = rt_ds_length(d, s), ptr = rt_ds_ptr(d, s), want = d->start[s] * d->esize;
        if (len < 0 || ptr != want) {
            snprintf(err, errlen, "%s: sequence %" PRId64 " %s %" PRId64 ", but %s; " RT_DS_RERUN, idx_path, s,
                     len < 0 ? "has length" : "starts at byte", len < 0 ? len : ptr,
                     len < 0 ? "a length cannot be negative"
                             : ptr < want ? "the sequences before it end later (they overlap)"
                                          : "the sequences before it end earlier (a gap)");
            return false;
        }
        d->start[s + 1] = d->start[s] + len;
    }
    uint64_t end = (uint64_t)d->start[d->nseq] * (uint64_t)d->esize;
    if (d->bin_size != end) {
        snprintf(err, errlen, "%s is %zu bytes, but %s's %" PRId64 " sequences (%" PRId64 " tokens of %d bytes) end at "
                 "byte %" PRIu64 ": the .bin is %s; " RT_DS_RERUN, bin_path, d->bin_size, idx_path, d->nseq,
                 d->start[d->nseq], d->esize, end,
                 d->bin_size < end ? "truncated or of another dataset" : "of another dataset or has trailing bytes");
        return false;
    }
    if (d->start[d->nseq] == 0) {
        snprintf(err, errlen, "%s: the dataset has no tokens; preprocess a non-empty corpus", bin_path);
        return false;
    }
    return true;
}

rt_dataset *rt_dataset_open(const char *prefix, char *err, size_t errlen) {
    char idx_path[4096], bin_path[4096];
    if ((size_t)snprintf(idx_path, sizeof idx_path, "%s.idx", prefix) >= sizeof idx_path ||
        (size_t)snprintf(bin_path, sizeof bin_path, "%s.bin", prefix) >= sizeof bin_path) {
        snprintf(err, errlen, "dataset prefix is longer than %zu bytes; use a shorter --data-path", sizeof idx_path - 5);
        return NULL;
    }
    rt_dataset *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, errlen, "out of memory opening dataset %s", prefix);
        return NULL;
    }
    snprintf(d->bin_path, sizeof d->bin_path, "%s", bin_path);
    bool ok = (d->idx = rt_ds_map(idx_path, prefix, &d->idx_size, err, errlen)) &&
              (d->bin = rt_ds_map(bin_path, prefix, &d->bin_size, err, errlen)) &&
              rt_ds_check_header(d, idx_path, err, errlen) &&
              rt_ds_index_sequences(d, idx_path, bin_path, err, errlen);
    if (!ok) {
        rt_dataset_close(d);
        return NULL;
    }
    return d;
}

void rt_dataset_close(rt_dataset *d) {
    if (!d) return;
    if (d->idx) munmap((void *)d->idx, d->idx_size);
    if (d->bin) munmap((void *)d->bin, d->bin_size);
    free(d->start);
    free(d);
}

int64_t rt_dataset_num_tokens(const rt_dataset *d) { return d->start[d->nseq]; }

int64_t rt_dataset_num_sequences(const rt_dataset *d) { return d->nseq; }

int32_t rt_dataset_sequence_length(const rt_dataset *d, int64_t s) {
    assert(s >= 0 && s < d->nseq);
    return (int32_t)(d->start[s + 1] - d->start[s]); /* from the prefix sum: no .idx page touched */
}

void rt_dataset_read(const rt_dataset *d, int64_t s, int64_t offset, int64_t n, int32_t *out) {
    assert(offset >= 0 && n >= 0 && offset + n <= rt_dataset_sequence_length(d, s));
    const uint8_t *p = d->bin + rt_ds_ptr(d, s) + offset * d->esize;
    for (int64_t j = 0; j < n; j++) out[j] = (int32_t)rt_ds_token(d, p + j * d->esize);
}

bool rt_dataset_check_tokens(const rt_dataset *d, int64_t vocab, char *err, size_t errlen) {
    for (int64_t s = 0; s < d->nseq; s++) {
        const uint8_t *p = d->bin + rt_ds_ptr(d, s);
        for (int64_t j = 0, n = rt_ds_length(d, s); j < n; j++) {
            int64_t t = rt_ds_token(d, p + j * d->esize);
            if (t < 0) {
                snprintf(err, errlen, "%s: sequence %lld holds the negative token id %lld: the file is damaged or "
                         "not token ids; " RT_DS_RERUN, d->bin_path, (long long)s, (long long)t);
                return false;
            }
            if (t >= vocab) {
                snprintf(err, errlen, "%s: sequence %lld holds token id %lld but the model's vocabulary is %lld "
                         "(ids 0..%lld): tokenize with the model's tokenizer, or recompile with --vocab-size %lld "
                         "or more", d->bin_path, (long long)s, (long long)t, (long long)vocab, (long long)vocab - 1,
                         (long long)t + 1);
                return false;
            }
        }
    }
    return true;
}

