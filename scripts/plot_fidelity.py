#!/usr/bin/env python3
"""Plot the per-head PSNR of every method from tests/gpu/fidelity_long.py's JSON.

    python3 scripts/plot_fidelity.py fidelity_long.json [-o fidelity_long.png]

One panel per input; inside a panel, one group of bars per method, one bar per head (PSNR
in dB against the FP64 reference), with the pooled PSNR over all heads as a black tick.
Methods that failed or were skipped are listed under the panel.  Needs matplotlib
(pip install matplotlib); without it the script says so and exits 3.
"""
import argparse
import json
import math
import sys

from plot_common import pyplot


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("json", help="output of tests/gpu/fidelity_long.py --json")
    ap.add_argument("-o", "--out", default=None, help="PNG path (default: the JSON path with .png)")
    args = ap.parse_args()
    plt = pyplot("plot_fidelity")
    if plt is None:
        return 3
    with open(args.json) as f:
        data = json.load(f)
    inputs = data.get("inputs", [])
    if not inputs:
        print(f"plot_fidelity: {args.json} has no inputs", file=sys.stderr)
        return 1
    out = args.out or (args.json[:-5] if args.json.endswith(".json") else args.json) + ".png"
    n = len(inputs)
    fig, axes = plt.subplots(n, 1, figsize=(12, 3.6 * n), squeeze=False)
    for ax, inp in zip(axes[:, 0], inputs):
        ok = [(name, m) for name, m in inp["methods"].items() if "per_head" in m]
        failed = [f"{name}: {m.get('error', '?')[:60]}" for name, m in inp["methods"].items() if "per_head" not in m]
        heads = inp["shape"][1]
        width = 0.8 / max(heads, 1)
        cmap = plt.get_cmap("viridis")
        for i, (name, m) in enumerate(ok):
            for h, ph in enumerate(m["per_head"]):
                v = ph.get("psnr_db")
                if v is None or not math.isfinite(v):
                    continue
                ax.bar(i - 0.4 + (h + 0.5) * width, v, width * 0.9, color=cmap(h / max(heads - 1, 1)),
                       label=f"head {h}" if i == 0 else None)
            o = m["overall"]["psnr_db"]
            if o is not None and math.isfinite(o):
                ax.plot([i - 0.42, i + 0.42], [o, o], color="black", lw=1.5,
                        label="all heads" if i == 0 else None)
                ax.text(i, o + 0.5, f"{o:.1f}", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(ok)))
        ax.set_xticklabels([name for name, _ in ok], fontsize=8, rotation=12, ha="right")
        ax.set_ylabel("PSNR vs FP64 (dB)")
        reg = inp.get("regime", [])
        tails = ", ".join(f"{r['tail_mass_2m15_mean']:.1e}" for r in reg)
        ax.set_title(f"{inp['name']}  {tuple(inp['shape'])}   mass < 2^-15 of row max per head: {tails}",
                     fontsize=9)
        vals = [ph["psnr_db"] for _, m in ok for ph in m["per_head"]
                if ph.get("psnr_db") is not None and math.isfinite(ph["psnr_db"])]
        if vals:
            ax.set_ylim(max(0.0, min(vals) - 5), max(vals) + 5)
        ax.grid(axis="y", alpha=0.3)
        if ok:
            ax.legend(fontsize=7, ncol=min(heads + 1, 9), loc="lower right")
        if failed:
            ax.text(0.0, -0.28, "not run: " + "; ".join(failed), transform=ax.transAxes, fontsize=7,
                    va="top")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"plot_fidelity: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
