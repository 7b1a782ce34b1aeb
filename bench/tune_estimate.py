#!/usr/bin/env python3
"""tune_estimate.py JSON... — mcc tune's estimate against its exact plans: each file is the output of
`mcc tune ... --exhaustive --json` (every candidate planned exactly beside the estimate that ranked
it); prints, per file, the memory's and the step's relative error (median, mean, the largest, and
the share within 2% and 5%), and whether the estimate's first among those that fit is the exact
plans' first."""
import json
import statistics
import sys


def errors(rows, key_est, key_exact):
    return [abs(r[key_est] - r[key_exact]) / r[key_exact] for r in rows if r[key_exact] > 0]


def summary(name, e):
    if not e:
        return f"{name}: none"
    e = sorted(e)
    within = lambda x: 100.0 * sum(v <= x for v in e) / len(e)
    return (f"{name}: median {100 * statistics.median(e):.2f}%, mean {100 * statistics.mean(e):.2f}%, "
            f"largest {100 * e[-1]:.2f}%, within 2% {within(0.02):.0f}%, within 5% {within(0.05):.0f}%")


for path in sys.argv[1:]:
    j = json.load(open(path))
    rows = j["layouts"]
    fit = [r for r in rows if r["fits"]]
    print(f"{path}: {j['candidates']} candidates, {j['reduced_plans']} reduced plans, {len(rows)} planned exactly, "
          f"{len(fit)} fit")
    print("  " + summary("memory", errors(rows, "estimated_gib", "gib")))
    print("  " + summary("step  ", errors(rows, "estimated_step_ms", "step_ms")))
    if fit:
        best_exact = min(fit, key=lambda r: r["step_ms"])
        best_est = min(fit, key=lambda r: r["estimated_step_ms"])
        print(f"  the exact first {best_exact['step_ms']:.1f} ms; the estimate's first, planned: "
              f"{best_est['step_ms']:.1f} ms ({100 * (best_est['step_ms'] / best_exact['step_ms'] - 1):+.2f}%)")
    worst = sorted(rows, key=lambda r: -abs(r["estimated_gib"] - r["gib"]) / r["gib"])[:3]
    for r in worst:
        print(f"  memory worst: est {r['estimated_gib']:.3f} exact {r['gib']:.3f} GiB: {r['flags']}")
    worst = sorted(rows, key=lambda r: -abs(r["estimated_step_ms"] - r["step_ms"]) / r["step_ms"])[:3]
    for r in worst:
        print(f"  step worst: est {r['estimated_step_ms']:.1f} exact {r['step_ms']:.1f} ms: {r['flags']}")
