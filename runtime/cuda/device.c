/* device.c — the CUDA context the launchers run in: the plan's cubin loaded as a module, one
 * stream, kernel lookup by name, checked launches and a fixed scratch buffer. */
#include "cuda_ctx.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *name;
    CUfunction fn;
    size_t smem_opt_in; /* dynamic shared memory opted into so far */
} kernel_entry;

struct rt_cuda_ctx {
    CUmodule module;
    cudaStream_t stream;
    kernel_entry *kernels;
    int nkernels, cap;
    void *scratch;
    size_t scratch_bytes;
    struct cached_constant {
        char *name;
        void *data;
        size_t bytes;
    } *constants;                   /* read once by rt_cuda_read_constant */
    int nconstants;
    cudaStream_t comm;              /* collectives that overlap computation (rt_cuda_comm_fork) */
    cudaStream_t launch;            /* where rt_cuda_launch enqueues: stream, or comm (rt_cuda_launch_on) */
    cudaEvent_t forked, joined;
    long forks;                     /* forks to comm so far */
    long joined_forks;              /* ... of them, those the compute stream has waited for */
    long invocations;               /* functions launched so far (rt_cuda_begin_function) */
    cudaEvent_t *ready;             /* grad_ready's marks, by slot (rt_cuda_ready_marks) */
    int nready;
};

const char *rt_cu_error_name(int status)
{
    const char *name = NULL;
    cuGetErrorName((CUresult)status, &name);
    return name ? name : "unknown CUDA driver error";
}

const char *rt_cudart_error_name(int status) { return cudaGetErrorName((cudaError_t)status); }

void rt_cu_check(int status, const char *call, const char *file, int line, const char *(*name)(int))
{
    if (status == 0)
        return;
    fprintf(stderr, "train_rank: CUDA error at %s:%d: %s returned %s (%d)\n", file, line, call, name(status), status);
    fprintf(stderr, "HINT: out-of-memory means the plan does not fit this GPU (mcc compile --gpu-memory ...); "
                    "'no kernel image' means the GPU is not sm_90; launch failures usually mean a kernel bug "
                    "(rerun with CUDA_LAUNCH_BLOCKING=1 and compute-sanitizer)\n");
    exit(1);
}

rt_cuda_ctx *rt_cuda_ctx_create(const void *image, char *err, size_t errlen)
{
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        snprintf(err, errlen, "no CUDA device is usable (%s); this train_rank was compiled for --target cuda",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return NULL;
    }
    RT_CUDART_CHECK(cudaFree(0)); /* creates the primary context, which the driver API then uses */
    rt_cuda_ctx *cx = calloc(1, sizeof *cx);
    CUresult r = cuModuleLoadData(&cx->module, image);
    if (r != CUDA_SUCCESS) {
        snprintf(err, errlen, "cannot load the compiled kernels (%s): the GPU must be sm_90 (H100/H200)",
                 rt_cu_error_name(r));
        free(cx);
        return NULL;
    }
    RT_CUDART_CHECK(cudaStreamCreateWithFlags(&cx->stream, cudaStreamNonBlocking));
    int least = 0, greatest = 0; /* the comm stream's kernels go first when both have work queued */
    RT_CUDART_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    RT_CUDART_CHECK(cudaStreamCreateWithPriority(&cx->comm, cudaStreamNonBlocking, greatest));
    RT_CUDART_CHECK(cudaEventCreateWithFlags(&cx->forked, cudaEventDisableTiming));
    RT_CUDART_CHECK(cudaEventCreateWithFlags(&cx->joined, cudaEventDisableTiming));
    return cx;
}

void rt_cuda_ctx_free(rt_cuda_ctx *cx)
{
    if (!cx)
        return;
    for (int i = 0; i < cx->nkernels; i++)
        free(cx->kernels[i].name);
    free(cx->kernels);
    for (int i = 0; i < cx->nconstants; i++)
        free(cx->constants[i].name), free(cx->constants[i].data);
    free(cx->constants);
    if (cx->scratch)
        cudaFree(cx->scratch);
    cudaStreamDestroy(cx->stream);
    cudaStreamDestroy(cx->comm);
    cudaEventDestroy(cx->forked);
    cudaEventDestroy(cx->joined);
    for (int i = 0; i < cx->nready; i++)
        cudaEventDestroy(cx->ready[i]);
    free(cx->ready);
    cuModuleUnload(cx->module);
    free(cx);
}

