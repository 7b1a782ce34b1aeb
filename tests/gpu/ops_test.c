/* ops_test.c — every op with a launcher in runtime/cuda/launchers.c against the CPU oracle
 * (rt_cpu_kernels), in f32 and bf16: the same values (rounded to bf16 where the GPU tensor is
 * bf16) go to both; GPU results are poisoned with 0xff bytes (NaN in f32 and bf16) first, so an
 * element a kernel never writes fails; each op then runs a second time and must give the same
 * bits (the reductions are meant to be deterministic). Shapes are off the block sizes, with
 * d = 768 and a 50257 vocabulary. A failure names the op, dtype, shape, output and error; a case
 * whose op is not in ir/ops.def, or has no launcher, fails, and so does an op without a case that
 * exempt[] does not name (check_coverage). */
#include "codegen/cuda/cuda_codegen.h"
#include "runtime/cuda/cuda_ctx.h"
#include "tests/gpu/gpu_util.h"
#include "runtime/bf16.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Relative error of norms: max |gpu - cpu| / max |cpu|. f32 differs from the (double-accumulating)
 * oracle by summation order; bf16 by one rounding of the output (2^-9) and of nothing else. */
#define F32_TOL 1e-5
#define BF16_TOL 1e-2
/* Hopper's FP8 tensor cores accumulate in fewer than fp32's bits between cuBLASLt's promotions to
 * fp32: the products are exact, their sum not quite the oracle's */
#define FP8_GEMM_TOL 1e-3
#define MAX_OPERANDS 64

/* kind: 'x' float in the dtype under test, 'P' the same but positive, 'f' always f32 ('z' too, a
 * quarter of it exactly 0: moe_capacity's kept weights; 'Z' the same in the dtype under test), 'b' always bf16,
 * 'p' f32 positive, 'i' i32 ids below `value`, 's' f32 scalar equal to `value`, 'e' / 'E' FP8 E4M3 / E5M2
 * bytes (any finite value), compared byte for byte. i32 kinds for MoE: 'k' ids below `value` distinct
 * within each row (a token's top k), 'r' a permutation of [0, n), 'c' group sizes (counts of
 * experts, or all_to_all_v's came) summing to 7/8 of `value` rows (the rest room past them). Every
 * i32 result is compared exactly. 'g' a received buffer: 'x' rows up to `value`, NaN past them (the
 * room all_to_all_v leaves, garbage no kernel may read: a row read from it shows as a NaN); 'G' the
 * same with numbers past them (a row-bounded op's operand: an elementwise kernel that walks the room
 * writes numbers where the oracle's result is NaN, which compare() fails). 'a' an f32 amax result of a
 * result in the dtype under test (an op's amax=, FP8's), within that dtype's tolerance: the GPU's is
 * the max of the values as stored (bf16: rounded), the oracle's of its f32 values. */
typedef struct {
    char kind;
    int ndim;
    int64_t dims[IR_MAX_DIMS];
    double value;
    bool out; /* an operand the op writes in place (accumulate, copy, zero, adamw): compared after */
} tensor_spec;

typedef struct {
    const char *op; /* the ops.def name */
    const char *shape;
    double attr[IR_MAX_ATTRS];
    int nargs, nres;
    tensor_spec args[MAX_OPERANDS], res[IR_MAX_RES];
} op_case;

#define TEN(k, nd, ...) {.kind = k, .ndim = nd, .dims = {__VA_ARGS__}}
#define OUT(k, nd, ...) {.kind = k, .ndim = nd, .dims = {__VA_ARGS__}, .out = true}
#define IDS(limit, nd, ...) {.kind = 'i', .ndim = nd, .dims = {__VA_ARGS__}, .value = limit}
#define SCALAR(v) {.kind = 's', .value = v}
#define F32_SCALAR {.kind = 'f'}
#define AMAX_SCALAR {.kind = 'a'}
#define FP8(k, nd, ...) {.kind = k, .ndim = nd, .dims = {__VA_ARGS__}}
#define TOPK(limit, nd, ...) {.kind = 'k', .ndim = nd, .dims = {__VA_ARGS__}, .value = limit}
#define PERM(n) {.kind = 'r', .ndim = 1, .dims = {n}}
#define COUNTS(rows, nd, ...) {.kind = 'c', .ndim = nd, .dims = {__VA_ARGS__}, .value = rows}
#define RECEIVED(rows, nd, ...) {.kind = 'g', .ndim = nd, .dims = {__VA_ARGS__}, .value = rows}
#define RECEIVED_IN_FILLED_ROOM(rows, nd, ...) {.kind = 'G', .ndim = nd, .dims = {__VA_ARGS__}, .value = rows}
/* The operands of a row-bounded op (ir_row_bound) over 56 rows received into 4096 of 72: the rows
 * as `kind` up to 56, numbers past them; ROW_BOUND_56 its bound, local counts summing to 56 */
#define ROOM_56 RECEIVED_IN_FILLED_ROOM(56, 2, 4096, 72)
#define ROW_BOUND_56 COUNTS(64, 1, 2)

