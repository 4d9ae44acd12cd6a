"""torch tensors, the SDPA patch and the fallbacks (skipped when torch is not installed)."""
import warnings

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import vcattn  # noqa: E402
from vcattn import _lib  # noqa: E402


def qkv(b=1, h=2, s=200, d=64, dtype=torch.float32, layout="HND", seed=0):
    g = torch.Generator().manual_seed(seed)
    shape = (b, h, s, d) if layout == "HND" else (b, s, h, d)
    return [torch.randn(shape, generator=g).to(dtype) for _ in range(3)]


@pytest.fixture(autouse=True)
def fresh_warnings():
    _lib.reset_warnings()
    yield


def test_torch_cpu_matches_numpy():
    q, k, v = qkv()
    out, lse = vcattn.attention(q, k, v, return_lse=True)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32 and out.shape == q.shape
    assert isinstance(lse, torch.Tensor) and lse.dtype == torch.float32 and lse.shape == (1, 2, 200)
    out_np, lse_np = vcattn.attention(q.numpy(), k.numpy(), v.numpy(), return_lse=True)
    np.testing.assert_array_equal(out.numpy(), out_np)
    np.testing.assert_array_equal(lse.numpy(), lse_np)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_dtypes_and_fp32_qk(dtype):
    q, k, v = qkv(dtype=dtype)
    out = vcattn.attention(q, k, v)
    assert out.dtype == dtype
    ref = vcattn.reference_attention(q, k, v)
    assert ref.dtype == dtype
    assert vcattn.fidelity(ref, out)["rel_l2"] < 0.08
    # Wan hands q/k over in fp32 after RoPE, v in bf16
    mixed = vcattn.attention(q.float(), k.float(), v)
    assert mixed.dtype == torch.float32


def test_torch_strided_views_and_nhd():
    q, k, v = qkv(layout="NHD")
    qkv_packed = torch.stack([q, k, v], dim=2)             # (B, S, 3, H, D)
    qs, ks, vs = qkv_packed.unbind(2)                      # strided NHD views
    assert not qs.is_contiguous()
    a = vcattn.attention(qs, ks, vs, "NHD")
    b = vcattn.attention(q, k, v, "NHD")
    c = vcattn.attention(*(x.transpose(1, 2) for x in (q, k, v)), "HND")
    assert torch.equal(a, b) and torch.equal(b, c.transpose(1, 2))
    with pytest.raises(ValueError, match="contiguous"):
        vcattn.attention(q[..., ::2], k[..., ::2], v[..., ::2], "NHD")


def test_requires_grad_inputs_are_detached():
    q, k, v = qkv()
    q.requires_grad_(True)
    out = vcattn.attention(q, k, v)
    assert not out.requires_grad


def test_patch_sdpa_routes_and_restores():
    F = torch.nn.functional
    orig = F.scaled_dot_product_attention
    q, k, v = qkv()
    want = vcattn.attention(q, k, v, method="sage2-8bit")
    with vcattn.patch_sdpa("sage2-8bit", min_seq_kv=0) as p:
        assert F.scaled_dot_product_attention is not orig
        got = F.scaled_dot_product_attention(q, k, v)
        got_kw = torch.nn.functional.scaled_dot_product_attention(query=q, key=k, value=v, scale=None)
    assert F.scaled_dot_product_attention is orig
    assert p.calls == 2
    assert torch.equal(got, want) and torch.equal(got_kw, want)
    with vcattn.patch_sdpa("sage2-8bit", step=3, min_seq_kv=0):            # a step without a cache is ignored
        assert torch.equal(F.scaled_dot_product_attention(q, k, v), want)
    with vcattn.patch_sdpa("sage2-8bit", min_seq_kv=0):                    # nested blocks restore in order
        with vcattn.patch_sdpa("sage2-8bit", min_seq_kv=0):
            F.scaled_dot_product_attention(q, k, v)
        assert F.scaled_dot_product_attention is not orig
    assert F.scaled_dot_product_attention is orig


