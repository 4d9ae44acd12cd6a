#!/usr/bin/env python3
"""The split's last trade-off: the share of exp keys with the centred ExpCast codes.

    python3 scripts/plot_split_centring.py [-o docs/results/2026-12-04/split_centring.png]

Reads the recorded device results (docs/results/): the randn PSNR of vsmooth-split-blockmax-8bit
over sage2-8bit per generator seed (tests/gpu/fidelity_long.py JSON) for three builds - the 3/8
split with the paper's beta (shipped until 2026-12-04; 2026-12-02-split/ and 2026-12-02-turn/),
the 1/4 split with the codes centred on the block's top key (kept; 2026-12-04/call1, call2,
call4) and the 5/16 centred split (2026-12-04/call3) - and their kernel speed-up over cuDNN BF16
at Wan 720p in one call (2026-12-04/call3/ab.txt, dev/ab_bench.sh, median of three rounds).
Left: randn margin per seed; right: speed per build, with issue 12's two lines.  matplotlib is
optional: without it the script says so and exits 3.
"""
import argparse
import json
import os
import re
import statistics
import sys

from plot_common import pyplot

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "results")
SHAPE = "1,40,75600,75600,128"
# build label -> (devbin name in call3/ab.txt, {seed: JSON under docs/results})
BUILDS = {
    "3/8, beta -0.35 (shipped before)": ("devbin_f", {
        0: "2026-12-02-split/fidelity_long.json",
        **{s: f"2026-12-02-split/fidelity_randn_seed{s}.json" for s in (1, 2, 3)},
        **{s: f"2026-12-02-turn/randn_seed{s}.json" for s in (4, 5, 6, 7)}}),
    "1/4, centred (kept)": ("devbin_a", {
        0: "2026-12-04/call1/fid_n.json", 1: "2026-12-04/call1/fid_randn1.json",
        2: "2026-12-04/call1/fid_randn2.json", 3: "2026-12-04/call4/fid_randn3.json",
        **{s: f"2026-12-04/call2/fid_randn{s}.json" for s in (4, 5, 6, 7)}}),
    "5/16, centred": ("devbin_h", {
        0: "2026-12-04/call3/fid_h.json", **{s: f"2026-12-04/call3/fid_h_randn{s}.json" for s in range(1, 8)}}),
}


def randn_margin(path):
    for inp in json.load(open(path))["inputs"]:
        if inp["name"] == "randn-8x8192":
            ms = inp["methods"]
            return ms["vsmooth-split-blockmax-8bit"]["overall"]["psnr_db"] - ms["sage2-8bit"]["overall"]["psnr_db"]
    return None


def speeds(ab_path):
    cudnn, kern = None, {}
    for line in open(ab_path):
        m = re.match(r"SDPA cudnn \((.*?)\) ([\d.]+) ms", line)
        if m and m.group(1) == SHAPE:
            cudnn = float(m.group(2))
        m = re.match(r"\[(\S+) r\d+\] BENCH vsmooth-split-blockmax-8bit\s+\((.*?)\) .*kernel ([\d.]+) ms", line)
        if m and m.group(2) == SHAPE:
            kern.setdefault(m.group(1), []).append(float(m.group(3)))
    return {b: cudnn / statistics.median(v) for b, v in kern.items()} if cudnn else {}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", default=os.path.join(ROOT, "2026-12-04", "split_centring.png"))
    a = ap.parse_args()
    plt = pyplot("plot_split_centring")
    if plt is None:
        return 3
    sp = speeds(os.path.join(ROOT, "2026-12-04", "call3", "ab.txt"))
    if not sp:
        print("plot_split_centring: no Wan 720p lines in call3/ab.txt", file=sys.stderr)
        return 2
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [3, 2]})
    for label, (_, files) in BUILDS.items():
        pts = [(s, randn_margin(os.path.join(ROOT, f))) for s, f in sorted(files.items())
               if os.path.exists(os.path.join(ROOT, f))]
        pts = [(s, y) for s, y in pts if y is not None]
        ax1.plot([s for s, _ in pts], [y for _, y in pts], marker="o", label=label)
    ax1.axhline(0.0, color="gray", lw=0.8, label="sage2-8bit (issue 12's line)")
    ax1.set_xlabel("randn-8x8192 generator seed")
    ax1.set_ylabel("PSNR over sage2-8bit (dB), every row")
    ax1.legend(fontsize=8)
    ax1.grid(alpha=0.3)
    labels = list(BUILDS)
    ys = [sp.get(BUILDS[l][0], float("nan")) for l in labels]
    ax2.bar(range(len(labels)), ys, color=["tab:blue", "tab:orange", "tab:green"])
    for i, y in enumerate(ys):
        ax2.text(i, y + 0.005, f"{y:.3f}x", ha="center", fontsize=8)
    ax2.axhline(1.70, color="gray", lw=0.8, label="issue 12's line, 1.70x")
    ax2.set_xticks(range(len(labels)))
    ax2.set_xticklabels([l.split(" (")[0] for l in labels], fontsize=8)
    ax2.set_ylim(1.6, 1.8)
    ax2.set_ylabel("kernel x cuDNN BF16, Wan 720p (one call)")
    ax2.legend(fontsize=8)
    ax2.grid(alpha=0.3, axis="y")
    fig.suptitle("vsmooth-split-blockmax-8bit on the H200 (docs/results/2026-12-04)", fontsize=9)
    fig.tight_layout()
    fig.savefig(a.out, dpi=120)
    print("plot_split_centring: wrote " + a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
