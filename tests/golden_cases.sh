# golden_cases.sh — sourced by tests/golden.sh and scripts/update_golden.sh: for_each_golden CMD
# calls `CMD NAME PASS MODEL_JSON FLAGS...` for every dump listed in tests/golden/cases.txt.
for_each_golden() {
  local cmd=$1 root name model passes flags pass
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  while read -r name model passes flags; do
    case "$name" in ''|'#'*) continue ;; esac
    for pass in ${passes//,/ }; do
      # shellcheck disable=SC2086
      "$cmd" "$name" "$pass" "$root/models/$model.json" $flags
    done
  done < "$root/tests/golden/cases.txt"
}