static const op_case cases[] = {
    {"fill", "[3,1001]", {0.37}, 0, 1, .res = {TEN('x', 2, 3, 1001)}},
    {"add", "[7,1001]", {0}, 2, 1, {TEN('x', 2, 7, 1001), TEN('x', 2, 7, 1001)}, {TEN('x', 2, 7, 1001)}},
    {"mul", "[7,1001]", {0}, 2, 1, {TEN('x', 2, 7, 1001), TEN('x', 2, 7, 1001)}, {TEN('x', 2, 7, 1001)}},
    {"scale", "[5000]", {0.3}, 1, 1, {TEN('x', 1, 5000)}, {TEN('x', 1, 5000)}},
    /* --moe-router-dtype fp32: the router's operands to f32 and its gradients back */
    {"convert", "[7,1001] -> f32", {1}, 1, 1, {TEN('x', 2, 7, 1001)}, {TEN('f', 2, 7, 1001)}},
    {"convert", "f32[7,1001] -> [7,1001]", {0}, 1, 1, {TEN('f', 2, 7, 1001)}, {TEN('x', 2, 7, 1001)}},
    {"bias_add", "[33,777]+[777]", {0}, 2, 1, {TEN('x', 2, 33, 777), TEN('x', 1, 777)}, {TEN('x', 2, 33, 777)}},
    {"bias_add", "[33,777]+f32[777]", {0}, 2, 1, {TEN('x', 2, 33, 777), TEN('f', 1, 777)}, {TEN('x', 2, 33, 777)}},
    {"gelu", "[4,1027]", {0}, 1, 1, {TEN('x', 2, 4, 1027)}, {TEN('x', 2, 4, 1027)}},
    {"gelu_grad", "[4,1027]", {0}, 2, 1, {TEN('x', 2, 4, 1027), TEN('x', 2, 4, 1027)}, {TEN('x', 2, 4, 1027)}},
    {"silu", "[4,1027]", {0}, 1, 1, {TEN('x', 2, 4, 1027)}, {TEN('x', 2, 4, 1027)}},
    {"silu_grad", "[4,1027]", {0}, 2, 1, {TEN('x', 2, 4, 1027), TEN('x', 2, 4, 1027)}, {TEN('x', 2, 4, 1027)}},
    /* multi-token prediction's roll: r[b,t] = x[b,t+by], zeros rolled in; left (the tokens' next), right (its
       gradient) and a window narrower than x (count < T: context parallelism's edges) */
    {"shift_seq", "[2,67,96] by 1", {1, 67}, 1, 1, {TEN('x', 3, 2, 67, 96)}, {TEN('x', 3, 2, 67, 96)}},
    {"shift_seq", "[2,67,96] by -3", {-3, 67}, 1, 1, {TEN('x', 3, 2, 67, 96)}, {TEN('x', 3, 2, 67, 96)}},
    {"shift_seq", "[3,40,33] by 2 count 5", {2, 5}, 1, 1, {TEN('x', 3, 3, 40, 33)}, {TEN('x', 3, 3, 5, 33)}},
    {"squared_relu", "[4,1027]", {0}, 1, 1, {TEN('x', 2, 4, 1027)}, {TEN('x', 2, 4, 1027)}},
    {"squared_relu_grad", "[4,1027]", {0}, 2, 1, {TEN('x', 2, 4, 1027), TEN('x', 2, 4, 1027)}, {TEN('x', 2, 4, 1027)}},
    {"swiglu", "[4,1027]", {0}, 2, 1, {TEN('x', 2, 4, 1027), TEN('x', 2, 4, 1027)}, {TEN('x', 2, 4, 1027)}},
    {"swiglu_grad", "[4,1027]", {0}, 3, 2, {TEN('x', 2, 4, 1027), TEN('x', 2, 4, 1027), TEN('x', 2, 4, 1027)},
     {TEN('x', 2, 4, 1027), TEN('x', 2, 4, 1027)}},
    /* FP8's amax made by the kernel that stores the value (amax=: the fusion pass's): the max |r| as stored
       (bf16: rounded), beside r, one atomic a block */
    {"swiglu", "[4,1027] amax", {1}, 2, 2, {TEN('x', 2, 4, 1027), TEN('x', 2, 4, 1027)}, {TEN('x', 2, 4, 1027), AMAX_SCALAR}},
    {"swiglu", "[300,768] amax (16-byte loads, many blocks)", {1}, 2, 2, {TEN('x', 2, 300, 768), TEN('x', 2, 300, 768)},
     {TEN('x', 2, 300, 768), AMAX_SCALAR}},
    {"swiglu_grad", "[300,768] amaxes of dgate and dup", {2}, 3, 4,
     {TEN('x', 2, 300, 768), TEN('x', 2, 300, 768), TEN('x', 2, 300, 768)},
     {TEN('x', 2, 300, 768), TEN('x', 2, 300, 768), AMAX_SCALAR, AMAX_SCALAR}},
    {"swiglu_grad", "[4,1027] amax of dgate", {1}, 3, 3, {TEN('x', 2, 4, 1027), TEN('x', 2, 4, 1027), TEN('x', 2, 4, 1027)},
     {TEN('x', 2, 4, 1027), TEN('x', 2, 4, 1027), AMAX_SCALAR}},
    {"swiglu_grad_product", "[4,1027] amaxes of dgate and dup", {2}, 3, 5,
     {TEN('x', 2, 4, 1027), TEN('x', 2, 4, 1027), TEN('x', 2, 4, 1027)},
     {TEN('x', 2, 4, 1027), TEN('x', 2, 4, 1027), TEN('x', 2, 4, 1027), AMAX_SCALAR, AMAX_SCALAR}},
    {"swiglu_grad_product", "[4,1027]", {0}, 3, 3, {TEN('x', 2, 4, 1027), TEN('x', 2, 4, 1027), TEN('x', 2, 4, 1027)},
     {TEN('x', 2, 4, 1027), TEN('x', 2, 4, 1027), TEN('x', 2, 4, 1027)}},
    {"sqrt", "[999]", {0}, 1, 1, {TEN('P', 1, 999)}, {TEN('x', 1, 999)}},
    {"reshape", "[6,10]->[60]", {0}, 1, 1, {TEN('x', 2, 6, 10)}, {TEN('x', 1, 60)}},
    {"rows", "[7,1001] rows 2..4", {2, 3}, 1, 1, {TEN('x', 2, 7, 1001)}, {TEN('x', 2, 3, 1001)}},
    {"concat_rows", "[3,1001] ++ [4,1001]", {0}, 2, 1, {TEN('x', 2, 3, 1001), TEN('x', 2, 4, 1001)}, {TEN('x', 2, 7, 1001)}},
    /* multi-latent attention's: DeepSeek-V3's heads (128 channels without position, 64 with rope) */
    {"split_last_dim", "[2,37,5,192] size 128", {128, 0}, 1, 2, {TEN('x', 4, 2, 37, 5, 192)},
     {TEN('x', 4, 2, 37, 5, 128), TEN('x', 4, 2, 37, 5, 64)}},
    {"split_last_dim", "[2,37,5,192] size 128, the rest summed over the heads", {128, 2}, 1, 2,
     {TEN('x', 4, 2, 37, 5, 192)}, {TEN('x', 4, 2, 37, 5, 128), TEN('x', 4, 2, 37, 1, 64)}},
    {"split_last_dim", "[3,37,576] size 512", {512, 0}, 1, 2, {TEN('x', 3, 3, 37, 576)},
     {TEN('x', 3, 3, 37, 512), TEN('x', 3, 3, 37, 64)}},
    {"concat_last_dim", "[2,37,5,128] ++ [2,37,1,64] broadcast", {0}, 2, 1,
     {TEN('x', 4, 2, 37, 5, 128), TEN('x', 4, 2, 37, 1, 64)}, {TEN('x', 4, 2, 37, 5, 192)}},
    {"concat_last_dim", "[2,37,5,13] ++ [2,37,5,3]", {0}, 2, 1, {TEN('x', 4, 2, 37, 5, 13), TEN('x', 4, 2, 37, 5, 3)},
     {TEN('x', 4, 2, 37, 5, 16)}},
    {"sum_rows", "[1030,300]", {0}, 1, 1, {TEN('x', 2, 1030, 300)}, {TEN('x', 1, 300)}},
    {"sum_rows", "[20000,33]", {0}, 1, 1, {TEN('x', 2, 20000, 33)}, {TEN('x', 1, 33)}},
    {"sum_rows", "[3000,768] (16-byte loads)", {0}, 1, 1, {TEN('x', 2, 3000, 768)}, {TEN('x', 1, 768)}},
    {"matmul", "[4,67,768] x [768,200]", {0, 0}, 2, 1, {TEN('x', 3, 4, 67, 768), TEN('x', 2, 768, 200)},
     {TEN('x', 3, 4, 67, 200)}},
    {"matmul_bias", "[4,67,768] x [200,768]^T + [200]", {0, 1}, 3, 1,
     {TEN('x', 3, 4, 67, 768), TEN('x', 2, 200, 768), TEN('x', 1, 200)}, {TEN('x', 3, 4, 67, 200)}},
    {"matmul_add", "[4,67,768] x [768,200] + c[4,67,200]", {0, 0}, 3, 1,
     {TEN('x', 3, 4, 67, 768), TEN('x', 2, 768, 200), TEN('x', 3, 4, 67, 200)}, {TEN('x', 3, 4, 67, 200)}},
    {"matmul_bias_add", "[4,67,768] x [200,768]^T + [200] + c[4,67,200]", {0, 1}, 4, 1,
     {TEN('x', 3, 4, 67, 768), TEN('x', 2, 200, 768), TEN('x', 1, 200), TEN('x', 3, 4, 67, 200)},
     {TEN('x', 3, 4, 67, 200)}},
    {"matmul_bias_gelu", "[4,67,768] x [200,768]^T + [200] (GELU_AUX_BIAS)", {0, 1}, 3, 2,
     {TEN('x', 3, 4, 67, 768), TEN('x', 2, 200, 768), TEN('x', 1, 200)}, {TEN('x', 3, 4, 67, 200), TEN('x', 3, 4, 67, 200)}},
    {"matmul_dgelu_bgrad", "[4,67,768] x [768,200], x[4,67,200] (DGELU epilogue + sum_rows)", {0, 0}, 3, 2,
     {TEN('x', 3, 4, 67, 768), TEN('x', 2, 768, 200), TEN('x', 3, 4, 67, 200)}, {TEN('x', 3, 4, 67, 200), TEN('x', 1, 200)}},
    {"matmul_accumulate", "f32[768,200] += [268,768]^T [268,200]", {1, 0}, 3, 0,
     .args = {OUT('f', 2, 768, 200), TEN('x', 2, 268, 768), TEN('x', 2, 268, 200)}},
    {"matmul_accumulate", "f32[768,200] := [268,768]^T [268,200] (assign)", {1, 0, 1}, 3, 0,
     .args = {OUT('f', 2, 768, 200), TEN('x', 2, 268, 768), TEN('x', 2, 268, 200)}},
    {"matmul_accumulate", "[768,200] += [268,768]^T [268,200] (a gradient in the dtype: --grad-reduce-in-bf16)",
     {1, 0}, 3, 0, .args = {OUT('x', 2, 768, 200), TEN('x', 2, 268, 768), TEN('x', 2, 268, 200)}},
    {"embedding", "V=1000 d=768 ids[4,67]", {0}, 2, 1, {TEN('x', 2, 1000, 768), IDS(1000, 2, 4, 67)},
     {TEN('x', 3, 4, 67, 768)}},
    {"embedding_grad", "dy[4,67,768] ids<50 V=1000", {1000}, 2, 1, {TEN('x', 3, 4, 67, 768), IDS(50, 2, 4, 67)},
     {TEN('x', 2, 1000, 768)}},
    {"embedding_grad", "dy[2,300,33] ids<50257 V=50257", {50257}, 2, 1, {TEN('x', 3, 2, 300, 33), IDS(50257, 2, 2, 300)},
     {TEN('x', 2, 50257, 33)}},
    {"pos_add", "x[3,67,768] table[128,768]", {0}, 2, 1, {TEN('x', 3, 3, 67, 768), TEN('x', 2, 128, 768)},
     {TEN('x', 3, 3, 67, 768)}},
    {"pos_add_grad", "dy[3,67,768] P=128", {128}, 1, 1, {TEN('x', 3, 3, 67, 768)}, {TEN('x', 2, 128, 768)}},
    /* context parallelism: rank 1 of 4's chunks at positions 16.. and 80.., of 2's side by side (32..);
       a sequence-parallel slice of rank 1 of 4's 48 tokens: tokens 8..32, positions 32..47 and 160..167 */
    {"pos_add", "x[3,32,40] table[128,40] cp 4 rank 1", {0, 0, 4, 1}, 2, 1, {TEN('x', 3, 3, 32, 40), TEN('x', 2, 128, 40)},
     {TEN('x', 3, 3, 32, 40)}},
    {"pos_add", "x[3,24,40] table[192,40] tokens 8.. of 48, cp 4 rank 1", {8, 48, 4, 1}, 2, 1,
     {TEN('x', 3, 3, 24, 40), TEN('x', 2, 192, 40)}, {TEN('x', 3, 3, 24, 40)}},
    {"pos_add_grad", "dy[3,32,40] P=128 cp 4 rank 1", {128, 0, 0, 4, 1}, 1, 1, {TEN('x', 3, 3, 32, 40)},
     {TEN('x', 2, 128, 40)}},
    {"pos_add_grad", "dy[3,32,40] P=128 cp 2 rank 1", {128, 0, 0, 2, 1}, 1, 1, {TEN('x', 3, 3, 32, 40)},
     {TEN('x', 2, 128, 40)}},
    {"pos_add_grad", "dy[3,24,40] P=192 tokens 8.. of 48, cp 4 rank 1", {192, 8, 48, 4, 1}, 1, 1,
     {TEN('x', 3, 3, 24, 40)}, {TEN('x', 2, 192, 40)}},
    {"layernorm", "[67,768]", {1e-5}, 3, 1, {TEN('x', 2, 67, 768), TEN('x', 1, 768), TEN('x', 1, 768)},
     {TEN('x', 2, 67, 768)}},
    {"layernorm", "[5,4100] f32 w,b", {1e-5}, 3, 1, {TEN('x', 2, 5, 4100), TEN('f', 1, 4100), TEN('f', 1, 4100)},
     {TEN('x', 2, 5, 4100)}},
    {"layernorm_grad", "[600,768]", {1e-5}, 3, 3, {TEN('x', 2, 600, 768), TEN('x', 2, 600, 768), TEN('x', 1, 768)},
     {TEN('x', 2, 600, 768), TEN('x', 1, 768), TEN('x', 1, 768)}},
    {"layernorm_grad", "[37,4100] f32 w", {1e-5}, 3, 3, {TEN('x', 2, 37, 4100), TEN('x', 2, 37, 4100), TEN('f', 1, 4100)},
     {TEN('x', 2, 37, 4100), TEN('f', 1, 4100), TEN('f', 1, 4100)}},
    {"layernorm", "[67,768] one_p", {1e-5, 1}, 3, 1, {TEN('x', 2, 67, 768), TEN('x', 1, 768), TEN('x', 1, 768)},
     {TEN('x', 2, 67, 768)}},
    {"layernorm_grad", "[600,768] one_p", {1e-5, 1}, 3, 3,
     {TEN('x', 2, 600, 768), TEN('x', 2, 600, 768), TEN('x', 1, 768)},
     {TEN('x', 2, 600, 768), TEN('x', 1, 768), TEN('x', 1, 768)}},
    {"layernorm_grad_add", "[600,768] + dr", {1e-5}, 4, 3,
     {TEN('x', 2, 600, 768), TEN('x', 2, 600, 768), TEN('x', 1, 768), TEN('x', 2, 600, 768)},
     {TEN('x', 2, 600, 768), TEN('x', 1, 768), TEN('x', 1, 768)}},
    {"rmsnorm", "[67,768]", {1e-6}, 2, 1, {TEN('x', 2, 67, 768), TEN('x', 1, 768)}, {TEN('x', 2, 67, 768)}},
    {"rmsnorm", "[67,768] one_p", {1e-6, 1}, 2, 1, {TEN('x', 2, 67, 768), TEN('x', 1, 768)}, {TEN('x', 2, 67, 768)}},
    {"rmsnorm_grad", "[600,768]", {1e-6}, 3, 2, {TEN('x', 2, 600, 768), TEN('x', 2, 600, 768), TEN('x', 1, 768)},
     {TEN('x', 2, 600, 768), TEN('x', 1, 768)}},
    {"rmsnorm_grad_add", "[600,768] + dr", {1e-6}, 4, 2,
     {TEN('x', 2, 600, 768), TEN('x', 2, 600, 768), TEN('x', 1, 768), TEN('x', 2, 600, 768)},
     {TEN('x', 2, 600, 768), TEN('x', 1, 768)}},
    /* with the amax of y (dx) made as it is stored (amax=1: the fusion pass's) */
    {"rmsnorm", "[600,768] amax", {1e-6, 0, 1}, 2, 2, {TEN('x', 2, 600, 768), TEN('x', 1, 768)},
     {TEN('x', 2, 600, 768), AMAX_SCALAR}},
    {"rmsnorm", "[5,4100] amax (one element a load)", {1e-6, 0, 1}, 2, 2, {TEN('x', 2, 5, 4100), TEN('x', 1, 4100)},
     {TEN('x', 2, 5, 4100), AMAX_SCALAR}},
    {"layernorm", "[67,768] amax", {1e-5, 0, 1}, 3, 2, {TEN('x', 2, 67, 768), TEN('x', 1, 768), TEN('x', 1, 768)},
     {TEN('x', 2, 67, 768), AMAX_SCALAR}},
    {"rmsnorm_grad", "[600,768] amax", {1e-6, 0, 1}, 3, 3, {TEN('x', 2, 600, 768), TEN('x', 2, 600, 768), TEN('x', 1, 768)},
     {TEN('x', 2, 600, 768), TEN('x', 1, 768), AMAX_SCALAR}},
    {"rmsnorm_grad_add", "[600,768] + dr, amax", {1e-6, 0, 1}, 4, 3,
     {TEN('x', 2, 600, 768), TEN('x', 2, 600, 768), TEN('x', 1, 768), TEN('x', 2, 600, 768)},
     {TEN('x', 2, 600, 768), TEN('x', 1, 768), AMAX_SCALAR}},
    {"layernorm_grad_add", "[37,4100] + dr, amax (one element a load)", {1e-5, 0, 1}, 4, 4,
     {TEN('x', 2, 37, 4100), TEN('x', 2, 37, 4100), TEN('x', 1, 4100), TEN('x', 2, 37, 4100)},
     {TEN('x', 2, 37, 4100), TEN('x', 1, 4100), TEN('x', 1, 4100), AMAX_SCALAR}},
    {"rope", "[2,67,3,64]", {10000, 0}, 1, 1, {TEN('x', 4, 2, 67, 3, 64)}, {TEN('x', 4, 2, 67, 3, 64)}},
    {"rope", "[1,2048,2,128] inverse", {500000, 1}, 1, 1, {TEN('x', 4, 1, 2048, 2, 128)}, {TEN('x', 4, 1, 2048, 2, 128)}},
    /* LLaMA 3.1's scaling (factor 8: ir_rope_freq's three bands), forward and inverse, under cp */
    {"rope", "[1,8192,1,128] llama3 scaling 8", {500000, 0, 0, 0, 8}, 1, 1, {TEN('x', 4, 1, 8192, 1, 128)},
     {TEN('x', 4, 1, 8192, 1, 128)}},
    {"rope", "[2,64,2,64] llama3 scaling 32 inverse cp 2 rank 1", {500000, 1, 2, 1, 32}, 1, 1,
     {TEN('x', 4, 2, 64, 2, 64)}, {TEN('x', 4, 2, 64, 2, 64)}},
    /* context parallelism: rank 1 of 4's balanced chunks (positions 16.. and 80..: ir_cp_position) */
    {"rope", "[2,32,3,64] cp 4 rank 1", {10000, 0, 4, 1}, 1, 1, {TEN('x', 4, 2, 32, 3, 64)}, {TEN('x', 4, 2, 32, 3, 64)}},
    {"rope", "[2,67,3,64] rotary_dim 32", {10000, 0, 0, 0, 0, 32}, 1, 1, {TEN('x', 4, 2, 67, 3, 64)},
     {TEN('x', 4, 2, 67, 3, 64)}},
    {"rope", "[2,67,3,36] rotary_dim 18 inverse (one element a load)", {10000, 1, 0, 0, 0, 18}, 1, 1,
     {TEN('x', 4, 2, 67, 3, 36)}, {TEN('x', 4, 2, 67, 3, 36)}},
    /* YaRN's (DeepSeek-V3's: factor 40, context 4096, beta 32 / 1; Megatron's default mscale_all_dim 0, so cos
       and sin scaled by 1.37), forward, and inverse on a partial rotation under cp */
    {"rope", "[1,4096,2,64] yarn 40", {10000, 0, 0, 0, 40, 0, 4096, 32, 1, 1, 0}, 1, 1, {TEN('x', 4, 1, 4096, 2, 64)},
     {TEN('x', 4, 1, 4096, 2, 64)}},
    {"rope", "[2,64,3,96] yarn 4 rotary_dim 64 inverse cp 2 rank 1", {10000, 1, 2, 1, 4, 64, 64, 32, 1, 0.707, 0.5}, 1,
     1, {TEN('x', 4, 2, 64, 3, 96)}, {TEN('x', 4, 2, 64, 3, 96)}},
    {"cross_entropy", "[3,37,50257]", {0}, 2, 1, {TEN('x', 3, 3, 37, 50257), IDS(50257, 2, 3, 37)}, {F32_SCALAR}},
    {"cross_entropy_grad", "[3,37,50257]", {0}, 3, 1, {SCALAR(1.7), TEN('x', 3, 3, 37, 50257), IDS(50257, 2, 3, 37)},
     {TEN('x', 3, 3, 37, 50257)}},
    {"cross_entropy_with_grad", "[3,37,50257]", {0}, 3, 2, {TEN('x', 3, 3, 37, 50257), IDS(50257, 2, 3, 37), SCALAR(1.7)},
     {TEN('x', 3, 3, 37, 50257), F32_SCALAR}},
    {"ce_row_max", "[111,1600] (16-byte loads)", {0}, 1, 1, {TEN('x', 2, 111, 1600)}, {TEN('f', 1, 111)}},
    {"ce_row_max", "[37,129]", {0}, 1, 1, {TEN('x', 2, 37, 129)}, {TEN('f', 1, 37)}},
    {"ce_row_stats", "[111,1600] vocab_start 800 (16-byte loads)", {800}, 3, 1,
     {TEN('x', 2, 111, 1600), IDS(3200, 1, 111), TEN('f', 1, 111)}, {TEN('f', 2, 111, 2)}},
    {"ce_row_stats", "[37,129] vocab_start 129", {129}, 3, 1, {TEN('x', 2, 37, 129), IDS(258, 1, 37), TEN('f', 1, 37)},
     {TEN('f', 2, 37, 2)}},
    {"ce_loss", "[111,2] stats", {0}, 2, 1, {TEN('p', 2, 111, 2), TEN('f', 1, 111)}, {F32_SCALAR}},
    {"ce_grad_sharded", "[111,1600] vocab_start 800 (16-byte loads)", {800}, 5, 1,
     {SCALAR(1.7), TEN('x', 2, 111, 1600), IDS(3200, 1, 111), TEN('f', 1, 111), TEN('p', 2, 111, 2)},
     {TEN('x', 2, 111, 1600)}},
    {"ce_grad_sharded", "[37,129] vocab_start 129", {129}, 5, 1,
     {SCALAR(1.7), TEN('x', 2, 37, 129), IDS(258, 1, 37), TEN('f', 1, 37), TEN('p', 2, 37, 2)}, {TEN('x', 2, 37, 129)}},
    {"accumulate", "f32[1001,7] += [1001,7]", {0}, 2, 0, .args = {OUT('f', 2, 1001, 7), TEN('x', 2, 1001, 7)}},
    {"accumulate", "[1001,7] += [1001,7] (a gradient in the dtype)", {0}, 2, 0,
     .args = {OUT('x', 2, 1001, 7), TEN('x', 2, 1001, 7)}},
    {"copy", "[1001,7] := f32[1001,7]", {0}, 2, 0, .args = {OUT('x', 2, 1001, 7), TEN('f', 2, 1001, 7)}},
    {"copy", "f32[1001,7] := [1001,7]", {0}, 2, 0, .args = {OUT('f', 2, 1001, 7), TEN('x', 2, 1001, 7)}},
    {"zero", "[3001]", {0}, 1, 0, .args = {OUT('x', 1, 3001)}},
    {"local_shard", "[3001] over tp of 1 rank", {IR_AXIS_TP}, 1, 1, {TEN('x', 1, 3001)}, {TEN('x', 1, 3001)}},
    {"local_slice_seq", "[3,37,11] over tp of 1 rank", {IR_AXIS_TP, 0, 0}, 1, 1, {TEN('x', 3, 3, 37, 11)}, {TEN('x', 3, 3, 37, 11)}},
    {"clip_coef", "sumsq=900 max_norm=1", {1.0}, 1, 1, {SCALAR(900)}, {F32_SCALAR}},
    {"clip_coef", "sumsq=0.25 max_norm=1", {1.0}, 1, 1, {SCALAR(0.25)}, {F32_SCALAR}},
    {"clip_coef", "max_norm=0", {0.0}, 1, 1, {SCALAR(900)}, {F32_SCALAR}},
    {"adamw", "[3001] step 3", {0.9, 0.95, 1e-8, 0.1}, 7, 0,
     .args = {OUT('f', 1, 3001), TEN('f', 1, 3001), OUT('f', 1, 3001), OUT('p', 1, 3001), SCALAR(1e-3), SCALAR(3), SCALAR(0.7)}},
    {"adamw", "[3001] step 3, the gradient in the dtype (--grad-reduce-in-bf16)", {0.9, 0.95, 1e-8, 0.1}, 7, 0,
     .args = {OUT('f', 1, 3001), TEN('x', 1, 3001), OUT('f', 1, 3001), OUT('p', 1, 3001), SCALAR(1e-3), SCALAR(3), SCALAR(0.7)}},
    {"adamw", "[3001] step 3, refreshing a bf16 copy", {0.9, 0.95, 1e-8, 0.1}, 8, 0,
     .args = {OUT('f', 1, 3001), TEN('f', 1, 3001), OUT('f', 1, 3001), OUT('p', 1, 3001), SCALAR(1e-3), SCALAR(3), SCALAR(0.7),
              OUT('b', 1, 3001)}},
    /* FP8: amax 1.9 over values in [-2, 2) saturates the largest; the quantize must match the CPU's
     * bytes exactly (runtime/fp8.c's rounding), scale_inv its float. */
    {"fp8_amax", "[7,1001]", {0}, 1, 1, {TEN('x', 2, 7, 1001)}, {F32_SCALAR}},
    {"fp8_amax", "[3000,768] (many blocks)", {0}, 1, 1, {TEN('x', 2, 3000, 768)}, {F32_SCALAR}},
    {"fp8_quantize", "[7,1001] e4m3 amax 1.9", {IR_FP8_E4M3, 0}, 2, 2, {TEN('x', 2, 7, 1001), SCALAR(1.9)},
     {FP8('e', 2, 7, 1001), F32_SCALAR}},
    {"fp8_quantize", "[3000,768] e5m2 amax 1.9 margin 1 (8-byte stores)", {IR_FP8_E5M2, 1}, 2, 2,
     {TEN('x', 2, 3000, 768), SCALAR(1.9)}, {FP8('E', 2, 3000, 768), F32_SCALAR}},
    {"fp8_quantize", "[999] e4m3 amax 0 (scale 1)", {IR_FP8_E4M3, 0}, 2, 2, {TEN('x', 1, 999), SCALAR(0)},
     {FP8('e', 1, 999), F32_SCALAR}},
    {"fp8_quantize", "[999] e5m2 amax 1e-3 (scale 57344000: saturates)", {IR_FP8_E5M2, 0}, 2, 2,
     {TEN('x', 1, 999), SCALAR(1e-3)}, {FP8('E', 1, 999), F32_SCALAR}},
    /* blockwise: the forward's 1x128 tiles, the wgrad's along the tokens (x^T in 1x128 tiles), a
     * weight's 128x128 blocks (scales padded to 4 a row) as they are and transposed (the dgrad's);
     * bytes and scale_invs, in cuBLASLt's layouts, as the CPU's */
    {"fp8_block_quantize", "[4,64,768] 1x128", {1, 128, 0}, 1, 2, {TEN('x', 3, 4, 64, 768)},
     {FP8('e', 3, 4, 64, 768), TEN('f', 2, 6, 256)}},
    {"fp8_block_quantize", "[3,5,256] 1x128 (a row of scales padded from 15 to 16)", {1, 128, 0}, 1, 2,
     {TEN('x', 3, 3, 5, 256)}, {FP8('e', 3, 3, 5, 256), TEN('f', 2, 2, 16)}},
    {"fp8_block_quantize", "[256,768] 1x128 of x^T", {1, 128, 1}, 1, 2, {TEN('x', 2, 256, 768)},
     {FP8('e', 2, 768, 256), TEN('f', 2, 2, 768)}},
    {"fp8_block_quantize", "[256,768] 128x128", {128, 128, 0}, 1, 2, {TEN('x', 2, 256, 768)},
     {FP8('e', 2, 256, 768), TEN('f', 2, 2, 8)}},
    {"fp8_block_quantize", "[256,768] 128x128 of x^T", {128, 128, 1}, 1, 2, {TEN('x', 2, 256, 768)},
     {FP8('e', 2, 768, 256), TEN('f', 2, 6, 4)}},
    {"fp8_history_amax", "h[17] max", {1}, 1, 1, {TEN('p', 1, 17)}, {F32_SCALAR}},
    {"fp8_history_amax", "h[17] most_recent", {0}, 1, 1, {TEN('p', 1, 17)}, {F32_SCALAR}},
    {"fp8_amax_fold", "h[17] amax 5", {0}, 2, 0, .args = {OUT('p', 1, 17), SCALAR(5)}},
    {"fp8_amax_fold", "h[17] amax 0.01", {0}, 2, 0, .args = {OUT('p', 1, 17), SCALAR(0.01)}},
    {"fp8_history_update", "h[17] roll", {1}, 2, 0, .args = {OUT('p', 1, 17), TEN('p', 1, 17)}},
    {"fp8_history_update", "h[17] zero h[0] only", {0}, 2, 0, .args = {OUT('p', 1, 17), TEN('p', 1, 17)}},
    /* the three GEMMs of a hybrid linear layer (T = 4x64 tokens, d = 768, n = 208): forward TN as is, the
     * dgrad's weight and the wgrad's both operands transposed first (matmul.c) */
    {"fp8_matmul", "fwd e4m3[4,64,768] x e4m3[208,768]^T", {0, 1}, 4, 1,
     {FP8('e', 3, 4, 64, 768), SCALAR(0.01), FP8('e', 2, 208, 768), SCALAR(0.003)}, {TEN('x', 3, 4, 64, 208)}},
    {"fp8_matmul", "dgrad e5m2[256,208] x e4m3[208,768]", {0, 0}, 4, 1,
     {FP8('E', 2, 256, 208), SCALAR(1e-4), FP8('e', 2, 208, 768), SCALAR(0.003)}, {TEN('x', 2, 256, 768)}},
    {"fp8_matmul", "wgrad e5m2[256,208]^T x e4m3[256,768]", {1, 0}, 4, 1,
     {FP8('E', 2, 256, 208), SCALAR(1e-4), FP8('e', 2, 256, 768), SCALAR(0.01)}, {TEN('x', 2, 208, 768)}},
    /* blockwise FP8's three GEMMs of a linear layer (T = 4x64 tokens, d = 768, n = 384: several blocks
     * along M, N and K), every operand K-major (ta=0, tb=1) with block scales of any value (the
     * quantize's are powers of 2; cuBLASLt's modes take any) in cuBLASLt's layouts: the forward's x
     * (1x128 tiles, VEC128_32F) by w (128x128 blocks, BLK128x128_32F, the rows of scales padded to 4),
     * the dgrad's dy by w^T, the wgrad's dy^T by x^T (1D x 1D) */
    {"fp8_matmul", "blockwise fwd e4m3[4,64,768] 1x128 x e4m3[384,768]^T 128x128", {0, 1}, 4, 1,
     {FP8('e', 3, 4, 64, 768), TEN('p', 2, 6, 256), FP8('e', 2, 384, 768), TEN('p', 2, 3, 8)}, {TEN('x', 3, 4, 64, 384)}},
    {"fp8_matmul", "blockwise dgrad e4m3[256,384] 1x128 x e4m3[768,384]^T 128x128", {0, 1}, 4, 1,
     {FP8('e', 2, 256, 384), TEN('p', 2, 3, 256), FP8('e', 2, 768, 384), TEN('p', 2, 6, 4)}, {TEN('x', 2, 256, 768)}},
    {"fp8_matmul", "blockwise wgrad e4m3[384,256] 1x128 x e4m3[768,256]^T 1x128", {0, 1}, 4, 1,
     {FP8('e', 2, 384, 256), TEN('p', 2, 2, 384), FP8('e', 2, 768, 256), TEN('p', 2, 2, 768)}, {TEN('x', 2, 384, 768)}},
    {"fp8_matmul_accumulate", "blockwise f32[384,768] += wgrad e4m3[384,256] x e4m3[768,256]^T", {0, 1, 0}, 5, 0,
     .args = {OUT('f', 2, 384, 768), FP8('e', 2, 384, 256), TEN('p', 2, 2, 384), FP8('e', 2, 768, 256),
              TEN('p', 2, 2, 768)}},
    {"fp8_matmul_add", "blockwise fwd e4m3[4,64,768] x e4m3[384,768]^T + c[4,64,384]", {0, 1}, 5, 1,
     {FP8('e', 3, 4, 64, 768), TEN('p', 2, 6, 256), FP8('e', 2, 384, 768), TEN('p', 2, 3, 8), TEN('x', 3, 4, 64, 384)},
     {TEN('x', 3, 4, 64, 384)}},
    /* the fusion pass's: the wgrad into an fp32 accumulator (added, and written: assign), the forward
     * with a residual the GEMM adds */
    {"fp8_matmul_accumulate", "f32[208,768] += wgrad e5m2[256,208]^T x e4m3[256,768]", {1, 0, 0}, 5, 0,
     .args = {OUT('f', 2, 208, 768), FP8('E', 2, 256, 208), SCALAR(1e-4), FP8('e', 2, 256, 768), SCALAR(0.01)}},
    {"fp8_matmul_accumulate", "f32[208,768] := wgrad (assign)", {1, 0, 1}, 5, 0,
     .args = {OUT('f', 2, 208, 768), FP8('E', 2, 256, 208), SCALAR(1e-4), FP8('e', 2, 256, 768), SCALAR(0.01)}},
    {"fp8_matmul_add", "fwd e4m3[4,64,768] x e4m3[208,768]^T + c[4,64,208]", {0, 1}, 5, 1,
     {FP8('e', 3, 4, 64, 768), SCALAR(0.01), FP8('e', 2, 208, 768), SCALAR(0.003), TEN('x', 3, 4, 64, 208)},
     {TEN('x', 3, 4, 64, 208)}},
    /* FP8 experts (a scale per expert): 8 experts over 300 rows, 262 of them counted (the rest NaN,
     * never read: q zero there), a weight [8,200,256]; the forward, the dgrad (an E5M2 gradient by
     * the weight made K-major expert by expert) and the wgrad (each expert's rows padded to 16); an
     * expert weight's histories, a row an expert */
    {"fp8_grouped_amax", "x[300,256] by 8 experts' counts", {0}, 2, 1, {RECEIVED(262, 2, 300, 256), COUNTS(300, 1, 8)},
     {TEN('f', 1, 8)}},
    {"fp8_grouped_amax", "w[8,200,256]", {0}, 1, 1, {TEN('x', 3, 8, 200, 256)}, {TEN('f', 1, 8)}},
    {"fp8_grouped_quantize", "x[300,256] e4m3 by 8 experts' counts", {IR_FP8_E4M3, 0}, 3, 2,
     {RECEIVED(262, 2, 300, 256), TEN('p', 1, 8), COUNTS(300, 1, 8)}, {FP8('e', 2, 300, 256), TEN('f', 1, 8)}},
    {"fp8_grouped_quantize", "dy[300,208] e5m2 margin 1", {IR_FP8_E5M2, 1}, 3, 2,
     {RECEIVED(262, 2, 300, 208), TEN('p', 1, 8), COUNTS(300, 1, 8)}, {FP8('E', 2, 300, 208), TEN('f', 1, 8)}},
    {"fp8_grouped_quantize", "w[8,200,256] e4m3", {IR_FP8_E4M3, 0}, 2, 2, {TEN('x', 3, 8, 200, 256), TEN('p', 1, 8)},
     {FP8('e', 3, 8, 200, 256), TEN('f', 1, 8)}},
    {"fp8_grouped_matmul", "fwd e4m3 x[300,256] w[8,200,256]^T", {1, 0, 0}, 5, 1,
     {FP8('e', 2, 300, 256), TEN('p', 1, 8), FP8('e', 3, 8, 200, 256), TEN('p', 1, 8), COUNTS(300, 1, 8)},
     {TEN('x', 2, 300, 200)}},
    {"fp8_grouped_matmul", "dgrad e5m2 dy[300,208] w[8,208,256]", {0, 0, 0}, 5, 1,
     {FP8('E', 2, 300, 208), TEN('p', 1, 8), FP8('e', 3, 8, 208, 256), TEN('p', 1, 8), COUNTS(300, 1, 8)},
     {TEN('x', 2, 300, 256)}},
    {"fp8_grouped_wgrad", "e5m2 dy[300,208]^T e4m3 x[300,256] over 8 experts", {0}, 5, 1,
     {FP8('E', 2, 300, 208), TEN('p', 1, 8), FP8('e', 2, 300, 256), TEN('p', 1, 8), COUNTS(300, 1, 8)},
     {TEN('f', 3, 8, 208, 256)}},
    {"fp8_grouped_wgrad_accumulate", "f32[8,208,256] += e5m2 dy[300,208]^T e4m3 x[300,256]", {0}, 6, 0,
     .args = {OUT('f', 3, 8, 208, 256), FP8('E', 2, 300, 208), TEN('p', 1, 8), FP8('e', 2, 300, 256), TEN('p', 1, 8),
              COUNTS(300, 1, 8)}},
    {"fp8_grouped_wgrad_accumulate", "f32[8,208,256] := (assign)", {1}, 6, 0,
     .args = {OUT('f', 3, 8, 208, 256), FP8('E', 2, 300, 208), TEN('p', 1, 8), FP8('e', 2, 300, 256), TEN('p', 1, 8),
              COUNTS(300, 1, 8)}},
    /* blockwise FP8 experts: 8 experts over 300 rows (262 counted, NaN past them, never read), each
     * weight [8,128,256] in 128x128 blocks transposed alone (experts=1: the dgrad's), the rows
     * transposed with the counts (the wgrad's: each expert's tiles from its first row, in a span of
     * columns of its own from a multiple of 128, 1408 = 300 + 127 x 8 rounded up); the forward (x's
     * 1x128 tiles by w's blocks: each expert's tile scales gathered from beside the others'), the
     * dgrad (dy by the transposed weights) and the wgrad (each expert's span, scales VEC128 x VEC128,
     * read in place: leading dimension 1408), on block scales of any value, as the CPU's */
    {"fp8_block_quantize", "w[8,128,256] 128x128 each w[e]^T (experts)", {128, 128, 1, 1}, 1, 2,
     {TEN('x', 3, 8, 128, 256)}, {FP8('e', 3, 8, 256, 128), TEN('f', 2, 16, 4)}},
    {"fp8_block_quantize", "x[300,256] by 8 experts' counts, 1x128 of x^T", {1, 128, 1}, 2, 2,
     {RECEIVED(262, 2, 300, 256), COUNTS(300, 1, 8)}, {FP8('e', 2, 256, 1408), TEN('f', 2, 11, 256)}},
    {"fp8_grouped_matmul", "blockwise fwd e4m3 x[300,256] 1x128 w[8,128,256]^T 128x128", {1, 0, 0}, 5, 1,
     {FP8('e', 2, 300, 256), TEN('p', 2, 2, 300), FP8('e', 3, 8, 128, 256), TEN('p', 2, 8, 4), COUNTS(300, 1, 8)},
     {TEN('x', 2, 300, 128)}},
    {"fp8_grouped_matmul", "blockwise dgrad e4m3 dy[300,128] 1x128 w^T[8,256,128] 128x128", {1, 0, 0}, 5, 1,
     {FP8('e', 2, 300, 128), TEN('p', 2, 1, 300), FP8('e', 3, 8, 256, 128), TEN('p', 2, 16, 4), COUNTS(300, 1, 8)},
     {TEN('x', 2, 300, 256)}},
    {"fp8_grouped_wgrad", "blockwise dy^T[128,1408] x^T[256,1408] 1x128 over 8 experts' spans", {0}, 5, 1,
     {FP8('e', 2, 128, 1408), TEN('p', 2, 11, 128), FP8('e', 2, 256, 1408), TEN('p', 2, 11, 256), COUNTS(300, 1, 8)},
     {TEN('f', 3, 8, 128, 256)}},
    {"fp8_grouped_wgrad_accumulate", "blockwise f32[8,128,256] += dy^T x^T over the spans", {0}, 6, 0,
     .args = {OUT('f', 3, 8, 128, 256), FP8('e', 2, 128, 1408), TEN('p', 2, 11, 128), FP8('e', 2, 256, 1408),
              TEN('p', 2, 11, 256), COUNTS(300, 1, 8)}},
    {"fp8_history_amax", "h[8,17] max (an expert weight's)", {1}, 1, 1, {TEN('p', 2, 8, 17)}, {TEN('f', 1, 8)}},
    {"fp8_amax_fold", "h[8,17] amaxes[8]", {0}, 2, 0, .args = {OUT('p', 2, 8, 17), TEN('p', 1, 8)}},
    {"fp8_history_update", "h[8,17] roll", {1}, 2, 0, .args = {OUT('p', 2, 8, 17), TEN('p', 2, 8, 17)}},
    /* MoE (kernels_templates/moe.cuh): 67 tokens, 16 or 64 experts, top 2 or 4; rows of 200 and
     * 768 (16-byte loads); grouped GEMMs of 8 experts over 300 rows, an eighth of them past the counts */
    {"moe_route", "softmax [67,16] top 2", {2, 0, 0, 0}, 1, 2, {TEN('x', 2, 67, 16)}, {TEN('x', 2, 67, 2), IDS(16, 2, 67, 2)}},
    {"moe_route", "pre-softmax [67,16] top 2 scaling 2.5", {2, 0, 1, 2.5}, 1, 2, {TEN('x', 2, 67, 16)},
     {TEN('x', 2, 67, 2), IDS(16, 2, 67, 2)}},
    {"moe_route", "sigmoid [67,64] top 4 expert bias", {4, 1, 0, 0}, 2, 2, {TEN('x', 2, 67, 64), TEN('f', 2, 2, 64)},
     {TEN('x', 2, 67, 4), IDS(64, 2, 67, 4)}},
    {"moe_route", "sigmoid [67,16] top 1", {1, 1, 0, 0}, 1, 2, {TEN('x', 2, 67, 16)}, {TEN('x', 2, 67, 1), IDS(16, 2, 67, 1)}},
    /* group-limited (DeepSeek-V3's node-limited top k): 64 experts in 8 groups, the best 4 kept, top 8
     * of sigmoid + bias scaled by 2.5 (a group scored by its top 2); softmax top 4 in 4 groups, 2 kept */
    {"moe_route", "group-limited sigmoid [67,64] top 8 of 4 of 8 groups, expert bias, scaling 2.5",
     {8, 1, 0, 2.5, 8, 4}, 2, 2, {TEN('x', 2, 67, 64), TEN('f', 2, 2, 64)}, {TEN('x', 2, 67, 8), IDS(64, 2, 67, 8)}},
    {"moe_route", "group-limited softmax [67,16] top 4 of 2 of 4 groups", {4, 0, 0, 0, 4, 2}, 1, 2,
     {TEN('x', 2, 67, 16)}, {TEN('x', 2, 67, 4), IDS(16, 2, 67, 4)}},
    {"moe_route_grad", "softmax [67,16] top 2", {2, 0, 0, 0}, 3, 1, {TEN('x', 2, 67, 2), TEN('x', 2, 67, 16), TOPK(16, 2, 67, 2)},
     {TEN('x', 2, 67, 16)}},
    {"moe_route_grad", "pre-softmax [67,16] top 2 scaling 2.5", {2, 0, 1, 2.5}, 3, 1,
     {TEN('x', 2, 67, 2), TEN('x', 2, 67, 16), TOPK(16, 2, 67, 2)}, {TEN('x', 2, 67, 16)}},
    {"moe_route_grad", "sigmoid [67,64] top 4", {4, 1, 0, 0}, 3, 1, {TEN('x', 2, 67, 4), TEN('x', 2, 67, 64), TOPK(64, 2, 67, 4)},
     {TEN('x', 2, 67, 64)}},
    {"moe_bias_count", "h[2,16] ids[67,2] kept weights", {0}, 3, 0,
     .args = {OUT('f', 2, 2, 16), IDS(16, 2, 67, 2), TEN('x', 2, 67, 2)}},
    {"moe_bias_count", "h[2,16] ids[67,2]", {0}, 2, 0, .args = {OUT('f', 2, 2, 16), IDS(16, 2, 67, 2)}},
    {"moe_bias_update", "h[2,16] rate 0.01", {0.01}, 2, 0, .args = {OUT('f', 2, 2, 16), TEN('p', 2, 2, 16)}},
    {"moe_bias_update", "h[2,16] rate 0 (zero the counts)", {0}, 2, 0, .args = {OUT('f', 2, 2, 16), TEN('p', 2, 2, 16)}},
    {"moe_capacity", "[67,2] capacity 5 probs", {5, 0}, 3, 1, {TEN('x', 2, 67, 2), TEN('x', 2, 67, 2), IDS(16, 2, 67, 2)},
     {TEN('x', 2, 67, 2)}},
    {"moe_capacity", "[67,2] capacity 5 position", {5, 1}, 3, 1, {TEN('x', 2, 67, 2), TEN('x', 2, 67, 2), IDS(16, 2, 67, 2)},
     {TEN('x', 2, 67, 2)}},
    /* context parallelism's: 4 sequences of 16 tokens gathered over cp 2 in rank order, ranked at their places */
    {"moe_capacity", "[64,2] capacity 5 probs over cp 2 seq 16", {5, 0, 2, 16}, 3, 1,
     {TEN('x', 2, 64, 2), TEN('x', 2, 64, 2), IDS(8, 2, 64, 2)}, {TEN('x', 2, 64, 2)}},
    {"moe_capacity", "[64,2] capacity 5 position over cp 2 seq 16", {5, 1, 2, 16}, 3, 1,
     {TEN('x', 2, 64, 2), TEN('x', 2, 64, 2), IDS(8, 2, 64, 2)}, {TEN('x', 2, 64, 2)}},
    {"moe_sort", "ids[67,2] 16 experts", {16}, 1, 2, {IDS(16, 2, 67, 2)}, {IDS(1, 1, 134), IDS(1, 1, 16)}},
    {"moe_sort", "ids[1000,8] 64 experts (32 chunks)", {64}, 1, 2, {IDS(64, 2, 1000, 8)}, {IDS(1, 1, 8000), IDS(1, 1, 64)}},
    {"moe_permute", "x[67,200] top 2", {0}, 2, 1, {TEN('x', 2, 67, 200), PERM(134)}, {TEN('x', 2, 134, 200)}},
    {"moe_permute", "x[67,768] top 2 (16-byte loads)", {0}, 2, 1, {TEN('x', 2, 67, 768), PERM(134)}, {TEN('x', 2, 134, 768)}},
    {"moe_unpermute", "yp[134,200] top 2", {0}, 3, 1, {TEN('x', 2, 134, 200), PERM(134), TEN('x', 2, 67, 2)},
     {TEN('x', 2, 67, 200)}},
    {"moe_unpermute", "yp[134,768] top 2 (16-byte loads)", {0}, 3, 1, {TEN('x', 2, 134, 768), PERM(134), TEN('x', 2, 67, 2)},
     {TEN('x', 2, 67, 768)}},
    {"moe_unpermute", "yp[134,768] top 2, f32 weights (an fp32 router)", {0}, 3, 1,
     {TEN('x', 2, 134, 768), PERM(134), TEN('f', 2, 67, 2)}, {TEN('x', 2, 67, 768)}},
    {"moe_unpermute_grad", "dy[67,768] top 2, f32 weights (an fp32 router)", {0}, 4, 2,
     {TEN('x', 2, 67, 768), TEN('x', 2, 134, 768), PERM(134), TEN('f', 2, 67, 2)}, {TEN('x', 2, 134, 768), TEN('f', 2, 67, 2)}},
    {"moe_unpermute_grad", "dy[67,200] top 2", {0}, 4, 2,
     {TEN('x', 2, 67, 200), TEN('x', 2, 134, 200), PERM(134), TEN('x', 2, 67, 2)}, {TEN('x', 2, 134, 200), TEN('x', 2, 67, 2)}},
    {"moe_unpermute_grad", "dy[67,768] top 2 (16-byte loads)", {0}, 4, 2,
     {TEN('x', 2, 67, 768), TEN('x', 2, 134, 768), PERM(134), TEN('x', 2, 67, 2)}, {TEN('x', 2, 134, 768), TEN('x', 2, 67, 2)}},
    {"moe_grouped_matmul", "x[300,256] w[8,200,256]^T", {1}, 3, 1,
     {TEN('x', 2, 300, 256), TEN('x', 3, 8, 200, 256), COUNTS(300, 1, 8)}, {TEN('x', 2, 300, 200)}},
    {"moe_grouped_matmul", "x[300,256] w[8,256,200]", {0}, 3, 1,
     {TEN('x', 2, 300, 256), TEN('x', 3, 8, 256, 200), COUNTS(300, 1, 8)}, {TEN('x', 2, 300, 200)}},
    {"moe_grouped_wgrad", "a[300,256]^T b[300,200] over 8 experts", {0}, 3, 1,
     {TEN('x', 2, 300, 256), TEN('x', 2, 300, 200), COUNTS(300, 1, 8)}, {TEN('f', 3, 8, 256, 200)}},
    {"moe_grouped_wgrad_accumulate", "f32[8,256,200] += a[300,256]^T b[300,200]", {0}, 4, 0,
     .args = {OUT('f', 3, 8, 256, 200), TEN('x', 2, 300, 256), TEN('x', 2, 300, 200), COUNTS(300, 1, 8)}},
    {"moe_grouped_wgrad_accumulate", "f32[8,256,200] := a[300,256]^T b[300,200] (assign)", {1}, 4, 0,
     .args = {OUT('f', 3, 8, 256, 200), TEN('x', 2, 300, 256), TEN('x', 2, 300, 200), COUNTS(300, 1, 8)}},
    {"moe_sort", "ids[1000,8] 64 experts, kept weights (a quarter dropped)", {64}, 2, 2,
     {IDS(64, 2, 1000, 8), TEN('z', 2, 1000, 8)}, {IDS(1, 1, 8000), IDS(1, 1, 64)}},
    {"moe_sort", "ids[1000,8] 64 experts, kept weights in the dtype (a quarter dropped)", {64}, 2, 2,
     {IDS(64, 2, 1000, 8), TEN('Z', 2, 1000, 8)}, {IDS(1, 1, 8000), IDS(1, 1, 64)}},
    {"moe_aux_loss", "softmax [67,16] top 2", {2, 0}, 2, 1, {TEN('x', 2, 67, 16), IDS(16, 2, 67, 2)}, {F32_SCALAR}},
    {"moe_aux_loss", "softmax [64,16] top 2 seq 16", {2, 0, 16}, 2, 1, {TEN('x', 2, 64, 16), IDS(16, 2, 64, 2)}, {F32_SCALAR}},
    {"moe_aux_loss_grad", "sigmoid [64,16] top 2 seq 16", {2, 1, 16}, 3, 1,
     {SCALAR(1.7), TEN('x', 2, 64, 16), IDS(16, 2, 64, 2)}, {TEN('x', 2, 64, 16)}},
    {"moe_aux_loss", "sigmoid [67,64] top 4", {4, 1}, 2, 1, {TEN('x', 2, 67, 64), IDS(64, 2, 67, 4)}, {F32_SCALAR}},
    {"moe_aux_loss_grad", "softmax [67,16] top 2", {2, 0}, 3, 1, {SCALAR(1.7), TEN('x', 2, 67, 16), IDS(16, 2, 67, 2)},
     {TEN('x', 2, 67, 16)}},
    {"moe_aux_loss_grad", "sigmoid [67,64] top 4", {4, 1}, 3, 1, {SCALAR(1.7), TEN('x', 2, 67, 64), IDS(64, 2, 67, 4)},
     {TEN('x', 2, 67, 64)}},
    {"moe_z_loss", "[67,16]", {0}, 1, 1, {TEN('x', 2, 67, 16)}, {F32_SCALAR}},
    {"moe_z_loss_grad", "[67,16]", {0}, 2, 1, {SCALAR(1.7), TEN('x', 2, 67, 16)}, {TEN('x', 2, 67, 16)}},
    {"moe_aux_attach", "x[67,200]", {0}, 2, 1, {TEN('x', 2, 67, 200), SCALAR(0.3)}, {TEN('x', 2, 67, 200)}},
    {"moe_sort_runs", "x[100,200] came[2,4]", {0}, 2, 2, {TEN('x', 2, 100, 200), COUNTS(100, 2, 2, 4)},
     {TEN('x', 2, 100, 200), IDS(1, 1, 4)}},
    {"moe_unsort_runs", "x[100,200] came[2,4]", {0}, 2, 1, {TEN('x', 2, 100, 200), COUNTS(100, 2, 2, 4)},
     {TEN('x', 2, 100, 200)}},
    /* expert parallelism's room: 56 rows received into 4096 (DeepSeek-V3's ep 64 fills ~1/32), the
     * room NaN: the kernels read and write the received rows alone */
    {"moe_sort_runs", "x[4096,72] came[4,2], 56 rows received", {0}, 2, 2, {RECEIVED(56, 2, 4096, 72), COUNTS(64, 2, 4, 2)},
     {TEN('x', 2, 4096, 72), IDS(1, 1, 2)}},
    {"moe_unsort_runs", "x[4096,72] came[4,2], 56 rows received", {0}, 2, 1, {RECEIVED(56, 2, 4096, 72), COUNTS(64, 2, 4, 2)},
     {TEN('x', 2, 4096, 72)}},
    /* the elementwise ops between the grouped GEMMs over the same room, bounded by the rows received
     * (passes/row_bounds.c): the kernels stop there, the results' room left as the poison it was */
    {"swiglu", "[4096,72], 56 rows bounded", {0}, 3, 1, {ROOM_56, ROOM_56, ROW_BOUND_56}, {TEN('x', 2, 4096, 72)}},
    {"swiglu_grad", "[4096,72], 56 rows bounded", {0}, 4, 2, {ROOM_56, ROOM_56, ROOM_56, ROW_BOUND_56},
     {TEN('x', 2, 4096, 72), TEN('x', 2, 4096, 72)}},
    {"swiglu_grad_product", "[4096,72], 56 rows bounded", {0}, 4, 3, {ROOM_56, ROOM_56, ROOM_56, ROW_BOUND_56},
     {TEN('x', 2, 4096, 72), TEN('x', 2, 4096, 72), TEN('x', 2, 4096, 72)}},
    {"add", "[4096,72], 56 rows bounded", {0}, 3, 1, {ROOM_56, ROOM_56, ROW_BOUND_56}, {TEN('x', 2, 4096, 72)}},
    /* the grouped GEMM on them leaves its result's room as it was (without the bound: zeroed) */
    {"moe_grouped_matmul", "x[4096,72] w[2,64,72]^T, 56 rows bounded", {1}, 4, 1,
     {ROOM_56, TEN('x', 3, 2, 64, 72), ROW_BOUND_56, ROW_BOUND_56}, {TEN('x', 2, 4096, 64)}},
    {"gelu", "[4096,72], 56 rows bounded", {0}, 2, 1, {ROOM_56, ROW_BOUND_56}, {TEN('x', 2, 4096, 72)}},
    {"scale", "[4096,72], 56 rows bounded", {0.3}, 2, 1, {ROOM_56, ROW_BOUND_56}, {TEN('x', 2, 4096, 72)}},
};

