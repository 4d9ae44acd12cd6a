#!/usr/bin/env python3
"""The split's trade-off: speed and randn fidelity against the share of exp-path keys.

    python3 scripts/plot_split_fraction.py docs/results/2026-12-02-split-fraction [-o split_fraction.png]

Reads, from that folder, ab_fraction.txt (dev/ab_bench.sh with the builds devbin_14, devbin_38
and devbin_s: 1/4, 3/8 and 1/2 of the keys by the exp path, each also timing the ExpCast
block-max default) and fid_{14,38,12}[_randn{1,2}].json (tests/gpu/fidelity_long.py of each
build; randn generator seeds 0, 1, 2).  Draws the split's kernel speed-up over cuDNN BF16 at Wan
720p (median of the rounds; the default's as a line) and its randn PSNR over sage2-8bit per seed,
against the share.  matplotlib is optional: without it the script says so and exits 3.
"""
import argparse
import json
import os
import re
import statistics
import sys

from plot_common import pyplot

BUILDS = {"devbin_14": ("14", 0.25), "devbin_38": ("38", 0.375), "devbin_s": ("12", 0.5)}
SHAPE = "1,40,75600,75600,128"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder")
    ap.add_argument("-o", "--out", default=None)
    a = ap.parse_args()
    plt = pyplot("plot_split_fraction")
    if plt is None:
        return 3
    cudnn, split, default = None, {}, []
    for line in open(os.path.join(a.folder, "ab_fraction.txt")):
        m = re.match(r"SDPA cudnn \((.*?)\) ([\d.]+) ms", line)
        if m and m.group(1) == SHAPE:
            cudnn = float(m.group(2))
        m = re.match(r"\[(\S+) r\d+\] BENCH (\S+)\s+\((.*?)\) .*kernel ([\d.]+) ms", line)
        if m and m.group(3) == SHAPE and m.group(1) in BUILDS:
            if m.group(2) == "vsmooth-split-blockmax-8bit":
                split.setdefault(BUILDS[m.group(1)][1], []).append(float(m.group(4)))
            elif m.group(2) == "vsmooth-expcast-blockmax-8bit":
                default.append(float(m.group(4)))
    if cudnn is None or not split:
        print("plot_split_fraction: no Wan 720p lines in ab_fraction.txt", file=sys.stderr)
        return 2
    shares = sorted(split)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.plot(shares, [cudnn / statistics.median(split[s]) for s in shares], marker="o", label="split (kernel)")
    ax1.axhline(cudnn / statistics.median(default), color="tab:green", ls="--", label="ExpCast block-max (all keys)")
    ax1.axhline(1.70, color="gray", lw=0.8, label="issue 12's line, 1.70x")
    ax1.set_xlabel("share of a block's keys by the exp path")
    ax1.set_ylabel("speed-up over cuDNN BF16, Wan 720p (same call)")
    ax1.legend(fontsize=8)
    ax1.grid(alpha=0.3)
    for seed, suffix in ((0, ""), (1, "_randn1"), (2, "_randn2")):
        xs, ys = [], []
        for tag, share in BUILDS.values():
            p = os.path.join(a.folder, f"fid_{tag}{suffix}.json")
            if not os.path.exists(p):
                continue
            for inp in json.load(open(p))["inputs"]:
                if inp["name"] == "randn-8x8192":
                    ms = inp["methods"]
                    xs.append(share)
                    ys.append(ms["vsmooth-split-blockmax-8bit"]["overall"]["psnr_db"] - ms["sage2-8bit"]["overall"]["psnr_db"])
        order = sorted(range(len(xs)), key=lambda i: xs[i])
        ax2.plot([xs[i] for i in order], [ys[i] for i in order], marker="o", label=f"randn seed {seed}")
    ax2.axhline(0.0, color="gray", lw=0.8, label="sage2-8bit")
    ax2.set_xlabel("share of a block's keys by the exp path")
    ax2.set_ylabel("randn PSNR over sage2-8bit (dB)")
    ax2.legend(fontsize=8)
    ax2.grid(alpha=0.3)
    fig.suptitle("vsmooth-split-blockmax-8bit on the H200: " + a.folder, fontsize=9)
    fig.tight_layout()
    out = a.out or os.path.join(a.folder, "split_fraction.png")
    fig.savefig(out, dpi=120)
    print("plot_split_fraction: wrote " + out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
