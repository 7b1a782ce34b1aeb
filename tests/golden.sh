#!/usr/bin/env bash
# golden.sh MCC — compares `mcc ir` dumps (tests/golden/cases.txt: a few whole plans after the
# last pass; what each pass does is CHECKed by tests/passes/) with the checked-in files in
# tests/golden/; on a difference prints a unified diff. Regenerate after an intended change with:
# scripts/update_golden.sh build/mcc
set -uo pipefail
MCC=$1
source "$(dirname "$0")/golden_cases.sh"
root=$(cd "$(dirname "$0")/.." && pwd)
status=0
check() {
  local name=$1 pass=$2 spec=$3; shift 3
  local want=$root/tests/golden/$name.$pass.ir
  if [ ! -f "$want" ]; then echo "missing golden file $want (run scripts/update_golden.sh)"; status=1; return; fi
  if ! "$MCC" ir "$spec" --target cpu --after "$pass" "$@" 2>/dev/null | diff -u "$want" - >/tmp/golden.$$.diff; then
    echo "golden mismatch: $name after $pass (regenerate with scripts/update_golden.sh if intended):"
    head -n 60 /tmp/golden.$$.diff; status=1
  fi
}
for_each_golden check
rm -f /tmp/golden.$$.diff
[ $status = 0 ] && echo "golden graphs match"
exit $status
