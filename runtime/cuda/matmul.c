/* matmul.c — every matmul through cuBLASLt: bf16 (or f32) in and out, fp32 accumulation, the
 * algorithm chosen once per shape and cached. cuBLASLt is column-major;
 * a row-major C[M,N] = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T.
 * MCC_GEMM_AUTOTUNE=1 times the heuristic's best CANDIDATES algorithms at a shape's first call
 * and keeps the fastest; by default the heuristic's first is kept (on two H200s the timing
 * changed neither llama-1B's step, 85.6k vs 85.7k tokens/s, nor TP=2's, 70.7k vs 70.5k, and
 * cost 0.5 s of the first step: bench/RESULTS.md).
 * matmul_bias adds its bias in the GEMM's epilogue: a bias per row of the column-major C^T is
 * one per column N of our C. matmul_accumulate adds the product into its destination (beta = 1),
 * which may be f32 while A and B are bf16 (a weight gradient's accumulator). matmul_bias_gelu
 * and matmul_dgelu_bgrad are the GELU_AUX_BIAS and DGELU_BGRAD epilogues, whose aux matrix is
 * the pre-activation (written, or read) with the output's layout; where cuBLASLt has no algorithm
 * for one, the GEMM runs plain and the op's kernels (gelu, gelu_grad, sum_rows) follow it. */
#include "cuda_ctx.h"
#include "runtime/parallel.h"
#include "common/knobs.h"

#include <cublasLt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WORKSPACE_BYTES (64u << 20)
#define CANDIDATES 8                 /* algorithms the heuristic offers for timing */
#define TUNE_MAX_BYTES (512u << 20)  /* larger outputs keep the heuristic's first choice */

/* cuBLASLt's scale modes (cublasLtMatmulMatrixScale_t, set as the int32_t its attributes take) of a
 * GEMM's A and B: SCALAR_32F (0, a pointer to one float, or none) but for blockwise FP8's
 * VEC128_32F / BLK128x128_32F */
typedef struct {
    int32_t a, b;
} lt_scale_modes;

typedef struct {
    int64_t m, n, k;
    bool ta, tb;
    cublasLtEpilogue_t epilogue;
    lt_scale_modes scales;
    ir_dtype dt, bdt, cdt;          /* of our A; of our B (differs for FP8's E5M2 x E4M3); of C and D */
    int sms;                        /* SMs the algorithm may use (0: all) */
    bool grouped;                   /* a grouped GEMM's: m (k under ta) a bucket, the layouts set per call */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
    bool found;                     /* false: cuBLASLt has no algorithm for this epilogue */
    cublasLtMatmulAlgo_t candidates[CANDIDATES]; /* the heuristic's, best first */
    int ncandidates;
    bool tuned;                     /* algo is final (timed, or nothing to time) */
} matmul_plan;

static cublasLtHandle_t lt;
static void *workspace;
static matmul_plan *plans;
static int nplans, cap_plans;

static const char *lt_status_name(int s) { return cublasLtGetStatusName((cublasStatus_t)s); }
#define LT_CHECK(call) rt_cu_check((int)(call), #call, __FILE__, __LINE__, lt_status_name)

static cudaDataType_t cuda_type(ir_dtype dt)
{
    return dt == IR_BF16      ? CUDA_R_16BF
           : dt == IR_F16     ? CUDA_R_16F
           : dt == IR_FP8E4M3 ? CUDA_R_8F_E4M3
           : dt == IR_FP8E5M2 ? CUDA_R_8F_E5M2
                              : CUDA_R_32F;
}

static bool epilogue_has_bias(cublasLtEpilogue_t e)
{
    return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}
static bool epilogue_has_aux(cublasLtEpilogue_t e)
{
    return e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU_BGRAD || e == CUBLASLT_EPILOGUE_DGELU;
}

/* The (rows, cols, leading dimension) of a GEMM's three cuBLASLt layouts, column-major: cuBLASLt's
 * A is our b, stored (n x k) or, transposed, (k x n); its B our a; C (n x m). */
typedef struct {
    int64_t rows, cols, ld;
} lt_dims;

static void lt_layouts(int64_t m, int64_t n, int64_t k, bool ta, bool tb, lt_dims d[3])
{
    d[0] = (lt_dims){tb ? k : n, tb ? n : k, tb ? k : n};
    d[1] = (lt_dims){ta ? m : k, ta ? k : m, ta ? m : k};
    d[2] = (lt_dims){n, m, n};
}

/* The process's cuBLASLt handle and compute-stream workspace, made on first use (by a plan, or by
 * a grouped GEMM forking its experts' streams before any plan exists). */
static void lt_open(void)
{
    if (!lt) {
        LT_CHECK(cublasLtCreate(&lt));
        RT_CUDART_CHECK(cudaMalloc(&workspace, WORKSPACE_BYTES));
    }
}

/* The plan of a GEMM shape and epilogue: its algorithm, or found = false when cuBLASLt has none
 * (only for epilogues beyond BIAS, whose ops have a fallback; a plain GEMM without one exits). */
static matmul_plan *plan_of(int64_t m, int64_t n, int64_t k, bool ta, bool tb, cublasLtEpilogue_t epilogue,
                            lt_scale_modes scales, const void *const *scale_ptrs, ir_dtype dt, ir_dtype bdt,
                            ir_dtype cdt, int sms, bool grouped)
{
    for (int i = 0; i < nplans; i++) {
        matmul_plan *p = &plans[i];
        if (p->m == m && p->n == n && p->k == k && p->ta == ta && p->tb == tb && p->epilogue == epilogue &&
            p->scales.a == scales.a && p->scales.b == scales.b && p->dt == dt && p->bdt == bdt && p->cdt == cdt &&
            p->sms == sms && p->grouped == grouped)
            return p;
    }
    lt_open();
    if (nplans == cap_plans) {
        cap_plans = cap_plans ? 2 * cap_plans : 16;
        plans = realloc(plans, sizeof(matmul_plan) * (size_t)cap_plans);
    }
    matmul_plan *p = &plans[nplans];
    *p = (matmul_plan){.m = m, .n = n, .k = k, .ta = ta, .tb = tb, .epilogue = epilogue, .scales = scales, .dt = dt,
                       .bdt = bdt, .cdt = cdt, .sms = sms, .grouped = grouped};
    LT_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    if (sms)
        LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &sms, sizeof sms));
    if (epilogue != CUBLASLT_EPILOGUE_DEFAULT)
        LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
    if (scales.a != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F || scales.b != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F) {
        int8_t fast_accum = 0; /* DeepSeek-V3's fp32 promotion: the tensor cores' partial sums go to fp32 */
        LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &scales.a, sizeof scales.a));
        LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &scales.b, sizeof scales.b));
        LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accum, sizeof fast_accum));
        /* block scales: an H100's cuBLASLt 13.1 refused (INVALID_VALUE) every block-scaled heuristic
         * query without their pointers; NVIDIA's LtBlk128x128Fp8Matmul sample sets them first.
         * Every caller passes them (reset per call: plans are shared) */
        LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale_ptrs[0],
                                                sizeof scale_ptrs[0]));
        LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale_ptrs[1],
                                                sizeof scale_ptrs[1]));
    }
    if (epilogue_has_bias(epilogue)) {
        cudaDataType_t bt = cuda_type(cdt); /* the bias, or its gradient, in the output's dtype */
        LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
    }
    if (epilogue_has_aux(epilogue)) { /* the pre-activation, laid out as C^T: leading dimension n */
        int64_t ld = n;
        LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
    }
    lt_dims d[3];
    lt_layouts(m, n, k, ta, tb, d);
    LT_CHECK(cublasLtMatrixLayoutCreate(&p->a, cuda_type(bdt), (uint64_t)d[0].rows, (uint64_t)d[0].cols, d[0].ld));
    LT_CHECK(cublasLtMatrixLayoutCreate(&p->b, cuda_type(dt), (uint64_t)d[1].rows, (uint64_t)d[1].cols, d[1].ld));
    LT_CHECK(cublasLtMatrixLayoutCreate(&p->c, cuda_type(cdt), (uint64_t)d[2].rows, (uint64_t)d[2].cols, d[2].ld));
    cublasLtMatmulPreference_t pref;
    LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = WORKSPACE_BYTES;
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    cublasLtMatmulHeuristicResult_t results[CANDIDATES];
    int found = 0;
    cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(lt, p->desc, p->a, p->b, p->c, p->c, pref, CANDIDATES, results, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (epilogue_has_aux(epilogue) && (st != CUBLAS_STATUS_SUCCESS || !found)) {
        p->found = false; /* the op's fallback runs */
        return &plans[nplans++];
    }
    if (scales.a != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F && (st != CUBLAS_STATUS_SUCCESS || !found)) {
        fprintf(stderr, "train_rank: cuBLASLt %zu has no block-scaled FP8 GEMM for %lldx%lldx%lld (scale modes %d x %d, "
                "status %s): it needs cuBLAS 12.9 or later on Hopper (sm_90); recompile with --fp8-recipe tensorwise\n",
                cublasLtGetVersion(), (long long)m, (long long)n, (long long)k, scales.a, scales.b, lt_status_name(st));
        exit(1);
    }
    LT_CHECK(st);
    if (!found) {
        fprintf(stderr, "train_rank: cuBLASLt has no algorithm for a %lldx%lldx%lld %s matmul (ta=%d tb=%d, scale modes "
                "%d x %d)\n", (long long)m, (long long)n, (long long)k, ir_dtype_name(dt), ta, tb, scales.a, scales.b);
        exit(1);
    }
    for (int i = 0; i < found; i++)
        if (results[i].state == CUBLAS_STATUS_SUCCESS)
            p->candidates[p->ncandidates++] = results[i].algo;
    p->algo = results[0].algo;
    p->found = true;
    /* an epilogue writing an aux matrix or a bias gradient would write them while timed */
    p->tuned = p->ncandidates < 2 || epilogue_has_aux(epilogue) || grouped || !knob_on(KNOB_GEMM_AUTOTUNE);
    return &plans[nplans++];
}

