/* parallel.h — this rank's place in the compiled parallel mesh, its communicators (a group for
 * every mesh axis the layout splits), and what train_rank needs of them: which samples are its
 * own, and means of host values over the dp group. The collective kernels find any axis's
 * group with rt_parallel_comm. */
#ifndef MCC_RT_PARALLEL_H
#define MCC_RT_PARALLEL_H

#include "runtime/comm.h"
#include "runtime/cpu_kernels.h"
#include "runtime/program.h"

typedef struct {
    rt_rank_env env;
    ir_mesh mesh;                   /* the degrees the plan was compiled for */
    int coord[IR_NUM_AXES];         /* this rank's coordinate along each axis (ir_mesh_coords) */
    rt_comm *world;                 /* NULL for one rank */
    void *scratch;                  /* one f32 of device memory for host-value reductions */
} rt_parallel;

/* Reads the launcher's environment and checks it against the mesh compiled into the plan
 * (world size must be tp*cp*dp*pp), then creates the communicators (MPI on the CPU, NCCL on
 * CUDA): one group for each axis of degree above 1, shared by axes whose groups hold the same
 * ranks (edp is dp where ep and cp are 1), and point to point on the pp group (rt_comm_add_p2p).
 * Exits with a message naming the fix on any mismatch. */
void rt_parallel_init(rt_parallel *par, rt_program *p);
/* Frees the communicators, after the device released what refers to them (rt_device.quiesce). */
void rt_parallel_finish(rt_parallel *par, rt_program *p);
/* The communicator of a mesh axis for the collective kernels (NULL: not parallel over it). */
rt_comm *rt_parallel_comm(ir_axis axis);
/* The axis's exchange buffer, when its copy lane holds it in its window and it has `bytes`:
 * there a reduce-scatter can go out as an all-to-all on the copy engines, then a local sum.
 * NULL otherwise. */
void *rt_parallel_exchange(ir_axis axis, size_t bytes);
/* The communicator of collective `in` whose types span `ranks` ranks of its axis (attribute 0):
 * NULL for one rank. Exits naming the op when this rank's group has another size, e.g. a plan
 * function run before rt_parallel_init (which must precede rt_program_init_params: setup). */
rt_comm *rt_parallel_comm_for(const ir_instr *in, int64_t ranks);
/* all_to_all_v (ops.def): its splits (type st, i32 or i64, host memory) as int64 in out[numel],
 * each checked >= 0 and their sum against the R rows of its x (exits naming the op: the routing's
 * counts are wrong); came (int64) stored back in st's dtype; and on one rank along the axis, the
 * exchange itself: came := splits, the rows kept, checked against r's room. */
void rt_parallel_a2av_splits(const ir_instr *in, const ir_type *st, const void *splits, int64_t R, int64_t *out);
void rt_parallel_a2av_store(const ir_type *st, const int64_t *came, void *out);
size_t rt_parallel_a2av_self(const ir_instr *in, const int64_t *splits, int64_t nsplits, int64_t rows, int64_t *came);
/* cp_all_to_all (ops.def; Ulysses' exchange over the cp group comm, n ranks): x -> r through
 * scratch[2 * ir_bytes(x)] (dev's memory), as 2-D copies (dev->copy2d) and one rt_all_to_all, all
 * on `stream`. heads=1: block q of what goes out is x's head block q [B,2c,H/n,D]; what comes
 * from rank p, its two chunks of this rank's head block, lands at their positions in the sequence
 * (chunks p and 2n-1-p); heads=0 the inverse. */
void rt_parallel_cp_all_to_all(const rt_kernel_call *c, rt_comm *comm, void *scratch, const rt_device *dev, void *stream);
/* all_reduce_inplace (a bucket of gradients: data_parallel.c): sums the call's operands over its
 * axis with one collective per run of operands that lie back to back (ir_global_span apart, as
 * program.c places globals, padding included), launched together, on the axis group's `lane`
 * (comm.h) and `stream` (NULL on the CPU). */
void rt_parallel_all_reduce_bucket(const rt_kernel_call *c, rt_lane lane, void *stream);
/* The run of a bucket's operands from operand `first`: the index after its last, and in *span
 * its bytes from the first operand's start to the last's end (padded: to the end of the last's
 * ir_global_span, padding that is zero on every rank and stays so under sums). */
int rt_parallel_bucket_run(const rt_kernel_call *c, int first, bool padded, size_t *span);
/* The position (sampler.h) of row b of micro-batch mb of iteration it (1-based): the samples
 * consumed before it, as Megatron's samplers count them: each micro-batch step takes B*dp
 * consecutive positions, rank r the r-th B of them. So the step's positions are the same for
 * every dp (dp=1 runs them as dp*accum micro-batches); the single sampler reads sample p at p. */
int64_t rt_parallel_position(const rt_parallel *par, int it, int accum, int mb, int B, int b);
/* The whole tensor (of type `whole`) of which every rank holds the part layout record l gives it
 * (host memory, `local`); every rank gets all of it in `full`. Collective over the groups of the
 * axes l splits over, every rank calling. */
void rt_parallel_gather(rt_program *p, const ir_layout *l, const ir_type *whole, const void *local, void *full);
/* Mean of v over the dp x cp ranks (v itself on one rank); under pipeline parallelism, of the last
 * stage's v (the loss: every other stage passes 0), on every rank. Collective. */
float rt_parallel_mean(rt_parallel *par, rt_program *p, float v);
/* Mean over the dp ranks of v combined over the pipeline stages by `stages`: RT_SUM adds each
 * stage's share (rt_parallel_mean), RT_MAX takes the largest (an MoE model's load imbalance, each
 * stage's over its own layers). Collective. */
float rt_parallel_mean_of(rt_parallel *par, rt_program *p, float v, rt_reduce_op stages);
/* The sum or maximum of v over every rank (v itself on one rank): the ranks agree on a stop signal
 * or a failure (RT_MAX), and it is a barrier over the world. Collective. */
float rt_parallel_world(rt_parallel *par, rt_program *p, float v, rt_reduce_op op);
static inline bool rt_parallel_is_root(const rt_parallel *par) { return par->env.rank == 0; }

#endif
