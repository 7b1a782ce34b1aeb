/* sampler_test.c — prints what runtime/sampler.c gives, for tests/megatron_sampler.py to compare
 * with Megatron's samplers and torch.randperm:
 *   sampler_test randperm N SEED                            rt_torch_randperm(N, SEED), one line
 *   sampler_test order single|cyclic SHARDING TOTAL START B DP ROUNDS
 *       a line per dp rank r: the samples of its ROUNDS micro-batches of B rows from a loader built
 *       after START consumed samples, row b of round k read at position START + (k*DP + r)*B + b */
#include "runtime/sampler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(void)
{
    fprintf(stderr, "usage: sampler_test randperm N SEED | order single|cyclic SHARDING TOTAL START B DP ROUNDS\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "randperm")) {
        int64_t n = atoll(argv[2]), *perm = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
        rt_torch_randperm(n, (uint32_t)strtoul(argv[3], NULL, 10), perm);
        for (int64_t i = 0; i < n; i++)
            printf("%lld%c", (long long)perm[i], i + 1 < n ? ' ' : '\n');
        free(perm);
        return 0;
    }
    if (argc != 9 || strcmp(argv[1], "order"))
        return usage();
    rt_sampler_kind kind = !strcmp(argv[2], "cyclic") ? RT_SAMPLER_CYCLIC : RT_SAMPLER_SINGLE;
    bool sharding = atoi(argv[3]);
    int64_t total = atoll(argv[4]), start = atoll(argv[5]);
    int B = atoi(argv[6]), dp = atoi(argv[7]), rounds = atoi(argv[8]);
    for (int r = 0; r < dp; r++) { /* a sampler each, as each rank's process has */
        rt_sampler s;
        char err[256];
        if (!rt_sampler_init(&s, kind, sharding, total, start, B, dp, err, sizeof err)) {
            printf("error: %s\n", err);
            return 1;
        }
        for (int k = 0; k < rounds; k++)
            for (int b = 0; b < B; b++)
                printf("%lld%c", (long long)rt_sampler_sample(&s, start + ((int64_t)k * dp + r) * B + b),
                       k + 1 < rounds || b + 1 < B ? ' ' : '\n');
        rt_sampler_free(&s);
    }
    return 0;
}
