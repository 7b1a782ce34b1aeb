#!/usr/bin/env bash
# golden.sh MCC — compares `mcc ir MODEL --after PASS` for the tiny models with the checked-in
# dumps in tests/golden/; on a difference prints a unified diff. Regenerate after an intended
# change with: scripts/update_golden.sh build/mcc
set -uo pipefail
mcc=$1
root=$(cd "$(dirname "$0")/.." && pwd)
status=0
for model in tiny-gpt2 tiny-llama; do
  for pass in $("$mcc" ir --list-passes | awk '{print $1}'); do
    want=$root/tests/golden/$model.$pass.ir
    if [ ! -f "$want" ]; then echo "missing golden file $want (run scripts/update_golden.sh)"; status=1; continue; fi
    if ! "$mcc" ir "$root/models/$model.json" --target cpu --after "$pass" 2>/dev/null | diff -u "$want" - >/tmp/golden.$$.diff; then
      echo "golden mismatch: $model after $pass (regenerate with scripts/update_golden.sh if intended):"
      head -n 60 /tmp/golden.$$.diff; status=1
    fi
  done
done
rm -f /tmp/golden.$$.diff
[ $status = 0 ] && echo "golden graphs match"
exit $status
