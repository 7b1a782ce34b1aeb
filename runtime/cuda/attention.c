/* attention.c — CUDA launchers of ATTENTION and ATTENTION_GRAD and of their dropout twins
 * (ATTENTION_DROPOUT, ATTENTION_DROPOUT_GRAD): pick the kernel of kernels_templates/attention.cuh
 * by dtype and head dim, and size its grid and shared memory. In builds with cuDNN, bf16
 * ATTENTION and ATTENTION_GRAD may run cuDNN's fused flash attention instead (cudnn_attention.c):
 * MCC_ATTENTION=mcc|cudnn chooses, unset means CU_ATTN_DEFAULT. Under context parallelism (attributes
 * cp, cp_rank, ring, shift) mcc's kernels run: q holds the rank's balanced chunks, k and v every cp
 * rank's (ring 0) or one rank's (ring 1, rank (cp_rank - shift) mod cp), masked by position.
 * Values of another head width than q and k (multi-latent attention's, Dv != D) run only through
 * cuDNN (plain causal bf16 attention without cp): mcc's kernels take one head dimension. */
#include "cuda_ctx.h"
#include "cudnn_attention.h"
#include "runtime/dropout.h"
#include "common/knobs.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The kernels' sequence layout (attention.cuh's mcc_attn_cp, ORDER: its fields): q holds rank
 * q_rank's chunks, k and v kv_ranks ranks' from kv_rank on. */
typedef struct {
    int cp, q_rank, kv_rank, kv_ranks;
} cu_attn_cp;

typedef struct {
    int B, T, H, Hk, D, Dv; /* T: q's (the rank's) tokens; k and v hold T cp.kv_ranks; D: q and k's head
                               width, Dv: v and y's */
    float scale;
    cu_attn_cp cp;
} cu_attn_shape;

/* bf16 tiles of a head dim: the cubin's mcc_attn_tiles_d<D> (attention.cuh), so launchers and
 * kernels always agree, even for a cubin compiled with other tiles (bench/attention_bench.c). */
typedef struct {
    int fwd_bm, fwd_bn, fwd_warps; /* query rows, keys per step, warps of a forward block */
    int bwd_bm, bwd_bn, bwd_warps; /* query rows per step, keys, warps of a backward block */
} cu_attn_tiles;

/* The sequence layout of an attention call from its attributes. The dropout twins run as one
 * rank's: their kernels draw the mask by local indices, so the cp pass refuses them on the cuda
 * target but under a2a, where they carry cp 0 (whole sequences of a block of heads). */
static cu_attn_cp cu_attn_cp_of(const ir_instr *in, bool dropout)
{
    const double *a = ir_attention_attrs(in);
    if (dropout || a[IR_ATTR_ATTENTION_CP] <= 1)
        return (cu_attn_cp){1, 0, 0, 1};
    int cp = (int)a[IR_ATTR_ATTENTION_CP], rank = (int)a[IR_ATTR_ATTENTION_CP_RANK];
    if (a[IR_ATTR_ATTENTION_RING] == 0) /* every rank's keys, gathered */
        return (cu_attn_cp){cp, rank, 0, cp};
    int shift = (int)a[IR_ATTR_ATTENTION_SHIFT];
    return (cu_attn_cp){cp, rank, ((rank - shift) % cp + cp) % cp, 1};
}

/* (q [B,T,H,D], k [B,Tk,Hk,D], v [B,Tk,Hk,Dv]) -> the shape, with the CPU oracle's scale 1/sqrt(D).
 * Values of another width than q and k (multi-latent attention's) need cuDNN (cu_attn_cudnn_plans);
 * what cuDNN does not take of them (dropout, f32, cp's ring or gathered keys) is refused here, and at
 * compile time by passes/target.c for the plans it sees. */
