#!/usr/bin/env bash
# dropout_e2e.sh MCC — dropout end to end on the tiny GPT (CPU):
# (1) p = 0 compiles to exactly today's graph, after every pass (so it trains exactly as before;
#     what autodiff makes of p = 0.1 is tests/passes/autodiff_dropout.ir);
# (2) two runs with the same seed give identical losses (the masks are counter-based);
# (3) dropout changes the training losses, and another seed gives other ones;
# (4) validation (eval_step) runs without dropout: at lr 0 the weights never move, so the
#     validation loss with dropout on equals the one without, bit for bit.
set -euo pipefail
mcc=$1
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
spec=$root/models/tiny-gpt2.json
drop=(--attention-dropout 0.1 --hidden-dropout 0.1)

# (1)
for pass in $("$mcc" ir --list-passes | awk '{print $1}'); do
  cmp -s <("$mcc" ir "$spec" --target cpu --after "$pass" 2>/dev/null) \
         <("$mcc" ir "$spec" --target cpu --after "$pass" --attention-dropout 0 --hidden-dropout 0 2>/dev/null) ||
    fail "dropout 0 changes the graph after pass $pass"
done

"$mcc" data preprocess --input "$root/tests/data/numerics.txt" --output-prefix "$work/text" --append-eod >/dev/null 2>&1
build() { local out=$1; shift; "$mcc" compile "$spec" --target cpu --lr 0 --min-lr 0 "$@" -o "$work/$out" 2>/dev/null; }
build plain
build drop "${drop[@]}"
build drop_seed "${drop[@]}" --seed 99
run() { "$work/$1" --data-path "$work/text_text_document" --split 50,50,0 --train-iters 3 --eval-interval 3 \
          --eval-iters 1 --metrics-file "$work/$2.jsonl" > "$work/$2.log"; }
# the training losses and the validation loss, as the metrics file has them (9 digits)
losses() { grep -o '"loss": [^,]*' "$work/$1.jsonl"; }
valid() { grep -o '"valid_loss": [^,]*' "$work/$1.jsonl"; }
run plain plain
run drop drop
run drop drop_again
run drop_seed drop_seed

# (2)
[ "$(losses drop | wc -l)" = 3 ] || fail "want 3 losses: $(cat "$work/drop.log")"
[ "$(losses drop)" = "$(losses drop_again)" ] || fail "the same seed gave other losses: $(losses drop) vs $(losses drop_again)"
# (3)
[ "$(losses drop | head -1)" != "$(losses plain | head -1)" ] || fail "dropout did not change the first loss: $(losses drop)"
[ "$(losses drop | head -1)" != "$(losses drop_seed | head -1)" ] || fail "another seed gave the same first loss"
# (4)
[ -n "$(valid plain)" ] || fail "no validation ran: $(cat "$work/plain.log")"
[ "$(valid drop)" = "$(valid plain)" ] || fail "validation differs with dropout: $(valid drop) vs $(valid plain)"
echo "dropout ok: $(losses drop | head -1) (without: $(losses plain | head -1)); $(valid drop)"
