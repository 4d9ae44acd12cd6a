"""torch custom ops (torch.library): the CPU and CUDA paths as operators torch.compile can
trace without a graph break.

    torch.ops.vcattn.attention(q, k, v, perm, v_smooth, layout, sm_scale, method, return_lse,
                               num_threads, strict, fallback, head_exact, out_rows) -> (out, lse)
    torch.ops.vcattn.kmeans(v, init_centroids, layout, clusters, iterations, seed, num_threads)
                               -> (perm, centroids)
    torch.ops.vcattn.plan_permutation(q, k, v, source, key, step, layout, method, sm_scale)
                               -> (perm, v_smooth, head_exact)

The permutation is a tensor input of the attention op.  Plans and schedules are Python
state and stay outside the traced graph: ``plan_permutation`` receives a Plan's handle (or
a PlanCache's handle and a layer key), ints and strings that stay the same every step, and
resolves the plan when the graph runs - grouping, reusing or turning V-Smooth off as
``Plan.resolve`` decides at that step - so one compiled graph serves every denoising step.
Its ``v_smooth`` output is a 0-dim CPU bool tensor.

Imported only when torch tensors reach vcattn (import vcattn never imports torch).
No ``from __future__ import annotations`` here: torch.library reads the annotations.
"""
import math
from typing import Optional, Tuple

import torch

from . import _cpu, _fallback, _gpu, _lib, _tensors
from ._lib import VcattnError, warn_once
from ._methods import GPU_METHODS, uses_vsmooth
from .plan import CACHE_STEP, LayerRef, Plan, cpu_kmeans, from_handle, is_cache_step

__all__ = ["attention", "registered"]

Tensor = torch.Tensor
# step arguments of plan_permutation: no step, and "the plan's cache's step when it runs"
_NO_STEP, _CACHE_STEP = -1, -2


def _bhs(x, layout):
    b, a1, a2, _ = x.shape
    return (b, a1, a2) if layout == "HND" else (b, a2, a1)


# ---- the implementations (they run when the graph runs, never while it is traced) -----------------

def _attention_impl(q: Tensor, k: Tensor, v: Tensor, perm: Optional[Tensor], v_smooth: Optional[Tensor],
                    layout: str, sm_scale: float, method: str, return_lse: bool, num_threads: int, strict: bool,
                    fallback: bool, head_exact: Optional[Tensor] = None, out_rows: int = -1) -> Tuple[Tensor, Tensor]:
    # out_rows >= 0: the output (and LSE) has out_rows query rows, q's first and zeros (LSE -inf)
    # after them - a masked call's valid rows written straight into its padded output, no copy.
    # sm_scale: vcattn.attention resolves it; a direct call of the op may pass <= 0 (C's default)
    scale = sm_scale if sm_scale > 0 else 1.0 / math.sqrt(q.shape[-1])
    # v_smooth (a CPU scalar from the plan op): 0 off, 1 on, 2 on with exact-P heads in head_exact
    state = 1 if v_smooth is None else int(v_smooth.item())
    on = state != 0
    exact = head_exact if state == 2 else None
    padded = _padded_output(q, layout, out_rows)
    rows = None if padded is None else _rows(padded, layout, _bhs(q, layout)[2])
    try:
        if q.device.type == "cpu":
            threads = _cpu.threads(None if num_threads < 0 else num_threads)
            out, lse = _cpu.simulate(q, k, v, layout, scale, return_lse, threads, method,
                                     plan=None if perm is None else perm.numpy(), v_smooth=on,
                                     head_exact=None if exact is None else exact.numpy())
            out = _tensors.like(out, q)
            lse = None if lse is None else torch.from_numpy(lse)
        else:
            out, lse = _cuda(q, k, v, layout, scale, return_lse, method, perm, on, strict, exact, rows)
    except VcattnError as e:
        if not fallback:
            raise
        warn_once(("error", e.status_name), f"vcattn: {e}; such calls use exact attention instead")
        res = _fallback.attention(q, k, v, layout, scale, return_lse)
        out, lse = res if return_lse else (res, None)
    if padded is not None:
        if out is not rows:
            rows.copy_(out)  # the CPU simulation and the fallbacks write a tensor of their own
        out = padded
        if lse is not None:
            full = torch.full(_bhs(padded, layout), float("-inf"), dtype=torch.float32, device=q.device)
            full[:, :, :lse.shape[2]] = lse
            lse = full
    # outputs are fresh and contiguous, as the fake implementation promises
    out = out.contiguous()
    if lse is None:
        lse = torch.empty((0,), dtype=torch.float32, device=q.device)
    return out, lse.contiguous()


