# cli_check.sh — sourced by the command-line tests (pp_schedule_cli.sh, pp_layout_cli.sh,
# schedule_memory.sh) after they set mcc: root, a work folder removed at exit, fail MESSAGE
# (counted in fails: the test ends `[ $fails -eq 0 ]`), and expect SUBSTRING -- ARGS...: mcc ARGS
# refused (exit 1 or 2, no crash) with SUBSTRING in its message.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
expect() {
  local want=$1; shift 2
  "$mcc" "$@" >"$work/err" 2>&1; local rc=$?
  if [ $rc -eq 0 ] || [ $rc -gt 2 ] || ! grep -qF -- "$want" "$work/err"; then
    fail "(exit $rc) mcc $*: wanted '$want', got: $(head -3 "$work/err")"
  fi
}
