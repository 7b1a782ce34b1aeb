"""megatron_gpt_dataset.py — an independent re-implementation of Megatron-LM's GPT dataset indices
in Python + numpy, following megatron/core/datasets (gpt_dataset.py, blended_dataset.py,
blended_megatron_dataset_builder.py, blended_megatron_dataset_config.py, utils.py) with the C++
helpers (build_sample_idx, build_blending_indices) ported line by line. Shuffles use
numpy.random.RandomState(seed), as Megatron does, so the samples are Megatron's.

  make --out DIR
      writes two small datasets DIR/a and DIR/b (.bin/.idx) and for each case DIR/CASE.case (its
      --data-path, --split, seq_length, seed and samples per split, and len() of each split) and
      DIR/CASE.SPLIT.tokens: the expected samples 0..N-1 of the split, int32 [N, seq_length+1].
"""
import argparse
import functools
import math
import os
import re
import sys

import numpy

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from megatron_indexed import Builder  # noqa: E402

SPLITS = ("train", "valid", "test")
SURPLUS = 0.005  # mid_level_dataset_surplus
COVERAGE = set()  # which final-epoch rules the cases exercised (a case set must hit both)


def normalize(weights):
    w = numpy.array(weights, dtype=numpy.float64)
    return (w / numpy.sum(w)).tolist()


def split_matrix(split):
    """parse_and_normalize_split + convert_split_vector_to_split_matrix (vector_b = vector_a)."""
    vector = list(map(float, re.findall(r"[.0-9]+", split)))
    vector = normalize(vector + [0.0] * (len(SPLITS) - len(vector)))
    ends = functools.reduce(lambda a, b: a + [a[len(a) - 1] + b], [[0], *vector])
    return [(lo, hi) if hi > lo else None for lo, hi in zip(ends[:-1], ends[1:])]


def build_sample_idx(sizes, document_index, seq_length, num_epochs, tokens_per_epoch, extra=1):
    """helpers.cpp build_sample_idx with drop_last_partial_sequence=True."""
    num_samples = (num_epochs * tokens_per_epoch - extra) // seq_length
    sample_idx = numpy.zeros((num_samples + 1, 2), dtype=numpy.int64)
    document_idx_index, doc_offset = 0, 0
    for i in range(1, num_samples + 1):
        remaining = seq_length + extra
        while remaining != 0:
            document_length = int(sizes[document_index[document_idx_index]]) - doc_offset
            remaining -= document_length
            if remaining <= 0:
                doc_offset += remaining + document_length - extra
                remaining = 0
            else:
                assert document_idx_index != len(document_index) - 1
                document_idx_index += 1
                doc_offset = 0
        sample_idx[i] = (document_idx_index, doc_offset)
    return sample_idx


def build_blending_indices(weights, num_datasets, size):
    """helpers.cpp build_blending_indices."""
    dataset_index = numpy.zeros(size, dtype=numpy.int16)
    dataset_sample_index = numpy.zeros(size, dtype=numpy.int64)
    current = [0] * num_datasets
    for i in range(size):
        x = max(float(i), 1.0)
        best, best_error = 0, weights[0] * x - float(current[0])
        for k in range(1, num_datasets):
            error = weights[k] * x - float(current[k])
            if error > best_error:
                best, best_error = k, error
        dataset_index[i], dataset_sample_index[i] = best, current[best]
        current[best] += 1
    return dataset_index, dataset_sample_index


def build_document_index(documents, num_epochs, rs, separate_final_epoch):
    if not separate_final_epoch or num_epochs == 1:
        document_index = numpy.mgrid[0:num_epochs, 0:len(documents)][1]
        document_index[:] = documents
        document_index = document_index.reshape(-1).astype(numpy.int32)
        rs.shuffle(document_index)
        return document_index
    first = build_document_index(documents, num_epochs - 1, rs, False)
    last = build_document_index(documents, 1, rs, False)
    return numpy.concatenate((first, last))


def build_shuffle_index(num_samples, total_size, rs):
    dtype = numpy.uint32 if total_size < numpy.iinfo(numpy.uint32).max - 1 else numpy.int64
    first = numpy.arange(0, num_samples, dtype=dtype)
    rs.shuffle(first)
    if num_samples == total_size:
        return first
    last = numpy.arange(num_samples, total_size, dtype=dtype)
    rs.shuffle(last)
    return numpy.concatenate((first, last))


class IndexedDataset:
    def __init__(self, sequences):
        self.sequences = sequences
        self.sequence_lengths = numpy.array([len(s) for s in sequences], dtype=numpy.int32)

    def get(self, idx, offset=0, length=None):
        seq = self.sequences[idx]
        return seq[offset:] if length is None else seq[offset:offset + length]


