// fake_cuda.cpp — the MoE kernels (kernels_templates/moe.cuh), the attention kernels
// (attention.cuh) and fp32-moment AdamW (optimizer.cuh) run on the host, so that tests/gpu/ops_test.c and attention_test.c can check them
// against the CPU kernels through the real launchers (runtime/cuda/launchers.c, matmul.c,
// attention.c) where no GPU is (run.sh). Device memory is host memory; a launch runs its blocks one
// after another, each block's threads as std::threads meeting at a std::barrier (__syncthreads) and
// each warp's at its own (__syncwarp, __shfl_xor_sync through a slot per thread, and attention's
// warp-wide PTX: ldmatrix and mma.sync m16n8k16 from every lane's fragments, cp.async as a plain
// copy into one shared-memory array); atomics are std::atomic_ref. Kernels without an entry in
// `table` do nothing, so their cases fail. It checks the kernels' logic and indexing (under
// ASan/UBSan), not the GPU's memory model, timing or its float rounding of exp/log.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <vector_functions.h>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

thread_local uint3 threadIdx, blockIdx;
uint3 blockDim, gridDim;
static std::barrier<> *bar;
static thread_local std::barrier<> *warp_bar; // this thread's warp's
#undef __global__
#undef __device__
#undef __forceinline__
#undef __shared__
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static // blocks run one at a time: one static per kernel is the block's
#define __launch_bounds__(...)
static void __syncthreads() { bar->arrive_and_wait(); }
static void __syncwarp() { warp_bar->arrive_and_wait(); }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
template <class T> T __shfl_xor_sync(unsigned, T v, int m)
{
    static T slots[1024];
    slots[threadIdx.x] = v;
    __syncwarp();
    T r = slots[threadIdx.x ^ m];
    __syncwarp();
    return r;
}
static int atomicAdd(int *p, int v) { return std::atomic_ref<int>(*p).fetch_add(v); }
static float atomicAdd(float *p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }
static void atomicAdd(float2 *p, float2 v) { atomicAdd(&p->x, v.x), atomicAdd(&p->y, v.y); }
static float __fsqrt_rn(float x) { return std::sqrt(x); }
static float __fdiv_rn(float a, float b) { return a / b; }
static float __fmul_rn(float a, float b) { return a * b; }
static float __frcp_rn(float a) { return 1.0f / a; }
static unsigned __reduce_max_sync(unsigned, unsigned v)
{
    static unsigned slots[1024];
    slots[threadIdx.x] = v;
    __syncwarp();
    unsigned m = 0;
    for (unsigned l = threadIdx.x & ~31u; l < (threadIdx.x & ~31u) + 32; l++)
        m = slots[l] > m ? slots[l] : m;
    __syncwarp();
    return m;
}
static unsigned atomicMax(unsigned *p, unsigned v)
{
    std::atomic_ref<unsigned> a(*p);
    unsigned old = a.load();
    while (old < v && !a.compare_exchange_weak(old, v)) {
    }
    return old;
}
using std::exp; using std::log; using std::fmax; using std::min; using std::max;
#include "common.cuh"
#include "moe.cuh"
#include "elementwise.cuh"
#include "reduce.cuh"
#include "rope.cuh"
#include "optimizer.cuh"
#include "norms.cuh"
#include "fp8.cuh"

