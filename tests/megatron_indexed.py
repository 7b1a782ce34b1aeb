"""megatron_indexed.py — an independent reader/writer of Megatron indexed datasets (MMIDIDX),
stdlib only, following megatron/core/datasets/indexed_dataset.py and tools/preprocess_data.py.

  expect --input F [--append-eod] [--json-key K] [--tokenizer-type GPT2BPETokenizer --ids IDS]
         --expected PE --actual PA
      tokenizes F by Megatron's rules (ByteLevel: byte by byte; GPT2BPETokenizer: the ids in
      IDS, one JSON list a document), writes PE.bin/.idx (+ PE.tokens: the concatenated tokens
      as int32) and checks PA.bin/.idx, written by mcc, are byte-identical.
  reference --input F [--json-key K] --command CMD --out IDS
      writes IDS: the ids CMD prints for the documents of F, given as {"text": ...} lines.
  synthetic --prefix P
      writes P_<dtype>.bin/.idx/.tokens for every integer dtype, to test the runtime reader.
  corpus --cases C --out P
      writes P.jsonl and P.txt: documents stitched from the texts of C (and empty ones in
      P.jsonl), 300k characters: 7 of mcc's 64 KiB chunks as jsonl, 5 as text, so that each of
      4 workers gets one or more (the JavaScript references take 3 s to encode it).
"""
import argparse
import json
import random
import shlex
import struct
import subprocess
import sys

MAGIC = b"MMIDIDX\x00\x00"
# Megatron's DType codes and their struct formats (integer dtypes only).
DTYPES = {"uint8": (1, "B"), "int8": (2, "b"), "int16": (3, "h"), "int32": (4, "i"),
          "int64": (5, "q"), "uint16": (8, "H")}
# Per tokenizer: vocab size (Megatron's tokenizer.vocab_size) and end-of-document id.
# TikTokenizer and HuggingFaceTokenizer: the test vocabularies tests/tokenizer.cmake runs them with
# (cl100k's ranks after Megatron's 1000 special ids, </s> = 2; bpe_files.js's llama3_style).
TOKENIZERS = {"ByteLevel": (257, 256), "GPT2BPETokenizer": (50257, 50256), "TikTokenizer": (101256, 2),
              "HuggingFaceTokenizer": (100259, 100257)}


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


def read_sequences(prefix):
    """The token sequences of PREFIX.bin/.idx as lists, read through the index's dtype, lengths and
    pointers (byte offsets into the .bin)."""
    idx = read_index(prefix + ".idx")
    fmt = {code: f for code, f in DTYPES.values()}[idx["dtype_code"]]
    with open(prefix + ".bin", "rb") as f:
        data = f.read()
    return [list(struct.unpack_from("<%d%s" % (n, fmt), data, ptr))
            for n, ptr in zip(idx["sequence_lengths"], idx["sequence_pointers"])]


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


def tokenize(docs, args):
    """The ids of each document: its bytes (ByteLevel), or those of the --ids file."""
    if args.tokenizer_type == "ByteLevel":
        return [list(doc) for doc in docs]
    with open(args.ids) as f:
        ids = [json.loads(line) for line in f]
    assert len(ids) == len(docs), "%s has %d id lists for %d documents" % (args.ids, len(ids), len(docs))
    return ids


def cmd_reference(args):
    with open(args.input, "rb") as f:
        docs = documents(f.read(), args.json_key)
    lines = "".join(json.dumps({"text": doc.decode("utf-8")}) + "\n" for doc in docs)
    out = subprocess.run(shlex.split(args.command), input=lines.encode(), stdout=subprocess.PIPE, check=True)
    with open(args.out, "wb") as f:
        f.write(out.stdout)
    return 0


def encode(ids, append_eod, eod):
    """Megatron's Encoder.encode for one string without sentence splitting."""
    lens = [len(ids)] if ids else []
    if ids and append_eod:
        ids = ids + [eod]
        lens[-1] += 1
    return ids, lens


def optimal_dtype(vocab_size):
    """Megatron's DType.optimal_dtype."""
    return "uint16" if vocab_size < 65500 else "int32"


def first_difference(expected_prefix, actual_prefix):
    e, a = read_index(expected_prefix + ".idx"), read_index(actual_prefix + ".idx")
    for field in e:
        if e[field] != a[field]:
            return "index field %s: expected %s, got %s" % (field, str(e[field])[:200], str(a[field])[:200])
    return "the .bin contents differ"


def cmd_expect(args):
    with open(args.input, "rb") as f:
        docs = documents(f.read(), args.json_key)
    vocab_size, eod = TOKENIZERS[args.tokenizer_type]
    builder = Builder(optimal_dtype(vocab_size))
    for ids in tokenize(docs, args):
        builder.add_document(*encode(ids, args.append_eod, eod))
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


def cmd_corpus(args):
    """Documents of 1..8 pieces: the hard cases, cut at random code points, and plain words."""
    with open(args.cases, encoding="utf-8") as f:
        cases = [json.loads(line)["text"] for line in f]
    words = ["the", " quick", " brown", " fox", "'s", " 42", ",", " \u00e9t\u00e9", " \u4e2d\u6587", "\U0001F600", "  ", "\n"]
    rng = random.Random(5)
    docs = ["A plain-text corpus: its first character must not be '{'."]
    size = 0
    while size < 300_000:
        pieces = []
        for _ in range(rng.randint(1, 8)):
            c = rng.choice(cases)
            a = rng.randint(0, len(c))
            pieces.append(c[a:a + rng.randint(0, 400)] if rng.random() < 0.5 else rng.choice(words))
        docs.append("".join(pieces))
        size += len(docs[-1])
    for i in range(0, len(docs), 97):
        docs[i] = ""
    with open(args.out + ".jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"text": d}) + "\n" for d in docs)
    with open(args.out + ".txt", "w", encoding="utf-8") as f:
        f.writelines(d + "\n\n" for d in docs if d.strip())
    return 0


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("expect")
    p.add_argument("--input", required=True)
    p.add_argument("--append-eod", action="store_true")
    p.add_argument("--json-key", default="text")
    p.add_argument("--tokenizer-type", choices=sorted(TOKENIZERS), default="ByteLevel")
    p.add_argument("--ids", help="GPT2BPETokenizer: the ids of each document, one JSON list a line")
    p.add_argument("--expected", required=True)
    p.add_argument("--actual", required=True)
    p = sub.add_parser("synthetic")
    p.add_argument("--prefix", required=True)
    p = sub.add_parser("reference")
    p.add_argument("--input", required=True)
    p.add_argument("--json-key", default="text")
    p.add_argument("--command", required=True)
    p.add_argument("--out", required=True)
    p = sub.add_parser("corpus")
    p.add_argument("--cases", required=True)
    p.add_argument("--out", required=True)
    args = parser.parse_args()
    return {"expect": cmd_expect, "synthetic": cmd_synthetic, "corpus": cmd_corpus, "reference": cmd_reference}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
