"""vcattn.diffusers.enable on every video transformer family of the installed diffusers.

Each family is a real diffusers model class built from a tiny config dict (random weights,
nothing downloaded, CPU): 1-2 layers, 2 heads of 64 or 128, a few hundred tokens.  For each:

- the output of the enabled model is within BF16-ish tolerance of the unpatched model,
  both in float32: relative L2 error < 2e-2 (REL_L2; vcattn's 8-bit methods measure
  1e-4 .. 1e-3 here);
- the calls routed to vcattn and those left to the model's backend are counted exactly,
  per reason (``handle.summary()``): self-attention routed (> 0), cross-attention to the
  text left with reason ``cross_attention``, HunyuanVideo's and HunyuanVideo-1.5's padded joint
  attention routed (its mask is a per-sample prefix, ``vcattn.masks``), only HunyuanVideo's token
  refiner left with reason ``attn_mask`` (its mask also keeps key 0 for the padded rows: not a
  prefix), and no ``attn_mask`` fallback anywhere else;
- ``disable()`` restores the model (bit-identical output to the unpatched one).

Families are parametrised by the class names the installed diffusers ships; the others
are named in a warning of ``test_families_of_this_diffusers`` (nothing skips).  Counts are
the same on diffusers 0.34 (SDPA in the processors) and 0.42 (dispatch_attention_fn).  ``min_seq_kv=0``: the
tiny sequences would all be "short" otherwise.
"""
import copy
import warnings

import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

import vcattn  # noqa: E402
import vcattn.diffusers  # noqa: E402

REL_L2 = 2e-2
METHOD = "vsmooth-8bit"


def rand(*shape, seed=1):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def wan_like(extra=None):
    cfg = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=128, in_channels=4, out_channels=4,
               text_dim=32, freq_dim=32, ffn_dim=128, num_layers=2, rope_max_seq_len=32)
    cfg.update(extra or {})
    return cfg


def wan_inputs():
    # (B, C, T, H, W) = (1, 4, 4, 16, 16), patch (1, 2, 2): 4 x 8 x 8 = 256 tokens; 12 text tokens
    return dict(hidden_states=rand(1, 4, 4, 16, 16), timestep=torch.tensor([500.0]),
                encoder_hidden_states=rand(1, 12, 32, seed=2), return_dict=False)


def hunyuan_cfg():
    return dict(in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=64, num_layers=1,
                num_single_layers=1, num_refiner_layers=1, patch_size=2, patch_size_t=1, text_embed_dim=16,
                pooled_projection_dim=8, rope_axes_dim=(16, 24, 24), mlp_ratio=2.0)


def hunyuan_inputs():
    # (1, 4, 4, 16, 16), patch 2: 4 x 8 x 8 = 256 video tokens + 12 text tokens (3 of them padding)
    mask = torch.ones(1, 12)
    mask[:, 9:] = 0
    return dict(hidden_states=rand(1, 4, 4, 16, 16), timestep=torch.tensor([500]),
                encoder_hidden_states=rand(1, 12, 16, seed=2), encoder_attention_mask=mask,
                pooled_projections=rand(1, 8, seed=3), guidance=torch.tensor([3500.0]), return_dict=False)


def hunyuan15_cfg():
    return dict(in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=64, num_layers=1,
                num_refiner_layers=1, mlp_ratio=2.0, patch_size=1, patch_size_t=1, text_embed_dim=16,
                text_embed_2_dim=8, image_embed_dim=12, rope_axes_dim=(16, 24, 24), target_size=16,
                task_type="t2v")


def hunyuan15_inputs():
    # (1, 4, 4, 8, 8), patch 1: 256 video tokens
    # 6 + 4 text tokens, 2 + 1 of them padding: the model moves them to the end of the joint sequence
    mask, mask_2 = torch.ones(1, 6), torch.ones(1, 4)
    mask[:, 4:] = 0
    mask_2[:, 3:] = 0
    return dict(hidden_states=rand(1, 4, 4, 8, 8), timestep=torch.tensor([500.0]),
                encoder_hidden_states=rand(1, 6, 16, seed=2), encoder_attention_mask=mask,
                encoder_hidden_states_2=rand(1, 4, 8, seed=3), encoder_attention_mask_2=mask_2,
                image_embeds=torch.zeros(1, 3, 12), return_dict=False)


