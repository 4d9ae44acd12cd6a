"""The CPU path: a method's simulation (vcattn_simulate_attention) and the FP64 reference.

Takes numpy arrays or CPU torch tensors (viewed as numpy, no copy for float32) and
returns float32 numpy results; the callers convert them to the caller's kind and dtype.
"""
from __future__ import annotations

import ctypes
import os

import numpy as np

from . import _lib, _tensors, head_policy
from ._lib import check, lib
from ._methods import config, method_id
from .plan import DEFAULT_KMEANS, Plan, cpu_kmeans

__all__ = ["Problem", "simulate", "reference", "threads", "fixed_perm", "strided_rows", "reference_rows",
           "simulate_rows", "plan_heads", "measure_recipes"]


def threads(num_threads):
    """num_threads, None = $VCATTN_NUM_THREADS (0 = all cores)."""
    if num_threads is None:
        env = os.environ.get("VCATTN_NUM_THREADS", "0")
        try:
            num_threads = int(env)
        except ValueError:
            raise ValueError(f"vcattn: VCATTN_NUM_THREADS must be an int, got {env!r}")
    if isinstance(num_threads, bool) or not isinstance(num_threads, (int, np.integer)) or num_threads < 0:
        raise ValueError(f"vcattn: num_threads must be an int >= 0 (0 = all cores), got {num_threads!r}")
    return int(num_threads)


class Problem:
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


def fixed_perm(perm, b, h, skv) -> np.ndarray:
    """A caller's (B,H,Skv) integer permutation as C-contiguous int32 numpy."""
    p = perm if isinstance(perm, np.ndarray) else perm.detach().cpu().numpy()
    if not np.issubdtype(p.dtype, np.integer) or p.shape != (b, h, skv):
        raise ValueError(f"vcattn: a permutation plan must be an integer array of shape {(b, h, skv)}, "
                         f"got {p.dtype} {p.shape}")
    return np.ascontiguousarray(p, dtype=np.int32)


def _perm(plan, step, prob: Problem, num_threads):
    """The (B,H,Skv) int32 permutation for a V-Smooth method, or None for 'V-Smooth off'."""
    if plan is None:
        return cpu_kmeans(prob.v, DEFAULT_KMEANS["clusters"], DEFAULT_KMEANS["iterations"], DEFAULT_KMEANS["seed"],
                          None, num_threads)[0]
    if isinstance(plan, Plan):
        return plan.resolve(prob.v.shape, step, plan.cpu_grouping(prob.v))
    return fixed_perm(plan, prob.params.batch, prob.params.heads, prob.params.seq_kv)


def simulate(q, k, v, layout, sm_scale, return_lse, num_threads, method, plan=None, step=None, v_smooth=True,
             head_exact=None):
    """(out, lse or None) of the method's CPU simulation.  plan: None (k-means on this V), a
    Plan (with its head recipes), or a (B,H,Skv) permutation; v_smooth=False runs the method
    without V-Smooth; head_exact: (B, H) flags of the heads whose P is the exact exponential."""
    prob = Problem(q, k, v, layout, sm_scale, return_lse, num_threads)
    cfg = config(method)
    perm = None
    if cfg.v_smooth:
        perm = _perm(plan, step, prob, num_threads) if v_smooth else None
        if perm is None:
            cfg.v_smooth = 0  # the schedule turned V-Smooth off for this step
        elif isinstance(plan, Plan):
            def run(qq, kk, vv, lay, pm, rows):
                sub = prob if qq is q else Problem(qq, kk, vv, lay, sm_scale, False, num_threads)
                return measure_recipes(sub.params, method, pm, sub.q.shape[2], rows)

            perm, head_exact = plan.apply_recipes(perm, method, _tensors.heads_measure(q, k, v, layout, run),
                                                  prob.q.shape[2])
    exact = None
    if cfg.v_smooth and head_exact is not None:
        exact = np.ascontiguousarray(head_exact, dtype=np.uint8)
    st = lib.vcattn_simulate_attention_heads(ctypes.byref(prob.params), ctypes.byref(cfg),
                                             None if perm is None else perm.ctypes.data,
                                             None if exact is None else exact.ctypes.data, None, 0, None)
    check(st, "vcattn_simulate_attention_heads", f"method {method}")
    return prob.out, prob.lse


def reference(q, k, v, layout, sm_scale, return_lse, num_threads):
    """(out, lse or None) of vcattn_reference_attention (FP64)."""
    prob = Problem(q, k, v, layout, sm_scale, return_lse, num_threads)
    check(lib.vcattn_reference_attention(ctypes.byref(prob.params)), "vcattn_reference_attention")
    return prob.out, prob.lse


# ---- sampled query rows (vcattn_*_rows: each listed row exact over all keys) ----------------

def _i64p(a: np.ndarray):
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))


def strided_rows(seq_q: int, n_rows: int) -> np.ndarray:
    """rows[i] = floor(i * seq_q / n_rows), int64 (vcattn_strided_rows)."""
    rows = np.empty(int(n_rows), np.int64)
    check(lib.vcattn_strided_rows(int(seq_q), int(n_rows), _i64p(rows)), "vcattn_strided_rows")
    return rows

