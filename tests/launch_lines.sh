#!/usr/bin/env bash
# launch_lines.sh MCC — `mcc compile` ends with how to start what it wrote on the world it was
# compiled for (tp x cp x dp x pp ranks: mpirun for CPU ranks; one rank, the plain command), and
# train_rank's start-up box shows that layout and world size; --world-size derives dp as Megatron
# does (the spec file's dp gives way with a note; a --dp that disagrees, or a world that is no
# multiple of tp x cp x pp, is refused with the arithmetic).
set -euo pipefail
mcc=$1
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
fail() { echo "FAIL: $*"; cat "$work/log"; exit 1; }
"$mcc" compile "$root/models/tiny-llama.json" --target cpu -o "$work/one" >"$work/log" 2>&1 || fail "compile"
tail -1 "$work/log" | grep -qxF "mcc: run it: $work/one --data-path PREFIX ..." || fail "one rank: no run line last"
"$mcc" compile "$root/models/tiny-llama.json" --target cpu --tp 2 --dp 2 -o "$work/four" >"$work/log" 2>&1 || fail "compile"
tail -2 "$work/log" | head -1 | grep -qxF "mcc: launch it on 4 ranks (tp 2 x cp 1 x dp 2 x pp 1), e.g.:" &&
  tail -1 "$work/log" | grep -qxF "  mpirun -np 4 $work/four --data-path PREFIX ..." || fail "tp 2 x dp 2: no launch lines last"
echo "ok: the run line of one rank and the launch lines of 4"
"$mcc" compile "$root/models/tiny-llama.json" --target cpu --tp 2 --world-size 4 -o "$work/world" >"$work/log" 2>&1 ||
  fail "compile --world-size 4"
grep -qF "mcc: note: parallel.world_size 4 over tp x cp x pp = 2 makes data_parallel_size 2 (the spec file's 1 gives way)" \
  "$work/log" && grep -qxF "mcc: launch it on 4 ranks (tp 2 x cp 1 x dp 2 x pp 1), e.g.:" "$work/log" ||
  fail "--tp 2 --world-size 4 did not make dp 2"
refused() { # MESSAGE FLAGS...
  local want=$1; shift
  ! "$mcc" compile "$root/models/tiny-llama.json" --target cpu "$@" -o "$work/x" >"$work/log" 2>&1 &&
    grep -qF -- "$want" "$work/log" || fail "$* was not refused with: $want"
}
refused "parallel.world_size (6) is not a multiple of tp x cp x pp = 2 x 1 x 2 = 4" --tp 2 --pp 2 --world-size 6
refused "--dp 1 disagrees with parallel.world_size (4): 4 ranks over tp x cp x pp = 2 make dp 2" --tp 2 --dp 1 --world-size 4
echo "ok: --world-size 4 at tp 2 makes dp 2; a world of 6 at tp 2 x pp 2 and a --dp that disagrees are refused"
"$mcc" data preprocess --input "$root/tests/data/numerics.txt" --output-prefix "$work/text" --append-eod >/dev/null 2>&1
mpirun -np 4 "$work/four" --data-path "$work/text_text_document" --train-iters 3 --eval-iters 0 >"$work/log" 2>&1 ||
  fail "the 4 ranks did not run"
grep -qE '^\| tp pp vp dp cp ep +\| +2 1 1 2 1 1 \|$' "$work/log" && grep -qE '^\| world size +\| +4 \|$' "$work/log" ||
  fail "the start-up box does not show tp 2 x dp 2 and 4 ranks"
echo "ok: the start-up box shows the layout and the world size"
