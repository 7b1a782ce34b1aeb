#!/usr/bin/env bash
# config_keys.sh MCC — ir/config.def is the one table of the module's config keys: every key the
# printer writes (a plan with every optional key set) is in it, and every key in it is read by
# ir_cfg_* somewhere in the compiler or the runtime (a write alone does not count).
set -euo pipefail
mcc=$1
root=$(cd "$(dirname "$0")/.." && pwd)
def=$root/ir/config.def
keys=$(sed -n 's/^IR_CFG\(_MODEL\)\{0,1\}(\([A-Z0-9_]*\), \([a-z0-9_]*\),.*/\2 \3/p' "$def")
[ -n "$keys" ] || { echo "no IR_CFG lines read from $def" >&2; exit 1; }
status=0

# Every optional key: sequence parallelism by batch rows with interleave (or with overlap),
# recompute, ZeRO and overlapped gradient buckets at TP=2 x DP=2.
common=(--tp 2 --dp 2 --sequence-parallel --sequence-parallel-split batch --use-distributed-optimizer
  --overlap-grad-reduce --recompute-granularity selective --recompute-num-layers 1 --micro-batch-size 4
  --rank 0 --after shard --target cuda)
printed=$(for extra in --tp-comm-interleave --tp-comm-overlap; do
  "$mcc" ir "$root/models/tiny-gpt2.json" "${common[@]}" "$extra" 2>/dev/null |
    sed -n '/^config {/,/^}/s/^  \([a-z0-9_]*\) = .*/\1/p'
done | sort -u)
[ "$(echo "$printed" | wc -l)" -ge 40 ] || { echo "only $(echo "$printed" | wc -l) config keys printed" >&2; exit 1; }
for key in $printed; do # a here-string, not echo | grep -q: under pipefail echo's SIGPIPE failed at random
  grep -qw "$key" <<<"$keys" || { echo "printed config key $key is not in ir/config.def" >&2; status=1; }
done

# A spec that gives only the required fields: each key the builder writes from a spec default
# (frontend/spec.c's table) reads the same as the table's default, numbers compared as numbers.
# Skipped: the required fields and what is derived from them or from the layout. --target cpu:
# the default target is the build's (cuda where CUDA was found), not a spec default.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo '{"model": {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "seq_length": 32,
  "vocab_size": 257}}' >"$tmp/min.json"
"$mcc" ir "$tmp/min.json" --after shard --target cpu 2>/dev/null | sed -n '/^config {/,/^}/p' >"$tmp/config"
python3 - "$def" "$tmp/config" <<'PY' || status=1
import re, sys
table = dict(re.findall(r'^IR_CFG(?:_MODEL)?\(\w+, (\w+), \w+(?:\(\w+\))?, "([^"]*)"', open(sys.argv[1]).read(), re.M))
written = dict(re.findall(r'^  (\w+) = "([^"]*)"', open(sys.argv[2]).read(), re.M))
derived = {"seq_length", "vocab_size", "global_batch_size", "num_params", "num_layers", "hidden_size",
           "num_position_params", "peak_flops",  # peak_flops: the target's description
           # the model's function: required fields and what is derived from them
           "num_attention_heads", "num_query_groups", "kv_channels", "ffn_hidden_size", "max_position_embeddings",
           "orig_vocab_size"}
def same(a, b):
    try:
        return float(a) == float(b)
    except ValueError:
        return a == b
bad = [k for k, v in written.items() if k not in derived and k in table and not same(v, table[k])]
for k in bad:
    print(f"config key {k}: the spec's default writes {written[k]!r}, ir/config.def says {table[k]!r}", file=sys.stderr)
if len(written) < 30:
    print(f"only {len(written)} config keys written for {sys.argv[2]}", file=sys.stderr)
sys.exit(1 if bad or len(written) < 30 else 0)
PY

# Keys the table holds for the plan's reader, not a pass: the reason beside each. The model's
# function (IR_CFG_MODEL rows) is read as a whole, by checkpoint/checkpoint.c's ck_model_of and
# ck_model_same (a checkpoint records it, a load and an export compare it).
unread="GLOBAL_BATCH_SIZE" # printed for whoever reads the plan; the passes use accum_steps, derived from it
unread+=" $(sed -n 's/^IR_CFG_MODEL(\([A-Z0-9_]*\),.*/\1/p' "$def" | tr '\n' ' ')"
while read -r name key; do
  case " $unread " in *" $name "*) continue ;; esac
  uses=$(grep -rwn "IR_CFG_$name" "$root"/ir "$root"/passes "$root"/codegen "$root"/runtime "$root"/frontend \
      --include='*.c' --include='*.h' || true)
  # frontend/model.c writes the keys (from the spec fields of their names, SET_FROM_SPEC lists) and reads none
  reads=$(grep -v '/frontend/model\.c:' <<<"$uses" | grep -v 'ir_cfg_set' | grep . || true)
  if [ -z "$reads" ]; then
    echo "config key $key (IR_CFG_$name) is in ir/config.def but nothing reads it" >&2
    status=1
  fi
done <<<"$keys"
exit $status
