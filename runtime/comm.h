/* comm.h — how ranks find each other and talk: the launcher's environment, the rank layout of
 * the parallel mesh, and one collective interface over MPI (CPU ranks) and NCCL (GPU ranks). */
#ifndef MCC_RT_COMM_H
#define MCC_RT_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/ir.h" /* ir_dtype, ir_mesh */

/* ---- the launcher's environment ------------------------------------------------------------
 * Read in this order; the first launcher whose variables are present wins:
 *   torchrun (and train_rank --nproc-per-node): RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE
 *   Open MPI (mpirun): OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
 *   SLURM (srun): SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, and the first count of
 *                 SLURM_STEP_TASKS_PER_NODE (or SLURM_TASKS_PER_NODE) as the local size
 *   none of them: one rank.
 * SLURM's variables are never compared with the others: mpirun and torchrun started under srun
 * or sbatch inherit SLURM values that describe the job step, not the ranks. torchrun's and Open
 * MPI's must agree when both are present. MASTER_ADDR/MASTER_PORT are read for every launcher
 * (NCCL's bootstrap needs them unless NCCL_COMM_ID is set or MPI bootstraps). */
typedef struct {
    int rank, world_size;       /* over all nodes */
    int local_rank, local_world; /* on this node: local_rank picks the GPU */
    const char *launcher;       /* "torchrun", "openmpi", "slurm" or "single" */
    const char *master_addr;    /* NULL when unset */
    int master_port;            /* 0 when unset */
} rt_rank_env;

/* False with err naming the variable and the fix when a value is missing, not an integer, out
 * of range, or contradicts another launcher's. */
bool rt_rank_env_detect(rt_rank_env *e, char *err, size_t errlen);
/* rt_rank_env_detect, or exit(2) with its message (train_rank cannot run without the layout). */
rt_rank_env rt_rank_env_or_exit(void);
/* The GPU a rank takes among the ndev (>= 1) its process sees: local_rank % ndev, so the ranks of
 * a node spread over its GPUs under every launcher above (CUDA_VISIBLE_DEVICES narrows what a
 * process sees). */
int rt_rank_device(const rt_rank_env *e, int ndev);

/* ---- rank layout: the mesh (ir_mesh, ir/mesh.c: Megatron's order, tp fastest, pp slowest) ---- */

/* ---- communicators --------------------------------------------------------------------------
 * A communicator is the world or a sub-group. Every collective is called by all its members in
 * the same order. Buffers are host memory for MPI and device memory for NCCL; `stream` is the
 * cudaStream_t the NCCL call is enqueued on (MPI ignores it and returns when done; NCCL returns
 * once enqueued). A collective that does not complete within MCC_COLLECTIVE_TIMEOUT_S seconds
 * (default 300) ends the whole job with an error naming the collective, its group and, under
 * MPI, the ranks that did not arrive. Misuse (unsupported dtype) ends the process naming it. */
typedef enum { RT_SUM, RT_MAX } rt_reduce_op;
typedef struct rt_comm rt_comm;

/* MPI world (MPI_Init on first use). Needs an Open MPI launch (or one rank); NULL with err when
 * this build has no MPI or MPI's world disagrees with e. */
rt_comm *rt_comm_world_mpi(const rt_rank_env *e, char *err, size_t errlen);
/* NCCL world on GPU `device` (libmccrt_cuda only). The unique id comes from `bootstrap` (rank 0
 * creates it and broadcasts it over that host communicator, e.g. the MPI world under mpirun)
 * when given, else from NCCL_COMM_ID, which is set to MASTER_ADDR:MASTER_PORT when unset
 * (MASTER_PORT+1 under torchrun, whose own store holds MASTER_PORT). */
rt_comm *rt_comm_world_nccl(const rt_rank_env *e, int device, rt_comm *bootstrap, char *err, size_t errlen);
/* A world on device buffers over host_world (libmccrt_cuda only, cuda/comm_staged.c): every call
 * waits for its stream and goes through page-locked host memory, so ranks may share a GPU, which
 * NCCL refuses. A test path (MCC_GPU_COMM). Owns host_world. */
rt_comm *rt_comm_world_staged(rt_comm *host_world);

/* Members of c with the same color (>= 0) form a group, ordered by key; `name` labels it in errors.
 * Collective over c. */