CUstream rt_cuda_stream(const rt_cuda_ctx *cx) { return (CUstream)cx->stream; }

CUstream rt_cuda_comm_fork(rt_cuda_ctx *cx)
{
    RT_CUDART_CHECK(cudaEventRecord(cx->forked, cx->stream));
    RT_CUDART_CHECK(cudaStreamWaitEvent(cx->comm, cx->forked, 0));
    cx->forks++;
    return (CUstream)cx->comm;
}

bool rt_cuda_comm_in_flight(const rt_cuda_ctx *cx) { return cx->joined_forks < cx->forks; }

void rt_cuda_begin_function(rt_cuda_ctx *cx) { cx->invocations++; }
long rt_cuda_invocation(const rt_cuda_ctx *cx) { return cx->invocations; }

void rt_cuda_launch_on_comm(rt_cuda_ctx *cx, bool comm) { cx->launch = comm ? cx->comm : NULL; }

CUstream rt_cuda_comm_stream(const rt_cuda_ctx *cx) { return (CUstream)cx->comm; }

void rt_cuda_comm_join(rt_cuda_ctx *cx)
{
    if (!rt_cuda_comm_in_flight(cx))
        return;
    RT_CUDART_CHECK(cudaEventRecord(cx->joined, cx->comm));
    RT_CUDART_CHECK(cudaStreamWaitEvent(cx->stream, cx->joined, 0));
    cx->joined_forks = cx->forks;
}

void rt_cuda_comm_mark(rt_cuda_ctx *cx, rt_cuda_comm_end *end)
{
    end->forks = cx->forks;
    if (rt_cuda_comm_in_flight(cx)) /* else nothing to wait for (and nothing on comm to capture) */
        RT_CUDART_CHECK(cudaEventRecord(end->done, cx->comm));
}

void rt_cuda_comm_wait(rt_cuda_ctx *cx, const rt_cuda_comm_end *end)
{
    if (end->forks <= cx->joined_forks) /* waited for already, or by a join since */
        return;
    RT_CUDART_CHECK(cudaStreamWaitEvent(cx->stream, end->done, 0));
    cx->joined_forks = end->forks;
}

static kernel_entry *kernel_lookup(rt_cuda_ctx *cx, const char *name)
{
    for (int i = 0; i < cx->nkernels; i++)
        if (!strcmp(cx->kernels[i].name, name))
            return &cx->kernels[i];
    CUfunction fn;
    if (cuModuleGetFunction(&fn, cx->module, name) != CUDA_SUCCESS) {
        fprintf(stderr, "train_rank: internal error: kernel %s is not in the compiled cubin "
                        "(kernels_templates/ and the launchers in runtime/cuda/ disagree)\n", name);
        exit(1);
    }
    if (cx->nkernels == cx->cap) {
        cx->cap = cx->cap ? 2 * cx->cap : 32;
        cx->kernels = realloc(cx->kernels, sizeof(kernel_entry) * (size_t)cx->cap);
    }
    cx->kernels[cx->nkernels] = (kernel_entry){strdup(name), fn, 0};
    return &cx->kernels[cx->nkernels++];
}

CUfunction rt_cuda_function(rt_cuda_ctx *cx, const char *kernel) { return kernel_lookup(cx, kernel)->fn; }

