#!/usr/bin/env bash
# checkpoint_signal.sh MCC — the stops that save and the loads that take less: SIGTERM with
# --exit-signal-handler saves the iteration it stopped after (exit status 143) and a --load
# resumes there bit for bit; --finetune loads the weights alone and starts at iteration 1 (the
# lr schedule's and Adam's first step); --no-load-optim keeps the iteration but not Adam's state;
# --save-retain 1 keeps only the newest checkpoint.
set -euo pipefail
mcc=$1
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
"$mcc" data preprocess --input "$root/tests/data/numerics.txt" --output-prefix "$work/text" --append-eod >/dev/null 2>&1
"$mcc" compile "$root/models/tiny-gpt2.json" --target cpu --vocab-size 260 --make-vocab-size-divisible-by 1 \
  -o "$work/train" 2>"$work/c.log" || { cat "$work/c.log"; exit 1; }
flags=(--data-path "$work/text_text_document" --train-iters 400 --eval-iters 0)
fail() { echo "FAIL: $*"; exit 1; }
"$work/train" "${flags[@]}" --dump-dir "$work/ref" --exit-interval 40 >"$work/ref.log" 2>&1 || { cat "$work/ref.log"; exit 1; }
"$work/train" "${flags[@]}" --save "$work/ck" --save-retain 1 --exit-signal-handler >"$work/sig.log" 2>&1 &
pid=$!
for _ in $(seq 200); do grep -q "iteration  *3/" "$work/sig.log" && break; sleep 0.05; done
kill -TERM "$pid"
set +e; wait "$pid"; rc=$?; set -e
[ "$rc" = 143 ] || { cat "$work/sig.log"; fail "SIGTERM: exit status $rc, expected 143"; }
at=$(sed -n 's/.*saved checkpoint at iteration \([0-9]*\) .*/\1/p' "$work/sig.log")
stopped=$(sed -n 's/.*stopped by SIGTERM after iteration \([0-9]*\) .*/\1/p' "$work/sig.log")
[ -n "$at" ] && [ "$at" = "$stopped" ] || { cat "$work/sig.log"; fail "SIGTERM after iteration $stopped saved '$at'"; }
[ "$at" -lt 39 ] || fail "the run went on to $at before the signal stopped it: too late to compare"
"$work/train" "${flags[@]}" --load "$work/ck" --save "$work/ck" --save-retain 1 --exit-interval 40 --dump-dir "$work/b" \
  >"$work/b.log" 2>&1 || { cat "$work/b.log"; exit 1; }
diff <(sed -n "$((at + 1)),40p" "$work/ref/steps.txt") "$work/b/steps.txt" ||
  fail "steps after the SIGTERM save at $at (>) differ from the uninterrupted run's (<)"
[ "$(ls -d "$work"/ck/iter_* | xargs -n1 basename)" = iter_0000040 ] || fail "--save-retain 1 kept $(ls "$work/ck")"
# --finetune: the weights of iteration 40, the counters from zero: iteration 1 at the first lr
"$work/train" "${flags[@]}" --load "$work/ck" --finetune --exit-interval 1 --dump-dir "$work/ft" >"$work/ft.log" 2>&1 ||
  { cat "$work/ft.log"; exit 1; }
grep -q "weights only (--finetune), starting at iteration 0" "$work/ft.log" || { cat "$work/ft.log"; fail "--finetune"; }
read -r it loss lr _ <"$work/ft/steps.txt"
read -r _ rloss rlr _ <"$work/ref/steps.txt"
[ "$it" = 1 ] && [ "$lr" = "$rlr" ] || fail "--finetune ran iteration $it at lr $lr; expected 1 at $rlr"
[ "$loss" != "$rloss" ] || fail "--finetune's first loss is a fresh run's: no weights loaded"
# --no-load-optim (and --no-load-rng, accepted): the iteration and weights, not Adam's state
"$work/train" "${flags[@]}" --load "$work/ck" --no-load-optim --no-load-rng --exit-interval 41 --dump-dir "$work/no" \
  >"$work/no.log" 2>&1 || { cat "$work/no.log"; exit 1; }
grep -q "without optimizer state at iteration 40 " "$work/no.log" || { cat "$work/no.log"; fail "--no-load-optim"; }
echo "SIGTERM saved iteration $at and the resume is bit for bit; --finetune, --no-load-optim, --save-retain work"