class GPTDataset:
    """GPTDataset._build_document_sample_shuffle_indices and _query_document_sample_shuffle_indices."""

    def __init__(self, dataset, indices, num_samples, seq_length, seed):
        self.dataset, self.seq_length = dataset, seq_length
        tokens_per_epoch = int(numpy.sum(dataset.sequence_lengths[indices]))
        num_epochs, num_tokens = 1, tokens_per_epoch
        while num_tokens < num_samples * seq_length + 1:
            num_epochs += 1
            num_tokens += tokens_per_epoch
        separate_final_epoch = False
        if num_epochs > 1:
            sans_final = ((num_epochs - 1) * tokens_per_epoch - 1) // seq_length
            from_final = num_samples - sans_final
            per_epoch = (tokens_per_epoch - 1) // seq_length
            assert 0 <= from_final <= per_epoch + 1
            separate_final_epoch = from_final < int(0.80 * per_epoch)
            COVERAGE.add(separate_final_epoch)
        rs = numpy.random.RandomState(seed)
        self.document_index = build_document_index(indices, num_epochs, rs, separate_final_epoch)
        self.sample_index = build_sample_idx(dataset.sequence_lengths, self.document_index, seq_length,
                                             num_epochs, tokens_per_epoch)
        total = self.sample_index.shape[0] - 1
        self.shuffle_index = build_shuffle_index(sans_final if separate_final_epoch else total, total, rs)

    def __len__(self):
        return self.sample_index.shape[0] - 1

    def __getitem__(self, idx):
        idx = self.shuffle_index[idx]
        beg, beg_offset = self.sample_index[idx]
        end, end_offset = self.sample_index[idx + 1]
        if beg == end:
            parts = [self.dataset.get(self.document_index[beg], beg_offset, end_offset - beg_offset + 1)]
        else:
            parts = [self.dataset.get(self.document_index[i], beg_offset if i == beg else 0,
                                      None if i < end else end_offset + 1) for i in range(beg, end + 1)]
        text = numpy.concatenate(parts).astype(numpy.int64)
        assert len(text) == self.seq_length + 1  # drop_last_partial_sequence: never padded
        return text


class BlendedDataset:
    def __init__(self, datasets, weights, size):
        self.datasets, self.size = datasets, size
        weights = normalize(weights)  # Megatron normalises a second time here
        self.dataset_index, self.dataset_sample_index = build_blending_indices(weights, len(datasets), size)

    def __len__(self):
        return self.size

    def __getitem__(self, idx):
        return self.datasets[self.dataset_index[idx]][self.dataset_sample_index[idx]]


def build(datasets, weights, split, sizes, seq_length, seed):
    """BlendedMegatronDatasetBuilder._build_blended_dataset_splits (a --data-path blend and --split)."""
    matrix = split_matrix(split)

    def indices(dataset, i):
        n = dataset.sequence_lengths.shape[0]
        return numpy.arange(int(round(matrix[i][0] * float(n))), int(round(matrix[i][1] * float(n))),
                            dtype=numpy.int32)

    # Megatron also builds splits nobody asked samples of (and hangs on an empty one): mcc skips them.
    matrix = [m if size else None for m, size in zip(matrix, sizes)]
    if weights is None:
        assert len(datasets) == 1
        return [GPTDataset(datasets[0], indices(datasets[0], i), sizes[i], seq_length, seed) if matrix[i] else None
                for i in range(len(SPLITS))]
    weights = normalize(weights)
    target = [[int(math.ceil(size * w)) for size in sizes] for w in weights]
    buffer = [[int(math.ceil(math.ceil(size * w) * (1 + SURPLUS))) for size in sizes] for w in weights]
    out = []
    for i in range(len(SPLITS)):
        if matrix[i] is None:
            out.append(None)
            continue
        mid = [GPTDataset(d, indices(d, i), buffer[k][i], seq_length, seed) for k, d in enumerate(datasets)]
        out.append(BlendedDataset(mid, weights, sum(target[k][i] for k in range(len(datasets)))))
    return out


def write_datasets(out):
    """a: 1000 uint16 sequences of 0..30 tokens (some empty); b: 60 int32 sequences of 1..25."""
    rng = numpy.random.RandomState(2024)
    specs = {"a": ("uint16", 1000, 0, 31, 60000), "b": ("int32", 60, 1, 26, 100000)}
    data = {}
    for name, (dtype, count, lo, hi, vocab) in specs.items():
        lengths = rng.randint(lo, hi, size=count)
        lengths[-1] = 25  # the last sequence alone makes a 949,50,1 test split
        builder, sequences = Builder(dtype), []
        for n in lengths:
            seq = rng.randint(0, vocab, size=n).tolist()
            builder.add_item(seq)
            builder.end_document()
            sequences.append(numpy.array(seq, dtype=numpy.int64))
        builder.write(os.path.join(out, name))
        data[name] = IndexedDataset(sequences)
    return data


# name: (--data-path values, --split, seq_length, seed, samples per split)
CASES = {
    "single": (["a"], "949,50,1", 16, 1234, [3000, 200, 20]),
    "blend": (["30", "a", "70", "b"], "90,10", 16, 77, [3000, 300, 50]),
    "blend3": (["2", "b", "5", "a", "3", "b"], "969,30,1", 7, 5, [2000, 100, 0]),
}


def cmd_make(args):
    data = write_datasets(args.out)
    for case, (paths, split, seq_length, seed, sizes) in CASES.items():
        weighted = len(paths) % 2 == 0
        names = paths[1::2] if weighted else paths
        weights = [float(w) for w in paths[0::2]] if weighted else None
        built = build([data[n] for n in names], weights, split, sizes, seq_length, seed)
        lens = []
        for i, name in enumerate(SPLITS):
            path = os.path.join(args.out, "%s.%s.tokens" % (case, name))
            if built[i] is None:
                lens.append(0)
                if os.path.exists(path):
                    os.remove(path)
                continue
            lens.append(len(built[i]))
            samples = numpy.stack([built[i][j] for j in range(sizes[i])]).astype("<i4")
            samples.tofile(path)
        with open(os.path.join(args.out, case + ".case"), "w") as f:
            f.write("data-path %s\n" % " ".join(os.path.join(args.out, p) if p in data else p for p in paths))
            f.write("split %s\nseq_length %d\nseed %d\nnum_samples %s\nlen %s\n"
                    % (split, seq_length, seed, " ".join(map(str, sizes)), " ".join(map(str, lens))))
        print("%s: len %s" % (case, lens))
    assert COVERAGE == {True, False}, "the cases must exercise both final-epoch rules, got %s" % COVERAGE
    return 0


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("make").add_argument("--out", required=True)
    args = parser.parse_args()
    return {"make": cmd_make}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
