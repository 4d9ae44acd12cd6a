#!/usr/bin/env python3
"""Where a vcattn call's time goes, kernel by kernel (torch.profiler; run on the device).

Times each variant as masked_bench.py builds it - HunyuanVideo-1.5's padded joint attention
(1, 16, 111,600 + --text, 128) with --pad padded tokens, randn or --inputs - and prints, per variant, the
CUDA kernels of --reps calls summed by name (ms per call) next to the call's wall time on
CUDA events, so the call's cost over its attention kernel is read kernel by kernel.

    python3 dev/profile_call.py [--text 1000 --pad 300] [--reps 5] [--rounds 3] [--no-profile] [--json out.json]

--frames 21 --text 0 --pad 0 is Wan 720p's unmasked call (no mask: the "mask" variants are then
the plain call).  --inputs DIR takes q, k, v from `vcattn workload --out DIR` (BF16 as uint16)
instead of randn: their first frames x 45 x 80 + --text tokens, the same heads.  The workload has
no text model, so the "text" tokens there are more video-like tokens; what it changes is the
default plan's per-head choice (on randn most heads get the exact P: docs/method.md, "Per-head
recipes") and which tiles the DIRECT kernel runs.
"""
import argparse
import collections
import json
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "python"))
sys.path.insert(0, os.path.join(here, "..", "tests", "gpu"))
import vcattn  # noqa: E402
from head_fidelity import load_bf16  # noqa: E402
from masked_bench import timed as wall  # noqa: E402  (CUDA-event median after a warm-up)


def per_kernel(fn, reps):
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    acc = collections.defaultdict(float)
    cnt = collections.Counter()
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            acc[e.name] += e.device_time_total / 1e3
            cnt[e.name] += 1
    return {k[:110]: (acc[k] / reps, cnt[k] // reps) for k in sorted(acc, key=acc.get, reverse=True)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--frames", type=int, default=31, help="latent frames of the 45 x 80 grid (31: 720p x 121 frames)")
    ap.add_argument("--text", type=int, default=1000)
    ap.add_argument("--pad", type=int, default=300)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=0,
                    help="then this many rounds of the variants' wall times in turn (clock and heat drift "
                         "between variants timed one after another)")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--inputs", default=None, help="a `vcattn workload --out` folder instead of randn")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    dev = torch.device("cuda")
    S = args.frames * 45 * 80 + args.text
    L = S - args.pad
    if args.inputs:
        q, k, v = (load_bf16(os.path.join(args.inputs, f"{t}.npy"))[:, :, :S].contiguous() for t in "qkv")
        if q.shape[2] < S:
            sys.exit(f"{args.inputs}: {q.shape[2]} tokens, fewer than the {S} needed (more frames)")
        args.heads = q.shape[1]
    else:
        g = torch.Generator(device=dev).manual_seed(0)
        q, k, v = (torch.randn(1, args.heads, S, 128, device=dev, dtype=torch.bfloat16, generator=g) for _ in range(3))
    valid = torch.arange(S, device=dev) < L
    joint = None if args.pad == 0 else (valid[:, None] & valid[None, :])[None, None]
    qv, kv, vv = q[:, :, :L], k[:, :, :L], v[:, :, :L]
    plans = {"mask": vcattn.Plan(), "valid": vcattn.Plan(), "mask-method": vcattn.Plan(policy=None), "valid-method": vcattn.Plan(policy=None)}

    def cudnn_valid():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(qv, kv, vv)

    variants = {
        "cudnn-valid": cudnn_valid,
        "vcattn-mask": lambda: vcattn.attention(q, k, v, attn_mask=joint, plan=plans["mask"]),
        "vcattn-valid": lambda: vcattn.attention(qv, kv, vv, plan=plans["valid"]),
        "vcattn-mask-method": lambda: vcattn.attention(q, k, v, attn_mask=joint, plan=plans["mask-method"]),
        "vcattn-valid-method": lambda: vcattn.attention(qv, kv, vv, plan=plans["valid-method"]),
    }
    res = {"shape": [1, args.heads, S, 128], "valid": L, "inputs": args.inputs or "randn", "device": torch.cuda.get_device_name(),
           "torch": torch.__version__, "variants": {}}
    for name, fn in variants.items():
        if args.no_profile:
            break
        ms = wall(fn, args.reps)
        kern = per_kernel(fn, args.reps)
        res["variants"][name] = {"wall_ms": ms, "kernels": kern}
        print(f"== {name}: {ms:.2f} ms a call (CUDA events, median of {args.reps})")
        for kname, (t, n) in kern.items():
            if t >= 0.01:
                print(f"  {t:9.3f} ms  x{n:<3d} {kname}")
    rounds = {name: [] for name in variants}
    for r in range(args.rounds):
        for name, fn in variants.items():
            rounds[name].append(wall(fn, args.reps))
        print(f"== round {r}: " + ", ".join(f"{n} {t[-1]:.2f}" for n, t in rounds.items()), flush=True)
    chosen = plans["mask"].recipes
    if chosen is not None:
        from vcattn import head_policy
        res["recipes"] = head_policy.names(chosen)
        print("== the default plan's head recipes: " + ", ".join(res["recipes"]))
    if args.rounds:
        res["rounds_ms"] = rounds
        med = {n: statistics.median(t) for n, t in rounds.items()}  # of an even count: the middle two's mean
        print("== medians of the rounds: " + ", ".join(f"{n} {t:.2f} ms" for n, t in med.items()))
        for n, t in med.items():
            if n != "cudnn-valid":
                print(f"   cudnn-valid / {n} = {med['cudnn-valid'] / t:.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
