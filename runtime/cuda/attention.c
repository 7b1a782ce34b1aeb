/* attention.c — CUDA launchers of ATTENTION and ATTENTION_GRAD: pick the kernel of
 * kernels_templates/attention.cuh by dtype and head dim, and size its grid and shared memory. */
#include "cuda_ctx.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    int B, T, H, Hk, D;
    float scale;
} cu_attn_shape;

/* bf16 tiles per head dim. ORDER: the MCC_ATTN_BF16 instantiations at the end of attention.cuh. */
typedef struct {
    int D;
    int fwd_bm, fwd_bn, fwd_warps; /* query rows, keys per step, warps of a forward block */
    int bwd_bm, bwd_bn, bwd_warps; /* query rows per step, keys, warps of a backward block */
} cu_attn_tiles;

static const cu_attn_tiles cu_attn_table[] = {
    {16, 64, 64, 4, 64, 64, 4},
    {64, 128, 64, 4, 64, 128, 8},
    {128, 128, 64, 4, 64, 128, 8},
};
#define CU_ATTN_NTILES (int)(sizeof cu_attn_table / sizeof cu_attn_table[0])

/* (q [B,T,H,D], k [B,T,Hk,D]) -> the shape, with the CPU oracle's scale 1/sqrt(D). */
static cu_attn_shape cu_attn_shape_of(const ir_type *q, const ir_type *k)
{
    cu_attn_shape s = {(int)q->dims[0], (int)q->dims[1], (int)q->dims[2], (int)k->dims[2], (int)q->dims[3], 0};
    s.scale = (float)(1.0 / sqrt((double)s.D));
    if (s.Hk <= 0 || s.H % s.Hk) {
        fprintf(stderr, "train_rank: attention: %d query heads are not a multiple of %d kv heads; "
                        "set num_attention_heads to a multiple of num_query_groups\n", s.H, s.Hk);
        exit(1);
    }
    return s;
}

static const cu_attn_tiles *cu_attn_tiles_for(int D)
{
    for (int i = 0; i < CU_ATTN_NTILES; i++)
        if (cu_attn_table[i].D == D)
            return &cu_attn_table[i];
    fprintf(stderr, "train_rank: attention: head dim %d has no CUDA kernel (supported: 16, 64, 128); "
                    "choose hidden_size / num_attention_heads to be one of them\n", D);
    exit(1);
}

static void cu_attn_check_dtype(const char *op, ir_dtype dt)
{
    if (dt == IR_BF16 || dt == IR_F32)
        return;
    fprintf(stderr, "train_rank: %s: dtype %s has no CUDA kernel (supported: bf16, f32)\n", op, ir_dtype_name(dt));
    exit(1);
}

static unsigned cu_attn_cdiv(long long a, long long b) { return (unsigned)((a + b - 1) / b); }

/* The f32 kernels run one thread per (b, h, query row). */
enum { CU_ATTN_F32_BLOCK = 64 };

/* (q, k, v) -> y [B,T,H,D], lse f32 [B,H,T] */
void cuda_ATTENTION(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    cu_attn_shape s = cu_attn_shape_of(c->arg_types[0], c->arg_types[1]);
    ir_dtype dt = c->arg_types[0]->dtype;
    cu_attn_check_dtype("attention", dt);
    const cu_attn_tiles *tl = cu_attn_tiles_for(s.D);
    void *q = c->args[0], *k = c->args[1], *v = c->args[2], *y = c->res[0], *lse = c->res[1];
    char name[64];
    if (dt == IR_F32) {
        snprintf(name, sizeof name, "mcc_attention_fwd_f32_d%d", s.D);
        void *params[] = {&q, &k, &v, &y, &lse, &s.B, &s.T, &s.H, &s.Hk, &s.scale};
        rt_cuda_launch(cx, name, cu_attn_cdiv((long long)s.B * s.H * s.T, CU_ATTN_F32_BLOCK), 1, 1, CU_ATTN_F32_BLOCK,
                       0, params);
        return;
    }
    snprintf(name, sizeof name, "mcc_attention_fwd_bf16_d%d", s.D);
    size_t smem = (size_t)(tl->fwd_bm + 4 * tl->fwd_bn) * s.D * 2; /* Q [BM][D], K and V [2][BN][D] bf16 */
    void *params[] = {&q, &k, &v, &y, &lse, &s.T, &s.H, &s.Hk, &s.scale};
    rt_cuda_launch(cx, name, cu_attn_cdiv(s.T, tl->fwd_bm), (unsigned)(s.B * s.H), 1, 32 * tl->fwd_warps, smem,
                   params);
}

