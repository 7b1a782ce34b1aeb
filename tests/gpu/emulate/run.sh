#!/usr/bin/env bash
# run.sh BUILD — no GPU needed: tests/gpu/ops_test.c's moe_ cases (every MoE op against its CPU
# kernel, f32 and bf16, twice for determinism) and tests/gpu/attention_test.c's context-parallel
# cases (mcc's attention kernels, bf16 tensor-core and f32, and the ring merge against the CPU
# oracle) through the real launchers.c, matmul.c and attention.c, with the kernels of
# kernels_templates/moe.cuh and attention.cuh run on the host (fake_cuda.cpp) and a naive cuBLASLt
# (fake_cublaslt.cpp), all under ASan/UBSan. BUILD: a CUDA-enabled build directory (its libraries,
# and cuda_ops_test's link line for the system libraries). OPS_TEST_ONLY (default moe_),
# OPS_TEST_SHAPE and ATTENTION_TEST_ONLY (default cp) choose the cases (context parallelism's
# rope and pos_add: EMU_TESTS=ops OPS_TEST_ONLY=rope OPS_TEST_SHAPE=" cp ", and pos_add;
# multi-latent attention's moves: OPS_TEST_ONLY=split_last_dim, concat_last_dim; blockwise FP8's
# quantize: OPS_TEST_ONLY=fp8_block_quantize, and its GEMMs on cuBLASLt's block scale modes, which
# fake_cublaslt.cpp emulates: OPS_TEST_ONLY=fp8_matmul OPS_TEST_SHAPE=blockwise; FP8 experts' per-expert
# quantizes and GEMMs: OPS_TEST_ONLY=fp8_grouped, and their histories: fp8_h, fp8_amax_fold; the elementwise
# ops bounded by expert parallelism's rows received: OPS_TEST_ONLY= OPS_TEST_SHAPE="rows bounded");
# EMU_TESTS="ops attention" which binaries run (cp_bench: bench/cp_attention_bench.c on a small shape;
# moe_bench: bench/moe_gemm_bench.c's cases and checks on two small shapes, also needing mcc_convert). The attention half takes about 8 minutes.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd) B=$(cd "$1" && pwd) here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d) && trap 'rm -rf "$work"' EXIT
san="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
cflags="-g -O1 $san -DMCC_HAVE_CUDA -I$root -I$root/ir -I$root/codegen/cuda -isystem /usr/local/cuda/include"
for f in tests/gpu/ops_test.c tests/gpu/attention_test.c bench/cp_attention_bench.c bench/moe_gemm_bench.c runtime/cuda/launchers.c \
         runtime/cuda/matmul.c runtime/cuda/attention.c; do
  cc -std=gnu17 $cflags -c "$root/$f" -o "$work/$(basename "$f" .c).o"
done
c++ -std=c++20 $cflags -w -I"$root/kernels_templates" -c "$here/fake_cuda.cpp" -o "$work/fake_cuda.o"
c++ -std=c++20 $cflags -w -c "$here/fake_cublaslt.cpp" -o "$work/fake_cublaslt.o"
# the system libraries of cuda_ops_test's link, less CUDA's own
libs=$(tr ' ' '\n' < "$B/CMakeFiles/cuda_ops_test.dir/link.txt" | grep -E '^/.*\.so$' | grep -v '/cuda/' | tr '\n' ' ')
shared=("$work"/{launchers,matmul,attention,fake_cuda,fake_cublaslt}.o "$B/libmccrt.a" "$B/libmcc_ckpt.a"
        "$B/libmcc_ir.a" "$B/libmcc_common.a" $libs -lm)
for t in ${EMU_TESTS:-ops attention}; do
  case $t in
    ops) c++ $san "$work/ops_test.o" "${shared[@]}" -o "$work/emu_$t"
         OPS_TEST_ONLY=${OPS_TEST_ONLY-moe_} "$work/emu_ops" ;;
    attention) c++ $san "$work/attention_test.o" "${shared[@]}" -o "$work/emu_$t"
               ATTENTION_TEST_ONLY=${ATTENTION_TEST_ONLY-cp} "$work/emu_attention" ;;
    cp_bench) c++ $san "$work/cp_attention_bench.o" "${shared[@]}" -o "$work/emu_$t" # its logic and check, times 0
              "$work/emu_cp_bench" --heads 4,2,16 --seqs 256 --check-seq 256 ;;
    moe_bench) c++ $san "$work/moe_gemm_bench.o" "$B/libmcc_convert.a" "${shared[@]}" -o "$work/emu_$t" # times 0
               "$work/emu_moe_bench" --shape 96,32,24,4 --shape 100,40,24,3 ;;
  esac
done