rt_comm *rt_comm_split(rt_comm *c, int color, int key, const char *name);
/* This rank's group along the axes of `axes` (a bitmask of (1 << ir_axis): one axis, or e.g. dp
 * and cp for dp x cp) of mesh m (ir_mesh_group), named after them ("tp", "dp_cp"); c is the
 * world. Collective over c. */
rt_comm *rt_comm_mesh_group(rt_comm *world, const ir_mesh *m, unsigned axes);
/* Frees a group; freeing the world also shuts the backend down (free sub-groups first). */
void rt_comm_free(rt_comm *c);

int rt_comm_rank(const rt_comm *c);
int rt_comm_size(const rt_comm *c);
int rt_comm_world_rank(const rt_comm *c, int group_rank); /* world rank of a member */
const char *rt_comm_name(const rt_comm *c);

/* buf[count] is replaced by the element-wise reduction over all members. */
void rt_all_reduce(rt_comm *c, void *buf, size_t count, ir_dtype dt, rt_reduce_op op, void *stream);
/* recv[size * count] = concatenation of every member's send[count], in rank order. */
void rt_all_gather(rt_comm *c, const void *send, void *recv, size_t count, ir_dtype dt, void *stream);
/* recv[count] = block `rank` of the reduction of every member's send[size * count]. */
void rt_reduce_scatter(rt_comm *c, const void *send, void *recv, size_t count, ir_dtype dt, rt_reduce_op op,
                       void *stream);
/* Block q (count elements) of send goes to member q, block q of recv comes from member q. */
void rt_all_to_all(rt_comm *c, const void *send, void *recv, size_t count, ir_dtype dt, void *stream);
/* Variable all-to-all of rows (`row` elements of dt each): expert parallelism's dispatch and
 * combine. send holds the rows for member 0, then for member 1, ...; member q's are `splits`
 * consecutive runs, run j send_splits[q * splits + j] rows long (an expert of q's, say). The
 * splits go first (a fixed all-to-all of `splits` counts a member), filling
 * recv_splits[q * splits + j]: the rows of this rank's run j that member q sends; then the rows,
 * which land in recv packed, member 0's runs first. recv has room for recv_cap rows (the caller's
 * exact worst case, or a capacity): more end the job, naming the group, the rows and the room.
 * Returns the rows received. Splits are host memory; the rows' buffers as for the others. */
size_t rt_all_to_all_v(rt_comm *c, const void *send, const int64_t *send_splits, void *recv, int64_t *recv_splits,
                       int splits, size_t recv_cap, size_t row, ir_dtype dt, void *stream);
/* recv[count] := send[count] of member rank - 1 (modulo the size): every member sends to rank + 1
 * and receives from rank - 1 at once, a ring's step (ring attention's k and v around cp). send
 * and recv do not overlap. One member: a copy. */
void rt_ring_shift(rt_comm *c, const void *send, void *recv, size_t count, ir_dtype dt, void *stream);
/* buf[count] of member `root` is copied to every member. */
void rt_broadcast(rt_comm *c, void *buf, size_t count, ir_dtype dt, int root, void *stream);
/* The collectives on c between these two calls are launched together, as one (NCCL), on
 * `stream`; each of them still names its own buffers. */
void rt_comm_group_begin(rt_comm *c);
void rt_comm_group_end(rt_comm *c, void *stream);
/* Returns when every member has entered (NCCL: and all enqueued work of this rank is done). */
void rt_barrier(rt_comm *c);

