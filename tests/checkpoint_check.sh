# checkpoint_check.sh — sourced by the checkpoint layout tests (checkpoint_layout.sh, _ep.sh, _pp.sh)
# after they set mcc, model and common (their compile flags): a work folder removed at exit, the
# test text preprocessed into $work/text, compile NAME FLAGS... (the model compiled with common and
# FLAGS into $work/NAME), save (the reference run and the checkpoint) and check, which resumes a
# checkpoint under another layout.
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
"$mcc" data preprocess --input "$root/tests/data/numerics.txt" --output-prefix "$work/text" --append-eod >/dev/null 2>&1
compile() { local out=$1; shift; "$mcc" compile "$root/models/$model.json" "${common[@]}" "$@" -o "$work/$out" \
              2>"$work/$out.c.log" || { cat "$work/$out.c.log"; exit 1; }; }
# save NAME NP WHAT: $work/NAME on NP ranks with train_rank's flags ($flags) runs uninterrupted into
# $work/ref, then again saving at iteration 5 into $work/ck and stopping there; check's messages
# call that run WHAT.
save() {
  local name=$1 np=$2
  saved=$np ref=$3
  mpirun -np "$np" "$work/$name" "${flags[@]}" --dump-dir "$work/ref" >"$work/ref.log" 2>&1 || { cat "$work/ref.log"; exit 1; }
  mpirun -np "$np" "$work/$name" "${flags[@]}" --save "$work/ck" --exit-interval 5 >"$work/save.log" 2>&1 ||
    { cat "$work/save.log"; exit 1; }
}
# check NAME NP TOL: $work/NAME on NP ranks with train_rank's flags ($flags) loads the checkpoint in
# $work/ck (saved at iteration 5 by $saved ranks) and its losses at iterations 6-10 equal those of
# the uninterrupted run in $work/ref ($ref says which, for the messages) within relative TOL; TOL
# 0: bit for bit.
check() {
  local name=$1 np=$2 tol=$3 launch=()
  [ "$np" = 1 ] || launch=(mpirun -np "$np" --oversubscribe)
  "${launch[@]}" "$work/$name" "${flags[@]}" --load "$work/ck" --dump-dir "$work/$name.out" >"$work/$name.log" 2>&1 ||
    { cat "$work/$name.log"; exit 1; }
  grep -q "loaded checkpoint .*saved by $saved ranks.* at iteration 5 " "$work/$name.log" ||
    { echo "FAIL: $name loaded nothing"; cat "$work/$name.log"; exit 1; }
  /usr/bin/python3 - "$work/ref/steps.txt" "$work/$name.out/steps.txt" "$name" "$tol" "$ref" <<'PY'
import sys
ref = {int(l.split()[0]): l.split()[1] for l in open(sys.argv[1])}
got = {int(l.split()[0]): l.split()[1] for l in open(sys.argv[2])}
name, tol, what = sys.argv[3], float(sys.argv[4]), sys.argv[5]
assert sorted(got) == list(range(6, 11)), f"{name}: resumed steps {sorted(got)}, expected 6..10"
for it, v in sorted(got.items()):
    err = abs(float(v) - float(ref[it])) / abs(float(ref[it]))
    if (tol == 0 and v != ref[it]) or err > tol:
        sys.exit(f"FAIL: {name}: loss at iteration {it} is {v}, the uninterrupted {what} run's {ref[it]} "
                 f"(relative error {err:.2e}, allowed {'0: bit for bit' if tol == 0 else tol})")
print(f"{name}: losses 6-10 after loading the {what} checkpoint equal the uninterrupted run's"
      + (" bit for bit" if tol == 0 else f" within {tol}"))
PY
}
