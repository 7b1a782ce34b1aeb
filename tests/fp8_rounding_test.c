/* fp8_rounding_test.c — runtime/fp8.c's conversions, printed for tests/fp8_rounding.py to check
 * against its own enumeration of both formats: with no argument, one line per float read from stdin
 * (its bits in hex) with its E4M3 and E5M2 codes; with --decode, every code's value in each format. */
#include "runtime/fp8.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--decode") == 0) {
        for (int q = 0; q < 256; q++)
            printf("%02x %a %a\n", q, (double)rt_fp8_decode((uint8_t)q, false), (double)rt_fp8_decode((uint8_t)q, true));
        return 0;
    }
    unsigned bits;
    while (scanf("%x", &bits) == 1) {
        float x;
        memcpy(&x, &bits, sizeof x);
        printf("%08x %02x %02x\n", bits, rt_fp8_encode(x, false), rt_fp8_encode(x, true));
    }
    return 0;
}
