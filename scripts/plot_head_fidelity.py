#!/usr/bin/env python3
"""Per-head PSNR over sage2-8bit of the default method, with its per-head recipes (vcattn.Plan)
and as it was (policy=None), for every input and k-means seed of a head_fidelity.json
(tests/gpu/head_fidelity.py), with the real SageAttention2 kernel for reference.

    python3 scripts/plot_head_fidelity.py docs/results/2026-12-04-head-recipes/head_fidelity.json [out.png]
"""
import json
import os
import sys

from plot_common import pyplot


def main():
    src = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(src), "head_fidelity.png")
    plt = pyplot("plot_head_fidelity.py")
    if plt is None:
        return 1
    res = json.load(open(src))
    names = list(res["inputs"])
    fig, axes = plt.subplots(1, len(names), figsize=(max(4.2 * len(names), 7.0), 4.2), sharey=True, squeeze=False)
    axes = axes[0]  # one input: still a row of one
    for ax, name in zip(axes, names):
        r = res["inputs"][name]
        base = r["sage2-8bit"]["head_psnr"]
        heads = range(len(base))
        for s, row in r["seeds"].items():
            pol = [x - b for x, b in zip(row["policy"]["head_psnr"], base)]
            old = [x - b for x, b in zip(row["method_as_is"]["head_psnr"], base)]
            ax.plot(heads, pol, "o", color="tab:blue", alpha=0.7, label="per-head recipes (Plan)" if s == "0" else None)
            ax.plot(heads, old, "x", color="tab:red", alpha=0.7, label="method as it was (policy=None)" if s == "0" else None)
        if "sageattention2" in r:
            sa = [x - b for x, b in zip(r["sageattention2"]["head_psnr"], base)]
            ax.plot(heads, sa, "_", color="black", markersize=12, label="SageAttention2 kernel")
        ax.axhline(0.0, color="gray", lw=0.8)
        ax.axhline(-0.1, color="gray", lw=0.8, ls=":")
        ax.set_title(f"{name} {tuple(r['shape'])}", fontsize=9)
        ax.set_xlabel("head")
        ax.set_xticks(list(heads))
    axes[0].set_ylabel("PSNR over sage2-8bit, dB (k-means seeds 0-3)")
    axes[0].legend(fontsize=7, loc="lower left")
    fig.suptitle(f"{res['method']} per head, {res.get('gpu', 'GPU')}, every row vs FP64", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