static cu_attn_shape cu_attn_shape_of(const rt_kernel_call *c, const ir_type *q, const ir_type *k, const ir_type *v,
                                      bool dropout)
{
    cu_attn_shape s = {(int)q->dims[0], (int)q->dims[1], (int)q->dims[2], (int)k->dims[2], (int)q->dims[3],
                       (int)v->dims[3], 0, cu_attn_cp_of(c->in, dropout)};
    s.scale = (float)(1.0 / sqrt((double)s.D));
    if (s.Dv != s.D && (dropout || q->dtype != IR_BF16 || s.cp.cp > 1)) {
        fprintf(stderr, "train_rank: %s: values of %d channels beside q and k's %d (multi-latent attention) run "
                        "only through cuDNN's fused attention, which mcc uses for plain causal bf16 attention: not "
                        "%s; train with %s, or a v_head_dim equal to q and k's width, or on the cpu target\n",
                ir_ops[c->in->op].name, s.Dv, s.D,
                dropout ? "with attention dropout" : q->dtype != IR_BF16 ? "in f32" : "under ring or gathered context parallelism",
                dropout ? "--attention-dropout 0" : q->dtype != IR_BF16 ? "bf16 activations" : "--cp-comm-type a2a");
        exit(1);
    }
    if (s.Hk <= 0 || s.H % s.Hk) {
        fprintf(stderr, "train_rank: attention: %d query heads are not a multiple of %d kv heads; "
                        "set num_attention_heads to a multiple of num_query_groups\n", s.H, s.Hk);
        exit(1);
    }
    if (k->dims[1] != (int64_t)s.T * s.cp.kv_ranks || (s.cp.cp > 1 && s.T % 2)) {
        fprintf(stderr, "train_rank: attention: q has %d tokens and k %lld under context parallelism %d (keys of "
                        "%d ranks): k must hold %d ranks' two chunks of %d; a plan out of step with the runtime\n",
                s.T, (long long)k->dims[1], s.cp.cp, s.cp.kv_ranks, s.cp.kv_ranks, s.T / 2);
        exit(1);
    }
    return s;
}

static cu_attn_tiles cu_attn_tiles_for(rt_cuda_ctx *cx, int D)
{
    char name[32];
    snprintf(name, sizeof name, "mcc_attn_tiles_d%d", D);
    int t[6];
    if (!rt_cuda_read_constant(cx, name, t, sizeof t)) {
        fprintf(stderr, "train_rank: attention: head dim %d has no CUDA kernel (supported: 16, 64, 128); "
                        "choose kv_channels (hidden_size / num_attention_heads unless given) to be one of them\n", D);
        exit(1);
    }
    return (cu_attn_tiles){t[0], t[1], t[2], t[3], t[4], t[5]};
}

static void cu_attn_check_dtype(const char *op, ir_dtype dt)
{
    if (dt == IR_BF16 || dt == IR_F32)
        return;
    fprintf(stderr, "train_rank: %s: dtype %s has no CUDA kernel (supported: bf16, f32)\n", op, ir_dtype_name(dt));
    exit(1);
}

static unsigned cu_attn_cdiv(long long a, long long b) { return (unsigned)((a + b - 1) / b); }

/* Which implementation runs bf16 ATTENTION and ATTENTION_GRAD (their dropout twins and f32 are
 * always mcc's). */
typedef enum {
    CU_ATTN_MCC,          /* mcc's kernels */
    CU_ATTN_CUDNN_OR_MCC, /* cuDNN's where it has an engine for the shape, else mcc's (one notice per shape) */
    CU_ATTN_CUDNN,        /* cuDNN's, or exit saying why not */
} cu_attn_impl;

/* MCC_ATTENTION (common/knobs.h: "auto" by default; flip that after measuring, bench/attention_bench.c
 * times both). */
static cu_attn_impl cu_attn_impl_chosen(void)
{
    /* ORDER MCC_ATTENTION's choices: auto|mcc|cudnn */
    static const cu_attn_impl of_choice[] = {CU_ATTN_CUDNN_OR_MCC, CU_ATTN_MCC, CU_ATTN_CUDNN};
    return of_choice[knob_choice(KNOB_ATTENTION)];
}