def _rows_params(q, k, v, n_rows, sm_scale, num_threads):
    """float32 operands of (B, H, S, D) views and a compact (B, H, n_rows, D) output."""
    qo, ko, vo = (_tensors.as_operand(x, "HND") for x in (q, k, v))
    b, h, sq, d = qo.shape
    skv = ko.shape[2]
    out = np.empty((b, h, n_rows, d), np.float32)
    p = _lib.AttentionParams()
    lib.vcattn_attention_params_init(ctypes.byref(p), b, h, sq, skv, d, qo.ptr, ko.ptr, vo.ptr, out.ctypes.data)
    p.q_stride[:] = qo.strides
    p.k_stride[:] = ko.strides
    p.v_stride[:] = vo.strides
    p.o_stride[:] = (h * n_rows * d, n_rows * d, d)
    p.softmax_scale = sm_scale
    p.num_threads = num_threads
    return p, out, (qo, ko, vo)


def reference_rows(q, k, v, rows: np.ndarray, sm_scale: float, num_threads: int) -> np.ndarray:
    """(B, H, len(rows), D) float32: the FP64 reference of the listed query rows."""
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    p, out, keep = _rows_params(q, k, v, len(rows), sm_scale, num_threads)
    check(lib.vcattn_reference_attention_rows(ctypes.byref(p), _i64p(rows), len(rows)),
          "vcattn_reference_attention_rows")
    del keep
    return out


def simulate_rows(q, k, v, rows: np.ndarray, sm_scale: float, num_threads: int, method: str, perm=None,
                  tv_row_stride: int = 16):
    """(out, pq_v, row_tv) of the method's simulation on the listed query rows: out and pq_v
    (B, H, n, D) float32, row_tv (B, H, ceil(n / tv_row_stride)) float64.  perm: (B, H, Skv)
    int32 for a V-Smooth method (None: sequence order)."""
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    n = len(rows)
    p, out, keep = _rows_params(q, k, v, n, sm_scale, num_threads)
    cfg = config(method)
    if perm is not None:
        perm = np.ascontiguousarray(perm, dtype=np.int32)
    pqv = np.empty_like(out)
    tv = np.empty((out.shape[0], out.shape[1], -(-n // tv_row_stride)), np.float64)
    extra = _lib.SimOutputs(pqv.ctypes.data, tv.ctypes.data, tv_row_stride, None)
    st = lib.vcattn_simulate_attention_rows(ctypes.byref(p), ctypes.byref(cfg),
                                            None if perm is None else perm.ctypes.data, _i64p(rows), n,
                                            ctypes.byref(extra))
    check(st, "vcattn_simulate_attention_rows", f"method {method}")
    del keep
    return out, pqv, tv


def plan_heads(v, first_head: int, num_threads: int, clusters=None, iterations=None, seed=None) -> np.ndarray:
    """(B, H, Skv) int32 k-means permutation of a (B, H, Skv, D) view starting at head
    first_head of a larger tensor: each head's plan of a whole-tensor call
    (vcattn_vsmooth_plan_heads; defaults: vcattn_kmeans_params_init)."""
    vo = _tensors.as_operand(v, "HND")
    b, h, s, d = vo.shape
    params = _lib.KmeansParams()
    lib.vcattn_kmeans_params_init(ctypes.byref(params))
    if clusters is not None:
        params.clusters = int(clusters)
    if iterations is not None:
        params.iterations = int(iterations)
    if seed is not None:
        params.seed = int(seed) & 0xFFFFFFFFFFFFFFFF
    params.num_threads = int(num_threads)
    perm = np.empty((b, h, s), np.int32)
    strides = (ctypes.c_int64 * 3)(*vo.strides)
    check(lib.vcattn_vsmooth_plan_heads(vo.ptr, b, h, int(first_head), s, d, strides, ctypes.byref(params),
                                        perm.ctypes.data, None, None), "vcattn_vsmooth_plan_heads")
    return perm


def measure_recipes(problem_params, method: str, perm: np.ndarray, seq_q: int, rows: int):
    """psnr (B*H, 4), stderr_db (B*H, 4), floor (B*H,) on the CPU (vcattn_head_recipes_measure);
    problem_params: the call's vcattn_attention_params (its o is not written: the C side uses
    buffers of its own)."""
    n = min(int(rows), int(seq_q))
    r = _lib.stratified_rows(seq_q, n)
    bh = problem_params.batch * problem_params.heads
    p = _lib.AttentionParams()
    ctypes.pointer(p)[0] = problem_params  # a copy: o_stride is set for the compact rows below
    d = p.head_dim
    p.o_stride[:] = (p.heads * n * d, n * d, d)
    p.lse = None
    psnr = np.empty((bh, 4), np.float64)
    stderr_db = np.empty((bh, 4), np.float64)
    floor_db = np.empty(bh, np.float64)
    perm = np.ascontiguousarray(perm, dtype=np.int32)
    check(head_policy.measure_fn()(ctypes.byref(p), method_id(method), perm.ctypes.data, r.ctypes.data, n,
                                   psnr.ctypes.data, stderr_db.ctypes.data, floor_db.ctypes.data),
          "vcattn_head_recipes_measure", f"method {method}")
    return psnr, stderr_db, floor_db
