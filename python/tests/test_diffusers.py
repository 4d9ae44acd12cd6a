"""vcattn.diffusers.enable on a real diffusers Wan transformer and WanPipeline (tiny config,
random weights, CPU; nothing downloaded): the step follows the pipeline's denoising loop
(classifier-free guidance calls the transformer twice per step), disable() restores
everything, calls outside the enabled modules pass through, strict mode, torch.compile, and
the deprecated install_wan_processors.  The families are in test_diffusers_models.py.

Skips without torch or diffusers; CI installs them (.ci/run).
"""
import copy
import logging

import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
WanTransformer3DModel = getattr(diffusers, "WanTransformer3DModel", None)
if WanTransformer3DModel is None:
    pytest.skip("this diffusers has no WanTransformer3DModel", allow_module_level=True)

import torch.nn.functional as F  # noqa: E402

import vcattn  # noqa: E402
import vcattn.diffusers  # noqa: E402

REL_L2 = 2e-2  # BF16-ish: the enabled model against the unpatched one, both float32


def tiny_wan(layers=2):
    torch.manual_seed(0)
    cfg = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=128, in_channels=4, out_channels=4,
               text_dim=32, freq_dim=32, ffn_dim=256, num_layers=layers, rope_max_seq_len=64)
    return WanTransformer3DModel(**cfg).eval()


def wan_inputs(frames=3):
    g = torch.Generator().manual_seed(1)
    return torch.randn(1, 4, frames, 16, 16, generator=g), torch.tensor([500.0]), torch.randn(1, 24, 32, generator=g)


def dispatch_modules():
    """The diffusers modules that bind dispatch_attention_fn (none before diffusers 0.35)."""
    import sys

    return {n: m.dispatch_attention_fn for n, m in list(sys.modules.items())
            if n.startswith("diffusers.") and callable(getattr(m, "__dict__", {}).get("dispatch_attention_fn"))}


# ---- a bare transformer ---------------------------------------------------------------------------

def test_transformer_routes_self_attention_and_restores():
    base = tiny_wan()
    model = copy.deepcopy(base)
    x, t, text = wan_inputs()
    sdpa, dispatch = F.scaled_dot_product_attention, dispatch_modules()
    cache = vcattn.PlanCache(vcattn.Schedule(4), clusters=16)
    with torch.no_grad():
        want = base(x, t, text, return_dict=False)[0]
        handle = vcattn.diffusers.enable(model, plan_cache=cache, method="vsmooth-8bit", min_seq_kv=0)
        assert handle.layers == ["blocks.0.attn1", "blocks.0.attn2", "blocks.1.attn1", "blocks.1.attn2"]
        assert F.scaled_dot_product_attention is not sdpa
        for step in range(2):
            handle.set_step(step)
            got = model(x, t, text, return_dict=False)[0]
            f = vcattn.fidelity(want, got)
            assert f["rel_l2"] < REL_L2 and f["psnr_db"] > 75.0, f   # measured 86 dB (0.34 and 0.42)
        s = handle.summary()
        handle.disable()
        handle.disable()  # idempotent
        again = model(x, t, text, return_dict=False)[0]
    assert s["vcattn"] == 4 and s["backend"] == {"cross_attention": 4}, s
    assert s["layers"] == {"blocks.0.attn1": {"vcattn": 2}, "blocks.0.attn2": {"cross_attention": 2},
                           "blocks.1.attn1": {"vcattn": 2}, "blocks.1.attn2": {"cross_attention": 2}}
    assert sorted(cache.keys()) == ["blocks.0.attn1", "blocks.1.attn1"]   # a plan per self-attention module
    assert cache.summary() == {0: {"group": 2, "reuse": 0, "off": 0}, 1: {"group": 0, "reuse": 2, "off": 0}}
    assert torch.equal(again, want)
    assert F.scaled_dot_product_attention is sdpa and dispatch_modules() == dispatch
    assert all(not m._forward_pre_hooks and not m._forward_hooks for m in model.modules())


def test_min_seq_kv_sends_short_calls_to_the_backend():
    model = tiny_wan(layers=1)
    x, t, text = wan_inputs()  # 192 tokens
    with torch.no_grad(), vcattn.diffusers.enable(model) as handle:   # default min_seq_kv=4096
        model(x, t, text, return_dict=False)
    assert handle.summary()["backend"] == {"cross_attention": 1, "short_kv": 1}
    assert handle.summary()["vcattn"] == 0 and not handle.enabled


def test_calls_outside_the_enabled_modules_pass_through():
    model = tiny_wan(layers=1)
    q = torch.randn(1, 2, 200, 64)
    with torch.no_grad(), vcattn.diffusers.enable(model, min_seq_kv=0) as handle:
        out = F.scaled_dot_product_attention(q, q, q)   # not inside an attention module of the model
        other = tiny_wan(layers=1)                      # another transformer, not enabled
        other(*wan_inputs(), return_dict=False)
    assert torch.equal(out, torch._C._nn.scaled_dot_product_attention(q, q, q))
    assert handle.summary()["vcattn"] == 0 and handle.summary()["layers"] == {}