#ifdef MCC_HAVE_CUDNN
/* cuDNN's plans for the shape, or NULL when mcc's kernels are to run. */
static cudnn_attn *cu_attn_cudnn_plans(const cu_attn_shape *s)
{
    cu_attn_impl impl = cu_attn_impl_chosen();
    if (impl == CU_ATTN_MCC && s->Dv == s->D)
        return NULL;
    const char *why = NULL;
    bool built = false;
    cudnn_attn *a = cudnn_attn_get(&(cudnn_attn_shape){s->B, s->T, s->H, s->Hk, s->D, s->Dv, s->scale}, &why, &built);
    if (a)
        return a;
    if (s->Dv != s->D) {
        fprintf(stderr, "train_rank: attention: values of %d channels beside q and k's %d (multi-latent attention) "
                        "have no kernel of mcc's, only cuDNN's fused attention, and cuDNN has no engine for B=%d T=%d "
                        "H=%d Hk=%d D=%d Dv=%d (%s); cuDNN 9.19 or newer on Hopper takes D 192 with Dv 128 "
                        "(DeepSeek-V3's): put such a libcudnn (PyTorch's nvidia/cudnn/lib, say) first on "
                        "LD_LIBRARY_PATH, or train on the cpu target\n",
                s->Dv, s->D, s->B, s->T, s->H, s->Hk, s->D, s->Dv, why);
        exit(1);
    }
    if (impl == CU_ATTN_CUDNN) {
        fprintf(stderr, "train_rank: attention: MCC_ATTENTION=cudnn, but cuDNN has no engine for B=%d T=%d H=%d "
                        "Hk=%d D=%d (%s); unset MCC_ATTENTION to run mcc's kernels where cuDNN cannot\n",
                s->B, s->T, s->H, s->Hk, s->D, why);
        exit(1);
    }
    if (built)
        fprintf(stderr, "train_rank: attention: cuDNN has no engine for B=%d T=%d H=%d Hk=%d D=%d (%s); "
                        "using mcc's kernels\n", s->B, s->T, s->H, s->Hk, s->D, why);
    return NULL;
}
#endif

/* Runs a bf16 ATTENTION (backward: ATTENTION_GRAD) through cuDNN when that is the chosen
 * implementation and cuDNN has an engine for the shape; false: the caller runs mcc's kernels. */
static bool cu_attn_by_cudnn(rt_cuda_ctx *cx, const cu_attn_shape *s, const rt_kernel_call *c, bool backward)
{
#ifdef MCC_HAVE_CUDNN
    cudnn_attn *a = cu_attn_cudnn_plans(s);
    if (!a)
        return false;
    if (!backward) { /* (q, k, v) -> y, lse */
        void *ws = rt_cuda_scratch(cx, cudnn_attn_forward_workspace(a));
        cudnn_attn_forward(a, rt_cuda_stream(cx), c->args[0], c->args[1], c->args[2], c->res[0], c->res[1], ws);
        return true;
    }
    /* (dy, q, k, v, y, lse) -> dq, dk, dv */
    void *ws = rt_cuda_scratch(cx, cudnn_attn_backward_workspace(a));
    cudnn_attn_backward(a, rt_cuda_stream(cx), c->args[1], c->args[2], c->args[3], c->args[4], c->args[0],
                        c->args[5], c->res[0], c->res[1], c->res[2], ws);
    return true;
#else
    if (s->Dv != s->D) {
        fprintf(stderr, "train_rank: attention: values of %d channels beside q and k's %d (multi-latent attention) "
                        "run only through cuDNN's fused attention, and this mcc was built without cuDNN (CMake found "
                        "no cuDNN 9: libcudnn and cudnn_graph.h); rebuild mcc with cuDNN 9.19 or newer (PyTorch's "
                        "nvidia-cudnn-cu12 wheel has one), or train on the cpu target\n", s->Dv, s->D);
        exit(1);
    }
    if (cu_attn_impl_chosen() == CU_ATTN_CUDNN) {
        fprintf(stderr, "train_rank: attention: MCC_ATTENTION=cudnn, but this mcc was built without cuDNN (CMake "
                        "found no cuDNN 9: libcudnn and cudnn_graph.h); unset MCC_ATTENTION\n");
        exit(1);
    }
    return false;
#endif
}

/* The f32 kernels run one thread per (b, h, query row). */
enum { CU_ATTN_F32_BLOCK = 64 };