static matmul_plan *plan_for(int64_t m, int64_t n, int64_t k, bool ta, bool tb, cublasLtEpilogue_t epilogue,
                             ir_dtype dt, ir_dtype bdt, ir_dtype cdt, int sms)
{
    return plan_of(m, n, k, ta, tb, epilogue, (lt_scale_modes){0}, NULL, dt, bdt, cdt, sms, false);
}

/* An expert's rows rounded up to one of 8 sizes an octave (at most 12.5% more), from 128. */
static int64_t rows_bucket(int64_t x)
{
    if (x <= 128)
        return 128;
    int64_t octave = 128;
    while (2 * octave < x)
        octave *= 2;
    int64_t step = octave / 8;
    return (x + step - 1) / step * step;
}

static void set_layout(cublasLtMatrixLayout_t l, lt_dims d)
{
    uint64_t r = (uint64_t)d.rows, c = (uint64_t)d.cols;
    LT_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ROWS, &r, sizeof r));
    LT_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_COLS, &c, sizeof c));
    LT_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_LD, &d.ld, sizeof d.ld));
}

/* The plan of one expert's GEMM, whose rows vary from call to call (m, or k with rows_in_k: the
 * wgrad's reduction): the algorithm the heuristic chose for the rows' bucket (rows_bucket), its
 * layouts then set to the exact sizes (as plan_of creates them). A plan per exact size would query
 * the heuristic, on the host while the GPU waits, at nearly every call: the counts change each step.
 * FP8 operands' plans are SCALAR_32F's, or blockwise the block scale modes, their scale pointers
 * set per call (fp8_expert_gemm). */
static matmul_plan *plan_for_rows(int64_t m, int64_t n, int64_t k, bool ta, bool tb, bool rows_in_k,
                                  lt_scale_modes scales, const void *const *scale_ptrs, ir_dtype dt, ir_dtype bdt,
                                  ir_dtype cdt, int sms)
{
    matmul_plan *p = plan_of(rows_in_k ? m : rows_bucket(m), n, rows_in_k ? rows_bucket(k) : k, ta, tb,
                             CUBLASLT_EPILOGUE_DEFAULT, scales, scale_ptrs, dt, bdt, cdt, sms, true);
    lt_dims d[3];
    lt_layouts(m, n, k, ta, tb, d);
    set_layout(p->a, d[0]);
    set_layout(p->b, d[1]);
    set_layout(p->c, d[2]);
    return p;
}

/* Times the plan's candidate algorithms on the first call's operands (D into scratch, C read
 * only) and keeps the fastest: the heuristic's first choice can leave SMs idle on a shape whose
 * tiles fill a wave badly (tensor parallelism halves N). Not while a stream is captured. */
static void tune(matmul_plan *p, const void *a, const void *b, float beta, const void *c, size_t d_bytes,
                 cudaStream_t stream)
{
    p->tuned = true;
    enum cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    RT_CUDART_CHECK(cudaStreamIsCapturing(stream, &capture));
    void *d = NULL;
    if (capture != cudaStreamCaptureStatusNone || d_bytes > TUNE_MAX_BYTES || cudaMalloc(&d, d_bytes) != cudaSuccess) {
        cudaGetLastError(); /* a failed scratch allocation only skips the timing */
        return;
    }
    cudaEvent_t start, stop;
    RT_CUDART_CHECK(cudaEventCreate(&start));
    RT_CUDART_CHECK(cudaEventCreate(&stop));
    const float one = 1.0f;
    float best = 0;
    for (int i = 0; i < p->ncandidates; i++) {
        float ms = 0;
        bool ok = true;
        for (int rep = 0; rep < 4 && ok; rep++) { /* the first run warms up, the next three are timed */
            if (rep == 1)
                RT_CUDART_CHECK(cudaEventRecord(start, stream));
            ok = cublasLtMatmul(lt, p->desc, &one, a, p->a, b, p->b, &beta, c ? c : d, p->c, d, p->c, &p->candidates[i],
                                workspace, WORKSPACE_BYTES, stream) == CUBLAS_STATUS_SUCCESS;
        }
        if (!ok)
            continue;
        RT_CUDART_CHECK(cudaEventRecord(stop, stream));
        RT_CUDART_CHECK(cudaEventSynchronize(stop));
        RT_CUDART_CHECK(cudaEventElapsedTime(&ms, start, stop));
        if (best == 0 || ms < best)
            best = ms, p->algo = p->candidates[i];
    }
    RT_CUDART_CHECK(cudaEventDestroy(start));
    RT_CUDART_CHECK(cudaEventDestroy(stop));
    RT_CUDART_CHECK(cudaFree(d));
}

/* SMs left to a GEMM while a collective may run beside it on the comm stream (0: all). Hopper's
 * GEMMs are persistent, one CTA per SM: one that starts while NCCL holds some SMs runs its last
 * CTAs as a second wave and takes up to twice as long, which cancels the overlap. With
 * MCC_OVERLAP_GEMM_SMS = N those GEMMs are planned for N SMs, and NCCL_MAX_CTAS caps NCCL's. */
static int overlap_gemm_sms(void) { return (int)knob_int(KNOB_OVERLAP_GEMM_SMS); }

/* out := op(a) op(b) + beta c by plan p (c may be out), on the compute stream; timed first when
 * the plan is not final (MCC_GEMM_AUTOTUNE). cuBLASLt's A is our b, its B our a (column-major). */
static void run_plan_on(cudaStream_t stream, void *ws, matmul_plan *p, const void *a, const void *b, float beta,
                        const void *c, void *out)
{
    if (!p->tuned)
        tune(p, b, a, beta, beta != 0 ? c : NULL, (size_t)p->m * (size_t)p->n * ir_dtype_size(p->cdt), stream);
    const float one = 1.0f;
    LT_CHECK(cublasLtMatmul(lt, p->desc, &one, b, p->a, a, p->b, &beta, c, p->c, out, p->c, &p->algo, ws,
                            WORKSPACE_BYTES, stream));
}

static void run_plan(rt_cuda_ctx *cx, matmul_plan *p, const void *a, const void *b, float beta, const void *c, void *out)
{
    run_plan_on((cudaStream_t)rt_cuda_stream(cx), workspace, p, a, b, beta, c, out);
}

/* What a GEMM's epilogue does beyond writing op(a) op(b): see plan_for. */
typedef struct {
    cublasLtEpilogue_t kind;
    const void *bias;               /* BIAS, GELU_AUX_BIAS: the bias; DGELU_BGRAD: the bias gradient (written) */
    const void *aux;                /* GELU_AUX_BIAS: the pre-activation (written); DGELU_BGRAD: (read) */
} gemm_epilogue;

static const gemm_epilogue NO_EPILOGUE = {CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL};

/* out (of out_type) := epilogue(op(a) op(b) + beta C), with a, b the call's operands `first` and
 * `first` + 1, flattened to 2-D [prod(leading), last], and C = addend, or out itself when NULL
 * (in place is fine: the epilogue reads each element of C before writing it); see ops.def.
 * false: cuBLASLt has no algorithm for this epilogue, and nothing ran. */
