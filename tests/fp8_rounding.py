#!/usr/bin/python3
"""fp8_rounding.py TEST_BINARY — runtime/fp8.c against an enumeration of E4M3 and E5M2: every
finite value of each format listed from its bit fields, a float rounded by searching that list
for the nearest value (a tie to the even code), saturating at the largest finite value (and for
+-inf) as CUDA's __NV_SATFINITE conversion, NaN to 0x7f with the sign. Inputs: every value, every
midpoint (the ties) and the floats one ulp either side, subnormals, values past the largest, zeros,
infinities, NaN and random floats, each with both signs. Also every code's decoded value."""
import bisect
import math
import random
import struct
import subprocess
import sys

FORMATS = {"e4m3": (4, 3), "e5m2": (5, 2)}  # exponent and mantissa bits


def finite_values(fmt):
    """The non-negative finite values, in code order (codes 0..n-1, which is value order)."""
    ebits, mbits = FORMATS[fmt]
    bias = 2 ** (ebits - 1) - 1
    out = []
    for code in range(128):
        e, m = code >> mbits, code & (2 ** mbits - 1)
        if fmt == "e5m2" and e == 2 ** ebits - 1:
            break  # inf and NaNs
        if fmt == "e4m3" and e == 2 ** ebits - 1 and m == 2 ** mbits - 1:
            break  # E4M3's one NaN (no infinities)
        out.append(math.ldexp(m, 1 - bias - mbits) if e == 0 else math.ldexp(2 ** mbits + m, e - bias - mbits))
    return out


def expected(x, values):
    if math.isnan(x):
        return 0xFF if math.copysign(1, x) < 0 else 0x7F
    sign = 0x80 if math.copysign(1, x) < 0 else 0
    a = abs(x)
    if a >= values[-1]:
        return sign | (len(values) - 1)
    i = bisect.bisect_right(values, a) - 1  # values[i] <= a < values[i + 1]
    lo, hi = a - values[i], values[i + 1] - a
    code = i if lo < hi or (lo == hi and i % 2 == 0) else i + 1
    return sign | code


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def next_f32(x, up):
    b = bits(x)
    if x == 0:
        return struct.unpack("<f", struct.pack("<I", 1))[0] * (1 if up else -1)
    b += 1 if (x > 0) == up else -1
    return struct.unpack("<f", struct.pack("<I", b))[0]


def inputs():
    xs = [0.0, math.inf, math.nan, 1e30, 3.4e38, 1e-45, 1e-40]
    for fmt in FORMATS:
        v = finite_values(fmt)
        mids = [(a + b) / 2 for a, b in zip(v, v[1:])] + [v[-1] * 1.0625, v[-1] * 1.125, v[-1] * 2, v[1] / 2, v[1] / 4]
        for x in v + mids:
            x = f32(x)
            xs += [x, next_f32(x, True), next_f32(x, False)]
    rng = random.Random(1234)
    xs += [f32(math.ldexp(rng.uniform(1, 2), rng.randint(-24, 20))) for _ in range(20000)]
    return xs + [-x for x in xs]


def main():
    binary = sys.argv[1]
    xs = inputs()
    out = subprocess.run([binary], input="\n".join(f"{bits(x):08x}" for x in xs), capture_output=True, text=True,
                         check=True).stdout.split("\n")
    values = {fmt: finite_values(fmt) for fmt in FORMATS}
    bad = []
    for x, line in zip(xs, out):
        _, e4, e5 = line.split()
        for fmt, got in (("e4m3", int(e4, 16)), ("e5m2", int(e5, 16))):
            want = expected(x, values[fmt])
            if got != want:
                bad.append(f"{fmt}({x!r}) = 0x{got:02x}, want 0x{want:02x}")
    dec = subprocess.run([binary, "--decode"], capture_output=True, text=True, check=True).stdout.split("\n")
    for line in dec[:256]:
        code, *vals = line.split()
        q = int(code, 16)
        for fmt, got in zip(FORMATS, vals):
            got = float.fromhex(got)
            v = values[fmt]
            if (q & 0x7F) < len(v):
                want = math.copysign(v[q & 0x7F], -1 if q & 0x80 else 1)
            elif fmt == "e5m2" and (q & 0x7F) == 0x7C:
                want = math.copysign(math.inf, -1 if q & 0x80 else 1)
            else:
                want = math.nan
            if not (got == want or (math.isnan(got) and math.isnan(want))):
                bad.append(f"decode {fmt}(0x{q:02x}) = {got!r}, want {want!r}")
    if len(out) - 1 != len(xs):
        bad.append(f"{binary} printed {len(out) - 1} lines for {len(xs)} inputs")
    for b in bad[:20]:
        print("FAIL:", b)
    print(f"{len(xs)} inputs x 2 formats, 256 codes decoded: {len(bad)} wrong")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
