#!/usr/bin/env python3
"""A Wan-shaped self-attention layer across ranks: yunchang's USP with vcattn per rank.

    torchrun --standalone --nproc-per-node 2 examples/yunchang_wan_torchrun.py            # CPU, gloo, small
    torchrun --standalone --nproc-per-node 4 examples/yunchang_wan_torchrun.py --ulysses-degree 2   # 2 x 2
    torchrun --standalone --nproc-per-node 8 examples/yunchang_wan_torchrun.py --preset wan14b-720p  # GPUs

The layer is Wan's self-attention (q/k/v projections, RMSNorm over q and k, 3-D rotary
embedding over (frame, height, width), attention, output projection; random weights, the
same on every rank).  Each rank holds its chunk of the token sequence (yunchang's "basic"
sharding: chunk ``rank`` of P), projects it, and calls ``yunchang.LongContextAttention``
built by ``vcattn.yunchang.long_context_attention``: Ulysses over ``--ulysses-degree``
ranks, the ring over the rest.  Rank 0 prints the per-call time and, for sizes up to
``--check-max-tokens``, compares the gathered output with the same layer run in one process
(vcattn on the whole sequence, and exact attention).

CUDA tensors with NCCL when GPUs are visible (the Hopper kernel runs), else CPU tensors
with gloo (vcattn's CPU simulation: the default small size takes seconds).  Needs torch and
yunchang; exits with a message (status 0) when they are missing.
"""
import argparse
import math
import os
import sys
import time
from pathlib import Path

try:
    import torch
    import torch.distributed as dist
    import yunchang
except ImportError as e:
    print(f"yunchang_wan_torchrun.py: {e.name or e} is not installed - skipping (pip install torch yunchang)")
    sys.exit(0)

try:
    import vcattn
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
    import vcattn
import vcattn.yunchang as vy

# (frames, height, width) in latent patches, heads, head_dim: Wan 2.1 latents are
# (T/4 + 1, H/16, W/16) after the VAE and the (1, 2, 2) patch embedding
PRESETS = {
    "small": ((2, 8, 16), 4, 128),              # 256 tokens: seconds on the CPU
    "wan1.3b-480p": ((21, 30, 52), 12, 128),    # 81 frames 480x832: 32760 tokens
    "wan14b-720p": ((21, 45, 80), 40, 128),     # 81 frames 720x1280: 75600 tokens
}


