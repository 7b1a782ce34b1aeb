/* safetensors.c — writing and reading safetensors files (safetensors.h), validated whole. */
#include "checkpoint/safetensors.h"
#include "common/os.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* The largest header we accept (the Rust reference's limit): a bigger length is a corrupt file. */
#define CK_ST_MAX_HEADER (100u << 20)

bool ck_fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err && errlen)
        vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return false;
}

uint64_t ck_checksum(uint64_t h, const void *data, size_t n)
{
    const unsigned char *s = data;
    for (size_t chunk; n; s += chunk, n -= chunk) { /* zlib takes a uInt length */
        chunk = n < (1u << 30) ? n : (1u << 30);
        h = crc32((uLong)h, s, (uInt)chunk);
    }
    return h;
}

static const struct {
    ir_dtype dt;
    const char *name;
} st_dtypes[] = {{IR_F32, "F32"}, {IR_BF16, "BF16"}, {IR_F16, "F16"}, {IR_I32, "I32"}, {IR_I64, "I64"}};

const char *ck_st_dtype_name(ir_dtype dt)
{
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (st_dtypes[i].dt == dt)
            return st_dtypes[i].name;
    return NULL;
}

int ck_st_dtype_by_name(const char *s)
{
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (!strcmp(st_dtypes[i].name, s))
            return (int)st_dtypes[i].dt;
    return -1;
}

/* --- writing ------------------------------------------------------------------------------ */

/* Writes all n bytes at fd, folding them into *sum. */
static bool write_all(int fd, const void *data, size_t n, uint64_t *sum)
{
    *sum = ck_checksum(*sum, data, n);
    int e = os_write_all(fd, data, n);
    errno = e; /* the caller names it */
    return e == 0;
}

/* The header's JSON for the tensors laid out back to back, space-padded to a multiple of 8 (the
 * format's alignment), or NULL with the error. */
static char *header_json(const char *path, int n, const ck_st_tensor *t, int nmeta, const char *const *meta,
                         size_t *len, char *err, size_t errlen)
{
    json_t *h = json_object(), *md = json_object();
    for (int i = 0; i < nmeta; i++)
        json_object_set_new(md, meta[2 * i], json_string(meta[2 * i + 1]));
    json_object_set_new(h, "__metadata__", md);
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        const char *dt = ck_st_dtype_name(t[i].type.dtype);
        if (!dt) {
            json_decref(h);
            return ck_fail(err, errlen, "%s: tensor %s: dtype %s has no safetensors name (F32, BF16, F16, I32, I64)",
                        path, t[i].name, ir_dtype_name(t[i].type.dtype)), NULL;
        }
        json_t *shape = json_array(), *e = json_object();
        for (int d = 0; d < t[i].type.ndim; d++)
            json_array_append_new(shape, json_integer(t[i].type.dims[d]));
        uint64_t end = at + ir_bytes(&t[i].type);
        json_object_set_new(e, "dtype", json_string(dt));
        json_object_set_new(e, "shape", shape);
        json_object_set_new(e, "data_offsets", json_pack("[II]", (json_int_t)at, (json_int_t)end));
        json_object_set_new(h, t[i].name, e);
        at = end;
    }
    char *text = json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(h);
    size_t l = strlen(text), padded = (l + 7) & ~(size_t)7;
    char *out = realloc(text, padded + 1);
    memset(out + l, ' ', padded - l);
    out[padded] = '\0';
    *len = padded;
    return out;
}