def test_strict_raises_where_a_call_would_leave_vcattn():
    model = tiny_wan(layers=1).double()   # float64: vcattn takes float16 / bfloat16 / float32
    x, t, text = (a.double() for a in wan_inputs())
    with torch.no_grad():
        with vcattn.diffusers.enable(model, min_seq_kv=0, strict=True):
            with pytest.raises(vcattn.VcattnError, match="blocks.0.attn1: dtypes other than"):
                model(x, t, text, return_dict=False)
        with pytest.warns(RuntimeWarning), vcattn.diffusers.enable(model, min_seq_kv=0) as handle:
            model(x, t, text, return_dict=False)
    assert handle.summary()["backend"] == {"cross_attention": 1, "dtype": 1}


def test_enable_refuses():
    model = tiny_wan(layers=1)
    with pytest.raises(ValueError, match="unknown method|method"):
        vcattn.diffusers.enable(model, method="no-such-method")
    with pytest.raises(TypeError, match="pipeline"):
        vcattn.diffusers.enable(object())
    with pytest.raises(ValueError, match="no attention module"):
        vcattn.diffusers.enable(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="not both"):
        vcattn.diffusers.enable(model, plan_cache=vcattn.PlanCache(), num_steps=4)
    with vcattn.diffusers.enable(model):
        with pytest.raises(ValueError, match="already enabled"):
            vcattn.diffusers.enable(model)
    with pytest.deprecated_call():
        vcattn.install_wan_processors(model)
    with pytest.raises(ValueError, match="already has a vcattn processor"):
        vcattn.diffusers.enable(model)


def test_routes_whatever_backend_the_model_has():
    # a processor wrapper sees SDPA calls only on the native backend; enable() sits above the dispatch
    # (diffusers < 0.35 has no attention backends: every processor calls SDPA, as the other tests show)
    base = tiny_wan(layers=1)
    model = copy.deepcopy(base)
    if hasattr(model, "set_attention_backend"):
        model.set_attention_backend("_native_math")
    x, t, text = wan_inputs()
    with torch.no_grad(), vcattn.diffusers.enable(model, min_seq_kv=0) as handle:
        want = base(x, t, text, return_dict=False)[0]
        got = model(x, t, text, return_dict=False)[0]
    assert handle.summary()["vcattn"] == 1 and handle.summary()["backend"] == {"cross_attention": 1}
    assert vcattn.fidelity(want, got)["rel_l2"] < REL_L2


# ---- a pipeline: the step follows the denoising loop ------------------------------------------------

def wan_pipeline(transformer):
    from diffusers import FlowMatchEulerDiscreteScheduler, WanPipeline

    pipe = WanPipeline(tokenizer=None, text_encoder=None, vae=None, transformer=transformer,
                       scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0))
    pipe.set_progress_bar_config(disable=True)
    return pipe


def run_pipeline(pipe, steps, guidance=5.0):
    text = torch.randn(1, 24, 32, generator=torch.Generator().manual_seed(2))
    # 9 frames x 128 x 128 pixels -> latents (1, 4, 3, 16, 16) -> 192 tokens per call
    with torch.no_grad():
        return pipe(prompt_embeds=text, negative_prompt_embeds=torch.zeros_like(text), num_frames=9, height=128,
                    width=128, num_inference_steps=steps, guidance_scale=guidance, output_type="latent",
                    generator=torch.Generator().manual_seed(1)).frames


def test_pipeline_step_follows_the_scheduler_with_cfg():
    pipe = wan_pipeline(tiny_wan(layers=1))
    scheduler_class = type(pipe.scheduler)
    want = run_pipeline(pipe, 3)
    handle = vcattn.diffusers.enable(pipe, method="vsmooth-8bit", min_seq_kv=0)
    got = run_pipeline(pipe, 3)
    s = handle.summary()
    # 3 steps x 2 transformer calls (CFG: conditional and unconditional) x 1 layer
    assert s["vcattn"] == 6 and s["backend"] == {"cross_attention": 6} and s["steps"] == 3 and s["runs"] == 1, s
    assert handle.plan_cache.schedule.num_steps == 3      # Schedule(3): groups at step 0, reuses after
    # a layer groups at most once per step: the unconditional call reuses the plan
    assert s["plans"] == {0: {"group": 1, "reuse": 1, "off": 0}, 1: {"group": 0, "reuse": 2, "off": 0},
                          2: {"group": 0, "reuse": 2, "off": 0}}
    f = vcattn.fidelity(want, got)
    assert f["rel_l2"] < REL_L2, f   # measured 3e-4 on the latents after 3 steps

    # a second run with another step count: a new schedule, the plans grouped afresh at its step 0
    run_pipeline(pipe, 2)
    s = handle.summary()
    assert s["runs"] == 2 and s["steps"] == 2 and handle.plan_cache.schedule.num_steps == 2
    assert s["plans"] == {0: {"group": 1, "reuse": 1, "off": 0}, 1: {"group": 0, "reuse": 2, "off": 0}}
    handle.disable()
    assert type(pipe.scheduler) is scheduler_class
    assert torch.equal(run_pipeline(pipe, 3), want)


