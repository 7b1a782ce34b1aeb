#!/usr/bin/python3
"""compile_sweep.py MCC [--strength T] [--models A,B] [--jobs N] [--timeout S] [--verbose]

No internal errors, ever (issue 39): every models/*.json under a covering set of parallel layouts
and features, on every target, each planned through the last pass without a GPU. A run passes
when mcc plans it (exit 0) or refuses it with a user-facing message (exit 2, an `mcc: error:` line
naming a flag or a spec field); it fails on a signal (abort, segfault), another exit status,
"internal error", a sanitizer's report or a timeout, and the failure prints the command that
reproduces it.

The layouts: AXES below, each a list of levels (flags). Rather than their product, the sweep
takes a covering array of strength T (2: every pair of levels of two axes, the target one of
them, in at least one configuration; 3: every triple), built greedily for each model from the
tuples it admits (`admits`: the rules that would refuse them, known beforehand). A pair whose
every configuration was refused, for another of its levels, runs again alone, so that one refused
setting hides no pair; and every level must be planned somewhere, so that a sweep whose
configurations all came to be refused fails instead of passing empty. REGRESSIONS run as well.

Each configuration is shrunk to plan in milliseconds: 3 layers a (virtual) pipeline stage (a
weight gradient carried across layers needs several: comm_overlap's crashes of issue 39 needed 2
or 3 a stage), a micro-batch a pipeline stage, 2 at least (the schedule unrolls every one). GPU
targets run `mcc compile --gpu-memory 0.001`: the whole plan, its memory and compute report, then
the memory check refuses it before any kernel is compiled; the CPU target (no memory to check: it
would compile) runs `mcc ir --rank` of the last rank, its rank terms resolved.
"""
import argparse
import itertools
import json
import math
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The axes and their levels; no level (the axis off) is always a choice too. Two values are
# placed by the layout: "--world-size @D" is D data-parallel replicas of tp x cp x pp ranks, and
# "--global-batch-size @M" M micro-batches a step.
AXES = {
    "tp": ["--tp 2", "--tp 4", "--tp 8"],
    "sp": ["--sequence-parallel", "--sequence-parallel --sequence-parallel-split batch",
           "--sequence-parallel --tp-comm-overlap", "--sequence-parallel --sequence-parallel-split batch --tp-comm-overlap",
           "--sequence-parallel --tp-comm-interleave",
           "--sequence-parallel --sequence-parallel-split batch --tp-comm-interleave"],
    "pp": ["--pp 2 --pipeline-schedule 1f1b", "--pp 2 --pipeline-schedule zb-h1", "--pp 4",
           "--pp 2 --num-virtual-stages-per-pipeline-rank 2",
           "--pp 4 --num-layers-per-virtual-pipeline-stage 1 --pipeline-schedule interleaved",
           "--pp 2 --decoder-first-pipeline-num-layers 1 --pipeline-schedule zb-h1",
           "--pp 4 --decoder-last-pipeline-num-layers 1 --pipeline-schedule 1f1b",
           "--pp 2 --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split"],
    "dp": ["--dp 2", "--dp 2 --use-distributed-optimizer",
           "--dp 4 --use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 1000000", "--world-size @4"],
    "cp": ["--cp 2 --cp-comm-type p2p", "--cp 2 --cp-comm-type all_gather", "--cp 2 --cp-comm-type a2a"],
    "ep": ["--expert-model-parallel-size 2", "--expert-model-parallel-size 4"],
    "recompute": ["--recompute-granularity selective", "--recompute-granularity activations",
                  "--recompute-granularity selective --recompute-modules core_attn,mlp_act --recompute-num-layers 1",
                  "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1",
                  "--recompute-granularity full --recompute-method uniform --recompute-num-layers 2",
                  "--recompute-granularity full --recompute-method block --recompute-num-layers 1"],
    "fp8": ["--fp8-format hybrid", "--fp8-format hybrid --fp8-recipe tensorwise",
            "--fp8-format e4m3 --fp8-amax-history-len 16 --fp8-amax-compute-algo max --fp8-margin 1",
            "--fp8-format hybrid --first-last-layers-bf16", "--fp8-format hybrid --no-fp8-wgrad"],
    "optimizer": ["--optimizer-cpu-offload", "--optimizer-cpu-offload --optimizer-offload-fraction 0.5 "
                  "--overlap-cpu-optimizer-d2h-h2d",
                  "--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16",
                  "--use-precision-aware-optimizer --no-store-param-remainders"],
    "batch": ["--micro-batch-size 2", "--global-batch-size @1", "--attention-dropout 0.1 --hidden-dropout 0.1"],
    "moe": ["--moe-expert-capacity-factor 1.0",
            "--moe-expert-capacity-factor 1.25 --moe-token-drop-policy position --moe-pad-expert-input-to-capacity",
            "--moe-shared-expert-overlap", "--moe-router-load-balancing-type seq_aux_loss",
            "--moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-router-topk-scaling-factor 2.5 "
            "--moe-router-load-balancing-type none --moe-aux-loss-coeff 0",
            "--moe-router-topk 1 --moe-z-loss-coeff 0.001"],
    "lanes": ["--comm-lanes copy", "--comm-lanes side", "--comm-lanes side,copy", "--comm-lanes none", "--keep-logits"],
}
# Layouts that crashed mcc, or were refused as unsupported, once: run as they are, on every target.
REGRESSIONS = [
    # the micro-batch's halves (tp_comm_interleave) under cp: their rows were not the rank's tokens
    ("tiny-llama", "--tp 2 --sequence-parallel --tp-comm-interleave --cp 2 --micro-batch-size 2"),
    # token dropping under cp beside tp: the shard pass had no rule for the capacity's local slice over cp
    ("tiny-moe", "--tp 2 --sequence-parallel --cp 2 --moe-expert-capacity-factor 1.0"),
]
LAYERS_PER_STAGE = 3
CPU = "cpu"  # the target without a GPU memory to plan against (passes/target.c): `mcc ir` there


