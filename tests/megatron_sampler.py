#!/usr/bin/python3
"""megatron_sampler.py — Megatron's pretraining samplers in Python, shuffling with the real
torch.randperm: which sample of a split each dp rank's micro-batches read (--dataloader-type).

MegatronPretrainingSampler ('single') and MegatronPretrainingRandomSampler ('cyclic') below are
megatron/training/datasets/data_samplers.py's, the dataset and mpu taken out; the train loop
iterates the cyclic one through training.py's cyclic_iter, a new __iter__ each time one ends.
Nothing of runtime/sampler.c. tests/batches_vs_dataset.py takes rank_batches from here, and

  megatron_sampler.py check SAMPLER_TEST

compares tests/sampler_test.c's output (runtime/sampler.c) with this module over epochs, resumes
(a loader built mid-epoch and past an epoch's end), data sharding on and off, and splits whose
last micro-batches the cyclic sampler drops; and rt_torch_randperm with torch.randperm."""
import itertools
import subprocess
import sys

import torch


class MegatronPretrainingSampler:
    """data_samplers.py's, drop_last=True."""

    def __init__(self, total_samples, consumed_samples, micro_batch_size, data_parallel_rank, data_parallel_size):
        self.total_samples = total_samples
        self.consumed_samples = consumed_samples
        self.micro_batch_size = micro_batch_size
        self.data_parallel_rank = data_parallel_rank
        self.micro_batch_times_data_parallel_size = micro_batch_size * data_parallel_size
        assert self.total_samples > 0 and self.consumed_samples < self.total_samples

    def __iter__(self):
        batch = []
        for idx in range(self.consumed_samples, self.total_samples):
            batch.append(idx)
            if len(batch) == self.micro_batch_times_data_parallel_size:
                start_idx = self.data_parallel_rank * self.micro_batch_size
                yield batch[start_idx:start_idx + self.micro_batch_size]
                batch = []


