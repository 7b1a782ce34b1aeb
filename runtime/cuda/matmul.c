/* matmul.c — every matmul through cuBLASLt: bf16 (or f32) in and out, fp32 accumulation, the
 * algorithm chosen by cuBLASLt's heuristic once per shape and cached. cuBLASLt is column-major;
 * a row-major C[M,N] = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T.
 * matmul_bias adds its bias in the GEMM's epilogue: a bias per row of the column-major C^T is
 * one per column N of our C. matmul_accumulate adds the product into its destination (beta = 1),
 * which may be f32 while A and B are bf16 (a weight gradient's accumulator). */
#include "cuda_ctx.h"

#include <cublasLt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WORKSPACE_BYTES (64u << 20)

typedef struct {
    int64_t m, n, k;
    bool ta, tb, bias;
    ir_dtype dt, cdt;               /* of A and B; of C and D */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
} matmul_plan;

static cublasLtHandle_t lt;
static void *workspace;
static matmul_plan *plans;
static int nplans, cap_plans;

static const char *lt_status_name(int s) { return cublasLtGetStatusName((cublasStatus_t)s); }
#define LT_CHECK(call) rt_cu_check((int)(call), #call, __FILE__, __LINE__, lt_status_name)

static cudaDataType_t cuda_type(ir_dtype dt) { return dt == IR_BF16 ? CUDA_R_16BF : dt == IR_F16 ? CUDA_R_16F : CUDA_R_32F; }

static matmul_plan *plan_for(int64_t m, int64_t n, int64_t k, bool ta, bool tb, bool bias, ir_dtype dt, ir_dtype cdt)
{
    for (int i = 0; i < nplans; i++) {
        matmul_plan *p = &plans[i];
        if (p->m == m && p->n == n && p->k == k && p->ta == ta && p->tb == tb && p->bias == bias && p->dt == dt &&
            p->cdt == cdt)
            return p;
    }
    if (!lt) {
        LT_CHECK(cublasLtCreate(&lt));
        RT_CUDART_CHECK(cudaMalloc(&workspace, WORKSPACE_BYTES));
    }
    if (nplans == cap_plans) {
        cap_plans = cap_plans ? 2 * cap_plans : 16;
        plans = realloc(plans, sizeof(matmul_plan) * (size_t)cap_plans);
    }
    matmul_plan *p = &plans[nplans];
    *p = (matmul_plan){.m = m, .n = n, .k = k, .ta = ta, .tb = tb, .bias = bias, .dt = dt, .cdt = cdt};
    cudaDataType_t t = cuda_type(dt);
    LT_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    if (bias) {
        cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
        LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
        LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &t, sizeof t));
    }
    /* cuBLASLt's A is our B: stored (n x k) or, transposed, (k x n) column-major; its B is our A. */
    LT_CHECK(cublasLtMatrixLayoutCreate(&p->a, t, tb ? k : n, tb ? n : k, tb ? k : n));
    LT_CHECK(cublasLtMatrixLayoutCreate(&p->b, t, ta ? m : k, ta ? k : m, ta ? m : k));
    LT_CHECK(cublasLtMatrixLayoutCreate(&p->c, cuda_type(cdt), n, m, n));
    cublasLtMatmulPreference_t pref;
    LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = WORKSPACE_BYTES;
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    LT_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, p->desc, p->a, p->b, p->c, p->c, pref, 1, &result, &found));
    cublasLtMatmulPreferenceDestroy(pref);
    if (!found) {
        fprintf(stderr, "train_rank: cuBLASLt has no algorithm for a %lldx%lldx%lld %s matmul (ta=%d tb=%d)\n",
                (long long)m, (long long)n, (long long)k, ir_dtype_name(dt), ta, tb);
        exit(1);
    }
    p->algo = result.algo;
    return &plans[nplans++];
}

/* out (of out_type) := op(a) op(b) [+ bias] + beta out, with a, b the call's operands `first` and
 * `first` + 1, flattened to 2-D [prod(leading), last]; see ops.def. */
static void gemm(rt_cuda_ctx *cx, const rt_kernel_call *c, int first, const void *bias, void *out,
                 const ir_type *out_type, float beta)
{
    const ir_type *at = c->arg_types[first], *bt = c->arg_types[first + 1];
    bool ta = c->in->attr[0] != 0, tb = c->in->attr[1] != 0;
    int64_t ak = at->dims[at->ndim - 1], am = ir_numel(at) / ak;
    int64_t bn = bt->dims[bt->ndim - 1], bk = ir_numel(bt) / bn;
    int64_t m = ta ? ak : am, k = ta ? am : ak, n = tb ? bk : bn;
    matmul_plan *p = plan_for(m, n, k, ta, tb, bias != NULL, at->dtype, out_type->dtype);
    if (bias) /* the plan is shared by every matmul of this shape: its bias is set per call */
        LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    const float one = 1.0f;
    LT_CHECK(cublasLtMatmul(lt, p->desc, &one, c->args[first + 1], p->a, c->args[first], p->b, &beta, out, p->c, out,
                            p->c, &p->algo, workspace, WORKSPACE_BYTES, (cudaStream_t)rt_cuda_stream(cx)));
}

void cuda_MATMUL(rt_cuda_ctx *cx, const rt_kernel_call *c) { gemm(cx, c, 0, NULL, c->res[0], c->res_types[0], 0.0f); }

void cuda_MATMUL_BIAS(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    gemm(cx, c, 0, c->args[2], c->res[0], c->res_types[0], 0.0f);
}

void cuda_MATMUL_ACCUMULATE(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    gemm(cx, c, 1, NULL, c->args[0], c->arg_types[0], 1.0f);
}
