/* sampler.c — Megatron's pretraining samplers (sampler.h) and the torch.randperm they shuffle with. */
#include "runtime/sampler.h"
#include "runtime/mt19937.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>

/* PyTorch's randperm_cpu (aten/src/ATen/native/TensorFactories.cpp) drawing from a Generator's
 * MT19937 (manual_seed: init_genrand of the seed's low 32 bits): for n below 2^32/20 Fisher-Yates
 * from the front, swapping r[i] with r[i + random() % (n - i)] (checked against torch 1.13 by
 * tests/megatron_sampler.py); above, PyTorch 2's inside-out variant with random64() (two outputs,
 * the first the high word) % (i + 1), as its source reads (torch 1.13 has no such branch). */
void rt_torch_randperm(int64_t n, uint32_t seed, int64_t *out)
{
    rt_mt mt;
    rt_mt_seed(&mt, seed);
    if (n < (int64_t)(UINT32_MAX / 20)) {
        for (int64_t i = 0; i < n; i++)
            out[i] = i;
        for (int64_t i = 0; i < n - 1; i++) {
            int64_t z = i + (int64_t)(rt_mt_next32(&mt) % (uint64_t)(n - i)), t = out[i];
            out[i] = out[z];
            out[z] = t;
        }
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        uint64_t hi = rt_mt_next32(&mt), lo = rt_mt_next32(&mt);
        int64_t z = (int64_t)((hi << 32 | lo) % (uint64_t)(i + 1));
        out[i] = i;
        out[i] = out[z];
        out[z] = i;
    }
}

bool rt_sampler_init(rt_sampler *s, rt_sampler_kind kind, bool sharding, int64_t total, int64_t start, int B, int dp,
                     char *err, size_t errlen)
{
    *s = (rt_sampler){.kind = kind, .sharding = sharding, .total = total, .start = start, .B = B, .dp = dp,
                      .perm_epoch = -1, .pass = -1};
    assert(total > 0 && B > 0 && dp > 0 && start >= 0 && start % ((int64_t)B * dp) == 0);
    if (kind == RT_SAMPLER_CYCLIC && total < (int64_t)B * dp)
        return snprintf(err, errlen, "--dataloader-type cyclic: the split has %lld samples, fewer than one micro-batch "
                                     "of every dp rank (%d x %d)", (long long)total, B, dp), false;
    return true;
}

void rt_sampler_free(rt_sampler *s)
{
    free(s->perm);
    s->perm = NULL;
}

/* The order of epoch e: torch.randperm(n) seeded with e, computed once per epoch. */
static const int64_t *epoch_order(rt_sampler *s, int64_t e, int64_t n)
{
    if (s->perm_epoch == e)
        return s->perm;
    if (!s->perm && !(s->perm = malloc(sizeof(int64_t) * (size_t)n))) {
        fprintf(stderr, "train_rank: error: out of memory for --dataloader-type cyclic's order of %lld samples\n",
                (long long)n);
        exit(1);
    }
    rt_torch_randperm(n, (uint32_t)e, s->perm);
    s->perm_epoch = e;
    s->perm_n = n;
    return s->perm;
}

/* Without sharding, each `for` over Megatron's loader (cyclic_iter starts the next when one ends)
 * is a pass of __iter__ from the sampler's count c of consumed samples: epoch c / active from
 * offset o = c % active, randperm(F)[o:] dealt to the ranks in turn, rank r's whole micro-batches
 * of its ceil((F - o - r) / dp) samples yielded, each adding B*dp to c. Where F > active a rank
 * may yield one round more than the epoch has, and its next pass starts past the epoch's end:
 * the ranks' passes differ, and where they start depends on the loader's `start`. Rounds of
 * rank r's pass from c: */
static int64_t pass_rounds(const rt_sampler *s, int64_t c, int rank)
{
    int64_t round = (int64_t)s->B * s->dp, active = s->total - s->total % round, F = s->total - s->total % s->B;
    return (F - c % active - rank + s->dp - 1) / s->dp / s->B; /* >= 1: F - o >= round */
}

/* The first count of the pass of rank `rank` that holds count c, walking from the loader's start
 * (or the pass found last). */
static int64_t unsharded_pass(rt_sampler *s, int64_t c, int rank)
{
    int64_t round = (int64_t)s->B * s->dp;
    if (s->pass < 0 || rank != s->pass_rank || c < s->pass) {
        s->pass = s->start;
        s->pass_rank = rank;
        s->pass_len = pass_rounds(s, s->pass, rank);
    }
    while (c >= s->pass + s->pass_len * round) {
        s->pass += s->pass_len * round;
        s->pass_len = pass_rounds(s, s->pass, rank);
    }
    return s->pass;
}

int64_t rt_sampler_sample(rt_sampler *s, int64_t position)
{
    assert(position >= s->start);
    if (s->kind == RT_SAMPLER_SINGLE)
        return position;
    int64_t round = (int64_t)s->B * s->dp, active = s->total - s->total % round;
    int64_t c = position - position % round; /* consumed before this position's round */
    int rank = (int)(position % round / s->B), row = (int)(position % s->B);
    if (s->sharding) { /* rank r's bucket r*S .. r*S+S-1; epoch c / active, at offset (c % active) / dp */
        int64_t bucket = active / s->dp;
        return rank * bucket + epoch_order(s, c / active, bucket)[c % active / s->dp + row];
    }
    int64_t pass = unsharded_pass(s, c, rank), j = (c - pass) / round; /* the pass's j-th micro-batch */
    const int64_t *order = epoch_order(s, pass / active, s->total - s->total % s->B);
    return order[pass % active + (j * s->B + row) * s->dp + rank];
}
