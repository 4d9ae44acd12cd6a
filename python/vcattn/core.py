"""The public call: attention, reference_attention, metrics, merge, and PlanCache.

Every number comes from libvcattn; Python checks arguments, then hands the call to its
path: numpy to the CPU simulation (_cpu), torch tensors to the torch custom ops (_ops:
the CPU simulation or the Hopper kernel, traceable by torch.compile), and what neither
runs to the one fallback (_fallback).
"""
from __future__ import annotations

import ctypes
import math
import os

import numpy as np

from . import _cpu, _fallback, _lib, _tensors, masks
from ._lib import VcattnError, check, lib, warn_once
from ._methods import DEFAULT_METHOD, method_id
from .plan import (CACHE_STEP, GROUP, OFF, REUSE, LayerRef, Plan, Schedule, check_kmeans_args, check_permutation,
                   is_cache_step, literal_key, register)

__all__ = ["attention", "reference_attention", "fidelity", "expcast_facts", "merge_attention", "PlanCache"]


# ---- argument checks -----------------------------------------------------------------------------

def _check_threads(num_threads):
    """None (= $VCATTN_NUM_THREADS, read when the call runs) or an int in 0..MAX_THREADS."""
    if num_threads is None:
        env = os.environ.get("VCATTN_NUM_THREADS")
        if env is not None:
            try:
                n = int(env)
            except ValueError:
                n = None
            if n is None or not 0 <= n <= _lib.MAX_THREADS:
                raise ValueError(_lib.threads_error(env, "the environment variable VCATTN_NUM_THREADS") +
                                 "; unset it or pass num_threads=")
        return None
    if (isinstance(num_threads, bool) or not isinstance(num_threads, (int, np.integer))
            or not 0 <= num_threads <= _lib.MAX_THREADS):
        raise ValueError(_lib.threads_error(num_threads))
    return num_threads


def _check_return_lse(return_lse):
    # a real bool: "no" or "False" are truthy strings and would silently return (out, lse)
    if not isinstance(return_lse, (bool, np.bool_)):
        raise TypeError(f"vcattn: return_lse must be True or False, got {return_lse!r} "
                        f"({type(return_lse).__name__})")
    return bool(return_lse)


def _check_scale(sm_scale, head_dim):
    """The softmax scale every path below receives: sm_scale, or None -> 1/sqrt(head_dim), the
    same double C's default is (so passing it changes no bit)."""
    if sm_scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(sm_scale, bool) or not isinstance(sm_scale, (int, float, np.floating, np.integer)):
        raise TypeError(f"vcattn: sm_scale must be a float or None, got {type(sm_scale).__name__}")
    s = float(sm_scale)
    if not (math.isfinite(s) and s > 0):
        raise ValueError(f"vcattn: sm_scale must be finite and > 0 (None = 1/sqrt(head_dim)), got {sm_scale!r}")
    return s


def _check_qkv(q, k, v, layout, function="vcattn.attention"):
    """Shapes (B, H, Sq, Skv, D) after every Python-side check that needs no C."""
    _tensors.check_layout(layout)
    kind = _tensors.kind_of(q, k, v)
    (bq, hq, sq, dq) = _tensors.bhsd(q, layout, "q")
    (bk, hk, sk, dk) = _tensors.bhsd(k, layout, "k")
    (bv, hv, sv, dv) = _tensors.bhsd(v, layout, "v")
    if not (bq == bk == bv):
        raise ValueError(f"vcattn: batch sizes differ: q {bq}, k {bk}, v {bv}")
    if not (hq == hk == hv):
        raise ValueError(f"vcattn: head counts differ: q {hq}, k {hk}, v {hv} (no GQA: repeat K/V heads first)")
    if sk != sv:
        raise ValueError(f"vcattn: k and v have different sequence lengths ({sk} vs {sv})")
    if not (dq == dk == dv):
        raise ValueError(f"vcattn: head_dim differs: q {dq}, k {dk}, v {dv}")
    for x, n in ((q, "q"), (k, "k"), (v, "v")):
        _tensors.check_not_empty(x, layout, n, function)  # before the strides: an empty array's are all 0
    for x, n in ((q, "q"), (k, "k"), (v, "v")):
        _tensors.check_dtype(x, n)
        _tensors.check_last_dim(x, n)
    if kind == "torch":
        devs = {str(x.device) for x in (q, k, v)}
        if len(devs) > 1:
            raise ValueError(f"vcattn: q, k, v are on different devices: {sorted(devs)}")
    return kind, (bq, hq, sq, sk, dq)


