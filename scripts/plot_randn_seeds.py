#!/usr/bin/env python3
"""Fidelity on randn over generator seeds, from tests/gpu/fidelity_long.py's JSON files.

    python3 scripts/plot_randn_seeds.py run1.json run2.json ... [-o randn_seeds.png]
        [--methods a,b,...] [--baseline sage2-8bit]

Each file's randn-8x8192 input (its meta.randn_seed names the seed) gives, per method, the
pooled PSNR minus the baseline's and the smallest and largest per-head difference. The
table goes to stdout (one row per method and seed, then each method's range over the seeds);
the chart, one marker per seed with the per-head range as a bar, to the PNG when matplotlib
is installed (without it the script prints the table and says so on stderr).
"""
import argparse
import json
import sys

from plot_common import pyplot

RANDN = "randn-8x8192"
DEFAULT_METHODS = ("vsmooth-split-blockmax-8bit", "vsmooth-expcast-blockmax-8bit", "vsmooth-blockmax-8bit",
                   "sageattention2-real")


def load(paths, baseline, methods):
    rows = {}  # method -> list of (seed, pooled delta, min head delta, max head delta)
    for path in paths:
        with open(path) as f:
            d = json.load(f)
        seed = d["meta"].get("randn_seed", 0)
        for inp in d["inputs"]:
            if inp["name"] != RANDN:
                continue
            base = inp["methods"].get(baseline)
            if not base or "overall" not in base:
                raise SystemExit(f"plot_randn_seeds: {path}: no result for the baseline {baseline!r}")
            for m in methods:
                r = inp["methods"].get(m)
                if not r or "overall" not in r:
                    continue
                heads = [a["psnr_db"] - b["psnr_db"] for a, b in zip(r["per_head"], base["per_head"])]
                rows.setdefault(m, []).append((seed, r["overall"]["psnr_db"] - base["overall"]["psnr_db"],
                                               min(heads), max(heads)))
    if not rows:
        raise SystemExit(f"plot_randn_seeds: no {RANDN} input in {', '.join(paths)}")
    for m in rows:
        rows[m].sort()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("json", nargs="+", help="outputs of tests/gpu/fidelity_long.py --json")
    ap.add_argument("-o", "--out", default="randn_seeds.png", help="PNG path (default randn_seeds.png)")
    ap.add_argument("--methods", default=",".join(DEFAULT_METHODS))
    ap.add_argument("--baseline", default="sage2-8bit")
    args = ap.parse_args()
    methods = [m for m in args.methods.split(",") if m]
    rows = load(args.json, args.baseline, methods)

    print(f"PSNR over {args.baseline} on {RANDN} (dB): pooled, and the per-head range")
    print(f"{'method':32s} {'seed':>4s} {'pooled':>7s} {'head min':>9s} {'head max':>9s}")
    for m in methods:
        for seed, pooled, lo, hi in rows.get(m, []):
            print(f"{m:32s} {seed:4d} {pooled:+7.2f} {lo:+9.2f} {hi:+9.2f}")
    for m in methods:
        if m in rows:
            p = [r[1] for r in rows[m]]
            print(f"{m:32s} over {len(p)} seeds: pooled {min(p):+.2f} .. {max(p):+.2f}")

    plt = pyplot("plot_randn_seeds")
    if plt is None:
        return 0
    fig, ax = plt.subplots(figsize=(8, 4.2))
    n = len(methods)
    for i, m in enumerate(methods):
        if m not in rows:
            continue
        xs = [r[0] + (i - (n - 1) / 2) * 0.12 for r in rows[m]]
        ys = [r[1] for r in rows[m]]
        lo = [r[1] - r[2] for r in rows[m]]
        hi = [r[3] - r[1] for r in rows[m]]
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o", capsize=2, label=m)
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.set_xlabel(f"torch.Generator seed of {RANDN}")
    ax.set_ylabel(f"PSNR - {args.baseline} (dB)")
    ax.set_title("randn (1, 8, 8192, 128): pooled PSNR over the baseline; bars: per-head range")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"plot_randn_seeds: wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
