// kernels.cu — the one NVRTC translation unit of mcc's CUDA kernels: every template header's
// extern "C" __global__ entry points, named mcc_<op>_<dtype...> (e.g. mcc_gelu_bf16). The
// launchers in runtime/cuda/ call them by name from the cubin embedded in train_rank.
#include "common.cuh"
#include "elementwise.cuh"
#include "dropout.cuh"
#include "reduce.cuh"
#include "embedding.cuh"
#include "norms.cuh"
#include "rope.cuh"
#include "cross_entropy.cuh"
#include "vocab_parallel.cuh"
#include "optimizer.cuh"
#include "init.cuh"
#include "attention.cuh"
#include "fp8.cuh"
#include "moe.cuh"
