/* safetensors_test.c — checkpoint/safetensors.c: a file written reads back exactly (and its
 * header is what the format's spec says), and each crafted bad file gets its own error naming the
 * file and the tensor. Usage: safetensors_test DIR */
#include "checkpoint/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define CHECK(cond, ...)                                                                                   \
    do {                                                                                                   \
        if (!(cond)) {                                                                                     \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                           \
            fprintf(stderr, __VA_ARGS__);                                                                  \
            fprintf(stderr, "\n");                                                                         \
            failures++;                                                                                    \
        }                                                                                                  \
    } while (0)

/* A file of a header text (its length prefixed) and n data bytes. */
static void craft(const char *path, const char *header, size_t n)
{
    FILE *f = fopen(path, "wb");
    uint64_t len = strlen(header);
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)(len >> (8 * i));
    fwrite(le, 1, 8, f);
    fwrite(header, 1, len, f);
    for (size_t i = 0; i < n; i++)
        fputc((int)i, f);
    fclose(f);
}

/* path must fail to open with an error naming the file and holding every one of want[]. */
static void expect_error(const char *path, const char *what, const char *const *want)
{
    ck_st_file f;
    char err[1024];
    if (ck_st_open(&f, path, NULL, err, sizeof err)) {
        CHECK(0, "%s: opened, expected an error", what);
        ck_st_close(&f);
        return;
    }
    CHECK(strstr(err, path) != NULL, "%s: the error does not name the file: %s", what, err);
    for (; *want; want++)
        CHECK(strstr(err, *want) != NULL, "%s: the error lacks \"%s\": %s", what, *want, err);
    printf("%-28s %s\n", what, err);
}

static void roundtrip(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/good.safetensors", dir);
    float a[6] = {1, 2, 3, 4, 5, 6};
    int64_t b[2] = {-7, 1LL << 40};
    const int64_t da[2] = {2, 3}, db[1] = {2};
    ck_st_tensor t[2] = {{"layers.0.w", ir_tensor(IR_F32, 2, da), a, NULL, NULL},
                        {"step", ir_tensor(IR_I64, 1, db), b, NULL, NULL}};
    const char *meta[2] = {"format", "pt"};
    char err[1024];
    uint64_t bytes, sum, fsum, fbytes;
    CHECK(ck_st_write(path, 2, t, 1, meta, &bytes, &sum, NULL, err, sizeof err), "write: %s", err);
    CHECK(ck_checksum_file(path, &fsum, &fbytes, err, sizeof err) && fsum == sum && fbytes == bytes,
          "the checksum written is not the file's");
    ck_st_file f;
    if (!ck_st_open(&f, path, NULL, err, sizeof err)) {
        CHECK(0, "open: %s", err);
        return;
    }
    CHECK(f.n == 2 && f.data_start % 8 == 0, "2 tensors, data aligned to 8 (%d, %llu)", f.n,
          (unsigned long long)f.data_start);
    CHECK(f.data_start + sizeof a + sizeof b == bytes, "the file is header + data");
    CHECK(ck_st_meta(&f, "format") && !strcmp(ck_st_meta(&f, "format"), "pt"), "metadata");
    int i = ck_st_find(&f, "layers.0.w"), j = ck_st_find(&f, "step");
    float ra[6];
    int64_t rb[2];
    CHECK(i >= 0 && j >= 0 && ck_st_read(&f, i, ra, err, sizeof err) && ck_st_read(&f, j, rb, err, sizeof err),
          "read: %s", err);
    CHECK(!memcmp(ra, a, sizeof a) && !memcmp(rb, b, sizeof b), "the tensors read back differ");
    CHECK(f.t[i].type.ndim == 2 && f.t[i].type.dims[1] == 3 && f.t[j].type.dtype == IR_I64, "shape and dtype");
    ck_st_close(&f);
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return fprintf(stderr, "usage: safetensors_test DIR\n"), 2;
    const char *dir = argv[1];
    roundtrip(dir);
    char path[4096];
    static const struct {
        const char *what, *header;
        size_t data;
        const char *want[4];
    } bad[] = {
        {"bad JSON", "{\"w\": {\"dtype\": \"F32\",", 0, {"not a JSON object"}},
        {"unknown dtype", "{\"w\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, {"tensor w", "Q4"}},
        {"size disagrees with shape", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 20,
         {"tensor w", "24 bytes", "hold 20"}},
        {"offsets past the data", "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8,
         {"truncated", "tensor w"}},
        {"overlapping offsets",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, {"overlap", "tensor b"}},
        {"a gap between tensors", "{\"a\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
         {"gap", "tensor a"}},
        {"bytes after the data", "{\"a\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 9,
         {"after the last tensor"}},
        {"missing data_offsets", "{\"a\":{\"dtype\":\"I32\",\"shape\":[1]}}", 4, {"tensor a", "data_offsets"}},
        {"bad metadata", "{\"__metadata__\":{\"k\":3}}", 0, {"__metadata__"}},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        snprintf(path, sizeof path, "%s/bad%zu.safetensors", dir, k);
        craft(path, bad[k].header, bad[k].data);
        expect_error(path, bad[k].what, bad[k].want);
    }
    /* a header length past the end of the file, and a file shorter than the length itself */
    snprintf(path, sizeof path, "%s/len.safetensors", dir);
    FILE *f = fopen(path, "wb");
    fwrite("\xff\x00\x00\x00\x00\x00\x00\x00{}", 1, 10, f);
    fclose(f);
    expect_error(path, "header length past the end", (const char *const[]){"header length 255", NULL});
    snprintf(path, sizeof path, "%s/short.safetensors", dir);
    f = fopen(path, "wb");
    fwrite("\x02\x00\x00", 1, 3, f);
    fclose(f);
    expect_error(path, "shorter than 8 bytes", (const char *const[]){"truncated", NULL});
    snprintf(path, sizeof path, "%s/absent.safetensors", dir);
    expect_error(path, "no file", (const char *const[]){"cannot open", NULL});
    if (failures)
        fprintf(stderr, "%d failures\n", failures);
    return failures != 0;
}