bool ck_st_write(const char *path, int n, const ck_st_tensor *t, int nmeta, const char *const *meta,
                 uint64_t *bytes, uint64_t *checksum, uint64_t *sums, char *err, size_t errlen)
{
    size_t len;
    char *header = header_json(path, n, t, nmeta, meta, &len, err, errlen);
    if (!header)
        return false;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        free(header);
        return ck_fail(err, errlen, "%s: cannot create: %s", path, strerror(errno));
    }
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)((uint64_t)len >> (8 * i));
    uint64_t head = CK_CHECKSUM_INIT, total = 8 + len;
    bool ok = write_all(fd, le, 8, &head) && write_all(fd, header, len, &head);
    uint64_t sum = head; /* the file's: the header's and each tensor's, combined (one pass over the bytes) */
    if (sums)
        sums[0] = head;
    for (int i = 0; ok && i < n; i++) {
        uint64_t ts = CK_CHECKSUM_INIT;
        size_t nb = ir_bytes(&t[i].type);
        void *made = t[i].data || !t[i].fill ? NULL : malloc(nb ? nb : 1);
        if (made && !t[i].fill(t[i].ctx, i, made, err, errlen)) {
            free(made);
            close(fd);
            free(header);
            return false;
        }
        ok = write_all(fd, made ? made : t[i].data, nb, &ts);
        free(made);
        sum = crc32_combine((uLong)sum, (uLong)ts, (z_off_t)nb);
        if (sums)
            sums[1 + i] = ts;
        total += nb;
    }
    ok = ok && fsync(fd) == 0;
    int e = errno;
    ok = close(fd) == 0 && ok;
    free(header);
    if (!ok)
        return ck_fail(err, errlen, "%s: cannot write: %s", path, strerror(e ? e : errno));
    if (bytes)
        *bytes = total;
    if (checksum)
        *checksum = sum;
    return true;
}

/* --- reading ------------------------------------------------------------------------------ */

