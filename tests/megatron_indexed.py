"""megatron_indexed.py — an independent reader/writer of Megatron indexed datasets (MMIDIDX),
stdlib only, following megatron/core/datasets/indexed_dataset.py and tools/preprocess_data.py.

  expect --input F [--append-eod] [--json-key K] --expected PE --actual PA
      tokenizes F byte by byte by Megatron's rules, writes PE.bin/.idx (+ PE.tokens: the
      concatenated tokens as int32) and checks PA.bin/.idx, written by mcc, are byte-identical.
  synthetic --prefix P
      writes P_<dtype>.bin/.idx/.tokens for every integer dtype, to test the runtime reader.
"""
import argparse
import json
import struct
import sys

MAGIC = b"MMIDIDX\x00\x00"
# Megatron's DType codes and their struct formats (integer dtypes only).
DTYPES = {"uint8": (1, "B"), "int8": (2, "b"), "int16": (3, "h"), "int32": (4, "i"),
          "int64": (5, "q"), "uint16": (8, "H")}
EOD = 256  # byte-level tokenizer: bytes 0..255, end-of-document 256


class Builder:
    """Megatron's IndexedDatasetBuilder: add_item / add_document / finalize."""

    def __init__(self, dtype):
        self.code, self.fmt = DTYPES[dtype]
        self.data = bytearray()
        self.sequence_lengths = []
        self.document_indices = [0]

    def add_item(self, tokens):
        self.data += struct.pack("<%d%s" % (len(tokens), self.fmt), *tokens)
        self.sequence_lengths.append(len(tokens))

    def add_document(self, tokens, lengths):
        self.data += struct.pack("<%d%s" % (len(tokens), self.fmt), *tokens)
        self.sequence_lengths.extend(lengths)
        self.document_indices.append(len(self.sequence_lengths))

    def end_document(self):
        self.document_indices.append(len(self.sequence_lengths))

    def index_bytes(self):
        itemsize = struct.calcsize(self.fmt)
        pointers, ptr = [], 0
        for n in self.sequence_lengths:
            pointers.append(ptr)
            ptr += n * itemsize
        s, d = len(self.sequence_lengths), len(self.document_indices)
        return (MAGIC + struct.pack("<Q", 1) + struct.pack("<B", self.code)
                + struct.pack("<Q", s) + struct.pack("<Q", d)
                + struct.pack("<%di" % s, *self.sequence_lengths)
                + struct.pack("<%dq" % s, *pointers)
                + struct.pack("<%dq" % d, *self.document_indices))

    def write(self, prefix):
        with open(prefix + ".bin", "wb") as f:
            f.write(self.data)
        with open(prefix + ".idx", "wb") as f:
            f.write(self.index_bytes())
        fmt = "<%d%s" % (len(self.data) // struct.calcsize(self.fmt), self.fmt)
        tokens = struct.unpack(fmt, bytes(self.data))
        with open(prefix + ".tokens", "wb") as f:
            f.write(struct.pack("<%di" % len(tokens), *tokens))


def read_index(path):
    """Megatron's _IndexReader: the header fields and the three arrays."""
    with open(path, "rb") as f:
        raw = f.read()
    assert raw[:9] == MAGIC, "%s: bad magic %r" % (path, raw[:9])
    version, code, s, d = struct.unpack_from("<QBQQ", raw, 9)
    off = 9 + 8 + 1 + 8 + 8
    lengths = struct.unpack_from("<%di" % s, raw, off)
    pointers = struct.unpack_from("<%dq" % s, raw, off + 4 * s)
    docs = struct.unpack_from("<%dq" % d, raw, off + 12 * s)
    return {"version": version, "dtype_code": code, "sequence_count": s, "document_count": d,
            "sequence_lengths": lengths, "sequence_pointers": pointers, "document_indices": docs,
            "size": len(raw), "expected_size": off + 12 * s + 8 * d}


def documents(data, json_key):
    """The documents of a corpus as UTF-8 bytes: jsonl when the first non-space byte is '{',
    else plain text with paragraphs (runs of non-blank lines joined by newlines) as documents."""
    lines = data.split(b"\n")
    if data.lstrip()[:1] == b"{":
        return [json.loads(line)[json_key].encode("utf-8") for line in lines if line.strip()]
    docs, para = [], []
    for line in lines + [b""]:
        if line.strip():
            para.append(line)
        elif para:
            docs.append(b"\n".join(para))
            para = []
    return docs


def encode(doc, append_eod):
    """Megatron's Encoder.encode for one string without sentence splitting."""
    ids = list(doc)
    lens = [len(ids)] if ids else []
    if ids and append_eod:
        ids.append(EOD)
        lens[-1] += 1
    return ids, lens


def first_difference(expected_prefix, actual_prefix):
    e, a = read_index(expected_prefix + ".idx"), read_index(actual_prefix + ".idx")
    for field in e:
        if e[field] != a[field]:
            return "index field %s: expected %s, got %s" % (field, str(e[field])[:200], str(a[field])[:200])
    return "the .bin contents differ"


def cmd_expect(args):
    with open(args.input, "rb") as f:
        docs = documents(f.read(), args.json_key)
    builder = Builder("uint16")  # Megatron's optimal_dtype for vocab 257 < 65500
    for doc in docs:
        builder.add_document(*encode(doc, args.append_eod))
    builder.write(args.expected)
    for ext in (".idx", ".bin"):
        with open(args.expected + ext, "rb") as fe, open(args.actual + ext, "rb") as fa:
            if fe.read() != fa.read():
                print("MISMATCH %s%s vs %s%s: %s" % (args.actual, ext, args.expected, ext,
                                                   first_difference(args.expected, args.actual)))
                return 1
    idx = read_index(args.actual + ".idx")
    assert idx["size"] == idx["expected_size"], "trailing bytes in %s.idx" % args.actual
    print("OK %s: %d documents, %d sequences, %d tokens match Megatron's layout"
          % (args.actual, idx["document_count"] - 1, idx["sequence_count"], sum(idx["sequence_lengths"])))
    return 0


def cmd_synthetic(args):
    """Sequences of varied length, including empty ones (Megatron's add_item allows them)."""
    lengths = [5, 0, 13, 1, 7, 0, 30, 2]
    for name, (code, fmt) in DTYPES.items():
        lo, hi = {"uint8": (0, 255), "int8": (-3, 127), "int16": (0, 32767), "uint16": (0, 65535),
                  "int32": (0, 1 << 20), "int64": (0, 1 << 20)}[name]
        builder, i = Builder(name), 0
        for n in lengths:
            builder.add_item([lo + (j * 7919 + 3) % (hi - lo + 1) for j in range(i, i + n)])
            builder.end_document()
            i += n
        builder.write("%s_%s" % (args.prefix, name))
    return 0


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("expect")
    p.add_argument("--input", required=True)
    p.add_argument("--append-eod", action="store_true")
    p.add_argument("--json-key", default="text")
    p.add_argument("--expected", required=True)
    p.add_argument("--actual", required=True)
    p = sub.add_parser("synthetic")
    p.add_argument("--prefix", required=True)
    args = parser.parse_args()
    return {"expect": cmd_expect, "synthetic": cmd_synthetic}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