def test_pipeline_with_a_fixed_schedule_and_without_cfg():
    pipe = wan_pipeline(tiny_wan(layers=1))
    cache = vcattn.PlanCache(vcattn.Schedule(8, group_every_step=True), clusters=16)
    with vcattn.diffusers.enable(pipe, plan_cache=cache, min_seq_kv=0) as handle:
        run_pipeline(pipe, 3, guidance=1.0)   # one transformer call per step
    s = handle.summary()
    assert s["vcattn"] == 3 and s["steps"] == 3 and cache.grouped_steps() == [0, 1, 2]


# ---- torch.compile ----------------------------------------------------------------------------------

def test_torch_compile_inductor():
    if not hasattr(torch, "compile") or not hasattr(torch.library, "custom_op"):
        pytest.skip("torch < 2.4: no torch.library.custom_op")
    base = tiny_wan(layers=1)
    model = copy.deepcopy(base)
    x, t, text = wan_inputs()
    with torch.no_grad():
        want = base(x, t, text, return_dict=False)[0]
        handle = vcattn.diffusers.enable(model, min_seq_kv=0)
        eager = model(x, t, text, return_dict=False)[0]
        compiled = torch.compile(model, backend="inductor")
        try:
            got = [compiled(x, t, text, return_dict=False)[0] for step in range(2) if handle.set_step(step) is None]
        except Exception as e:  # noqa: BLE001 - a CPU without a working C++ toolchain for inductor
            if "InductorError" in type(e).__name__ or "CppCompileError" in repr(e) or "compiler" in repr(e).lower():
                pytest.skip(f"inductor cannot compile here: {type(e).__name__}")
            raise
        handle.disable()
    s = handle.summary()
    assert s["vcattn"] == 1   # the eager call; compiled calls are not counted
    assert handle.plan_cache.summary() == {None: {"group": 1, "reuse": 0, "off": 0},
                                           0: {"group": 0, "reuse": 1, "off": 0},
                                           1: {"group": 0, "reuse": 1, "off": 0}}
    for g in got:
        assert vcattn.fidelity(eager, g)["rel_l2"] < 1e-4
        assert vcattn.fidelity(want, g)["rel_l2"] < REL_L2


# ---- the deprecated Wan processor ------------------------------------------------------------------

@pytest.mark.parametrize("method", ["vsmooth-8bit", vcattn.DEFAULT_METHOD])
def test_deprecated_wan_processor_on_the_real_model(method, caplog):
    base = tiny_wan()
    model = copy.deepcopy(base)
    cache = vcattn.PlanCache(vcattn.Schedule(4), clusters=16)
    with pytest.deprecated_call():
        n = vcattn.install_wan_processors(model, cache, method=method, min_seq_kv=0)
    assert n == 4  # attn1 + attn2 of two blocks
    latents, t, text = wan_inputs()
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


# ---- the device's block script -----------------------------------------------------------------------

def test_block_script_routes_a_small_block_on_the_installed_diffusers(tmp_path):
    """tests/gpu/block_compile.py (the device's real-size blocks, scripts/device_check.sh compile)
    on a small Wan block, eager, on this stack: it still builds the block and its RoPE the way the
    installed diffusers does, the self-attention goes through vcattn, and the output stays close to
    the unpatched block's - so the script does not rot between device sessions."""
    import json
    import os
    import pathlib
    import subprocess
    import sys

    script = pathlib.Path(__file__).resolve().parents[2] / "tests" / "gpu" / "block_compile.py"
    out = tmp_path / "block.json"
    env = dict(os.environ, VCATTN_LIBRARY=vcattn.library_info()["path"],
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    r = subprocess.run([sys.executable, str(script), "--model", "wan", "--small", "--device", "cpu", "--eager-only",
                        "--reps", "1", "--warmup", "0", "--json", str(out)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    res = json.loads(out.read_text())
    assert res["complete"] and not res["failures"], res["failures"]
    assert res["checks"]["routed_layers"] == ["attn1"]   # self-attention; the 32-key cross-attention stays
    assert res["compare"]["vcattn_vs_unpatched"]["psnr_db"] > 55.0   # measured 66.0-66.5 dB (torch 2.5 / 2.15)
