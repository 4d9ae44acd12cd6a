#!/usr/bin/env python3
"""One denoising step of a Wan2.2-A14B-shaped DiT, cuDNN BF16 attention vs vcattn (issue 5).

Random BF16 weights (no download): dim 5120, 40 heads x 128, FFN 13824, RMSNorm on q/k,
3-D RoPE (Wan's head_dim split 44/42/42 over t/h/w), adaLN-style modulation, self-attention
over the video tokens and cross-attention to 512 text tokens. 720p x 81 frames = a 21 x 45 x
80 latent grid = 75,600 tokens.

Method: run --layers distinct blocks (default 4) of the 40 and extrapolate the step time
linearly (all 40 blocks have the same shape and cost). Timed with CUDA events, median of
--reps runs after a warm-up, both variants in the same process on the same inputs:
  * baseline: torch SDPA forced to the cuDNN backend for every attention;
  * vcattn: self-attention through vcattn.attention (--method, default vcattn.DEFAULT_METHOD) with a
    PlanCache reusing each layer's permutation (a "reuse" step); cross-attention (512 keys)
    stays on cuDNN, where vcattn is slower (docs/benchmarks.md). The schedule's grouping
    cost is added as its 40-step average: (1 cold + 2 warm groupings) / 40 per layer,
    timed here on the same V.
Fidelity: PSNR of the blocks' final hidden states, vcattn vs the BF16 run.

    python3 tests/gpu/wan_step.py [--layers 4] [--reps 3] [--frames 21 --height 45 --width 80]
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
import vcattn  # noqa: E402
from vcattn import _gpu  # noqa: E402

DIM, HEADS, HEAD_DIM, FFN, TEXT = 5120, 40, 128, 13824, 512


def rope_tables(t, h, w, device):
    """cos/sin (S, 64) for Wan's 3-D RoPE: 22/21/21 frequency pairs over t/h/w."""
    def freqs(n, pairs):
        inv = 1.0 / (10000 ** (torch.arange(pairs, device=device, dtype=torch.float64) / pairs))
        return torch.outer(torch.arange(n, device=device, dtype=torch.float64), inv)
    ft, fh, fw = freqs(t, 22), freqs(h, 21), freqs(w, 21)
    grid = torch.cat([ft[:, None, None, :].expand(t, h, w, 22), fh[None, :, None, :].expand(t, h, w, 21),
                      fw[None, None, :, :].expand(t, h, w, 21)], dim=-1).reshape(t * h * w, 64)
    return grid.cos().float(), grid.sin().float()


def apply_rope(x, cos, sin):
    """x: (B, S, H, 128) -> rotated pairs, fp32 (as Wan hands q/k to attention)."""
    xf = x.float().view(*x.shape[:-1], 64, 2)
    a, b = xf[..., 0], xf[..., 1]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.stack([a * c - b * s, a * s + b * c], dim=-1).flatten(-2)


class Block(torch.nn.Module):
    def __init__(self, device):
        super().__init__()
        g = torch.Generator(device=device).manual_seed(torch.randint(1 << 30, ()).item())

        def w(o, i):
            return (torch.randn(o, i, generator=g, device=device) / math.sqrt(i)).to(torch.bfloat16)
        self.qkv, self.o = w(3 * DIM, DIM), w(DIM, DIM)
        self.cq, self.ckv, self.co = w(DIM, DIM), w(2 * DIM, DIM), w(DIM, DIM)
        self.f1, self.f2 = w(FFN, DIM), w(DIM, FFN)
        self.nq, self.nk = torch.ones(DIM, device=device, dtype=torch.bfloat16), torch.ones(DIM, device=device, dtype=torch.bfloat16)
        self.mod = (torch.randn(6, DIM, generator=g, device=device) * 0.1).to(torch.bfloat16)

    def forward(self, x, ctx, cos, sin, self_attn, cross_attn):
        b, s, _ = x.shape
        sh1, sc1, g1, sh2, sc2, g2 = self.mod
        h = F.layer_norm(x, (DIM,)) * (1 + sc1) + sh1
        q, k, v = (h @ self.qkv.t()).split(DIM, dim=-1)
        q = F.rms_norm(q, (DIM,), self.nq).view(b, s, HEADS, HEAD_DIM)
        k = F.rms_norm(k, (DIM,), self.nk).view(b, s, HEADS, HEAD_DIM)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        a = self_attn(q, k, v.view(b, s, HEADS, HEAD_DIM))            # NHD, fp32 q/k, bf16 v
        x = x + (a.reshape(b, s, DIM).to(x.dtype) @ self.o.t()) * g1
        cq = (F.layer_norm(x, (DIM,)) @ self.cq.t()).view(b, s, HEADS, HEAD_DIM)
        ck, cv = (ctx @ self.ckv.t()).split(DIM, dim=-1)
        a = cross_attn(cq, ck.view(b, TEXT, HEADS, HEAD_DIM), cv.view(b, TEXT, HEADS, HEAD_DIM))
        x = x + a.reshape(b, s, DIM).to(x.dtype) @ self.co.t()
        h = F.layer_norm(x, (DIM,)) * (1 + sc2) + sh2
        return x + (F.gelu(h @ self.f1.t(), approximate="tanh") @ self.f2.t()) * g2