def cogvideox_cfg():
    return dict(num_attention_heads=2, attention_head_dim=64, in_channels=4, out_channels=4, time_embed_dim=4,
                text_embed_dim=16, num_layers=2, sample_width=16, sample_height=16, sample_frames=9, patch_size=2,
                temporal_compression_ratio=4, max_text_seq_length=16)


def cogvideox_inputs():
    # (B, F, C, H, W) = (1, 3, 4, 16, 16), patch 2: 3 x 8 x 8 = 192 video + 16 text tokens, one joint sequence
    return dict(hidden_states=rand(1, 3, 4, 16, 16), encoder_hidden_states=rand(1, 16, 16, seed=2),
                timestep=torch.tensor([500]), return_dict=False)


def ltx_cfg():
    return dict(in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=64, cross_attention_dim=128,
                num_layers=2, caption_channels=16)


def ltx_inputs():
    # (B, S, C) with S = 4 x 8 x 8 = 256 tokens
    return dict(hidden_states=rand(1, 256, 4), encoder_hidden_states=rand(1, 12, 16, seed=2),
                timestep=torch.tensor([500]), encoder_attention_mask=torch.ones(1, 12), num_frames=4, height=8,
                width=8, return_dict=False)


def ltx2_cfg():
    return dict(in_channels=4, out_channels=4, patch_size=1, patch_size_t=1, num_attention_heads=2,
                attention_head_dim=64, cross_attention_dim=128, audio_in_channels=4, audio_out_channels=4,
                audio_num_attention_heads=2, audio_attention_head_dim=4, audio_cross_attention_dim=8, num_layers=1,
                qk_norm="rms_norm_across_heads", caption_channels=16, rope_double_precision=False)


def ltx2_inputs():
    return dict(hidden_states=rand(1, 256, 4), audio_hidden_states=rand(1, 9, 4, seed=2),
                encoder_hidden_states=rand(1, 12, 16, seed=3), audio_encoder_hidden_states=rand(1, 12, 16, seed=4),
                timestep=torch.tensor([500.0]), encoder_attention_mask=torch.ones(1, 12).bool(), num_frames=4,
                height=8, width=8, audio_num_frames=9, fps=25.0, return_dict=False)


def mochi_cfg():
    return dict(patch_size=2, num_attention_heads=2, attention_head_dim=64, num_layers=2, pooled_projection_dim=16,
                in_channels=4, text_embed_dim=16, time_embed_dim=4)


def mochi_inputs():
    # (1, 4, 4, 16, 16), patch 2: 256 video tokens + 12 text tokens, joint per sample
    return dict(hidden_states=rand(1, 4, 4, 16, 16), encoder_hidden_states=rand(1, 12, 16, seed=2),
                timestep=torch.tensor([500]), encoder_attention_mask=torch.ones(1, 12), return_dict=False)


def allegro_cfg():
    return dict(patch_size=2, patch_size_t=1, num_attention_heads=2, attention_head_dim=64, in_channels=4,
                out_channels=4, num_layers=2, cross_attention_dim=128, sample_height=16, sample_width=16,
                sample_frames=4, caption_channels=16)


def allegro_inputs():
    # (1, 4, 4, 16, 16), patch 2: 256 tokens
    return dict(hidden_states=rand(1, 4, 4, 16, 16), encoder_hidden_states=rand(1, 12, 16, seed=2),
                timestep=torch.tensor([500]), return_dict=False)


def sana_video_cfg():
    return dict(in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=64, num_layers=2,
                num_cross_attention_heads=2, cross_attention_head_dim=64, cross_attention_dim=128,
                caption_channels=16, mlp_ratio=2.5, sample_size=8, patch_size=(1, 2, 2),
                norm_elementwise_affine=False, qk_norm="rms_norm_across_heads", rope_max_seq_len=32)


def sana_video_inputs():
    return dict(hidden_states=rand(1, 4, 4, 16, 16), encoder_hidden_states=rand(1, 12, 16, seed=2),
                timestep=torch.tensor([500]), return_dict=False)


def vace_inputs():
    d = wan_inputs()
    d["control_hidden_states"] = rand(1, 8, 4, 16, 16, seed=5)
    return d


