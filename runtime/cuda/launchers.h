/* launchers.h — every kernel the CUDA launchers (launchers.c) call, by family: the name stem in
 * kernels_templates/ and how many float dtypes suffix it (stem_<dt>[_<dt>], each f32 or bf16;
 * 0 = the stem is the whole name). The launchers build names only from this table, and
 * tests/cuda_compile_test.c checks that every expansion is in the compiled cubin. */
#ifndef MCC_CUDA_LAUNCHERS_H
#define MCC_CUDA_LAUNCHERS_H

#define RT_CUDA_FLOAT_SUFFIXES {"f32", "bf16"} /* IR_F32, IR_BF16 */

/* K(id, stem, number of dtype suffixes) */
#define RT_CUDA_KERNELS(K)                                                                                 \
    K(FILL, "mcc_fill", 1)                                                                                 \
    K(ADD, "mcc_add", 1)                                                                                   \
    K(MUL, "mcc_mul", 1)                                                                                   \
    K(SCALE, "mcc_scale", 1)                                                                               \
    K(BIAS_ADD, "mcc_bias_add", 2)                    /* x, b */                                           \
    K(GELU, "mcc_gelu", 1)                                                                                 \
    K(GELU_GRAD, "mcc_gelu_grad", 1)                                                                       \
    K(SILU, "mcc_silu", 1)                                                                                 \
    K(SILU_GRAD, "mcc_silu_grad", 1)                                                                       \
    K(SQUARED_RELU, "mcc_squared_relu", 1)                                                                 \
    K(SQUARED_RELU_GRAD, "mcc_squared_relu_grad", 1)                                                       \
    K(SWIGLU, "mcc_swiglu", 1)                                                                             \
    K(SWIGLU_GRAD, "mcc_swiglu_grad", 1)                                                                   \
    K(SQRT, "mcc_sqrt", 1)                                                                                 \
    K(DROPOUT, "mcc_dropout", 1)                                                                           \
    K(COLSUM_PARTIAL, "mcc_colsum_partial", 1)                                                             \
    K(COLSUM_FINAL, "mcc_colsum_final", 1)                                                                 \
    K(SUM_SQUARES_PARTIAL, "mcc_sum_squares_partial", 0)                                                   \
    K(SUM_SQUARES_FINAL, "mcc_sum_squares_final", 0)                                                       \
    K(MEAN, "mcc_mean_f32", 0)                                                                             \
    K(EMBEDDING, "mcc_embedding", 1)                                                                       \
    K(EMBEDDING_COUNT, "mcc_embedding_count_i32", 0)                                                       \
    K(EMBEDDING_PREFIX, "mcc_embedding_prefix_i32", 0)                                                     \
    K(EMBEDDING_OFFSETS, "mcc_embedding_offsets_i32", 0)                                                   \
    K(EMBEDDING_SCATTER, "mcc_embedding_scatter_i32", 0)                                                   \
    K(EMBEDDING_GRAD, "mcc_embedding_grad", 1)                                                             \
    K(LAYERNORM, "mcc_layernorm", 2)                  /* x, w; norms: _w1 one element a load */           \
    K(RMSNORM, "mcc_rmsnorm", 2)                                                                           \
    K(LAYERNORM_GRAD, "mcc_layernorm_grad", 2)                                                             \
    K(RMSNORM_GRAD, "mcc_rmsnorm_grad", 2)                                                                 \
    K(ROPE, "mcc_rope", 1)                                                                                 \
    K(TAKE_LAST_DIM, "mcc_take_last_dim", 1)          /* split_last_dim's parts */                         \
    K(CONCAT_LAST_DIM, "mcc_concat_last_dim", 1)                                                           \
    K(SHIFT_SEQ, "mcc_shift_seq", 0)                                                                       \
    K(CROSS_ENTROPY_ROWS, "mcc_cross_entropy_rows", 1)                                                     \
    K(CROSS_ENTROPY_GRAD, "mcc_cross_entropy_grad", 1)                                                     \
    K(CROSS_ENTROPY_WITH_GRAD, "mcc_cross_entropy_with_grad", 1)                                           \
    K(ACCUMULATE, "mcc_accumulate", 2)                /* dst, src */                                       \
    K(COPY, "mcc_copy", 2)                            /* dst, src */                                       \
    K(CLIP_COEF, "mcc_clip_coef_f32", 0)                                                                   \
    K(ADAMW, "mcc_adamw", 3)                          /* g, m, v: f32 or bf16 */                           \
    K(CE_ROW_MAX, "mcc_ce_row_max", 1)                /* vocab-parallel: runtime/cuda/collectives.c */     \
    K(CE_ROW_STATS, "mcc_ce_row_stats", 1)                                                                 \
    K(CE_LOSS, "mcc_ce_loss_f32", 0)                                                                       \
    K(CE_GRAD_SHARDED, "mcc_ce_grad_sharded", 1)                                                           \
    K(INIT_NORMAL, "mcc_init_normal_f32", 0)          /* parameter init: runtime/cuda/cuda_device.c */     \
    K(INIT_CONST, "mcc_init_const_f32", 0)                                                                 \
    K(FP8_AMAX, "mcc_fp8_amax", 1)                    /* x; FP8: kernels_templates/fp8.cuh */              \
    K(FP8_QUANTIZE, "mcc_fp8_quantize", 1)                                                                 \
    K(FP8_TILE_QUANTIZE, "mcc_fp8_tile_quantize", 1)  /* fp8_block_quantize's 1x128 tiles */             \
    K(FP8_EXPERT_TILE_QUANTIZE, "mcc_fp8_expert_tile_quantize", 1) /* the experts' rows by counts */      \
    K(FP8_BLOCK_QUANTIZE, "mcc_fp8_block_quantize", 1)                                                     \
    K(FP8_HISTORY_AMAX, "mcc_fp8_history_amax_f32", 0)                                                     \
    K(FP8_AMAX_FOLD, "mcc_fp8_amax_fold_f32", 0)                                                           \
    K(FP8_HISTORY_UPDATE, "mcc_fp8_history_update_f32", 0)                                                 \
    K(FP8_TRANSPOSE, "mcc_fp8_transpose_u8", 0)       /* fp8_matmul's operands to K-major: matmul.c */   \
    K(MOE_ROUTE, "mcc_moe_route", 1)                  /* logits; MoE: kernels_templates/moe.cuh */        \
    K(MOE_ROUTE_GRAD, "mcc_moe_route_grad", 1)                                                             \
    K(MOE_BIAS_COUNT, "mcc_moe_bias_count", 1)        /* the kept weights' (f32 when absent) */            \
    K(MOE_BIAS_UPDATE, "mcc_moe_bias_update_f32", 0)                                                       \
    K(MOE_CAPACITY, "mcc_moe_capacity", 1)                                                                 \
    K(MOE_COUNT, "mcc_moe_count_i32", 0)                                                                   \
    K(MOE_SORT_HIST, "mcc_moe_sort_hist_i32", 0)                                                           \
    K(MOE_SORT_SCAN, "mcc_moe_sort_scan_i32", 0)                                                           \
    K(MOE_SORT_SCATTER, "mcc_moe_sort_scatter_i32", 0)                                                     \
    K(MOE_PERMUTE, "mcc_moe_permute", 1)                                                                   \
    K(MOE_UNPERMUTE, "mcc_moe_unpermute", 2)          /* the rows', the weights' (f32 beside bf16 rows) */ \
    K(MOE_UNPERMUTE_GRAD, "mcc_moe_unpermute_grad", 2)                                                     \
    K(MOE_AUX_TERMS, "mcc_moe_aux_terms", 1)                                                               \
    K(MOE_AUX_GRAD, "mcc_moe_aux_grad", 1)                                                                 \
    K(MOE_Z_TERMS, "mcc_moe_z_terms", 1)                                                                   \
    K(MOE_Z_GRAD, "mcc_moe_z_grad", 1)                                                                     \
    K(MOE_SUM, "mcc_moe_sum_f64", 0)                                                                       \
    K(MOE_RUNS_OFFSETS, "mcc_moe_runs_offsets", 0)    /* expert parallelism's run order */                 \
    K(MOE_MOVE_RUNS, "mcc_moe_move_runs", 0)

typedef enum {
#define K(id, stem, ndtypes) RT_CUK_##id,
    RT_CUDA_KERNELS(K)
#undef K
    RT_CUDA_NUM_KERNELS
} rt_cuda_kernel;

#endif
