/* sampler.h — Megatron's pretraining samplers (megatron/training/datasets/data_samplers.py,
 * --dataloader-type): which sample of a split each consumed position reads.
 *
 * A position is the single sampler's index: a micro-batch round takes the next B*dp positions,
 * dp rank r the r-th B of them (rt_parallel_sample), so position p is row p % B of rank
 * (p % (B*dp)) / B in the round that starts after p - p % (B*dp) consumed samples.
 *   single  MegatronPretrainingSampler: position p reads sample p.
 *   cyclic  MegatronPretrainingRandomSampler: epochs of active = total - total % (B*dp) consumed
 *           samples, epoch e ordered by torch.randperm(.., torch.Generator().manual_seed(e)).
 *           With data sharding (Megatron's default) rank r draws from its own bucket, samples
 *           r*S .. r*S+S-1 (S = active/dp), in the order randperm(S) gives; without it one
 *           randperm of F = total - total % B samples is dealt to the ranks in turn. */
#ifndef MCC_RT_SAMPLER_H
#define MCC_RT_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { RT_SAMPLER_SINGLE, RT_SAMPLER_CYCLIC } rt_sampler_kind; /* ORDER --dataloader-type's choices */

typedef struct {
    rt_sampler_kind kind;
    bool sharding;       /* cyclic: a bucket per dp rank (Megatron's data_sharding) */
    int64_t total;       /* len(dataset): the samples the split has */
    int64_t start;       /* consumed samples when the loader was built: a resumed run's */
    int B, dp;           /* micro-batch size, data-parallel size */
    int64_t *perm;       /* cyclic: the order of epoch perm_epoch (perm_n samples), or NULL */
    int64_t perm_epoch, perm_n;
    int64_t pass, pass_len; /* unsharded: the pass (below) that held the last position asked, */
    int pass_rank;          /* its first round's consumed samples, rounds, and dp rank */
} rt_sampler;

/* A sampler of a split of total samples (> 0) for micro-batch B and data-parallel size dp, its
 * loader built after `start` consumed samples (a multiple of B*dp). False with a message in err
 * where cyclic has no whole round to shuffle (total < B*dp). */
bool rt_sampler_init(rt_sampler *s, rt_sampler_kind kind, bool sharding, int64_t total, int64_t start, int B, int dp,
                     char *err, size_t errlen);
/* The sample that position (>= start) reads: the position itself for single (below total:
 * train_rank builds the samples its run asks), for cyclic one in [0, total). A cyclic epoch's
 * order is computed when a position of that epoch is first asked (O(total) time and memory), then
 * kept. */
int64_t rt_sampler_sample(rt_sampler *s, int64_t position);
void rt_sampler_free(rt_sampler *s);

/* torch.randperm(n, generator=torch.Generator().manual_seed(seed)) on the CPU, into out[n]. */
void rt_torch_randperm(int64_t n, uint32_t seed, int64_t *out);

#endif
