// fake_cublaslt.cpp — the cuBLASLt (and CUDA runtime) calls of runtime/cuda/matmul.c for run.sh's
// emulation: a naive column-major D = alpha op(A) op(B) + beta C over f32/bf16 in double, one
// "algorithm", no epilogues (ignored: those cases fail) and no FP8 (skipped). Enough for the
// grouped GEMMs' per-expert offsets, leading dimensions and transposes.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdlib>
#include <cstring>
#include <cstdio>
struct lay { cudaDataType_t t; uint64_t rows, cols; int64_t ld; };
struct desc { int ta, tb; };
static double ld_(const void *p, cudaDataType_t t, size_t i)
{
    return t == CUDA_R_16BF ? (double)__bfloat162float(((const __nv_bfloat16 *)p)[i]) : (double)((const float *)p)[i];
}
static void st_(void *p, cudaDataType_t t, size_t i, double v)
{
    if (t == CUDA_R_16BF) ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn((float)v); else ((float *)p)[i] = (float)v;
}
extern "C" {
cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) { *h = (cublasLtHandle_t)malloc(8); return CUBLAS_STATUS_SUCCESS; }
const char *cublasLtGetStatusName(cublasStatus_t) { return "?"; }
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
    else if (a == CUBLASLT_MATMUL_DESC_EPILOGUE) {}
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
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int,
                                              cublasLtMatmulHeuristicResult_t r[], int *n)
{
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
    for (const lay *l : {a, b, o})
        if (l->t != CUDA_R_32F && l->t != CUDA_R_16BF)
            return CUBLAS_STATUS_SUCCESS; // FP8: not emulated
    uint64_t M = o->rows, N = o->cols, K = x->ta ? a->rows : a->cols;
    double al = *(const float *)alpha, be = *(const float *)beta;
    if ((x->ta ? a->cols : a->rows) != M || (x->tb ? b->rows : b->cols) != N || (x->tb ? b->cols : b->rows) != K) {
        fprintf(stderr, "EMU: cublasLtMatmul shapes disagree\n");
        abort();
    }
    for (uint64_t j = 0; j < N; j++)
        for (uint64_t i = 0; i < M; i++) {
            double s = 0;
            for (uint64_t k = 0; k < K; k++)
                s += ld_(A, a->t, x->ta ? k + i * a->ld : i + k * a->ld) * ld_(B, b->t, x->tb ? j + k * b->ld : k + j * b->ld);
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
