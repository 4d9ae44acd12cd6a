"""The Wan processor on a real diffusers WanTransformer3DModel (tiny config, random weights, CPU).

Skips without torch or diffusers; CI installs a pinned diffusers (.ci/run).  The model is
compared with its unpatched copy: the processor must route self-attention through vcattn
(a plan per layer), keep every keyword the wrapped processor needs (a dropped rotary_emb
runs attention without RoPE: the output then differs at ~56 dB instead of ~87 dB), and
leave cross-attention to SDPA by default."""
import copy
import logging

import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
WanTransformer3DModel = getattr(diffusers, "WanTransformer3DModel", None)
if WanTransformer3DModel is None:
    pytest.skip("this diffusers has no WanTransformer3DModel", allow_module_level=True)

import vcattn  # noqa: E402


def tiny_wan():
    torch.manual_seed(0)
    cfg = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=128, in_channels=4, out_channels=4,
               text_dim=32, freq_dim=32, ffn_dim=256, num_layers=2, rope_max_seq_len=64)
    return WanTransformer3DModel(**cfg).eval()


@pytest.mark.parametrize("method", ["vsmooth-8bit", vcattn.DEFAULT_METHOD])
def test_wan_processor_on_the_real_model(method, caplog):
    base = tiny_wan()
    model = copy.deepcopy(base)
    cache = vcattn.PlanCache(vcattn.Schedule(4), clusters=16)
    n = vcattn.install_wan_processors(model, cache, method=method, min_seq_kv=0)
    assert n == 4  # attn1 + attn2 of two blocks
    g = torch.Generator().manual_seed(1)
    latents = torch.randn(1, 4, 3, 32, 32, generator=g)
    text = torch.randn(1, 24, 32, generator=g)
    t = torch.tensor([500.0])
    cache.set_step(0)
    with caplog.at_level(logging.WARNING), torch.no_grad():
        want = base(latents, t, text, return_dict=False)[0]
        got = model(latents, t, text, return_dict=False)[0]
    assert not [r for r in caplog.records if "not expected" in r.getMessage()], "a keyword was dropped"
    f = vcattn.fidelity(want, got)
    # measured on diffusers 0.34.0: 87.4 dB (vsmooth-8bit); 56 dB when RoPE is dropped
    assert 75.0 < f["psnr_db"] < 120.0, f
    assert sorted(map(str, cache.keys())) == ["blocks.0.attn1", "blocks.1.attn1"]  # self-attention only
    assert cache.grouped_steps() == [0]