bool rt_cuda_read_constant(rt_cuda_ctx *cx, const char *name, void *host, size_t bytes)
{
    for (int i = 0; i < cx->nconstants; i++)
        if (!strcmp(cx->constants[i].name, name) && cx->constants[i].bytes == bytes) {
            memcpy(host, cx->constants[i].data, bytes);
            return true;
        }
    CUdeviceptr p;
    size_t size = 0;
    if (cuModuleGetGlobal(&p, &size, cx->module, name) != CUDA_SUCCESS || size != bytes)
        return false;
    RT_CU_CHECK(cuMemcpyDtoH(host, p, bytes));
    cx->constants = realloc(cx->constants, sizeof *cx->constants * (size_t)(cx->nconstants + 1));
    cx->constants[cx->nconstants++] = (struct cached_constant){strdup(name), memcpy(malloc(bytes), host, bytes), bytes};
    return true;
}

void rt_cuda_launch(rt_cuda_ctx *cx, const char *kernel, unsigned gx, unsigned gy, unsigned gz, unsigned block,
                    size_t smem, void **params)
{
    kernel_entry *k = kernel_lookup(cx, kernel);
    if (smem > 48 * 1024 && smem > k->smem_opt_in) {
        RT_CU_CHECK(cuFuncSetAttribute(k->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem));
        k->smem_opt_in = smem;
    }
    if (gx == 0 || gy == 0 || gz == 0)
        return; /* empty tensors */
    RT_CU_CHECK(cuLaunchKernel(k->fn, gx, gy, gz, block, 1, 1, (unsigned)smem, (CUstream)(cx->launch ? cx->launch : cx->stream),
                               params, NULL));
}

void rt_cuda_reserve_scratch(rt_cuda_ctx *cx, size_t bytes)
{
    if (bytes <= cx->scratch_bytes)
        return;
    enum cudaStreamCaptureStatus capturing;
    RT_CUDART_CHECK(cudaStreamIsCapturing(cx->stream, &capturing));
    if (capturing != cudaStreamCaptureStatusNone) {
        fprintf(stderr, "train_rank: internal error: scratch must grow to %zu bytes while a CUDA graph records; "
                        "run one step eagerly before capturing\n", bytes);
        exit(1);
    }
    RT_CUDART_CHECK(cudaStreamSynchronize(cx->stream)); /* earlier kernels may still read the old buffer */
    if (cx->scratch)
        RT_CUDART_CHECK(cudaFree(cx->scratch));
    RT_CUDART_CHECK(cudaMalloc(&cx->scratch, bytes));
    cx->scratch_bytes = bytes;
}

void *rt_cuda_scratch(rt_cuda_ctx *cx, size_t bytes)
{
    rt_cuda_reserve_scratch(cx, bytes);
    return cx->scratch;
}

void rt_cuda_ready_marks(rt_cuda_ctx *cx, int n)
{
    cx->ready = calloc((size_t)n + 1, sizeof(cudaEvent_t));
    for (; cx->nready < n; cx->nready++)
        RT_CUDART_CHECK(cudaEventCreateWithFlags(&cx->ready[cx->nready], cudaEventDisableTiming));
}

/* A slot the plan has (rt_cuda_ready_marks counted them at open), or an internal error. */
static cudaEvent_t ready_event(const rt_cuda_ctx *cx, int slot)
{
    if (slot < 0 || slot >= cx->nready) {
        fprintf(stderr, "train_rank: internal error: grad_ready slot %d, but the plan has %d (runtime/cuda/device.c)\n",
                slot, cx->nready);
        exit(1);
    }
    return cx->ready[slot];
}

void rt_cuda_mark_ready(rt_cuda_ctx *cx, int slot)
{
    enum cudaStreamCaptureStatus capturing;
    RT_CUDART_CHECK(cudaStreamIsCapturing(cx->stream, &capturing));
    /* captured, an external record node: each replay records it, so a wait after the launch sees
     * this replay's mark (outside a capture the flag is invalid) */
    unsigned flags = capturing == cudaStreamCaptureStatusNone ? cudaEventRecordDefault : cudaEventRecordExternal;
    RT_CUDART_CHECK(cudaEventRecordWithFlags(ready_event(cx, slot), cx->stream, flags));
}

void rt_cuda_wait_ready(const rt_cuda_ctx *cx, void *stream, int slot)
{
    RT_CUDART_CHECK(cudaStreamWaitEvent((cudaStream_t)stream, ready_event(cx, slot), 0));
}
