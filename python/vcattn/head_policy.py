"""Per-head recipes: a plan's choice, per (batch, head), of k-means or sequence order and of the
method's P or the exact exponential (docs/method.md, "Per-head recipes").

The choice is measured, not predicted: on ``rows`` query rows spread over the sequence, every
recipe of the method and the host recipe (``sage2-8bit``) are compared with exact attention of
the same rows, and ``vcattn_head_recipes_choose`` (C) picks per head.  CPU calls measure with the
CPU simulation against the FP64 reference (``vcattn_head_recipes_measure``); CUDA calls with the
kernel itself on the sampled rows against FP32 attention on the GPU.  Policies:

- ``"floor"`` (default): the first recipe in speed order (k-means with the method's P - the method
  as designed -, sequence order, then the same with the exact P) whose PSNR is at least the host
  recipe's on the head; if none is, the most faithful;
- ``"fastest"``: the method's P on every head, in the better of the two orders;
- ``"faithful"``: the most faithful recipe on every head;
- ``None``: no measurement, every head the method as it is (the k-means order).
"""
from __future__ import annotations

import ctypes

import numpy as np

from . import _lib
from ._lib import check, lib

__all__ = ["POLICIES", "RECIPES", "SEQUENCE", "EXACT_P", "check_policy", "choose", "apply", "names",
           "has_exact_sibling", "measure_cpu", "measure_gpu"]

POLICIES = ("floor", "fastest", "faithful")
SEQUENCE, EXACT_P = 1, 2  # VCATTN_RECIPE_SEQUENCE, VCATTN_RECIPE_EXACT_P
RECIPES = ("k-means", "sequence", "k-means+exact-P", "sequence+exact-P")
DEFAULT_ROWS = 128

_P = ctypes.c_void_p
_i64 = ctypes.c_int64
_SIGS = {
    "vcattn_head_recipes_choose": [ctypes.c_int, _i64, _P, _P, ctypes.c_double, _P],
    "vcattn_head_recipes_measure": [_P, ctypes.c_int, _P, _P, _i64, _P, _P],
    "vcattn_method_exact_p": [_P, _P],
}


def _fn(name):
    f = getattr(lib, name)
    f.argtypes, f.restype = _SIGS[name], ctypes.c_int
    return f


def check_policy(policy, rows, margin_db):
    if policy is not None and policy not in POLICIES:
        raise ValueError(f"vcattn: policy must be one of {POLICIES} or None, got {policy!r}")
    if isinstance(rows, bool) or not isinstance(rows, (int, np.integer)) or not 1 <= rows <= 1 << 20:
        raise ValueError(f"vcattn: policy_rows must be an int in 1..1048576 (query rows measured per head), "
                         f"got {rows!r}")
    if not np.isfinite(float(margin_db)):
        raise ValueError(f"vcattn: policy_margin_db must be a finite number of dB, got {margin_db!r}")


def has_exact_sibling(method: str) -> bool:
    """True for a V-Smooth method whose P has an exact-exponential sibling (the recipes apply)."""
    from ._methods import config

    out = _lib.MethodConfig()
    return _fn("vcattn_method_exact_p")(ctypes.byref(config(method)), ctypes.byref(out)) == 0


def choose(policy: str, psnr: np.ndarray, floor_db: np.ndarray, margin_db: float = 0.0) -> np.ndarray:
    """(n,) uint8 recipes from psnr (n, 4) and floor_db (n,) (vcattn_head_recipes_choose)."""
    psnr = np.ascontiguousarray(psnr, dtype=np.float64)
    floor_db = np.ascontiguousarray(floor_db, dtype=np.float64)
    out = np.zeros(psnr.shape[0], np.uint8)
    check(_fn("vcattn_head_recipes_choose")(POLICIES.index(policy), psnr.shape[0], psnr.ctypes.data,
                                             floor_db.ctypes.data, float(margin_db), out.ctypes.data),
          "vcattn_head_recipes_choose")
    return out


def apply(perm, recipes: np.ndarray):
    """(perm with the identity on the sequence-order heads, exact-P flags (B, H) uint8 or None)."""
    b, h, s = perm.shape
    rec = recipes.reshape(b, h)
    seq = (rec & SEQUENCE) != 0
    if seq.any():
        if isinstance(perm, np.ndarray):
            perm = perm.copy()
            perm[seq] = np.arange(s, dtype=perm.dtype)
        else:
            import torch

            perm = perm.clone()
            perm[torch.as_tensor(seq, device=perm.device)] = torch.arange(s, dtype=perm.dtype, device=perm.device)
    exact = ((rec & EXACT_P) != 0).astype(np.uint8)
    return perm, (exact if exact.any() else None)