def _check_plan_and_step(plan, step):
    if step is not None and not is_cache_step(step) and (
            isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0):
        raise ValueError(f"vcattn: step must be an int >= 0 or None, got {step!r}")
    if not (plan is None or isinstance(plan, (Plan, LayerRef, np.ndarray)) or _tensors.is_torch(plan)):
        raise TypeError(f"vcattn: plan must be None, a vcattn.Plan or a (B,H,Skv) int array, "
                        f"got {type(plan).__name__}")
    if plan is None and step is not None:
        raise ValueError("vcattn: step needs a plan (a vcattn.Plan, e.g. PlanCache.layer(id)); "
                         "without one every call groups")


def _explain(e: VcattnError, q, k, v, layout) -> VcattnError:
    """A NON_FINITE error that says which of q, k, v holds the NaN / Inf, and where (the
    library only knows that an input does); any other error as it is."""
    if e.status_name != "NON_FINITE":
        return e
    found = []
    for x, n in ((q, "q"), (k, "k"), (v, "v")):
        hit = _tensors.first_non_finite(x)
        if hit is not None:
            idx, val = hit
            found.append(f"{n} holds {val} at index {list(idx)}")
    if not found:
        return e
    axes = "(batch, head, token, dim)" if layout == "HND" else "(batch, token, head, dim)"
    detail = ("; ".join(found) + f" {axes}: every input must be finite - find the layer that produced it, "
              "or clean it first (torch.nan_to_num / np.nan_to_num)")
    return VcattnError(e.status, e.function, f"{e.detail}: {detail}" if e.detail else detail)


def _finish(out, lse, q, return_lse):
    """float32 numpy results in q's kind and dtype."""
    out = _tensors.like(out, q)
    if not return_lse:
        return out
    if _tensors.is_torch(q):
        import torch

        lse = torch.from_numpy(lse)
    return out, lse


# ---- the calls ------------------------------------------------------------------------------------

def attention(q, k, v, tensor_layout: str = "HND", sm_scale=None, return_lse: bool = False, plan=None, step=None,
              method: str = DEFAULT_METHOD, *, num_threads=None, strict: bool = False, attn_mask=None):
    """Attention through a VC-Attention method; CPU tensors run the method's CPU simulation.

    q: (B,H,Sq,D) for tensor_layout="HND", (B,Sq,H,D) for "NHD"; k, v with Skv tokens.
    D = 64 or 128.  numpy (float32, float16, ml_dtypes.bfloat16) or torch (float32, float16,
    bfloat16) - q, k, v may differ in dtype (fp32 q/k from RoPE with bf16 v is fine).
    Strided views are passed as they are when the last axis is contiguous.

    plan: V-Smooth methods only - None (k-means on this call's V), a ``vcattn.Plan``
    (reused; with ``step`` it follows its schedule), or a (B,H,Skv) int permutation.

    attn_mask: None, or a mask that keeps a prefix of each batch element (``vcattn.masks``):
    boolean (True = takes part) or additive (0 / -inf), broadcastable to (B, 1, Sq, Skv) -
    key padding, or HunyuanVideo's joint ``valid[i] & valid[j]``.  Each batch element then
    runs as the problem of its valid tokens (rows without a valid key: zeros, LSE -inf); a
    permutation plan's first ``kv_len`` entries must permute 0..kv_len-1.  Any other mask is
    a ValueError that says why (read on the host: not inside torch.compile).

    Returns the output in q's dtype and layout; with return_lse also the LSE, float32
    natural log, (B, H, Sq).  Errors: ValueError / TypeError for bad arguments,
    ``VcattnError`` for every status the library returns (NaN input: NON_FINITE).

    torch tensors go through the custom op ``torch.ops.vcattn.attention`` (torch.compile
    traces it without a graph break).  CUDA tensors run the Hopper kernel for the GPU
    methods; other calls fall back to torch SDPA with one warning (``strict=True`` raises
    VcattnError instead).
    """
    return call(q, k, v, tensor_layout, sm_scale, return_lse, plan, step, method, num_threads, strict,
                attn_mask=attn_mask)


