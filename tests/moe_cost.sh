#!/usr/bin/env bash
# moe_cost.sh MCC — the cost model's numbers for tiny-moe at ep 2 x dp 2, each computed here again
# from the spec: `mcc schedule`'s MoE layer forward FLOPs (2 x its active parameters, a token's
# top-k experts, x the micro-batch's tokens + attention's 4 B T^2 H) and the dispatch + combine
# bytes a rank sends (2 x B T k x H bf16); `mcc compile`'s compute a step (the grouped GEMMs
# counted on the routed rows, not the receive buffers' worst case: the same as without ep) and its
# expert all-to-all bytes a micro-batch (dispatch, combine and their transposes: 4 x B T k x H f32
# on the cpu target for each MoE layer); and with a capacity factor the memory report says the
# dispatch buffers were sized by an expert's capacity, ceil(B T k / E x 1.0) rows of each ep rank.
set -euo pipefail
mcc=$1
root=$(cd "$(dirname "$0")/.." && pwd)
spec=$root/models/tiny-moe.json
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
read -r moe_flops dense_flops sched_bytes compile_bytes capacity <<<"$(/usr/bin/python3 - "$spec" <<'PY'
import json, math, sys
m = json.load(open(sys.argv[1]))["model"]
d, heads, groups, ff = m["hidden_size"], m["num_attention_heads"], m["num_query_groups"], m["ffn_hidden_size"]
E, F, k, S = m["num_experts"], m["moe_ffn_hidden_size"], m["moe_router_topk"], m["moe_shared_expert_intermediate_size"]
B, T = 4, m["seq_length"]  # tiny-moe's micro_batch_size
hd = d // heads
attn = 2 * d * heads * hd + 2 * d * groups * hd            # q, out; k, v
dense = 2 * d + attn + 3 * ff * d                          # RMSNorm x2, SwiGLU MLP
active = 2 * d + attn + E * d + k * 3 * F * d + 3 * S * d  # the router, top-k experts, the shared one
tokens, attention = B * T, 4 * B * T * T * d
moe_layers = sum(m["moe_layer_freq"])
print(2 * active * tokens + attention, 2 * dense * tokens + attention, 2 * tokens * k * d * 2,
      moe_layers * 4 * tokens * k * d * 4, math.ceil(tokens * k / E * 1.0))
PY
)"
sched=$("$mcc" schedule "$spec" --dp 2 --expert-model-parallel-size 2 --target cpu 2>&1) || fail "mcc schedule: $sched"
grep -q "an MoE layer's forward .* ms: $moe_flops FLOP (a dense layer's $dense_flops; active parameters, the top-2 of 4 experts), its dispatch + combine all-to-all $sched_bytes bytes a rank sends at ep 2" <<<"$sched" ||
  fail "mcc schedule does not print $moe_flops FLOP, $dense_flops dense, $sched_bytes bytes: $(grep MoE <<<"$sched")"
compile() { "$mcc" compile "$spec" --target cpu --dp 2 "$@" -o "$work/train_rank" 2>&1 || fail "mcc compile $*"; }
ep2=$(compile --expert-model-parallel-size 2)
ep1=$(compile)
step() { grep -o 'compute a step: [0-9.e+]* GFLOP' <<<"$1"; }
[ -n "$(step "$ep1")" ] && [ "$(step "$ep2")" = "$(step "$ep1")" ] ||
  fail "the step's compute at ep 2 ($(step "$ep2")) is not the single expert rank's ($(step "$ep1"))"
grep -q "expert all-to-all a micro-batch: 8 exchanges send $compile_bytes bytes per rank (balanced routing), $((compile_bytes / 2)) of them to the other 1 ep ranks" <<<"$ep2" ||
  fail "mcc compile does not print $compile_bytes all-to-all bytes: $(grep all-to-all <<<"$ep2")"
grep -q "all-to-all" <<<"$ep1" && fail "mcc compile prints an all-to-all without expert parallelism"
cap=$(compile --expert-model-parallel-size 2 --moe-expert-capacity-factor 1.0)
grep -q "sized by the capacity factor, an expert's capacity $capacity rows of each ep rank" <<<"$cap" ||
  fail "the memory report does not say the capacity ($capacity rows) sized the buffers: $(grep 'all-to-all buffers' <<<"$cap")"
grep -q "sized by the exact worst case, every row" <<<"$ep2" || fail "the memory report does not say the worst case sized them"
echo "moe cost ok: $moe_flops FLOP an MoE layer, $sched_bytes / $compile_bytes all-to-all bytes, $(step "$ep2")"
