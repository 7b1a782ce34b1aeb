/* fuzz.h — what the libFuzzer targets of tests/fuzz/ share: an input that holds several files, and
 * a scratch directory to write them to (the readers under test take paths, as mcc's users give them).
 *
 * An input of several files is their bytes joined by FUZZ_SEP, a line of its own that no JSON or IR
 * text holds:  part 0 \n%%\n part 1 \n%%\n part 2 ...  (seeds.py writes the seeds so). */
#ifndef MCC_FUZZ_H
#define MCC_FUZZ_H

#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FUZZ_SEP "\n%%\n"
#define FUZZ_MAX_PARTS 16

typedef struct {
    const uint8_t *data;
    size_t size;
} fuzz_part;

/* Splits data at each FUZZ_SEP into at most max parts (the last takes the rest); returns how many. */
static inline int fuzz_split(const uint8_t *data, size_t size, fuzz_part *parts, int max)
{
    const size_t sep = sizeof FUZZ_SEP - 1;
    int n = 0;
    while (n < max - 1) {
        const uint8_t *at = size >= sep ? memmem(data, size, FUZZ_SEP, sep) : NULL;
        if (!at)
            break;
        parts[n++] = (fuzz_part){data, (size_t)(at - data)};
        size -= (size_t)(at - data) + sep;
        data = at + sep;
    }
    parts[n++] = (fuzz_part){data, size};
    return n;
}

/* A NUL-terminated copy of p (malloc'd). */
static inline char *fuzz_text(fuzz_part p)
{
    char *s = malloc(p.size + 1);
    memcpy(s, p.data, p.size);
    s[p.size] = 0;
    return s;
}

static char fuzz_dir_path[64];

static inline int fuzz_remove(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path), 0;
}

static inline void fuzz_dir_remove(void) { nftw(fuzz_dir_path, fuzz_remove, 8, FTW_DEPTH | FTW_PHYS); }

/* This process's scratch directory, made once and removed at exit (a crash leaves it: the input
 * that crashed is in libFuzzer's artifact, the directory only its last files). */
static inline const char *fuzz_dir(void)
{
    if (!fuzz_dir_path[0]) {
        snprintf(fuzz_dir_path, sizeof fuzz_dir_path, "%s/mcc-fuzz-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        if (!mkdtemp(fuzz_dir_path)) {
            perror("mkdtemp");
            abort();
        }
        atexit(fuzz_dir_remove);
    }
    return fuzz_dir_path;
}

/* Writes p to DIR/name (DIR: fuzz_dir()); the path into path. */
static inline void fuzz_write(const char *name, fuzz_part p, char *path, size_t len)
{
    snprintf(path, len, "%s/%s", fuzz_dir(), name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p.data, 1, p.size, f) != p.size || fclose(f)) {
        perror(path);
        abort();
    }
}

#endif
