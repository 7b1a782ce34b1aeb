#!/usr/bin/env python3
"""tensorboard_read.py — reads the TensorBoard event file in a directory (train_rank's
--tensorboard-dir) without mcc's code. Debian 12 packages no TensorBoard reader (no
python3-tensorboard or TensorFlow; torch.utils.tensorboard needs the tensorboard package), so this
reads the format itself: TFRecord framing with both CRC-32Cs checked by a bitwise CRC, and the
Event / Summary / Value protobufs decoded from the wire format, every field checked for its number
and wire type.

  tensorboard_read.py DIR                 prints each scalar: tag<TAB>step<TAB>value
  tensorboard_read.py DIR --expect FILE   checks the scalars are FILE's lines (values as float32)
"""
import argparse
import math
import os
import re
import socket
import struct
import sys
import time

NAME = re.compile(r"events\.out\.tfevents\.(\d{10})\.(.+)\.(\d+)\.(\d+)$")


def fail(msg):
    sys.exit(f"tensorboard_read: FAIL: {msg}")


def crc32c(data):
    """CRC-32C bit by bit (reflected Castagnoli polynomial)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    """The data of each TFRecord: uint64 length, masked CRC of it, data, masked CRC of the data."""
    data = open(path, "rb").read()
    pos = 0
    while pos < len(data):
        header = data[pos:pos + 8]
        if len(data) - pos < 12:
            fail(f"{path}: {len(data) - pos} bytes at offset {pos} are not a record (a cut one?)")
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if length_crc != masked(crc32c(header)):
            fail(f"{path}: record at offset {pos}: bad length CRC")
        if pos + 16 + length > len(data):
            fail(f"{path}: record at offset {pos} of {length} bytes is cut at the end of the file")
        body = data[pos + 12:pos + 12 + length]
        (body_crc,) = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])
        if body_crc != masked(crc32c(body)):
            fail(f"{path}: record at offset {pos}: bad data CRC")
        yield pos, body
        pos += 16 + length


def varint(buf, pos):
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("a varint runs past the message")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def message(buf, schema, what):
    """{name: [values]} of a protobuf message; schema: field number -> (name, wire type, decode)."""
    out, pos = {}, 0
    while pos < len(buf):
        key, pos = varint(buf, pos)
        field, wire = key >> 3, key & 7
        if field not in schema or schema[field][1] != wire:
            raise ValueError(f"{what}: unexpected field {field} of wire type {wire}")
        if wire == 0:
            raw, pos = varint(buf, pos)
        else:
            size = {1: 8, 5: 4}.get(wire)
            if size is None:
                size, pos = varint(buf, pos)
            raw, pos = buf[pos:pos + size], pos + size
            if pos > len(buf):
                raise ValueError(f"{what}: field {field} runs past the message")
        name, _, decode = schema[field]
        out.setdefault(name, []).append(decode(raw))
    return out


def int64(v):
    return v - (1 << 64) if v >> 63 else v


VALUE = {1: ("tag", 2, lambda b: b.decode()), 2: ("simple_value", 5, lambda b: struct.unpack("<f", b)[0])}
SUMMARY = {1: ("value", 2, lambda b: message(b, VALUE, "Value"))}
EVENT = {1: ("wall_time", 1, lambda b: struct.unpack("<d", b)[0]), 2: ("step", 0, int64),
         3: ("file_version", 2, bytes), 5: ("summary", 2, lambda b: message(b, SUMMARY, "Summary"))}


def one(msg, name, default=None):
    values = msg.get(name, [default])
    if len(values) != 1 or values[0] is None:
        raise ValueError(f"wants one {name}, has {len(values)}")
    return values[0]


def scalars(path):
    """[(tag, step, value)] of the file, after checking its first record is the version record and
    its wall times are now's and never go back."""
    out, last_wall = [], 0.0
    for i, (pos, body) in enumerate(records(path)):
        try:
            event = message(body, EVENT, "Event")
            wall, step = one(event, "wall_time"), one(event, "step", 0)
            if i == 0:
                if one(event, "file_version") != b"brain.Event:2" or "summary" in event:
                    raise ValueError("the first record is not the version record brain.Event:2")
            else:
                if "file_version" in event:
                    raise ValueError("a second version record")
                for value in one(event, "summary").get("value", []):
                    out.append((one(value, "tag"), step, one(value, "simple_value")))
        except ValueError as e:
            fail(f"{path}: record {i} at offset {pos}: {e}")
        if not last_wall <= wall <= time.time() + 1 or wall < time.time() - 3600:
            fail(f"{path}: record {i}: wall time {wall} is not between the last record's and now")
        last_wall = wall
    return out


def as_float32(text):
    return struct.unpack("<f", struct.pack("<f", float(text)))[0]


def same(a, b):
    return a == b or (math.isnan(a) and math.isnan(b))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("dir")
    ap.add_argument("--expect", help="lines tag<TAB>step<TAB>value the file must hold, in order")
    args = ap.parse_args()
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value (RFC 3720, B.4)
    files = [f for f in sorted(os.listdir(args.dir)) if f.startswith("events.out.tfevents.")]
    if len(files) != 1:
        fail(f"{args.dir}: wants one events.out.tfevents.* file, has {files}")
    m = NAME.match(files[0])
    if not m or m.group(2) != socket.gethostname():
        fail(f"{files[0]}: not events.out.tfevents.<unix time>.{socket.gethostname()}.<pid>.<n>")
    path = os.path.join(args.dir, files[0])
    got = scalars(path)
    if not args.expect:
        for tag, step, value in got:
            print(f"{tag}\t{step}\t{value!r}")
        return
    want = [(tag, int(step), as_float32(value)) for tag, step, value in
            (line.rstrip("\n").split("\t") for line in open(args.expect))]
    if len(got) != len(want) or not all(g[:2] == w[:2] and same(g[2], w[2]) for g, w in zip(got, want)):
        fail(f"{path}: scalars\n  got  {got}\n  want {want}")
    print(f"tensorboard_read: {path}: {len(got)} scalars as expected")


if __name__ == "__main__":
    main()