static bool gemm(rt_cuda_ctx *cx, const rt_kernel_call *c, int first, gemm_epilogue ep, void *out,
                 const ir_type *out_type, float beta, const void *addend)
{
    const ir_type *at = c->arg_types[first], *bt = c->arg_types[first + 1];
    bool ta = c->in->attr[IR_ATTR_TA] != 0, tb = c->in->attr[IR_ATTR_TB] != 0;
    int64_t ak = at->dims[at->ndim - 1], am = ir_numel(at) / ak;
    int64_t bn = bt->dims[bt->ndim - 1], bk = ir_numel(bt) / bn;
    int64_t m = ta ? ak : am, k = ta ? am : ak, n = tb ? bk : bn;
    int sms = rt_cuda_comm_in_flight(cx) ? overlap_gemm_sms() : 0;
    matmul_plan *p = plan_for(m, n, k, ta, tb, ep.kind, at->dtype, bt->dtype, out_type->dtype, sms);
    if (!p->found)
        return false;
    /* the plan is shared by every matmul of this shape: its pointers are set per call */
    if (epilogue_has_bias(ep.kind))
        LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ep.bias, sizeof ep.bias));
    if (epilogue_has_aux(ep.kind))
        LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &ep.aux,
                                                sizeof ep.aux));
    run_plan(cx, p, c->args[first], c->args[first + 1], beta, addend ? addend : out, out);
    return true;
}

/* out[m,n] := a[m,k] op(b) (+ addend[m,n] when given), no epilogue, on the compute stream: a
 * block of rows of a matmul. */
static void gemm_rows(rt_cuda_ctx *cx, const void *a, int64_t m, int64_t k, const void *b, int64_t n, bool tb,
                      ir_dtype dt, const void *addend, void *out)
{
    matmul_plan *p = plan_for(m, n, k, false, tb, CUBLASLT_EPILOGUE_DEFAULT, dt, dt, dt, 0);
    run_plan(cx, p, a, b, addend ? 1.0f : 0.0f, addend ? addend : out, out);
}

/* The row blocks of sequence parallelism for a local tensor of `cols` columns: split along the
 * sequence (attribute batch 0) there is one block per batch row (o-row) and rank, split by batch
 * rows (1) one per rank; in the whole tensor, rank q's block of o-row o starts at row
 * (o * ranks + q) * rows_per, and in the local one o's at o * rows_per. */
typedef struct {
    int64_t o_rows, rows_per; /* o-rows, and rows per block */
} seq_blocks;

static seq_blocks blocks_of(const rt_kernel_call *c, const ir_type *local, int64_t cols)
{
    int64_t o = ir_seq_orows(c->in, local);
    return (seq_blocks){o, ir_numel(local) / cols / o};
}

/* (x split by sequence slices or batch rows, w) -> (r = x gathered, y = r op(w)): the all-gather
 * runs on the comm stream (the group's copy lane when the arena is its window, so on the copy
 * engines) while the compute stream multiplies this rank's own rows, which x holds; then the
 * other ranks' rows, once gathered. */
void cuda_ALL_GATHER_MATMUL(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    const ir_type *xt = c->arg_types[0], *yt = c->res_types[1];
    bool tb = c->in->attr[IR_ATTR_TB] != 0;
    int64_t k = xt->dims[xt->ndim - 1], n = yt->dims[yt->ndim - 1];
    seq_blocks b = blocks_of(c, xt, k);
    rt_comm *comm = rt_parallel_comm((ir_axis)c->in->attr[IR_ATTR_AXIS]);
    int ranks = comm ? rt_comm_size(comm) : 1, me = comm ? rt_comm_rank(comm) : 0;
    size_t xs = ir_dtype_size(xt->dtype), ys = ir_dtype_size(yt->dtype);
    size_t xblock = (size_t)b.rows_per * (size_t)k * xs, yblock = (size_t)b.rows_per * (size_t)n * ys;
    const char *x = c->args[0], *full = c->res[0];
    char *y = c->res[1];
    rt_cuda_gather_seq(cx, c, comm ? rt_cuda_comm_fork(cx) : rt_cuda_stream(cx));
    for (int64_t o = 0; o < b.o_rows; o++)
        gemm_rows(cx, x + (size_t)o * xblock, b.rows_per, k, c->args[1], n, tb, xt->dtype, NULL,
                  y + (size_t)(o * ranks + me) * yblock);
    rt_cuda_comm_join(cx);
    for (int64_t o = 0; o < b.o_rows; o++)
        for (int q = 0; q < ranks; q++)
            if (q != me)
                gemm_rows(cx, full + (size_t)(o * ranks + q) * xblock, b.rows_per, k, c->args[1], n, tb, xt->dtype, NULL,
                          y + (size_t)(o * ranks + q) * yblock);
}

/* s := x op(w) (+ addend), and r := this rank's block of s summed over the ranks: the other
 * ranks' rows of s are computed first and go out to them on the comm stream (the copy lane when
 * the arena is its window; one exchange per o-row, whose ranks' blocks are contiguous) while this
 * rank's own rows are; then what the others sent is added. s and what comes (`came`) are laid
 * out like the whole product. */
static void matmul_scatter(rt_cuda_ctx *cx, const rt_kernel_call *c, const char *addend, char *s, char *came, char *r)
{
    const ir_type *xt = c->arg_types[0], *rt = c->res_types[c->nres - 1];
    bool tb = c->in->attr[IR_ATTR_TB] != 0;
    rt_comm *comm = rt_parallel_comm((ir_axis)c->in->attr[IR_ATTR_AXIS]);
    int ranks = comm ? rt_comm_size(comm) : 1, me = comm ? rt_comm_rank(comm) : 0;
    int64_t k = xt->dims[xt->ndim - 1], n = rt->dims[rt->ndim - 1];
    seq_blocks b = blocks_of(c, rt, n);
    size_t xblock = (size_t)b.rows_per * (size_t)k * ir_dtype_size(xt->dtype);
    size_t block = (size_t)b.rows_per * (size_t)n * ir_dtype_size(rt->dtype), orow = block * (size_t)ranks;
    ir_type block_t = ir_tensor(rt->dtype, 1, (int64_t[]){b.rows_per * n});
    const char *x = c->args[0];
    for (int64_t o = 0; o < b.o_rows; o++)
        for (int q = 0; q < ranks; q++)
            if (q != me) {
                size_t at = (size_t)(o * ranks + q);
                gemm_rows(cx, x + at * xblock, b.rows_per, k, c->args[1], n, tb, xt->dtype,
                          addend ? addend + at * block : NULL, s + at * block);
            }
    if (comm) {
        rt_comm *lane = rt_comm_copy_lane_for(comm, s, orow * (size_t)b.o_rows, came, orow * (size_t)b.o_rows);
        CUstream side = rt_cuda_comm_fork(cx);
        for (int64_t o = 0; o < b.o_rows; o++)
            rt_all_to_all(lane, s + (size_t)o * orow, came + (size_t)o * orow, (size_t)(b.rows_per * n), rt->dtype, side);
    }
    for (int64_t o = 0; o < b.o_rows; o++) {
        size_t at = (size_t)(o * ranks + me);
        gemm_rows(cx, x + at * xblock, b.rows_per, k, c->args[1], n, tb, xt->dtype, addend ? addend + at * block : NULL,
                  s + at * block);
    }
    rt_cuda_comm_join(cx);
    for (int64_t o = 0; o < b.o_rows; o++) {
        char *ro = r + (size_t)o * block;
        const char *own = s + (size_t)(o * ranks + me) * block;
        bool first = true;
        for (int q = 0; q < ranks; q++)
            if (q != me) {
                const char *in = came + (size_t)(o * ranks + q) * block;
                if (first)
                    rt_cuda_add(cx, c, ro, own, in, &block_t);
                else
                    rt_cuda_accumulate(cx, c, ro, in, &block_t);
                first = false;
            }
        if (first) /* one rank */
            RT_CUDART_CHECK(cudaMemcpyAsync(ro, own, block, cudaMemcpyDeviceToDevice, (cudaStream_t)rt_cuda_stream(cx)));
    }
}

/* (x, w) -> (scratch [2][B,T,..,N]: the product, what comes; r) */
void cuda_MATMUL_REDUCE_SCATTER(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    char *scratch = c->res[0];
    matmul_scatter(cx, c, NULL, scratch, scratch + ir_bytes(c->res_types[0]) / 2, c->res[1]);
}

/* (x, w, addend) -> (s = x op(w) + addend, what comes, r) */
void cuda_MATMUL_ADD_REDUCE_SCATTER(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    matmul_scatter(cx, c, c->args[2], c->res[0], c->res[1], c->res[2]);
}