def test_patch_sdpa_fallbacks_warn_once_and_strict_raises():
    F = torch.nn.functional
    q, k, v = qkv(d=96)
    mask = torch.ones(200, 200, dtype=torch.bool).tril()  # causal: not a per-sample prefix (vcattn.masks)
    q64, k64, v64 = qkv()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with vcattn.patch_sdpa(min_seq_kv=0) as p:
            a = F.scaled_dot_product_attention(q, k, v)
            F.scaled_dot_product_attention(q, k, v)
            m = F.scaled_dot_product_attention(q64, k64, v64, attn_mask=mask)
            c = F.scaled_dot_product_attention(q64, k64, v64, is_causal=True)
    msgs = [str(x.message) for x in w if "patch_sdpa" in str(x.message)]
    assert len([s for s in msgs if "head_dim" in s]) == 1
    assert len([s for s in msgs if "attn_mask" in s]) == 1
    assert p.fallbacks == {"head_dim": 2, "attn_mask": 1, "causal": 1}
    assert torch.allclose(a, F.scaled_dot_product_attention(q, k, v))
    assert torch.allclose(m, F.scaled_dot_product_attention(q64, k64, v64, attn_mask=mask))
    assert torch.allclose(c, F.scaled_dot_product_attention(q64, k64, v64, is_causal=True))
    with vcattn.patch_sdpa(strict=True, min_seq_kv=0):
        with pytest.raises(vcattn.VcattnError, match="UNSUPPORTED_HEAD_DIM"):
            F.scaled_dot_product_attention(q, k, v)
        with pytest.raises(vcattn.VcattnError, match="attn_mask"):
            F.scaled_dot_product_attention(q64, k64, v64, attn_mask=mask)
    assert F.scaled_dot_product_attention is not None


def test_patch_sdpa_with_plan_cache_and_schedule():
    F = torch.nn.functional
    cache = vcattn.PlanCache(vcattn.Schedule(40), clusters=8, iterations=2)
    layers = [qkv(seed=i) for i in range(2)]
    for step in range(10):
        cache.set_step(step)
        with vcattn.patch_sdpa(plan_cache=cache, min_seq_kv=0):
            for q, k, v in layers:
                F.scaled_dot_product_attention(q, k, v)
    assert sorted(cache.keys()) == [0, 1]
    assert cache.grouped_steps() == [0, 4, 8]


