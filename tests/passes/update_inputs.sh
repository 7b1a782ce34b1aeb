#!/usr/bin/env bash
# update_inputs.sh MCC [FILE.ir ...] — remakes the input module of each pass test (default all of
# tests/passes/*.ir) from its `; INPUT:` line (the flags of `mcc ir`, the spec relative to the
# repository), keeping the file's leading comment lines (the RUN and CHECK lines). Run it after an
# intended change to the IR text or to a pass before the one tested; then read the CHECK lines.
# A test without an INPUT line has a hand-written input (precision_bf16.ir: no pass runs before
# its pass) and is left as it is.
set -euo pipefail
mcc=$1; shift
root=$(cd "$(dirname "$0")/../.." && pwd)
[ $# -gt 0 ] || set -- "$root"/tests/passes/*.ir
for f in "$@"; do
  input=$(sed -n 's/^; INPUT: //p' "$f")
  [ -n "$input" ] || { echo "kept $f (no '; INPUT: SPEC FLAGS' line: a hand-written input)"; continue; }
  head=$(awk '!/^;/ {exit} {print}' "$f")
  # shellcheck disable=SC2086  # the line is the spec and its flags
  module=$(cd "$root" && "$mcc" ir $input 2>/dev/null)
  printf '%s\n\n%s\n' "$head" "$module" >"$f"
  echo "remade $f"
done