void cuda_MATMUL(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    gemm(cx, c, 0, NO_EPILOGUE, c->res[0], c->res_types[0], 0.0f, NULL);
}

void cuda_MATMUL_BIAS(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    gemm(cx, c, 0, (gemm_epilogue){CUBLASLT_EPILOGUE_BIAS, c->args[2], NULL}, c->res[0], c->res_types[0], 0.0f, NULL);
}

void cuda_MATMUL_ACCUMULATE(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    float beta = c->in->attr[IR_ATTR_MATMUL_ACCUMULATE_ASSIGN] != 0 ? 0.0f : 1.0f;
    gemm(cx, c, 1, NO_EPILOGUE, c->args[0], c->arg_types[0], beta, NULL);
}

/* --- FP8 ----------------------------------------------------------------------------------- */

/* q[R,C] (FP8 bytes) -> out[C,ld], its columns past R zero (ld >= R), 32x32 tiles
 * (kernels_templates/fp8.cuh) */
static void fp8_transpose(rt_cuda_ctx *cx, void *out, const void *q, long long R, long long C, long long ld)
{
    long long ty = (ld + 31) / 32;
    void *params[] = {&out, (void *)&q, &R, &C, &ld};
    rt_cuda_launch(cx, "mcc_fp8_transpose_u8", (unsigned)((C + 31) / 32), (unsigned)(ty < 65535 ? ty : 65535), 1, 256,
                   0, params);
}

/* The cuBLASLt scale mode of fp8 operand q's scale_inv s (ir_fp8_scale_blocks: their layouts are
 * cuBLASLt's) */
static int32_t scale_mode_of(const ir_type *q, const ir_type *s)
{
    int64_t rows = 0, cols = 0;
    ir_fp8_scale_blocks(q, s, &rows, &cols);
    return s->ndim != 2 ? CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F
           : rows == 1  ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                        : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
}

/* Operands first and first + 2 of FP8 GEMM c: FP8 (not both E5M2: cuBLASLt has no E5M2 x E5M2
 * GEMM), each followed by its f32 scale_inv(s) */
static void need_fp8_operands(const rt_kernel_call *c, int first)
{
    const ir_type *at = c->arg_types[first], *bt = c->arg_types[first + 2];
    if (!ir_dtype_is_fp8(at->dtype) || !ir_dtype_is_fp8(bt->dtype) || c->arg_types[first + 1]->dtype != IR_F32 ||
        c->arg_types[first + 3]->dtype != IR_F32 || (at->dtype == IR_FP8E5M2 && bt->dtype == IR_FP8E5M2)) {
        fprintf(stderr, "train_rank: %s on CUDA takes FP8 operands (not both E5M2: cuBLASLt has no E5M2 x E5M2 "
                        "GEMM) with f32 scale_invs, got %s x %s: an mcc codegen bug (passes/fp8.c)\n",
                ir_ops[c->in->op].name, ir_dtype_name(at->dtype), ir_dtype_name(bt->dtype));
        exit(1);
    }
}

/* The FP8 GEMM of operands (qa, sa, qb, sb[, hdy]) from operand `first` {ta, tb}: out := sa sb op(qa)
 * op(qb) + beta cin in out_dtype (fp8_matmul's result's; an accumulator's): cuBLASLt's FP8 GEMM,
 * fp32 accumulation, the scale_invs as its A/B scale pointers (device floats, so current scaling
 * needs no host round trip). Hopper's FP8 kernels take only "TN" (both operands K-major): our
 * ta = 0, tb = 1, the forward's x w^T. Otherwise a tensorwise operand is transposed first into
 * scratch: the dgrad dy w (tb = 0) transposes the weight, the wgrad dy^T x (ta = 1, tb = 0) both.
 * Block-scaled operands (blockwise FP8) come K-major already (fp8_block_quantize's transpose), with
 * their scales in the layouts of cuBLASLt's VEC128_32F (1x128 tiles) and BLK128x128_32F (128x128
 * blocks) modes; cuBLASLt pairs 1D x 1D and 1D x 2D, never 2D x 2D, and accumulates in fp32 between
 * the blocks (no fast accumulation). cuBLASLt multiplies E4M3 x E4M3 and E4M3 x E5M2 either way
 * round, never E5M2 x E5M2, and wants 16-byte leading dimensions: k a multiple of 16. */
static void fp8_gemm(rt_cuda_ctx *cx, const rt_kernel_call *c, int first, float beta, const void *cin, void *out,
                     ir_dtype out_dtype)
{
    const ir_type *at = c->arg_types[first], *bt = c->arg_types[first + 2];
    bool ta = c->in->attr[IR_ATTR_FP8_MATMUL_TA] != 0, tb = c->in->attr[IR_ATTR_FP8_MATMUL_TB] != 0;
    int64_t ak = at->dims[at->ndim - 1], am = ir_numel(at) / ak;
    int64_t bn = bt->dims[bt->ndim - 1], bk = ir_numel(bt) / bn;
    int64_t m = ta ? ak : am, k = ta ? am : ak, n = tb ? bk : bn;
    need_fp8_operands(c, first);
    /* cuBLASLt's A is our b, its B our a */
    lt_scale_modes scales = {scale_mode_of(bt, c->arg_types[first + 3]), scale_mode_of(at, c->arg_types[first + 1])};
    bool blocks = scales.a != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F || scales.b != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    if (blocks && (ta || !tb || scales.a == CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F ||
                   scales.b == CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F ||
                   (scales.a == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F &&
                    scales.b == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F))) {
        fprintf(stderr, "train_rank: fp8_matmul of %lldx%lldx%lld on block scales (ta=%d tb=%d, scale modes %d x %d): "
                        "cuBLASLt takes both operands K-major (ta=0 tb=1) and block-scaled, not both in 128x128 "
                        "blocks: an mcc codegen bug (passes/fp8.c, ir/grad.c quantize them so)\n",
                (long long)m, (long long)n, (long long)k, ta, tb, scales.a, scales.b);
        exit(1);
    }
    if (k % 16) {
        fprintf(stderr, "train_rank: fp8_matmul of %lldx%lldx%lld: cuBLASLt's FP8 GEMM needs the reduced dimension k a "
                        "multiple of 16; recompile without --fp8-format, or with hidden/ffn sizes and tokens per "
                        "micro-batch that are multiples of 16\n", (long long)m, (long long)n, (long long)k);
        exit(1);
    }
    const void *a = c->args[first], *b = c->args[first + 2];
    size_t a_bytes = ta ? (size_t)(m * k) : 0, b_bytes = tb ? 0 : (size_t)(n * k);
    if (a_bytes + b_bytes) {
        char *s = rt_cuda_scratch(cx, ((a_bytes + 255) / 256 * 256) + b_bytes);
        if (ta)
            fp8_transpose(cx, s, a, am, ak, am), a = s;
        if (!tb)
            fp8_transpose(cx, s + (a_bytes + 255) / 256 * 256, b, bk, bn, bk), b = s + (a_bytes + 255) / 256 * 256;
    }
    int sms = rt_cuda_comm_in_flight(cx) ? overlap_gemm_sms() : 0;
    /* cuBLASLt's A is our b: its scale is sb; its B our a, scaled by sa. Set per call (shared plans). */
    const void *sa = c->args[first + 1], *sb = c->args[first + 3], *lt_scales[2] = {sb, sa};
    matmul_plan *p = plan_of(m, n, k, false, true, CUBLASLT_EPILOGUE_DEFAULT, scales, lt_scales, at->dtype, bt->dtype,
                             out_dtype, sms, false);
    LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sb, sizeof sb));
    LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sa, sizeof sa));
    run_plan(cx, p, a, b, beta, cin, out);
}

void cuda_FP8_MATMUL(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    fp8_gemm(cx, c, 0, 0.0f, c->res[0], c->res[0], c->res_types[0]->dtype);
}

/* (dst, qa, sa, qb, sb) {assign}: the GEMM adds into dst in its dtype (beta = 1; fp32 C and D for an
 * fp32 accumulator), or writes it (assign: beta = 0) */
void cuda_FP8_MATMUL_ACCUMULATE(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    float beta = c->in->attr[IR_ATTR_FP8_MATMUL_ACCUMULATE_ASSIGN] != 0 ? 0.0f : 1.0f;
    fp8_gemm(cx, c, 1, beta, c->args[0], c->args[0], c->arg_types[0]->dtype);
}

/* (qa, sa, qb, sb, c) -> the FP8 GEMM + c (beta = 1, C the addend) */
void cuda_FP8_MATMUL_ADD(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    fp8_gemm(cx, c, 0, 1.0f, c->args[4], c->res[0], c->res_types[0]->dtype);
}