/* Reads exactly n bytes at offset off. */
static bool read_at(int fd, void *out, size_t n, uint64_t off)
{
    char *s = out;
    while (n) {
        ssize_t r = pread(fd, s, n > (1u << 30) ? (1u << 30) : n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        s += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return true;
}

/* One header entry into e: dtype, shape and offsets, checked against each other. */
static bool parse_entry(const char *path, const char *name, json_t *v, ck_st_entry *e, char *err, size_t errlen)
{
    json_t *dt = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape"),
           *off = json_object_get(v, "data_offsets");
    if (!json_is_object(v) || !json_is_string(dt) || !json_is_array(shape) || !json_is_array(off) ||
        json_array_size(off) != 2)
        return ck_fail(err, errlen, "%s: tensor %s: the header entry needs \"dtype\", \"shape\" and "
                    "\"data_offsets\": [begin, end]", path, name);
    int d = ck_st_dtype_by_name(json_string_value(dt));
    if (d < 0)
        return ck_fail(err, errlen, "%s: tensor %s: dtype \"%s\" is not one mcc reads (F32, BF16, F16, I32, I64)", path,
                    name, json_string_value(dt));
    size_t nd = json_array_size(shape);
    if (nd > IR_MAX_DIMS)
        return ck_fail(err, errlen, "%s: tensor %s: %zu dimensions, mcc's tensors have at most %d", path, name, nd,
                    IR_MAX_DIMS);
    int64_t dims[IR_MAX_DIMS];
    for (size_t i = 0; i < nd; i++) {
        json_t *x = json_array_get(shape, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > ((int64_t)1 << 40))
            return ck_fail(err, errlen, "%s: tensor %s: shape entry %zu is not a size", path, name, i);
        dims[i] = json_integer_value(x);
    }
    json_t *b = json_array_get(off, 0), *en = json_array_get(off, 1);
    if (!json_is_integer(b) || !json_is_integer(en) || json_integer_value(b) < 0 ||
        json_integer_value(en) < json_integer_value(b))
        return ck_fail(err, errlen, "%s: tensor %s: data_offsets must be [begin, end] with 0 <= begin <= end", path,
                    name);
    e->type = ir_tensor((ir_dtype)d, (int)nd, dims);
    e->begin = (uint64_t)json_integer_value(b);
    e->end = (uint64_t)json_integer_value(en);
    char ts[96];
    ir_type_str(&e->type, ts, sizeof ts);
    if (e->end - e->begin != ir_bytes(&e->type))
        return ck_fail(err, errlen, "%s: tensor %s: %s makes %zu bytes, but data_offsets [%llu, %llu] "
                    "hold %llu", path, name, ts,
                    ir_bytes(&e->type), (unsigned long long)e->begin, (unsigned long long)e->end,
                    (unsigned long long)(e->end - e->begin));
    e->name = strdup(name);
    return true;
}

static int by_begin(const void *a, const void *b)
{
    const ck_st_entry *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end > y->end) - (x->end < y->end);
}

/* The entries, sorted by offset, must tile the data exactly: each begins where the one before
 * ends, the last ends at the file's end (the reference reader's rule). */
static bool check_tiling(const ck_st_file *f, char *err, size_t errlen)
{
    ck_st_entry *s = malloc(sizeof *s * (size_t)(f->n ? f->n : 1));
    memcpy(s, f->t, sizeof *s * (size_t)f->n);
    qsort(s, (size_t)f->n, sizeof *s, by_begin);
    uint64_t data = f->file_bytes - f->data_start, at = 0;
    bool ok = true;
    for (int i = 0; ok && i < f->n; i++) {
        if (s[i].begin < at)
            ok = ck_fail(err, errlen, "%s: tensor %s: data_offsets [%llu, %llu] overlap tensor %s's", f->path, s[i].name,
                      (unsigned long long)s[i].begin, (unsigned long long)s[i].end, s[i - 1].name);
        else if (s[i].begin > at)
            ok = ck_fail(err, errlen, "%s: tensor %s: data_offsets begin at %llu, leaving a gap after byte %llu", f->path,
                      s[i].name, (unsigned long long)s[i].begin, (unsigned long long)at);
        else if (s[i].end > data)
            ok = ck_fail(err, errlen, "%s: the file is truncated: tensor %s ends at byte %llu of the data, which holds %llu "
                      "bytes", f->path, s[i].name, (unsigned long long)s[i].end, (unsigned long long)data);
        at = s[i].end;
    }
    if (ok && at != data)
        ok = ck_fail(err, errlen, "%s: %llu bytes after the last tensor's data: the header does not describe the file",
                  f->path, (unsigned long long)(data - at));
    free(s);
    return ok;
}

static bool parse_header(ck_st_file *f, const char *text, size_t len, char *err, size_t errlen)
{
    json_error_t je;
    json_t *h = json_loadb(text, len, 0, &je);
    if (!h || !json_is_object(h)) {
        ck_fail(err, errlen, "%s: the header is not a JSON object (%s, at byte %d of the header)", f->path,
             h ? "another JSON value" : je.text, h ? 0 : je.position);
        json_decref(h);
        return false;
    }
    f->t = calloc(json_object_size(h) + 1, sizeof *f->t);
    const char *key;
    json_t *v;
    bool ok = true;
    json_object_foreach(h, key, v) {
        if (!strcmp(key, "__metadata__")) {
            if (!json_is_object(v)) {
                ok = ck_fail(err, errlen, "%s: __metadata__ must be an object of strings", f->path);
                break;
            }
            f->meta = calloc(2 * json_object_size(v) + 1, sizeof *f->meta);
            const char *mk;
            json_t *mv;
            json_object_foreach(v, mk, mv) {
                if (!json_is_string(mv)) {
                    ok = ck_fail(err, errlen, "%s: __metadata__ \"%s\" is not a string", f->path, mk);
                    break;
                }
                f->meta[2 * f->nmeta] = strdup(mk);
                f->meta[2 * f->nmeta++ + 1] = strdup(json_string_value(mv));
            }
            if (!ok)
                break;
            continue;
        }
        if (!(ok = parse_entry(f->path, key, v, &f->t[f->n], err, errlen)))
            break;
        f->n++;
    }
    json_decref(h);
    return ok && check_tiling(f, err, errlen);
}

bool ck_st_open(ck_st_file *f, const char *path, const uint64_t *header_sum, char *err, size_t errlen)
{
    *f = (ck_st_file){.path = strdup(path), .fd = open(path, O_RDONLY | O_CLOEXEC)};
    struct stat st;
    if (f->fd < 0 || fstat(f->fd, &st) != 0) {
        ck_fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return ck_st_close(f), false;
    }
    f->file_bytes = (uint64_t)st.st_size;
    unsigned char le[8];
    if (f->file_bytes < 8 || !read_at(f->fd, le, 8, 0)) {
        ck_fail(err, errlen, "%s: the file is truncated: %llu bytes, less than the 8-byte header length", path,
             (unsigned long long)f->file_bytes);
        return ck_st_close(f), false;
    }
    uint64_t len = 0;
    for (int i = 0; i < 8; i++)
        len |= (uint64_t)le[i] << (8 * i);
    if (len > f->file_bytes - 8 || len > CK_ST_MAX_HEADER) {
        ck_fail(err, errlen, "%s: the header length %llu runs past the end of the file (%llu bytes): truncated or not a "
             "safetensors file", path, (unsigned long long)len, (unsigned long long)f->file_bytes);
        return ck_st_close(f), false;
    }
    f->data_start = 8 + len;
    char *text = malloc(len + 1);
    bool ok = read_at(f->fd, text, len, 8);
    if (!ok)
        ck_fail(err, errlen, "%s: cannot read the header: %s", path, strerror(errno));
    f->header_sum = ck_checksum(ck_checksum(CK_CHECKSUM_INIT, le, 8), text, ok ? len : 0);
    if (ok && header_sum && f->header_sum != *header_sum) /* before parsing: a corrupt header is named as such */
        ok = ck_fail(err, errlen, "%s: checksum mismatch in the header: its CRC-32 is %016llx, its record says %016llx: "
                     "the file is corrupt", path, (unsigned long long)f->header_sum, (unsigned long long)*header_sum);
    ok = ok && parse_header(f, text, len, err, errlen);
    free(text);
    if (!ok)
        ck_st_close(f);
    return ok;
}

int ck_st_find(const ck_st_file *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->t[i].name, name))
            return i;
    return -1;
}