def cudnn_attn(q, k, v):
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        o = F.scaled_dot_product_attention(q.transpose(1, 2).to(v.dtype), k.transpose(1, 2).to(v.dtype),
                                           v.transpose(1, 2))
    return o.transpose(1, 2)


def timed(fn, reps):
    ts = []
    for i in range(reps + 1):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        out = fn()
        e1.record()
        torch.cuda.synchronize()
        if i > 0:
            ts.append(e0.elapsed_time(e1))
    ts.sort()
    return ts[len(ts) // 2], out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--frames", type=int, default=21)
    ap.add_argument("--height", type=int, default=45)
    ap.add_argument("--width", type=int, default=80)
    ap.add_argument("--json", default=None)
    ap.add_argument("--method", default=vcattn.DEFAULT_METHOD)
    args = ap.parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    s = args.frames * args.height * args.width
    cos, sin = rope_tables(args.frames, args.height, args.width, dev)
    blocks = [Block(dev) for _ in range(args.layers)]
    x0 = torch.randn(1, s, DIM, device=dev, dtype=torch.bfloat16)
    ctx = torch.randn(1, TEXT, DIM, device=dev, dtype=torch.bfloat16)

    def run(self_attn):
        x = x0
        for blk in blocks:
            x = blk(x, ctx, cos, sin, self_attn, cudnn_attn)
        return x

    cache = vcattn.PlanCache(vcattn.Schedule(40))
    cache.set_step(9)  # a reuse step; groupings are added below as their schedule average
    layer_ids = iter(())

    def vc_self(q, k, v):
        lid = next(layer_ids)
        return vcattn.attention(q, k, v, "NHD", method=args.method, plan=cache.layer(lid), step=9, strict=True)

    # plans: group each layer once (step 0), so step 9 reuses them
    cache.set_step(0)
    layer_ids = iter(range(args.layers))
    run(lambda q, k, v: vcattn.attention(q, k, v, "NHD", method=args.method, plan=cache.layer(next(layer_ids)), step=0, strict=True))
    cache.set_step(9)

    t_base, y_base = timed(lambda: run(cudnn_attn), args.reps)

    def vc_run():
        nonlocal layer_ids
        layer_ids = iter(range(args.layers))
        return run(vc_self)
    t_vc, y_vc = timed(vc_run, args.reps)

    # attention alone, one layer's shapes, both ways (for the attention share of the step)
    q = torch.randn(1, s, HEADS, HEAD_DIM, device=dev, dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)
    t_att_base, _ = timed(lambda: cudnn_attn(q, k, v), args.reps)
    p = vcattn.Plan(clusters=64, iterations=8)
    vcattn.attention(q, k, v, "NHD", method=args.method, plan=p, strict=True)
    t_att_vc, _ = timed(lambda: vcattn.attention(q, k, v, "NHD", method=args.method, plan=p, strict=True), args.reps)
    # GPU grouping on this V: cold (8 iterations, no warm start) and warm (2 iterations from
    # the cold centroids), the calls a PlanCache makes on grouping steps
    t_cold, (_, cent) = timed(lambda: _gpu.kmeans(v, "NHD", 64, 8, 0), args.reps)
    t_warm, _ = timed(lambda: _gpu.kmeans(v, "NHD", 64, 2, 0, init=cent), args.reps)
    group_avg = (t_cold + 2 * t_warm) / 40.0  # per layer per step, 40-step schedule

    L = 40
    step_base = t_base / args.layers * L
    step_vc = (t_vc / args.layers + group_avg) * L
    diff = (y_vc.float() - y_base.float())
    psnr = 20 * math.log10(y_base.float().abs().max().item() / diff.pow(2).mean().sqrt().item())
    res = dict(method=args.method, tokens=s, layers_run=args.layers, layers_model=L,
               step_ms_cudnn=step_base, step_ms_vcattn=step_vc, ratio=step_base / step_vc,
               attention_ms_cudnn=t_att_base, attention_ms_vcattn=t_att_vc,
               attention_share_cudnn=t_att_base * L / step_base,
               grouping_ms_cold=t_cold, grouping_ms_warm=t_warm, grouping_avg_ms_per_layer_step=group_avg,
               output_psnr_db=psnr, torch=torch.__version__, cudnn=torch.backends.cudnn.version(),
               gpu=torch.cuda.get_device_name())
    print(json.dumps(res, indent=1))
    print(f"WAN STEP {s} tokens, {args.layers} of {L} layers run, extrapolated: cuDNN {step_base:.0f} ms, "
          f"vcattn {step_vc:.0f} ms (grouping average included) -> {step_base / step_vc:.3f}x; "
          f"attention share (cuDNN) {100 * res['attention_share_cudnn']:.0f}%; output PSNR {psnr:.1f} dB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
