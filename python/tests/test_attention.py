"""The call: reference exactness, layouts, strides, dtypes, LSE, methods."""
import math

import numpy as np
import pytest

import vcattn
from vcattn import _tensors
from helpers import make_qkv, numpy_attention

METHODS = vcattn.methods()


def test_methods_and_configs():
    assert METHODS == ["fp8-naive", "sage2-8bit", "vsmooth-8bit", "vsmooth-expcast-8bit", "sage3-4bit",
                       "vsmooth-4bit", "vsmooth-blockmax-8bit", "vsmooth-split-blockmax-8bit"]
    assert vcattn.DEFAULT_METHOD == "vsmooth-split-blockmax-8bit"
    c = vcattn.method_config("vsmooth-expcast-8bit")
    assert c["v_smooth"] and c["p_format"] == "expcast" and c["qk_format"] == "int8"
    assert not vcattn.method_config("sage2-8bit")["v_smooth"]
    s = vcattn.method_config("vsmooth-split-blockmax-8bit")
    assert s["v_smooth"] and s["p_format"] == "split" and s["p_scale"] == "block_max"
    assert vcattn.GPU_METHODS == ("sage2-8bit", "vsmooth-8bit", "vsmooth-expcast-8bit", "vsmooth-blockmax-8bit",
                                  "vsmooth-split-blockmax-8bit")
    e = vcattn.method_config("vsmooth-blockmax-8bit")
    assert e["v_smooth"] and e["p_format"] == "e4m3" and e["p_scale"] == "block_max" and e["rowsum_from_quantized_p"]


def test_library_info():
    info = vcattn.library_info()
    assert info["version"] == vcattn.__version__ == "0.1.0"
    assert info["path"].endswith(("libvcattn.so", "libvcattn.dylib"))


@pytest.mark.parametrize("sq,skv,d", [(200, 200, 64), (130, 257, 128)])
def test_reference_matches_numpy_float64(rng, sq, skv, d):
    q, k, v = make_qkv(rng, sq=sq, skv=skv, d=d)
    out, lse = vcattn.reference_attention(q, k, v, return_lse=True)
    want, want_lse = numpy_attention(q, k, v)
    assert out.dtype == np.float32 and out.shape == q.shape[:3] + (d,)
    np.testing.assert_allclose(out, want, rtol=0, atol=1e-6)
    np.testing.assert_allclose(lse, want_lse, rtol=0, atol=1e-5)  # float32 LSE of magnitude ~5
    out2 = vcattn.reference_attention(q, k, v, sm_scale=0.05)
    np.testing.assert_allclose(out2, numpy_attention(q, k, v, 0.05)[0], rtol=0, atol=1e-6)


@pytest.mark.parametrize("method", METHODS)
def test_methods_close_to_reference(rng, method):
    q, k, v = make_qkv(rng)
    ref = vcattn.reference_attention(q, k, v)
    out = vcattn.attention(q, k, v, method=method)
    f = vcattn.fidelity(ref, out)
    assert set(f) >= {"rel_l2", "cosine", "psnr_db"}
    bound = 0.3 if method.endswith("4bit") else 0.08
    assert f["rel_l2"] < bound and f["cosine"] > 0.95, f


@pytest.mark.parametrize("method", ["vsmooth-expcast-8bit", "sage2-8bit", "vsmooth-4bit", "fp8-naive"])
def test_hnd_and_nhd_identical(rng, method):
    q, k, v = make_qkv(rng, b=2, sq=150, skv=260)
    out, lse = vcattn.attention(q, k, v, "HND", return_lse=True, method=method)
    qn, kn, vn = (np.ascontiguousarray(x.transpose(0, 2, 1, 3)) for x in (q, k, v))
    outn, lsen = vcattn.attention(qn, kn, vn, "NHD", return_lse=True, method=method)
    assert outn.shape == qn.shape and lsen.shape == lse.shape == (2, 2, 150)
    np.testing.assert_array_equal(outn.transpose(0, 2, 1, 3), out)
    np.testing.assert_array_equal(lsen, lse)


def test_strided_views_identical_and_not_copied(rng):
    b, s, h, d = 1, 200, 2, 64
    # a packed qkv projection (B, S, 3, H, D), the way many DiTs hand attention its inputs
    qkv = rng.standard_normal((b, s, 3, h, d)).astype(np.float32)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]          # NHD views, seq stride 3*H*D
    assert not q.flags.c_contiguous
    op = _tensors.as_operand(q, "NHD")
    assert np.shares_memory(op.array, qkv) and op.strides == (s * 3 * h * d, d, 3 * h * d)
    out, lse = vcattn.attention(q, k, v, "NHD", return_lse=True)
    qc, kc, vc = (np.ascontiguousarray(x) for x in (q, k, v))
    outc, lsec = vcattn.attention(qc, kc, vc, "NHD", return_lse=True)
    np.testing.assert_array_equal(out, outc)
    np.testing.assert_array_equal(lse, lsec)
    # HND view of the same memory, and every other token of a longer sequence
    qh, kh, vh = (x.transpose(0, 2, 1, 3) for x in (q, k, v))
    np.testing.assert_array_equal(vcattn.attention(qh, kh, vh, "HND"), outc.transpose(0, 2, 1, 3))
    big = rng.standard_normal((1, 2, 400, d)).astype(np.float32)
    ks, vs = big[:, :, ::2], big[:, :, 1::2]
    qq = np.ascontiguousarray(qh)
    np.testing.assert_array_equal(vcattn.reference_attention(qq, ks, vs),
                                  vcattn.reference_attention(qq, np.ascontiguousarray(ks), np.ascontiguousarray(vs)))