const char *ck_st_meta(const ck_st_file *f, const char *key)
{
    for (int i = 0; i < f->nmeta; i++)
        if (!strcmp(f->meta[2 * i], key))
            return f->meta[2 * i + 1];
    return NULL;
}

bool ck_st_read(const ck_st_file *f, int i, void *out, char *err, size_t errlen)
{
    const ck_st_entry *e = &f->t[i];
    if (!read_at(f->fd, out, e->end - e->begin, f->data_start + e->begin))
        return ck_fail(err, errlen, "%s: tensor %s: cannot read its %llu bytes: %s", f->path, e->name,
                    (unsigned long long)(e->end - e->begin), errno ? strerror(errno) : "the file was truncated");
    return true;
}

void ck_st_close(ck_st_file *f)
{
    if (f->fd >= 0)
        close(f->fd);
    for (int i = 0; i < f->n; i++)
        free(f->t[i].name);
    for (int i = 0; i < 2 * f->nmeta; i++)
        free(f->meta[i]);
    free(f->t);
    free(f->meta);
    free(f->path);
    *f = (ck_st_file){.fd = -1};
}

bool ck_checksum_file(const char *path, uint64_t *sum, uint64_t *bytes, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ck_fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 20;
    char *buf = malloc(cap);
    uint64_t h = CK_CHECKSUM_INIT, n = 0;
    ssize_t r;
    while ((r = read(fd, buf, cap)) != 0) {
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            break;
        h = ck_checksum(h, buf, (size_t)r);
        n += (uint64_t)r;
    }
    int e = errno;
    free(buf);
    close(fd);
    if (r < 0)
        return ck_fail(err, errlen, "%s: cannot read: %s", path, strerror(e));
    *sum = h;
    *bytes = n;
    return true;
}