/* The dropout twins' extra kernel parameters (mcc_dropout, head_offset); NULL: plain attention. */
typedef struct {
    mcc_dropout d;
    int head_offset;
} cu_attn_dropout;

static cu_attn_dropout cu_attn_dropout_of(const rt_kernel_call *c, int first_sample_arg)
{
    return (cu_attn_dropout){rt_dropout_of(c->in, c->args[first_sample_arg]),
                             (int)c->in->attr[IR_ATTR_ATTENTION_DROPOUT_HEAD_OFFSET]};
}

/* "mcc_attention[_dropout]_<fwd|bwd>_<dtype>_d<D>" */
typedef struct {
    char s[64];
} cu_attn_name;

static cu_attn_name cu_attn_kernel(const char *pass, ir_dtype dt, int D, const cu_attn_dropout *drop)
{
    cu_attn_name n;
    snprintf(n.s, sizeof n.s, "mcc_attention%s_%s_%s_d%d", drop ? "_dropout" : "", pass, ir_dtype_name(dt), D);
    return n;
}

/* Puts the dropout parameters after a kernel's n others. */
static void cu_attn_params(void **params, int n, cu_attn_dropout *drop)
{
    if (drop) {
        params[n] = &drop->d;
        params[n + 1] = &drop->head_offset;
    }
}

/* A kernel's query (forward) or key (backward) tiles of `rows` under the layout: the chunks'
 * tiles, none straddling a chunk (attention.cuh). */
static unsigned cu_attn_tiles_over(const cu_attn_shape *s, int chunks_of_ranks, int rows)
{
    int per_rank = s->cp.cp > 1 ? 2 : 1, c = s->T / per_rank;
    return (unsigned)(chunks_of_ranks * per_rank) * cu_attn_cdiv(c, rows);
}

/* (q, k, v) -> y [B,T,H,D], lse f32 [B,H,T] */
static void cu_attn_forward(rt_cuda_ctx *cx, const rt_kernel_call *c, cu_attn_dropout *drop)
{
    cu_attn_shape s = cu_attn_shape_of(c, c->arg_types[0], c->arg_types[1], c->arg_types[2], drop != NULL);
    ir_dtype dt = c->arg_types[0]->dtype;
    cu_attn_check_dtype(ir_ops[c->in->op].name, dt);
    if (dt == IR_BF16 && !drop && s.cp.cp == 1 && cu_attn_by_cudnn(cx, &s, c, false)) /* cuDNN: plain causal only */
        return;
    const cu_attn_tiles tiles = cu_attn_tiles_for(cx, s.D), *tl = &tiles;
    void *q = c->args[0], *k = c->args[1], *v = c->args[2], *y = c->res[0], *lse = c->res[1];
    cu_attn_name name = cu_attn_kernel("fwd", dt, s.D, drop);
    if (dt == IR_F32) {
        void *params[13] = {&q, &k, &v, &y, &lse, &s.B, &s.T, &s.H, &s.Hk, &s.scale, &s.cp};
        cu_attn_params(params, 11, drop);
        rt_cuda_launch(cx, name.s, cu_attn_cdiv((long long)s.B * s.H * s.T, CU_ATTN_F32_BLOCK), 1, 1,
                       CU_ATTN_F32_BLOCK, 0, params);
        return;
    }
    size_t smem = (size_t)(tl->fwd_bm + 4 * tl->fwd_bn) * s.D * 2; /* Q [BM][D], K and V [2][BN][D] bf16 */
    void *params[12] = {&q, &k, &v, &y, &lse, &s.T, &s.H, &s.Hk, &s.scale, &s.cp};
    cu_attn_params(params, 10, drop);
    rt_cuda_launch(cx, name.s, cu_attn_tiles_over(&s, 1, tl->fwd_bm), (unsigned)(s.B * s.H), 1, 32 * tl->fwd_warps,
                   smem, params);
}

void cuda_ATTENTION(rt_cuda_ctx *cx, const rt_kernel_call *c) { cu_attn_forward(cx, c, NULL); }