def test_broadcast_and_negative_strides_are_copied(rng):
    q, k, v = make_qkv(rng)
    kb = np.broadcast_to(k[:, :1], k.shape)              # stride 0 on heads
    vr = v[:, :, ::-1]                                   # negative seq stride
    out = vcattn.reference_attention(q, kb, vr)
    np.testing.assert_array_equal(out, vcattn.reference_attention(q, np.ascontiguousarray(kb), vr.copy()))


@pytest.mark.parametrize("method", METHODS)
def test_lse_matches_reference(rng, method):
    q, k, v = make_qkv(rng, sq=130, skv=300)
    _, lse_ref = vcattn.reference_attention(q, k, v, return_lse=True)
    out, lse = vcattn.attention(q, k, v, return_lse=True, method=method)
    assert lse.dtype == np.float32 and lse.shape == (1, 2, 130)
    # The row sum carries the method's probability error: ExpCast codes are within
    # [ratio_min, ratio_max] of the exact value; E4M3 Q/K (fp8-naive) and NVFP4 add score error.
    facts = vcattn.expcast_facts(2000)
    tol = {"vsmooth-expcast-8bit": -math.log(facts["ratio_min"]) + 0.02,
           "fp8-naive": 0.15, "sage3-4bit": 0.25, "vsmooth-4bit": 0.25}.get(method, 0.03)
    err = np.abs(lse - lse_ref).max()
    assert err < tol, (method, err, tol)


def test_sq_ne_skv_and_batch(rng):
    q, k, v = make_qkv(rng, b=3, h=1, sq=70, skv=333, d=128)
    ref = vcattn.reference_attention(q, k, v)
    out = vcattn.attention(q, k, v, method="vsmooth-8bit")
    assert out.shape == (3, 1, 70, 128)
    assert vcattn.fidelity(ref, out)["rel_l2"] < 0.08
    np.testing.assert_allclose(ref, numpy_attention(q, k, v)[0], atol=1e-6, rtol=0)


def test_dtypes_follow_q(rng):
    q, k, v = make_qkv(rng)
    ref = vcattn.reference_attention(q, k, v)
    out16 = vcattn.attention(q.astype(np.float16), k.astype(np.float16), v.astype(np.float16))
    assert out16.dtype == np.float16
    assert vcattn.fidelity(ref, out16)["rel_l2"] < 0.08
    # fp32 q/k (after RoPE) with half-precision v: accepted, output in q's dtype
    mixed = vcattn.attention(q, k, v.astype(np.float16))
    assert mixed.dtype == np.float32
    o64 = vcattn.reference_attention(q.astype(np.float64), k, v)
    assert o64.dtype == np.float64


def test_bfloat16_numpy(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    q, k, v = make_qkv(rng)
    qb, kb, vb = (x.astype(ml_dtypes.bfloat16) for x in (q, k, v))
    out = vcattn.attention(qb, kb, vb)
    assert out.dtype == ml_dtypes.bfloat16
    ref = vcattn.reference_attention(qb, kb, vb)
    assert vcattn.fidelity(ref, out)["rel_l2"] < 0.08


def test_default_scale_is_inverse_sqrt_d(rng):
    q, k, v = make_qkv(rng)
    a = vcattn.attention(q, k, v, method="sage2-8bit")
    b = vcattn.attention(q, k, v, method="sage2-8bit", sm_scale=1 / 8)
    np.testing.assert_array_equal(a, b)


def test_explicit_plan_equals_on_the_fly(rng):
    q, k, v = make_qkv(rng)
    perm, cent = vcattn.kmeans_plan(v)
    assert perm.shape == (1, 2, 200) and perm.dtype == np.int32 and cent.shape == (1, 2, 64, 64)
    for bh in perm.reshape(-1, 200):
        assert sorted(bh.tolist()) == list(range(200))
    a = vcattn.attention(q, k, v)                      # plan=None: k-means with the same defaults
    b = vcattn.attention(q, k, v, plan=perm)
    c = vcattn.attention(q, k, v, plan=vcattn.Plan(perm, cent, policy=None))  # the method as it is
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)
    ident = np.broadcast_to(np.arange(200, dtype=np.int32), (1, 2, 200))
    d = vcattn.attention(q, k, v, plan=ident)          # sequence order: a different, valid result
    assert vcattn.fidelity(vcattn.reference_attention(q, k, v), d)["rel_l2"] < 0.08


def test_expcast_facts_match_the_paper():
    f = vcattn.expcast_facts()
    assert abs(f["agree_share"] - 0.796) < 0.001
    assert f["max_code_diff"] == 1
    assert abs(f["ratio_min"] - 0.9290) < 1e-4 and abs(f["ratio_max"] - 1.0745) < 1e-4
    assert abs(f["row_tv_bound"] - 0.0364) < 1e-4
    assert abs(f["beta"] + 0.35) < 1e-6
    with pytest.raises(ValueError):
        vcattn.expcast_facts(8)


def test_block_energy_share_and_cube(rng):
    v = rng.standard_normal((1, 2, 256, 64)).astype(np.float32) + 2 * rng.standard_normal((1, 1, 1, 64)).astype(
        np.float32)
    seq = vcattn.block_energy_share(v)
    plan = vcattn.Plan.from_values(v, clusters=8)
    clustered = vcattn.block_energy_share(v, plan)
    assert 0 < seq < 1 and 0 < clustered < 1
    cube = vcattn.cube_permutation(4, 8, 8, 2, 4, 4)
    assert sorted(cube.tolist()) == list(range(256))
    assert 0 < vcattn.block_energy_share(v, cube) < 1
