/* safetensors.h — the safetensors file format (what PyTorch and Hugging Face tools read): an
 * 8-byte little-endian header length, a JSON header {name: {"dtype", "shape", "data_offsets":
 * [begin, end]}, "__metadata__": {string: string}}, then the raw little-endian data, offsets
 * counted from the end of the header. Written by hand (it is small); the header through jansson.
 *
 *     [u64 n][n bytes of JSON, space-padded to 8][tensor 0's bytes][tensor 1's bytes]...
 *
 * Reading validates the whole header against the file before any tensor is read: a truncated
 * file, a header length past the end, bad JSON, an unknown dtype, a shape whose size disagrees
 * with its offsets, offsets past the data or overlapping another tensor's: each error names the
 * file and the tensor. */
#ifndef MCC_CK_SAFETENSORS_H
#define MCC_CK_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/ir.h"

/* Makes the bytes of tensor i into buf (ir_bytes of its type), for a writer that asks for each in
 * turn: a file of tensors made one by one (an import's) never holds more than one in memory. */
typedef bool (*ck_st_fill)(void *ctx, int i, void *buf, char *err, size_t errlen);

/* One tensor to write: its name, dtype and shape (type: shards ignored), and its bytes, or (data
 * NULL) fill(ctx, i, ...) makes them when the writer comes to it. */
typedef struct {
    const char *name;
    ir_type type;
    const void *data;
    ck_st_fill fill;
    void *ctx;
} ck_st_tensor;

/* Writes path (created or replaced) with the tensors in order and the metadata pairs
 * (meta[2i] = key, meta[2i+1] = value), then fsyncs it. *bytes gets the file's size and *checksum
 * its ck_checksum; sums[0] the header's (its length and JSON: header_sum on reading), sums[1 + i]
 * tensor i's bytes' (n + 1 of them), so that a reader verifies only what it reads (any may be
 * NULL). False with "PATH: <reason>" in err. Supported dtypes: f32, bf16, f16, i32, i64 (F32, BF16,
 * F16, I32, I64). */
bool ck_st_write(const char *path, int n, const ck_st_tensor *t, int nmeta, const char *const *meta,
                 uint64_t *bytes, uint64_t *checksum, uint64_t *sums, char *err, size_t errlen);

/* A file opened for reading: its header, validated. */
typedef struct {
    char *name;
    ir_type type;                   /* dtype and shape as the header gives them */
    uint64_t begin, end;            /* data_offsets: from the end of the header */
} ck_st_entry;

typedef struct {
    char *path;
    int fd;
    uint64_t file_bytes, data_start; /* data_start: 8 + the header's length */
    uint64_t header_sum;            /* ck_checksum of the file's first data_start bytes */
    int n;
    ck_st_entry *t;                 /* in the header's order */
    int nmeta;
    char **meta;                    /* key, value, key, value, ... */
} ck_st_file;

/* Opens path and validates its header against the file's size (and, header_sum not NULL, the
 * header's bytes against that checksum first). False with "PATH: <reason>" (and the tensor, where
 * one is at fault) in err; f is then closed. */
bool ck_st_open(ck_st_file *f, const char *path, const uint64_t *header_sum, char *err, size_t errlen);
/* The entry named name, or -1. */
int ck_st_find(const ck_st_file *f, const char *name);
/* The metadata value of key, or NULL. */
const char *ck_st_meta(const ck_st_file *f, const char *key);
/* Reads entry i's bytes (ir_bytes(&f->t[i].type) of them) into out. False with "PATH: tensor
 * NAME: <reason>" (a short read: the file changed since it was opened). */
bool ck_st_read(const ck_st_file *f, int i, void *out, char *err, size_t errlen);
void ck_st_close(ck_st_file *f);

/* The checksum of a checkpoint's files: zlib's CRC-32 over the bytes (a well-kept library, and
 * fast: 2.8 GB/s on the build machine against 0.71 GB/s for a byte-wise 64-bit FNV-1a, which
 * made a part of every save's and load's time). It catches the corruptions a checkpoint meets:
 * torn writes, truncation, flipped bytes; it is not cryptographic. Start with CK_CHECKSUM_INIT. */
#define CK_CHECKSUM_INIT 0ull
uint64_t ck_checksum(uint64_t h, const void *data, size_t n);
/* The checksum of the whole file at path (*bytes: its size). False with "PATH: <reason>". */
bool ck_checksum_file(const char *path, uint64_t *sum, uint64_t *bytes, char *err, size_t errlen);

/* The checkpoint library's errors: the message into err (when err is not NULL); returns false. */
bool ck_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Safetensors' dtype names: "F32", ... for a supported dtype, NULL otherwise; and back (-1). */
const char *ck_st_dtype_name(ir_dtype dt);
int ck_st_dtype_by_name(const char *s);

#endif
