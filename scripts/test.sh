#!/usr/bin/env bash
# test.sh — sets up and runs every test that needs no GPU. Two builds (tests/README.md): the
# sanitized one (ASan + UBSan, assertions on, -O1 as the sanitizers' documentation advises: half
# -O0's time) runs the suite; the end-to-end tests take the mcc of an unsanitized one (Release,
# assertions on: -O2 without NDEBUG), but for those that keep each axis under the sanitizers
# (tests/harness.cmake). Prints the time by test group and its own.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
bash scripts/deps.sh
jobs=$(nproc)
cmake -S . -B build-fast -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS_RELEASE=-O2 -DMCC_REQUIRE_MPI=ON >/dev/null
cmake --build build-fast -j"$jobs" --target mcc mcc-convert
# MPI required (the default, explicit here): a machine without it fails instead of dropping the layout tests
cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-g -O1" -DMCC_SANITIZE=ON -DMCC_REQUIRE_MPI=ON \
  -DMCC_FAST_BUILD="$PWD/build-fast" >/dev/null
cmake --build build-test -j"$jobs"
built=$(date +%s)
status=0
(cd build-test && ctest --output-on-failure -LE gpu -j"$jobs") 2>&1 | tee build-test/ctest.log || status=$?
end=$(date +%s)
python3 scripts/test_times.py build-test/ctest.log build-test || true
echo "test.sh: $((end - start)) s in all: $((built - start)) s setup and builds, $((end - built)) s tests ($jobs cores)"
exit $status
