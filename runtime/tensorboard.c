/* tensorboard.c — TensorBoard event files, written by hand (see tensorboard.h): the format is tiny
 * and Debian packages no C library for it (TensorFlow's writer is C++, tensorboard's Python).
 * A file is a sequence of TFRecords, each holding one protobuf Event
 * (tensorflow/core/lib/io/record_writer.cc, tensorflow/core/util/event.proto, summary.proto):
 *
 *   TFRecord  uint64 length | uint32 masked crc32c(length) | data[length] | uint32 masked crc32c(data)
 *             little-endian; masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8
 *   Event     1 wall_time double | 2 step int64 | 3 file_version string (first record: "brain.Event:2")
 *                                               | 5 summary Summary (every other record)
 *   Summary   1 value Value (repeated; one per record here)
 *   Value     1 tag string | 2 simple_value float                                                  */
#include "tensorboard.h"
#include "common/os.h"
#include "metrics.h" /* rt_append_whole */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Megatron's longest tags are ~35 bytes; the bound keeps a record in a stack buffer: 12 (length,
 * crc) + Event (9 wall_time + 11 step + 3 key/length + Summary (3 + Value (3 + tag + 5))) + 4. */
enum { TB_MAX_TAG = 256, TB_MAX_RECORD = 12 + 9 + 11 + 3 + 3 + 3 + TB_MAX_TAG + 5 + 4, TB_MAX_PATH = 4096 };

struct rt_tb {
    int fd;
    char path[TB_MAX_PATH];
};

/* CRC-32C (Castagnoli: reflected polynomial 0x82f63b78), one table lookup per byte. */
static uint32_t crc32c(const uint8_t *p, size_t n)
{
    static uint32_t table[256];
    if (!table[1])
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
            table[i] = c;
        }
    uint32_t c = ~0u;
    while (n--)
        c = table[(c ^ *p++) & 0xff] ^ (c >> 8);
    return ~c;
}

/* TFRecord masks its CRCs so that a CRC of bytes which themselves hold CRCs stays strong. */
static uint32_t masked_crc(const uint8_t *p, size_t n)
{
    uint32_t c = crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static uint8_t *put_le(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        *p++ = (uint8_t)(v >> 8 * i);
    return p;
}

static uint8_t *put_varint(uint8_t *p, uint64_t v)
{
    for (; v >= 0x80; v >>= 7)
        *p++ = (uint8_t)(v | 0x80);
    *p++ = (uint8_t)v;
    return p;
}

/* A protobuf key: field number and wire type (0 varint, 1 64-bit, 2 length-delimited, 5 32-bit). */
static uint8_t *put_key(uint8_t *p, int field, int wire_type) { return put_varint(p, (uint64_t)field << 3 | wire_type); }

static uint8_t *put_bytes(uint8_t *p, int field, const void *data, size_t n)
{
    p = put_varint(put_key(p, field, 2), n);
    memcpy(p, data, n);
    return p + n;
}

/* Appends the Event {wall_time: now, step, field: payload} as one TFRecord. */
static bool write_event(rt_tb *tb, int64_t step, int field, const uint8_t *payload, size_t n, char *err,
                        size_t errlen)
{
    uint8_t rec[TB_MAX_RECORD], *data = rec + 12, *p;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    double wall = (double)now.tv_sec + now.tv_nsec * 1e-9;
    uint64_t wall_bits;
    memcpy(&wall_bits, &wall, sizeof wall_bits);
    p = put_le(put_key(data, 1, 1), wall_bits, 8);
    p = put_varint(put_key(p, 2, 0), (uint64_t)step);
    p = put_bytes(p, field, payload, n);
    size_t len = (size_t)(p - data);
    put_le(rec, len, 8);
    put_le(rec + 8, masked_crc(rec, 8), 4);
    p = put_le(p, masked_crc(data, len), 4);
    bool cut;
    int e = rt_append_whole(tb->fd, rec, (size_t)(p - rec), &cut);
    if (e)
        snprintf(err, errlen, "TensorBoard event file %s: cannot write: %s%s", tb->path, strerror(e),
                 cut ? "" : " (and the part of the record written stays at its end)");
    return !e;
}

rt_tb *rt_tb_open(const char *dir, char *err, size_t errlen)
{
    static int opened; /* <n> of the name: this process's writers so far, as TensorFlow counts them */
    static const char version[] = "brain.Event:2";
    char why[4200];
    if (!os_mkdirs(dir, why, sizeof why)) {
        snprintf(err, errlen, "TensorBoard: %s", why);
        return NULL;
    }
    char host[256] = {0};
    if (gethostname(host, sizeof host - 1) != 0)
        strcpy(host, "localhost");
    rt_tb *tb = calloc(1, sizeof *tb);
    if (!tb) {
        snprintf(err, errlen, "TensorBoard directory %s: out of memory", dir);
        return NULL;
    }
    int len = snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%010lld.%s.%d.%d", dir,
                       (long long)time(NULL), host, (int)getpid(), opened++);
    tb->fd = len < (int)sizeof tb->path ? open(tb->path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0666) : -1;
    if (tb->fd < 0) {
        snprintf(err, errlen, "cannot create TensorBoard event file %s: %s", tb->path,
                 len < (int)sizeof tb->path ? strerror(errno) : "path too long");
        free(tb);
        return NULL;
    }
    if (!write_event(tb, 0, 3, (const uint8_t *)version, sizeof version - 1, err, errlen)) {
        unlink(tb->path);
        rt_tb_close(tb);
        return NULL;
    }
    return tb;
}

const char *rt_tb_path(const rt_tb *tb) { return tb->path; }

bool rt_tb_scalar(rt_tb *tb, const char *tag, int64_t step, double value, char *err, size_t errlen)
{
    size_t n = strlen(tag);
    if (n > TB_MAX_TAG) {
        snprintf(err, errlen, "TensorBoard event file %s: tag '%.40s...' is longer than %d bytes", tb->path, tag,
                 TB_MAX_TAG);
        return false;
    }
    uint8_t v[TB_MAX_TAG + 16], summary[TB_MAX_TAG + 32];
    float f = (float)value;
    uint32_t f_bits;
    memcpy(&f_bits, &f, sizeof f_bits);
    uint8_t *end = put_le(put_key(put_bytes(v, 1, tag, n), 2, 5), f_bits, 4);
    end = put_bytes(summary, 1, v, (size_t)(end - v));
    return write_event(tb, step, 5, summary, (size_t)(end - summary), err, errlen);
}

void rt_tb_close(rt_tb *tb)
{
    if (!tb)
        return;
    close(tb->fd);
    free(tb);
}
