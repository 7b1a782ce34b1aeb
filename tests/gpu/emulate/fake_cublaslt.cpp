// fake_cublaslt.cpp — the cuBLASLt (and CUDA runtime) calls of runtime/cuda/matmul.c for run.sh's
// emulation: a naive column-major D = alpha op(A) op(B) + beta C over f32/bf16 in double, one
// "algorithm", no epilogues (ignored: those cases fail). Enough for the grouped GEMMs' per-expert
// offsets, leading dimensions and transposes. FP8 A and B (E4M3, E5M2: CUDA's own host conversions
// of cuda_fp8.h) with their scales as cuBLASLt defines them, so that blockwise FP8's GEMM (matmul.c's
// fp8_gemm) is checked against what cuBLASLt would read; each rule cites its source:
//  - cublasLt.h, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER: "If not specified, or set to NULL, the scaling
//    factor is assumed to be 1" (SCALAR_32F, the default mode: one float for the whole matrix).
//  - cublasLt.h, CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F: "a dedicated CUDA_R_32F scaling factor for
//    each 128-element block in the innermost dimension of the corresponding data tensor" (A's rows
//    under TRANSA=T: the reduction k); BLK128x128_32F: "a dedicated CUDA_R_32F scaling factor for
//    each 128x128-element block in the corresponding data tensor".
//  - Where a block's scale sits (cublasLt.h does not say; cuBLAS's guide was not reachable from
//    here): Transformer Engine's "GEMM ready" format, which it hands to cublasLtMatmul with these
//    modes (docs/features/low_precision_training/fp8_blockwise_scaling.rst: "rowwise scaling
//    factors: transposed, padded to the multiple of 4 along the last dimension, shape:
//    [B/128, pad_to_4(A)]" for data [A, B]; Float8BlockQuantizer::get_scale_shape's 2D case
//    "sinv0 = ceildiv(m_dim, kBlockLen); sinv1 = roundup(ceildiv(k_dim, kBlockLen), 4)"): for a
//    matrix stored rows x cols column-major (rows the innermost), VEC128's scale of (r, c) at
//    (r / 128) * roundup(cols, 4) + c, BLK128x128's at (c / 128) * roundup(rows / 128, 4) + r / 128.
//  - Which combinations run (anything else: CUBLAS_STATUS_NOT_SUPPORTED, from the heuristic as from
//    cublasLtMatmul): Transformer Engine's cublaslt_gemm.cu, "Only 1D by 1D, 1D by 2D, and 2D by 1D
//    block scaling supported, but got 2D by 2D", a block mode on both or neither, FP8 A and B (not
//    both E5M2: "FP8 GEMM doesn't support both a and b types being torch.float8_e5m2"), and Hopper's
//    FP8 layout, TN only (A transposed, B not: TE's block-scaled GEMMs pass transa = T, transb = N).
//  - The heuristic refuses a block-scaled descriptor whose scale pointers are not set
//    (CUBLAS_STATUS_INVALID_VALUE): an H100's cuBLASLt 13.1 refused every block-scaled GEMM of a
//    matmul.c that set them only after the heuristic (bench/RESULTS.md, 2026-12-08); NVIDIA's
//    LtBlk128x128Fp8Matmul sample sets them first, and with them set first the H100 ran them.
//  - cublasLtMatmul refuses (CUBLAS_STATUS_NOT_SUPPORTED) scale pointers not 16-byte aligned: an
//    H100's cuBLASLt 13.1 refused the tensorwise experts' GEMMs, whose pointers were 4 bytes apart,
//    even planned for their exact size, and ran the blockwise experts' aligned ones (bench/RESULTS.md,
//    2026-12-08). The cause as taken here, until a GPU confirms it.
//  - The accumulation: fp32 (DeepSeek-V3's promotion; CUBLASLT_MATMUL_DESC_FAST_ACCUM off), here
//    in double, so the emulated sum is the exact one the CPU oracle's also approximates.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cstdlib>
#include <cstring>
#include <cstdio>
struct lay { cudaDataType_t t; uint64_t rows, cols; int64_t ld; };
struct desc { int ta, tb; const float *scale[2]; int mode[2]; }; // [0] A's, [1] B's
static double ld_(const void *p, cudaDataType_t t, size_t i)
{
    if (t == CUDA_R_8F_E4M3) return (double)(float)((const __nv_fp8_e4m3 *)p)[i];
    if (t == CUDA_R_8F_E5M2) return (double)(float)((const __nv_fp8_e5m2 *)p)[i];
    return t == CUDA_R_16BF ? (double)__bfloat162float(((const __nv_bfloat16 *)p)[i]) : (double)((const float *)p)[i];
}
static bool fp8(cudaDataType_t t) { return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2; }
static uint64_t round4(uint64_t n) { return (n + 3) / 4 * 4; }
static bool block_mode(int m) { return m == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F || m == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F; }
// The scale of element (r, c) of a matrix stored l (column-major: r the innermost) under mode m
static double scale_at(const float *s, int m, const lay *l, uint64_t r, uint64_t c)
{
    if (!s) return 1;
    if (m == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F) return s[r / 128 * round4(l->cols) + c];
    if (m == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F) return s[c / 128 * round4((l->rows + 127) / 128) + r / 128];
    return s[0];
}
// Whether cuBLASLt runs this GEMM (the combinations above)
static bool supported(const desc *x, const lay *a, const lay *b)
{
    bool blocks = block_mode(x->mode[0]) || block_mode(x->mode[1]);
    if (fp8(a->t) != fp8(b->t) || (a->t == CUDA_R_8F_E5M2 && b->t == CUDA_R_8F_E5M2))
        return false;
    if (!blocks)
        return x->mode[0] == CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F && x->mode[1] == CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    return fp8(a->t) && block_mode(x->mode[0]) && block_mode(x->mode[1]) && x->ta && !x->tb &&
           !(x->mode[0] == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F && x->mode[1] == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F);
}
static void st_(void *p, cudaDataType_t t, size_t i, double v)
{
    if (t == CUDA_R_16BF) ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn((float)v); else ((float *)p)[i] = (float)v;
}
extern "C" {
cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) { *h = (cublasLtHandle_t)malloc(8); return CUBLAS_STATUS_SUCCESS; }
const char *cublasLtGetStatusName(cublasStatus_t) { return "?"; }
size_t cublasLtGetVersion(void) { return CUBLAS_VERSION; }
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t, cudaDataType_t)
{
    *d = (cublasLtMatmulDesc_t)calloc(1, sizeof **d);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *v, size_t n)
{
    desc *x = (desc *)d;
    if (a == CUBLASLT_MATMUL_DESC_TRANSA) x->ta = *(const int *)v == CUBLAS_OP_T;
    else if (a == CUBLASLT_MATMUL_DESC_TRANSB) x->tb = *(const int *)v == CUBLAS_OP_T;
    else if (a == CUBLASLT_MATMUL_DESC_A_SCALE_POINTER) x->scale[0] = *(const float *const *)v;
    else if (a == CUBLASLT_MATMUL_DESC_B_SCALE_POINTER) x->scale[1] = *(const float *const *)v;
    else if (a == CUBLASLT_MATMUL_DESC_A_SCALE_MODE) x->mode[0] = *(const int32_t *)v;
    else if (a == CUBLASLT_MATMUL_DESC_B_SCALE_MODE) x->mode[1] = *(const int32_t *)v;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType t, uint64_t rows, uint64_t cols, int64_t ld)
{
    *l = (cublasLtMatrixLayout_t)calloc(1, sizeof **l);
    *(lay *)*l = lay{t, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a, const void *v, size_t)
{
    lay *x = (lay *)l;
    if (a == CUBLASLT_MATRIX_LAYOUT_ROWS) x->rows = *(const uint64_t *)v;
    else if (a == CUBLASLT_MATRIX_LAYOUT_COLS) x->cols = *(const uint64_t *)v;
    else if (a == CUBLASLT_MATRIX_LAYOUT_LD) x->ld = *(const int64_t *)v;
    else abort();
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) { *p = (cublasLtMatmulPreference_t)calloc(1, sizeof **p); return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { free(p); return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t, const void *, size_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int,
                                              cublasLtMatmulHeuristicResult_t r[], int *n)
{
    const desc *x = (const desc *)d;
    if (!supported(x, (const lay *)a, (const lay *)b))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    for (int i = 0; i < 2; i++) /* block scales without their pointers (above) */
        if ((x->mode[i] == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F || x->mode[i] == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F) &&
            !x->scale[i])
            return CUBLAS_STATUS_INVALID_VALUE;
    memset(&r[0], 0, sizeof r[0]);
    *n = 1;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t d, const void *alpha, const void *A, cublasLtMatrixLayout_t Ad,
                              const void *B, cublasLtMatrixLayout_t Bd, const void *beta, const void *C, cublasLtMatrixLayout_t Cd,
                              void *D, cublasLtMatrixLayout_t Dd, const cublasLtMatmulAlgo_t *, void *, size_t, cudaStream_t)
{
    const desc *x = (const desc *)d;
    const lay *a = (const lay *)Ad, *b = (const lay *)Bd, *c = (const lay *)Cd, *o = (const lay *)Dd;
    if (!supported(x, a, b))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    for (int i = 0; i < 2; i++) /* scale pointers 16-byte aligned (above) */
        if ((uintptr_t)x->scale[i] % 16)
            return CUBLAS_STATUS_NOT_SUPPORTED;
    uint64_t M = o->rows, N = o->cols, K = x->ta ? a->rows : a->cols;
    double al = *(const float *)alpha, be = *(const float *)beta;
    if ((x->ta ? a->cols : a->rows) != M || (x->tb ? b->rows : b->cols) != N || (x->tb ? b->cols : b->rows) != K) {
        fprintf(stderr, "EMU: cublasLtMatmul shapes disagree\n");
        abort();
    }
    for (uint64_t j = 0; j < N; j++)
        for (uint64_t i = 0; i < M; i++) {
            double s = 0;
            for (uint64_t k = 0; k < K; k++) {
                uint64_t ar = x->ta ? k : i, ac = x->ta ? i : k, br = x->tb ? j : k, bc = x->tb ? k : j;
                s += ld_(A, a->t, ar + ac * a->ld) * scale_at(x->scale[0], x->mode[0], a, ar, ac) *
                     ld_(B, b->t, br + bc * b->ld) * scale_at(x->scale[1], x->mode[1], b, br, bc);
            }
            st_(D, o->t, i + j * o->ld, al * s + (be != 0 ? be * ld_(C, c->t, i + j * c->ld) : 0));
        }
    return CUBLAS_STATUS_SUCCESS;
}
cudaError_t cudaMalloc(void **p, size_t n) { *p = malloc(n); return cudaSuccess; }
cudaError_t cudaFree(void *p) { free(p); return cudaSuccess; }
// events time nothing here (a benchmark's logic runs, its times read 0)
cudaError_t cudaEventCreate(cudaEvent_t *e) { *e = nullptr; return cudaSuccess; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) { *e = nullptr; return cudaSuccess; }
// streams run in order on the host: a side stream is the compute stream (matmul.c's expert_streams)
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) { *s = (cudaStream_t)1; return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return cudaSuccess; }
cudaError_t cudaEventDestroy(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t, cudaEvent_t) { *ms = 0; return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
cudaError_t cudaMemcpyAsync(void *, const void *, size_t, cudaMemcpyKind, cudaStream_t) { abort(); }
cudaError_t cudaStreamIsCapturing(cudaStream_t, cudaStreamCaptureStatus *s) { *s = cudaStreamCaptureStatusNone; return cudaSuccess; }
const char *rt_cudart_error_name(int) { return "?"; }
bool rt_cuda_comm_in_flight(const void *) { return false; }
void *rt_cuda_comm_fork(void *) { abort(); }
void rt_cuda_comm_join(void *) { abort(); }
void rt_cuda_gather_seq(void *, const void *, void *) { abort(); }
}
