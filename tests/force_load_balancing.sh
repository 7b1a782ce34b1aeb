#!/usr/bin/env bash
# force_load_balancing.sh MCC — --moe-router-force-load-balancing (Megatron's RandomSTE, for
# benchmarks) on tiny-moe, one rank, 3 steps: the routers take standard normal logits (dropout's op
# with normal=1 after each router GEMM, `mcc ir`), so routing is nearer balance than the learned
# logits' (the load-balancing loss nearer 1, its value at a uniform load) and differs from it; the
# gradient passes straight through to the routers' weights (non-zero at step 1, and equal to the
# unforced run's nowhere: the routing, and so every gradient, changed). Its layouts against one rank:
# tests/expert_parallel.cmake's *_force_balance.
set -euo pipefail
mcc=$1
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$mcc" data preprocess --input "$root/tests/data/numerics.txt" --output-prefix "$work/text" --append-eod >/dev/null 2>&1
n=$("$mcc" ir "$root/models/tiny-moe.json" --target cpu --moe-router-force-load-balancing --after autodiff 2>/dev/null |
    grep -c "= dropout .*normal=1" || true)
[ "$n" = 2 ] || fail "$n dropout normal=1 ops in tiny-moe's step, not one a MoE layer (2)"
for v in learned forced; do
  flags=(); [ $v = forced ] && flags=(--moe-router-force-load-balancing)
  "$mcc" compile "$root/models/tiny-moe.json" --target cpu "${flags[@]}" -o "$work/$v" >/dev/null 2>&1 ||
    fail "$v: does not compile"
  "$work/$v" --data-path "$work/text_text_document" --train-iters 3 --eval-iters 0 --log-interval 1 \
    --dump-dir "$work/dump-$v" > "$work/$v.log" 2>&1 || { cat "$work/$v.log"; fail "$v: the run failed"; }
done
/usr/bin/python3 - "$work" "$root/tests" <<'PY' || exit 1
import re, sys
sys.path.insert(0, sys.argv[2])
from compare_dumps import read_dump
work = sys.argv[1]
def lb(v):
    return [float(x) for x in re.findall(r'load_balancing_loss: ([0-9.E+-]+)', open(f'{work}/{v}.log').read())]
learned, forced = lb('learned'), lb('forced')
assert len(learned) == len(forced) == 3, (learned, forced)
if not all(abs(f - 1) < abs(l - 1) for f, l in zip(forced, learned)):
    sys.exit(f'FAIL: the forced load-balancing losses {forced} are not nearer 1 than the learned {learned}')
g = {v: read_dump(f'{work}/dump-{v}', 'grads_step1.mcct') for v in ('learned', 'forced')}
routers = [k for k in g['forced'] if 'router.weight' in k]
if len(routers) != 2:
    sys.exit(f'FAIL: {len(routers)} router weight gradients dumped, not 2')
for k in routers:
    f, l = g['forced'][k], g['learned'][k]
    if not abs(f).max() > 0:
        sys.exit(f'FAIL: {k}: no gradient through the random logits (straight through expected)')
    if (f == l).all():
        sys.exit(f'FAIL: {k}: the forced run\'s gradient is the learned run\'s: the logits were not replaced')
print(f'load-balancing loss learned {learned}, forced {forced}; the routers\' gradients straight through')
PY
echo PASS
