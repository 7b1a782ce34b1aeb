#!/usr/bin/env bash
# pass_test.sh FILECHECK MCC FILE.ir — a pass test (tests/passes/): runs each `; RUN:` line of
# FILE, in lit's form (`%s` is FILE; `mcc` and `FileCheck` are the tools given), e.g.
#   ; RUN: mcc opt %s --pass shard --rank 1 | FileCheck %s --check-prefix RANK1
# FILE is both the input module and the CHECK lines: the parser skips `;` comments and the
# printer writes none, so FileCheck sees only the pass's output.
set -euo pipefail
filecheck=$1 mcc_bin=$2 file=$3
mcc() { "$mcc_bin" "$@"; }
FileCheck() { "$filecheck" --dump-input=fail --dump-input-filter=error "$@"; }
runs=$(sed -n 's/^; RUN: //p' "$file")
[ -n "$runs" ] || { echo "FAIL: $file has no '; RUN:' line"; exit 1; }
while IFS= read -r run; do
  echo "RUN: $run"
  eval "${run//%s/\"$file\"}" || { echo "FAIL: $file: $run"; exit 1; }
done <<<"$runs"
