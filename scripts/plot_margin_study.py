#!/usr/bin/env python3
"""The head-recipe measurement against the truth: per head and k-means seed, the default's gain
over sage2-8bit on the policy's 512 rows (with two standard errors, the floor policy's yardstick)
against its gain on every row, one panel per input of dev/margin_study.py's JSON files.

    python3 scripts/plot_margin_study.py OUT.png F.json [F.json ...]
"""
import json
import os
import sys

from plot_common import pyplot


def main():
    if len(sys.argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    out, srcs = sys.argv[1], sys.argv[2:]
    plt = pyplot("plot_margin_study.py")
    if plt is None:
        return 1
    fig, axes = plt.subplots(1, len(srcs), figsize=(4.0 * len(srcs), 4.0))
    for ax, src in zip(axes if len(srcs) > 1 else [axes], srcs):
        r = json.load(open(src))
        lo, hi = float("inf"), float("-inf")
        for seed, d in r["seeds"].items():
            ax.errorbar(d["gain_all"], d["gain_rows"], yerr=[2 * s for s in d["se_rows"]], fmt="o", ms=3,
                        capsize=2, label=f"seed {seed}")
            lo = min(lo, *d["gain_all"], *[g - 2 * s for g, s in zip(d["gain_rows"], d["se_rows"])])
            hi = max(hi, *d["gain_all"], *[g + 2 * s for g, s in zip(d["gain_rows"], d["se_rows"])])
        pad = 0.05 * (hi - lo)
        ax.plot([lo - pad, hi + pad], [lo - pad, hi + pad], color="grey", lw=0.8)
        ax.axhline(0, color="black", lw=0.6, ls=":")
        ax.axvline(0, color="black", lw=0.6, ls=":")
        name = os.path.basename(r["spec"].rstrip("/"))
        truth = "every row" if r["truth_rows"] == r["shape"][2] else f"{r['truth_rows']} rows"
        ax.set_title(f"{name}\n{tuple(r['shape'])}", fontsize=9)
        ax.set_xlabel(f"gain over sage2-8bit on {truth} (dB)")
        ax.set_ylabel(f"on the {r['rows']} measured rows, +-2 SE (dB)")
        ax.legend(fontsize=7)
    fig.suptitle("The floor policy's measurement: recipe 0 (k-means, the method's P), CPU simulation", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
