#!/usr/bin/env python3
"""test_times.py CTEST_LOG [BUILD_DIR] — the suite's time by test group from ctest's output: each
group's tests, the sum of their wall times, and their share of the two cores (a test of several
ranks holds every core ctest gives it: its time times min(PROCESSORS, cores)), slowest first; then
the slowest tests. BUILD_DIR (where ctest ran) gives each test's PROCESSORS."""
import collections
import json
import os
import re
import subprocess
import sys

# A test's group: the first pattern its name matches (the suite's families, as tests/*.cmake
# declare them).
GROUPS = [("layouts (parallel = one rank)", r"_equals_single_rank|^single_rank_"),
          ("numerics vs PyTorch", r"^numerics_vs_torch|^torch_ref"),
          ("recompute bit for bit", r"^recompute_bitwise"), ("offload", r"^offload"),
          ("checkpoints", r"^checkpoint"), ("tokenizers and data", r"^(tokenizer|preprocess|data|batches|gpt_dataset)"),
          ("HF conversion", r"^convert"), ("build and install", r"^(build_|rank_device)"),
          ("IR round-trip and plans", r"^(ir_|plan_|roundtrip|golden|param_remainders)"), ("pass tests", r"^pass_"),
          ("comm", r"^(comm_|ep2?_)"), ("fuzzers", r"^fuzz_"), ("other", r"")]


def main():
    log, build = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None
    times = {}
    for line in open(log, errors="replace"):
        m = re.search(r"Test +#\d+: (\S+) \.+.*?([\d.]+) sec", line)
        if m:
            times[m.group(1)] = float(m.group(2))
    procs = {}
    if build:
        out = subprocess.run(["ctest", "--show-only=json-v1"], cwd=build, capture_output=True, text=True).stdout
        for t in json.loads(out)["tests"]:
            procs[t["name"]] = next((p["value"] for p in t.get("properties", []) if p["name"] == "PROCESSORS"), 1)
    cores = os.cpu_count() or 1
    rows = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for name, t in times.items():
        group = next(g for g, pattern in GROUPS if re.search(pattern, name))
        rows[group][0] += 1
        rows[group][1] += t
        rows[group][2] += t * min(procs.get(name, 1), cores)
    total = sum(r[2] for r in rows.values())
    print(f"{'group':32} {'tests':>5} {'wall s':>8} {'core s':>8} {'share':>6}")
    for group, (n, wall, held) in sorted(rows.items(), key=lambda r: -r[1][2]):
        print(f"{group:32} {n:5d} {wall:8.1f} {held:8.1f} {100 * held / max(total, 1e-9):5.1f}%")
    print(f"{'all':32} {len(times):5d} {sum(times.values()):8.1f} {total:8.1f}  (/{cores} cores: {total / cores:.0f} s)")
    print("slowest:", ", ".join(f"{n} {t:.1f}s" for n, t in sorted(times.items(), key=lambda x: -x[1])[:8]))


if __name__ == "__main__":
    main()
