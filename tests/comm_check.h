/* comm_check.h — the collective checks shared by comm_test (MPI, host memory) and
 * gpu/comm_nccl_test (NCCL, device memory): every collective of comm.h on one group, f32 or
 * bf16, against exact expected values; and point to point between neighbours, every rank sending
 * all its messages before it receives any. Test-only; static functions. */
#ifndef MCC_TESTS_COMM_CHECK_H
#define MCC_TESTS_COMM_CHECK_H

#include "runtime/comm.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"

/* Where the collectives' buffers live: host memory for MPI, device memory for NCCL. */
typedef struct {
    void *(*alloc)(size_t bytes);
    void (*free)(void *p);
    void (*to_dev)(void *dst, const void *src, size_t bytes);
    void (*to_host)(void *dst, const void *src, size_t bytes);
    void (*sync)(void *stream); /* waits for what was enqueued on stream */
    void *stream;
} comm_check_mem;

static uint16_t check_to_bf16(float f) /* exact for the small integers used here */
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

static float check_from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* What world rank w contributes at element i: small integers, exact in bf16 when summed. */
static float check_contrib(int w, size_t i) { return (float)((w + 1) * (int)(i % 8 + 1)); }

static void check_set(void *buf, ir_dtype dt, size_t i, float v)
{
    if (dt == IR_F32)
        ((float *)buf)[i] = v;
    else
        ((uint16_t *)buf)[i] = check_to_bf16(v);
}

static float check_get(const void *buf, ir_dtype dt, size_t i)
{
    return dt == IR_F32 ? ((const float *)buf)[i] : check_from_bf16(((const uint16_t *)buf)[i]);
}

static float check_reduce(const int *members, int n, size_t i, rt_reduce_op op)
{
    float acc = check_contrib(members[0], i);
    for (int k = 1; k < n; k++)
        acc = op == RT_SUM ? acc + check_contrib(members[k], i)
                           : (check_contrib(members[k], i) > acc ? check_contrib(members[k], i) : acc);
    return acc;
}

/* host[count] = check_contrib(w, i), or `fill` for every element when w < 0; then to dev. */
static void check_upload(const comm_check_mem *mem, void *dev, void *host, ir_dtype dt, size_t count, int w, float fill)
{
    for (size_t i = 0; i < count; i++)
        check_set(host, dt, i, w < 0 ? fill : check_contrib(w, i));
    mem->to_dev(dev, host, count * ir_dtype_size(dt));
}

static void check_download(const comm_check_mem *mem, void *host, const void *dev, ir_dtype dt, size_t count)
{
    mem->sync(mem->stream);
    mem->to_host(host, dev, count * ir_dtype_size(dt));
}

