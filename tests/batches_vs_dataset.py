#!/usr/bin/python3
"""batches_vs_dataset.py — checks the batches train_rank trained on against an independent
reading of the dataset.

  batches_vs_dataset.py --spec SPEC.json --data-prefix P --dump-dir D [--dump-dir D2 ...] --dp N
                        [--split S] -- FLAGS

P.bin/.idx are read by tests/megatron_indexed.py and cut into samples by
tests/megatron_gpt_dataset.py (numpy's RandomState, Megatron's index building in Python; nothing
of runtime/gpt_dataset.c). FLAGS are the spec flags mcc compiled with (micro and global batch,
vocabulary, dropout, and the train_rank flags baked with them: --dataloader-type,
--no-data-sharding), as tests/torch_ref.py takes them. Several --dump-dir are the runs of one
training in order, each resumed (--load) where the one before stopped. Two checks:

1. every micro-batch rank 0 dumped (batches.mcct: tokens.IT.MB, targets.IT.MB, [B, T]) holds the
   samples Megatron's sampler gives it (tests/megatron_sampler.py, its loader built where each
   run started): with --dataloader-type single row b of micro-batch mb of iteration it is sample
   (it-1)*global_batch + (mb*dp + 0)*B + b of the train split, with cyclic the one
   torch.randperm's order puts there; its tokens the sample's first T tokens and its targets the
   same tokens shifted by one;
2. the whole global batch of every iteration (every dp rank's share, which only rank 0's dump
   cannot show) replayed by torch_ref's float64 model from the first run's initial parameters
   gives the loss, lr and grad norm of each step in the runs' steps.txt (relative error <=
   --rtol): a rank that trained on other samples moves the mean loss. Dropout's masks follow
   each row's position, (it-1)*global_batch + m*B + b for micro-batch m = mb*dp + rank, whichever
   sample the sampler reads there.
Exit status 1 naming each failed check."""
import argparse
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import megatron_gpt_dataset  # noqa: E402
import megatron_sampler  # noqa: E402
import torch_ref  # noqa: E402
from megatron_indexed import read_sequences  # noqa: E402


def train_split(prefix, split, num_samples, seq_length, seed):
    """The train split of P as Megatron's GPTDataset orders it, for num_samples samples."""
    sequences = [np.array(s, dtype=np.int64) for s in read_sequences(prefix)]
    return megatron_gpt_dataset.build([megatron_gpt_dataset.IndexedDataset(sequences)], None, split,
                                      [num_samples, 0, 0], seq_length, seed)[0]


def which_sample(row, samples):
    """The index of the sample whose first len(row) tokens are row, or None."""
    hits = [i for i, s in enumerate(samples) if np.array_equal(s[:len(row)], row)]
    return hits[0] if hits else None


