#!/usr/bin/env bash
# run.sh FUZZER SEEDS SECONDS WORK — one fuzz test (tests/fuzz.cmake): FUZZER for SECONDS from the
# seed corpus SEEDS, the inputs it finds kept in WORK/corpus (emptied first: each run starts from the
# seeds). libFuzzer exits non-zero on a crash, a sanitizer's report, a leak, an input that runs
# over 10 s or a process over 2 GiB, and writes the input to WORK/ (crash-*, leak-*, timeout-*,
# oom-*); rerun it with `FUZZER WORK/crash-...`. The target's own output (stdout, stderr) is
# discarded; libFuzzer's and the sanitizers' reports are not.
set -euo pipefail
fuzzer=$1 seeds=$2 seconds=$3 work=$4
rm -rf "$work"
mkdir -p "$work/corpus"
exec "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -close_fd_mask=3 \
  -artifact_prefix="$work/" -print_final_stats=1 "$work/corpus" "$seeds"