/* (a, b, c) -> matmul(a, b) + c */
void cuda_MATMUL_ADD(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    gemm(cx, c, 0, NO_EPILOGUE, c->res[0], c->res_types[0], 1.0f, c->args[2]);
}

/* (a, b, bias, c) -> matmul(a, b) + bias + c */
void cuda_MATMUL_BIAS_ADD(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    gemm(cx, c, 0, (gemm_epilogue){CUBLASLT_EPILOGUE_BIAS, c->args[2], NULL}, c->res[0], c->res_types[0], 1.0f,
         c->args[3]);
}

/* (a, b, bias) -> (y = gelu(p), p) */
void cuda_MATMUL_BIAS_GELU(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    gemm_epilogue ep = {CUBLASLT_EPILOGUE_GELU_AUX_BIAS, c->args[2], c->res[1]};
    if (gemm(cx, c, 0, ep, c->res[0], c->res_types[0], 0.0f, NULL))
        return;
    /* fallback: p = matmul_bias(a, b, bias), then y = gelu(p) */
    gemm(cx, c, 0, (gemm_epilogue){CUBLASLT_EPILOGUE_BIAS, c->args[2], NULL}, c->res[1], c->res_types[1], 0.0f, NULL);
    void *gelu_args[1] = {c->res[1]};
    rt_kernel_call g = *c;
    g.nargs = 1, g.args = gelu_args, g.arg_types = &c->res_types[1], g.nres = 1;
    cuda_GELU(cx, &g);
}

/* How matmul_dgelu_bgrad runs; MCC_DGELU_EPILOGUE=bgrad|dgelu|none picks one, to measure them:
 * the DGELU_BGRAD epilogue (gradient and bias gradient in the GEMM), the DGELU epilogue then the
 * sum_rows kernel, or the plain GEMM then the gelu_grad and sum_rows kernels (also the fallback). */
typedef enum { DGELU_BGRAD_EPILOGUE, DGELU_EPILOGUE_THEN_SUM, GEMM_THEN_KERNELS } dgelu_way;

static dgelu_way dgelu_way_chosen(void)
{
    /* ORDER MCC_DGELU_EPILOGUE's choices: dgelu|bgrad|none */
    static const dgelu_way of_choice[] = {DGELU_EPILOGUE_THEN_SUM, DGELU_BGRAD_EPILOGUE, GEMM_THEN_KERNELS};
    return of_choice[knob_choice(KNOB_DGELU_EPILOGUE)];
}

/* bias gradient res[1] := sum_rows(res[0]) */
static void sum_result_rows(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    void *sum_args[1] = {c->res[0]}, *sum_res[1] = {c->res[1]};
    rt_kernel_call s = *c;
    s.nargs = 1, s.args = sum_args, s.arg_types = c->res_types, s.nres = 1, s.res = sum_res;
    s.res_types = &c->res_types[1];
    cuda_SUM_ROWS(cx, &s);
}

/* (a, b, x) -> (d = gelu_grad(matmul(a, b), x), sum_rows(d)) */
void cuda_MATMUL_DGELU_BGRAD(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    dgelu_way way = dgelu_way_chosen();
    if (way == DGELU_BGRAD_EPILOGUE &&
        gemm(cx, c, 0, (gemm_epilogue){CUBLASLT_EPILOGUE_DGELU_BGRAD, c->res[1], c->args[2]}, c->res[0],
             c->res_types[0], 0.0f, NULL))
        return;
    if (way == DGELU_EPILOGUE_THEN_SUM &&
        gemm(cx, c, 0, (gemm_epilogue){CUBLASLT_EPILOGUE_DGELU, NULL, c->args[2]}, c->res[0], c->res_types[0], 0.0f,
             NULL)) {
        sum_result_rows(cx, c);
        return;
    }
    gemm(cx, c, 0, NO_EPILOGUE, c->res[0], c->res_types[0], 0.0f, NULL);
    void *grad_args[2] = {c->res[0], c->args[2]};
    const ir_type *grad_types[2] = {c->res_types[0], c->arg_types[2]};
    rt_kernel_call g = *c;
    g.nargs = 2, g.args = grad_args, g.arg_types = grad_types, g.nres = 1;
    cuda_GELU_GRAD(cx, &g); /* in place */
    sum_result_rows(cx, c);
}

/* --- mixture of experts: the grouped GEMMs ------------------------------------------------- */

/* The counts[E] of a grouped op on the host: cuBLASLt 13.0 has no grouped matmul (cublasLt.h
 * declares none; 13.2's cublasLtGroupedMatrixLayoutCreate takes device-side sizes) and cuBLAS's
 * cublasGemmGroupedBatchedEx takes its group sizes in host arrays, so the stream drains here
 * (ops.def's HOST_WAIT keeps the function out of CUDA graphs) and each expert is one cuBLASLt
 * GEMM over its rows. The copy is kept for the rest of the function's call (rt_cuda_invocation:
 * a value is written once a call), so a layer's other grouped GEMMs, forward and backward, which
 * read the same counts, wait for none: one drain a layer, not nine. Checked as cpu_kernels.c's
 * group_counts. */
typedef struct {
    long invocation;                /* the function call that copied it, 0: empty */
    int value;                      /* the counts' value id in that function */
    const void *device;
    int64_t E;
    int32_t *host;
} counts_memo;

const int32_t *rt_cuda_grouped_counts(rt_cuda_ctx *cx, const rt_kernel_call *c, int i, int64_t R)
{
    enum { SLOTS = 8 }; /* counts values read at once: one a MoE layer of a pipeline stage's chunk */
    static counts_memo memo[SLOTS];
    static int next;
    int64_t E = c->arg_types[i]->dims[0], sum = 0;
    for (int k = 0; k < SLOTS; k++)
        if (memo[k].invocation == rt_cuda_invocation(cx) && memo[k].value == c->in->args[i] &&
            memo[k].device == c->args[i] && memo[k].E == E)
            return memo[k].host;
    counts_memo *m = &memo[next++ % SLOTS];
    free(m->host);
    *m = (counts_memo){rt_cuda_invocation(cx), c->in->args[i], c->args[i], E, malloc(sizeof(int32_t) * (size_t)(E ? E : 1))};
    CUstream s = rt_cuda_stream(cx);
    RT_CU_CHECK(cuMemcpyDtoHAsync(m->host, (CUdeviceptr)(uintptr_t)c->args[i], sizeof(int32_t) * (size_t)E, s));
    RT_CU_CHECK(cuStreamSynchronize(s));
    for (int64_t e = 0; e < E; e++)
        sum += m->host[e] >= 0 ? m->host[e] : R + 1;
    if (sum > R) {
        fprintf(stderr, "train_rank: %s: the experts' counts sum to %lld, more than the %lld routed rows: moe_sort's "
                        "counts are corrupt\n", ir_ops[c->in->op].name, (long long)sum, (long long)R);
        exit(1);
    }
    return m->host;
}

/* The streams a grouped GEMM's experts run on (MCC_GROUPED_GEMM_STREAMS = n): with n > 1 expert e's
 * GEMM runs on side stream e mod n, each with its own cuBLASLt workspace, forked from the compute
 * stream before the first and joined back after the last, so that experts too small to fill the
 * SMs alone (moe-32x8's: 88 output tiles on 132 SMs) run side by side. The functions with grouped
 * GEMMs are never captured into CUDA graphs (HOST_WAIT), so the fork is a plain event wait. */
enum { MAX_GROUPED_STREAMS = 8 };
typedef struct {
    int n;                          /* streams in use: 1, the compute stream alone */
    cudaStream_t stream[MAX_GROUPED_STREAMS];
    void *workspace[MAX_GROUPED_STREAMS];
} expert_streams;

static expert_streams expert_streams_fork(rt_cuda_ctx *cx)
{
    static cudaStream_t side[MAX_GROUPED_STREAMS];
    static void *side_ws[MAX_GROUPED_STREAMS];
    static cudaEvent_t fork;
    cudaStream_t compute = (cudaStream_t)rt_cuda_stream(cx);
    lt_open(); /* the compute stream's workspace exists before it is handed out */
    expert_streams s = {(int)knob_int(KNOB_GROUPED_GEMM_STREAMS), {compute}, {workspace}};
    if (s.n <= 1) {
        s.n = 1;
        return s;
    }
    if (!fork)
        RT_CUDART_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    RT_CUDART_CHECK(cudaEventRecord(fork, compute));
    for (int i = 0; i < s.n; i++) {
        if (!side[i]) {
            RT_CUDART_CHECK(cudaStreamCreateWithFlags(&side[i], cudaStreamNonBlocking));
            RT_CUDART_CHECK(cudaMalloc(&side_ws[i], WORKSPACE_BYTES));
        }
        RT_CUDART_CHECK(cudaStreamWaitEvent(side[i], fork, 0));
        s.stream[i] = side[i], s.workspace[i] = side_ws[i];
    }
    return s;
}