/* sum_squares over 60 tensors of mixed f32/test dtype and sizes: two launches of the fused kernel. */
static op_case sum_squares_case(void)
{
    op_case c = {"sum_squares", "60 tensors, 1..~60k elements", {0}, 60, 1, .res = {F32_SCALAR}};
    for (int i = 0; i < c.nargs; i++)
        c.args[i] = (tensor_spec)TEN(i % 2 ? 'x' : 'f', 1, 1 + (int64_t)i * i * 17);
    return c;
}

/* Ops the CUDA device runs without a case here, and where each is tested instead. The collectives
 * (IR_OPF_COLLECTIVE) need a group of ranks, which one process has not: the multi-GPU runs
 * (bench/) cover them. */
static const struct {
    const char *op, *why;
} exempt[] = {
    {"input", "no kernel: the device binds the host's tensor (an empty launcher)"},
    {"global", "no kernel: the device binds the global's bytes in the slab (an empty launcher)"},
    {"output", "no kernel: the runtime reads the value back (an empty launcher)"},
    {"dropout", "tests/gpu/dropout_test.c: the GPU's mask element by element against the CPU's"},
    {"attention", "tests/gpu/attention_test.c: cuDNN's and mcc's kernels against the CPU"},
    {"attention_grad", "tests/gpu/attention_test.c: cuDNN's and mcc's kernels against the CPU"},
    {"attention_dropout", "tests/gpu/dropout_test.c: y and lse against the CPU's, the same mask"},
    {"attention_dropout_grad", "tests/gpu/dropout_test.c: dq, dk, dv against the CPU's, the same mask"},
    {"attention_merge", "tests/gpu/attention_test.c: the ring's merged pieces against the whole attention"},
    {"grad_ready", "no kernel: records an event (tests/offload.sh's --clip-grad 0 runs on CPU ranks; on the GPU "
                   "bench/fp8_offload_run.sh's offload runs)"},
};
#define NEXEMPT (int)(sizeof exempt / sizeof exempt[0])