def names(recipes: np.ndarray) -> list:
    return [RECIPES[int(r)] for r in np.asarray(recipes).reshape(-1)]


def measure_cpu(problem_params, method: str, perm: np.ndarray, seq_q: int, rows: int):
    """psnr (B*H, 4), floor (B*H,) on the CPU (vcattn_head_recipes_measure); problem_params: the
    call's vcattn_attention_params (its o is not written: the C side uses buffers of its own)."""
    from ._methods import method_id

    n = min(int(rows), int(seq_q))
    r = np.empty(n, np.int64)
    check(lib.vcattn_strided_rows(int(seq_q), n, r.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))),
          "vcattn_strided_rows")
    bh = problem_params.batch * problem_params.heads
    p = _lib.AttentionParams()
    ctypes.pointer(p)[0] = problem_params  # a copy: o_stride is set for the compact rows below
    d = p.head_dim
    p.o_stride[:] = (p.heads * n * d, n * d, d)
    p.lse = None
    psnr = np.empty((bh, 4), np.float64)
    floor_db = np.empty(bh, np.float64)
    perm = np.ascontiguousarray(perm, dtype=np.int32)
    check(_fn("vcattn_head_recipes_measure")(ctypes.byref(p), method_id(method), perm.ctypes.data, r.ctypes.data, n,
                                              psnr.ctypes.data, floor_db.ctypes.data),
          "vcattn_head_recipes_measure", f"method {method}")
    return psnr, floor_db


def _psnr_heads(ref, out):
    """PSNR per (b, h) of (B, H, n, D) float tensors."""
    import torch

    err = (out.float() - ref).pow(2).mean(dim=(2, 3)).sqrt()
    peak = ref.abs().amax(dim=(2, 3))
    return (20 * torch.log10(peak / err.clamp_min(1e-30))).reshape(-1).double().cpu().numpy()


def measure_gpu(q, k, v, layout, sm_scale, method: str, perm, rows: int):
    """psnr (B*H, 4), floor (B*H,) on the GPU: the kernel of every recipe and of sage2-8bit on
    `rows` strided query rows (a small Q: the call's K/V preprocessing once per recipe), compared
    with FP32 attention of the same rows."""
    import torch

    from . import _gpu

    seq_dim = 2 if layout == "HND" else 1
    sq = q.shape[seq_dim]
    n = min(int(rows), int(sq))
    idx = torch.as_tensor((np.arange(n, dtype=np.int64) * sq) // n, device=q.device)
    qs = q.index_select(seq_dim, idx)
    qh, kh, vh = (x if layout == "HND" else x.transpose(1, 2) for x in (qs, k, v))
    scale = 1.0 / float(np.sqrt(q.shape[-1])) if sm_scale is None else float(sm_scale)
    ref = torch.empty(qh.shape, dtype=torch.float32, device=q.device)
    for h0 in range(0, qh.shape[1], 4):  # (rows x keys) FP32 scores, four heads at a time
        s = torch.matmul(qh[:, h0:h0 + 4].float(), kh[:, h0:h0 + 4].float().transpose(-1, -2)) * scale
        ref[:, h0:h0 + 4] = torch.matmul(torch.softmax(s, dim=-1), vh[:, h0:h0 + 4].float())
        del s
    b, h = ref.shape[0], ref.shape[1]
    ones = torch.ones((b, h), dtype=torch.uint8, device=q.device)
    ident = torch.arange(perm.shape[2], dtype=torch.int32, device=q.device).expand(perm.shape).contiguous()

    def run(m, p=None, exact=None):
        out, _ = _gpu.attention(qs, k, v, layout, sm_scale, False, m, p, True, head_exact=exact)
        return _psnr_heads(ref, out if layout == "HND" else out.transpose(1, 2))

    floor_db = run("sage2-8bit")
    psnr = np.stack([run(method, ident if r & SEQUENCE else perm, ones if r & EXACT_P else None)
                     for r in range(4)], axis=1)
    return psnr, floor_db