def call(q, k, v, layout, sm_scale, return_lse, plan, step, method, num_threads, strict, fallback=False,
         attn_mask=None, out_rows=None):
    """``attention`` with one more switch for the integrations: ``fallback=True`` answers a
    library error (NaN input, ...) with exact attention and one warning instead of raising.
    out_rows (torch tensors, no mask): the output has that many query rows, q's and then zeros."""
    method_id(method)
    _check_plan_and_step(plan, step)
    threads = _check_threads(num_threads)
    return_lse = _check_return_lse(return_lse)
    kind, (b, h, sq, skv, d) = _check_qkv(q, k, v, layout)
    scale = _check_scale(sm_scale, d)  # resolved once: the paths below take this float
    if attn_mask is not None:
        lens = masks.lengths(attn_mask, b, h, sq, skv)
        if isinstance(lens, str):
            raise ValueError(f"vcattn: {lens}")
        if not lens.full(sq, skv):
            return _call_lengths(q, k, v, layout, scale, return_lse, plan, step, method, num_threads, strict,
                                 fallback, lens)
    if isinstance(plan, np.ndarray) or _tensors.is_torch(plan):
        check_permutation(plan, (b, h, skv))
    if kind == "torch":
        from . import _ops  # torch is imported only once torch tensors show up

        if _tensors.compiling():
            return _ops.attention(q, k, v, layout, scale, return_lse, plan, step, method, threads, strict,
                                  fallback, out_rows)
        try:
            return _ops.attention(q, k, v, layout, scale, return_lse, plan, step, method, threads, strict,
                                  fallback, out_rows)
        except VcattnError as e:
            raise _explain(e, q, k, v, layout) from None
    if isinstance(plan, LayerRef):
        plan = plan.plan()
    try:
        out, lse = _cpu.simulate(q, k, v, layout, scale, return_lse, _cpu.threads(threads), method, plan, step)
    except VcattnError as e:
        e = _explain(e, q, k, v, layout)
        if not fallback:
            raise e from None
        warn_once(("error", e.status_name), f"vcattn: {e}; such calls use exact attention instead")
        return _fallback.attention(q, k, v, layout, scale, return_lse)
    return _finish(out, lse, q, return_lse)


