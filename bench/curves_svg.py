#!/usr/bin/env python3
"""curves_svg.py OUT.tsv OUT.svg LABEL=LOG... — the loss curves of train_rank logs (Megatron's log
line: `| lm loss: X |` a step) as one table (step, then each run's loss) and one SVG: each run's
loss averaged over a 20-step window, on common axes. No plotting library: the machine has none."""
import re
import sys

WINDOW, W, H, PAD = 20, 720, 400, 50
COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd"]


def losses(path):
    return [float(x) for x in re.findall(r"\| lm loss: ([0-9.E+-]+) \|", open(path).read())]


def smooth(xs):
    return [sum(xs[max(0, i - WINDOW + 1):i + 1]) / len(xs[max(0, i - WINDOW + 1):i + 1]) for i in range(len(xs))]


def main():
    tsv, svg, runs = sys.argv[1], sys.argv[2], [a.split("=", 1) for a in sys.argv[3:]]
    series = [(label, losses(path)) for label, path in runs]
    n = min(len(s) for _, s in series)
    with open(tsv, "w") as f:
        f.write("step\t" + "\t".join(label for label, _ in series) + "\n")
        for i in range(n):
            f.write(f"{i + 1}\t" + "\t".join(f"{s[i]:.6f}" for _, s in series) + "\n")
    smoothed = [(label, smooth(s[:n])) for label, s in series]
    lo = min(min(s[WINDOW:]) for _, s in smoothed)
    hi = max(max(s[WINDOW:]) for _, s in smoothed)
    x = lambda i: PAD + (W - 2 * PAD) * i / (n - 1)  # noqa: E731
    y = lambda v: H - PAD - (H - 2 * PAD) * (v - lo) / (hi - lo)  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{PAD}" y="20">loss ({WINDOW}-step mean) over {n} steps; y from {lo:.3f} to {hi:.3f}</text>']
    for k, (label, s) in enumerate(smoothed):
        points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(s) if i >= WINDOW)
        out.append(f'<polyline fill="none" stroke="{COLOURS[k % len(COLOURS)]}" stroke-width="1.2" points="{points}"/>')
        out.append(f'<text x="{W - PAD - 160}" y="{40 + 16 * k}" fill="{COLOURS[k % len(COLOURS)]}">{label}: '
                   f'last-100 {sum(s[n - 100:n]) / 100:.4f}</text>')
    out.append("</svg>")
    open(svg, "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