// attention.cuh's PTX primitives. Shared addresses are offsets into emu_smem (the block's dynamic
// shared memory: blocks run one at a time).
#define MCC_ATTN_EMULATED
alignas(128) static unsigned char emu_smem[232448];
#define MCC_ATTN_DYNAMIC_SMEM unsigned char *mcc_attn_smem = emu_smem
static unsigned mcc_attn_smem_addr(const void *p) { return (unsigned)((const unsigned char *)p - emu_smem); }
static void emu_copy(unsigned dst, const void *src, bool valid, size_t n)
{
    if (valid)
        memcpy(emu_smem + dst, src, n);
    else
        memset(emu_smem + dst, 0, n);
}
static void mcc_attn_cp16(unsigned dst, const void *src, bool valid) { emu_copy(dst, src, valid, 16); }
static void mcc_attn_cp4(unsigned dst, const void *src, bool valid) { emu_copy(dst, src, valid, 4); }
static void mcc_attn_cp_commit() {}
template <int N> static void mcc_attn_cp_wait() {}
static float emu_bf16(unsigned reg, int half)
{
    unsigned u = (reg >> (16 * half) & 0xffffu) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
// ldmatrix .x4: lane l gives the address of row l%8 of matrix l/8; each lane gets, of matrix m,
// (row l/4, columns 2(l%4), +1), or with .trans (rows 2(l%4), +1, column l/4).
template <bool TRANS> static void mcc_attn_ldsm4(unsigned addr, unsigned (&r)[4])
{
    static unsigned rows[1024];
    const int lane = threadIdx.x & 31, w0 = threadIdx.x & ~31u;
    rows[threadIdx.x] = addr;
    __syncwarp();
    for (int m = 0; m < 4; m++) {
        uint16_t lo, hi;
        if (TRANS) {
            memcpy(&lo, emu_smem + rows[w0 + 8 * m + 2 * (lane & 3)] + 2 * (lane >> 2), 2);
            memcpy(&hi, emu_smem + rows[w0 + 8 * m + 2 * (lane & 3) + 1] + 2 * (lane >> 2), 2);
        } else {
            memcpy(&lo, emu_smem + rows[w0 + 8 * m + (lane >> 2)] + 4 * (lane & 3), 2);
            memcpy(&hi, emu_smem + rows[w0 + 8 * m + (lane >> 2)] + 4 * (lane & 3) + 2, 2);
        }
        r[m] = lo | (unsigned)hi << 16;
    }
    __syncwarp();
}
// mma m16n8k16 (attention.cuh's fragment layout): A(row, k) is half k%2 of register
// row/8 + 2(k/8) of lane 4(row%8) + (k%8)/2; B(k, n) half k%2 of register k/8 of lane 4n + (k%8)/2.
static void mcc_attn_mma(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1)
{
    static unsigned fa[1024][4], fb[1024][2];
    const int lane = threadIdx.x & 31, w0 = threadIdx.x & ~31u, g = lane >> 2, t = lane & 3;
    memcpy(fa[threadIdx.x], a, sizeof a);
    fb[threadIdx.x][0] = b0, fb[threadIdx.x][1] = b1;
    __syncwarp();
    for (int i = 0; i < 4; i++) {
        const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
        float acc = 0.f;
        for (int k = 0; k < 16; k++)
            acc += emu_bf16(fa[w0 + 4 * (row & 7) + (k & 7) / 2][(row >> 3) + 2 * (k >> 3)], k & 1) *
                   emu_bf16(fb[w0 + 4 * col + (k & 7) / 2][k >> 3], k & 1);
        c[i] += acc;
    }
    __syncwarp();
}
#include "attention.cuh"

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
    {"mcc_moe_permute_" #sfx, wrap(mcc_moe_permute_##sfx)}, {"mcc_moe_aux_terms_" #sfx, wrap(mcc_moe_aux_terms_##sfx)},            \
    {"mcc_moe_aux_grad_" #sfx, wrap(mcc_moe_aux_grad_##sfx)}, {"mcc_moe_z_terms_" #sfx, wrap(mcc_moe_z_terms_##sfx)},              \
    {"mcc_moe_z_grad_" #sfx, wrap(mcc_moe_z_grad_##sfx)},
    MCC_FOR_FLOATS(E)
#undef E
#define E(sfx, T, P) {"mcc_moe_unpermute_" #sfx, wrap(mcc_moe_unpermute_##sfx)},                                  \
    {"mcc_moe_unpermute_grad_" #sfx, wrap(mcc_moe_unpermute_grad_##sfx)},
    MCC_FOR_FLOAT_PAIRS(E)
#undef E
    {"mcc_moe_count_i32", wrap(mcc_moe_count_i32)}, {"mcc_moe_sum_f64", wrap(mcc_moe_sum_f64)},
    {"mcc_moe_bias_update_f32", wrap(mcc_moe_bias_update_f32)}, {"mcc_moe_sort_hist_i32", wrap(mcc_moe_sort_hist_i32)},
    {"mcc_moe_sort_scan_i32", wrap(mcc_moe_sort_scan_i32)}, {"mcc_moe_sort_scatter_i32", wrap(mcc_moe_sort_scatter_i32)},
    {"mcc_moe_runs_offsets", wrap(mcc_moe_runs_offsets)}, {"mcc_moe_move_runs", wrap(mcc_moe_move_runs)},
#define A(D) {"mcc_attention_fwd_bf16_d" #D, wrap(mcc_attention_fwd_bf16_d##D)},                                   \
    {"mcc_attention_bwd_bf16_d" #D, wrap(mcc_attention_bwd_bf16_d##D)},                                            \
    {"mcc_attention_fwd_f32_d" #D, wrap(mcc_attention_fwd_f32_d##D)},                                              \
    {"mcc_attention_bwd_f32_d" #D, wrap(mcc_attention_bwd_f32_d##D)},
    A(16) A(64) A(128)
#undef A
    {"mcc_attention_bwd_pre_bf16", wrap(mcc_attention_bwd_pre_bf16)},
    {"mcc_attention_bwd_post_bf16", wrap(mcc_attention_bwd_post_bf16)},
    {"mcc_attention_merge_f32", wrap(mcc_attention_merge_f32)}, {"mcc_attention_merge_bf16", wrap(mcc_attention_merge_bf16)},
    // context parallelism's rope and pos_add (ops_test's cp cases)
#define E(sfx, T) {"mcc_rope_" #sfx, wrap(mcc_rope_##sfx)}, {"mcc_colsum_partial_" #sfx, wrap(mcc_colsum_partial_##sfx)}, \
    {"mcc_colsum_final_" #sfx, wrap(mcc_colsum_final_##sfx)},
    MCC_FOR_FLOATS(E)
#undef E
    // multi-latent attention's moves (ops_test's split_last_dim and concat_last_dim cases)
#define E(sfx, T) {"mcc_take_last_dim_" #sfx, wrap(mcc_take_last_dim_##sfx)},                                   \
    {"mcc_concat_last_dim_" #sfx, wrap(mcc_concat_last_dim_##sfx)},
    MCC_FOR_FLOATS(E)
#undef E
#define E(sfx, T, B) {"mcc_bias_add_" #sfx, wrap(mcc_bias_add_##sfx)}, {"mcc_copy_" #sfx, wrap(mcc_copy_##sfx)},
    MCC_FOR_FLOAT_PAIRS(E)
#undef E
    // the elementwise ops that take a row bound (ops.def's IR_OPF_ROW_BOUND; ops_test's "rows bounded"
    // cases: over expert parallelism's room, bounded by the rows received)
#define E(sfx, T) {"mcc_swiglu_" #sfx, wrap(mcc_swiglu_##sfx)},                                          \
    {"mcc_swiglu_grad_" #sfx, wrap(mcc_swiglu_grad_##sfx)}, {"mcc_add_" #sfx, wrap(mcc_add_##sfx)},                \
    {"mcc_mul_" #sfx, wrap(mcc_mul_##sfx)}, {"mcc_scale_" #sfx, wrap(mcc_scale_##sfx)},                            \
    {"mcc_gelu_" #sfx, wrap(mcc_gelu_##sfx)}, {"mcc_gelu_grad_" #sfx, wrap(mcc_gelu_grad_##sfx)},                  \
    {"mcc_silu_" #sfx, wrap(mcc_silu_##sfx)}, {"mcc_silu_grad_" #sfx, wrap(mcc_silu_grad_##sfx)},                  \
    {"mcc_squared_relu_" #sfx, wrap(mcc_squared_relu_##sfx)},                                                      \
    {"mcc_squared_relu_grad_" #sfx, wrap(mcc_squared_relu_grad_##sfx)},
    MCC_FOR_FLOATS(E)
#undef E
    // multi-token prediction's roll (ops_test's shift_seq cases)
    {"mcc_shift_seq", wrap(mcc_shift_seq)},
    // AdamW, on fp32 masters and on (copy, remainder) pairs (ops_test's adamw cases)
    {"mcc_adamw_f32_f32_f32", wrap(mcc_adamw_f32_f32_f32)}, {"mcc_adamw_bf16_f32_f32", wrap(mcc_adamw_bf16_f32_f32)},
    // blockwise FP8's quantize (ops_test's fp8_block_quantize cases)
#define E(sfx, T) {"mcc_fp8_block_quantize_" #sfx, wrap(mcc_fp8_block_quantize_##sfx)},                    \
    {"mcc_fp8_tile_quantize_" #sfx, wrap(mcc_fp8_tile_quantize_##sfx)},                                            \
    {"mcc_fp8_expert_tile_quantize_" #sfx, wrap(mcc_fp8_expert_tile_quantize_##sfx)},
    MCC_FOR_FLOATS(E)
#undef E
    // FP8 experts' per-expert amax and quantize, their GEMMs' transposes, and the histories a row an
    // expert (ops_test's fp8_grouped_*, fp8_history_*, fp8_amax_fold cases)
#define E(sfx, T) {"mcc_fp8_amax_" #sfx, wrap(mcc_fp8_amax_##sfx)}, {"mcc_fp8_quantize_" #sfx, wrap(mcc_fp8_quantize_##sfx)},
    MCC_FOR_FLOATS(E)
#undef E
    {"mcc_fp8_transpose_u8", wrap(mcc_fp8_transpose_u8)}, {"mcc_fp8_history_amax_f32", wrap(mcc_fp8_history_amax_f32)},
    {"mcc_fp8_amax_fold_f32", wrap(mcc_fp8_amax_fold_f32)},
    {"mcc_fp8_history_update_f32", wrap(mcc_fp8_history_update_f32)},
    // the norms, forward and backward, each width (ops_test's norm cases: FP8's amax made as y or dx is stored)
#define N(sfx) {"mcc_layernorm_" #sfx, wrap(mcc_layernorm_##sfx)}, {"mcc_rmsnorm_" #sfx, wrap(mcc_rmsnorm_##sfx)},   \
    {"mcc_layernorm_grad_" #sfx, wrap(mcc_layernorm_grad_##sfx)}, {"mcc_rmsnorm_grad_" #sfx, wrap(mcc_rmsnorm_grad_##sfx)},
#define E(sfx, T, W) N(sfx) N(sfx##_w1)
    MCC_FOR_FLOAT_PAIRS(E)
#undef E
#undef N
};
static const std::map<std::string, const int *> constants = {
    {"mcc_attn_tiles_d16", mcc_attn_tiles_d16}, {"mcc_attn_tiles_d64", mcc_attn_tiles_d64},
    {"mcc_attn_tiles_d128", mcc_attn_tiles_d128},
};

extern "C" {
void rt_cuda_launch(void *cx, const char *kernel, unsigned gx, unsigned gy, unsigned gz, unsigned block, size_t smem,
                    void **params)
{
    auto it = table.find(kernel);
    if (it == table.end())
        return; // not emulated: the case fails on its poisoned results
    static const char *const syncing[] = {"mcc_moe_sort_hist_i32", "mcc_moe_sort_scan_i32", "mcc_moe_sort_scatter_i32",
                                          "mcc_moe_sum_f64"};
    // the kernels with __syncthreads, warp or block reductions (attention's bf16 kernels and merges:
    // warp-wide PTX); the others' threads run in turn
    bool sync = (strstr(kernel, "mcc_attention") && !strstr(kernel, "_f32_d") && !strstr(kernel, "bwd_post")) ||
                strstr(kernel, "mcc_colsum") || strstr(kernel, "mcc_moe_unpermute_grad_") ||
                strstr(kernel, "mcc_fp8_block_quantize") || strstr(kernel, "tile_quantize") ||
                strstr(kernel, "mcc_fp8_amax_") || strstr(kernel, "mcc_fp8_transpose") || strstr(kernel, "norm") ||
                strstr(kernel, "mcc_swiglu"); // the norms' group sums; FP8's amax made as a value is stored
    for (const char *k : syncing)
        sync |= !strcmp(k, kernel);
    if (gz != 1 || block == 0 || block > 1024 || gx == 0 || gy == 0 || smem > sizeof emu_smem) {
        fprintf(stderr, "EMU: bad launch of %s: %u x %u x %u, block %u, %zu bytes of shared memory\n", kernel, gx, gy,
                gz, block, smem);
        abort();
    }
    gridDim = {gx, gy, 1}, blockDim = {block, 1, 1};
    for (unsigned by = 0; by < gy; by++)
        for (unsigned b = 0; b < gx; b++) {
            std::barrier<> br((ptrdiff_t)block);
            bar = &br;
            if (!sync) {
                for (unsigned t = 0; t < block; t++) {
                    threadIdx = {t, 0, 0}, blockIdx = {b, by, 0};
                    it->second(params);
                }
                continue;
            }
            std::vector<std::unique_ptr<std::barrier<>>> warps; // a warp's lanes: 32, or the block's last few
            for (unsigned w = 0; w < (block + 31) / 32; w++)
                warps.emplace_back(new std::barrier<>((ptrdiff_t)std::min(32u, block - 32 * w)));
            std::vector<std::thread> ts;
            for (unsigned t = 0; t < block; t++)
                ts.emplace_back([&, b, by, t] {
                    threadIdx = {t, 0, 0}, blockIdx = {b, by, 0}, warp_bar = warps[t / 32].get();
                    it->second(params);
                });
            for (auto &t : ts)
                t.join();
        }
}
bool rt_cuda_read_constant(void *cx, const char *name, void *host, size_t bytes)
{
    auto it = constants.find(name);
    if (it == constants.end())
        return false;
    memcpy(host, it->second, bytes);
    return true;
}
static void *scratch;
void *rt_cuda_scratch(void *cx, size_t bytes) { free(scratch); return scratch = malloc(bytes ? bytes : 1); }
CUstream rt_cuda_stream(const void *cx) { return nullptr; }
static long invocations;
void rt_cuda_begin_function(void *cx) { invocations++; }
long rt_cuda_invocation(const void *cx) { return invocations; }
/* grad_ready's mark: the host runs one stream, in order, so a mark has nothing to record */
void rt_cuda_mark_ready(void *cx, int slot) {}
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
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream) { memmove((void *)d, (void *)s, n); return CUDA_SUCCESS; }
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
S(ALL_GATHER) S(ALL_GATHER_SEQ) S(ALL_REDUCE) S(ALL_REDUCE_INPLACE) S(ALL_TO_ALL_V) S(CE_GRAD_SHARDED) S(CE_LOSS) S(CE_ROW_MAX) S(CE_ROW_STATS)
S(LOCAL_SHARD) S(LOCAL_SLICE_SEQ) S(RING_SHIFT) S(CP_ALL_TO_ALL)

S(REDUCE_SCATTER) S(REDUCE_SCATTER_SEQ)
// the CUDA runtime calls of tests/gpu/attention_test.c
// (fake_cublaslt.cpp has cudaMalloc, cudaFree and the events)
cudaError_t cudaSetDevice(int) { return cudaSuccess; }
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind) { memmove(d, s, n); return cudaSuccess; }
cudaError_t cudaMemcpy2DAsync(void *d, size_t dpitch, const void *s, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind, cudaStream_t)
{
    for (size_t r = 0; r < height; r++)
        memmove((char *)d + r * dpitch, (const char *)s + r * spitch, width);
    return cudaSuccess;
}
cudaError_t cudaMemset(void *d, int v, size_t n) { memset(d, v, n); return cudaSuccess; }
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
// CUDA graphs (attention_test's cuDNN replays; no cuDNN here): not emulated
cudaError_t cudaStreamBeginCapture(cudaStream_t, cudaStreamCaptureMode) { abort(); }
cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t *) { abort(); }
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *, cudaGraph_t, unsigned long long) { abort(); }
cudaError_t cudaGraphLaunch(cudaGraphExec_t, cudaStream_t) { abort(); }
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t) { abort(); }
cudaError_t cudaGraphDestroy(cudaGraph_t) { abort(); }
}
