/* cache.h — mcc's on-disk cache of compiled kernels: NVRTC's cubins (codegen/cuda/nvrtc.c) and the
 * CPU's kernel object (codegen/cpu_kernels_llvm.c), each file named by a hash of what made it, so
 * an entry is never stale, only unused. The directory: $MCC_CACHE_DIR, else $XDG_CACHE_HOME/mcc,
 * else ~/.cache/mcc. */
#ifndef MCC_CACHE_H
#define MCC_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { CACHE_NAME_MAX = 4096 }; /* room for an entry's path */

/* FNV-1a over n bytes, continuing from h (start with CACHE_HASH_SEED). */
#define CACHE_HASH_SEED 1469598103934665603ull
uint64_t cache_hash(uint64_t h, const void *data, size_t n);

/* The path of the cache entry PREFIX-<hash>.EXT in out[len], the directory made where missing (a
 * cache that cannot be made is noted when an entry is written). */
void cache_entry(char *out, size_t len, const char *prefix, uint64_t hash, const char *ext);

/* Writes the entry whole under a temporary name and renames it into place, so that concurrent
 * compiles never read half a file. False, with a note on stderr naming `what` and the fix, when it
 * cannot: the next compile then makes it again. */
bool cache_write(const char *path, const void *data, size_t size, const char *what);

#endif
