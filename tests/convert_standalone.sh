#!/usr/bin/env bash
# convert_standalone.sh MCC MCC_CONVERT — mcc-convert is `mcc convert` without the compiler: it
# needs no LLVM and no NVRTC (its ELF NEEDED entries), and on a trained checkpoint its export
# (--to hf) and its import of that export (--from hf) are byte for byte mcc convert's, as are its
# errors.
set -euo pipefail
mcc=$1; conv=$2
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
fail() { echo "FAIL: $*"; exit 1; }
needed=$(readelf -d "$conv" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
if grep -qiE "llvm|nvrtc|cuda|pcre" <<<"$needed"; then fail "mcc-convert needs $needed"; fi
spec="$root/models/tiny-llama.json"
"$mcc" data preprocess --input "$root/tests/data/numerics.txt" --output-prefix "$work/text" --append-eod >/dev/null 2>&1
"$mcc" compile "$spec" --target cpu -o "$work/train" 2>"$work/c.log" || { cat "$work/c.log"; exit 1; }
"$work/train" --data-path "$work/text_text_document" --train-iters 2 --eval-iters 0 --save "$work/ck" >"$work/t.log" 2>&1 ||
  { cat "$work/t.log"; exit 1; }
"$mcc" convert --to hf "$work/ck" "$work/hf1" --spec "$spec"
"$conv" --to hf "$work/ck" "$work/hf2" --spec "$spec"
diff -r "$work/hf1" "$work/hf2" || fail "mcc-convert --to hf wrote other files than mcc convert"
"$mcc" convert --from hf "$work/hf1" "$work/back1"
"$conv" --from hf "$work/hf1" "$work/back2" --spec-out "$work/back2/spec.json"
for f in "$work/back1"/iter_*/rank_00000.safetensors "$work/back1/spec.json" "$work/back1/$(basename "$work"/back1/iter_*)/manifest.json"; do
  cmp "$f" "${f/back1/back2}" || fail "mcc-convert --from hf: ${f#"$work"/} differs from mcc convert's"
done
set +e
"$mcc" convert --to hf "$work/ck" "$work/x" --spec "$spec" --hidden-size 128 2>"$work/e1"; r1=$?
"$conv" --to hf "$work/ck" "$work/x" --spec "$spec" --hidden-size 128 2>"$work/e2"; r2=$?
set -e
[ "$r1" = 2 ] && [ "$r2" = 2 ] && diff "$work/e1" "$work/e2" || fail "the errors differ: $(cat "$work/e1" "$work/e2")"
"$conv" --help | grep -q "mcc convert --to hf" || fail "mcc-convert --help"
echo "mcc-convert (needs: $needed) exports and imports byte for byte as mcc convert does"