class MegatronPretrainingRandomSampler:
    """data_samplers.py's (no RandomSeedDataset: GPT datasets are not wrapped in one)."""

    def __init__(self, total_samples, consumed_samples, micro_batch_size, data_parallel_rank, data_parallel_size,
                 data_sharding):
        self.total_samples = total_samples
        self.consumed_samples = consumed_samples
        self.micro_batch_size = micro_batch_size
        self.data_parallel_rank = data_parallel_rank
        self.data_parallel_size = data_parallel_size
        self.data_sharding = data_sharding
        self.micro_batch_times_data_parallel_size = self.micro_batch_size * data_parallel_size
        self.last_batch_size = self.total_samples % self.micro_batch_times_data_parallel_size
        assert self.total_samples > 0

    def __iter__(self):
        active_total_samples = self.total_samples - self.last_batch_size
        self.epoch = self.consumed_samples // active_total_samples
        current_epoch_samples = self.consumed_samples % active_total_samples
        assert current_epoch_samples % self.micro_batch_times_data_parallel_size == 0

        if self.data_sharding:
            bucket_size = (self.total_samples // self.micro_batch_times_data_parallel_size) * self.micro_batch_size
            bucket_offset = current_epoch_samples // self.data_parallel_size
            start_idx = self.data_parallel_rank * bucket_size

            g = torch.Generator()
            g.manual_seed(self.epoch)
            random_idx = torch.randperm(bucket_size, generator=g).tolist()
            idx_range = [start_idx + x for x in random_idx[bucket_offset:]]
        else:
            full_bucket_size = (self.total_samples // self.micro_batch_size) * self.micro_batch_size
            full_bucket_offset = current_epoch_samples
            g = torch.Generator()
            g.manual_seed(self.epoch)
            idx_range_total = torch.randperm(full_bucket_size, generator=g).tolist()
            idx_range_active = idx_range_total[full_bucket_offset:]
            idx_range = idx_range_active[self.data_parallel_rank::self.data_parallel_size]

        batch = []
        for idx in idx_range:
            batch.append(idx)
            if len(batch) == self.micro_batch_size:
                self.consumed_samples += self.micro_batch_times_data_parallel_size
                yield batch
                batch = []


def cyclic_iter(iterable):
    """training.py's: the loader again each time one pass ends."""
    while True:
        for x in iter(iterable):
            yield x


def rank_batches(kind, sharding, total, consumed, micro_batch, dp, rank, count):
    """The first `count` micro-batches (lists of sample indices) dp rank `rank` reads from a loader
    built after `consumed` samples of a split of `total`: Megatron's train iterator."""
    if kind == "single":
        it = iter(MegatronPretrainingSampler(total, consumed, micro_batch, rank, dp))
    elif kind == "cyclic":
        it = cyclic_iter(MegatronPretrainingRandomSampler(total, consumed, micro_batch, rank, dp, sharding))
    else:
        raise ValueError(f"--dataloader-type {kind}")
    return list(itertools.islice(it, count))


# (kind, sharding, total, start, micro_batch, dp, rounds): several epochs each; totals that leave a
# part round (dropped by the epoch) and, without sharding, ranks that read one micro-batch past the
# epoch's end (total 10 at B 1 x dp 4; 30 at B 2 x dp 4); loaders built mid-epoch and after it.
CASES = [("single", True, 50, 0, 2, 2, 10), ("single", False, 50, 8, 2, 2, 9)]
for sharding in (True, False):
    CASES += [("cyclic", sharding, 37, 0, 2, 2, 30), ("cyclic", sharding, 37, 12, 2, 2, 25),
              ("cyclic", sharding, 37, 48, 2, 2, 20), ("cyclic", sharding, 36, 0, 2, 2, 30),
              ("cyclic", sharding, 10, 0, 1, 4, 9), ("cyclic", sharding, 10, 8, 1, 4, 9),
              ("cyclic", sharding, 10, 4, 1, 4, 9), ("cyclic", sharding, 30, 0, 2, 4, 12),
              ("cyclic", sharding, 30, 24, 2, 4, 12), ("cyclic", sharding, 29, 8, 2, 4, 12),
              ("cyclic", sharding, 23, 0, 3, 1, 25), ("cyclic", sharding, 23, 21, 3, 1, 10),
              ("cyclic", sharding, 41, 6, 2, 3, 20), ("cyclic", sharding, 3001, 0, 4, 2, 800),
              ("cyclic", sharding, 3001, 2992, 4, 2, 400)]
RANDPERMS = [(1, 0), (2, 5), (7, 1), (100, 0), (1000, 3), (5000, 4294967295), (20000, 123456789)]


def check(exe):
    """Failures of exe (tests/sampler_test.c) against this module and torch.randperm."""
    failed = []
    for n, seed in RANDPERMS:
        got = subprocess.run([exe, "randperm", str(n), str(seed)], capture_output=True, text=True, check=True).stdout
        want = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
        if [int(x) for x in got.split()] != want:
            failed.append(f"randperm({n}) seeded {seed}: {got.split()[:8]}... want {want[:8]}...")
    for kind, sharding, total, start, B, dp, rounds in CASES:
        args = [kind, str(int(sharding)), str(total), str(start), str(B), str(dp), str(rounds)]
        out = subprocess.run([exe, "order"] + args, capture_output=True, text=True, check=True).stdout.splitlines()
        for rank in range(dp):
            want = [i for batch in rank_batches(kind, sharding, total, start, B, dp, rank, rounds) for i in batch]
            got = [int(x) for x in out[rank].split()] if rank < len(out) else []
            if got != want:
                at = next((k for k, (g, w) in enumerate(zip(got, want)) if g != w), min(len(got), len(want)))
                failed.append(f"{kind} sharding={sharding} total={total} start={start} B={B} dp={dp} rank {rank}: "
                              f"row {at} (round {at // B}) is {got[at:at + 4]}..., want {want[at:at + 4]}...")
    return failed


def main():
    if len(sys.argv) != 3 or sys.argv[1] != "check":
        sys.exit("usage: megatron_sampler.py check SAMPLER_TEST")
    failed = check(sys.argv[2])
    for f in failed:
        print("FAIL:", f)
    if not failed:
        print(f"PASS: {len(RANDPERMS)} randperms and {len(CASES)} sampler cases are torch's and Megatron's")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