/* As tests/gradcheck_test.c does for gradients: every op of ir/ops.def (each has a launcher) has
 * a case, or an exemption saying where it is tested; an exemption of an op with a case, or of no
 * op, fails too. Needs no GPU: it runs first. */
static int check_coverage(const op_case *extra)
{
    int missing = 0;
    for (int op = 0; op < IR_NUM_OPS; op++) {
        bool has_case = ir_op_by_name(extra->op) == op;
        for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]) && !has_case; i++)
            has_case = ir_op_by_name(cases[i].op) == op;
        int e = 0;
        while (e < NEXEMPT && ir_op_by_name(exempt[e].op) != op)
            e++;
        bool exempted = e < NEXEMPT || ir_op_has(op, IR_OPF_COLLECTIVE);
        if (has_case == exempted) {
            fprintf(stderr, has_case ? "FAIL coverage: %s has a case and an exemption: remove it from exempt[]\n"
                                     : "FAIL coverage: %s has a launcher but no case: add one to cases[] (or, tested "
                                       "elsewhere, to exempt[] with where)\n",
                    ir_ops[op].name);
            missing++;
        }
    }
    for (int e = 0; e < NEXEMPT; e++)
        if (ir_op_by_name(exempt[e].op) < 0) {
            fprintf(stderr, "FAIL coverage: exempt[] names %s, which is not in ir/ops.def: rename or remove it\n",
                    exempt[e].op);
            missing++;
        }
    return missing;
}