/* Every collective on group g, whose members (world ranks, by group rank) are given. */
static void check_group(const comm_check_mem *mem, rt_comm *g, const int *members, int n, ir_dtype dt, size_t count)
{
    const char *what = rt_comm_name(g), *tn = ir_dtype_name(dt);
    int me = rt_comm_rank(g), w = members[me], root = n - 1;
    size_t bytes = ir_dtype_size(dt) * count * (size_t)n;
    CHECK(rt_comm_size(g) == n, "%s: size %d, want %d", what, rt_comm_size(g), n);
    for (int k = 0; k < n; k++)
        CHECK(rt_comm_world_rank(g, k) == members[k], "%s: member %d is world rank %d, want %d", what, k,
              rt_comm_world_rank(g, k), members[k]);
    char *h = malloc(bytes), *a = mem->alloc(bytes), *b = mem->alloc(bytes);
    for (int op = RT_SUM; op <= RT_MAX; op++) {
        check_upload(mem, a, h, dt, count, w, 0);
        rt_all_reduce(g, a, count, dt, (rt_reduce_op)op, mem->stream);
        check_download(mem, h, a, dt, count);
        for (size_t i = 0; i < count; i++)
            CHECK(check_get(h, dt, i) == check_reduce(members, n, i, (rt_reduce_op)op),
                  "%s %s all_reduce op %d [%zu]: %g, want %g", what, tn, op, i, check_get(h, dt, i),
                  check_reduce(members, n, i, (rt_reduce_op)op));
    }
    check_upload(mem, a, h, dt, count, w, 0);
    rt_all_gather(g, a, b, count, dt, mem->stream); /* b[n * count] */
    check_download(mem, h, b, dt, count * (size_t)n);
    for (int k = 0; k < n; k++)
        for (size_t i = 0; i < count; i++)
            CHECK(check_get(h, dt, k * count + i) == check_contrib(members[k], i), "%s %s all_gather block %d [%zu]: %g",
                  what, tn, k, i, check_get(h, dt, k * count + i));
    check_upload(mem, a, h, dt, count * (size_t)n, w, 0); /* a[n * count]: element j is contrib(w, j) */
    rt_reduce_scatter(g, a, b, count, dt, RT_SUM, mem->stream); /* b[count] = block `me` of the sum */
    check_download(mem, h, b, dt, count);
    for (size_t i = 0; i < count; i++)
        CHECK(check_get(h, dt, i) == check_reduce(members, n, me * count + i, RT_SUM),
              "%s %s reduce_scatter [%zu]: %g, want %g", what, tn, i, check_get(h, dt, i),
              check_reduce(members, n, me * count + i, RT_SUM));
    check_upload(mem, a, h, dt, count * (size_t)n, w, 0); /* block q goes to member q */
    rt_all_to_all(g, a, b, count, dt, mem->stream);        /* block k of b: member k's block `me` */
    check_download(mem, h, b, dt, count * (size_t)n);
    for (int k = 0; k < n; k++)
        for (size_t i = 0; i < count; i++)
            CHECK(check_get(h, dt, k * count + i) == check_contrib(members[k], me * count + i),
                  "%s %s all_to_all block %d [%zu]: %g, want %g", what, tn, k, i, check_get(h, dt, k * count + i),
                  check_contrib(members[k], me * count + i));
    check_upload(mem, a, h, dt, count, w, 0);
    rt_ring_shift(g, a, b, count, dt, mem->stream); /* b: member me - 1's (group order, around the ring) */
    check_download(mem, h, b, dt, count);
    for (size_t i = 0, prev = (size_t)members[(me + n - 1) % n]; i < count; i++)
        CHECK(check_get(h, dt, i) == check_contrib((int)prev, i), "%s %s ring_shift [%zu]: %g, want world rank %zu's %g",
              what, tn, i, check_get(h, dt, i), prev, check_contrib((int)prev, i));
    check_upload(mem, a, h, dt, count, me == root ? w : -1, -1);
    rt_broadcast(g, a, count, dt, root, mem->stream);
    check_download(mem, h, a, dt, count);
    for (size_t i = 0; i < count; i++)
        CHECK(check_get(h, dt, i) == check_contrib(members[root], i), "%s %s broadcast [%zu]: %g", what, tn, i,
              check_get(h, dt, i));
    rt_barrier(g);
    mem->free(a);
    mem->free(b);
    free(h);
}

/* ---- variable all-to-all -------------------------------------------------------------------- */

/* Rows member s sends member q in run j (of n members): uneven, often zero; case 1 also empties
 * everything member 0 sends and everything member n-1 receives, case 2 every run. */
static int64_t check_a2av_rows(int s, int q, int j, int n, int kase)
{
    if (kase == 2 || (kase == 1 && (s == 0 || q == n - 1)))
        return 0;
    return (s * 3 + q * 5 + j * 7 + kase) % 4;
}

/* Element e of row r of run j from s to q: an integer below 256, exact in bf16. */
static float check_a2av_value(int s, int q, int j, int64_t r, size_t e)
{
    return (float)((s * 131 + q * 37 + j * 11 + (int)r * 5 + (int)e) % 251);
}

