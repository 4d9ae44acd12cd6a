"""The calls: attention (a method's CPU simulation), the FP64 reference, metrics, merge.

Every number comes from libvcattn; Python checks arguments, describes the caller's
memory to C (pointers + element strides), and converts dtypes.
"""
from __future__ import annotations

import ctypes
import math
import os
import warnings

import numpy as np

from . import _lib, _tensors
from ._lib import VcattnError, check, lib
from .plan import DEFAULT_KMEANS, Plan, _kmeans

__all__ = ["attention", "reference_attention", "fidelity", "expcast_facts", "methods",
           "method_config", "merge_attention", "DEFAULT_METHOD"]

DEFAULT_METHOD = "vsmooth-expcast-8bit"
_METHOD_COUNT = 7  # VCATTN_METHOD_COUNT; methods() asks the library and stops at the first NULL name

_QK_FORMATS = ("fp32", "int8", "e4m3", "nvfp4")
_QK_GRAN = ("block", "thread")
_V_FORMATS = ("fp32", "e4m3_per_block", "e4m3_per_channel", "nvfp4")
_P_FORMATS = ("fp32", "e4m3", "expcast", "nvfp4")


# ---- methods -------------------------------------------------------------------------------

def methods() -> list:
    """Names of the methods the library simulates, e.g. ['fp8-naive', 'sage2-8bit', ...]."""
    names = []
    i = 0
    while True:
        n = lib.vcattn_method_name(i)
        if n is None:
            break
        names.append(n.decode())
        i += 1
    return names


def _method_id(method) -> int:
    if not isinstance(method, str):
        raise TypeError(f"vcattn: method must be a str, got {type(method).__name__}")
    mid = ctypes.c_int()
    if lib.vcattn_method_from_name(method.encode(), ctypes.byref(mid)) != 0:
        raise ValueError(f"vcattn: unknown method {method!r}; known: {', '.join(methods())}")
    return mid.value


def _config(method) -> _lib.MethodConfig:
    cfg = _lib.MethodConfig()
    check(lib.vcattn_method_config_get(_method_id(method), ctypes.byref(cfg)), "vcattn_method_config_get")
    return cfg


def method_config(method: str) -> dict:
    """The flag set of a method (vcattn_method_config), as a dict of readable values."""
    c = _config(method)
    return dict(qk_format=_QK_FORMATS[c.qk_format], qk_granularity=_QK_GRAN[c.qk_granularity],
                smooth_k=bool(c.smooth_k), smooth_q=bool(c.smooth_q), v_format=_V_FORMATS[c.v_format],
                v_smooth=bool(c.v_smooth), p_format=_P_FORMATS[c.p_format],
                rowsum_from_quantized_p=bool(c.rowsum_from_quantized_p))


# ---- argument checks -----------------------------------------------------------------------------

def _default_threads(num_threads):
    if num_threads is None:
        env = os.environ.get("VCATTN_NUM_THREADS", "0")
        try:
            num_threads = int(env)
        except ValueError:
            raise ValueError(f"vcattn: VCATTN_NUM_THREADS must be an int, got {env!r}")
    if isinstance(num_threads, bool) or not isinstance(num_threads, (int, np.integer)) or num_threads < 0:
        raise ValueError(f"vcattn: num_threads must be an int >= 0 (0 = all cores), got {num_threads!r}")
    return int(num_threads)


def _check_scale(sm_scale):
    if sm_scale is None:
        return 0.0  # C: <= 0 means 1/sqrt(head_dim)
    if isinstance(sm_scale, bool) or not isinstance(sm_scale, (int, float, np.floating, np.integer)):
        raise TypeError(f"vcattn: sm_scale must be a float or None, got {type(sm_scale).__name__}")
    s = float(sm_scale)
    if not (math.isfinite(s) and s > 0):
        raise ValueError(f"vcattn: sm_scale must be finite and > 0 (None = 1/sqrt(head_dim)), got {sm_scale!r}")
    return s


def _check_qkv(q, k, v, layout):
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
        _tensors.check_dtype(x, n)
        _tensors.check_last_dim(x, n)
    if kind == "torch":
        devs = {str(x.device) for x in (q, k, v)}
        if len(devs) > 1:
            raise ValueError(f"vcattn: q, k, v are on different devices: {sorted(devs)}")
    return kind, (bq, hq, sq, sk, dq)


def _is_cuda(x) -> bool:
    return _tensors.is_torch(x) and x.device.type != "cpu"


# ---- the C call ---------------------------------------------------------------------------------