static void expert_streams_join(rt_cuda_ctx *cx, const expert_streams *s)
{
    static cudaEvent_t join[MAX_GROUPED_STREAMS];
    for (int i = 0; s->n > 1 && i < s->n; i++) {
        if (!join[i])
            RT_CUDART_CHECK(cudaEventCreateWithFlags(&join[i], cudaEventDisableTiming));
        RT_CUDART_CHECK(cudaEventRecord(join[i], s->stream[i]));
        RT_CUDART_CHECK(cudaStreamWaitEvent((cudaStream_t)rt_cuda_stream(cx), join[i], 0));
    }
}

/* A grouped GEMM's result y's rows [row, R) of `bytes` each, which no expert holds, zeroed */
static void zero_rows_past(rt_cuda_ctx *cx, void *y, int64_t row, int64_t R, int64_t bytes)
{
    if (row < R)
        RT_CU_CHECK(cuMemsetD8Async((CUdeviceptr)(uintptr_t)((char *)y + row * bytes), 0, (size_t)((R - row) * bytes),
                                    rt_cuda_stream(cx)));
}

/* (x[R,K], w[E,F,K] (tb) or [E,K,F], counts[E]) -> y[R,F]: expert e's rows times op(w[e]), one
 * GEMM each (expert_streams); the rows past the counts zeroed, unless a row bound says no reader
 * looks there (behind expert parallelism's dispatch: at DeepSeek-V3's ep 64, 31/32 of y) */
void cuda_MOE_GROUPED_MATMUL(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    const ir_type *xt = c->arg_types[0], *wt = c->arg_types[1], *yt = c->res_types[0];
    bool tb = c->in->attr[IR_ATTR_MOE_GROUPED_MATMUL_TB] != 0;
    int64_t R = xt->dims[0], K = xt->dims[1], E = wt->dims[0], F = yt->dims[1], row = 0;
    const int32_t *counts = rt_cuda_grouped_counts(cx, c, 2, R);
    size_t xs = ir_dtype_size(xt->dtype), ws = ir_dtype_size(wt->dtype), ys = ir_dtype_size(yt->dtype);
    int sms = rt_cuda_comm_in_flight(cx) ? overlap_gemm_sms() : 0;
    expert_streams st = expert_streams_fork(cx);
    for (int64_t e = 0; e < E; row += counts[e++]) {
        if (!counts[e])
            continue;
        matmul_plan *p = plan_for_rows(counts[e], F, K, false, tb, false, (lt_scale_modes){0}, NULL, xt->dtype, wt->dtype,
                                       yt->dtype, sms);
        char *y = (char *)c->res[0] + (size_t)(row * F) * ys;
        run_plan_on(st.stream[e % st.n], st.workspace[e % st.n], p, (const char *)c->args[0] + (size_t)(row * K) * xs,
                    (const char *)c->args[1] + (size_t)(e * F * K) * ws, 0.0f, y, y);
    }
    expert_streams_join(cx, &st);
    if (ir_row_bound(c->in) < 0) /* a bounded op's readers read the rows received alone */
        zero_rows_past(cx, c->res[0], row, R, F * (int64_t)ys);
}

/* dw[E,P,Q] := beta dw + a_e^T b_e, the operands (a[R,P], b[R,Q], counts[E]) from argument `first` on:
 * one GEMM per expert with rows; an expert without rows keeps beta dw (zeroed when beta is 0) */
static void grouped_wgrad_into(rt_cuda_ctx *cx, const rt_kernel_call *c, int first, float beta, void *dw,
                               const ir_type *dt)
{
    const ir_type *at = c->arg_types[first], *bt = c->arg_types[first + 1];
    int64_t R = at->dims[0], P = at->dims[1], Q = bt->dims[1], E = dt->dims[0], row = 0;
    const int32_t *counts = rt_cuda_grouped_counts(cx, c, first + 2, R);
    size_t as = ir_dtype_size(at->dtype), bs = ir_dtype_size(bt->dtype), ds = ir_dtype_size(dt->dtype);
    int sms = rt_cuda_comm_in_flight(cx) ? overlap_gemm_sms() : 0;
    expert_streams st = expert_streams_fork(cx);
    for (int64_t e = 0; e < E; row += counts[e++]) {
        char *out = (char *)dw + (size_t)(e * P * Q) * ds;
        if (!counts[e]) {
            if (beta == 0.0f)
                RT_CU_CHECK(cuMemsetD8Async((CUdeviceptr)(uintptr_t)out, 0, (size_t)(P * Q) * ds, rt_cuda_stream(cx)));
            continue;
        }
        matmul_plan *p = plan_for_rows(P, Q, counts[e], true, false, true, (lt_scale_modes){0}, NULL, at->dtype, bt->dtype,
                                       dt->dtype, sms);
        run_plan_on(st.stream[e % st.n], st.workspace[e % st.n], p, (const char *)c->args[first] + (size_t)(row * P) * as,
                    (const char *)c->args[first + 1] + (size_t)(row * Q) * bs, beta, out, out);
    }
    expert_streams_join(cx, &st);
}

/* A grouped weight gradient written by `into` (grouped_wgrad_into, fp8_grouped_wgrad_into): into
 * the op's result, or with accumulate into its destination global (operand 0), the GEMMs adding
 * (beta = 1) or, with assign, writing it (beta = 0) */
typedef void (*grouped_wgrad_fn)(rt_cuda_ctx *cx, const rt_kernel_call *c, int first, float beta, void *dw,
                                 const ir_type *dt);
static void grouped_wgrad_op(rt_cuda_ctx *cx, const rt_kernel_call *c, grouped_wgrad_fn into, bool accumulate,
                             bool assign)
{
    if (accumulate)
        into(cx, c, 1, assign ? 0.0f : 1.0f, c->args[0], c->arg_types[0]);
    else
        into(cx, c, 0, 0.0f, c->res[0], c->res_types[0]);
}

/* (a[R,P], b[R,Q], counts[E]) -> f32[E,P,Q]: a_e^T b_e */
void cuda_MOE_GROUPED_WGRAD(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    grouped_wgrad_op(cx, c, grouped_wgrad_into, false, false);
}

/* (dst global, a, b, counts): dst += a_e^T b_e, the GEMMs accumulating (beta = 1); assign: dst := */
void cuda_MOE_GROUPED_WGRAD_ACCUMULATE(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    grouped_wgrad_op(cx, c, grouped_wgrad_into, true, c->in->attr[IR_ATTR_MOE_GROUPED_WGRAD_ACCUMULATE_ASSIGN] != 0);
}

/* --- FP8 experts (ops.def's fp8_grouped_matmul, fp8_grouped_wgrad; their quantizes: launchers.c) - */

/* The reduced dimension k of FP8 grouped GEMM c: cuBLASLt's FP8 GEMMs take a multiple of 16 (an
 * expert's rows, the wgrad's reduction, are padded to one by fp8_transpose) */
static void need_fp8_k(const rt_kernel_call *c, int64_t k, const char *what)
{
    if (k % 16 == 0)
        return;
    fprintf(stderr, "train_rank: %s: cuBLASLt's FP8 GEMM needs the reduced dimension (%s, %lld) a multiple of 16; "
                    "recompile without --fp8-format, or with hidden_size and moe_ffn_hidden_size multiples of 16\n",
            ir_ops[c->in->op].name, what, (long long)k);
    exit(1);
}

/* One expert's FP8 GEMM operands: a [m,k] and b [n,k], both K-major, rows ld apart (0: k), and the
 * scale pointers cuBLASLt reads for them: the expert's scale_inv (SCALAR_32F), or blockwise its
 * tiles' and blocks' in the layouts of the scale modes */
typedef struct {
    const void *a, *b;
    const float *sa, *sb;
    int64_t ld;
} fp8_expert_operands;

/* Plan p set for expert operands op (m, n, k its sizes): the leading dimension of the blockwise
 * wgrad's spans, and the scale pointers (per call: plans are shared; cuBLASLt's A is our b) */
static void expert_plan_operands(matmul_plan *p, fp8_expert_operands op, int64_t m, int64_t n, int64_t k)
{
    if (op.ld) { /* rows of a longer buffer */
        set_layout(p->a, (lt_dims){k, n, op.ld});
        set_layout(p->b, (lt_dims){k, m, op.ld});
    }
    LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &op.sb, sizeof op.sb));
    LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &op.sa, sizeof op.sa));
}