def _padded_output(q, layout, out_rows):
    """None, or the (contiguous, q's dtype) output of out_rows query rows, zeros past q's rows."""
    sq = _bhs(q, layout)[2]
    if out_rows < 0:
        return None
    if out_rows < sq:
        raise ValueError(f"vcattn: out_rows ({out_rows}) must be at least q's {sq} rows")
    shape = list(q.shape)
    shape[2 if layout == "HND" else 1] = out_rows
    out = torch.empty(shape, dtype=q.dtype, device=q.device)
    _rows(out, layout, slice(sq, None)).zero_()
    return out


def _rows(x, layout, sel):
    """x's query rows sel (an int n: the first n), a view."""
    sel = slice(sel) if isinstance(sel, int) else sel
    return x[:, :, sel] if layout == "HND" else x[:, sel]


def _cuda(q, k, v, layout, scale, return_lse, method, perm, on, strict, head_exact=None, out=None):
    """The Hopper kernel; what it does not cover falls back to SDPA with one warning
    (strict=True raises VcattnError instead: NOT_BUILT, or the status the kernel refused the
    call's values with)."""
    try:
        return _gpu.attention(q, k, v, layout, scale, return_lse, method, perm, on, strict=strict, head_exact=head_exact,
                              out=out)
    except _gpu.Unsupported as e:
        why, status = str(e), e.status
    if strict:
        # the kernel's own refusal keeps its status (SCORE_OVERFLOW: this sm_scale), else NOT_BUILT
        raise VcattnError(status if status is not None else _lib.STATUS["NOT_BUILT"], "vcattn.attention", why)
    warn_once(("cuda", why), f"vcattn: {why}; falling back to torch SDPA (exact softmax)")
    res = _fallback.attention(q, k, v, layout, scale, return_lse)
    return res if return_lse else (res, None)


def _attention_fake(q, k, v, perm, v_smooth, layout, sm_scale, method, return_lse, num_threads, strict, fallback,
                    head_exact=None, out_rows=-1):
    shape = list(q.shape)
    if out_rows >= 0:
        shape[2 if layout == "HND" else 1] = out_rows
    out = torch.empty(shape, dtype=q.dtype, device=q.device)
    lse_shape = _bhs(out, layout) if return_lse else (0,)
    return out, torch.empty(lse_shape, dtype=torch.float32, device=q.device)


def _kmeans_impl(v: Tensor, init_centroids: Optional[Tensor], layout: str, clusters: int, iterations: int, seed: int,
                 num_threads: int) -> Tuple[Tensor, Tensor]:
    b, h, s = _bhs(v, layout)
    want = (b, h, clusters, v.shape[-1])
    if init_centroids is not None and tuple(init_centroids.shape) != want:
        raise ValueError(f"vcattn: init_centroids must have shape {want}, got {tuple(init_centroids.shape)}")
    if v.device.type == "cpu":
        init = None if init_centroids is None else init_centroids.detach().to(torch.float32).numpy()
        perm, cent = cpu_kmeans(_tensors.as_operand(v, layout), clusters, iterations, seed, init,
                                _cpu.threads(None if num_threads < 0 else num_threads))
        return torch.from_numpy(perm), torch.from_numpy(cent)
    try:
        return _gpu.kmeans(v, layout, clusters, iterations, seed, init_centroids)
    except _gpu.Unsupported as e:
        raise VcattnError(_lib.STATUS["NOT_BUILT"], "vcattn.kmeans", str(e))


def _kmeans_fake(v, init_centroids, layout, clusters, iterations, seed, num_threads):
    b, h, s = _bhs(v, layout)
    return (torch.empty((b, h, s), dtype=torch.int32, device=v.device),
            torch.empty((b, h, clusters, v.shape[-1]), dtype=torch.float32, device=v.device))


