"""vcattn as the per-rank attention of yunchang's LongContextAttention (vcattn.yunchang).

Several processes (torch.multiprocessing.spawn), gloo, CPU tensors: the per-rank attention
is vcattn's CPU simulation.  Each rank builds the same full (B, S, H, D) inputs from a seed,
takes its chunk of the sequence (yunchang's "basic" sharding: chunk ``rank`` of P), sets up
yunchang's groups (``set_seq_parallel_pg``) and runs ``LongContextAttention``; the parent
concatenates the shards and compares with single-process runs:

- Ulysses (ulysses_degree = P) with exact per-rank attention = vcattn's exact attention of
  the whole problem, **bit for bit** (every head is computed whole on one rank); with a
  quantized method = the same per-step calls on each rank's head group in one process,
  bit for bit (and = one whole call for a method without V-Smooth, sage2-8bit).
- Ring (ring_degree = P) and the hybrid (2 x 2 at P = 4) with exact per-rank attention =
  exact attention of the whole problem within the FP32 rounding of yunchang's merge
  (``16 (R-1) eps32 max|out|``, ``4 R eps32 max|lse|``, R the ring degree); with a
  quantized method = the same per-step calls merged in the same order with yunchang's own
  ``update_out_and_lse`` in one process, bit for bit; and vcattn.parallel.RingAttention
  (vcattn's own ring, merging with merge_attention) agrees with it within the same FP32
  merge bound.

Skips without torch / yunchang, except where CI sets VCATTN_TEST_REQUIRE_YUNCHANG=1: then
a missing package or gloo fails the run (CI installs the pinned yunchang, .ci/run).
"""
import os
import sys
import tempfile
import warnings
import zlib

import pytest

if os.environ.get("VCATTN_TEST_REQUIRE_YUNCHANG") == "1":
    import torch  # noqa: E402 - an ImportError here fails the CI run instead of skipping
    import torch.distributed as dist
    import yunchang

    if not (dist.is_available() and dist.is_gloo_available()):
        raise RuntimeError("VCATTN_TEST_REQUIRE_YUNCHANG=1 but this torch has no torch.distributed with gloo")
else:
    torch = pytest.importorskip("torch")
    dist = pytest.importorskip("torch.distributed")
    yunchang = pytest.importorskip("yunchang")
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

import torch.multiprocessing as mp  # noqa: E402
from yunchang.ring.utils import update_out_and_lse  # noqa: E402

import vcattn  # noqa: E402
from vcattn import parallel  # noqa: E402
import vcattn.yunchang as vy  # noqa: E402

B, H, D = 1, 4, 64
SCALE = D ** -0.5   # what yunchang passes each step when softmax_scale is None
EPS32 = 2.0 ** -23
QUANT = vcattn.DEFAULT_METHOD


def full_inputs(s, seed, dtype=torch.float32):
    """The same (B, S, H, D) q, k, v on every rank (a shared direction, as real heads have)."""
    g = torch.Generator().manual_seed(seed)

    def t():
        return (torch.randn(B, s, H, D, generator=g) + 0.5 * torch.randn(1, 1, 1, D, generator=g)).to(dtype)

    return t(), t(), t()


# (name, ulysses degree, ring degree, per-rank attention, dtype)
def cases_for(world):
    cases = [
        ("uly_ref", world, 1, "reference", "float32"),
        ("uly_quant", world, 1, QUANT, "float32"),
        ("uly_sage", world, 1, "sage2-8bit", "float32"),
        ("ring_ref", 1, world, "reference", "float32"),
        ("ring_quant", 1, world, QUANT, "float32"),
    ]
    if world == 4:
        cases += [
            ("hybrid_ref", 2, 2, "reference", "float32"),
            ("hybrid_quant", 2, 2, QUANT, "float32"),
            ("hybrid_bf16", 2, 2, QUANT, "bfloat16"),
        ]
    return cases


def seq_len(world):
    return 256


def processor(fn):
    return vy.attn_processor(attn_fn="reference") if fn == "reference" else vy.attn_processor(method=fn)