/* f32: the simple kernel accumulates dk, dv with atomics, so they start at zero. */
static void cu_attn_grad_f32(rt_cuda_ctx *cx, const rt_kernel_call *c, const cu_attn_shape *s)
{
    void *dy = c->args[0], *q = c->args[1], *k = c->args[2], *v = c->args[3], *y = c->args[4], *lse = c->args[5];
    void *dq = c->res[0], *dk = c->res[1], *dv = c->res[2];
    size_t nkv = (size_t)s->B * s->T * s->Hk * s->D;
    RT_CU_CHECK(cuMemsetD32Async((CUdeviceptr)(uintptr_t)dk, 0, nkv, rt_cuda_stream(cx)));
    RT_CU_CHECK(cuMemsetD32Async((CUdeviceptr)(uintptr_t)dv, 0, nkv, rt_cuda_stream(cx)));
    char name[64];
    snprintf(name, sizeof name, "mcc_attention_bwd_f32_d%d", s->D);
    int B = s->B, T = s->T, H = s->H, Hk = s->Hk;
    float scale = s->scale;
    void *params[] = {&dy, &q, &k, &v, &y, &lse, &dq, &dk, &dv, &B, &T, &H, &Hk, &scale};
    rt_cuda_launch(cx, name, cu_attn_cdiv((long long)B * H * T, CU_ATTN_F32_BLOCK), 1, 1, CU_ATTN_F32_BLOCK, 0,
                   params);
}

/* (dy, q, k, v, y, lse) -> dq [B,T,H,D], dk, dv [B,T,Hk,D]. bf16: three kernels over a scratch of
 * dq_acc f32 [B,T,H,D] and Di f32 [B,H,T]: Di = rowsum(dy * y) (and dq_acc = 0); the main kernel
 * (dk, dv per kv block, dq_acc by atomics); dq = scale * dq_acc in bf16. */
void cuda_ATTENTION_GRAD(rt_cuda_ctx *cx, const rt_kernel_call *c)
{
    cu_attn_shape s = cu_attn_shape_of(c->arg_types[1], c->arg_types[2]);
    ir_dtype dt = c->arg_types[1]->dtype;
    cu_attn_check_dtype("attention_grad", dt);
    const cu_attn_tiles *tl = cu_attn_tiles_for(s.D);
    if (dt == IR_F32) {
        cu_attn_grad_f32(cx, c, &s);
        return;
    }
    void *dy = c->args[0], *q = c->args[1], *k = c->args[2], *v = c->args[3], *y = c->args[4], *lse = c->args[5];
    void *dq = c->res[0], *dk = c->res[1], *dv = c->res[2];
    long long nq = (long long)s.B * s.T * s.H * s.D, rows = (long long)s.B * s.T * s.H;
    float *dq_acc = rt_cuda_scratch(cx, (size_t)(nq + rows) * sizeof(float));
    float *Di = dq_acc + nq;

    void *pre[] = {&dy, &y, &Di, &dq_acc, &s.B, &s.T, &s.H, &s.D};
    rt_cuda_launch(cx, "mcc_attention_bwd_pre_bf16", cu_attn_cdiv(rows * 32, 256), 1, 1, 256, 0, pre);

    char name[64];
    snprintf(name, sizeof name, "mcc_attention_bwd_bf16_d%d", s.D);
    /* K, V [BN][D], Q, dy [2][BM][D], dS^T [BN][BM] bf16; lse, Di [2][BM] f32 */
    size_t smem = (size_t)(2 * tl->bwd_bn * s.D + 4 * tl->bwd_bm * s.D + tl->bwd_bn * tl->bwd_bm) * 2 +
                  (size_t)4 * tl->bwd_bm * 4;
    void *params[] = {&dy, &q, &k, &v, &lse, &Di, &dq_acc, &dk, &dv, &s.T, &s.H, &s.Hk, &s.scale};
    rt_cuda_launch(cx, name, cu_attn_cdiv(s.T, tl->bwd_bn), (unsigned)(s.B * s.Hk), 1, 32 * tl->bwd_warps, smem,
                   params);

    void *post[] = {&dq_acc, &dq, &nq, &s.scale};
    unsigned grid = cu_attn_cdiv(nq, 256);
    rt_cuda_launch(cx, "mcc_attention_bwd_post_bf16", grid < 65536 ? grid : 65536, 1, 1, 256, 0, post);
}
