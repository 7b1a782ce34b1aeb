# same_dumps.sh — sourced by the bitwise tests (recompute_bitwise.sh, fp8_fusion_bitwise.sh):
# same_dumps DIR REF NAME [WHAT]: every file run REF dumped in DIR/REF (--dump-dir: at least 5) is
# byte for byte run NAME's in DIR/NAME; a FAIL line names the file and WHAT (default NAME), and sets
# status=1.
same_dumps() {
  local dir=$1 ref=$2 name=$3 what=${4:-$3} n=0 f
  for f in "$dir/$ref"/*; do
    n=$((n + 1))
    cmp -s "$f" "$dir/$name/$(basename "$f")" || { echo "FAIL: $what: $(basename "$f") differs from $ref's"; status=1; }
  done
  [ $n -ge 5 ] || { echo "FAIL: $ref dumped $n files"; status=1; }
  echo "$what: $n dump files against $ref's"
}
