/* cuda_ctx.h — what the CUDA launchers (one per op, cuda_<ID>) get from the CUDA device: the
 * loaded plan cubin, a stream, a scratch buffer, and checked launches. */
#ifndef MCC_CUDA_CTX_H
#define MCC_CUDA_CTX_H

#include <cuda.h>
#include <stdbool.h>
#include <stddef.h>

#include "runtime/cpu_kernels.h" /* rt_kernel_call: operand/result device pointers and types */

typedef struct rt_cuda_ctx rt_cuda_ctx;

/* Checks a driver/runtime/cuBLASLt/NVRTC result; on failure prints file:line, the call, the
 * error name and a hint, and exits. */
#define RT_CU_CHECK(call) rt_cu_check((int)(call), #call, __FILE__, __LINE__, rt_cu_error_name)
#define RT_CUDART_CHECK(call) rt_cu_check((int)(call), #call, __FILE__, __LINE__, rt_cudart_error_name)
void rt_cu_check(int status, const char *call, const char *file, int line, const char *(*name)(int));
const char *rt_cu_error_name(int status);
const char *rt_cudart_error_name(int status);

/* Creates a context on the current device (cudaSetDevice first) and loads the cubin (or PTX). */
rt_cuda_ctx *rt_cuda_ctx_create(const void *image, char *err, size_t errlen);
void rt_cuda_ctx_free(rt_cuda_ctx *cx);
CUstream rt_cuda_stream(const rt_cuda_ctx *cx);
/* The stream of collectives that overlap computation: it first waits for everything enqueued on
 * the compute stream so far. rt_cuda_comm_join makes the compute stream wait for all of it (the
 * device does at the end of every function, so no function sees a collective in flight). */
CUstream rt_cuda_comm_fork(rt_cuda_ctx *cx);
void rt_cuda_comm_join(rt_cuda_ctx *cx);
/* The end of the comm stream's work so far, marked after a collective (rt_cuda_comm_mark):
 * rt_cuda_comm_wait makes the compute stream wait for that much and no more, so collectives
 * forked after it go on beside the compute stream's work. The stream is FIFO: waiting for one
 * mark covers every collective forked before it. */
typedef struct {
    CUevent done;                   /* created by the caller (cudaEventDisableTiming) */
    long forks;                     /* forks to the comm stream up to the mark */
} rt_cuda_comm_end;
void rt_cuda_comm_mark(rt_cuda_ctx *cx, rt_cuda_comm_end *end);
void rt_cuda_comm_wait(rt_cuda_ctx *cx, const rt_cuda_comm_end *end);
/* Kernels launched from here on (rt_cuda_launch) go to the comm stream (forked first), or again
 * to the compute stream: a collective's own arithmetic, such as an exchange's sum, beside it. */
void rt_cuda_launch_on_comm(rt_cuda_ctx *cx, bool comm);
/* Whether work forked to the comm stream may still be running (not yet joined). */
bool rt_cuda_comm_in_flight(const rt_cuda_ctx *cx);
/* Called before a function's instructions are launched: rt_cuda_invocation then names this call
 * of it, within which a value (an SSA value id) is written once, so a launcher may keep what it
 * learnt of a value (moe's counts, copied to the host) for the rest of the call. */
void rt_cuda_begin_function(rt_cuda_ctx *cx);
long rt_cuda_invocation(const rt_cuda_ctx *cx);
/* The comm stream itself, for timing events (MCC_PROFILE); enqueue nothing else on it. */
CUstream rt_cuda_comm_stream(const rt_cuda_ctx *cx);
/* NCCL's watchdog (comm_nccl.c) follows each collective by an event recorded after it, which a
 * stream being captured into a CUDA graph cannot give: collectives enqueued during a capture are
 * not followed one by one. After launching such a graph on `stream`, this has the watchdog
 * follow the launch as one collective named `what`, on the world group. */