/* (q, k, v, first_sample) */
void cuda_ATTENTION_DROPOUT(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    cu_attn_dropout drop = cu_attn_dropout_of(c, 3);
    cu_attn_forward(cx, c, &drop);
}

/* f32: the simple kernel accumulates dk, dv with atomics, so they start at zero. */
static void cu_attn_grad_f32(rt_cuda_ctx *cx, const rt_kernel_call *c, const cu_attn_shape *s, cu_attn_dropout *drop)
{
    void *dy = c->args[0], *q = c->args[1], *k = c->args[2], *v = c->args[3], *y = c->args[4], *lse = c->args[5];
    void *dq = c->res[0], *dk = c->res[1], *dv = c->res[2];
    size_t nkv = (size_t)s->B * s->T * s->cp.kv_ranks * s->Hk * s->D;
    RT_CU_CHECK(cuMemsetD32Async((CUdeviceptr)(uintptr_t)dk, 0, nkv, rt_cuda_stream(cx)));
    RT_CU_CHECK(cuMemsetD32Async((CUdeviceptr)(uintptr_t)dv, 0, nkv, rt_cuda_stream(cx)));
    int B = s->B, T = s->T, H = s->H, Hk = s->Hk;
    float scale = s->scale;
    cu_attn_cp cp = s->cp;
    void *params[17] = {&dy, &q, &k, &v, &y, &lse, &dq, &dk, &dv, &B, &T, &H, &Hk, &scale, &cp};
    cu_attn_params(params, 15, drop);
    unsigned grid = cu_attn_cdiv((long long)B * H * T, CU_ATTN_F32_BLOCK);
    rt_cuda_launch(cx, cu_attn_kernel("bwd", IR_F32, s->D, drop).s, grid, 1, 1, CU_ATTN_F32_BLOCK, 0, params);
}

/* (dy, q, k, v, y, lse) -> dq [B,T,H,D], dk, dv [B,T,Hk,D]. bf16: three kernels over a scratch of
 * dq_acc f32 [B,T,H,D] and Di f32 [B,H,T]: Di = rowsum(dy * y) (and dq_acc = 0); the main kernel
 * (dk, dv per kv block, dq_acc by atomics); dq = scale * dq_acc in bf16. */
static void cu_attn_backward(rt_cuda_ctx *cx, const rt_kernel_call *c, cu_attn_dropout *drop)
{
    cu_attn_shape s = cu_attn_shape_of(c, c->arg_types[1], c->arg_types[2], c->arg_types[3], drop != NULL);
    ir_dtype dt = c->arg_types[1]->dtype;
    cu_attn_check_dtype(ir_ops[c->in->op].name, dt);
    if (dt == IR_BF16 && !drop && s.cp.cp == 1 && cu_attn_by_cudnn(cx, &s, c, true))
        return;
    const cu_attn_tiles tiles = cu_attn_tiles_for(cx, s.D), *tl = &tiles;
    if (dt == IR_F32) {
        cu_attn_grad_f32(cx, c, &s, drop);
        return;
    }
    void *dy = c->args[0], *q = c->args[1], *k = c->args[2], *v = c->args[3], *y = c->args[4], *lse = c->args[5];
    void *dq = c->res[0], *dk = c->res[1], *dv = c->res[2];
    long long nq = (long long)s.B * s.T * s.H * s.D, rows = (long long)s.B * s.T * s.H;
    float *dq_acc = rt_cuda_scratch(cx, (size_t)(nq + rows) * sizeof(float));
    float *Di = dq_acc + nq;

    void *pre[] = {&dy, &y, &Di, &dq_acc, &s.B, &s.T, &s.H, &s.D};
    rt_cuda_launch(cx, "mcc_attention_bwd_pre_bf16", cu_attn_cdiv(rows * 32, 256), 1, 1, 256, 0, pre);

    /* K, V [BN][D], Q, dy [2][BM][D], dS^T [BN][BM] bf16; lse, Di [2][BM] f32 */
    size_t smem = (size_t)(2 * tl->bwd_bn * s.D + 4 * tl->bwd_bm * s.D + tl->bwd_bn * tl->bwd_bm) * 2 +
                  (size_t)4 * tl->bwd_bm * 4;
    void *params[16] = {&dy, &q, &k, &v, &lse, &Di, &dq_acc, &dk, &dv, &s.T, &s.H, &s.Hk, &s.scale, &s.cp};
    cu_attn_params(params, 14, drop);
    rt_cuda_launch(cx, cu_attn_kernel("bwd", dt, s.D, drop).s, cu_attn_tiles_over(&s, s.cp.kv_ranks, tl->bwd_bn),
                   (unsigned)(s.B * s.Hk), 1, 32 * tl->bwd_warps, smem, params);

    void *post[] = {&dq_acc, &dq, &nq, &s.scale};
    unsigned grid = cu_attn_cdiv(nq, 256);
    rt_cuda_launch(cx, "mcc_attention_bwd_post_bf16", grid < 65536 ? grid : 65536, 1, 1, 256, 0, post);
}

