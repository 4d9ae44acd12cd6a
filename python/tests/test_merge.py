"""LSE merge of partial attentions, and the (out, lse) forward of xDiT / yunchang."""
import warnings

import numpy as np
import pytest

import vcattn
from helpers import make_qkv, numpy_attention


@pytest.mark.parametrize("layout", ["HND", "NHD"])
def test_merge_two_kv_halves_equals_whole(rng, layout):
    q, k, v = make_qkv(rng, sq=150, skv=300, layout=layout)
    ax = 2 if layout == "HND" else 1
    k1, k2 = np.split(k, [170], axis=ax)
    v1, v2 = np.split(v, [170], axis=ax)
    o1, l1 = vcattn.reference_attention(q, k1, v1, layout, return_lse=True)
    o2, l2 = vcattn.reference_attention(q, k2, v2, layout, return_lse=True)
    out, lse = vcattn.merge_attention(o1, l1, o2, l2, layout)
    whole, whole_lse = vcattn.reference_attention(q, k, v, layout, return_lse=True)
    assert out.dtype == np.float32 and out.shape == whole.shape
    np.testing.assert_allclose(out, whole, rtol=0, atol=1e-6)
    np.testing.assert_allclose(lse, whole_lse, rtol=0, atol=1e-5)


def test_merge_quantized_halves_close_to_whole(rng):
    q, k, v = make_qkv(rng, sq=128, skv=512)
    o1, l1 = vcattn.attention(q, k[:, :, :256], v[:, :, :256], return_lse=True, method="vsmooth-8bit")
    o2, l2 = vcattn.attention(q, k[:, :, 256:], v[:, :, 256:], return_lse=True, method="vsmooth-8bit")
    out, _ = vcattn.merge_attention(o1, l1, o2, l2)
    ref = vcattn.reference_attention(q, k, v)
    assert vcattn.fidelity(ref, out)["rel_l2"] < 0.08


def test_merge_handles_empty_side():
    o = np.ones((1, 1, 3, 64), np.float32)
    l1 = np.zeros((1, 1, 3), np.float32)
    l2 = np.full((1, 1, 3), -np.inf, np.float32)
    out, lse = vcattn.merge_attention(o, l1, 2 * o, l2)
    np.testing.assert_array_equal(out, o)
    np.testing.assert_array_equal(lse, l1)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_merge_both_sides_empty_gives_zero_and_neg_inf(rng, kind):
    """Rows with no keys on either side (both LSEs -inf): out 0 and LSE -inf, not NaN (issue 14)."""
    o1 = rng.standard_normal((2, 3, 5, 64)).astype(np.float32)
    o2 = rng.standard_normal((2, 3, 5, 64)).astype(np.float32)
    l1 = rng.standard_normal((2, 3, 5)).astype(np.float32)
    l2 = rng.standard_normal((2, 3, 5)).astype(np.float32)
    l1[:, :, 1] = l2[:, :, 1] = -np.inf  # both empty
    l1[:, :, 3] = -np.inf                # one side empty
    expect, expect_lse = vcattn.merge_attention(o1.astype(np.float64), l1.astype(np.float64), o2, l2)
    if kind == "torch":
        torch = pytest.importorskip("torch")
        out, lse = vcattn.merge_attention(*(torch.from_numpy(x) for x in (o1, l1, o2, l2)))
        out, lse = out.numpy(), lse.numpy()
    else:
        out, lse = vcattn.merge_attention(o1, l1, o2, l2)
    assert np.isfinite(out).all()
    np.testing.assert_array_equal(out[:, :, 1], 0.0)
    assert np.isneginf(lse[:, :, 1]).all()
    np.testing.assert_allclose(out[:, :, 3], o2[:, :, 3], rtol=0, atol=1e-6)
    np.testing.assert_allclose(lse[:, :, 3], l2[:, :, 3], rtol=0, atol=1e-6)
    keep = [0, 2, 4]
    np.testing.assert_allclose(out[:, :, keep], expect[:, :, keep], rtol=0, atol=1e-5)
    np.testing.assert_allclose(lse[:, :, keep], expect_lse[:, :, keep], rtol=0, atol=1e-5)


def test_merge_bad_shapes():
    o = np.zeros((1, 2, 3, 64), np.float32)
    with pytest.raises(ValueError, match="lse1"):
        vcattn.merge_attention(o, np.zeros((1, 2, 4)), o, np.zeros((1, 2, 3)))
    with pytest.raises(ValueError, match="differ"):
        vcattn.merge_attention(o, np.zeros((1, 2, 3)), o[:, :1], np.zeros((1, 2, 3)))


def test_flash_attn_forward_contract(rng):
    q, k, v = make_qkv(rng, sq=140, skv=260, layout="NHD")
    out, lse = vcattn.flash_attn_forward(q, k, v, 0.0, None, causal=False, window_size=(-1, -1), softcap=0.0,
                                         alibi_slopes=None, return_softmax=False)
    assert out.shape == q.shape and lse.shape == (1, 2, 140) and lse.dtype == np.float32
    o2, l2 = vcattn.attention_with_lse(q, k, v)
    np.testing.assert_array_equal(out, o2)
    np.testing.assert_array_equal(lse, l2)
    ref, ref_lse = vcattn.reference_attention(q, k, v, "NHD", return_lse=True)
    assert vcattn.fidelity(ref, out)["rel_l2"] < 0.08
    assert np.abs(lse - ref_lse).max() < 0.1


def test_flash_attn_forward_fallback_and_strict(rng):
    q, k, v = make_qkv(rng, sq=100, skv=100, layout="NHD")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out, lse = vcattn.flash_attn_forward(q, k, v, causal=True)
        vcattn.flash_attn_forward(q, k, v, causal=True)
    assert sum("fallback" in str(x.message) for x in w) <= 1
    # exact causal attention, checked row by row against numpy
    qh, kh, vh = (x.transpose(0, 2, 1, 3) for x in (q, k, v))
    for i in (0, 1, 57, 99):
        want, want_lse = numpy_attention(qh[:, :, i:i + 1], kh[:, :, :i + 1], vh[:, :, :i + 1])
        np.testing.assert_allclose(out[:, i:i + 1].transpose(0, 2, 1, 3), want, atol=1e-5, rtol=0)
        np.testing.assert_allclose(lse[:, :, i], want_lse[..., 0], atol=1e-4, rtol=0)
    with pytest.raises(vcattn.VcattnError, match="causal"):
        vcattn.flash_attn_forward(q, k, v, causal=True, strict=True)
    with pytest.raises(ValueError, match="dropout"):
        vcattn.flash_attn_forward(q, k, v, dropout_p=0.1)
    with pytest.raises(ValueError, match="alibi"):
        vcattn.flash_attn_forward(q, k, v, alibi_slopes=np.zeros(2))
