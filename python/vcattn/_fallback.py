"""The one fallback: exact attention for calls the library does not run (a CUDA call the
kernel cannot take, causal masks, local windows, softcap, an error inside patch_sdpa).

Without an LSE and without masks a torch call is torch's own SDPA (the builtin, never a
patched one: a fallback taken inside ``patch_sdpa`` must not go through the patch again).
Everything else is exact float32 attention computed in query chunks, so the score matrix
stays small, with the LSE from the same pass.  Masks follow flash-attn: aligned to the
bottom right when Sq != Skv; window_size = (left, right), -1 = unbounded.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["attention"]

_CHUNK = 512


def _allowed(i0, i1, sq, skv, causal, window, xp_arange):
    rows = xp_arange(i0, i1)[:, None] + (skv - sq)
    cols = xp_arange(0, skv)[None, :]
    ok = None
    left, right = window
    if causal:
        right = 0 if right < 0 else min(right, 0)
    if right >= 0:
        ok = cols <= rows + right
    if left >= 0:
        m = cols >= rows - left
        ok = m if ok is None else ok & m
    return ok


def attention(q, k, v, layout, scale, return_lse, causal=False, window=(-1, -1), softcap=0.0):
    """out in q's dtype and layout (and with return_lse the float32 (B,H,Sq) LSE); numpy or
    torch (any device).  scale None = 1/sqrt(head_dim)."""
    window = tuple(window)
    if not isinstance(q, np.ndarray) and not return_lse and not causal and window == (-1, -1) and not softcap:
        return _builtin_sdpa(q, k, v, layout, scale)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    out, lse = (_numpy if isinstance(q, np.ndarray) else _torch)(q, k, v, layout, scale, causal, window, softcap)
    return (out, lse) if return_lse else out


def _builtin_sdpa(q, k, v, layout, scale):
    import torch

    if layout == "NHD":
        q, k, v = (x.transpose(1, 2) for x in (q, k, v))
    qq = q.to(v.dtype) if q.dtype != v.dtype else q  # SDPA wants one dtype: fp32 q/k follow V's
    kk = k.to(v.dtype) if k.dtype != v.dtype else k
    out = torch._C._nn.scaled_dot_product_attention(qq, kk, v, scale=scale).to(q.dtype)
    return out.transpose(1, 2) if layout == "NHD" else out


def _numpy(q, k, v, layout, scale, causal, window, softcap):
    qf, kf, vf = (np.asarray(x, np.float32) for x in (q, k, v))
    if layout == "NHD":
        qf, kf, vf = (x.transpose(0, 2, 1, 3) for x in (qf, kf, vf))
    b, h, sq, d = qf.shape
    skv = kf.shape[2]
    out = np.zeros((b, h, sq, vf.shape[-1]), np.float32)
    lse = np.full((b, h, sq), -np.inf, np.float32)
    for i in range(0, sq, _CHUNK):
        j = min(sq, i + _CHUNK)
        s = np.matmul(qf[:, :, i:j], kf.transpose(0, 1, 3, 2)) * np.float32(scale)
        if softcap:
            s = np.float32(softcap) * np.tanh(s / np.float32(softcap))
        ok = _allowed(i, j, sq, skv, causal, window, np.arange)
        if ok is not None:
            s = np.where(ok, s, -np.inf)
        m = s.max(-1, keepdims=True)
        m = np.where(np.isfinite(m), m, 0.0)
        p = np.exp(s - m)
        tot = p.sum(-1, keepdims=True)
        out[:, :, i:j] = np.matmul(p, vf) / np.where(tot > 0, tot, 1.0)
        lse[:, :, i:j] = (m + np.log(tot))[..., 0]
    if layout == "NHD":
        out = out.transpose(0, 2, 1, 3)
    return out.astype(q.dtype), lse


def _torch(q, k, v, layout, scale, causal, window, softcap):
    import torch

    qf, kf, vf = (x.to(torch.float32) for x in (q, k, v))
    if layout == "NHD":
        qf, kf, vf = (x.transpose(1, 2) for x in (qf, kf, vf))
    b, h, sq, d = qf.shape
    skv = kf.shape[2]
    out = torch.zeros((b, h, sq, vf.shape[-1]), dtype=torch.float32, device=q.device)
    lse = torch.full((b, h, sq), -math.inf, dtype=torch.float32, device=q.device)
    ar = lambda a, z: torch.arange(a, z, device=q.device)  # noqa: E731
    for i in range(0, sq, _CHUNK):
        j = min(sq, i + _CHUNK)
        s = torch.matmul(qf[:, :, i:j], kf.transpose(-1, -2)) * scale
        if softcap:
            s = softcap * torch.tanh(s / softcap)
        ok = _allowed(i, j, sq, skv, causal, window, ar)
        if ok is not None:
            s = s.masked_fill(~ok, -math.inf)
        m = s.amax(-1, keepdim=True)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        p = torch.exp(s - m)
        tot = p.sum(-1, keepdim=True)
        out[:, :, i:j] = torch.matmul(p, vf) / torch.where(tot > 0, tot, torch.ones_like(tot))
        lse[:, :, i:j] = (m + torch.log(tot))[..., 0]
    if layout == "NHD":
        out = out.transpose(1, 2)
    return out.to(q.dtype), lse
