// fake_cuda.cpp — the MoE kernels (kernels_templates/moe.cuh) run on the host, so that
// tests/gpu/ops_test.c can check them against the CPU kernels through the real launchers
// (runtime/cuda/launchers.c, matmul.c) where no GPU is (run.sh). Device memory is host memory; a
// launch runs its blocks one after another, each block's threads as std::threads meeting at a
// std::barrier (__syncthreads, and __shfl_xor_sync through a slot per thread); atomics are
// std::atomic_ref. Kernels without an entry in `table` do nothing, so their cases fail: only the
// moe_ cases mean anything here. It checks the kernels' logic and indexing (under ASan/UBSan),
// not the GPU's memory model, timing or its float rounding of exp/log.
#include <cuda.h>
#include <cuda_bf16.h>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

thread_local uint3 threadIdx, blockIdx;
uint3 blockDim, gridDim;
static std::barrier<> *bar;
#undef __global__
#undef __device__
#undef __forceinline__
#undef __shared__
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static // blocks run one at a time: one static per kernel is the block's
static void __syncthreads() { bar->arrive_and_wait(); }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
template <class T> T __shfl_xor_sync(unsigned, T v, int m)
{
    static T slots[1024];
    slots[threadIdx.x] = v;
    __syncthreads();
    T r = slots[threadIdx.x ^ m];
    __syncthreads();
    return r;
}
static int atomicAdd(int *p, int v) { return std::atomic_ref<int>(*p).fetch_add(v); }
static float atomicAdd(float *p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }
using std::exp; using std::log; using std::fmax;
#include "common.cuh"
#include "moe.cuh"

