/* cuda_device.c — the CUDA device: device memory, the plan's cubin, and functions run as CUDA
 * graphs. A function's first call runs eagerly (it sizes scratch space and lets cuBLASLt pick
 * its algorithms); the second call records it into a graph, and every later call replays it,
 * so a step costs a handful of host calls. MCC_CUDA_GRAPHS=0 keeps every call eager. */
#include "cuda_ctx.h"
#include "runtime/device.h"
#include "runtime/program.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    rt_cuda_ctx *cx;
    cudaGraphExec_t *graphs;        /* per function, once recorded */
    int *calls;                     /* per function: calls so far */
    bool use_graphs;
} cuda_state;

static cuda_state *state(rt_program *p) { return p->dev_state; }
static cudaStream_t stream(rt_program *p) { return (cudaStream_t)rt_cuda_stream(state(p)->cx); }

static void cuda_open(rt_program *p, const void *image)
{
    const char *local = getenv("LOCAL_RANK");
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0)
        RT_CUDART_CHECK(cudaSetDevice(local ? atoi(local) % ndev : 0));
    char err[512];
    cuda_state *s = calloc(1, sizeof *s);
    s->cx = image ? rt_cuda_ctx_create(image, err, sizeof err) : NULL;
    if (!s->cx) {
        fprintf(stderr, "train_rank: error: %s\n", image ? err : "the plan has no CUDA kernels; recompile with --target cuda");
        exit(1);
    }
    s->graphs = calloc((size_t)p->m->nfuncs, sizeof *s->graphs);
    s->calls = calloc((size_t)p->m->nfuncs, sizeof *s->calls);
    const char *g = getenv("MCC_CUDA_GRAPHS");
    s->use_graphs = !g || strcmp(g, "0") != 0;
    p->dev_state = s;
}

static void cuda_close(rt_program *p)
{
    cuda_state *s = state(p);
    for (int i = 0; i < p->m->nfuncs; i++)
        if (s->graphs[i])
            cudaGraphExecDestroy(s->graphs[i]);
    rt_cuda_ctx_free(s->cx);
    free(s->graphs);
    free(s->calls);
    free(s);
}

static void *cuda_alloc(rt_program *p, size_t bytes)
{
    void *ptr = NULL;
    if (!bytes)
        bytes = 1;
    cudaError_t e = cudaMalloc(&ptr, bytes);
    if (e != cudaSuccess) {
        size_t free_b = 0, total = 0;
        cudaMemGetInfo(&free_b, &total);
        fprintf(stderr, "train_rank: error: out of GPU memory allocating %.3f GiB (%.3f of %.3f GiB free); "
                        "mcc compile prints the plan's memory breakdown: lower --micro-batch-size or the model size\n",
                bytes / 1073741824.0, free_b / 1073741824.0, total / 1073741824.0);
        exit(1);
    }
    RT_CUDART_CHECK(cudaMemset(ptr, 0, bytes));
    return ptr;
}

static void cuda_free(rt_program *p, void *ptr) { cudaFree(ptr); }

static void cuda_upload(rt_program *p, void *dst, const void *src, size_t bytes)
{
    RT_CUDART_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream(p)));
    RT_CUDART_CHECK(cudaStreamSynchronize(stream(p)));
}

static void cuda_download(rt_program *p, void *dst, const void *src, size_t bytes)
{
    RT_CUDART_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream(p)));
    RT_CUDART_CHECK(cudaStreamSynchronize(stream(p)));
}

static void cuda_init(rt_program *p, float *w, int64_t n, uint64_t key, float std, bool normal, float value)
{
    long long count = n;
    unsigned long long k = key;
    unsigned blocks = (unsigned)((n + 255) / 256 < 65536 ? (n + 255) / 256 : 65536);
    if (normal) {
        void *params[] = {&w, &count, &k, &std};
        rt_cuda_launch(state(p)->cx, "mcc_init_normal_f32", blocks, 1, 1, 256, 0, params);
    } else {
        void *params[] = {&w, &count, &value};
        rt_cuda_launch(state(p)->cx, "mcc_init_const_f32", blocks, 1, 1, 256, 0, params);
    }
}

static void launch_all(rt_program *p, int func)
{
    rt_func_exec *x = &p->funcs[func];
    for (int i = 0; i < x->f->ninstrs; i++)
        rt_cuda_launchers[x->f->instrs[i].op](state(p)->cx, &x->calls[i]);
}

static void cuda_run(rt_program *p, int func)
{
    cuda_state *s = state(p);
    int call = s->calls[func]++;
    if (!s->use_graphs || call == 0) {
        launch_all(p, func);
        return;
    }
    if (!s->graphs[func]) {
        cudaGraph_t graph;
        RT_CUDART_CHECK(cudaStreamBeginCapture(stream(p), cudaStreamCaptureModeThreadLocal));
        launch_all(p, func);
        RT_CUDART_CHECK(cudaStreamEndCapture(stream(p), &graph));
        RT_CUDART_CHECK(cudaGraphInstantiate(&s->graphs[func], graph, 0));
        cudaGraphDestroy(graph);
    }
    RT_CUDART_CHECK(cudaGraphLaunch(s->graphs[func], stream(p)));
}

static size_t cuda_memory_in_use(rt_program *p)
{
    size_t free_b = 0, total = 0;
    RT_CUDART_CHECK(cudaStreamSynchronize(stream(p)));
    RT_CUDART_CHECK(cudaMemGetInfo(&free_b, &total));
    return total - free_b;
}

const rt_device rt_cuda_device = {"cuda",     cuda_open, cuda_alloc, cuda_free,          cuda_upload, cuda_download,
                                  cuda_init, cuda_run,  cuda_memory_in_use, cuda_close};