/* --- values ----------------------------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double uniform(void) /* [0, 1) */
{
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}


/* One operand or result: the CPU's f32 (or i32) copy and the GPU buffer in its real dtype. */
typedef struct {
    const tensor_spec *spec;
    ir_type cpu_t, gpu_t;
    void *cpu;        /* f32 or i32 values */
    CUdeviceptr dev;
} tensor;

static bool is_fp8(char kind) { return kind == 'e' || kind == 'E'; }
static bool is_i32(char kind) { return kind == 'i' || kind == 'k' || kind == 'r' || kind == 'c'; }

/* i32 values of kinds 'i', 'k', 'r' and 'c' (see tensor_spec) */
static void int_values(const tensor_spec *s, int32_t *v, int64_t n)
{
    int64_t row = s->ndim ? s->dims[s->ndim - 1] : 1;
    if (s->kind == 'i')
        for (int64_t i = 0; i < n; i++)
            v[i] = (int32_t)(uniform() * s->value);
    else if (s->kind == 'k') /* each row: a partial shuffle of [0, value) */
        for (int64_t r = 0; r < n / row; r++) {
            int32_t pool[1024];
            int64_t m = (int64_t)s->value < 1024 ? (int64_t)s->value : 1024;
            for (int64_t e = 0; e < m; e++)
                pool[e] = (int32_t)e;
            for (int64_t j = 0; j < row; j++) {
                int64_t pick = j + (int64_t)(uniform() * (double)(m - j));
                int32_t t = pool[j];
                pool[j] = pool[pick], pool[pick] = t;
                v[r * row + j] = pool[j];
            }
        }
    else if (s->kind == 'r') {
        for (int64_t i = 0; i < n; i++)
            v[i] = (int32_t)i;
        for (int64_t i = n - 1; i > 0; i--) {
            int64_t j = (int64_t)(uniform() * (double)(i + 1));
            int32_t t = v[i];
            v[i] = v[j], v[j] = t;
        }
    } else { /* 'c': 7/8 of value rows spread at random, some groups empty */
        for (int64_t i = 0; i < n; i++)
            v[i] = 0;
        for (int64_t left = (int64_t)s->value * 7 / 8; left > 0; left--)
            v[(int64_t)(uniform() * (double)(n > 1 ? n - 1 : 1))]++; /* the last group stays empty */
    }
}

