#!/usr/bin/env bash
# mpi_required.sh CMAKE CC — configuring mcc where MPI cannot be found fails, naming the packages
# to install: a machine without MPI must not pass a suite that silently lacks the layout tests.
set -uo pipefail
cmake=$1; cc=$2
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
out=$("$cmake" -S "$root" -B "$work" -DCMAKE_C_COMPILER="$cc" -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON 2>&1)
status=$?
fail() { printf '%s\n' "$out"; echo "FAIL: $*"; exit 1; }
[ $status != 0 ] || fail "cmake configured without MPI (MCC_REQUIRE_MPI should make it an error)"
grep -q "libopenmpi-dev openmpi-bin" <<<"$out" || fail "the error does not name the packages to install"
echo "configuring without MPI fails: ok"