class _Problem:
    """Operands, outputs and the filled vcattn_attention_params of one call."""

    def __init__(self, q, k, v, layout, sm_scale, return_lse, num_threads):
        self.q = _tensors.as_operand(q, layout)
        self.k = _tensors.as_operand(k, layout)
        self.v = _tensors.as_operand(v, layout)
        b, h, sq, d = self.q.shape
        skv = self.k.shape[2]
        self.out = _tensors.empty_out(b, h, sq, d, layout)
        o_op = _tensors.Operand(self.out, layout)
        self.lse = np.empty((b, h, sq), np.float32) if return_lse else None
        p = _lib.AttentionParams()
        lib.vcattn_attention_params_init(ctypes.byref(p), b, h, sq, skv, d, self.q.ptr, self.k.ptr, self.v.ptr,
                                         o_op.ptr)
        p.q_stride[:] = self.q.strides
        p.k_stride[:] = self.k.strides
        p.v_stride[:] = self.v.strides
        p.o_stride[:] = o_op.strides
        p.lse = None if self.lse is None else self.lse.ctypes.data
        p.softmax_scale = sm_scale
        p.num_threads = num_threads
        self.params = p
        # Shapes, strides, head_dim: rejected here, before any planning work.
        check(lib.vcattn_attention_params_validate(ctypes.byref(p)), "vcattn_attention_params_validate")


def _finish(prob: _Problem, q, return_lse):
    out = _tensors.like(prob.out, q)
    if not return_lse:
        return out
    lse = prob.lse
    if _tensors.is_torch(q):
        import torch

        lse = torch.from_numpy(lse)
    return out, lse


def _resolve_perm(plan, step, prob: _Problem, num_threads):
    """The (B,H,Skv) int32 permutation for a V-Smooth method, or None for 'V-Smooth off'."""
    if plan is None:
        perm, _ = _kmeans(prob.v, DEFAULT_KMEANS["clusters"], DEFAULT_KMEANS["iterations"], DEFAULT_KMEANS["seed"],
                          None, num_threads)
        return perm
    if isinstance(plan, Plan):
        return plan.resolve(prob.v, step)
    return _fixed_perm(plan, prob.params.batch, prob.params.heads, prob.params.seq_kv)


def _fixed_perm(plan, b, h, skv):
    p = plan if isinstance(plan, np.ndarray) else plan.detach().cpu().numpy()
    if not np.issubdtype(p.dtype, np.integer) or p.shape != (b, h, skv):
        raise ValueError(f"vcattn: a permutation plan must be an integer array of shape {(b, h, skv)}, "
                         f"got {p.dtype} {p.shape}")
    return np.ascontiguousarray(p, dtype=np.int32)


def _check_plan_and_step(plan, step):
    if step is not None and (isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0):
        raise ValueError(f"vcattn: step must be an int >= 0 or None, got {step!r}")
    if not (plan is None or isinstance(plan, (Plan, np.ndarray)) or _tensors.is_torch(plan)):
        raise TypeError(f"vcattn: plan must be None, a vcattn.Plan or a (B,H,Skv) int array, "
                        f"got {type(plan).__name__}")
    if plan is None and step is not None:
        raise ValueError("vcattn: step needs a plan (a vcattn.Plan, e.g. PlanCache.layer(id)); "
                         "without one every call groups")


def attention(q, k, v, tensor_layout: str = "HND", sm_scale=None, return_lse: bool = False, plan=None, step=None,
              method: str = DEFAULT_METHOD, *, num_threads=None, strict: bool = False):
    """Attention through a VC-Attention method; CPU tensors run the method's CPU simulation.

    q: (B,H,Sq,D) for tensor_layout="HND", (B,Sq,H,D) for "NHD"; k, v with Skv tokens.
    D = 64 or 128.  numpy (float32, float16, ml_dtypes.bfloat16) or torch (float32, float16,
    bfloat16) - q, k, v may differ in dtype (fp32 q/k from RoPE with bf16 v is fine).
    Strided views are passed as they are when the last axis is contiguous.

    plan: V-Smooth methods only - None (k-means on this call's V), a ``vcattn.Plan``
    (reused; with ``step`` it follows its schedule), or a (B,H,Skv) int permutation.

    Returns the output in q's dtype and layout; with return_lse also the LSE, float32
    natural log, (B, H, Sq).  Errors: ValueError / TypeError for bad arguments,
    ``VcattnError`` for every status the library returns (NaN input: NON_FINITE).

    CUDA tensors: not routed to the GPU kernel by this version; they fall back to
    torch SDPA with one warning (``strict=True`` raises VcattnError instead).
    """
    mid = _method_id(method)
    _check_plan_and_step(plan, step)
    scale = _check_scale(sm_scale)
    threads = _default_threads(num_threads)
    kind, _ = _check_qkv(q, k, v, tensor_layout)
    if kind == "torch" and _is_cuda(q):
        return _cuda_attention(q, k, v, tensor_layout, sm_scale, return_lse, method, strict, plan, step)
    prob = _Problem(q, k, v, tensor_layout, scale, return_lse, threads)
    cfg = _lib.MethodConfig()
    check(lib.vcattn_method_config_get(mid, ctypes.byref(cfg)), "vcattn_method_config_get")
    perm = None
    if cfg.v_smooth:
        perm = _resolve_perm(plan, step, prob, threads)
        if perm is None:
            cfg.v_smooth = 0  # the schedule turned V-Smooth off for this step
    st = lib.vcattn_simulate_attention(ctypes.byref(prob.params), ctypes.byref(cfg),
                                       None if perm is None else perm.ctypes.data, None)
    check(st, "vcattn_simulate_attention", f"method {method}")
    return _finish(prob, q, return_lse)