static ir_dtype gpu_dtype(char kind, ir_dtype under_test)
{
    if (is_fp8(kind))
        return kind == 'E' ? IR_FP8E5M2 : IR_FP8E4M3;
    return is_i32(kind) ? IR_I32 : kind == 'x' || kind == 'P' || kind == 'Z' || kind == 'g' || kind == 'G' ? under_test
         : kind == 'b' ? IR_BF16 : IR_F32;
}

/* Values of the spec's kind, already rounded to the GPU dtype, so both sides see the same. */
static void tensor_init(tensor *t, const tensor_spec *s, ir_dtype dt)
{
    t->spec = s;
    t->gpu_t = ir_tensor(gpu_dtype(s->kind, dt), s->ndim, s->dims);
    t->cpu_t = ir_tensor(is_fp8(s->kind) ? t->gpu_t.dtype : is_i32(s->kind) ? IR_I32 : IR_F32, s->ndim, s->dims);
    int64_t n = ir_numel(&t->cpu_t);
    t->cpu = malloc((size_t)(n ? n : 1) * 4);
    if (is_i32(s->kind))
        int_values(s, t->cpu, n);
    for (int64_t i = 0; i < n; i++) {
        if (is_fp8(s->kind)) { /* a finite byte: not 0x7f/0xff (E4M3 NaN) nor E5M2's inf/NaN exponent */
            uint8_t b = (uint8_t)(uniform() * 256);
            ((uint8_t *)t->cpu)[i] = (b & 0x7f) >= (s->kind == 'E' ? 0x7c : 0x7f) ? b & 0x80 : b;
            continue;
        }
        if (is_i32(s->kind))
            continue;
        double v = s->kind == 's' ? s->value : s->kind == 'p' || s->kind == 'P' ? 0.1 + 2 * uniform() : 4 * uniform() - 2;
        if (s->kind == 'z' || s->kind == 'Z')
            v = v < -1 ? 0 : v;
        if (s->kind == 'g' && i >= (int64_t)s->value * (n / s->dims[0]))
            v = NAN;
        float f = (float)v;
        ((float *)t->cpu)[i] = t->gpu_t.dtype == IR_BF16 ? f32_of_bf16(bf16_of(f)) : f;
    }
    RT_CU_CHECK(cuMemAlloc(&t->dev, ir_bytes(&t->gpu_t) ? ir_bytes(&t->gpu_t) : 1));
}