/* rt_all_to_all_v on group g with `splits` runs a member and rows of `row` elements, into a
 * buffer of the exact worst case (every member's most rows) plus 4 rows that must stay untouched. */
static void check_all_to_all_v(const comm_check_mem *mem, rt_comm *g, ir_dtype dt, int splits, size_t row, int kase)
{
    int n = rt_comm_size(g), me = rt_comm_rank(g);
    const char *what = rt_comm_name(g), *tn = ir_dtype_name(dt);
    size_t es = ir_dtype_size(dt), cap = (size_t)n * (size_t)splits * 3, sent = 0, want_total = 0;
    int64_t *ss = malloc(sizeof(int64_t) * 2 * (size_t)n * (size_t)splits), *rs = ss + n * splits;
    for (int q = 0; q < n; q++)
        for (int j = 0; j < splits; j++) {
            ss[q * splits + j] = check_a2av_rows(me, q, j, n, kase);
            rs[q * splits + j] = -7;
            sent += (size_t)ss[q * splits + j];
            want_total += (size_t)check_a2av_rows(q, me, j, n, kase);
        }
    size_t sbytes = (sent ? sent : 1) * row * es, rbytes = (cap + 4) * row * es;
    char *h = malloc(sbytes > rbytes ? sbytes : rbytes), *a = mem->alloc(sbytes), *b = mem->alloc(rbytes);
    size_t k = 0;
    for (int q = 0; q < n; q++)
        for (int j = 0; j < splits; j++)
            for (int64_t r = 0; r < ss[q * splits + j]; r++)
                for (size_t e = 0; e < row; e++)
                    check_set(h, dt, k++, check_a2av_value(me, q, j, r, e));
    mem->to_dev(a, h, sent * row * es);
    check_upload(mem, b, h, dt, (cap + 4) * row, -1, -1);
    size_t got = rt_all_to_all_v(g, a, ss, b, rs, splits, cap, row, dt, mem->stream);
    check_download(mem, h, b, dt, (cap + 4) * row);
    CHECK(got == want_total, "%s %s all_to_all_v case %d: %zu rows received, want %zu", what, tn, kase, got, want_total);
    size_t bad = 0;
    k = 0;
    for (int q = 0; q < n; q++)
        for (int j = 0; j < splits; j++) {
            int64_t rows = check_a2av_rows(q, me, j, n, kase);
            CHECK(rs[q * splits + j] == rows, "%s all_to_all_v case %d: member %d says %lld rows of run %d, want %lld",
                  what, kase, q, (long long)rs[q * splits + j], j, (long long)rows);
            for (int64_t r = 0; r < rows; r++)
                for (size_t e = 0; e < row; e++, k++)
                    if (check_get(h, dt, k) != check_a2av_value(q, me, j, r, e) && bad++ == 0)
                        CHECK(0, "%s %s all_to_all_v case %d: member %d's run %d row %lld [%zu] at row %zu: %g, want %g",
                              what, tn, kase, q, j, (long long)r, e, k / row, check_get(h, dt, k),
                              check_a2av_value(q, me, j, r, e));
        }
    for (; k < (cap + 4) * row; k++)
        if (check_get(h, dt, k) != -1.0f && bad++ == 0)
            CHECK(0, "%s %s all_to_all_v case %d: row %zu past the %zu received was written", what, tn, kase, k / row,
                  want_total);
    mem->free(a);
    mem->free(b);
    free(h);
    free(ss);
}

/* ---- point to point ------------------------------------------------------------------------- */

/* Element i of message k from member s: a small integer, exact in bf16, that tells messages apart. */
static float check_p2p_value(int s, int k, size_t i) { return (float)((s * 8 + k) % 64 + (int)(i % 3)); }

