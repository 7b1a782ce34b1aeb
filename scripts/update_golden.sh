#!/usr/bin/env bash
# update_golden.sh [MCC] — rewrites tests/golden/*.ir from the current compiler (review the diff!).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
MCC=${1:-$root/build/mcc}
source "$root/tests/golden_cases.sh"
write() {
  local name=$1 pass=$2 spec=$3; shift 3
  "$MCC" ir "$spec" --target cpu --after "$pass" "$@" > "$root/tests/golden/$name.$pass.ir" 2>/dev/null
}
rm -f "$root"/tests/golden/*.ir
for_each_golden write
echo "rewrote $(ls "$root"/tests/golden/*.ir | wc -l) files in tests/golden"