def _call_lengths(q, k, v, layout, sm_scale, return_lse, plan, step, method, num_threads, strict, fallback, lens):
    """``call`` with per-batch valid lengths: each run of batch elements that share their lengths
    is the call on their valid tokens (views, no copy); the other rows are zeros, their LSE -inf.
    torch tensors whose elements all share their lengths are one call written into the padded
    output; otherwise each run's output is copied into it.
    With ragged lengths each element has its own plan (``Plan.part``)."""
    bsz = q.shape[0]
    sq = q.shape[2 if layout == "HND" else 1]
    def tokens(x, b0, b1, sel):  # batch elements b0..b1-1, their tokens sel (a slice)
        return x[b0:b1, :, sel] if layout == "HND" else x[b0:b1, sel]

    runs, b0 = [], 0
    for b1 in range(1, bsz + 1):
        if b1 == bsz or (lens.q_len(b1, sq), lens.kv[b1]) != (lens.q_len(b0, sq), lens.kv[b0]):
            runs.append((b0, b1, lens.q_len(b0, sq), lens.kv[b0]))
            b0 = b1
    if len(runs) == 1 and runs[0][2] > 0 and runs[0][3] > 0 and _tensors.is_torch(q):
        # every element the same lengths (HunyuanVideo's batch of one): the op writes the valid rows
        # into the padded output itself - no second output and no copy of it
        _, _, lq, lk = runs[0]
        sub_plan = plan if plan is None or isinstance(plan, (Plan, LayerRef)) else plan[:, :, :lk]
        return call(tokens(q, 0, bsz, slice(lq)), tokens(k, 0, bsz, slice(lk)), tokens(v, 0, bsz, slice(lk)),
                    layout, sm_scale, return_lse, sub_plan, step, method, num_threads, strict, fallback,
                    out_rows=sq)
    if _tensors.is_torch(q):
        import torch

        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        lse = torch.full((bsz, q.shape[1 if layout == "HND" else 2], sq), float("-inf"), dtype=torch.float32,
                         device=q.device)
    else:
        out = np.empty(q.shape, q.dtype)
        lse = np.full((bsz, q.shape[1 if layout == "HND" else 2], sq), -np.inf, np.float32)
    for b0, b1, lq, lk in runs:
        if lk == 0:
            lq = 0  # no key to attend to: every row zeros
        tokens(out, b0, b1, slice(lq, None))[...] = 0  # the valid rows are written once, by the copy
        if lq == 0:
            continue
        sub_plan = plan
        if len(runs) > 1 and isinstance(plan, (Plan, LayerRef)):
            sub_plan = plan.part(b0)
        elif plan is not None and not isinstance(plan, (Plan, LayerRef)):
            sub_plan = plan[b0:b1, :, :lk]
        res = call(tokens(q, b0, b1, slice(lq)), tokens(k, b0, b1, slice(lk)), tokens(v, b0, b1, slice(lk)),
                   layout, sm_scale, return_lse, sub_plan, step, method, num_threads, strict, fallback)
        o, l = res if return_lse else (res, None)
        tokens(out, b0, b1, slice(lq))[...] = o
        if l is not None:
            lse[b0:b1, :, :lq] = l
    return (out, lse) if return_lse else out


def reference_attention(q, k, v, tensor_layout: str = "HND", sm_scale=None, return_lse: bool = False, *,
                        num_threads=None):
    """Exact attention (FP64 scores, softmax and sums; vcattn_reference_attention), on the CPU.

    Same arguments and results as ``attention`` minus method / plan; torch CUDA tensors are
    copied to the CPU and the result copied back."""
    threads = _cpu.threads(_check_threads(num_threads))
    return_lse = _check_return_lse(return_lse)
    kind, (_, _, _, _, d) = _check_qkv(q, k, v, tensor_layout, "vcattn.reference_attention")
    scale = _check_scale(sm_scale, d)
    dev = None
    if kind == "torch" and q.device.type != "cpu":
        dev = q.device
        q, k, v = q.cpu(), k.cpu(), v.cpu()
    try:
        out, lse = _cpu.reference(q, k, v, tensor_layout, scale, return_lse, threads)
    except VcattnError as e:
        raise _explain(e, q, k, v, tensor_layout) from None
    res = _finish(out, lse, q, return_lse)
    if dev is not None:
        res = tuple(r.to(dev) for r in res) if return_lse else res.to(dev)
    return res


# ---- metrics --------------------------------------------------------------------------------

def fidelity(ref, out) -> dict:
    """rel_l2, cosine, psnr_db (20 log10(max|ref| / RMSE)) and max_abs_error of out vs ref."""
    r = _tensors.to_numpy_f32(ref, "ref")
    o = _tensors.to_numpy_f32(out, "out")
    if r.shape != o.shape:
        raise ValueError(f"vcattn.fidelity: shapes differ: ref {r.shape}, out {o.shape}")
    if r.size == 0:
        raise ValueError("vcattn.fidelity: empty tensors")
    f = _lib.Fidelity()
    check(lib.vcattn_fidelity_compare(r.ctypes.data, o.ctypes.data, r.size, ctypes.byref(f)),
          "vcattn_fidelity_compare")
    return dict(rel_l2=f.rel_l2, cosine=f.cosine, psnr_db=f.psnr_db, max_abs_error=f.max_abs_error)