def test_patch_sdpa_autograd_falls_back():
    F = torch.nn.functional
    q, k, v = qkv()
    q.requires_grad_(True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with vcattn.patch_sdpa(min_seq_kv=0) as p:
            out = F.scaled_dot_product_attention(q, k, v)
    out.sum().backward()
    assert q.grad is not None and p.fallbacks == {"autograd": 1}


def test_merge_torch_matches_whole():
    q, k, v = qkv(dtype=torch.float32)
    o1, l1 = vcattn.reference_attention(q, k[:, :, :90], v[:, :, :90], return_lse=True)
    o2, l2 = vcattn.reference_attention(q, k[:, :, 90:], v[:, :, 90:], return_lse=True)
    out, lse = vcattn.merge_attention(o1, l1, o2, l2)
    whole, whole_lse = vcattn.reference_attention(q, k, v, return_lse=True)
    assert torch.allclose(out, whole, atol=1e-6, rtol=0)
    assert torch.allclose(lse, whole_lse, atol=1e-5, rtol=0)


def test_flash_attn_forward_torch():
    q, k, v = qkv(layout="NHD", dtype=torch.bfloat16)
    out, lse = vcattn.flash_attn_forward(q, k, v, 0.0, None, causal=False)
    assert out.dtype == torch.bfloat16 and out.shape == q.shape and lse.shape == (1, 2, 200)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        oc, lc = vcattn.flash_attn_forward(q, k, v, causal=True)
    assert oc.dtype == torch.bfloat16 and lc.dtype == torch.float32


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_method_without_kernel_falls_back_or_raises_in_strict():
    # sage3-4bit has no Hopper kernel (NVFP4 needs Blackwell): SDPA with one warning
    q, k, v = (x.cuda().to(torch.bfloat16) for x in qkv())
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out, lse = vcattn.attention(q, k, v, return_lse=True, method="sage3-4bit")
        vcattn.attention(q, k, v, method="sage3-4bit")
    assert out.is_cuda and out.dtype == torch.bfloat16 and lse.shape == (1, 2, 200)
    assert sum("falling back to torch SDPA" in str(x.message) for x in w) == 1
    ref, ref_lse = vcattn.reference_attention(q, k, v, return_lse=True)
    assert ref.is_cuda
    assert vcattn.fidelity(ref, out)["rel_l2"] < 0.02
    assert (lse - ref_lse).abs().max().item() < 1e-3
    with pytest.raises(vcattn.VcattnError, match="NOT_BUILT"):
        vcattn.attention(q, k, v, method="sage3-4bit", strict=True)


def test_wan_processor_with_a_fake_module():
    # A stand-in for diffusers' WanAttention + processor: one SDPA call per layer call.
    F = torch.nn.functional

    class Base:
        def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, rotary_emb=None):
            kv = hidden_states if encoder_hidden_states is None else encoder_hidden_states
            b, s, _ = hidden_states.shape
            q = hidden_states.view(b, s, 2, 64).transpose(1, 2)
            k = kv.view(b, kv.shape[1], 2, 64).transpose(1, 2)
            return F.scaled_dot_product_attention(q, k, k).transpose(1, 2).flatten(2)

    class Attn:
        is_cross_attention = False

    cache = vcattn.PlanCache(vcattn.Schedule(8), clusters=8)
    proc = vcattn.VcattnAttnProcessor(Base(), layer_id="blocks.0.attn1", plan_cache=cache, method="vsmooth-8bit",
                                      min_seq_kv=0)
    x = torch.randn(1, 150, 128)
    for step in range(3):
        cache.set_step(step)
        y = proc(Attn(), x)
    assert y.shape == x.shape and cache.grouped_steps() == [0]
    ctx = torch.randn(1, 40, 128)
    cross = vcattn.VcattnAttnProcessor(Base(), layer_id="blocks.0.attn2", plan_cache=cache)
    y2 = cross(Attn(), x, ctx)                    # cross-attention: plain SDPA by default
    assert torch.equal(y2, Base()(Attn(), x, ctx))
    assert "blocks.0.attn2" not in cache


def test_patch_sdpa_sends_short_kv_to_sdpa_by_default():
    F = torch.nn.functional
    q, k, v = qkv(seed=3)                        # 200 keys: below the default 4096
    want = F.scaled_dot_product_attention(q, k, v)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with vcattn.patch_sdpa(strict=True) as p:   # a routing choice, not a failure: strict does not raise
            got = F.scaled_dot_product_attention(q, k, v)
    assert p.min_seq_kv == 4096 and p.calls == 0 and p.fallbacks == {"short_kv": 1}
    # said once (issue 29: a small test otherwise routes nothing and looks like it worked),
    # naming the threshold and the switch; .summary() counts it
    said = [str(x.message) for x in w if "vcattn" in str(x.message)]
    assert torch.equal(got, want) and len(said) == 1, said
    assert "200 keys" in said[0] and "min_seq_kv=4096" in said[0] and "min_seq_kv=0" in said[0], said
    assert p.stats() == {"routed": 0, "sdpa": 1, "fallbacks": {"short_kv": 1}, "min_seq_kv": 4096}
    assert "0 of 1 SDPA calls ran vcattn" in p.summary() and "min_seq_kv=4096" in p.summary(), p.summary()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with vcattn.patch_sdpa():
            F.scaled_dot_product_attention(q, k, v)
    assert not [x for x in w if "vcattn" in str(x.message)]          # once per process
    # the threshold counts keys, not queries: cross-attention from 300 queries to 100 keys
    qx = qkv(s=300, seed=4)[0]
    kx, vx = qkv(s=100, seed=5)[1:]
    with vcattn.patch_sdpa("sage2-8bit", min_seq_kv=150) as p:
        short = F.scaled_dot_product_attention(qx, kx, vx)
        long_ = F.scaled_dot_product_attention(q, k, v)
    assert p.calls == 1 and p.fallbacks == {"short_kv": 1}
    assert p.summary().startswith("vcattn.patch_sdpa(method='sage2-8bit'): 1 of 2 SDPA calls ran vcattn; 1 ran "
                                  "the original SDPA: 1 fewer keys than min_seq_kv=150"), p.summary()
    assert torch.equal(short, F.scaled_dot_product_attention(qx, kx, vx))
    assert torch.equal(long_, vcattn.attention(q, k, v, method="sage2-8bit"))
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="min_seq_kv"):
            vcattn.patch_sdpa(min_seq_kv=bad)


