/* fp8.h — FP8 E4M3 and E5M2 as the CPU oracle keeps them: one byte each (sign, exponent, mantissa),
 * what CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...) writes and its fp8 types read. */
#ifndef MCC_RT_FP8_H
#define MCC_RT_FP8_H

#include <stdbool.h>
#include <stdint.h>

/* The largest finite value: 448 (E4M3), 57344 (E5M2). */
float rt_fp8_max(bool e5m2);
/* x rounded to the nearest value of the format's grid, ties to the even mantissa; beyond the
 * largest finite value (and +-inf) saturates to it; NaN gives the NaN 0x7f (with x's sign). */
uint8_t rt_fp8_encode(float x, bool e5m2);
float rt_fp8_decode(uint8_t q, bool e5m2);

#endif