static void upload(rt_cuda_ctx *cx, const tensor *t)
{
    int64_t n = ir_numel(&t->gpu_t);
    void *host = t->cpu;
    uint16_t *b = NULL;
    if (t->gpu_t.dtype == IR_BF16) {
        host = b = malloc((size_t)(n ? n : 1) * 2);
        for (int64_t i = 0; i < n; i++)
            b[i] = bf16_of(((float *)t->cpu)[i]);
    }
    RT_CU_CHECK(cuMemcpyHtoDAsync(t->dev, host, ir_bytes(&t->gpu_t), rt_cuda_stream(cx)));
    RT_CU_CHECK(cuStreamSynchronize(rt_cuda_stream(cx))); /* before the pageable buffer goes */
    free(b);
}

static void poison(rt_cuda_ctx *cx, const tensor *t)
{
    RT_CU_CHECK(cuMemsetD8Async(t->dev, 0xff, ir_bytes(&t->gpu_t), rt_cuda_stream(cx)));
}

/* The GPU buffer as raw bytes (malloc'd) after the stream drains. */
static void *download(rt_cuda_ctx *cx, const tensor *t)
{
    void *raw = malloc(ir_bytes(&t->gpu_t) ? ir_bytes(&t->gpu_t) : 1);
    RT_CU_CHECK(cuMemcpyDtoHAsync(raw, t->dev, ir_bytes(&t->gpu_t), rt_cuda_stream(cx)));
    RT_CU_CHECK(cuStreamSynchronize(rt_cuda_stream(cx)));
    return raw;
}

static float raw_at(const tensor *t, const void *raw, int64_t i)
{
    return t->gpu_t.dtype == IR_BF16 ? f32_of_bf16(((const uint16_t *)raw)[i]) : ((const float *)raw)[i];
}

/* --- one case in one dtype --------------------------------------------------------------------- */

typedef struct {
    const op_case *c;
    const char *dtype;
    int failures;
} report;

static void fail(report *r, const char *what, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL %s %s %s: %s: ", r->c->op, r->dtype, r->c->shape, what);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    r->failures++;
}

/* GPU output t (raw bytes) against the CPU's values: no NaN, error of norms within tolerance. An
 * element the CPU leaves NaN is one the op leaves undefined (moe_sort_runs' rows past those
 * received): the GPU must not have written it either, so it still holds the poison. */
static void compare(report *r, const char *what, const tensor *t, const void *raw)
{
    int64_t n = ir_numel(&t->cpu_t), worst = 0;
    if (is_fp8(t->spec->kind)) { /* bit for bit */
        for (int64_t i = 0; i < n; i++)
            if (((const uint8_t *)raw)[i] != ((const uint8_t *)t->cpu)[i]) {
                fail(r, what, "byte %lld of %lld: gpu 0x%02x cpu 0x%02x", (long long)i, (long long)n,
                     ((const uint8_t *)raw)[i], ((const uint8_t *)t->cpu)[i]);
                return;
            }
        return;
    }
    if (is_i32(t->spec->kind)) { /* ids, permutations, counts: exactly */
        for (int64_t i = 0; i < n; i++)
            if (((const int32_t *)raw)[i] != ((const int32_t *)t->cpu)[i]) {
                fail(r, what, "i32 element %lld of %lld: gpu %d cpu %d", (long long)i, (long long)n,
                     ((const int32_t *)raw)[i], ((const int32_t *)t->cpu)[i]);
                return;
            }
        return;
    }
    double max_ref = 0, max_err = 0;
    for (int64_t i = 0; i < n; i++) {
        double g = raw_at(t, raw, i), c = ((const float *)t->cpu)[i];
        if (isnan(c) && !isnan(g)) {
            fail(r, what, "element %lld of %lld is written (gpu %g) where the op leaves it undefined (cpu NaN): "
                 "work past the rows received", (long long)i, (long long)n, g);
            return;
        }
        if (isnan(c))
            continue;
        if (isnan(g)) {
            fail(r, what, "NaN at element %lld of %lld (unwritten, or a non-finite result; cpu %g)", (long long)i,
                 (long long)n, c);
            return;
        }
        max_ref = fmax(max_ref, fabs(c));
        if (fabs(g - c) > max_err)
            max_err = fabs(g - c), worst = i;
    }
    bool bf16 = t->gpu_t.dtype == IR_BF16 || (t->spec->kind == 'a' && !strcmp(r->dtype, "bf16"));
    double tol = bf16 ? BF16_TOL : F32_TOL, rel = max_err / (max_ref > 0 ? max_ref : 1);
    bool fp8_gemm = !strncmp(r->c->op, "fp8_matmul", 10) || !strcmp(r->c->op, "fp8_grouped_matmul") ||
                    !strncmp(r->c->op, "fp8_grouped_wgrad", 17);
    if (fp8_gemm && tol < FP8_GEMM_TOL)
        tol = FP8_GEMM_TOL;
    if (rel > tol)
        fail(r, what, "error of norms %g > %g; worst element %lld: gpu %g cpu %g", rel, tol, (long long)worst,
             raw_at(t, raw, worst), ((const float *)t->cpu)[worst]);
}

static void launch(rt_cuda_ctx *cx, ir_op op, const ir_instr *in, tensor *args, tensor *res)
{
    void *ptrs[MAX_OPERANDS + IR_MAX_RES];
    const ir_type *types[MAX_OPERANDS + IR_MAX_RES];
    for (int i = 0; i < in->nargs + in->nres; i++) {
        tensor *t = i < in->nargs ? &args[i] : &res[i - in->nargs];
        ptrs[i] = (void *)(uintptr_t)t->dev;
        types[i] = &t->gpu_t;
    }
    rt_kernel_call call = {in, in->nargs, in->nres, ptrs, types, ptrs + in->nargs, types + in->nargs};
    rt_cuda_begin_function(cx); /* each run a call of its own: nothing a launcher learnt carries over */
    rt_cuda_launchers[op](cx, &call);
    RT_CU_CHECK(cuStreamSynchronize(rt_cuda_stream(cx))); /* a kernel fault shows here, at its op */
}

static void run_cpu(const ir_instr *in, tensor *args, tensor *res)
{
    void *ptrs[MAX_OPERANDS + IR_MAX_RES];
    const ir_type *types[MAX_OPERANDS + IR_MAX_RES];
    for (int i = 0; i < in->nargs + in->nres; i++) {
        tensor *t = i < in->nargs ? &args[i] : &res[i - in->nargs];
        ptrs[i] = t->cpu;
        types[i] = &t->cpu_t;
    }
    rt_kernel_call call = {in, in->nargs, in->nres, ptrs, types, ptrs + in->nargs, types + in->nargs};
    rt_cpu_run_call(NULL, &call); /* a row-bounded op on its rows alone, as train_rank runs it */
}

