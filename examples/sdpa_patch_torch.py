#!/usr/bin/env python3
"""Route torch's scaled_dot_product_attention through vcattn for a block of code.

    python examples/sdpa_patch_torch.py

A small DiT-style block (fused QKV projection, 2 heads x 64, random weights) runs once
with torch SDPA and once inside ``vcattn.patch_sdpa``; the script prints the fidelity of
the block output, then shows the fallback for an unsupported call (an attention mask:
one warning, torch SDPA runs) and strict mode (VcattnError).  CPU tensors run vcattn's
CPU simulation.  Needs torch; exits with a message (status 0) when it is missing.
"""
import sys
import warnings
from pathlib import Path

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("sdpa_patch_torch.py: torch is not installed - skipping (pip install torch)")
    sys.exit(0)

try:
    import vcattn
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
    import vcattn


class Block(torch.nn.Module):
    def __init__(self, dim=128, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.out = torch.nn.Linear(dim, dim)

    def forward(self, x, mask=None):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, -1).permute(2, 0, 3, 1, 4)  # 3 x (B, H, S, D) views
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)                 # looked up at call time
        return self.out(y.transpose(1, 2).reshape(b, s, -1))


def main():
    torch.manual_seed(0)
    block = Block().eval()
    x = torch.randn(1, 1024, 128) * 2
    with torch.no_grad():
        want = block(x)
        for method in ("sage2-8bit", "vsmooth-8bit", "vsmooth-expcast-8bit"):
            # min_seq_kv=0: route this 1024-token demo too (by default calls with fewer than
            # 4096 keys keep torch SDPA, which is faster there)
            with vcattn.patch_sdpa(method, min_seq_kv=0) as patch:
                got = block(x)
            f = vcattn.fidelity(want, got)
            print(f"{method:<22} block output vs SDPA: rel_l2 {f['rel_l2']:.5f}  PSNR {f['psnr_db']:.2f} dB  "
                  f"({patch.calls} call routed)")

        mask = torch.ones(1024, 1024, dtype=torch.bool).tril()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with vcattn.patch_sdpa(min_seq_kv=0) as patch:
                block(x, mask)
                block(x, mask)
        print(f"\nwith an attn_mask: fallbacks {patch.fallbacks}, warnings: "
              f"{[str(w.message) for w in caught if 'vcattn' in str(w.message)]}")

        try:
            with vcattn.patch_sdpa(strict=True, min_seq_kv=0):
                block(x, mask)
        except vcattn.VcattnError as e:
            print(f"strict=True: VcattnError: {e}")

        # the same call, made directly, with the LSE (the (out, lse) contract of ring attention)
        q, k, v = block.qkv(x).view(1, 1024, 3, 2, 64).unbind(2)                 # NHD views
        out, lse = vcattn.flash_attn_forward(q, k, v, 0.0, None, causal=False)
        print(f"\nflash_attn_forward: out {tuple(out.shape)} {out.dtype}, lse {tuple(lse.shape)} {lse.dtype}")


if __name__ == "__main__":
    main()
