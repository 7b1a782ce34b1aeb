#!/usr/bin/python3
"""calibrate.py — fits mcc's step-time model (passes/step_cost.h, issue 41) to what
bench/calibrate.sh measured on a GPU.

  calibrate.py tables MCC [--plans calib/plans] [--out calib/tables]
      each config's instructions as mcc plans them (mcc compile --cost-table): class, calls, FLOPs,
      bytes, wave efficiency, keyed by function and index
  calibrate.py fit PROFILE_DIR STEPS.tsv [--tables calib/tables] [--target h100] [--def FILE]
      joins every profiled instruction's GPU time (MCC_PROFILE_DUMP, profile-NAME.tsv) with its
      class and work, fits each class's t = t0 + a FLOPs / wave efficiency + b bytes (non-negative
      least squares on relative error), and the host's share of a step (the median of measured minus
      summed); prints each config's step predicted by a fit without its own profile (leave one
      config out) against its measured step (STEPS.tsv, CUDA graphs), then writes the fit of all to
      --def (passes/step_cost_<target>.def).
  calibrate.py compare PROFILE.tsv TABLE.tsv [--top 12]
      one config's profile (MCC_PROFILE_DUMP) beside its plan's predicted times (mcc compile
      --cost-table): each function's measured and predicted milliseconds a step, then the classes
      whose prediction misses the most milliseconds (issue 41's measured-against-predicted report)
Run with /usr/bin/python3 (numpy)."""
import argparse, collections, csv, glob, itertools, json, os, statistics, subprocess, sys

import numpy as np


def read_tsv(path):
    return list(csv.DictReader(open(path), delimiter="\t"))


def tables(a):
    os.makedirs(a.out, exist_ok=True)
    for p in sorted(glob.glob(os.path.join(a.plans, "*.txt"))):
        name = os.path.basename(p)[:-4]
        config, *flags = open(p).read().split()
        r = subprocess.run([a.mcc, "compile", f"bench/configs/{config}.json", "--target", "cuda", "--mock-data", *flags,
                            "-o", "/tmp/calibrate-plan", "--cost-table", os.path.join(a.out, name + ".tsv")],
                           capture_output=True, text=True)
        if r.returncode:
            sys.exit(f"{name}: mcc compile failed:\n{r.stderr[-2000:]}")
    print(f"wrote {a.out}/*.tsv")
    return 0


def joined(profile_dir, tables_dir, names):
    """{config: [instruction dicts with class, calls, flops, bytes, eff, ms (GPU ms per call measured)]}."""
    out = {}
    for n in names:
        plan = {(r["func"], r["index"]): r for r in read_tsv(os.path.join(tables_dir, n + ".tsv"))}
        rows = []
        for r in read_tsv(os.path.join(profile_dir, f"profile-{n}.tsv")):
            p = plan.get((r["func"], r["index"]))
            if p is None:
                continue  # not costed: a view, a global, an input
            if p["op"] != r["op"]:
                sys.exit(f"{n}: {r['func']} #{r['index']} is {r['op']} in the profile but {p['op']} in the plan: "
                         "the executables and the tables are of different mcc versions")
            rows.append(dict(cls=p["class"], calls=int(p["calls"]), flops=float(p["flops"]), bytes=float(p["bytes"]),
                             eff=float(p["wave_eff"]), ms=float(r["ms"])))
        out[n] = rows
    return out


def nnls(A, y, need=None):
    """Least squares with every coefficient >= 0, by trying each subset of the (three) columns (those
    with column `need`)."""
    best = None
    for mask in itertools.product([0, 1], repeat=A.shape[1]):
        idx = [i for i, m in enumerate(mask) if m]
        if not idx or (need is not None and need not in idx):
            continue
        c, *_ = np.linalg.lstsq(A[:, idx], y, rcond=None)
        if np.any(c < 0):
            continue
        full = np.zeros(A.shape[1])
        full[idx] = c
        e = float(np.sum((A @ full - y) ** 2))
        if best is None or e < best[0]:
            best = (e, full)
    return best[1] if best else np.zeros(A.shape[1])


def fit(data):
    """{class: (t0 ms, ms per GFLOP / eff, ms per GB)}; a class that multiplies keeps its FLOPs term (a
    GEMM's time grows with its FLOPs: among configs of like shapes its bytes alone would fit as
    well and extrapolate to larger ones wrongly)."""
    pts = collections.defaultdict(list)
    for rows in data.values():
        for r in rows:
            if r["ms"] > 0:
                pts[r["cls"]].append((r["flops"] / r["eff"] / 1e9, r["bytes"] / 1e9, r["ms"]))
    model = {}
    for cls, p in pts.items():
        f, b, t = (np.array(c) for c in zip(*p))
        w = 1 / t
        A = np.stack([np.ones_like(t), f, b], 1) * w[:, None]
        model[cls] = tuple(float(x) for x in nnls(A, t * w, need=1 if np.any(f > 0) else None))
    return model


def summed(model, rows):
    return sum(r["calls"] * (model[r["cls"]][0] + model[r["cls"]][1] * r["flops"] / r["eff"] / 1e9 +
                             model[r["cls"]][2] * r["bytes"] / 1e9) for r in rows if r["cls"] in model)


def kernels(rows):
    return sum(r["calls"] for r in rows)


def step_fit(model, data, measured):
    """The step from its instructions' summed eager times S and its kernel count n: scale S + n
    kernel + overhead, by least squares on relative error. The scale is the dense stream's slowdown
    (back-to-back GEMMs at the power limit run slower than the profile's, each timed alone) and
    kernel the eager launch's share of a small kernel's time that a CUDA graph does not pay."""
    X = np.array([[summed(model, data[m]), kernels(data[m]), 1.0] for m in data])
    y = np.array([measured[m] for m in data])
    coef, *_ = np.linalg.lstsq(X / y[:, None], np.ones_like(y), rcond=None)
    return tuple(float(c) for c in coef)