# name -> (config, inputs, expected summary counts {what: n} over one forward)
FAMILIES = {
    "WanTransformer3DModel": (wan_like, wan_inputs, dict(vcattn=2, cross_attention=2)),
    "SkyReelsV2Transformer3DModel": (wan_like, wan_inputs, dict(vcattn=2, cross_attention=2)),
    "WanVACETransformer3DModel": (lambda: wan_like(dict(vace_layers=[0], vace_in_channels=8)), vace_inputs,
                                  dict(vcattn=3, cross_attention=3)),  # 2 blocks + 1 VACE block
    # the joint attention (double and single blocks) passes a key-padding mask: routed; the token
    # refiner's mask keeps key 0 for the padded text rows (not a prefix): the model's backend
    "HunyuanVideoTransformer3DModel": (hunyuan_cfg, hunyuan_inputs, dict(vcattn=2, attn_mask=1)),
    # a joint valid[i] & valid[j] mask in the block and a per-head one in the token refiner: routed
    "HunyuanVideo15Transformer3DModel": (hunyuan15_cfg, hunyuan15_inputs, dict(vcattn=2)),
    "CogVideoXTransformer3DModel": (cogvideox_cfg, cogvideox_inputs, dict(vcattn=2)),  # joint text + video
    "LTXVideoTransformer3DModel": (ltx_cfg, ltx_inputs, dict(vcattn=2, cross_attention=2)),
    # video self-attention routed; audio self-attention (head_dim 4) and the text / audio <-> video cross-attention not
    "LTX2VideoTransformer3DModel": (ltx2_cfg, ltx2_inputs, dict(vcattn=1, cross_attention=4, head_dim=1)),
    "MochiTransformer3DModel": (mochi_cfg, mochi_inputs, dict(vcattn=2)),  # joint, per sample, without a mask
    "ChronoEditTransformer3DModel": (wan_like, wan_inputs, dict(vcattn=2, cross_attention=2)),
    "AllegroTransformer3DModel": (allegro_cfg, allegro_inputs, dict(vcattn=2, cross_attention=2)),
    # linear self-attention (no softmax attention to route); the cross-attention is counted
    "SanaVideoTransformer3DModel": (sana_video_cfg, sana_video_inputs, dict(vcattn=0, cross_attention=2)),
}


# version-gated: a family runs where the installed diffusers ships its class; the others are
# reported by test_families_of_this_diffusers (a warning naming them), not skipped one by one
PRESENT = sorted(n for n in FAMILIES if hasattr(diffusers, n))
MISSING = sorted(n for n in FAMILIES if not hasattr(diffusers, n))


def test_families_of_this_diffusers():
    if MISSING:
        warnings.warn(f"diffusers {diffusers.__version__} has no {', '.join(MISSING)}: those families are not tested "
                      f"here ({len(PRESENT)} are)")
    assert len(PRESENT) >= 6, (diffusers.__version__, PRESENT)
    # the families of diffusers 0.34 (the oldest tested) are present in every later version
    assert {"WanTransformer3DModel", "WanVACETransformer3DModel", "HunyuanVideoTransformer3DModel",
            "CogVideoXTransformer3DModel", "LTXVideoTransformer3DModel", "MochiTransformer3DModel",
            "AllegroTransformer3DModel"} <= set(PRESENT)


def build(name):
    cls = getattr(diffusers, name)
    cfg, inputs, expected = FAMILIES[name]
    torch.manual_seed(0)
    return cls(**cfg()).eval(), inputs(), expected


def first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


@pytest.mark.parametrize("name", PRESENT)
def test_family(name):
    model, inputs, expected = build(name)
    with torch.no_grad():
        want = first(model(**copy.deepcopy(inputs)))
        handle = vcattn.diffusers.enable(model, method=METHOD, min_seq_kv=0)
        try:
            got = first(model(**copy.deepcopy(inputs)))
            s = handle.summary()
        finally:
            handle.disable()
        again = first(model(**copy.deepcopy(inputs)))
    f = vcattn.fidelity(want, got)
    print(name, f, {k: s[k] for k in ("vcattn", "backend")}, s["layers"])
    assert torch.equal(again, want)
    assert f["rel_l2"] < REL_L2, f
    assert {"vcattn": s["vcattn"], **s["backend"]} == expected, s
    assert "attn_mask" not in s["backend"] or name == "HunyuanVideoTransformer3DModel"


