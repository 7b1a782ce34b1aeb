#!/usr/bin/env bash
# checkpoint_errors.sh MCC — each bad checkpoint gets its own message naming the file and what is
# wrong, exit status 1, and nothing trained (no crash under ASan/UBSan, no partial load): a rank
# file truncated, one byte of its header or of a tensor flipped (checksums), a rank file missing, a header rewritten to lie
# about its offsets with a matching checksum, another model's checkpoint, an unknown manifest
# version, a directory without manifest (a save that did not finish). A --load directory with no
# checkpoint at all is a warning, and the run starts from scratch (as Megatron does).
set -euo pipefail
mcc=$1
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
"$mcc" data preprocess --input "$root/tests/data/numerics.txt" --output-prefix "$work/text" --append-eod >/dev/null 2>&1
common=(--target cpu --vocab-size 260 --make-vocab-size-divisible-by 1)
"$mcc" compile "$root/models/tiny-gpt2.json" "${common[@]}" -o "$work/train" 2>"$work/c.log" || { cat "$work/c.log"; exit 1; }
"$mcc" compile "$root/models/tiny-gpt2.json" "${common[@]}" --hidden-size 48 -o "$work/other" 2>"$work/c.log" ||
  { cat "$work/c.log"; exit 1; }
flags=(--data-path "$work/text_text_document" --train-iters 4 --eval-iters 0)
"$work/train" "${flags[@]}" --save "$work/good" --exit-interval 2 >"$work/save.log" 2>&1 || { cat "$work/save.log"; exit 1; }
it="iter_0000002"
fails=0
# expect NAME EXE PATTERN... : a copy of the good checkpoint (bad.sh already changed it as NAME says)
expect() {
  local name=$1 exe=$2; shift 2
  set +e
  "$work/$exe" "${flags[@]}" --load "$work/bad" >"$work/$name.log" 2>&1
  local rc=$?
  set -e
  if [ "$rc" != 1 ]; then echo "FAIL: $name: exit status $rc, expected 1"; cat "$work/$name.log"; fails=$((fails + 1)); fi
  if grep -qE "AddressSanitizer|runtime error|iteration +1/" "$work/$name.log"; then
    echo "FAIL: $name: crashed or trained"; cat "$work/$name.log"; fails=$((fails + 1))
  fi
  for p in "$@"; do
    grep -qE -- "$p" "$work/$name.log" || { echo "FAIL: $name: no '$p' in:"; cat "$work/$name.log"; fails=$((fails + 1)); }
  done
  printf '%-22s %s\n' "$name" "$(grep -m1 'error' "$work/$name.log")"
}
fresh() { rm -rf "$work/bad"; cp -r "$work/good" "$work/bad"; }
rank="$work/bad/$it/rank_00000.safetensors"

fresh; truncate -s -100 "$rank"
expect truncated train "rank_00000.safetensors: [0-9]+ bytes, but .*rank_00000.json says [0-9]+: the file is truncated"
# a byte flipped in the header (byte 5000 of its JSON) and one in the last tensor's bytes: each
# checked against its own checksum of the rank record (the header's at open, a part's when read)
fresh; printf '\x55' | dd of="$rank" bs=1 seek=5000 conv=notrunc status=none
expect checksum-header train "rank_00000.safetensors: checksum mismatch in the header: .*the file is corrupt"
fresh; printf '\x55' | dd of="$rank" bs=1 seek=$(($(stat -c %s "$rank") - 3)) conv=notrunc status=none
expect checksum-tensor train "rank_00000.safetensors: checksum mismatch in tensor [a-z0-9._]+: .*the file is corrupt"
fresh; rm "$rank"
expect missing-rank-file train "rank_00000.safetensors: missing: .*rank 0's file is gone"
fresh; rm "$work/bad/$it/rank_00000.json"
expect missing-rank-record train "rank_00000.json: missing: .*rank 0's record is gone"
# a header that lies about its offsets, its checksums recomputed so only the header check can see it
fresh; /usr/bin/python3 - "$rank" "$work/bad/$it/rank_00000.json" <<'PY'
import json, struct, sys, zlib
path, rec = sys.argv[1:]
data = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", data[:8])[0]
h = json.loads(data[8:8 + n])
name = next(k for k in h if k != "__metadata__")
h[name]["data_offsets"][1] += 4
text = json.dumps(h, separators=(",", ":")).encode()
text += b" " * (n - len(text))
assert len(text) == n
data[8:8 + n] = text
open(path, "wb").write(data)
s = zlib.crc32(bytes(data))
r = json.load(open(rec)); r["crc32"] = "%016x" % s
r["header_crc32"] = "%016x" % zlib.crc32(bytes(data[:8 + n])); json.dump(r, open(rec, "w"))
PY
expect lying-header train "rank_00000.safetensors: tensor .*: .* makes [0-9]+ bytes, but data_offsets"
fresh
# another model: named by the field that differs (the manifest records the model's function)
expect other-model other "the checkpoint is of another model: hidden_size is 64 in the checkpoint but 48 in this plan"
fresh; sed -i 's/"version": 1/"version": 7/' "$work/bad/$it/manifest.json"
expect version train "manifest.json: unknown manifest version 7: this mcc reads version 1"
fresh; rm "$work/bad/$it/manifest.json"
expect no-manifest train "manifest.json: missing: the checkpoint is incomplete"
fresh; printf 'two' >"$work/bad/latest_checkpointed_iteration.txt"
expect bad-latest train "latest_checkpointed_iteration.txt: expected the iteration number alone"
# no checkpoint at all: a warning, and a run from scratch
mkdir -p "$work/empty"
"$work/train" "${flags[@]}" --load "$work/empty" >"$work/empty.log" 2>&1 || { cat "$work/empty.log"; exit 1; }
grep -q "warning: --load .*empty: no checkpoint found .*starting from scratch" "$work/empty.log" &&
  grep -q "iteration  *1/" "$work/empty.log" || { echo "FAIL: an empty --load directory"; cat "$work/empty.log"; fails=$((fails + 1)); }
[ "$fails" = 0 ] || { echo "$fails failures"; exit 1; }
echo "each bad checkpoint gets its own message"
