#!/usr/bin/env bash
# data_safety.sh MCC — bad input and interruptions lose no data and crash nothing:
# (1) a failed `mcc data preprocess` (bad jsonl line, empty input, missing key, SIGTERM) leaves
#     the dataset already at its prefix byte-identical and no temporary file behind;
# (2) train_rank refuses a damaged .idx/.bin pair (trailing bytes, another dataset's .bin) and
#     token ids outside the vocabulary (a negative one, one too large), naming the file, with
#     exit status 1;
# (3) --split: a zero valid share turns validation off with a warning, a zero train share and
#     malformed text are errors naming --split;
# (4) the sample indices' memory is said before building; what cannot fit is refused at once;
# (5) --workers through the checked parser.
set -uo pipefail
mcc=$1
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cd "$work"
# expect RC NEEDLE CMD...: CMD exits with RC (never a signal) and its stderr holds NEEDLE.
expect() {
  local rc=$1 needle=$2; shift 2
  "$@" > out.log 2> err.log; local got=$?
  [ "$got" = "$rc" ] || fail "$* exited $got, want $rc: $(tail -2 err.log)"
  grep -qF -- "$needle" err.log || fail "$*: stderr lacks '$needle': $(tail -2 err.log)"
}

for d in $(seq 300); do echo "the cat sees a dog, document $d."; echo; done > corpus.txt
"$mcc" data preprocess --input corpus.txt --output-prefix c --append-eod 2>/dev/null || fail "preprocess"
cp c_text_document.bin good.bin; cp c_text_document.idx good.idx
same() { cmp -s c_text_document.bin good.bin && cmp -s c_text_document.idx good.idx || fail "$1 changed the dataset"
         [ -z "$(ls | grep '\.tmp\.')" ] || fail "$1 left $(ls | grep '\.tmp\.')"; }

# (1) failures keep the dataset
printf '{"text": "fine"}\n{"text": "cut\n' > bad.jsonl
expect 1 "bad.jsonl line 2: bad JSON" "$mcc" data preprocess --input bad.jsonl --output-prefix c; same "a bad jsonl line"
: > empty.txt
expect 1 "empty output, nothing written" "$mcc" data preprocess --input empty.txt --output-prefix c; same "an empty input"
printf '{"body": "x"}\n' > nokey.jsonl
expect 1 'missing key "text"' "$mcc" data preprocess --input nokey.jsonl --output-prefix c; same "a missing key"
# SIGTERM mid-run: the temporaries go, the dataset stays
for i in $(seq 400000); do echo "more text for a long run, line $i"; done > big.txt
"$mcc" data preprocess --input big.txt --output-prefix c 2>/dev/null & pid=$!
for i in $(seq 200); do ls | grep -q '\.tmp\.' && break; sleep 0.02; done
kill -TERM $pid; wait $pid; rc=$?
[ "$rc" = 143 ] || [ "$rc" = 0 ] || fail "preprocess under SIGTERM exited $rc"
[ "$rc" = 143 ] && same "SIGTERM"
# a good run replaces it, leaving no temporary
printf '{"text": "new"}\n' > new.jsonl
"$mcc" data preprocess --input new.jsonl --output-prefix n 2>/dev/null || fail "preprocess new"
"$mcc" data preprocess --input new.jsonl --output-prefix c 2>/dev/null || fail "preprocess over c"
cmp -s c_text_document.bin n_text_document.bin && [ -z "$(ls | grep '\.tmp\.')" ] || fail "replacing c"
cp good.bin c_text_document.bin; cp good.idx c_text_document.idx

"$mcc" compile "$root/models/tiny-gpt2.json" --target cpu --train-iters 2 -o tr 2>/dev/null || fail "compile"
# (2) damaged pairs
cp good.idx t.idx; cp good.bin t.bin; printf '\0\0\0\0\0\0\0\0' >> t.idx
expect 1 "t.idx: 8 trailing bytes after the document index" ./tr --data-path t
cp good.idx o.idx; cp n_text_document.bin o.bin
expect 1 "o.bin is 6 bytes, but" ./tr --data-path o
grep -qF "mcc data preprocess" err.log || fail "the .bin message does not say to rerun mcc data preprocess"
# token ids outside the vocabulary: a negative one (int32 data) and one of the vocab size or more
/usr/bin/python3 - <<'PY'
import struct
def write(prefix, tokens):  # Megatron's MMIDIDX v1, int32 tokens, one document of one sequence
    open(prefix + ".bin", "wb").write(struct.pack(f"<{len(tokens)}i", *tokens))
    open(prefix + ".idx", "wb").write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 4, 1, 2) +
                                      struct.pack("<i", len(tokens)) + struct.pack("<q", 0) + struct.pack("<2q", 0, 1))
write("neg", [5, -3] * 200)
write("big", [5, 100000] * 200)
PY
expect 1 "neg.bin: sequence 0 holds the negative token id -3" ./tr --data-path neg
grep -q -- "-2147483648\|2147483647" err.log && fail "the negative id's message overflowed: $(cat err.log)"
expect 1 "big.bin: sequence 0 holds token id 100000 but the model's vocabulary is 384" ./tr --data-path big
grep -qF -- "--vocab-size 100001 or more" err.log || fail "no fix for a large id: $(cat err.log)"

# (3) --split
expect 0 "warning: no validation (--split 100,0,0 gives the valid split no share" ./tr --data-path c_text_document --split 100,0,0
grep -q "^ *validation loss" out.log && fail "100,0,0 validated"
expect 1 "--split 0,1,0 gives the train split no share of the data" ./tr --data-path c_text_document --split 0,1,0
for bad in a,b 1,2,3,4 -1,2,3 ""; do expect 1 "--split" ./tr --data-path c_text_document --split "$bad"; done

# (4) one line before building; 10^9 iterations of 8 samples do not fit and are refused at once
expect 0 "data: building the sample indices for 16 train, 800 valid samples" ./tr --data-path c_text_document
[ "$(grep -c 'data: building' err.log)" = 1 ] || fail "want one line on the indices"
SECONDS=0
expect 1 "--train-iters: the sample indices for 8000000000 train samples need" ./tr --data-path c_text_document --train-iters 1000000000
grep -q "of memory; lower --train-iters" err.log || fail "memory refusal: $(cat err.log)"
[ "$SECONDS" -lt 10 ] || fail "the refusal took $SECONDS s"

# (5) --workers
expect 1 "--workers expects an integer in 1..1024, got 'abc'" "$mcc" data preprocess --input new.jsonl --output-prefix w --workers abc
expect 1 "--workers 0 is out of range" "$mcc" data preprocess --input new.jsonl --output-prefix w --workers 0
echo "data safety ok"