/* ---- point to point -------------------------------------------------------------------------
 * Between neighbours of c (the pp group: member rank-1 and rank+1, modulo the size, so that the
 * last stage reaches the first as interleaved schedules need). A send never waits for the
 * receiver: it copies buf (count elements of dt) into a staging buffer of its own and returns; on
 * a GPU the copy is in the stream's order and the transfer goes out beside it. A recv returns (on a
 * GPU: completes in the stream's order) once buf holds what the peer sent; the messages from one
 * member to another arrive in the order sent. So a schedule that sends right after the step that
 * produced a tensor and receives right before the step that needs it cannot deadlock when its
 * dependency graph is acyclic: every rank's sends and receives may come in any order relative to
 * its neighbours'. rt_p2p_flush waits until every send of this rank on c has completed and frees
 * the staging buffers (the end of an iteration). A recv that does not complete within
 * MCC_COLLECTIVE_TIMEOUT_S ends the job, naming it, its peer and group (under MPI, also how many
 * messages the peer has sent this rank).
 *
 * MPI: MPI_Isend from a malloc'd copy (completed copies are freed by later sends), a polled
 * MPI_Irecv, on a duplicate of c's communicator with one tag: MPI matches the messages of one
 * sender on one communicator and tag in the order sent.
 * NCCL: a send blocks the GPU until the peer's recv runs, and all operations on one communicator
 * run in the order issued on this rank whatever their streams (NVIDIA/nccl#479, #574, #783). One
 * communicator for both directions between two members deadlocks as soon as both send before
 * they receive (each recv waits behind its own rank's send); one per direction over the whole
 * group still deadlocks a ring (each rank's recv from rank-1 waits behind its send to rank+1).
 * So every ordered pair of neighbours (a -> b) gets a two-member communicator on which a only
 * sends and b only receives (ncclCommSplit of c: two to six splits, one per direction and
 * matching of the ring's edges), and each neighbour a send stream of its own (non-blocking, so
 * the legacy stream's copies never wait for it): the staging copy goes on the caller's stream,
 * the ncclSend on the neighbour's send stream after an event, the ncclRecv on the caller's
 * stream. NCCL connects a pair on its first send/recv and the connection needs both ranks
 * (NVIDIA/nccl#783), so rt_comm_add_p2p sends one element each way on every pair communicator.
 * What remains: CUDA does not promise that the send kernels run beside the recv's (they take few
 * of the GPU's SMs); a device-wide wait (cudaDeviceSynchronize, cudaFree) or an rt_barrier (it
 * waits for all this rank's enqueued work) between a send and its receiver's recv waits for that
 * recv, so flush first; the watchdog retires operations in issue order, so a send its receiver
 * takes late delays its view of what follows (never past the send's own deadline); and none of
 * this runs inside a CUDA graph capture. */
/* Makes what rt_send/rt_recv need on c (NCCL: the pair communicators above). Collective over c;
 * once, before c's first send or recv (rt_parallel_init does it for the pp group). */
void rt_comm_add_p2p(rt_comm *c);
void rt_send(rt_comm *c, const void *buf, size_t count, ir_dtype dt, int peer, void *stream);
void rt_recv(rt_comm *c, void *buf, size_t count, ir_dtype dt, int peer, void *stream);
void rt_p2p_flush(rt_comm *c, void *stream);
/* Bytes of staging this rank's sends on c hold now (buffers whose send has not been seen to complete). */
size_t rt_p2p_staged_bytes(const rt_comm *c);

/* ---- lanes ----------------------------------------------------------------------------------
 * A group's collectives may go out on separate communicators of the same members, each tuned for
 * where its collectives run (bench/overlap_bench.c measured the choices on two H200s):
 *   RT_LANE_MAIN  the group itself: collectives on the compute stream, between the GEMMs that
 *                 wait for them (tensor parallel's take as many CTAs as NCCL can use);
 *   RT_LANE_SIDE  collectives on the comm stream, beside computation: few CTAs (NCCL: 16;
 *                 MCC_SIDE_NCCL_CTAS), since an SM a collective holds is one the persistent GEMM
 *                 beside it cannot use;
 *   RT_LANE_COPY  all-gathers moved by the GPU's copy engines, using no SMs at all, for buffers
 *                 inside the lane's window (rt_comm_window).
 * A lane is made once, collectively over the group; a group without it (MPI, or not made) uses
 * its main lane. Every member must issue a lane's collectives in the same order, as for a group. */
typedef enum { RT_LANE_MAIN, RT_LANE_SIDE, RT_LANE_COPY, RT_NUM_LANES } rt_lane;
void rt_comm_add_lane(rt_comm *c, rt_lane lane); /* collective over c */
rt_comm *rt_comm_lane(rt_comm *c, rt_lane lane);  /* c itself when the lane was not made */
/* Registers [base, base + bytes) on c's copy lane: an all-gather with both buffers inside it at
 * the same offset on every member may then use the copy engines. The memory must come from
 * rt_device.alloc_window. False (with a note) where the backend cannot; collective over c.
 * base NULL: the lane's all-gathers stop using the window (when a member could not register). */
bool rt_comm_window(rt_comm *c, void *base, size_t bytes);
/* c's copy lane when send[send_bytes] and recv[recv_bytes] lie inside its window, else c. */
rt_comm *rt_comm_copy_lane_for(rt_comm *c, const void *send, size_t send_bytes, const void *recv, size_t recv_bytes);

#endif
