#!/usr/bin/env bash
# checkpoint_signal.sh MCC — the stops that save and the loads that take less: SIGTERM with
# --exit-signal-handler saves the iteration it stopped after (exit status 143) and a --load
# resumes there bit for bit; --finetune loads the weights alone and starts at iteration 1 (the
# lr schedule's and Adam's first step); --no-load-optim keeps the iteration but not Adam's state;
# --save-retain 1 keeps only the newest checkpoint; --exit-duration-in-mins saves and stops cleanly
# at the first iteration's end past its time (0.0001 minutes: past by the first iteration's end, as
# the process's start-up alone takes longer) and a long one stops nothing.
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
# --exit-duration-in-mins: past after iteration 1; a save there (with --save) and exit status 0
"$work/train" "${flags[@]}" --save "$work/dur" --exit-duration-in-mins 0.0001 --dump-dir "$work/dur1" >"$work/dur.log" 2>&1 ||
  { cat "$work/dur.log"; fail "--exit-duration-in-mins 0.0001: the run failed"; }
grep -q "exiting program after 0.0001 minutes (--exit-duration-in-mins) at iteration 1$" "$work/dur.log" &&
  [ "$(wc -l <"$work/dur1/steps.txt")" = 1 ] && [ "$(cat "$work/dur/latest_checkpointed_iteration.txt")" = 1 ] ||
  { cat "$work/dur.log"; fail "--exit-duration-in-mins 0.0001 did not save and stop at iteration 1"; }
"$work/train" "${flags[@]}" --exit-duration-in-mins 60 --exit-interval 3 >"$work/dur60.log" 2>&1 &&
  ! grep -q "exiting program" "$work/dur60.log" && grep -q "iteration  *3/" "$work/dur60.log" ||
  { cat "$work/dur60.log"; fail "--exit-duration-in-mins 60 stopped a run of seconds"; }
"$work/train" "${flags[@]}" --exit-duration-in-mins 0 >"$work/dur0.log" 2>&1 && fail "--exit-duration-in-mins 0 accepted"
grep -q "exit-duration-in-mins" "$work/dur0.log" || { cat "$work/dur0.log"; fail "--exit-duration-in-mins 0: no message"; }
echo "SIGTERM saved iteration $at and the resume is bit for bit; --finetune, --no-load-optim, --save-retain," \
     "--exit-duration-in-mins work"
