#!/usr/bin/env python3
"""vcattn as the attention processor of a diffusers Wan transformer (random weights).

    python examples/diffusers_wan_processor.py [--steps 8] [--method vsmooth-8bit]

Builds a tiny ``WanTransformer3DModel`` (2 layers, 2 heads x 128 as in Wan, random weights - nothing
is downloaded), installs ``vcattn.VcattnAttnProcessor`` on every attention module
(self-attention through vcattn, cross-attention to the text tokens left to SDPA), and
runs a few "denoising steps" with a PlanCache following the step schedule.  Prints the
DiT output's PSNR against the unpatched model at each step and where the plans grouped.
For a pipeline, set the step from ``callback_on_step_end``:

    cache = vcattn.PlanCache(vcattn.Schedule(num_inference_steps))
    vcattn.install_wan_processors(pipe.transformer, cache)
    def on_step_end(pipe, i, t, kwargs):
        cache.set_step(min(i + 1, num_inference_steps - 1)); return kwargs
    cache.set_step(0)
    pipe(..., callback_on_step_end=on_step_end)

Needs torch and diffusers (with Wan); exits with a message (status 0) when they are missing.
"""
import argparse
import copy
import sys
from pathlib import Path

try:
    import torch
    from diffusers import WanTransformer3DModel
except ImportError as e:
    print(f"diffusers_wan_processor.py: {e.name or e} is not installed - skipping (pip install torch diffusers)")
    sys.exit(0)

try:
    import vcattn
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
    import vcattn


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--method", default="vsmooth-8bit")
    ap.add_argument("--cross-attention", default="sdpa",
                    help="'sdpa' (default), 'vcattn' (same method) or a method name for the text cross-attention")
    args = ap.parse_args()
    cross = {"sdpa": False, "vcattn": True}.get(args.cross_attention, args.cross_attention)

    torch.manual_seed(0)
    cfg = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=128, in_channels=4, out_channels=4,
               text_dim=32, freq_dim=32, ffn_dim=256, num_layers=2, rope_max_seq_len=64)
    base = WanTransformer3DModel(**cfg).eval()
    model = copy.deepcopy(base)
    cache = vcattn.PlanCache(vcattn.Schedule(args.steps), clusters=16)
    # min_seq_kv=0: this toy model has 768 tokens; at Wan's sizes (75k self-attention keys,
    # 512 text keys) the default 4096 sends only the cross-attention to SDPA
    n = vcattn.install_wan_processors(model, cache, method=args.method, cross_attention=cross, min_seq_kv=0)
    print(f"wrapped {n} attention modules; schedule {cache.schedule}")

    # latents (B, C, T, H, W) = (1, 4, 3, 32, 32): 3 x 16 x 16 = 768 tokens per frame stack
    latents = torch.randn(1, 4, 3, 32, 32)
    text = torch.randn(1, 24, 32)
    for step in range(args.steps):
        cache.set_step(step)
        t = torch.tensor([1000.0 * (1 - step / args.steps)])
        with torch.no_grad():
            want = base(latents, t, text, return_dict=False)[0]
            got = model(latents, t, text, return_dict=False)[0]
        f = vcattn.fidelity(want, got)
        print(f"step {step}: DiT output vs SDPA model: PSNR {f['psnr_db']:.2f} dB, rel_l2 {f['rel_l2']:.5f}")
        latents = latents - 0.1 * want                       # a crude Euler-like update
    print(f"plans: {sorted(map(str, cache.keys()))}")
    print(f"grouped at steps {cache.grouped_steps()} (schedule: {cache.schedule.grouping_steps()})")


if __name__ == "__main__":
    main()
