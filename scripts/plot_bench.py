#!/usr/bin/env python3
"""Speed against sequence length, from the benchmark log of scripts/device_check.sh bench.

    python3 scripts/plot_bench.py docs/results/2026-12-01/bench.txt [-o bench.png]
                                  [--tflops] [--methods a,b,...] [--device NAME]

Reads the `SDPA <backend> (B,H,Sq,Skv,D) <ms> ms` and `BENCH <method> (...) full <ms> ms ...
kernel <ms> ms` lines of one run and draws, for the self-attention shapes (Sq = Skv, B = 1),
each method's speed-up over cuDNN BF16 (kernel alone, and SageAttention2's full call) against
the number of keys; ``--tflops``: every method's and peer's (cuDNN BF16, SageAttention2, cuDNN
FP8) TFLOP/s (4 B H Sq Skv D / time) instead, one panel per head_dim.  ``--methods``: only
these vcattn methods.  ``--device``: the GPU named in the title (default: the first line of
gpu.txt beside the log, as the device calls write it).
matplotlib is optional: without it the script says so and exits 3.
"""
import argparse
import os
import re
import statistics
import sys

from plot_common import pyplot


def parse(path):
    """Lines as device_check.sh writes them, or as dev/ab_bench.sh does (each prefixed by
    "[build rN] "; the rounds of one method and shape give their median)."""
    sdpa, runs = {}, {}
    for line in open(path):
        line = re.sub(r"^\[[^]]*\] ", "", line)
        m = re.match(r"SDPA ([\w-]+) \((\d+),(\d+),(\d+),(\d+),(\d+)\) ([\d.]+) ms", line)
        if m:
            sdpa[(m.group(1),) + tuple(int(x) for x in m.group(2, 3, 4, 5, 6))] = float(m.group(7))
        m = re.match(r"BENCH (\S+)\s+\((\d+),(\d+),(\d+),(\d+),(\d+)\) full ([\d.]+) ms .* kernel ([\d.]+) ms", line)
        if m:
            key = (m.group(1),) + tuple(int(x) for x in m.group(2, 3, 4, 5, 6))
            runs.setdefault(key, []).append((float(m.group(7)), float(m.group(8))))
    bench = {k: (statistics.median(f for f, _ in v), statistics.median(t for _, t in v)) for k, v in runs.items()}
    return sdpa, bench


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log")
    ap.add_argument("-o", "--out", default=None)
    ap.add_argument("--tflops", action="store_true", help="TFLOP/s instead of the speed-up over cuDNN")
    ap.add_argument("--methods", default=None, help="comma list: only these vcattn methods")
    ap.add_argument("--device", default=None, help="the GPU for the title (default: gpu.txt beside the log)")
    a = ap.parse_args()
    device = a.device
    gpu_txt = os.path.join(os.path.dirname(a.log), "gpu.txt")
    if device is None and os.path.exists(gpu_txt):
        device = open(gpu_txt).readline().split(",")[0].strip()
    device = device or "GPU"
    plt = pyplot("plot_bench")
    if plt is None:
        return 3
    sdpa, bench = parse(a.log)
    # one shape per (head_dim, key count): the one with the most heads
    best = {}
    for k in bench:
        s = k[1:]
        if s[0] == 1 and s[2] == s[3] and s[1] >= best.get((s[4], s[3]), (0, 0))[1]:
            best[(s[4], s[3])] = s
    methods = sorted({k[0] for k in bench})
    if a.methods:
        methods = [m for m in a.methods.split(",") if m in methods]
    if a.tflops:
        def tf(s, ms):  # 4 B H Sq Skv D flops in ms
            return 4.0 * s[0] * s[1] * s[2] * s[3] * s[4] / (ms * 1e-3) / 1e12
        dims = sorted({d for d, _ in best}, reverse=True)
        fig, axes = plt.subplots(1, len(dims), figsize=(6.5 * len(dims) + 4, 4.8), squeeze=False)
        for ax, dim in zip(axes[0], dims):
            shapes = [best[key] for key in sorted(best) if key[0] == dim]
            for name, label, style in (("cudnn", "cuDNN BF16 (torch SDPA)", "k--"),
                                       ("sage2", "SageAttention2 sm90", "k:"),
                                       ("cudnn-fp8", "cuDNN FP8 (pre-quantized)", "k-.")):
                xs = [s[3] for s in shapes if (name,) + s in sdpa]
                ys = [tf(s, sdpa[(name,) + s]) for s in shapes if (name,) + s in sdpa]
                if xs:
                    ax.plot(xs, ys, style, marker="s", label=label)
            for m in methods:
                xs = [s[3] for s in shapes if (m,) + s in bench]
                ys = [tf(s, bench[(m,) + s][1]) for s in shapes if (m,) + s in bench]
                ax.plot(xs, ys, marker="o", label=f"vcattn {m} (kernel)")
            ax.set_xscale("log")
            heads = ", ".join(f"{s[3]:,}: H = {s[1]}" for s in shapes)
            ax.set_xlabel(f"keys (Sq = Skv; {heads})", fontsize=8)
            ax.set_ylabel("TFLOP/s (4 B H Sq Skv D / time)")
            ax.set_title(f"{device}, head_dim {dim}, BF16 inputs, one run", fontsize=9)
            ax.grid(alpha=0.3)
        axes[0][-1].legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
        out = a.out or re.sub(r"\.txt$", "", a.log) + "_tflops.png"
        fig.tight_layout()
        fig.savefig(out, dpi=120)
        print(f"plot_bench: wrote {out}")
        return 0
    fig, ax = plt.subplots(figsize=(8, 4.5))
    shapes = [best[key] for key in sorted(best) if key[0] == 128]
    for m in methods:
        xs, ys = [], []
        for s in shapes:
            c = sdpa.get(("cudnn",) + s)
            if c and (m,) + s in bench:
                xs.append(s[3]); ys.append(c / bench[(m,) + s][1])
        ax.plot(xs, ys, marker="o", label=f"vcattn {m} (kernel)")
    xs, ys = [], []
    for s in shapes:
        c, g = sdpa.get(("cudnn",) + s), sdpa.get(("sage2",) + s)
        if c and g:
            xs.append(s[3]); ys.append(c / g)
    if xs:
        ax.plot(xs, ys, marker="s", ls="--", color="k", label="SageAttention2 sm90 (full call)")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("keys (Sq = Skv; H = 40, except 118,800: H = 24)")
    ax.set_ylabel("speed-up over cuDNN BF16 (same run)")
    ax.set_title(f"{device}, D = 128, BF16 inputs: " + a.log)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    out = a.out or re.sub(r"\.txt$", "", a.log) + ".png"
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"plot_bench: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