/* out := op.a op.b^T by plan p with algorithm algo on stream s: cuBLASLt's status */
static cublasStatus_t expert_gemm_by(const matmul_plan *p, const cublasLtMatmulAlgo_t *algo, fp8_expert_operands op,
                                     float beta, void *out, cudaStream_t s, void *ws)
{
    const float one = 1.0f;
    return cublasLtMatmul(lt, p->desc, &one, op.b, p->a, op.a, p->b, &beta, out, p->c, out, p->c, algo, ws,
                          WORKSPACE_BYTES, s);
}

/* Expert e's FP8 GEMM out := sa sb a b^T + beta out (Hopper's TN FP8 GEMM, as fp8_gemm's forward),
 * fp32 accumulation, out in out_dtype, on the expert's stream: the dense FP8 GEMM's scale
 * conventions (cuBLASLt's A is our b: its scale sb; scales.a its mode). rows_in_k: the expert's rows
 * are k (the wgrad's). Should the algorithm chosen for the rows' bucket refuse the exact rows, the
 * heuristic's other candidates are tried, then a plan for the exact size (kept), with a note naming
 * the shape: a guard (the H100's refusal of 2026-12-08 was the scales' alignment, not this). */
static void fp8_expert_gemm(const expert_streams *st, int64_t e, int64_t m, int64_t n, int64_t k, bool rows_in_k,
                            const rt_kernel_call *c, int first, fp8_expert_operands op, lt_scale_modes scales,
                            float beta, void *out, ir_dtype out_dtype, int sms)
{
    const void *lt_scales[2] = {op.sb, op.sa}; /* cuBLASLt's A is our b */
    ir_dtype adt = c->arg_types[first]->dtype, bdt = c->arg_types[first + 2]->dtype;
    matmul_plan *p = plan_for_rows(m, n, k, false, true, rows_in_k, scales, lt_scales, adt, bdt, out_dtype, sms);
    expert_plan_operands(p, op, m, n, k);
    cudaStream_t stream = st->stream[e % st->n];
    void *ws = st->workspace[e % st->n];
    if (expert_gemm_by(p, &p->algo, op, beta, out, stream, ws) == CUBLAS_STATUS_SUCCESS)
        return;
    for (int i = 0; i < p->ncandidates; i++)
        if (expert_gemm_by(p, &p->candidates[i], op, beta, out, stream, ws) == CUBLAS_STATUS_SUCCESS) {
            p->algo = p->candidates[i];
            return;
        }
    static bool said;
    if (!said)
        fprintf(stderr, "train_rank: note: FP8 expert GEMM %lldx%lldx%lld (rows in %s, scale modes %d x %d): no "
                "algorithm of its rows' bucket runs it; planned for the exact size\n", (long long)m, (long long)n,
                (long long)k, rows_in_k ? "k" : "m", scales.a, scales.b), said = true;
    matmul_plan *x = plan_of(m, n, k, false, true, CUBLASLT_EPILOGUE_DEFAULT, scales, lt_scales, adt, bdt, out_dtype,
                             sms, true);
    expert_plan_operands(x, op, m, n, k);
    LT_CHECK(expert_gemm_by(x, &x->algo, op, beta, out, stream, ws));
}

/* The cuBLASLt scale modes of FP8 grouped GEMM c's operands from `first` (A our b, B our a):
 * SCALAR_32F for a scale an expert, else their block layouts' (blockwise) */
static lt_scale_modes grouped_scale_modes(const rt_kernel_call *c, int first)
{
    return (lt_scale_modes){scale_mode_of(c->arg_types[first + 2], c->arg_types[first + 3]),
                            scale_mode_of(c->arg_types[first], c->arg_types[first + 1])};
}

/* Blockwise: each expert's rows' 1x128 tile scales, from sx f32[K/128, R rounded up to 4] (where
 * fp8_block_quantize puts them, every row's beside the others'), gathered into scratch as
 * cuBLASLt's VEC128_32F reads a matrix of the expert's n rows: f32[K/128, n rounded up to 4], the
 * experts one after another; expert e's at the returned floats + first[e] */
static const float *expert_row_scales(rt_cuda_ctx *cx, const rt_kernel_call *c, const int32_t *counts, int64_t E,
                                      int64_t *first)
{
    int64_t tiles = c->arg_types[0]->dims[1] / IR_FP8_BLOCK;
    first[0] = 0;
    for (int64_t e = 0; e < E; e++)
        first[e + 1] = first[e] + tiles * ((counts[e] + IR_FP8_SCALE_ALIGN - 1) / IR_FP8_SCALE_ALIGN * IR_FP8_SCALE_ALIGN);
    float *s = rt_cuda_scratch(cx, sizeof(float) * (size_t)(first[E] ? first[E] : 1));
    size_t src_pitch = sizeof(float) * (size_t)c->arg_types[1]->dims[1];
    for (int64_t e = 0, row = 0; e < E; row += counts[e++])
        if (counts[e])
            RT_CUDART_CHECK(cudaMemcpy2DAsync(s + first[e], sizeof(float) * (size_t)((first[e + 1] - first[e]) / tiles),
                                              (const float *)c->args[1] + row, src_pitch, sizeof(float) * (size_t)counts[e],
                                              (size_t)tiles, cudaMemcpyDeviceToDevice,
                                              (cudaStream_t)rt_cuda_stream(cx)));
    return s;
}

/* Tensorwise experts' scale_invs sa[E] and sb[E] copied a 16-byte slot each into dst (8 E floats:
 * sa's slots, then sb's); expert e's at dst + 4 e and dst + 4 (E + e). An H100's cuBLASLt 13.1
 * refused (NOT_SUPPORTED, at run time, even planned for the exact size) the experts' GEMMs whose
 * scale pointers were 4 bytes apart, while the blockwise experts', 16-byte aligned, ran
 * (bench/RESULTS.md, 2026-12-08): taken as an alignment rule until a GPU shows otherwise. */
static void aligned_expert_scales(rt_cuda_ctx *cx, float *dst, const float *sa, const float *sb, int64_t E)
{
    cudaStream_t s = (cudaStream_t)rt_cuda_stream(cx);
    RT_CUDART_CHECK(cudaMemcpy2DAsync(dst, 16, sa, sizeof(float), sizeof(float), (size_t)E, cudaMemcpyDeviceToDevice, s));
    RT_CUDART_CHECK(
        cudaMemcpy2DAsync(dst + 4 * E, 16, sb, sizeof(float), sizeof(float), (size_t)E, cudaMemcpyDeviceToDevice, s));
}

/* (qx[R,K], sx[E], qw[E,F,K] (tb) or [E,K,F], sw[E], counts[, hdy]) -> y[R,F]: expert e's rows by its
 * weight, one FP8 GEMM each (expert_streams), alpha sx[e] sw[e]; a weight [E,K,F] (the dgrad's) made
 * K-major first, expert by expert; the rows past the counts zeroed. Blockwise (sx, sw block scales:
 * qx's rows in 1x128 tiles, qw [E,F,K] in 128x128 blocks, always K-major): expert e's weight blocks'
 * scales are its own rows of sw's, its rows' tiles' gathered (expert_row_scales). */
void cuda_FP8_GROUPED_MATMUL(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    need_fp8_operands(c, 0);
    const ir_type *xt = c->arg_types[0], *wt = c->arg_types[2], *yt = c->res_types[0];
    bool tb = c->in->attr[IR_ATTR_FP8_GROUPED_MATMUL_TB] != 0;
    int64_t R = xt->dims[0], K = xt->dims[1], E = wt->dims[0], F = yt->dims[1], row = 0;
    need_fp8_k(c, K, "the rows' features");
    const int32_t *counts = rt_cuda_grouped_counts(cx, c, 4, R);
    size_t ys = ir_dtype_size(yt->dtype);
    const char *w = c->args[2];
    lt_scale_modes scales = grouped_scale_modes(c, 0);
    bool blocks = ir_fp8_grouped_blockwise(c->arg_types[1]);
    const float *sx = c->args[1], *sw = c->args[3];
    int64_t *first = blocks ? malloc(sizeof(int64_t) * (size_t)(E + 1)) : NULL;
    if (blocks)
        sx = expert_row_scales(cx, c, counts, E, first);
    int64_t sw_expert = blocks ? ir_numel(c->arg_types[3]) / E : 4; /* floats from an expert's weight scales to the next's */
    /* scratch: tensorwise, the scales' aligned slots, then the weights made K-major; blockwise, the
     * rows' tile scales (its weights always K-major: passes/fp8.c refuses [E,K,F] ones) */
    size_t slots = blocks ? 0 : (size_t)(8 * E) * sizeof(float);
    char *scratch = blocks ? NULL : rt_cuda_scratch(cx, slots + (tb ? 0 : (size_t)(E * K * F)));
    if (!blocks) {
        aligned_expert_scales(cx, (float *)scratch, sx, sw, E);
        sx = (const float *)scratch, sw = (const float *)scratch + 4 * E;
    }
    if (!tb) { /* w_e [K,F] -> [F,K] */
        char *t = scratch + slots;
        for (int64_t e = 0; e < E; e++)
            fp8_transpose(cx, t + e * K * F, w + e * K * F, K, F, K);
        w = t;
    }
    int sms = rt_cuda_comm_in_flight(cx) ? overlap_gemm_sms() : 0;
    expert_streams st = expert_streams_fork(cx);
    for (int64_t e = 0; e < E; row += counts[e++])
        if (counts[e]) {
            fp8_expert_operands op = {(const char *)c->args[0] + row * K, w + e * F * K,
                                      blocks ? sx + first[e] : sx + 4 * e, sw + e * sw_expert, 0};
            fp8_expert_gemm(&st, e, counts[e], F, K, false, c, 0, op, scales, 0.0f,
                            (char *)c->res[0] + (size_t)(row * F) * ys, yt->dtype, sms);
        }
    expert_streams_join(cx, &st);
    zero_rows_past(cx, c->res[0], row, R, F * (int64_t)ys);
    free(first);
}