/* Runs the GPU twice (results poisoned each time), then the CPU; compares outputs and the two
 * GPU runs' bits. Ops that write operands in place run once (a second run would start from
 * their output). */
static int run_case(rt_cuda_ctx *cx, const op_case *c, ir_dtype dt)
{
    report r = {c, ir_dtype_name(dt), 0};
    int op = ir_op_by_name(c->op);
    /* a case that tests nothing is a failure, not a skip: its op was renamed or removed */
    if (op < 0 || !rt_cuda_launchers[op]) {
        fail(&r, "case", op < 0 ? "no such op in ir/ops.def: rename the case or remove it"
                                : "the op has no launcher in runtime/cuda/launchers.c");
        return r.failures;
    }
    int ids[MAX_OPERANDS]; /* the operands' value ids, as in a plan: 1.. (launchers may key on them) */
    for (int i = 0; i < c->nargs; i++)
        ids[i] = i + 1;
    ir_instr in = {.op = (ir_op)op, .nargs = c->nargs, .nres = c->nres, .args = ids};
    for (int i = 0; i < c->nres; i++)
        in.res[i] = c->nargs + 1 + i;
    memcpy(in.attr, c->attr, sizeof in.attr);
    tensor args[MAX_OPERANDS], res[IR_MAX_RES];
    bool in_place = false;
    for (int i = 0; i < c->nargs; i++) {
        tensor_init(&args[i], &c->args[i], dt);
        upload(cx, &args[i]);
        in_place |= c->args[i].out;
    }
    for (int i = 0; i < c->nres; i++)
        tensor_init(&res[i], &c->res[i], dt);
    void *first[IR_MAX_RES] = {0};
    for (int run = 0; run < (in_place ? 1 : 2); run++) {
        for (int i = 0; i < c->nres; i++)
            poison(cx, &res[i]);
        launch(cx, in.op, &in, args, res);
        for (int i = 0; i < c->nres; i++) {
            void *raw = download(cx, &res[i]);
            if (run == 0)
                first[i] = raw;
            else {
                if (memcmp(first[i], raw, ir_bytes(&res[i].gpu_t)))
                    fail(&r, "determinism", "result %d differs between two runs on the same inputs", i);
                free(raw);
            }
        }
    }
    run_cpu(&in, args, res);
    for (int i = 0; i < c->nres; i++) {
        char what[32];
        snprintf(what, sizeof what, "result %d", i);
        compare(&r, what, &res[i], first[i]);
        free(first[i]);
    }
    for (int i = 0; i < c->nargs; i++)
        if (c->args[i].out) {
            char what[32];
            snprintf(what, sizeof what, "operand %d (in place)", i);
            void *raw = download(cx, &args[i]);
            compare(&r, what, &args[i], raw);
            free(raw);
        }
    for (int i = 0; i < c->nargs + c->nres; i++) {
        tensor *t = i < c->nargs ? &args[i] : &res[i - c->nargs];
        free(t->cpu);
        RT_CU_CHECK(cuMemFree(t->dev));
    }
    printf("%s %-18s %-5s %s\n", r.failures ? "FAIL" : "ok  ", c->op, r.dtype, c->shape);
    return r.failures;
}

/* AdamW on a master held as (bf16 copy, i16 remainder) (store_param_remainders) against AdamW on
 * the fp32 master with a bf16 copy, both on the GPU, for 3 steps: the pair joins to the fp32
 * master bit for bit, its copy is that master rounded with ties away from zero, and the moments
 * agree. n is odd (the vector path and its tail); a third of the masters start at a tie. */
static int adamw_remainder_check(rt_cuda_ctx *cx)
{
    enum { N = 3001 };
    int ids[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    ir_instr in = {.op = IR_OP_ADAMW, .nargs = 8, .args = ids, .attr = {0.9, 0.95, 1e-8, 0.1}};
    float *p = malloc(N * 4), *g = malloc(N * 4), scalars[3] = {1e-3f, 0, 0};
    uint16_t *hi = malloc(N * 2);
    int16_t *rem = malloc(N * 2);
    for (int i = 0; i < N; i++) {
        p[i] = (float)(4 * uniform() - 2);
        if (i % 3 == 0) { /* low half exactly 0x8000: where ties-to-even and away-from-zero part */
            uint32_t u;
            memcpy(&u, &p[i], 4);
            u = (u & 0xffff0000u) | 0x8000u;
            memcpy(&p[i], &u, 4);
        }
        rt_master_split(p[i], &hi[i], &rem[i]);
    }
    ir_type f32 = ir_tensor(IR_F32, 1, (int64_t[]){N}), bf16 = ir_tensor(IR_BF16, 1, (int64_t[]){N});
    ir_type i16 = ir_tensor(IR_I16, 1, (int64_t[]){N}), scalar = ir_scalar(IR_F32);
    /* buffers: 0 p, 1 g, 2 m, 3 v, 4 copy (fp32 run); 5 rem, 6 m, 7 v, 8 hi (pair run); 9..11 lr, step, coef */
    CUstream stream = rt_cuda_stream(cx);
    CUdeviceptr d[12];
    size_t bytes[12] = {N * 4, N * 4, N * 4, N * 4, N * 2, N * 2, N * 4, N * 4, N * 2, 4, 4, 4};
    for (int k = 0; k < 12; k++) {
        RT_CU_CHECK(cuMemAlloc(&d[k], bytes[k]));
        RT_CU_CHECK(cuMemsetD8Async(d[k], 0, bytes[k], stream));
    }
    RT_CU_CHECK(cuMemcpyHtoDAsync(d[0], p, N * 4, stream));
    RT_CU_CHECK(cuMemcpyHtoDAsync(d[5], rem, N * 2, stream));
    RT_CU_CHECK(cuMemcpyHtoDAsync(d[8], hi, N * 2, stream));
    RT_CU_CHECK(cuMemcpyHtoDAsync(d[9], &scalars[0], 4, stream));
    int failures = 0;
    for (int s = 1; s <= 3; s++) {
        for (int i = 0; i < N; i++)
            g[i] = (float)(2 * uniform() - 1);
        float step = (float)s, coef = s == 2 ? 0.5f : 1.0f;
        RT_CU_CHECK(cuMemcpyHtoDAsync(d[1], g, N * 4, stream));
        RT_CU_CHECK(cuMemcpyHtoDAsync(d[10], &step, 4, stream));
        RT_CU_CHECK(cuMemcpyHtoDAsync(d[11], &coef, 4, stream));
        RT_CU_CHECK(cuStreamSynchronize(stream)); /* before step and coef go */
        for (int pair = 0; pair < 2; pair++) {
            int at[8] = {pair ? 5 : 0, 1, pair ? 6 : 2, pair ? 7 : 3, 9, 10, 11, pair ? 8 : 4};
            const ir_type *types[8] = {pair ? &i16 : &f32, &f32, &f32, &f32, &scalar, &scalar, &scalar, &bf16};
            void *ptrs[8];
            for (int a = 0; a < 8; a++)
                ptrs[a] = (void *)(uintptr_t)d[at[a]];
            rt_kernel_call call = {&in, 8, 0, ptrs, types, NULL, NULL};
            rt_cuda_begin_function(cx);
            rt_cuda_launchers[IR_OP_ADAMW](cx, &call);
            RT_CU_CHECK(cuStreamSynchronize(rt_cuda_stream(cx)));
        }
        float m[N], m2[N], v[N], v2[N];
        RT_CU_CHECK(cuMemcpyDtoHAsync(p, d[0], N * 4, stream));
        RT_CU_CHECK(cuMemcpyDtoHAsync(rem, d[5], N * 2, stream));
        RT_CU_CHECK(cuMemcpyDtoHAsync(hi, d[8], N * 2, stream));
        RT_CU_CHECK(cuMemcpyDtoHAsync(m, d[2], N * 4, stream));
        RT_CU_CHECK(cuMemcpyDtoHAsync(m2, d[6], N * 4, stream));
        RT_CU_CHECK(cuMemcpyDtoHAsync(v, d[3], N * 4, stream));
        RT_CU_CHECK(cuMemcpyDtoHAsync(v2, d[7], N * 4, stream));
        RT_CU_CHECK(cuStreamSynchronize(stream));
        int differ = 0, first = -1;
        for (int i = 0; i < N; i++) {
            float joined = rt_master_join(hi[i], rem[i]);
            uint16_t want_hi;
            int16_t want_rem;
            rt_master_split(p[i], &want_hi, &want_rem);
            bool bad = memcmp(&joined, &p[i], 4) || hi[i] != want_hi || m[i] != m2[i] || v[i] != v2[i];
            differ += bad;
            first = bad && first < 0 ? i : first;
        }
        if (differ) {
            fprintf(stderr, "FAIL adamw (copy, remainder) step %d: %d of %d elements differ from the fp32 master's "
                    "(first %d: master %.9g, pair %.9g)\n", s, differ, N, first, p[first],
                    rt_master_join(hi[first], rem[first]));
            failures++;
        }
    }
    for (int k = 0; k < 12; k++)
        RT_CU_CHECK(cuMemFree(d[k]));
    free(p), free(g), free(hi), free(rem);
    printf("%s adamw              pair  [3001] (copy, remainder) against the fp32 master, 3 steps\n",
           failures ? "FAIL" : "ok  ");
    return failures;
}

int main(void)
{
    static op_case sumsq;
    sumsq = sum_squares_case();
    int failures = check_coverage(&sumsq);
    char err[8192];
    void *image;
    size_t size;
    if (!cg_cuda_compile_kernels(&image, &size, err, sizeof err)) {
        fprintf(stderr, "FAIL: %s\n", err);
        return 1;
    }
    rt_cuda_ctx *cx = rt_cuda_ctx_create(image, err, sizeof err);
    if (!cx) {
        fprintf(stderr, "FAIL: %s\n", err);
        return 1;
    }
    int ncases = (int)(sizeof cases / sizeof cases[0]);
    ir_dtype dtypes[] = {IR_F32, IR_BF16};
    /* OPS_TEST_ONLY=PREFIX: only the cases of ops named PREFIX... (tests/gpu/emulate/run.sh's moe_);
     * OPS_TEST_SHAPE=TEXT: only those whose shape says TEXT (" cp ": context parallelism's) */
    const char *only = getenv("OPS_TEST_ONLY") ? getenv("OPS_TEST_ONLY") : "";
    const char *shape = getenv("OPS_TEST_SHAPE") ? getenv("OPS_TEST_SHAPE") : "";
    for (int d = 0; d < 2; d++) {
        for (int i = 0; i < ncases; i++)
            if (!strncmp(cases[i].op, only, strlen(only)) && strstr(cases[i].shape, shape))
                failures += run_case(cx, &cases[i], dtypes[d]);
        if (!strncmp(sumsq.op, only, strlen(only)) && strstr(sumsq.shape, shape))
            failures += run_case(cx, &sumsq, dtypes[d]);
    }
    if (!strncmp("adamw", only, strlen(only)) && !*shape)
        failures += adamw_remainder_check(cx);
    rt_cuda_ctx_free(cx);
    free(image);
    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    return failures != 0;
}
