"""Shared test helpers (imported by the test modules; pytest puts this folder on sys.path)."""
import numpy as np


def make_qkv(rng, b=1, h=2, sq=200, skv=None, d=64, dtype=np.float32, layout="HND"):
    """Random attention inputs with some structure (a shared direction, as real heads have)."""
    skv = sq if skv is None else skv
    def t(s):
        x = rng.standard_normal((b, h, s, d)) + 0.5 * rng.standard_normal((1, 1, 1, d))
        if layout == "NHD":
            x = x.transpose(0, 2, 1, 3)
        return np.ascontiguousarray(x).astype(dtype)
    return t(sq), t(skv), t(skv)


def numpy_attention(q, k, v, scale=None):
    """Exact softmax attention in float64 (HND): (out, lse)."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * scale
    m = s.max(-1, keepdims=True)
    p = np.exp(s - m)
    tot = p.sum(-1, keepdims=True)
    return np.einsum("bhqk,bhkd->bhqd", p / tot, v), (m + np.log(tot))[..., 0]