def expcast_facts(samples_per_doubling: int = 100_000) -> dict:
    """The ExpCast facts measured on the shared numerics (vcattn_expcast_measure)."""
    if isinstance(samples_per_doubling, bool) or not isinstance(samples_per_doubling, (int, np.integer)):
        raise TypeError("vcattn.expcast_facts: samples_per_doubling must be an int")
    if samples_per_doubling < 16:
        raise ValueError("vcattn.expcast_facts: samples_per_doubling must be >= 16")
    f = _lib.ExpcastFacts()
    check(lib.vcattn_expcast_measure(int(samples_per_doubling), ctypes.byref(f)), "vcattn_expcast_measure")
    return dict(agree_share=f.agree_share, max_code_diff=f.max_code_diff, ratio_min=f.ratio_min,
                ratio_max=f.ratio_max, row_tv_bound=f.row_tv_bound, beta=f.beta)


# ---- merge ---------------------------------------------------------------------------------------

def merge_attention(out1, lse1, out2, lse2, tensor_layout: str = "HND"):
    """Combine two partial attentions over disjoint key sets: (out, lse).

    lse = log(exp(lse1) + exp(lse2)); out = out1 exp(lse1 - lse) + out2 exp(lse2 - lse).
    A row with both LSEs -inf (no keys on either side) gets out 0 and lse -inf.
    out*: (B,H,S,D) or (B,S,H,D) per tensor_layout; lse*: (B,H,S) natural log.  numpy or
    torch; the output keeps out1's dtype, the LSE is float32 (float64 for float64 inputs).
    """
    _tensors.check_layout(tensor_layout)
    kind = _tensors.kind_of(out1, lse1, out2, lse2, names=("out1", "lse1", "out2", "lse2"))
    if tuple(out1.shape) != tuple(out2.shape):
        raise ValueError(f"vcattn.merge_attention: out1 {tuple(out1.shape)} and out2 {tuple(out2.shape)} differ")
    b, h, s, _ = _tensors.bhsd(out1, tensor_layout, "out1")
    for lse, n in ((lse1, "lse1"), (lse2, "lse2")):
        if tuple(lse.shape) != (b, h, s):
            raise ValueError(f"vcattn.merge_attention: {n} must be (B,H,S) = {(b, h, s)}, got {tuple(lse.shape)}")
    if kind == "numpy":
        wide = np.float64 if np.float64 in (out1.dtype, lse1.dtype, out2.dtype, lse2.dtype) else np.float32
        l1, l2 = lse1.astype(wide), lse2.astype(wide)
        m = np.maximum(l1, l2)
        m = np.where(np.isneginf(m), 0.0, m)
        w1, w2 = np.exp(l1 - m), np.exp(l2 - m)
        tot = w1 + w2
        with np.errstate(divide="ignore"):
            lse = m + np.log(tot)  # both -inf (no keys on either side): -inf
        tot = np.where(tot > 0, tot, 1.0)  # ... and the output 0, not 0/0
        a1, a2 = w1 / tot, w2 / tot
        if tensor_layout == "NHD":
            a1, a2 = a1.transpose(0, 2, 1), a2.transpose(0, 2, 1)
        out = out1.astype(wide) * a1[..., None] + out2.astype(wide) * a2[..., None]
        return out.astype(out1.dtype), lse.astype(wide)
    import torch

    wide = torch.float64 if torch.float64 in (out1.dtype, lse1.dtype, out2.dtype, lse2.dtype) else torch.float32
    l1, l2 = lse1.to(wide), lse2.to(wide)
    m = torch.maximum(l1, l2)
    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    w1, w2 = torch.exp(l1 - m), torch.exp(l2 - m)
    tot = w1 + w2
    lse = m + torch.log(tot)  # both -inf (no keys on either side): -inf
    tot = torch.where(tot > 0, tot, torch.ones_like(tot))  # ... and the output 0, not 0/0
    a1, a2 = w1 / tot, w2 / tot
    if tensor_layout == "NHD":
        a1, a2 = a1.transpose(1, 2), a2.transpose(1, 2)
    out = out1.to(wide) * a1.unsqueeze(-1) + out2.to(wide) * a2.unsqueeze(-1)
    return out.to(out1.dtype), lse