void cuda_ATTENTION_GRAD(rt_cuda_ctx *cx, const rt_kernel_call *c) { cu_attn_backward(cx, c, NULL); }

/* (o1, lse1, o2, lse2) -> (o, lse), ring attention's merge of two pieces (ops.def). The kernel is
 * kernels_templates/attention.cuh's, named as every dtype-templated kernel there: the op's name
 * and MCC_FOR_FLOATS's suffix of its dtype (ir_dtype_name: f32 with T = float, bf16 with T =
 * mcc_bf16),
 *   extern "C" __global__ void mcc_attention_merge_<f32|bf16>(T *o, float *lse, const T *o2,
 *                                                           const float *lse2, int B, int H, int T, int D)
 * which merges (o2, lse2) into (o [B,T,H,D], lse f32 [B,H,T]) in place (rt_cuda_attention_merge).
 * o1 and lse1 are copied into o and lse first where the memory plan put them elsewhere (lse always:
 * ops.def lets only o take o1's bytes). */
void cuda_ATTENTION_MERGE(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    const ir_type *ot = c->arg_types[0];
    ir_dtype dt = ot->dtype;
    cu_attn_check_dtype("attention_merge", dt);
    CUstream s = rt_cuda_stream(cx);
    void *o = c->res[0], *lse = c->res[1], *o2 = c->args[2], *lse2 = c->args[3];
    if (o != c->args[0])
        RT_CU_CHECK(cuMemcpyDtoDAsync((CUdeviceptr)(uintptr_t)o, (CUdeviceptr)(uintptr_t)c->args[0], ir_bytes(ot), s));
    if (lse != c->args[1])
        RT_CU_CHECK(cuMemcpyDtoDAsync((CUdeviceptr)(uintptr_t)lse, (CUdeviceptr)(uintptr_t)c->args[1],
                                      ir_bytes(c->arg_types[1]), s));
    rt_cuda_attention_merge(cx, dt, o, lse, o2, lse2, (int)ot->dims[0], (int)ot->dims[2], (int)ot->dims[1],
                            (int)ot->dims[3]);
}

/* (dy, q, k, v, y, lse, first_sample) */
void cuda_ATTENTION_DROPOUT_GRAD(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    cu_attn_dropout drop = cu_attn_dropout_of(c, 6);
    cu_attn_backward(cx, c, &drop);
}

/* (o, lse) := merge((o, lse), (o2, lse2)), two ring pieces of the same queries (attention.cuh's
 * mcc_attention_merge_<dtype>): o, o2 [B,T,H,D] of dtype dt, lse, lse2 f32 [B,H,T]. */
void rt_cuda_attention_merge(rt_cuda_ctx *cx, ir_dtype dt, void *o, float *lse, const void *o2, const float *lse2,
                             int B, int H, int T, int D)
{
    cu_attn_check_dtype("attention_merge", dt);
    char name[40];
    snprintf(name, sizeof name, "mcc_attention_merge_%s", ir_dtype_name(dt));
    void *params[] = {&o, &lse, &o2, &lse2, &B, &H, &T, &D};
    unsigned grid = cu_attn_cdiv((long long)B * T * H * 32, 256);
    rt_cuda_launch(cx, name, grid < 65536 ? grid : 65536, 1, 1, 256, 0, params);
}