def _run_case(rank, world, case):
    name, uly, ring, fn, dtype = case
    q, k, v = full_inputs(seq_len(world), zlib.crc32(name.encode()) % 1000, getattr(torch, dtype))
    local = [yunchang.EXTRACT_FUNC_DICT["basic"](x, rank, world) for x in (q, k, v)]
    yunchang.set_seq_parallel_pg(uly, ring, rank, world)
    attn = vy.long_context_attention(attn_fn="reference") if fn == "reference" else \
        vy.long_context_attention(method=fn)
    res = {"out": attn(*local)}
    if uly == 1:
        # the ring's LSE through yunchang's public ring function (LongContextAttention drops it)
        from yunchang.globals import PROCESS_GROUP

        out, lse, _ = yunchang.ring_flash_attn_func(*local, return_attn_probs=True, group=PROCESS_GROUP.RING_PG,
                                                    attn_type=None, attn_processor=processor(fn))
        res["ring_out"], res["ring_lse"] = out, lse
        if fn != "reference":
            # vcattn's own ring over the same shards (merges with vcattn.merge_attention)
            ours = parallel.RingAttention(method=fn)(*local, tensor_layout="NHD", return_lse=True)
            res["ours_out"], res["ours_lse"] = ours
    return res


# ---- a diffusers Wan transformer across ranks (parallelize_wan) ----------------------------------

def has_wan():
    if os.environ.get("VCATTN_TEST_REQUIRE_YUNCHANG") == "1":
        return True   # CI installs diffusers too: a missing one fails there
    try:
        from diffusers import WanTransformer3DModel  # noqa: F401
    except ImportError:
        return False
    return True


def tiny_wan():
    """test_diffusers' tiny Wan (2 layers, 2 heads x 128, random weights): 768 video tokens."""
    from diffusers import WanTransformer3DModel

    torch.manual_seed(0)
    cfg = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=128, in_channels=4, out_channels=4,
               text_dim=32, freq_dim=32, ffn_dim=256, num_layers=2, rope_max_seq_len=64)
    return WanTransformer3DModel(**cfg).eval()


def wan_inputs():
    g = torch.Generator().manual_seed(1)
    return torch.randn(1, 4, 3, 32, 32, generator=g), torch.tensor([500.0]), torch.randn(1, 24, 32, generator=g)


# (name, ulysses degree, ring degree, per-rank attention)
WAN_CASES = {2: [("wan_ring_quant", 1, 2, QUANT)], 4: [("wan_hybrid_ref", 2, 2, "reference")]}


def _run_wan(rank, world, name, uly, ring, fn):
    yunchang.set_seq_parallel_pg(uly, ring, rank, world)
    model = tiny_wan()
    sp = vy.parallelize_wan(model, attn_fn=fn) if fn == "reference" else vy.parallelize_wan(model, method=fn)
    with torch.no_grad():
        out = model(*wan_inputs(), return_dict=False)[0]
    sp.remove()
    with torch.no_grad():   # removed: the plain model again, on the whole sequence
        plain = model(*wan_inputs(), return_dict=False)[0]
    return {"out": out, "plain": plain}