def test_patch_sdpa_empty_and_failing_calls_fall_back():
    F = torch.nn.functional
    q, k, v = qkv(seed=6)
    empty = q[:, :, :0]
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with vcattn.patch_sdpa(min_seq_kv=0) as p:
            e = F.scaled_dot_product_attention(empty, k, v)          # no queries
            e2 = F.scaled_dot_product_attention(q, k[:, :, :0], v[:, :, :0])  # no keys
    assert e.shape == (1, 2, 0, 64) and p.fallbacks == {"empty": 2} and p.calls == 0
    assert torch.equal(e2, F.scaled_dot_product_attention(q, k[:, :, :0], v[:, :, :0]))
    assert sum("empty" in str(x.message) for x in w) == 1
    # the library rejects NaN when the call runs: the model gets SDPA's answer, not an exception
    bad = v.clone()
    bad[0, 1, 17, 5] = float("nan")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with vcattn.patch_sdpa(min_seq_kv=0) as p:
            got = F.scaled_dot_product_attention(q, k, bad)
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, bad), equal_nan=True)
    # NaN in V[17, 5] reaches channel 5 of every query of that head, nothing else
    assert torch.isnan(got[0, 1, :, 5]).all() and torch.isnan(got).sum() == 200
    assert any("NON_FINITE" in str(x.message) for x in w)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with vcattn.patch_sdpa(min_seq_kv=0) as p:
            neg = F.scaled_dot_product_attention(q, k, v, scale=-0.1)   # vcattn refuses it, SDPA does not
    assert p.fallbacks == {"scale": 1} and torch.equal(neg, F.scaled_dot_product_attention(q, k, v, scale=-0.1))
    with vcattn.patch_sdpa(min_seq_kv=0, strict=True):
        with pytest.raises(vcattn.VcattnError, match="NON_FINITE"):
            F.scaled_dot_product_attention(q, k, bad)
        with pytest.raises(vcattn.VcattnError, match="empty"):
            F.scaled_dot_product_attention(empty, k, v)


def test_wan_processor_cross_attention_short_kv_stays_on_sdpa():
    F = torch.nn.functional

    class Base:
        def __call__(self, attn, hidden_states, encoder_hidden_states=None):
            kv = hidden_states if encoder_hidden_states is None else encoder_hidden_states
            q = hidden_states.view(1, -1, 2, 64).transpose(1, 2)
            k = kv.view(1, -1, 2, 64).transpose(1, 2)
            return F.scaled_dot_product_attention(q, k, k).transpose(1, 2).flatten(2)

    class Attn:
        is_cross_attention = True

    x, ctx = torch.randn(1, 150, 128), torch.randn(1, 40, 128)
    proc = vcattn.VcattnAttnProcessor(Base(), layer_id="blocks.0.attn2", cross_attention=True)
    assert torch.equal(proc(Attn(), x, ctx), Base()(Attn(), x, ctx))      # 40 text keys: SDPA
    routed = vcattn.VcattnAttnProcessor(Base(), layer_id="blocks.0.attn2", cross_attention="sage2-8bit",
                                        min_seq_kv=0)
    want = vcattn.attention(x.view(1, 150, 2, 64).transpose(1, 2), *(2 * [ctx.view(1, 40, 2, 64).transpose(1, 2)]),
                            method="sage2-8bit").transpose(1, 2).flatten(2)
    assert torch.equal(routed(Attn(), x, ctx), want)


