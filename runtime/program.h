/* program.h — a loaded plan: the parsed module on a device, its globals and arenas allocated,
 * and every instruction bound to its operand and result buffers, ready to run. */
#ifndef MCC_RT_PROGRAM_H
#define MCC_RT_PROGRAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/ir.h"
#include "runtime/cpu_kernels.h"
#include "runtime/device.h"

typedef struct {
    ir_func *f;
    char *arena;                    /* the program's one arena (device memory) */
    void **vptr;                    /* per value: its buffer */
    rt_kernel_call *calls;          /* per instruction */
    void **ptr_pool;                /* backing store of calls[].args/res */
    const ir_type **type_pool;
} rt_func_exec;

/* The host function's time split (rt_program.host_times). */
enum { RT_HOST_TIME_ALL, RT_HOST_TIME_DOWN, RT_HOST_TIME_ADAM, RT_HOST_TIME_UP };

/* What runs a plan's host function (kind host_optimizer): runtime/host_optimizer.c, a layer above
 * this one, registers it on a loaded program (rt_host_attach), so that program.c calls down only
 * (device.h). rt_program_run calls run for a host function; rt_program_free calls close. */
struct rt_program;
typedef struct rt_host_hooks {
    void (*run)(struct rt_program *p, int func);
    void (*close)(struct rt_program *p);
} rt_host_hooks;

typedef struct rt_program {
    ir_module *m;                   /* the plan as this rank runs it: its rank terms resolved */
    int coord[IR_NUM_AXES];         /* this rank's coordinate along each mesh axis */
    const rt_device *dev;
    void *dev_state;                /* owned by the device */
    void **globals;                 /* per module global: device memory, inside global_slab */
    void *global_slab;              /* every global, in declaration order (ir_global_span each) */
    size_t global_slab_bytes;
    void *host_slab;                /* the host globals (ir_global.host), host_arena, host_staging; or NULL */
    char *host_arena;               /* the host_optimizer function's values */
    char *host_staging;             /* after host_arena: where gradients stream down and copies up are
                                       converted, two halves (ir_host_staging_of) */
    ir_host_staging host_stage;     /* its chunk and element sizes: host_staging_bytes
                                       = 2 * chunk * (grad_size + up_size) */
    size_t host_staging_bytes;
    double host_times[4];           /* seconds the host function spent, summed over its runs: the
                                       whole, waiting for gradient chunks, AdamW, the copies up
                                       (RT_HOST_TIME_*; train_rank's log line) */
    const rt_host_hooks *host;      /* what runs the host function (rt_host_attach), or NULL */
    struct rt_host_pool *host_pool; /* the host AdamW's threads (host_optimizer.c's), or NULL */
    int *host_ready_slot;           /* per global: its grad_ready mark's slot, -1 none; NULL: the plan
                                       has no marks (host_optimizer.c's) */
    struct rt_host_thread *host_thread; /* the host function running beside the backward, or NULL */
    size_t host_bytes;              /* of host_slab: what mcc compile's memory report counts as host memory */
    size_t bucket_exchange_bytes;   /* after the slab, in its window: the copy lane's gradient
                                       buckets' exchange buffer (rt_parallel_exchange), or 0 */
    char *arena;                    /* activations of every function: they run one at a time */
    size_t arena_bytes;
    size_t exchange_bytes;          /* after the arena, in its window: the copy lane's reduce-scatters'
                                       exchange buffer (rt_parallel_exchange), or 0 */
    rt_func_exec *funcs;            /* per module function: as bound now (the device runs these) */
    rt_func_exec **slot_execs;      /* per function, per binding of its stash globals (a pipeline
                                       stage's forward and backward): one per combination of its
                                       spans' slots, mixed radix with the first span fastest; made
                                       at the first call that names it (.f NULL before) */
    int *bound_slot;                /* per function: the binding funcs[] is bound to */
    int *nslots;                    /* per function: its slot_execs (the product of span_slots) */
    int *span_slots;                /* [func * IR_NUM_STASH_SPANS + span]: the buffers of that span */
} rt_program;

/* Parses and verifies the plan of world_rank's pipeline stage (one for every rank of a stage; the
 * text holds every stage's, ir_print_stages), resolves its rank terms for
 * world_rank's mesh coordinates, opens the device (image: its kernel binary, or NULL), allocates
 * globals (zeroed) and arenas. NULL + message on error. */
rt_program *rt_program_load(const char *plan_text, const rt_device *dev, const void *image, long long world_rank,
                            char *err, size_t errlen);
/* The lanes (comm.h) the plan was compiled for (config comm_side_lane, comm_copy_lane: mcc
 * compile --comm-lanes; the CUDA target's default is the copy lane, on two H200s as fast as
 * NCCL's kernels to 2% faster, bench/RESULTS.md; the side lane measured slower). The plan's
 * memory plan sized the copy lane's exchange buffers for that choice: rt_program_load allocates
 * them, rt_parallel_init makes the lanes. */
void rt_program_lanes(const ir_module *m, bool *side, bool *copy);
/* The bytes the plan took on its device: the global slab, the arena and the copy lane's exchange
 * buffers: what mcc compile's memory report totals (the start-up box shows it). */
size_t rt_program_plan_bytes(const rt_program *p);
void rt_program_free(rt_program *p);
/* Initialises every parameter from its init rule, then runs `setup` (if the plan has one).
 * Element i of parameter `name` depends only on (seed, name, i), so any sharding of the
 * parameter sees the same values, on any device. */
void rt_program_init_params(rt_program *p, uint64_t seed);
void rt_program_run(rt_program *p, int func);
/* Binds func's stash globals to their buffers slot[span] for its next runs (a schedule call's
 * slot=, slot_fw=, slot_bw=; NULL or all < 0: leaves them). The CPU device reads the bindings at
 * each run; the CUDA device keeps a graph per binding (cuda_device.c). */
void rt_program_bind_slot(rt_program *p, int func, const int *slot);

/* Host access to a function's inputs and outputs, each named by its instruction index, found by
 * its role (rt_program_find: op IR_OP_INPUT or IR_OP_OUTPUT, -1 if func has none), and to globals. */
int rt_program_find(const rt_program *p, int func, ir_op op, ir_role role);
void rt_program_set_input(rt_program *p, int func, int instr, const void *host, size_t bytes);
void rt_program_get_output(rt_program *p, int func, int instr, void *host, size_t bytes);
/* The device buffer of input or output instr of func, its type in *type: what a pipeline stage
 * receives into or sends from. */
void *rt_program_tensor(rt_program *p, int func, int instr, const ir_type **type);
void rt_program_read_global(rt_program *p, int g, void *host);
void rt_program_write_global(rt_program *p, int g, const void *host); /* a checkpoint's load */

/* The counter-based generator parameter initialisation uses (also in kernels_templates/init.cuh). */
uint64_t rt_splitmix64(uint64_t x);

#endif
