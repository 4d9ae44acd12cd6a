#!/usr/bin/env python3
"""HunyuanVideo-1.5's padded joint attention on the H200: vcattn with the mask read as lengths,
against what the model runs today and against cuDNN on the valid tokens (issue 32).

Shape: 720p x 121 frames = a 31 x 45 x 80 latent grid = 111,600 video tokens, then --text text
tokens of which --pad are padding (the model moves the padding to the end), 16 heads x 128.
Random BF16 inputs (randn, the same draws for every variant), one run, CUDA events, median of
--reps timings after a warm-up:

  * ``sdpa-mask-keys``: torch SDPA with the key-padding mask (B, 1, 1, S) - HunyuanVideo's
    call (torch picks its backend for a masked call);
  * ``sdpa-mask-joint``: torch SDPA with the joint (B, 1, S, S) boolean mask valid[i] & valid[j]
    - HunyuanVideo-1.5's call (the mask is built outside the timing, as the model builds it
    per call; --no-joint skips it: it is S^2 bytes);
  * ``cudnn-valid``: torch SDPA on the cuDNN backend over the valid tokens only (no mask);
  * ``vcattn-mask``: vcattn.attention(attn_mask=joint mask), the default method with a plan
    grouped once (a reuse step) - the mask's lengths are read once and kept (the kernel's
    time: HunyuanVideo-1.5's processor builds a new mask in every call, and each is read once,
    ~1 byte per entry - tests/gpu/mask_read.py times that read and the model's build);
  * ``vcattn-valid``: vcattn.attention on the valid tokens (what the masked call runs);
  * ``vcattn-mask-method``: as ``vcattn-mask`` with ``Plan(policy=None)``: the method as designed
    on every head.  On randn the default plan's per-head policy gives most heads the exact P
    (the split's P is within noise of sage2-8bit's there and the floor asks for a margin;
    docs/method.md, "Per-head recipes"), which costs ~10%; ``recipes`` in the JSON counts the
    heads per recipe the default plan chose.

Step estimate (a HunyuanVideo-1.5-shaped step, 54 blocks): one block's linear layers timed on
the same tokens (QKV + output projection, 2048 -> 8192 -> 2048 MLP, BF16 matmuls) plus the
attention, times 54; the attention variants compared as the model's masked SDPA vs vcattn.

    python3 tests/gpu/masked_bench.py [--reps 5] [--text 1000 --pad 300] [--json out.json]
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
import vcattn  # noqa: E402
from vcattn import head_policy  # noqa: E402

HEADS, HEAD_DIM, HIDDEN, MLP, BLOCKS = 16, 128, 2048, 8192, 54


def timed(fn, reps):
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    return sorted(ts)[len(ts) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--frames", type=int, default=31)
    ap.add_argument("--height", type=int, default=45)
    ap.add_argument("--width", type=int, default=80)
    ap.add_argument("--text", type=int, default=1000)
    ap.add_argument("--pad", type=int, default=300)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-joint", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    dev = torch.device("cuda")
    video = args.frames * args.height * args.width
    S = video + args.text
    L = S - args.pad
    g = torch.Generator(device=dev).manual_seed(0)
    q, k, v = (torch.randn(1, HEADS, S, HEAD_DIM, device=dev, dtype=torch.bfloat16, generator=g) for _ in range(3))
    valid = torch.arange(S, device=dev) < L
    key_mask = valid[None, None, None, :]
    joint = None if args.no_joint else (valid[:, None] & valid[None, :])[None, None]
    res = {"shape": [1, HEADS, S, HEAD_DIM], "valid": L, "padded": args.pad, "device": torch.cuda.get_device_name(),
           "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(), "method": vcattn.DEFAULT_METHOD}
    ms, failed = {}, {}
    for name, m in (("sdpa-mask-keys", key_mask), ("sdpa-mask-joint", joint)):
        if m is None:
            continue
        try:  # what the model runs today; a backend that cannot take the mask's size is reported
            ms[name] = timed(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=m), args.reps)
        except RuntimeError as e:  # e.g. out of memory
            failed[name] = str(e).splitlines()[0][:200]
            torch.cuda.empty_cache()
    res["sdpa_failed"] = failed
    qv, kv, vv = q[:, :, :L], k[:, :, :L], v[:, :, :L]

    def cudnn_valid():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(qv, kv, vv)

    ms["cudnn-valid"] = timed(cudnn_valid, args.reps)
    plan_m, plan_v = vcattn.Plan(), vcattn.Plan()
    mask = joint if joint is not None else key_mask
    ms["vcattn-mask"] = timed(lambda: vcattn.attention(q, k, v, attn_mask=mask, plan=plan_m), args.reps)
    ms["vcattn-valid"] = timed(lambda: vcattn.attention(qv, kv, vv, plan=plan_v), args.reps)
    plan_n = vcattn.Plan(policy=None)
    ms["vcattn-mask-method"] = timed(lambda: vcattn.attention(q, k, v, attn_mask=mask, plan=plan_n), args.reps)
    parts = [plan_m] + list(plan_m.__dict__.get("_parts", {}).values())  # ragged batches: a plan per element
    chosen = [np.asarray(p.recipes).reshape(-1) for p in parts if p.recipes is not None]
    if chosen:
        r, c = np.unique(np.concatenate(chosen), return_counts=True)
        res["recipes"] = {head_policy.RECIPES[int(x)]: int(n) for x, n in zip(r, c)}
    # fidelity on the valid rows: vcattn vs cuDNN BF16 (both against the same inputs)
    out = vcattn.attention(q, k, v, attn_mask=mask, plan=plan_m)
    ref = cudnn_valid()
    res["vcattn_vs_cudnn_valid"] = vcattn.fidelity(ref.float(), out[:, :, :L].float())
    res["padded_rows_zero"] = bool((out[:, :, L:] == 0).all())
    res["bit_identical_to_valid_call"] = bool(torch.equal(out[:, :, :L], vcattn.attention(qv, kv, vv, plan=plan_v)))
    # one block's linear layers on the same tokens (BF16)
    x = torch.randn(S, HIDDEN, device=dev, dtype=torch.bfloat16, generator=g)
    w_qkv = torch.randn(3 * HIDDEN, HIDDEN, device=dev, dtype=torch.bfloat16, generator=g) * 0.02
    w_o = torch.randn(HIDDEN, HIDDEN, device=dev, dtype=torch.bfloat16, generator=g) * 0.02
    w_1 = torch.randn(MLP, HIDDEN, device=dev, dtype=torch.bfloat16, generator=g) * 0.02
    w_2 = torch.randn(HIDDEN, MLP, device=dev, dtype=torch.bfloat16, generator=g) * 0.02

    def linears():
        y = F.linear(x, w_qkv)
        z = F.linear(y[:, :HIDDEN], w_o)
        return F.linear(F.gelu(F.linear(z, w_1), approximate="tanh"), w_2)

    ms["block-linears"] = timed(linears, args.reps)
    res["ms"] = ms
    today = ms.get("sdpa-mask-joint", ms.get("sdpa-mask-keys", float("nan")))
    res["ratios"] = {
        "cudnn-valid / vcattn-mask": ms["cudnn-valid"] / ms["vcattn-mask"],
        "cudnn-valid / vcattn-mask-method": ms["cudnn-valid"] / ms["vcattn-mask-method"],
        "sdpa-mask-keys / vcattn-mask": ms.get("sdpa-mask-keys", float("nan")) / ms["vcattn-mask"],
        "today / vcattn-mask": today / ms["vcattn-mask"],
        "vcattn-mask / vcattn-valid": ms["vcattn-mask"] / ms["vcattn-valid"],
        "step estimate (today / vcattn)": (BLOCKS * (ms["block-linears"] + today))
        / (BLOCKS * (ms["block-linears"] + ms["vcattn-mask"])),
        "step estimate (cudnn-valid / vcattn)": (ms["block-linears"] + ms["cudnn-valid"])
        / (ms["block-linears"] + ms["vcattn-mask"]),
    }
    print(json.dumps(res, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
