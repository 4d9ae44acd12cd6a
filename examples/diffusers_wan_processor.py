#!/usr/bin/env python3
"""vcattn in a diffusers Wan pipeline with one call (random weights, nothing downloaded).

    python examples/diffusers_wan_processor.py [--steps 8] [--method vsmooth-8bit]

Builds a ``WanPipeline`` around a tiny ``WanTransformer3DModel`` (2 layers, 2 heads x 128
as in Wan, random weights; no text encoder or VAE: the prompt embeddings are given and the
output stays in latent space), runs it with classifier-free guidance, then again after

    handle = vcattn.diffusers.enable(pipe)

which routes the self-attention through vcattn (a plan per layer, the step schedule
following the scheduler) and leaves the cross-attention to the text to the model's
backend.  Prints the latents' PSNR against the unpatched run, ``handle.summary()`` and
where the plans grouped.

Needs torch and diffusers (with Wan); exits with a message (status 0) when they are missing.
"""
import argparse
import sys
from pathlib import Path

try:
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, WanPipeline, WanTransformer3DModel
except ImportError as e:
    print(f"diffusers_wan_processor.py: {getattr(e, 'name', None) or e} is not installed - skipping "
          "(pip install torch diffusers)")
    sys.exit(0)

try:
    import vcattn
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
    import vcattn
import vcattn.diffusers  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--method", default="vsmooth-8bit")
    args = ap.parse_args()

    torch.manual_seed(0)
    cfg = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=128, in_channels=4, out_channels=4,
               text_dim=32, freq_dim=32, ffn_dim=256, num_layers=2, rope_max_seq_len=64)
    transformer = WanTransformer3DModel(**cfg).eval()
    pipe = WanPipeline(tokenizer=None, text_encoder=None, vae=None, transformer=transformer,
                       scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0))
    pipe.set_progress_bar_config(disable=True)
    text = torch.randn(1, 24, 32)

    def run():
        # 9 frames x 128 x 128 pixels -> latents (1, 4, 3, 16, 16) with Wan's 4x / 8x VAE factors (without a
        # VAE the pipeline assumes them) -> 3 x 8 x 8 = 192 tokens per call
        return pipe(prompt_embeds=text, negative_prompt_embeds=torch.zeros_like(text), num_frames=9, height=128,
                    width=128, num_inference_steps=args.steps, guidance_scale=5.0, output_type="latent",
                    generator=torch.Generator().manual_seed(1)).frames

    with torch.no_grad():
        want = run()
        # min_seq_kv=0: this toy has 192 tokens; at Wan's sizes (75k self-attention keys) the default 4096 applies
        handle = vcattn.diffusers.enable(pipe, method=args.method, min_seq_kv=0)
        got = run()
    f = vcattn.fidelity(want, got)
    print(f"hooked {len(handle.layers)} attention modules; {handle.plan_cache.schedule}")
    print(f"latents after {args.steps} steps vs the unpatched pipeline: PSNR {f['psnr_db']:.2f} dB, "
          f"rel_l2 {f['rel_l2']:.5f}")
    s = handle.summary()
    print(f"summary: vcattn {s['vcattn']} calls, backend {s['backend']}, steps {s['steps']}")
    for name, counts in s["layers"].items():
        print(f"  {name}: {counts}")
    print(f"grouped at steps {handle.plan_cache.grouped_steps()} "
          f"(schedule: {handle.plan_cache.schedule.grouping_steps()})")
    handle.disable()


if __name__ == "__main__":
    main()