def rope_3d(frames, height, width, head_dim, theta=10000.0):
    """Wan's rotary angles: head_dim/2 pairs split over frame, height and width positions."""
    half = head_dim // 2
    parts = [half - 2 * (half // 3), half // 3, half // 3]
    angles = []
    for n, pairs in zip((frames, height, width), parts):
        inv = 1.0 / theta ** (torch.arange(pairs, dtype=torch.float64) * 2 / (2 * pairs))
        angles.append(torch.outer(torch.arange(n, dtype=torch.float64), inv))
    f, h, w = angles
    grid = torch.cat([f[:, None, None].expand(frames, height, width, -1),
                      h[None, :, None].expand(frames, height, width, -1),
                      w[None, None, :].expand(frames, height, width, -1)], dim=-1)
    return grid.reshape(frames * height * width, half)                # (S, D/2) radians


def apply_rope(x, angles):
    """x (B, S, H, D); angles (S, D/2): rotate (x[2i], x[2i+1]) pairs."""
    xf = x.float().reshape(*x.shape[:-1], -1, 2)
    cos, sin = angles.cos()[None, :, None].float(), angles.sin()[None, :, None].float()
    y = torch.stack([xf[..., 0] * cos - xf[..., 1] * sin, xf[..., 0] * sin + xf[..., 1] * cos], dim=-1)
    return y.flatten(-2).to(x.dtype)


class WanSelfAttention(torch.nn.Module):
    """Wan's self-attention with a pluggable attention call on (B, S, H, D) tensors."""

    def __init__(self, heads, head_dim):
        super().__init__()
        dim = heads * head_dim
        self.heads = heads
        self.to_q, self.to_k, self.to_v, self.to_out = (torch.nn.Linear(dim, dim) for _ in range(4))
        self.norm_q, self.norm_k = torch.nn.RMSNorm(dim, eps=1e-6), torch.nn.RMSNorm(dim, eps=1e-6)

    def forward(self, x, angles, attend):
        b, s, _ = x.shape
        q = self.norm_q(self.to_q(x)).view(b, s, self.heads, -1)
        k = self.norm_k(self.to_k(x)).view(b, s, self.heads, -1)
        v = self.to_v(x).view(b, s, self.heads, -1)
        out = attend(apply_rope(q, angles), apply_rope(k, angles), v)
        return self.to_out(out.reshape(b, s, -1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="small")
    ap.add_argument("--ulysses-degree", type=int, default=None, help="default: the world size (Ulysses only)")
    ap.add_argument("--method", default=vcattn.DEFAULT_METHOD)
    ap.add_argument("--attn-fn", default="vcattn", choices=["vcattn", "sdpa", "reference"],
                    help="per-rank attention: vcattn (--method), torch SDPA (the baseline) or exact (tests)")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default=None,
                    help="default: bfloat16 on CUDA, float32 on the CPU")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--check-max-tokens", type=int, default=4096)
    args = ap.parse_args()

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dev = torch.device("cuda") if cuda else torch.device("cpu")
    dtype = getattr(torch, args.dtype or ("bfloat16" if cuda else "float32"))
    uly = args.ulysses_degree or world
    if world % uly:
        raise SystemExit(f"--ulysses-degree {uly} does not divide the world size {world}")
    ring = world // uly
    (frames, height, width), heads, head_dim = PRESETS[args.preset]
    seq = frames * height * width
    if seq % world or heads % uly:
        raise SystemExit(f"{seq} tokens must divide by the world size {world} and {heads} heads by the "
                         f"Ulysses degree {uly}")

    yunchang.set_seq_parallel_pg(uly, ring, rank, world)
    attn = vy.long_context_attention(method=args.method, attn_fn=args.attn_fn)

    torch.manual_seed(0)                             # the same weights and input on every rank
    layer = WanSelfAttention(heads, head_dim).to(dev, dtype).eval()
    x = torch.randn(1, seq, heads * head_dim, device=dev, dtype=dtype)
    angles = rope_3d(frames, height, width, head_dim).to(dev)
    n = seq // world
    x_l, angles_l = x[:, rank * n:(rank + 1) * n], angles[rank * n:(rank + 1) * n]   # this rank's chunk

    with torch.no_grad():
        times = []
        for _ in range(args.iters):
            dist.barrier()
            t0 = time.perf_counter()
            out_l = layer(x_l, angles_l, attn)
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        parts = [torch.empty_like(out_l) for _ in range(world)]
        dist.all_gather(parts, out_l.contiguous())
        out = torch.cat(parts, dim=1)

        if rank == 0:
            name = args.method if args.attn_fn == "vcattn" else args.attn_fn
            print(f"Wan self-attention {args.preset}: {seq} tokens, {heads} heads x {head_dim}, {dtype}, "
                  f"{world} ranks = Ulysses {uly} x ring {ring}, {dev.type}, per-rank attention {name}")
            print(f"  per call: {min(times) * 1e3:.1f} ms (best of {args.iters}); output {tuple(out.shape)}")
        if rank == 0 and seq <= args.check_max_tokens:
            one = vy.attn_processor(method=args.method, attn_fn=args.attn_fn)
            single = layer(x, angles, lambda q, k, v: one(q, k, v)[0])
            exact = layer(x.float().cpu(), angles.cpu(),
                          lambda q, k, v: vcattn.reference_attention(q, k, v, "NHD")) if not cuda else \
                layer(x, angles, lambda q, k, v: vcattn.reference_attention(q, k, v, "NHD").to(q.dtype))
            # not bit-identical to one process for V-Smooth methods: each rank groups its own heads
            # (k-means seeded per local head) and each ring step its own K/V shard
            for what, ref in (("the same layer in one process", single), ("exact attention", exact)):
                f = vcattn.fidelity(ref.float().cpu().numpy(), out.float().cpu().numpy())
                print(f"  vs {what}: rel-L2 {f['rel_l2']:.3g}, PSNR {f['psnr_db']:.1f} dB")
            # Ulysses computes whole heads, so with exact attention per rank nothing may differ
            # beyond the ring's FP32 merge; a quantized method keeps its own error against exact.
            rel = vcattn.fidelity(exact.float().cpu().numpy(), out.float().cpu().numpy())["rel_l2"]
            limit = 1e-5 if args.attn_fn == "reference" and dtype == torch.float32 else 0.05
            if not math.isfinite(rel) or rel > limit:
                raise SystemExit(f"check failed: rel-L2 {rel:.3g} vs exact attention exceeds {limit}")
            print("  check: ok")
    # every rank waits for rank 0's check before tearing down: a rank that destroys its gloo
    # groups and exits while a peer is still working can abort at exit (seen once in CI as a
    # SIGABRT on rank 1 after a clean run)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