def test_hunyuan15_ragged_batch_plans_each_sample_and_reuses_them():
    """HunyuanVideo-1.5 with two prompts of different padded lengths in one batch: every joint
    call routed, each sample on its own plan (made once, reused on the next step), output within
    tolerance of the unpatched model."""
    if not hasattr(diffusers, "HunyuanVideo15Transformer3DModel"):
        pytest.skip(f"diffusers {diffusers.__version__} has no HunyuanVideo15Transformer3DModel")
    model, inputs, _ = build("HunyuanVideo15Transformer3DModel")
    inputs = {k: (torch.cat([v, v], 0) if isinstance(v, torch.Tensor) and v.dim() > 0 else v) for k, v in inputs.items()}
    inputs["timestep"] = torch.tensor([500.0, 500.0])
    inputs["encoder_attention_mask"] = inputs["encoder_attention_mask"].clone()
    inputs["encoder_attention_mask"][1, 2:] = 0  # sample 1: 2 valid tokens instead of 4
    inputs["encoder_hidden_states"] = inputs["encoder_hidden_states"] + rand(2, 6, 16, seed=9)
    with torch.no_grad():
        want = first(model(**copy.deepcopy(inputs)))
        cache = vcattn.PlanCache(vcattn.Schedule(2))
        handle = vcattn.diffusers.enable(model, method=METHOD, min_seq_kv=0, plan_cache=cache)
        try:
            handle.set_step(0)
            got = first(model(**copy.deepcopy(inputs)))
            handle.set_step(1)
            again = first(model(**copy.deepcopy(inputs)))
            s = handle.summary()
        finally:
            handle.disable()
    assert s["backend"] == {} and s["vcattn"] == 4, s   # 2 joint calls per forward, 2 forwards
    assert vcattn.fidelity(want, got)["rel_l2"] < REL_L2
    assert torch.equal(got, again)  # step 1 reuses the plans of step 0
    parts = [k for k in cache.keys() if isinstance(k, tuple) and "batch" in k]
    assert len(parts) == 4, list(cache.keys())   # 2 layers x 2 samples, each its own plan
    assert all(cache.layer(k).num_groupings == 1 for k in parts)


def test_hunyuan15_joint_mask_is_built_only_for_calls_that_leave_vcattn(monkeypatch):
    """HunyuanVideo-1.5's processor builds a (B, 1, S, S) joint mask in every call; enabled, it is
    handed its padding mask deferred (vcattn.deferred_mask): a routed call reads the lengths from
    the padding vector and the joint mask is never built, with the output bit-identical to the
    routed call on the built mask; a call that leaves vcattn gets the built mask, bit-identical to
    the unpatched model."""
    if not hasattr(diffusers, "HunyuanVideo15Transformer3DModel"):
        pytest.skip(f"diffusers {diffusers.__version__} has no HunyuanVideo15Transformer3DModel")
    from vcattn.deferred_mask import DeferredMask

    model, inputs, _ = build("HunyuanVideo15Transformer3DModel")
    built, read = [], []
    materialize, joint_of_padding = DeferredMask.materialize, vcattn.masks._joint_of_padding
    monkeypatch.setattr(DeferredMask, "materialize", lambda self: built.append(self.kind) or materialize(self))
    monkeypatch.setattr(vcattn.masks, "_joint_of_padding", lambda *a: read.append(1) or joint_of_padding(*a))

    def run(**kw):
        built.clear(), read.clear()
        handle = vcattn.diffusers.enable(model, method=METHOD, **kw)
        try:
            out = first(model(**copy.deepcopy(inputs)))
            return out, handle.summary()
        finally:
            handle.disable()

    with torch.no_grad():
        want = first(model(**copy.deepcopy(inputs)))
        got, s = run(min_seq_kv=0)
        assert s["vcattn"] == 2 and s["backend"] == {}, s
        assert built == [] and read == [1], (built, read)  # the block's joint call, read once
        passed, s = run(min_seq_kv=1 << 30)  # every call left to the model's attention
        assert s["vcattn"] == 0 and built == ["joint"], (s, built)
        assert torch.equal(passed, want)
        monkeypatch.setattr(vcattn.diffusers, "JOINT_MASK_PROCESSORS", ())
        on_built, s = run(min_seq_kv=0)
        assert s["vcattn"] == 2 and read == [], (s, read)
    assert torch.equal(got, on_built)
