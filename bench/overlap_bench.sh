#!/usr/bin/env bash
# overlap_bench.sh — runs devrun/bin/overlap_bench (bench/overlap_bench.c) as two ranks on the
# GPU machine; arguments pass through (tokens hidden gemm_m gemm_n gemm_k). NCCL's log of which
# path each variant took goes to $OUT/overlap_bench.nccl.HOST.PID.log.
set -uo pipefail
source "$(dirname "$0")/device_env.sh"
export NCCL_COMM_ID=127.0.0.1:$((29600 + RANDOM % 200)) WORLD_SIZE=2
export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING,REG NCCL_DEBUG_FILE=$O/overlap_bench.nccl.%h.%p.log
RANK=1 timeout 120 devrun/bin/overlap_bench "$@" > "$O/overlap_bench.rank1.log" 2>&1 &
RANK=0 timeout 120 devrun/bin/overlap_bench "$@"
echo "overlap_bench exit $?"; wait
cat $O/overlap_bench.nccl.*.log | grep -iE "copy engine|symmetric|window|CTA policy" | sed "s/^[^ ]* //" | sort | uniq -c | sort -rn | head -12
