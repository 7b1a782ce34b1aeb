#!/usr/bin/env bash
# test.sh — sets up and runs every test that needs no GPU, in a sanitized build (ASan + UBSan).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
# MPI required (the default, explicit here): a machine without it fails instead of dropping the layout tests
cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Debug -DMCC_SANITIZE=ON -DMCC_REQUIRE_MPI=ON >/dev/null
cmake --build build-test -j"$(nproc)"
cd build-test && ctest --output-on-failure -LE gpu -j"$(nproc)"