def _wan_errors(rank, world):
    """Sizes that do not split raise the same clear error on every rank, before any collective."""
    model = tiny_wan()
    msgs = []
    # 1 x 2 x 6 latents: 3 tokens over 4 ranks; then Ulysses over all 4 ranks with 2 heads
    for latents, uly in ((torch.randn(1, 4, 1, 2, 6), 1), (torch.randn(1, 4, 1, 4, 8), world)):
        yunchang.set_seq_parallel_pg(uly, world // uly, rank, world)
        sp = vy.parallelize_wan(model, attn_fn="reference")
        try:
            with torch.no_grad():
                model(latents, torch.tensor([500.0]), torch.randn(1, 24, 32), return_dict=False)
        except ValueError as e:
            msgs.append(str(e))
        finally:
            sp.remove()
    return msgs


def _worker(rank, world, init_file, out_dir):
    torch.set_num_threads(1)
    os.environ.setdefault("VCATTN_NUM_THREADS", "1")
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        results = {c[0]: _run_case(rank, world, c) for c in cases_for(world)}
        if has_wan():
            results.update({c[0]: _run_wan(rank, world, *c) for c in WAN_CASES[world]})
            if world == 4:
                results["wan_errors"] = _wan_errors(rank, world)
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


_RESULTS = {}


def results(world):
    if world not in _RESULTS:
        with tempfile.TemporaryDirectory() as tmp:
            init = os.path.join(tmp, "init")
            mp.spawn(_worker, args=(world, init, tmp), nprocs=world, join=True)
            _RESULTS[world] = [torch.load(os.path.join(tmp, f"rank{r}.pt"), weights_only=False)
                               for r in range(world)]
    return _RESULTS[world]


def gathered(world, name, key="out"):
    """The full (B, S, H, D) tensor from every rank's chunk (LSE (B, H, S/P): along the last axis)."""
    parts = [r[name][key] for r in results(world)]
    return torch.cat(parts, dim=-1 if parts[0].dim() == 3 else 1)


def emulate(q, k, v, uly, ring, proc):
    """What LongContextAttention computes, in one process: rank (ring rank rr, Ulysses rank u)
    holds query block rr (S/R tokens) of head group u and meets K/V block (rr - t) mod R at
    ring step t; the steps fold with yunchang's update_out_and_lse in that order."""
    s, hp = q.shape[1], H // uly
    n = s // ring
    out = torch.empty_like(q)
    lse_full = torch.empty(B, H, s)
    for u in range(uly):
        hs = slice(u * hp, (u + 1) * hp)
        for rr in range(ring):
            qb = q[:, rr * n:(rr + 1) * n, hs].contiguous()
            o = lse = None
            for t in range(ring):
                j = (rr - t) % ring
                kb, vb = (x[:, j * n:(j + 1) * n, hs].contiguous() for x in (k, v))
                bo, bl = proc(qb, kb, vb, softmax_scale=SCALE)
                o, lse = update_out_and_lse(o, lse, bo, bl)
            out[:, rr * n:(rr + 1) * n, hs] = o.to(q.dtype)
            lse_full[:, hs, rr * n:(rr + 1) * n] = lse.squeeze(-1).transpose(1, 2)
    return out, lse_full


def case(world, name):
    return next(c for c in cases_for(world) if c[0] == name)


def inputs_of(world, name):
    _, _, _, _, dtype = case(world, name)
    return full_inputs(seq_len(world), zlib.crc32(name.encode()) % 1000, getattr(torch, dtype))


def merge_bounds(ref, ref_lse, ring):
    return 16 * (ring - 1) * EPS32 * ref.abs().max().item(), 4 * ring * EPS32 * ref_lse.abs().max().item()


WORLDS = [2, 4]


# ---- Ulysses ----------------------------------------------------------------------------------

@pytest.mark.parametrize("world", WORLDS)
def test_ulysses_exact_is_the_whole_exact_attention_bit_for_bit(world):
    q, k, v = inputs_of(world, "uly_ref")
    ref = vcattn.reference_attention(q, k, v, "NHD", SCALE)
    out = gathered(world, "uly_ref")
    assert out.shape == q.shape and out.dtype == torch.float32
    assert torch.equal(out, ref)


@pytest.mark.parametrize("world", WORLDS)
def test_ulysses_quantized_is_the_per_head_group_calls_bit_for_bit(world):
    q, k, v = inputs_of(world, "uly_quant")
    want, _ = emulate(q, k, v, world, 1, processor(QUANT))
    out = gathered(world, "uly_quant")
    assert torch.equal(out, want)
    # and it is the method, not exact attention: within its error of the exact result
    ref = vcattn.reference_attention(q, k, v, "NHD", SCALE)
    assert 0 < vcattn.fidelity(ref.numpy(), out.numpy())["rel_l2"] < 0.05


@pytest.mark.parametrize("world", WORLDS)
def test_ulysses_without_vsmooth_is_one_whole_call_bit_for_bit(world):
    q, k, v = inputs_of(world, "uly_sage")
    whole = vcattn.attention(q, k, v, "NHD", SCALE, method="sage2-8bit")
    assert torch.equal(gathered(world, "uly_sage"), whole)


# ---- ring and the hybrid ------------------------------------------------------------------------

@pytest.mark.parametrize("world,name", [(2, "ring_ref"), (4, "ring_ref"), (4, "hybrid_ref")])
def test_ring_exact_is_the_whole_exact_attention_within_fp32_merge_rounding(world, name):
    _, uly, ring, _, _ = case(world, name)
    q, k, v = inputs_of(world, name)
    ref, ref_lse = vcattn.reference_attention(q, k, v, "NHD", SCALE, return_lse=True)
    tol_out, tol_lse = merge_bounds(ref, ref_lse, ring)
    out = gathered(world, name)
    err = (out - ref).abs().max().item()
    assert 0 < err <= tol_out, (err, tol_out)   # 0 would mean nothing was merged
    if uly == 1:
        assert torch.equal(gathered(world, name, "ring_out"), out)
        lse = gathered(world, name, "ring_lse")
        assert lse.shape == (B, H, q.shape[1]) and lse.dtype == torch.float32
        assert (lse - ref_lse).abs().max().item() <= tol_lse


@pytest.mark.parametrize("world,name", [(2, "ring_quant"), (4, "ring_quant"), (4, "hybrid_quant"),
                                        (4, "hybrid_bf16")])
def test_ring_quantized_is_the_same_steps_merged_in_one_process_bit_for_bit(world, name):
    _, uly, ring, fn, _ = case(world, name)
    q, k, v = inputs_of(world, name)
    want, want_lse = emulate(q, k, v, uly, ring, processor(fn))
    out = gathered(world, name)
    assert out.dtype == q.dtype
    assert torch.equal(out, want)
    if uly == 1:
        assert torch.equal(gathered(world, name, "ring_lse"), want_lse)
    ref = vcattn.reference_attention(q.float(), k.float(), v.float(), "NHD", SCALE)
    assert vcattn.fidelity(ref.numpy(), out.float().numpy())["rel_l2"] < 0.05


@pytest.mark.parametrize("world", WORLDS)
def test_vcattn_ring_agrees_with_yunchang_ring_within_fp32_merge_rounding(world):
    # the same per-shard calls, folded by two FP32 formulas (merge_attention's max-shifted
    # exp vs yunchang's sigmoid form): equal up to the merge's rounding
    ref, ref_lse = gathered(world, "ring_quant"), gathered(world, "ring_quant", "ring_lse")
    tol_out, tol_lse = merge_bounds(ref, ref_lse, world)
    ours, ours_lse = gathered(world, "ring_quant", "ours_out"), gathered(world, "ring_quant", "ours_lse")
    assert (ours - ref).abs().max().item() <= tol_out
    assert (ours_lse - ref_lse).abs().max().item() <= tol_lse


# ---- the processor and the builder, in one process ----------------------------------------------

def test_processor_contract():
    q, k, v = full_inputs(128, 7)
    out, lse = vy.attn_processor(QUANT)(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                                        window_size=(-1, -1), softcap=0.0, alibi_slopes=None, return_softmax=False)
    want, want_lse = vcattn.attention(q, k, v, "NHD", None, True, method=QUANT)
    assert out.shape == q.shape and lse.shape == (B, H, 128) and lse.dtype == torch.float32
    assert torch.equal(out, want) and torch.equal(lse, want_lse)
    ob, _ = vy.attn_processor(QUANT)(q.bfloat16(), k.bfloat16(), v.bfloat16())
    assert ob.dtype == torch.bfloat16
    # "sdpa" (on the CPU: exact float32 with the LSE) and a callable in vcattn.parallel's convention
    o_s, l_s = vy.attn_processor(attn_fn="sdpa")(q, k, v)
    ref, ref_lse = vcattn.reference_attention(q, k, v, "NHD", return_lse=True)
    assert (o_s - ref).abs().max() < 1e-5 and (l_s - ref_lse).abs().max() < 1e-4
    calls = []

    def mine(q, k, v, tensor_layout, sm_scale, return_lse, plan=None, step=None):
        calls.append((tensor_layout, sm_scale, return_lse))
        return vcattn.reference_attention(q, k, v, tensor_layout, sm_scale, return_lse)

    vy.attn_processor(attn_fn=mine)(q, k, v, softmax_scale=0.1)
    assert calls == [("NHD", 0.1, True)]


def test_processor_refusals_and_fallbacks():
    q, k, v = full_inputs(128, 8)
    proc = vy.attn_processor(QUANT)
    with pytest.raises(ValueError, match="dropout_p"):
        proc(q, k, v, dropout_p=0.1)
    with pytest.raises(ValueError, match="alibi"):
        proc(q, k, v, alibi_slopes=torch.zeros(H))
    with pytest.raises(vcattn.VcattnError, match="causal"):
        vy.attn_processor(QUANT, strict=True)(q, k, v, causal=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out, lse = proc(q, k, v, causal=True)      # exact float32 causal attention, one warning
    want = torch.nn.functional.scaled_dot_product_attention(*(x.transpose(1, 2) for x in (q, k, v)), is_causal=True)
    assert (out - want.transpose(1, 2)).abs().max() < 1e-5
    with pytest.raises(TypeError, match=r"must return \(out, lse\)"):
        vy.attn_processor(attn_fn=lambda q, k, v, *a, **kw: q)(q, k, v)
    with pytest.raises(ValueError, match="unknown method"):
        vy.attn_processor("nope")
    with pytest.raises(ValueError, match="attn_fn"):
        vy.attn_processor(attn_fn="flash")


def test_builder_errors(monkeypatch):
    from yunchang.globals import PROCESS_GROUP

    with pytest.raises(ValueError, match="ring_impl_type='basic'"):
        vy.long_context_attention(ring_impl_type="zigzag")
    monkeypatch.setattr(PROCESS_GROUP, "ULYSSES_PG", None)
    monkeypatch.setattr(PROCESS_GROUP, "RING_PG", None)
    with pytest.raises(RuntimeError, match="set_seq_parallel_pg"):
        vy.long_context_attention()


def test_missing_yunchang_names_the_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "yunchang", None)   # import yunchang -> ImportError
    with pytest.raises(ImportError, match=f"pip install yunchang=={vy.TESTED_YUNCHANG}"):
        vy.long_context_attention()


def test_the_pinned_version_is_the_tested_one():
    # CI tests the pinned (oldest supported) yunchang and the newest release (.ci/run)
    assert f"yunchang=={vy.TESTED_YUNCHANG}" in open(os.path.join(os.path.dirname(__file__), "..", "..", ".ci",
                                                                  "run")).read()
    if os.environ.get("VCATTN_TEST_REQUIRE_YUNCHANG") == "1":
        def key(ver):
            return tuple(int(p) for p in ver.split("+")[0].split(".")[:3] if p.isdigit())
        assert key(yunchang.__version__) >= key(vy.TESTED_YUNCHANG), yunchang.__version__


def test_parallelize_wan_shards_both_rotary_embedding_forms():
    # diffusers <= 0.34 passes Wan's blocks one complex (1, 1, S, D/2) rotary tensor, later releases
    # a (cos, sin) tuple of (1, S, 1, D): each is cut along its sequence axis like the tokens
    sp = object.__new__(vy.WanSequenceParallel)
    sp.chunk, sp.size = 1, 2
    g = torch.Generator().manual_seed(29)
    hidden, text, temb = torch.randn(1, 12, 8, generator=g), torch.randn(1, 5, 8, generator=g), torch.randn(1, 6, 8)
    rope = torch.randn(1, 1, 12, 4, generator=g)
    h, t, e, r = sp._shard_inputs(None, (hidden, text, temb, rope))
    assert torch.equal(h, hidden[:, 6:]) and torch.equal(r, rope[:, :, 6:]) and t is text and e is temb
    cos, sin = torch.randn(1, 12, 1, 8, generator=g), torch.randn(1, 12, 1, 8, generator=g)
    h, _, _, r = sp._shard_inputs(None, (hidden, text, temb, (cos, sin)))
    assert isinstance(r, tuple) and len(r) == 2
    assert torch.equal(h, hidden[:, 6:]) and torch.equal(r[0], cos[:, 6:]) and torch.equal(r[1], sin[:, 6:])
    h2, _, _, r2 = sp._shard_inputs(None, (h, text, temb, (cos, sin)))   # a later block: its chunk already
    assert h2 is h and torch.equal(r2[1], sin[:, 6:])
    with pytest.raises(ValueError, match="different sequence lengths"):
        sp._shard_inputs(None, (hidden, text, temb, (cos, sin[:, :10])))
    with pytest.raises(ValueError, match="got 5 tokens"):
        sp._shard_inputs(None, (hidden[:, :5], text, temb, (cos, sin)))
    with pytest.raises(TypeError, match="rotary embedding"):
        sp._shard_inputs(None, (hidden, text, temb, "rope"))


@pytest.mark.skipif(not has_wan(), reason="diffusers with WanTransformer3DModel is not installed")
@pytest.mark.parametrize("world,name", [(2, "wan_ring_quant"), (4, "wan_hybrid_ref")])
def test_parallelize_wan_matches_the_single_process_transformer(world, name):
    _, _, _, fn = next(c for c in WAN_CASES[world] if c[0] == name)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the ranks run (_worker): CPU matmul blocking follows the thread count
    try:
        with torch.no_grad():
            want = tiny_wan()(*wan_inputs(), return_dict=False)[0]
    finally:
        torch.set_num_threads(threads)
    outs = [r[name]["out"] for r in results(world)]
    assert all(torch.equal(outs[0], o) for o in outs)           # every rank has the whole output
    for r in results(world):
        # remove() restored the model: the plain model's output, up to float32 rounding (this
        # process's math libraries may take other paths than the freshly spawned ranks'; the
        # method itself is ~5e-5 away at this size, so a model left patched still fails)
        plain = vcattn.fidelity(want.numpy(), r[name]["plain"].numpy())
        assert plain["rel_l2"] < 2e-6, plain
    f = vcattn.fidelity(want.numpy(), outs[0].numpy())
    if fn == "reference":
        # exact attention per rank vs the model's float32 SDPA: float32 rounding only
        # (measured 1.8e-7 at P = 2 and 4, diffusers 0.34.0)
        assert f["rel_l2"] < 2e-6, f
    else:
        # the method's error at this size: measured 86 dB here, and 86 dB for the same method in one
        # process (install_wan_processors)
        assert 75.0 < f["psnr_db"] < 120.0, f


@pytest.mark.skipif(not has_wan(), reason="diffusers with WanTransformer3DModel is not installed")
def test_parallelize_wan_errors():
    model = tiny_wan()
    with pytest.raises(TypeError, match="WanTransformer3DModel"):
        vy.parallelize_wan(torch.nn.Linear(2, 2), attention=lambda *a, **k: None)
    assert not dist.is_initialized()   # the parent process never joins a group
    with pytest.raises(RuntimeError, match="not initialized"):
        vy.parallelize_wan(model, attention=lambda *a, **k: None)
    vcattn.install_wan_processors(model)
    with pytest.raises(ValueError, match="call parallelize_wan on the transformer first"):
        vy.parallelize_wan(model, attention=lambda *a, **k: None)
    # a processor that attends without SDPA would attend over the local tokens only: refused
    silent = vy._SelfAttentionProcessor(lambda attn, h, *a: h, attention=None, ulysses=1)
    with pytest.raises(RuntimeError, match="did not call torch.nn.functional.scaled_dot_product_attention"):
        silent(None, torch.zeros(1, 4, 8))


@pytest.mark.skipif(not has_wan(), reason="diffusers with WanTransformer3DModel is not installed")
def test_parallelize_wan_sizes_that_do_not_split():
    for r in results(4):
        tokens, heads = r["wan_errors"]
        assert "3 tokens do not divide by the 4 sequence-parallel ranks" in tokens
        assert "2 heads do not divide by the Ulysses degree 4" in heads
