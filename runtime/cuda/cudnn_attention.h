/* cudnn_attention.h — causal, grouped-query, bf16 flash attention (no dropout) through cuDNN's
 * backend graph API: the forward and backward plans of one shape, built once per device and
 * cached. Only in builds with cuDNN 9 (MCC_HAVE_CUDNN); runtime/cuda/attention.c decides when it
 * runs instead of mcc's kernels. Layouts are the ATTENTION op's: q, dq [B,T,H,D] bf16; k, dk
 * [B,T,Hk,D] bf16; v, dv [B,T,Hk,Dv] and o, dO [B,T,H,Dv] bf16, Dv the values' head width (D but
 * under multi-latent attention: DeepSeek-V3's D 192, Dv 128); query head h reads kv head h / (H/Hk);
 * lse f32 [B,H,T], the natural-log logsumexp of the scaled scores. All pointers 16-byte aligned. */
#ifndef MCC_CUDNN_ATTENTION_H
#define MCC_CUDNN_ATTENTION_H

#ifdef MCC_HAVE_CUDNN

#include <cuda.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct {
    int B, T, H, Hk, D, Dv; /* D: q and k's head width; Dv: v and o's */
    float scale;            /* of the scores q.k */
} cudnn_attn_shape;

typedef struct cudnn_attn cudnn_attn; /* a shape's two execution plans */

/* The plans for `s` on the current device, built at the first call (which must not be under CUDA
 * graph capture) and cached for the process, a failure too. NULL when cuDNN has no engine for
 * the shape; then *reason says which descriptor failed and cuDNN's message. *built says whether
 * this call did the building. */
cudnn_attn *cudnn_attn_get(const cudnn_attn_shape *s, const char **reason, bool *built);

/* Device workspace bytes each pass needs (the backward's holds its f32 dQ accumulator too). */
size_t cudnn_attn_forward_workspace(const cudnn_attn *a);
size_t cudnn_attn_backward_workspace(const cudnn_attn *a);

/* (q, k, v) -> o, lse. Enqueued on `stream`; capturable into a CUDA graph. */
void cudnn_attn_forward(cudnn_attn *a, CUstream stream, const void *q, const void *k, const void *v, void *o,
                        float *lse, void *workspace);

/* (q, k, v, o, dO, lse) -> dq, dk, dv. Enqueued on `stream`; capturable into a CUDA graph. */
void cudnn_attn_backward(cudnn_attn *a, CUstream stream, const void *q, const void *k, const void *v, const void *o,
                         const void *dO, const float *lse, void *dq, void *dk, void *dv, void *workspace);

#endif /* MCC_HAVE_CUDNN */
#endif