template <class... A, size_t... I> static void invoke(void (*f)(A...), void **p, std::index_sequence<I...>)
{
    f(*(std::remove_reference_t<A> *)p[I]...);
}
template <class... A> static std::function<void(void **)> wrap(void (*f)(A...))
{
    return [f](void **p) { invoke(f, p, std::index_sequence_for<A...>{}); };
}
static std::map<std::string, std::function<void(void **)>> table = {
#define E(sfx, T) {"mcc_moe_route_" #sfx, wrap(mcc_moe_route_##sfx)}, {"mcc_moe_route_grad_" #sfx, wrap(mcc_moe_route_grad_##sfx)}, \
    {"mcc_moe_bias_count_" #sfx, wrap(mcc_moe_bias_count_##sfx)}, {"mcc_moe_capacity_" #sfx, wrap(mcc_moe_capacity_##sfx)},      \
    {"mcc_moe_permute_" #sfx, wrap(mcc_moe_permute_##sfx)}, {"mcc_moe_unpermute_" #sfx, wrap(mcc_moe_unpermute_##sfx)},            \
    {"mcc_moe_unpermute_grad_" #sfx, wrap(mcc_moe_unpermute_grad_##sfx)}, {"mcc_moe_aux_terms_" #sfx, wrap(mcc_moe_aux_terms_##sfx)}, \
    {"mcc_moe_aux_grad_" #sfx, wrap(mcc_moe_aux_grad_##sfx)}, {"mcc_moe_z_terms_" #sfx, wrap(mcc_moe_z_terms_##sfx)},              \
    {"mcc_moe_z_grad_" #sfx, wrap(mcc_moe_z_grad_##sfx)},
    MCC_FOR_FLOATS(E)
#undef E
    {"mcc_moe_count_i32", wrap(mcc_moe_count_i32)}, {"mcc_moe_sum_f64", wrap(mcc_moe_sum_f64)},
    {"mcc_moe_bias_update_f32", wrap(mcc_moe_bias_update_f32)}, {"mcc_moe_sort_hist_i32", wrap(mcc_moe_sort_hist_i32)},
    {"mcc_moe_sort_scan_i32", wrap(mcc_moe_sort_scan_i32)}, {"mcc_moe_sort_scatter_i32", wrap(mcc_moe_sort_scatter_i32)},
    {"mcc_moe_runs_offsets", wrap(mcc_moe_runs_offsets)}, {"mcc_moe_move_runs", wrap(mcc_moe_move_runs)},
};

extern "C" {
void rt_cuda_launch(void *cx, const char *kernel, unsigned gx, unsigned gy, unsigned gz, unsigned block, size_t smem,
                    void **params)
{
    auto it = table.find(kernel);
    if (it == table.end())
        return; // not emulated: the case fails on its poisoned results
    static const char *const syncing[] = {"mcc_moe_sort_hist_i32", "mcc_moe_sort_scan_i32", "mcc_moe_sort_scatter_i32",
                                          "mcc_moe_unpermute_grad_f32", "mcc_moe_unpermute_grad_bf16", "mcc_moe_sum_f64"};
    bool sync = false; // the kernels with __syncthreads or block reductions; the others' threads run in turn
    for (const char *k : syncing)
        sync |= !strcmp(k, kernel);
    if (gy != 1 || gz != 1 || block == 0 || block > 1024 || gx == 0) {
        fprintf(stderr, "EMU: bad launch of %s: %u x %u x %u, block %u\n", kernel, gx, gy, gz, block);
        abort();
    }
    gridDim = {gx, 1, 1}, blockDim = {block, 1, 1};
    for (unsigned b = 0; b < gx; b++) {
        std::barrier<> br((ptrdiff_t)block);
        bar = &br;
        if (!sync) {
            for (unsigned t = 0; t < block; t++) {
                threadIdx = {t, 0, 0}, blockIdx = {b, 0, 0};
                it->second(params);
            }
            continue;
        }
        std::vector<std::thread> ts;
        for (unsigned t = 0; t < block; t++)
            ts.emplace_back([&, b, t] { threadIdx = {t, 0, 0}, blockIdx = {b, 0, 0}; it->second(params); });
        for (auto &t : ts)
            t.join();
    }
}
static void *scratch;
void *rt_cuda_scratch(void *cx, size_t bytes) { free(scratch); return scratch = malloc(bytes ? bytes : 1); }
CUstream rt_cuda_stream(const void *cx) { return nullptr; }
bool cg_cuda_compile_kernels(void **image, size_t *size, char *err, size_t n) { *image = malloc(1), *size = 1; return true; }
void *rt_cuda_ctx_create(const void *image, char *err, size_t n) { return malloc(1); }
void rt_cuda_ctx_free(void *cx) { free(cx); }
void rt_cu_check(int status, const char *call, const char *file, int line, const char *(*name)(int))
{
    if (status) { fprintf(stderr, "EMU: %s failed at %s:%d\n", call, file, line); abort(); }
}
const char *rt_cu_error_name(int s) { return "?"; }
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) { *p = (CUdeviceptr)malloc(n); return CUDA_SUCCESS; }
CUresult cuMemFree_v2(CUdeviceptr p) { free((void *)p); return CUDA_SUCCESS; }
CUresult cuMemcpyAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream) { memmove((void *)d, (void *)s, n); return CUDA_SUCCESS; }
CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, CUstream) { memcpy(d, (void *)s, n); return CUDA_SUCCESS; }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, CUstream) { memcpy((void *)d, s, n); return CUDA_SUCCESS; }
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream) { memset((void *)d, v, n); return CUDA_SUCCESS; }
CUresult cuMemsetD32Async(CUdeviceptr d, unsigned v, size_t n, CUstream)
{
    for (size_t i = 0; i < n; i++) ((unsigned *)d)[i] = v;
    return CUDA_SUCCESS;
}
CUresult cuStreamSynchronize(CUstream) { return CUDA_SUCCESS; }
#define S(n) void cuda_##n(void *, const void *) {}
S(ALL_GATHER) S(ALL_GATHER_SEQ) S(ALL_REDUCE) S(ALL_REDUCE_INPLACE) S(ALL_TO_ALL_V) S(ATTENTION)
S(ATTENTION_DROPOUT) S(ATTENTION_DROPOUT_GRAD) S(ATTENTION_GRAD) S(CE_GRAD_SHARDED) S(CE_LOSS) S(CE_ROW_MAX) S(CE_ROW_STATS)
S(LOCAL_SHARD) S(LOCAL_SLICE_SEQ) S(RING_SHIFT) S(ATTENTION_MERGE) S(CP_ALL_TO_ALL)

S(REDUCE_SCATTER) S(REDUCE_SCATTER_SEQ)
}