def parse_flags(text):
    """'--tp 2 --sequence-parallel' -> {'--tp': '2', '--sequence-parallel': True}"""
    words, flags = text.split(), {}
    for i, w in enumerate(words):
        if w.startswith("--"):
            nxt = words[i + 1] if i + 1 < len(words) else None
            flags[w] = nxt if nxt is not None and not nxt.startswith("--") else True
    return flags


class Model:
    """What `admits` and the layout need of a spec: its name, path and model section."""

    def __init__(self, path):
        self.path, self.name = path, os.path.basename(path)[:-len(".json")]
        with open(path) as f:
            spec = json.load(f)
        m, t = spec.get("model", {}), spec.get("training", {})
        h = m["hidden_size"]
        self.heads = m["num_attention_heads"]
        self.groups = m.get("num_query_groups") or self.heads
        self.ffn = m.get("ffn_hidden_size") or (8 * h // 3 // 64 * 64 if m.get("swiglu") else 4 * h)
        self.experts = m.get("num_experts", 0)
        self.moe_ffn = m.get("moe_ffn_hidden_size") or self.ffn
        self.shared = m.get("moe_shared_expert_intermediate_size", 0)
        self.layer_freq = m.get("moe_layer_freq")
        self.group_topk = m.get("moe_router_group_topk", 0)
        # multi-latent attention: q and k's width, which the values take on a GPU target where mcc's
        # kernels must run them (attention dropout, cp's p2p or all_gather): narrower ones run through
        # cuDNN alone, refused there (tests/compiler.cmake's mla_narrow_values_cuda_*_refused)
        self.mla_qk = m.get("qk_head_dim", 128) + m.get("qk_pos_emb_head_dim", 64) if m.get("multi_latent_attention") else 0
        self.micro_batch = t.get("micro_batch_size", 1)
        self.mtp = m.get("mtp_num_layers", 0)  # multi-token prediction: refused under cp, tp_comm_interleave


def layout(model, flags):
    """The flags completed into a layout, and its sizes: what a level needs of another axis
    (tp for sequence parallelism, sequence parallelism for MoE under tp, dp for ep; a GPU target
    multi-latent attention's values as wide as q and k where mcc's kernels run it), the layers
    (LAYERS_PER_STAGE a virtual stage unless the level says), the micro-batch that a split by batch
    rows needs, the global batch (a micro-batch a pipeline stage, 2 at least), the world size of
    "--world-size @D"."""
    out = dict(flags)
    if model.mla_qk and out.get("--target", CPU) != CPU and (
            "--attention-dropout" in out or out.get("--cp-comm-type") in ("p2p", "all_gather")):
        out["--v-head-dim"] = str(model.mla_qk)
    if "--sequence-parallel" in out and "--tp" not in out:
        out["--tp"] = "2"
    tp, cp, pp = (int(out.get(k, 1)) for k in ("--tp", "--cp", "--pp"))
    if model.experts and tp > 1:  # Megatron's rule: MoE under tp needs sequence parallelism
        out["--sequence-parallel"] = True
    ep = int(out.get("--expert-model-parallel-size", 1))
    per_stage = int(out.get("--num-layers-per-virtual-pipeline-stage", LAYERS_PER_STAGE))
    vp = int(out.get("--num-virtual-stages-per-pipeline-rank", 2 if "--num-layers-per-virtual-pipeline-stage" in out else 1))
    layers = pp * vp * per_stage
    for uneven in ("--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers"):
        if uneven in out:
            layers += int(out[uneven]) - per_stage
    layers -= ("--account-for-embedding-in-pipeline-split" in out) + ("--account-for-loss-in-pipeline-split" in out)
    out["--num-layers"] = str(layers)
    if isinstance(model.layer_freq, list):  # the pattern's first layer, then MoE layers
        out["--moe-layer-freq"] = "[%s]" % ",".join(str(model.layer_freq[0] if i == 0 else 1) for i in range(layers))
    if "--world-size" in out:
        dp = int(out["--world-size"][1:])
        out["--world-size"] = str(dp * tp * cp * pp)
    elif "--dp" in out:
        dp = int(out["--dp"])
    else:  # the ep ranks are data- or context-parallel ranks
        dp = ep // math.gcd(ep, cp)
        if dp > 1:
            out["--dp"] = str(dp)
    mbs = int(out.get("--micro-batch-size", model.micro_batch))
    split_rows = tp if out.get("--sequence-parallel-split") == "batch" else 1
    need = 2 * split_rows if "--tp-comm-interleave" in out else split_rows
    mbs = mbs * need // math.gcd(mbs, need)
    if mbs != model.micro_batch or "--micro-batch-size" in out:
        out["--micro-batch-size"] = str(mbs)
    micro_batches = int(out.get("--global-batch-size", "@%d" % max(2, pp))[1:])
    out["--global-batch-size"] = str(mbs * dp * micro_batches)
    return out, (tp, cp, pp, vp, dp, ep, micro_batches)


def admits(model, flags, copy_lane_targets):
    """Whether the model can take these flags together by the rules the sweep knows, mcc's refusals
    deciding the rest: tp and cp's head splits, the MoE-only and dense-only settings, ep over the
    experts and the dp x cp ranks, attention dropout under cp's p2p and all_gather (the CPU's only),
    a top k no smaller than group-limited routing's kept groups, interleaving's micro-batches, the
    copy lane where the target's copy engines serve it, multi-token prediction (deepseek-v3's one
    depth) where it is built: not under cp or tp_comm_interleave."""
    f, (tp, cp, pp, vp, dp, ep, micro_batches) = layout(model, flags)
    moe = model.experts > 0
    if model.heads % tp or model.groups % tp or model.ffn % tp:
        return False
    if f.get("--cp-comm-type") == "a2a" and (model.heads % (tp * cp) or model.groups % (tp * cp)):
        return False
    if f.get("--cp-comm-type") in ("p2p", "all_gather") and "--attention-dropout" in f and f["--target"] != CPU:
        return False
    if (ep > 1 or any(k.startswith("--moe-") and k != "--moe-layer-freq" for k in f)) and not moe:
        return False
    if moe and ("--fp8-format" in f or model.moe_ffn % tp or model.shared % tp or model.experts % ep):
        return False
    if "--moe-shared-expert-overlap" in f and not model.shared:
        return False
    if model.mtp and (cp > 1 or "--tp-comm-interleave" in f):
        return False
    if f.get("--moe-router-load-balancing-type") == "seq_aux_loss" and tp > 1:
        return False
    if int(f.get("--moe-router-topk", model.group_topk)) < model.group_topk:  # a kept group's top k/group_topk
        return False
    if (dp * cp) % ep or (vp > 1 and micro_batches % pp):
        return False
    return "copy" not in f.get("--comm-lanes", "") or f["--target"] in copy_lane_targets


def row_flags(row, axes):
    """The merged flags of a row {axis index: level index}."""
    flags = {}
    for a, l in row.items():
        flags.update(parse_flags(axes[a][1][l]))
    return flags


def covering_rows(ok, axes, strength, rng):
    """A greedy covering array (AETG's): rows, each {axis: level}, until every `strength`-tuple of
    levels of different axes that ok() admits is in one. Each row starts from an uncovered tuple,
    takes a target (the last axis, in every row), then in random order the level of each other axis
    that covers the most uncovered tuples with the levels taken so far (none where none does)."""
    target_axis = len(axes) - 1
    levels = [(a, l) for a, (_, ls) in enumerate(axes) for l in range(len(ls))]
    uncovered = {t for t in itertools.combinations(levels, strength)
                 if len({a for a, _ in t}) == strength and ok(dict(t))}
    rows = []
    while uncovered:
        row = dict(min(uncovered))
        rest = [a for a in range(len(axes) - 1) if a not in row]
        rng.shuffle(rest)
        if target_axis not in row:  # first, so that the levels after it are admitted on it
            rest.insert(0, target_axis)
        for a in rest:
            gains = []
            for l in range(len(axes[a][1])):
                gain = sum(tuple(sorted(c + ((a, l),))) in uncovered
                           for c in itertools.combinations(sorted(row.items()), strength - 1))
                if gain and ok({**row, a: l}):
                    gains.append((gain, -l, l))
            if gains:
                row[a] = max(gains)[2]
            elif a == target_axis:
                row[a] = next(l for l in range(len(axes[a][1])) if ok({**row, a: l}))
        rows.append(row)
        uncovered -= set(itertools.combinations(sorted(row.items()), strength))
    return rows


class Config:
    """One run of mcc: a model and its flags (a covering row's, completed by layout(), or a
    regression's), the command line, and what came of it."""

    def __init__(self, mcc, model, flags, out, row=None):
        self.model, self.row = model, row or {}
        words = []
        for k, v in flags.items():
            words += [k] if v is True else [k, v]
        if flags["--target"] == CPU:  # the last rank, as it runs the plan
            tp, cp, pp = (int(flags.get(k, 1)) for k in ("--tp", "--cp", "--pp"))
            world = int(flags.get("--world-size", tp * cp * pp * int(flags.get("--dp", 1))))
            self.argv = [mcc, "ir", model.path, *words, "--rank", str(world - 1)]
        else:
            self.argv = [mcc, "compile", model.path, *words, "--gpu-memory", "0.001", "--memory-report", "-o", out]
        self.failure = self.refusal = None
        self.planned, self.seconds, self.stderr = False, 0.0, ""

    def run(self, timeout):
        start = time.time()
        try:
            p = subprocess.run(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               timeout=timeout)
        except subprocess.TimeoutExpired:
            self.failure = "timed out after %g s" % timeout
            return self
        self.seconds = time.time() - start
        self.stderr = p.stderr.decode(errors="replace")
        self.failure = classify(p.returncode, self.stderr)
        self.planned = p.returncode == 0 or "the plan needs" in self.stderr  # compile's memory check reached
        if not self.failure and not self.planned:
            self.refusal = next(l for l in self.stderr.splitlines() if l.startswith("mcc: error:"))
            if not USER_FACING.search(self.refusal):
                self.failure = "a refusal that names no flag or spec field"
        return self


USER_FACING = re.compile(r"--[a-z]|\b(model|parallel|training)\.[a-z]")  # a flag, or a spec field
SANITIZER = re.compile(r"ERROR: (Address|Leak)Sanitizer|runtime error:|UndefinedBehaviorSanitizer")


def classify(rc, err):
    """None for a plan or a user-facing refusal, else what went wrong."""
    if rc < 0:
        return "killed by %s" % signal.Signals(-rc).name
    if SANITIZER.search(err):
        return "a sanitizer's report"
    if "internal error" in err:
        return "an internal error"
    if rc == 0 or (rc == 2 and re.search(r"^mcc: error: ", err, re.M)):
        return None
    if rc == 2:
        return "exit 2 without an `mcc: error:` line"
    return "exit %d (0: planned, 2: refused)" % rc


def targets(mcc):
    """Every target mcc knows, from its refusal of an unknown one ("choose h200|h100|...|cuda (= h200)"),
    and those whose copy engines serve collectives (--comm-lanes copy)."""
    tiny = os.path.join(ROOT, "models", "tiny-gpt2.json")
    p = subprocess.run([mcc, "ir", tiny, "--target", "?"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    m = re.search(r"--target \?: choose (\S+)", p.stderr)
    if not m:
        sys.exit("compile_sweep: could not read the target names from mcc's refusal of --target ?:\n" + p.stderr)
    names = m.group(1).split("|")
    copy = {t for t in names if subprocess.run([mcc, "ir", tiny, "--target", t, "--comm-lanes", "copy"],
                                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0}
    return names, copy


def run_all(configs, jobs, timeout):
    with ThreadPoolExecutor(jobs) as pool:
        return list(pool.map(lambda c: c.run(timeout), configs))


def pairs(row):
    return itertools.combinations(sorted(row.items()), 2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mcc")
    ap.add_argument("--strength", type=int, default=2, help="2: every pair of levels; 3: every triple")
    ap.add_argument("--models", help="comma-separated model names (default: every models/*.json)")
    ap.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--timeout", type=float, default=120, help="seconds one run may take")
    ap.add_argument("--verbose", action="store_true", help="print every refusal and the slowest runs")
    args = ap.parse_args()
    start = time.time()
    mcc = os.path.abspath(args.mcc)
    names, copy_lane_targets = targets(mcc)
    axes = list(AXES.items()) + [("target", ["--target " + t for t in names])]
    target_axis = len(axes) - 1
    paths = sorted(os.path.join(ROOT, "models", f) for f in os.listdir(os.path.join(ROOT, "models")) if f.endswith(".json"))
    models = [Model(p) for p in paths if not args.models or os.path.basename(p)[:-5] in args.models.split(",")]
    tmp = tempfile.TemporaryDirectory(prefix="compile_sweep.")
    out = os.path.join(tmp.name, "train_rank")  # never written: compile stops at the memory check
    of_row = lambda m, row: Config(mcc, m, layout(m, row_flags(row, axes))[0], out, row)
    rng = random.Random(39)
    configs = [Config(mcc, m, parse_flags("%s --target %s" % (flags, t)), out)
               for name, flags in REGRESSIONS for m in models if m.name == name for t in names]
    for m in models:
        def ok(row):  # a row without a target yet: on some target
            if target_axis not in row:
                return any(ok({**row, target_axis: t}) for t in range(len(names)))
            return admits(m, row_flags(row, axes), copy_lane_targets)
        configs += [of_row(m, row) for row in covering_rows(ok, axes, args.strength, rng)]
    run_all(configs, args.jobs, args.timeout)
    # each pair of levels that the model admits and that only refused configurations held, alone
    planned = {(c.model.name, p) for c in configs if c.planned for p in pairs(c.row)}
    again = {}
    for c in configs:
        for p in pairs(c.row) if c.refusal is not None else ():
            row = dict(p)
            row.setdefault(target_axis, c.row[target_axis])
            if (c.model.name, p) not in planned and admits(c.model, row_flags(row, axes), copy_lane_targets):
                again[(c.model.name, tuple(sorted(row.items())))] = of_row(c.model, row)
    retried = run_all(list(again.values()), args.jobs, args.timeout)
    configs += retried
    failures = [c for c in configs if c.failure]
    for c in failures:
        print("FAIL (%s): %s" % (c.failure, shlex.join(c.argv)))
        lines = c.stderr.strip().splitlines()
        first = next((i for i, l in enumerate(lines) if SANITIZER.search(l) or "internal error" in l), len(lines) - 6)
        for line in lines[max(first, 0):][:12]:  # a sanitizer's report from its first line, else the last
            print("    " + line)
    if args.verbose:
        for c in configs:
            if c.refusal is not None:
                print("refused: %s\n    %s" % (shlex.join(c.argv[1:]), c.refusal))
        for c in sorted(configs, key=lambda c: -c.seconds)[:5]:
            print("slowest: %.2f s: %s" % (c.seconds, shlex.join(c.argv[1:])))
    # every level a model admits planned somewhere: a sweep whose configurations all came to be
    # refused is no sweep
    unplanned = sorted({(a, l) for c in configs for a, l in c.row.items()} -
                       {(a, l) for c in configs if c.planned for a, l in c.row.items()})
    for a, l in unplanned:
        print("FAIL: no configuration with %s level `%s` was planned: each was refused (--verbose lists why)" %
              (axes[a][0], axes[a][1][l]))
    print("compile_sweep: %d configurations of %d models on %d targets (strength %d; %d of them a pair rerun alone): "
          "%d planned, %d refused, %d failed, in %.1f s" %
          (len(configs), len(models), len(names), args.strength, len(retried), sum(c.planned for c in configs),
           sum(c.refusal is not None for c in configs), len(failures), time.time() - start))
    return 1 if failures or unplanned else 0


if __name__ == "__main__":
    sys.exit(main())
