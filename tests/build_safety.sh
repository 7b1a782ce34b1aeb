#!/usr/bin/env bash
# build_safety.sh CASE MCC [BUILD_DIR] — what `mcc compile` writes, and how:
#   quote        an output name with quotes and shell text links (no shell runs the linker)
#   full-disk    a file size limit while the object or the executable is written: exit 1 naming
#                the output, no signal, no partial file, an existing output left as it was
#   nvrtc-cache  a cold NVRTC cache says it compiles the kernels; a warm one says nothing
#   install      `cmake --install BUILD_DIR` gives an mcc that works from a copy of its prefix
set -uo pipefail
case_=$1 mcc=$2
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
tiny=$root/models/tiny-gpt2.json
fail() { echo "FAIL: $*"; exit 1; }

case $case_ in
quote)
  mkdir "$work/run" && cd "$work/run"
  out="$work/it's a \"train\" \$(touch pwned)"
  "$mcc" compile "$tiny" --target cpu -o "$out" >"$work/log" 2>&1 || { cat "$work/log"; fail "mcc compile -o \"$out\" failed"; }
  [ ! -e pwned ] && [ ! -e "$work/pwned" ] || fail "the output name ran shell text (a 'pwned' file appeared)"
  "$out" --print-plan >"$work/plan" 2>&1 || fail "the executable does not run"
  grep -q "^config {" "$work/plan" || fail "--print-plan printed no plan"
  [ "$(ls -A "$work" | wc -l)" -eq 4 ] || fail "temporary files left: $(ls -A "$work")" # run log plan and the output
  echo "ok: linked and ran $out"
  ;;
full-disk)
  # 8 KiB: the plan object (about 50 KiB) cannot be written; 256 KiB: it can, the executable
  # (megabytes) cannot. bash's ulimit -f counts KiB; SIGXFSZ ignored, so writes fail with EFBIG.
  for limit in 8 256; do
    printf 'an earlier train_rank\n' >"$work/train_rank"
    bash -c 'trap "" XFSZ; ulimit -f "$1"; shift; exec "$@"' _ "$limit" \
      "$mcc" compile "$tiny" --target cpu -o "$work/train_rank" >"$work/log" 2>&1; rc=$?
    want=$([ "$limit" = 8 ] && echo "writing its plan object" || echo "the linker")
    [ $rc -eq 1 ] || { cat "$work/log"; fail "ulimit -f $limit: exit $rc, wanted 1 (no signal)"; }
    grep -qF "mcc: error: cannot write $work/train_rank: $want" "$work/log" || { cat "$work/log"; fail "ulimit -f $limit: the error does not name the output and what failed ($want)"; }
    grep -q "File too large" "$work/log" || { cat "$work/log"; fail "ulimit -f $limit: the reason is not given"; }
    [ "$(cat "$work/train_rank")" = "an earlier train_rank" ] || fail "ulimit -f $limit: the existing output was changed"
    [ "$(ls -A "$work")" = "$(printf 'log\ntrain_rank')" ] || fail "ulimit -f $limit: partial files left: $(ls -A "$work")"
    echo "ok: ulimit -f $limit: $(grep -o 'cannot write.*' "$work/log" | head -1 | cut -c1-120)"
  done
  ;;
nvrtc-cache)
  export MCC_CACHE_DIR=$work/cache
  # Under ASan (the suite's build) NVRTC's own allocations, not instrumented code, take most of the
  # cold compile: ASan records a stack for each, which only its reports use. Without them the cold
  # compile takes a fifth less; every check ASan makes is still made. (Options given win.)
  export ASAN_OPTIONS="malloc_context_size=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
  for pass in cold warm; do
    "$mcc" compile "$tiny" --target cuda -o "$work/train_rank" >"$work/log" 2>&1 || { cat "$work/log"; fail "$pass compile failed"; }
    if [ $pass = cold ]; then
      grep -q "mcc: compiling [0-9]* CUDA kernel templates with NVRTC .*cached as $work/cache/" "$work/log" &&
        grep -q "mcc: compiled the CUDA kernels in [0-9.]* s" "$work/log" || { cat "$work/log"; fail "a cold cache compiled silently"; }
    else
      ! grep -q "compil.* CUDA kernel" "$work/log" || { cat "$work/log"; fail "a warm cache compiled the kernels again"; }
    fi
    echo "ok: $pass cache"
  done
  # hand the cubin to the default cache (its name is the hash of the sources and options, so it
  # is the entry mcc would write there): the suite's other --target cuda compiles then skip their
  # own cold compile, a minute and a half each on CI's two cores
  shared=${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/mcc
  mkdir -p "$shared" && for f in "$work"/cache/kernels-*.cubin; do # renamed into place whole, as mcc writes it
    [ -e "$shared/${f##*/}" ] || { cp "$f" "$shared/${f##*/}.$$.tmp" && mv "$shared/${f##*/}.$$.tmp" "$shared/${f##*/}"; }
  done
  ;;
install)
  build=$3
  cmake --install "$build" --prefix "$work/prefix" >"$work/log" 2>&1 || { cat "$work/log"; fail "cmake --install failed"; }
  # A copy of the prefix, the original gone: mcc must find its libraries from where it is.
  cp -a "$work/prefix" "$work/moved" && rm -rf "$work/prefix"
  mkdir "$work/elsewhere" && cp "$tiny" "$work/elsewhere/spec.json" && cd "$work/elsewhere"
  "$work/moved/bin/mcc" compile spec.json --target cpu -o t >"$work/log" 2>&1 || { cat "$work/log"; fail "the installed mcc cannot compile"; }
  ./t --print-plan >plan 2>&1 && grep -q "^config {" plan || fail "the train_rank the installed mcc wrote does not run"
  [ -f "$work/moved/share/mcc/models/tiny-gpt2.json" ] || fail "the model specs are not installed"
  echo "ok: an installed (and moved) mcc compiles from another directory"
  ;;
*) fail "unknown case $case_" ;;
esac