/* host[count] := check_p2p_value(s, k, i), or -1 everywhere when s < 0 (f32, bf16, i32); then to dev. */
static void check_p2p_upload(const comm_check_mem *mem, void *dev, void *host, ir_dtype dt, size_t count, int s, int k)
{
    for (size_t i = 0; i < count; i++) {
        float v = s < 0 ? -1.0f : check_p2p_value(s, k, i);
        if (dt == IR_I32)
            ((int32_t *)host)[i] = (int32_t)v;
        else
            check_set(host, dt, i, v);
    }
    mem->to_dev(dev, host, count * ir_dtype_size(dt));
}

static float check_p2p_get(const void *host, ir_dtype dt, size_t i)
{
    return dt == IR_I32 ? (float)((const int32_t *)host)[i] : check_get(host, dt, i);
}

/* Receives message k (count + k elements) from member `from` into a buffer 4 elements longer,
 * and checks its values, that the 4 after it are untouched (the dtype's size), and so its order. */
static void check_p2p_recv(const comm_check_mem *mem, rt_comm *g, ir_dtype dt, size_t count, int from, int k)
{
    size_t n = count + (size_t)k, bytes = (n + 4) * ir_dtype_size(dt);
    char *h = malloc(bytes), *d = mem->alloc(bytes);
    check_p2p_upload(mem, d, h, dt, n + 4, -1, 0);
    rt_recv(g, d, n, dt, from, mem->stream);
    check_download(mem, h, d, dt, n + 4);
    size_t bad = 0;
    for (size_t i = 0; i < n + 4; i++) {
        float want = i < n ? check_p2p_value(from, k, i) : -1.0f;
        if (check_p2p_get(h, dt, i) != want && bad++ == 0)
            CHECK(0, "%s %s: message %d from member %d, element %zu of %zu (+4 untouched): %g, want %g",
                  rt_comm_name(g), ir_dtype_name(dt), k, from, i, n, check_p2p_get(h, dt, i), want);
    }
    mem->free(d);
    free(h);
}

/* Point to point on group g: every member first sends `nmsg` messages (message k: count + k
 * elements of dt, from one buffer overwritten after each send) to its next member around the
 * ring (`ring`), or to both neighbours along a chain (first and last members have one), and only
 * then receives them, checking order and contents. With sends that waited for their receiver,
 * every member would wait in its first send. Then flush: no staging left. */
static void check_p2p(const comm_check_mem *mem, rt_comm *g, bool ring, ir_dtype dt, size_t count, int nmsg)
{
    int n = rt_comm_size(g), me = rt_comm_rank(g), next = (me + 1) % n, prev = (me + n - 1) % n;
    bool to_next = ring || me < n - 1, to_prev = !ring && me > 0; /* a chain: me - 1 and me + 1 */
    bool from_prev = to_prev || ring, from_next = !ring && to_next;
    size_t bytes = (count + (size_t)nmsg) * ir_dtype_size(dt);
    char *h = malloc(bytes), *d = mem->alloc(bytes);
    for (int k = 0; k < nmsg; k++) {
        check_p2p_upload(mem, d, h, dt, count + (size_t)k, me, k);
        if (to_next)
            rt_send(g, d, count + (size_t)k, dt, next, mem->stream);
        if (to_prev)
            rt_send(g, d, count + (size_t)k, dt, prev, mem->stream);
    }
    check_p2p_upload(mem, d, h, dt, count + (size_t)nmsg, -1, 0); /* the sends copied what they send */
    CHECK(rt_p2p_staged_bytes(g) > 0, "%s: sends not yet received hold no staging", rt_comm_name(g));
    for (int k = 0; k < nmsg; k++)
        if (from_prev)
            check_p2p_recv(mem, g, dt, count, prev, k);
    for (int k = 0; k < nmsg; k++)
        if (from_next)
            check_p2p_recv(mem, g, dt, count, next, k);
    rt_p2p_flush(g, mem->stream);
    CHECK(rt_p2p_staged_bytes(g) == 0, "%s: %zu bytes of staging after rt_p2p_flush", rt_comm_name(g),
          rt_p2p_staged_bytes(g));
    mem->free(d);
    free(h);
}

#endif
