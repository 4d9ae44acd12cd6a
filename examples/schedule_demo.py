#!/usr/bin/env python3
"""A 40-step denoising schedule driving V-Smooth plans, on random tensors.

    python examples/schedule_demo.py                    # the paper's schedule: group at 0, 4, 8
    python examples/schedule_demo.py --every-step       # group on every step (the upper bound)
    python examples/schedule_demo.py --steps 50 --no-demean-after-window

A PlanCache holds one Plan per layer; each step sets the step index and every layer calls
vcattn.attention with its plan.  On grouping steps the layer re-runs k-means on its V,
warm-started from its previous centroids; on the other steps it reuses the permutation.
The "latents" drift from step to step, so a reused plan slowly goes stale: the table
shows each step's fidelity against the exact reference and the grouping cost.
"""
import argparse
import sys
import time
from pathlib import Path

import numpy as np

try:
    import vcattn
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
    import vcattn


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--head-dim", type=int, default=64, choices=(64, 128))
    ap.add_argument("--method", default="vsmooth-8bit")
    ap.add_argument("--every-step", action="store_true", help="group_every_step=True")
    ap.add_argument("--no-demean-after-window", action="store_true", help="keep_demean_after_window=False")
    ap.add_argument("--clusters", type=int, default=32)
    args = ap.parse_args()

    sched = vcattn.Schedule(args.steps, group_every_step=args.every_step,
                            keep_demean_after_window=not args.no_demean_after_window)
    cache = vcattn.PlanCache(sched, clusters=args.clusters, iterations=8)
    print(sched)
    rng = np.random.default_rng(0)
    shp = (1, args.heads, args.seq, args.head_dim)
    # per layer: a clean signal the latents move towards, with clustered values
    centers = [rng.standard_normal((16, args.head_dim)).astype(np.float32) * 2 for _ in range(args.layers)]
    layers = []
    for li in range(args.layers):
        lab = rng.integers(0, 16, args.seq)
        layers.append(dict(q=rng.standard_normal(shp).astype(np.float32) * 2,
                           k=rng.standard_normal(shp).astype(np.float32),
                           clean=np.ascontiguousarray(np.broadcast_to(centers[li][lab], shp), dtype=np.float32),
                           noise=rng.standard_normal(shp).astype(np.float32)))

    print(f"\n{args.layers} layers x {args.heads} heads x {args.seq} tokens x {args.head_dim}, method {args.method}\n")
    print(f"{'step':>4}  {'action':<7} {'mean PSNR dB':>12} {'vcattn ms':>9}")
    total = 0.0
    for step in range(args.steps):
        cache.set_step(step)
        sigma = 1.0 - step / args.steps                     # noise level falls over the run
        psnr, dt = [], 0.0
        for li, L in enumerate(layers):
            v = (1 - sigma) * L["clean"] + sigma * L["noise"]
            t0 = time.perf_counter()
            out = cache.attention(f"blocks.{li}.attn1", L["q"], L["k"], v, method=args.method)
            dt += (time.perf_counter() - t0) * 1e3
            psnr.append(vcattn.fidelity(vcattn.reference_attention(L["q"], L["k"], v), out)["psnr_db"])
        total += dt
        action = sched.action(step)
        print(f"{step:>4}  {action:<7} {np.mean(psnr):>12.2f} {dt:>9.1f}")

    print(f"\ngrouped at steps {cache.grouped_steps()} (schedule says {sched.grouping_steps()})")
    for name, plan in cache.items():
        print(f"  {name}: {plan.num_groupings} groupings, last at step {plan.last_grouped_step}")
    print(f"vcattn total {total / 1e3:.2f} s (the CPU simulation, k-means included; not the GPU kernel's time)")


if __name__ == "__main__":
    main()
