/* fp8.c — FP8 rounding and decoding (fp8.h): written here rather than taken from a library because
 * none of the installed ones (Debian has no libtransformer-engine; torch 1.13 has no float8) has
 * it; tests/fp8_rounding.py checks it against every finite value of both formats. */
#include "runtime/fp8.h"

#include <math.h>

typedef struct {
    int mbits, bias;
} fp8_layout;

static fp8_layout layout_of(bool e5m2) { return e5m2 ? (fp8_layout){2, 15} : (fp8_layout){3, 7}; }

float rt_fp8_max(bool e5m2) { return e5m2 ? 57344.0f : 448.0f; }

uint8_t rt_fp8_encode(float x, bool e5m2)
{
    fp8_layout l = layout_of(e5m2);
    uint8_t sign = signbit(x) ? 0x80 : 0;
    if (isnan(x))
        return sign | 0x7f;
    double a = fabs((double)x), max = rt_fp8_max(e5m2);
    int emin = 1 - l.bias; /* the smallest normal exponent; below it the subnormals' fixed quantum */
    int e;
    frexp(a, &e); /* a = f 2^e, f in [0.5, 1): a's exponent is e - 1 */
    e = e - 1 < emin ? emin : e - 1;
    double quantum = ldexp(1.0, e - l.mbits);
    double r = nearbyint(a / quantum) * quantum; /* exact in double; the default mode rounds half to even */
    if (isinf(a) || r > max)
        r = max;
    if (r == 0)
        return sign;
    frexp(r, &e); /* the rounding may have carried into the next binade */
    e -= 1;
    if (e < emin) /* subnormal: exponent field 0, r = mant 2^(emin - mbits) */
        return sign | (uint8_t)(r / ldexp(1.0, emin - l.mbits));
    int mant = (int)(r / ldexp(1.0, e - l.mbits)) - (1 << l.mbits);
    return sign | (uint8_t)((e + l.bias) << l.mbits) | (uint8_t)mant;
}

float rt_fp8_decode(uint8_t q, bool e5m2)
{
    fp8_layout l = layout_of(e5m2);
    int field = (q & 0x7f) >> l.mbits, mant = q & ((1 << l.mbits) - 1);
    float sign = q & 0x80 ? -1.0f : 1.0f;
    int top = (1 << (7 - l.mbits)) - 1; /* the all-ones exponent field */
    if (e5m2 && field == top)
        return mant ? NAN : sign * INFINITY;
    if (!e5m2 && field == top && mant == (1 << l.mbits) - 1)
        return NAN;
    if (field == 0)
        return sign * ldexpf((float)mant, 1 - l.bias - l.mbits);
    return sign * ldexpf((float)((1 << l.mbits) + mant), field - l.bias - l.mbits);
}