# ---- plan cache -----------------------------------------------------------------------------------

class PlanCache:
    """Plans keyed by layer id, all following one Schedule and one step index.

    >>> cache = PlanCache(Schedule(40))
    >>> for step in range(40):
    ...     cache.set_step(step)
    ...     out = cache.attention("block0.attn1", q, k, v)   # or attention(..., plan=cache.layer(id), step=step)

    Without a schedule every layer groups on first use and reuses that plan afterwards.
    """

    def __init__(self, schedule: Schedule | None = None, *, clusters: int = 64, iterations: int = 8, seed: int = 0,
                 warm_start: bool = True, num_threads: int = 0):
        if schedule is not None and not isinstance(schedule, Schedule):
            raise TypeError("vcattn.PlanCache: schedule must be a vcattn.Schedule or None")
        check_kmeans_args(clusters, iterations, num_threads)
        self.schedule = schedule
        self.kmeans = dict(clusters=clusters, iterations=iterations, seed=seed, warm_start=warm_start,
                           num_threads=num_threads)
        self.step = None
        self._plans = {}
        self.handle = register(self)  # names the cache in torch custom-op calls

    def __setstate__(self, state):
        # an unpickled or deep-copied cache is another cache: it gets its own handle
        self.__dict__.update(state)
        self.handle = register(self)

    def set_step(self, step) -> None:
        if step is not None and self.schedule is not None:
            self.schedule._check(step)
        self.step = step

    def layer(self, layer_id) -> Plan:
        """The Plan of this layer (created empty on first use)."""
        plan = self._plans.get(layer_id)
        if plan is None:
            plan = Plan(schedule=self.schedule, name=layer_id, **self.kmeans)
            plan.cache = self
            self._plans[layer_id] = plan
        return plan

    __getitem__ = layer

    def __contains__(self, layer_id):
        return layer_id in self._plans

    def __len__(self):
        return len(self._plans)

    def keys(self):
        return self._plans.keys()

    def items(self):
        return self._plans.items()

    def clear(self) -> None:
        """Forget every plan (a new video: the next step groups cold)."""
        self._plans.clear()
        self.step = None

    def attention(self, layer_id, q, k, v, step=None, **kwargs):
        """vcattn.attention with this layer's plan and the cache's step (or ``step``)."""
        return attention(q, k, v, plan=self.layer_ref(layer_id), step=CACHE_STEP if step is None else step, **kwargs)

    def layer_ref(self, layer_id):
        """What a call passes as this layer's plan: a LayerRef (the Plan is found when the call
        runs: nothing for torch.compile to trace) when the key allows it, else the Plan."""
        return LayerRef(self.handle, layer_id) if literal_key(layer_id) else self.layer(layer_id)

    def grouped_steps(self) -> list:
        """Sorted steps on which at least one layer grouped."""
        return sorted({s for p in self._plans.values() for s, a in p.history if a == GROUP and s is not None})

    def summary(self) -> dict:
        """{step: {'group': n, 'reuse': n, 'off': n}} over all layers."""
        out = {}
        for p in self._plans.values():
            for s, a in p.history:
                d = out.setdefault(s, {GROUP: 0, REUSE: 0, OFF: 0})
                d[a] += 1
        return dict(sorted(out.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)))

    def __repr__(self):
        return f"PlanCache({len(self)} layers, step={self.step}, schedule={self.schedule!r})"
