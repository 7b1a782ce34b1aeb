/* device.h — where a plan runs: memory, data movement, parameter initialisation and function
 * execution behind one small table, implemented for the CPU (cpu_device.c) and CUDA
 * (cuda/cuda_device.c). The plan object names its device (mcc_plan_device). */
#ifndef MCC_RT_DEVICE_H
#define MCC_RT_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/comm.h"

struct rt_program;

/* Where a local shard's elements sit in the whole tensor, one level per split (an expert weight's
 * ep and tp splits, and ZeRO's flat block of it over edp: three), applied in order from the rank's
 * part out: at each, the block is [outer, mid, inner] of [outer, full_mid, inner], holding middle
 * rows [offset, offset + mid) (a flat split: [1, block, 1] of [1, part, 1]). An unused level is
 * {1, 1, 1, 0}, the identity. */
#define RT_SHARD_LEVELS 3
typedef struct rt_shard_layout {
    struct { int64_t inner, mid, full_mid, offset; } level[RT_SHARD_LEVELS];
} rt_shard_layout;

static inline int64_t rt_shard_global_index(const rt_shard_layout *at, int64_t i)
{
    for (int k = 0; k < RT_SHARD_LEVELS; k++) {
        int64_t inner = at->level[k].inner, mid = at->level[k].mid;
        int64_t j = i % inner, m = (i / inner) % mid, o = i / (inner * mid);
        i = (o * at->level[k].full_mid + at->level[k].offset + m) * inner + j;
    }
    return i;
}

/* The kinds of device a plan runs on, spelt by rt_device_names (program.c) in messages: ORDER
 * RT_DEVICE. Code that differs by device compares the kind, never the name. */
typedef enum { RT_DEVICE_CPU, RT_DEVICE_CUDA, RT_NUM_DEVICES } rt_device_kind;
extern const char *const rt_device_names[RT_NUM_DEVICES];

typedef struct rt_device {
    rt_device_kind kind;
    /* Called once before anything else; image is the plan's kernel binary (NULL on the CPU). */
    void (*open)(struct rt_program *p, const void *image);
    void *(*alloc)(struct rt_program *p, size_t bytes); /* zeroed; exits on failure */
    void (*free)(struct rt_program *p, void *ptr);
    void (*upload)(struct rt_program *p, void *dst, const void *src, size_t bytes);
    void (*download)(struct rt_program *p, void *dst, const void *src, size_t bytes);
    /* w[i] = std * normal(key, global(i)) (or `value` when normal is false), where global(i) is
     * local element i's index in the whole parameter (see rt_shard_layout): program.c. Where w is
     * NULL the parameter is held as a bf16 high half and an i16 remainder, written into hi and rem
     * (rt_master_split; store_param_remainders). */
    void (*init)(struct rt_program *p, float *w, uint16_t *hi, int16_t *rem, int64_t n, uint64_t key, float std,
                 bool normal, float value, const struct rt_shard_layout *at);
    void (*run)(struct rt_program *p, int func);
    size_t (*memory_in_use)(struct rt_program *p); /* bytes of device memory in use (0 if unknown) */
    void (*close)(struct rt_program *p);           /* releases what open made */
    void *(*queue)(struct rt_program *p);          /* the stream collectives join (NULL on the CPU) */
    /* The world communicator for this device's ranks (MPI on the CPU, NCCL on CUDA), or NULL
     * with err naming why. */
    rt_comm *(*world_comm)(struct rt_program *p, const rt_rank_env *e, char *err, size_t errlen);
    /* Like alloc, in memory a communicator can register as a window (rt_comm_window: NCCL's
     * ncclMemAlloc); free releases it. NULL where alloc's memory serves (the CPU). */
    void *(*alloc_window)(struct rt_program *p, size_t bytes);
    /* Waits for the device's work and releases what refers to communicators (CUDA graphs that
     * captured NCCL collectives: NCCL cannot finalize a communicator while they live), before
     * rt_parallel_finish frees them. NULL where nothing does (the CPU). */
    void (*quiesce)(struct rt_program *p);
    /* A named range on the device's timeline (NVTX on CUDA, for Nsight Systems); ranges nest.
     * Host-side calls, legal while a CUDA graph is captured. NULL where nothing records them
     * (the CPU). Called through runtime/trace.h. */
    void (*trace_push)(const char *name);
    void (*trace_pop)(void);
    /* Page-locked host memory, zeroed, that copies run into and out of at the link's speed (a
     * checkpoint's host copy, the offloaded optimizer's state), and its free. NULL where calloc
     * serves (the CPU). Exits on failure. */
    void *(*alloc_host)(size_t bytes);
    void (*free_host)(void *ptr);
    /* An asynchronous copy between device memory and page-locked host memory (to_host: dst is the
     * host's), on a copy stream of its own that first waits for the work queued before it on the
     * compute stream, or where ready >= 0 for grad_ready's mark `ready` alone (the host's update
     * beside the backward: safe from another thread); returns what copy_wait waits for (and
     * releases). The host optimizer's overlap (the CPU's copies at once). */
    void *(*copy_async)(struct rt_program *p, void *dst, const void *src, size_t bytes, bool to_host, int ready);
    void (*copy_wait)(struct rt_program *p, void *done);
    /* Copies within the device's memory in the order of `stream` (queue's: the kernels' stream; NULL
     * on the CPU, where they are done on return): bytes from src to dst; height rows of width
     * bytes, dpitch and spitch apart. The collective kernels both devices share (collectives.c). */
    void (*copy)(void *stream, void *dst, const void *src, size_t bytes);
    void (*copy2d)(void *stream, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height);
} rt_device;

extern const rt_device rt_cpu_device;
extern const rt_device rt_cuda_device;

#endif