def sampler_order(c, dp, total, starts, n_steps):
    """{(it, mb, rank): [the B samples]} Megatron's sampler gives each rank for iterations 1..n_steps,
    a loader built at each run's start (starts: the iteration each run resumed after, 0 first)."""
    B, gb = c["micro_batch_size"], c["global_batch_size"]
    kind, sharding = c.get("dataloader_type", "single"), not c.get("no_data_sharding", False)
    accum, order = gb // (B * dp), {}
    for start, end in zip(starts, starts[1:] + [n_steps]):
        for rank in range(dp):
            count = (end - start) * accum
            batches = megatron_sampler.rank_batches(kind, sharding, total, start * gb, B, dp, rank, count)
            for k, batch in enumerate(batches):
                order[(start + 1 + k // accum, k % accum, rank)] = batch
    return order


def check_dumped(batches, samples, order, c, dp, n_steps):
    """Check 1 on rank 0's micro-batches: [(check, error, note)], error 0 or inf."""
    B, T, gb = c["micro_batch_size"], c["seq_length"], c["global_batch_size"]
    rows, accum = [], gb // (B * dp)
    want_names = {f"{k}.{it}.{mb}" for k in ("tokens", "targets") for it in range(1, n_steps + 1) for mb in range(accum)}
    for name in sorted(set(batches) ^ want_names):
        rows.append((f"batches.mcct: {name}", math.inf, "missing" if name in want_names else "unexpected"))
    for it in range(1, n_steps + 1):
        for mb in range(accum):
            tokens, targets = batches.get(f"tokens.{it}.{mb}"), batches.get(f"targets.{it}.{mb}")
            if tokens is None or targets is None:
                continue
            for b in range(B):
                want = order[(it, mb, 0)][b]
                got = which_sample(tokens[b], samples)
                name = f"iteration {it} micro-batch {mb} row {b}"
                note = f"is sample {got}, want {want}" if got is not None else f"is no sample's tokens, want {want}'s"
                rows.append((f"{name} tokens", 0.0 if np.array_equal(tokens[b], samples[want][:T]) else math.inf, note))
                shifted = np.array_equal(targets[b], samples[want][1:T + 1])
                rows.append((f"{name} targets", 0.0 if shifted else math.inf,
                             "" if shifted else "not the sample's tokens shifted by one"
                             + (" (they are the tokens)" if np.array_equal(targets[b], tokens[b]) else "")))
    return rows


def check_replay(init, dumped, samples, order, c, dp, n_steps):
    """Check 2: the global batches (all ranks') through torch_ref's model against the dumped steps."""
    B, T, gb = c["micro_batch_size"], c["seq_length"], c["global_batch_size"]
    whole = {}
    for it in range(1, n_steps + 1):
        for m in range(gb // B):  # torch_ref's single-rank order: micro-batch m is dp rank m % dp's
            rows = np.stack([samples[i] for i in order[(it, m // dp, m % dp)]]).astype(np.int32)
            whole[f"tokens.{it}.{m}"], whole[f"targets.{it}.{m}"] = rows[:, :T], rows[:, 1:]
    _, _, ref, _ = torch_ref.train(init, whole, n_steps, n_steps, c)
    out = []
    for (it, loss, lr, norm), (ref_loss, ref_lr, ref_norm, *_) in zip(dumped, ref):  # then the MoE report
        out.append((f"step {it} loss (all ranks' samples)", torch_ref.rel_err(loss, ref_loss), f"{loss:.7g} vs {ref_loss:.7g}"))
        out.append((f"step {it} lr", torch_ref.rel_err(lr, ref_lr, floor=c["lr"]), f"{lr:.7g} vs {ref_lr:.7g}"))
        out.append((f"step {it} grad_norm", torch_ref.rel_err(norm, ref_norm), f"{norm:.7g} vs {ref_norm:.7g}"))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spec", required=True)
    ap.add_argument("--data-prefix", required=True, help="the --data-path train_rank read (PREFIX.bin/.idx)")
    ap.add_argument("--dump-dir", required=True, action="append",
                    help="a run's --dump-dir; again for each resumed run after it, in order")
    ap.add_argument("--dp", type=int, required=True, help="the data-parallel size train_rank ran with")
    ap.add_argument("--split", default="969,30,1", help="train_rank's --split (its default, Megatron's)")
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("flags", nargs="*", help="after --: the spec flags mcc compiled with")
    a = ap.parse_args()
    c = torch_ref.load_config(a.spec, a.flags)
    dumped, starts, batches = [], [], {}
    for d in a.dump_dir:  # each run's steps follow the last one's
        starts.append(len(dumped))
        dumped += torch_ref.read_steps(os.path.join(d, "steps.txt"), first=len(dumped) + 1)
        batches.update(torch_ref.read_mcct(os.path.join(d, "batches.mcct")))
    n_steps = len(dumped)  # the runs' --train-iters: the train split is built for n_steps global batches
    ds = train_split(a.data_prefix, a.split, n_steps * c["global_batch_size"], c["seq_length"], c["seed"])
    samples = [ds[i] for i in range(len(ds))]
    order = sampler_order(c, a.dp, len(ds), starts, n_steps)
    init = torch_ref.read_mcct(os.path.join(a.dump_dir[0], "params_init.mcct"))
    rows = (check_dumped(batches, samples, order, c, a.dp, n_steps) +
            check_replay(init, dumped, samples, order, c, a.dp, n_steps))
    failed = torch_ref.report(rows, a.rtol, shown=8)
    if failed:
        print("FAIL: " + ", ".join(failed[:10]) + (f" and {len(failed) - 10} more" if len(failed) > 10 else ""))
        return 1
    print(f"PASS: {n_steps} steps of {c['global_batch_size']} samples at dp {a.dp} are Megatron's "
          f"({c.get('dataloader_type', 'single')} sampler{', no data sharding' if c.get('no_data_sharding') else ''}"
          f"{', resumed after ' + ', '.join(map(str, starts[1:])) if len(starts) > 1 else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