def predict(model, step, rows):
    return step[0] * summed(model, rows) + step[1] * kernels(rows) + step[2]


def fit_cmd(a):
    measured = {r["name"]: float(r["measured_ms"]) for r in read_tsv(a.steps) if r["measured_ms"] != "nan"}
    names = sorted(n for n in measured if os.path.exists(os.path.join(a.profiles, f"profile-{n}.tsv")))
    data = joined(a.profiles, a.tables, names)
    print(f"{'config':22s} {'measured':>9s} {'predicted':>9s} {'error':>7s}  (leave one config out)")
    errs = []
    for n in names:
        rest = {m: data[m] for m in names if m != n}
        model = fit(rest)
        missing = {r["cls"] for r in data[n]} - set(model)
        pred = predict(model, step_fit(model, rest, measured), data[n])
        e = (pred - measured[n]) / measured[n]
        errs.append(abs(e))
        print(f"{n:22s} {measured[n]:9.2f} {pred:9.2f} {100 * e:+6.1f}%" +
              (f"  (classes no other config has: {', '.join(sorted(missing))})" if missing else ""))
    print(f"leave one config out, {len(errs)} configs: mean |error| {100 * statistics.mean(errs):.1f}%, "
          f"median {100 * statistics.median(errs):.1f}%, max {100 * max(errs):.1f}%")
    model = fit(data)
    step = step_fit(model, data, measured)
    insample = [abs(predict(model, step, data[m]) - measured[m]) / measured[m] for m in names]
    print(f"fitted on all {len(names)}: mean |error| {100 * statistics.mean(insample):.1f}%, "
          f"max {100 * max(insample):.1f}%; step = {step[0]:.4f} x the instructions' + {1e3 * step[1]:.2f} us a "
          f"kernel + {step[2]:.2f} ms")
    if a.def_out:
        with open(a.def_out, "w") as f:
            f.write(f"/* step_cost_{a.target}.def — written by bench/calibrate.py fit from bench/calibrate.sh's measurements on\n"
                    f" * one {a.target} ({len(names)} one-GPU configs: bench/RESULTS.md has the command and the errors).\n"
                    f" * X(class, t0 us, us per GFLOP / wave efficiency, us per GB of operands and results);\n"
                    f" * STEP(scale, us a kernel, us a step): the step from its instructions' sum. */\n")
            f.write(f"STEP({step[0]:.5f}, {1e3 * step[1]:.3f}, {1e3 * step[2]:.1f})\n")
            for cls in sorted(model):
                t0, kf, kb = model[cls]
                f.write(f'X("{cls}", {1e3 * t0:.3f}, {1e3 * kf:.6g}, {1e3 * kb:.6g})\n')
        print(f"wrote {a.def_out}: {len(model)} classes")
    return 0


def compare(a):
    """Per function and per class: the profile's GPU ms a step against the plan's predicted ms a step
    (each instruction's per-call time times its calls; the step's scale and overheads are not in
    either, so the sums compare like for like)."""
    plan = {(r["func"], r["index"]): r for r in read_tsv(a.table)}
    funcs, classes = collections.defaultdict(lambda: [0.0, 0.0]), collections.defaultdict(lambda: [0.0, 0.0, 0])
    for r in read_tsv(a.profile):
        p = plan.get((r["func"], r["index"]))
        if p is None:
            continue  # not costed: a view, a global, an input
        calls = int(p["calls"])
        measured, predicted = calls * float(r["ms"]), calls * float(p["predicted_us"]) / 1e3
        for acc in (funcs[r["func"]], classes[p["class"]]):
            acc[0] += measured
            acc[1] += predicted
        classes[p["class"]][2] += calls
    print(f"{'function':<24} {'measured ms':>12} {'predicted ms':>13} {'error':>8}")
    for name, (m, pr) in sorted(funcs.items(), key=lambda kv: -kv[1][0]):
        print(f"{name:<24} {m:12.3f} {pr:13.3f} {100 * (pr / m - 1) if m else 0:+7.1f}%")
    m, pr = sum(v[0] for v in funcs.values()), sum(v[1] for v in funcs.values())
    print(f"{'all':<24} {m:12.3f} {pr:13.3f} {100 * (pr / m - 1) if m else 0:+7.1f}%")
    print(f"\nthe {a.top} classes the prediction misses most (ms a step):")
    print(f"{'class':<28} {'calls':>6} {'measured':>10} {'predicted':>10} {'missed':>8}")
    for cls, (m, pr, n) in sorted(classes.items(), key=lambda kv: -abs(kv[1][1] - kv[1][0]))[:a.top]:
        print(f"{cls:<28} {n:6d} {m:10.3f} {pr:10.3f} {pr - m:+8.3f}")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tables")
    t.add_argument("mcc")
    t.add_argument("--plans", default="calib/plans")
    t.add_argument("--out", default="calib/tables")
    f = sub.add_parser("fit")
    f.add_argument("profiles")
    f.add_argument("steps")
    f.add_argument("--tables", default="calib/tables")
    f.add_argument("--target", default="h100")
    f.add_argument("--def", dest="def_out")
    c = sub.add_parser("compare")
    c.add_argument("profile")
    c.add_argument("table")
    c.add_argument("--top", type=int, default=12)
    a = ap.parse_args()
    return {"tables": tables, "fit": fit_cmd, "compare": compare}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