def test_copied_plans_and_caches_are_separate():
    import copy
    import pickle

    q, k, v = qkv(seed=8)
    cache = vcattn.PlanCache(vcattn.Schedule(8), clusters=8)
    cache.set_step(0)
    first = cache.attention("L", q, k, v)
    for twin in (copy.deepcopy(cache), pickle.loads(pickle.dumps(cache))):
        assert twin.handle != cache.handle and twin["L"].handle != cache["L"].handle
        assert twin["L"].cache is twin
        twin.set_step(1)
        assert torch.equal(twin.attention("L", q, k, v), first)        # reuses its copied plan
        assert twin["L"].history == [(0, "group"), (1, "reuse")]
    assert cache["L"].history == [(0, "group")]                         # the original is untouched


def test_policy_psnrs_read_back_at_once_are_each_ones_own():
    """measure_recipes reads the PSNRs of every recipe back in one copy: each row must be
    what that output gives alone (the per-head choice compares them with the floor), in the
    outputs' order (here their errors grow, so their PSNRs fall)."""
    from vcattn import _gpu

    g = torch.Generator().manual_seed(5)
    ref = torch.randn(1, 3, 64, 32, generator=g)
    outs = [ref + s * torch.randn(1, 3, 64, 32, generator=g) for s in (1e-3, 1e-2, 3e-2)]
    together = _gpu._psnr_heads(ref, *outs)
    assert together.shape == (3, 3)
    for i, o in enumerate(outs):
        np.testing.assert_array_equal(together[i], _gpu._psnr_heads(ref, o))
    assert (together[0] > together[1]).all() and (together[1] > together[2]).all()


def test_policy_stderr_on_the_device_is_the_c_definition():
    """The GPU measurement computes each recipe's gain standard error with torch on the device
    (_gpu._gain_stderr); the CPU measurement and the choice's contract are the C function's
    (vcattn_head_gain_stderr): on fresh per-row errors spread over orders of magnitude the two
    agree, including every row measured (0), one row of several (inf) and a zero sum (0).  And
    _measured_heads reads back what each output gives alone."""
    from vcattn import _gpu
    from vcattn.head_policy import gain_stderr

    g = torch.Generator().manual_seed(11)
    for n, pop in ((200, 4000), (7, 9), (9, 9), (1, 50)):
        row = torch.randn(6, n, generator=g, dtype=torch.float64).exp()
        host = row * (0.3 * torch.randn(6, n, generator=g, dtype=torch.float64)).exp()
        rec = 0.7 * row * (0.3 * torch.randn(6, n, generator=g, dtype=torch.float64)).exp()
        rec[5] = 0.0
        got = _gpu._gain_stderr(host, rec, pop)
        want = [gain_stderr(host[i].numpy(), rec[i].numpy(), pop) for i in range(6)]
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
        assert got[5] == 0 and (got[:5] == (0 if n == pop else math.inf if n == 1 else got[:5])).all()
        if 1 < n < pop:
            assert (got[:5] > 0).all() and torch.isfinite(got[:5]).all()
    ref = torch.randn(1, 3, 64, 32, generator=g)
    host = ref + 3e-2 * torch.randn(1, 3, 64, 32, generator=g)
    outs = [ref + s * torch.randn(1, 3, 64, 32, generator=g) for s in (1e-3, 1e-2)]
    he = _gpu._row_sq_err(ref, host)
    np.testing.assert_allclose(he.numpy(), ((host.double() - ref.double()) ** 2).sum(-1).reshape(3, 64), rtol=1e-6)
    psnr, se = _gpu._measured_heads(ref, he, 1000, *outs)
    assert psnr.shape == se.shape == (2, 3)
    for i, o in enumerate(outs):
        np.testing.assert_array_equal(psnr[i], _gpu._psnr_heads(ref, o))
        np.testing.assert_array_equal(se[i], _gpu._gain_stderr(he, _gpu._row_sq_err(ref, o), 1000).numpy())