/* Blockwise: dw[E,P,Q] := beta dw + qa_e qb_e^T, the operands (qa[P,R'], sa, qb[Q,R'], sb, counts) from
 * `first` on, the experts' rows transposed with the counts (fp8_block_quantize's): expert e's span
 * of columns from ir_fp8_expert_span, its rows rounded up to 128 (zero past them) as the GEMM's k,
 * read in place (leading dimension R'), its tiles' scales their own rows of sa's and sb's
 * (VEC128_32F x VEC128_32F); an expert without rows keeps beta dw (zeroed when beta is 0) */
static void fp8_grouped_block_wgrad_into(rt_cuda_ctx *cx, const rt_kernel_call *c, int first, float beta, void *dw,
                                         const ir_type *dt)
{
    const ir_type *at = c->arg_types[first], *bt = c->arg_types[first + 2];
    int64_t P = at->dims[0], Q = bt->dims[0], RP = at->dims[1], E = dt->dims[0];
    size_t ds = ir_dtype_size(dt->dtype);
    const int32_t *counts = rt_cuda_grouped_counts(cx, c, first + 4, RP);
    lt_scale_modes scales = grouped_scale_modes(c, first);
    const float *sa = c->args[first + 1], *sb = c->args[first + 3];
    int64_t sa_row = c->arg_types[first + 1]->dims[1], sb_row = c->arg_types[first + 3]->dims[1]; /* a tile column's */
    int sms = rt_cuda_comm_in_flight(cx) ? overlap_gemm_sms() : 0;
    expert_streams st = expert_streams_fork(cx);
    for (int64_t e = 0, span = 0; e < E; span += (counts[e++] + IR_FP8_BLOCK - 1) / IR_FP8_BLOCK * IR_FP8_BLOCK) {
        char *out = (char *)dw + (size_t)(e * P * Q) * ds;
        int64_t k = (counts[e] + IR_FP8_BLOCK - 1) / IR_FP8_BLOCK * IR_FP8_BLOCK;
        if (span + k > RP) {
            fprintf(stderr, "train_rank: %s: expert %lld's rows run past the %lld columns of its transposed operands: "
                            "moe_sort's counts are corrupt\n", ir_ops[c->in->op].name, (long long)e, (long long)RP);
            exit(1);
        }
        if (!counts[e]) {
            if (beta == 0.0f)
                RT_CU_CHECK(cuMemsetD8Async((CUdeviceptr)(uintptr_t)out, 0, (size_t)(P * Q) * ds, rt_cuda_stream(cx)));
            continue;
        }
        fp8_expert_operands op = {(const char *)c->args[first] + span, (const char *)c->args[first + 2] + span,
                                  sa + span / IR_FP8_BLOCK * sa_row, sb + span / IR_FP8_BLOCK * sb_row, RP};
        fp8_expert_gemm(&st, e, P, Q, k, true, c, first, op, scales, beta, out, dt->dtype, sms);
    }
    expert_streams_join(cx, &st);
}

/* dw[E,P,Q] := beta dw + qa_e^T qb_e, alpha sa[e] sb[e], the operands (qa[R,P], sa[E], qb[R,Q], sb[E],
 * counts) from argument `first` on. Each expert's rows of both transposed to K-major [P, rows'] and
 * [Q, rows'], rows' its rows padded with zeros to a multiple of 16 (cuBLASLt's FP8 k; Megatron's
 * --moe-router-padding-for-fp8 pads the routing instead), then one FP8 GEMM each; an expert without
 * rows keeps beta dw (zeroed when beta is 0). Blockwise: fp8_grouped_block_wgrad_into. */
static void fp8_grouped_wgrad_into(rt_cuda_ctx *cx, const rt_kernel_call *c, int first, float beta, void *dw,
                                   const ir_type *dt)
{
    need_fp8_operands(c, first);
    if (ir_fp8_grouped_blockwise(c->arg_types[first + 1])) {
        fp8_grouped_block_wgrad_into(cx, c, first, beta, dw, dt);
        return;
    }
    const ir_type *at = c->arg_types[first], *bt = c->arg_types[first + 2];
    int64_t R = at->dims[0], P = at->dims[1], Q = bt->dims[1], E = dt->dims[0], padded = 0;
    size_t ds = ir_dtype_size(dt->dtype);
    const int32_t *counts = rt_cuda_grouped_counts(cx, c, first + 4, R);
    for (int64_t e = 0; e < E; e++)
        padded += (counts[e] + 15) / 16 * 16;
    size_t slots = (size_t)(8 * E) * sizeof(float); /* the scales' aligned slots (aligned_expert_scales) */
    char *s = rt_cuda_scratch(cx, slots + (size_t)(padded * (P + Q))), *a_t = s + slots, *b_t = a_t + padded * P;
    aligned_expert_scales(cx, (float *)s, c->args[first + 1], c->args[first + 3], E);
    for (int64_t e = 0, row = 0, off = 0; e < E; off += (counts[e] + 15) / 16 * 16, row += counts[e++]) {
        int64_t pad = (counts[e] + 15) / 16 * 16;
        if (!counts[e]) {
            if (beta == 0.0f)
                RT_CU_CHECK(cuMemsetD8Async((CUdeviceptr)(uintptr_t)((char *)dw + (size_t)(e * P * Q) * ds), 0,
                                            (size_t)(P * Q) * ds, rt_cuda_stream(cx)));
            continue;
        }
        fp8_transpose(cx, a_t + off * P, (const char *)c->args[first] + row * P, counts[e], P, pad);
        fp8_transpose(cx, b_t + off * Q, (const char *)c->args[first + 2] + row * Q, counts[e], Q, pad);
    }
    int sms = rt_cuda_comm_in_flight(cx) ? overlap_gemm_sms() : 0;
    expert_streams st = expert_streams_fork(cx);
    const float *sa = (const float *)s, *sb = (const float *)s + 4 * E;
    for (int64_t e = 0, off = 0; e < E; off += (counts[e++] + 15) / 16 * 16)
        if (counts[e]) {
            fp8_expert_operands op = {a_t + off * P, b_t + off * Q, sa + 4 * e, sb + 4 * e, 0};
            fp8_expert_gemm(&st, e, P, Q, (counts[e] + 15) / 16 * 16, true, c, first, op, (lt_scale_modes){0}, beta,
                            (char *)dw + (size_t)(e * P * Q) * ds, dt->dtype, sms);
        }
    expert_streams_join(cx, &st);
}

/* (qa[R,P], sa[E], qb[R,Q], sb[E], counts) -> f32 dw[E,P,Q]: qa_e^T qb_e */
void cuda_FP8_GROUPED_WGRAD(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    grouped_wgrad_op(cx, c, fp8_grouped_wgrad_into, false, false);
}

/* (dst global, qa, sa, qb, sb, counts): dst += qa_e^T qb_e, the GEMMs accumulating into the fp32
 * gradient (beta = 1); assign: dst := */
void cuda_FP8_GROUPED_WGRAD_ACCUMULATE(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    grouped_wgrad_op(cx, c, fp8_grouped_wgrad_into, true, c->in->attr[IR_ATTR_FP8_GROUPED_WGRAD_ACCUMULATE_ASSIGN] != 0);
}