def reference_attention(q, k, v, tensor_layout: str = "HND", sm_scale=None, return_lse: bool = False, *,
                        num_threads=None):
    """Exact attention (FP64 scores, softmax and sums; vcattn_reference_attention), on the CPU.

    Same arguments and results as ``attention`` minus method / plan; torch CUDA tensors are
    copied to the CPU and the result copied back."""
    scale = _check_scale(sm_scale)
    threads = _default_threads(num_threads)
    kind, _ = _check_qkv(q, k, v, tensor_layout)
    dev = None
    if kind == "torch" and _is_cuda(q):
        dev = q.device
        q, k, v = q.cpu(), k.cpu(), v.cpu()
    prob = _Problem(q, k, v, tensor_layout, scale, return_lse, threads)
    check(lib.vcattn_reference_attention(ctypes.byref(prob.params)), "vcattn_reference_attention")
    res = _finish(prob, q, return_lse)
    if dev is not None:
        res = tuple(r.to(dev) for r in res) if return_lse else res.to(dev)
    return res


# ---- CUDA tensors ---------------------------------------------------------------------------------

_warned = set()


def warn_once(key, message):
    """One warning per distinct reason per process."""
    if key in _warned:
        return
    _warned.add(key)
    warnings.warn(message, RuntimeWarning, stacklevel=3)


def _cuda_attention(q, k, v, layout, sm_scale, return_lse, method, strict, plan=None, step=None):
    """CUDA tensors: the Hopper kernel (vcattn_gpu_attention) on the current stream; what it
    does not cover falls back to torch SDPA with one warning (strict=True raises instead)."""
    from . import _gpu

    try:
        return _gpu.attention(q, k, v, layout, sm_scale, return_lse, method, plan, step)
    except _gpu.Unsupported as e:
        why = str(e)
    if strict:
        raise VcattnError(_lib.STATUS["NOT_BUILT"], "vcattn.attention", why)
    warn_once(("cuda", why), f"vcattn: {why}; falling back to torch SDPA (BF16/FP16, exact softmax)")
    return sdpa_with_lse(q, k, v, layout, sm_scale, return_lse)


# torch's own SDPA, recorded by the first patch_sdpa, so that a fallback taken inside a
# patched block never goes through the patch again.
_torch_sdpa = None


def sdpa_with_lse(q, k, v, layout, sm_scale, return_lse):
    """torch SDPA in vcattn's calling convention; the LSE (if asked) in float32 chunks."""
    import torch

    f = _torch_sdpa or torch.nn.functional.scaled_dot_product_attention
    if layout == "NHD":
        q, k, v = (x.transpose(1, 2) for x in (q, k, v))
    qq = q.to(v.dtype) if q.dtype != v.dtype else q
    kk = k.to(v.dtype) if k.dtype != v.dtype else k
    out = f(qq, kk, v, scale=sm_scale).to(q.dtype)
    if layout == "NHD":
        out = out.transpose(1, 2)
    if not return_lse:
        return out
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    kf = k.float()
    for i in range(0, q.shape[2], 1024):
        s = torch.matmul(q[:, :, i:i + 1024].float(), kf.transpose(-1, -2)) * scale
        lse[:, :, i:i + 1024] = torch.logsumexp(s, dim=-1)
    return out, lse


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
        lse = m + np.log(tot)
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
    lse = m + torch.log(tot)
    a1, a2 = w1 / tot, w2 / tot
    if tensor_layout == "NHD":
        a1, a2 = a1.transpose(1, 2), a2.transpose(1, 2)
    out = out1.to(wide) * a1.unsqueeze(-1) + out2.to(wide) * a2.unsqueeze(-1)
    return out.to(out1.dtype), lse