def _plan_impl(q: Tensor, k: Tensor, v: Tensor, source: int, key: str, step: int, layout: str, method: str,
               sm_scale: float) -> Tuple[Tensor, Tensor, Tensor]:
    """(perm, state, head_exact): the permutation with the plan's head recipes applied, a CPU int8
    scalar (0 V-Smooth off, 1 on, 2 on with exact-P heads) and the (B, H) exact-P flags."""
    p = from_handle(source) if key == "" else LayerRef.from_repr(source, key)
    at = {_NO_STEP: None, _CACHE_STEP: CACHE_STEP}.get(step, step)
    b, h, s = _bhs(v, layout)
    shape = (b, h, s, v.shape[-1])
    scale = sm_scale if sm_scale > 0 else 1.0 / math.sqrt(q.shape[-1])
    sq = _bhs(q, layout)[2]
    exact = None
    if v.device.type == "cpu":
        op = _tensors.as_operand(v, layout)
        perm = p.resolve(shape, at, p.cpu_grouping(op))
        if perm is not None:
            def run(qq, kk, vv, lay, pm, rows):
                prob = _cpu.Problem(qq, kk, vv, lay, scale, False, _cpu.threads(None))
                return _cpu.measure_recipes(prob.params, method, pm, prob.q.shape[2], rows)

            perm, exact = p.apply_recipes(perm, method, _tensors.heads_measure(q, k, v, layout, run), sq)
    else:
        try:
            _gpu.check_supported(method, v)
        except _gpu.Unsupported:  # the attention op falls back (and says why): nothing to plan
            perm = None
        else:
            perm = p.resolve(shape, at, _gpu.grouping(p, v, layout), v.device)
            if perm is not None:
                def run(qq, kk, vv, lay, pm, rows):
                    return _gpu.measure_recipes(qq, kk, vv, lay, scale, method, pm, rows, p.policy, p.policy_margin_db)

                perm, exact = p.apply_recipes(perm, method, _tensors.heads_measure(q, k, v, layout, run), sq)
    # read only when the state says 2: without exact-P heads an uninitialised tensor (no kernel launch)
    flags = torch.empty((b, h), dtype=torch.uint8, device=v.device)
    if perm is None:
        return torch.zeros((b, h, s), dtype=torch.int32, device=v.device), torch.tensor(0, dtype=torch.int8), flags
    if exact is not None:
        flags = torch.as_tensor(exact, device=v.device).to(torch.uint8).reshape(b, h).clone()
    # a copy: the op's output must not alias the plan's state
    return (torch.as_tensor(perm, device=v.device).clone(), torch.tensor(1 if exact is None else 2, dtype=torch.int8),
            flags)


def _plan_fake(q, k, v, source, key, step, layout, method, sm_scale):
    b, h, s = _bhs(v, layout)
    return (torch.empty((b, h, s), dtype=torch.int32, device=v.device), torch.empty((), dtype=torch.int8),
            torch.empty((b, h), dtype=torch.uint8, device=v.device))


# ---- registration ------------------------------------------------------------------------------------

def _register():
    """The ops, or the plain implementations where torch.library has no custom_op (torch < 2.4:
    eager calls work the same; torch.compile then breaks the graph at vcattn)."""
    custom_op = getattr(torch.library, "custom_op", None)
    if custom_op is None:
        return _attention_impl, _kmeans_impl, _plan_impl, False
    ops = []
    for name, impl, fake in (("attention", _attention_impl, _attention_fake), ("kmeans", _kmeans_impl, _kmeans_fake),
                             ("plan_permutation", _plan_impl, _plan_fake)):
        op = custom_op(f"vcattn::{name}", impl, mutates_args=())
        op.register_fake(fake)
        ops.append(op)
    return ops[0], ops[1], ops[2], True


attention_op, kmeans_op, plan_op, registered = _register()


# ---- the torch call ------------------------------------------------------------------------------------

def attention(q, k, v, layout, sm_scale, return_lse, plan, step, method, num_threads, strict, fallback=False,
              out_rows=None):
    """vcattn.attention for torch tensors (arguments already checked): the plan resolved to a
    permutation tensor, then the attention op (out_rows: see _attention_impl)."""
    q, k, v = q.detach(), k.detach(), v.detach()  # inference only: no backward through the op
    perm = v_smooth = head_exact = None
    if plan is not None and uses_vsmooth(method) and not (q.device.type != "cpu" and method not in GPU_METHODS):
        if isinstance(plan, (Plan, LayerRef)):
            code = _NO_STEP if step is None else _CACHE_STEP if is_cache_step(step) else step
            source, key = (plan.handle, "") if isinstance(plan, Plan) else (plan.cache, repr(plan.key))
            perm, v_smooth, head_exact = plan_op(q, k, v, source, key, code, layout, method, float(sm_scale))
        else:
            b, h, s = _bhs(v, layout)
            p = plan if _tensors.is_torch(plan) else torch.from_numpy(plan)
            if p.is_floating_point() or p.is_complex() or p.dtype == torch.bool or tuple(p.shape) != (b, h, s):
                raise ValueError(f"vcattn: a permutation plan must be an integer array of shape {(b, h, s)}, "
                                 f"got {p.dtype} {tuple(p.shape)}")
            perm = p.to(device=v.device, dtype=torch.int32).contiguous()
    out, lse = attention_op(q, k, v, perm, v_smooth, layout, float(sm_scale), method,
                            bool(return_lse), -1 if num_threads is None else int(num_threads), bool(strict),
                            bool(fallback), head_exact, -1 if out_rows is None else int(out_rows))
    return (out, lse) if return_lse else out