void rt_nccl_watch_graph(void *stream, const char *what);
/* Copies the cubin's __device__ constant `name` (exactly `bytes`) to host; false if it has none.
 * The first read of a name is a synchronous copy (so it must come before any graph capture, as
 * a function's first, eager call does); later reads come from the context's cache. */
bool rt_cuda_read_constant(rt_cuda_ctx *cx, const char *name, void *host, size_t bytes);
CUfunction rt_cuda_function(rt_cuda_ctx *cx, const char *kernel); /* cached; exits naming it if absent */

/* Launches `kernel` (an extern "C" __global__ of kernels_templates/) on the context's stream.
 * params: pointers to each kernel argument, as cuLaunchKernel takes them. Dynamic shared
 * memory above 48 KiB is opted into automatically. */
void rt_cuda_launch(rt_cuda_ctx *cx, const char *kernel, unsigned gx, unsigned gy, unsigned gz, unsigned block,
                    size_t smem, void **params);

/* Device scratch of at least `bytes`, valid until the next rt_cuda_scratch call. It grows only
 * outside CUDA graph capture: the first step runs eagerly and sizes it, later steps replay. */
void *rt_cuda_scratch(rt_cuda_ctx *cx, size_t bytes);
void rt_cuda_reserve_scratch(rt_cuda_ctx *cx, size_t bytes);

/* The host's update beside the backward (grad_ready, passes/grad_ready.c): n marks, made at open;
 * rt_cuda_mark_ready records mark `slot` on the compute stream (in a graph capture, as a node each
 * replay records); rt_cuda_wait_ready makes `stream` (the host's copy stream) wait for its latest
 * record and for nothing else queued on the compute stream. */
void rt_cuda_ready_marks(rt_cuda_ctx *cx, int n);
void rt_cuda_mark_ready(rt_cuda_ctx *cx, int slot);
void rt_cuda_wait_ready(const rt_cuda_ctx *cx, void *stream, int slot);

/* One launcher per op: reads c->in (attributes), c->args/c->res (device pointers) and their types. */
typedef void (*rt_cuda_launcher)(rt_cuda_ctx *cx, const rt_kernel_call *c);
#define X(id, text, nargs, nres, inplace, flags, attrs, infer, grad, shard) void cuda_##id(rt_cuda_ctx *cx, const rt_kernel_call *c);
#include "ir/ops.def"
#undef X
extern const rt_cuda_launcher rt_cuda_launchers[IR_NUM_OPS];
/* Sequence parallelism's all-gather of c's operand 0 into its result 0 (c: all_gather_seq, or an
 * op with its attributes axis and batch at 0 and 2) on `stream`. */
void rt_cuda_gather_seq(rt_cuda_ctx *cx, const rt_kernel_call *c, CUstream stream);
/* r := a + b and dst += src, t elements (the add and accumulate kernels), for a fused op `c`
 * (named in errors). */
void rt_cuda_add(rt_cuda_ctx *cx, const rt_kernel_call *c, void *r, const void *a, const void *b, const ir_type *t);
void rt_cuda_accumulate(rt_cuda_ctx *cx, const rt_kernel_call *c, void *dst, const void *src, const ir_type *t);
/* The counts[E] at operand i of grouped op c on the host (runtime/cuda/matmul.c: the stream drains
 * once per counts value and function call), checked to sum to at most R rows. */
const int32_t *rt_cuda_grouped_counts(rt_cuda_ctx *cx, const rt_kernel_call *c, int i, int64_t R);
/* Context parallelism's merge of two ring pieces' attention of the same queries, in place:
 * (o, lse) := (o exp(lse - l) + o2 exp(lse2 - l), l = logaddexp(lse, lse2)). o, o2 [B,T,H,D] of
 * dtype dt (bf16 or f32), lse, lse2 f32 [B,H,T] (runtime/cuda/attention.c). */
void rt_cuda_attention_merge(rt_cuda_ctx *cx, ir_dtype dt, void *o, float *lse, const void *o2, const float *lse2,
                             int B, int H, int T, int D);

#endif
