/* fp8_cuda_rounding_test.c — CUDA's FP8 conversion (cuda_fp8.h's __nv_cvt_float_to_fp8 with
 * __NV_SATFINITE, which kernels_templates/fp8.cuh's fp8_quantize calls; on the host its software
 * path, the same rounding as sm_90's cvt.rn.satfinite) against the CPU's rt_fp8_encode, byte for
 * byte: every bf16 bit pattern and every 257th float one, both formats. NaNs are left out: the
 * kernel keeps their sign itself (mcc_fp8_encode), which CUDA's conversion drops. */
#include "runtime/fp8.h"

#include <cuda_fp8.h>
#include <stdio.h>
#include <string.h>

static int check(uint32_t bits, long *bad)
{
    float v;
    memcpy(&v, &bits, sizeof v);
    if ((bits & 0x7fffffffu) > 0x7f800000u)
        return 0;
    for (int e5m2 = 0; e5m2 < 2; e5m2++) {
        uint8_t cuda = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, e5m2 ? __NV_E5M2 : __NV_E4M3);
        uint8_t cpu = rt_fp8_encode(v, e5m2);
        if (cuda != cpu && (*bad)++ < 8)
            fprintf(stderr, "FAIL: float 0x%08x (%g) to %s: cuda_fp8.h 0x%02x, runtime/fp8.c 0x%02x\n", bits, v,
                    e5m2 ? "e5m2" : "e4m3", cuda, cpu);
    }
    return 2;
}

int main(void)
{
    long bad = 0, n = 0;
    for (uint32_t h = 0; h < 0x10000u; h++)
        n += check(h << 16, &bad);
    for (uint64_t b = 0; b <= 0xffffffffu; b += 257)
        n += check((uint32_t)b, &bad);
    printf("%ld conversions, %ld differ\n", n, bad);
    return bad != 0;
}
