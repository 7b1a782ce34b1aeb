#!/usr/bin/env bash
# test.sh — sets up and runs every test that needs no GPU, in a sanitized build (ASan + UBSan).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Debug -DMCC_SANITIZE=ON >/dev/null
cmake --build build-test -j"$(nproc)"
cd build-test && ctest --output-on-failure -LE gpu -j"$(nproc)"
