"""The CUDA path: torch CUDA tensors through vcattn_gpu_attention and vcattn_gpu_kmeans.

Nothing here computes: it describes the caller's tensors to the C API (pointers,
element strides, the current stream).  Workspaces come from torch's caching allocator, one
per call, on the call's stream: stream-ordered reuse makes concurrent calls on different
streams safe, and a call captured in a CUDA graph gets its buffer from the graph's pool.
Which permutation a call uses is decided by the caller (``Plan.resolve``).
"""
from __future__ import annotations

import ctypes
import math

import numpy as np

from . import _lib, head_policy
from ._lib import check, lib
from ._methods import GPU_METHODS, method_id, uses_vsmooth
from .plan import DEFAULT_KMEANS

__all__ = ["Unsupported", "available", "kmeans", "grouping", "attention", "measure_recipes", "reference_rows"]

_DTYPE_BF16, _DTYPE_FP16 = 0, 1


class Unsupported(Exception):
    """This call cannot run on the kernel (the caller falls back or raises). ``status``: the
    library's status when the kernel refused the call's values (e.g. SCORE_OVERFLOW for an
    sm_scale its bracket cannot hold), None when the kernel does not cover the call at all."""

    def __init__(self, why: str, status: int = None):
        super().__init__(why)
        self.status = status


def available() -> bool:
    """True when this library has the CUDA kernels and the current device is a Hopper GPU."""
    if not _lib.has_symbol("vcattn_gpu_kmeans"):
        return False
    return lib.vcattn_gpu_device_check() == 0


def _workspace(device, nbytes):
    """A workspace for one call, from torch's caching allocator on the current stream.

    One buffer shared by every call (as before) let two streams overwrite each other's
    preprocessed operands (H200: max |diff| 0.064 between concurrent and sequential calls)
    and left CUDA graphs pointing into a buffer a later, larger call released.  The caching
    allocator hands back a cached block in microseconds, frees it in stream order when the
    tensor dies, and allocates from the graph's private pool while capturing."""
    import torch

    return torch.empty(max(nbytes, 1), dtype=torch.uint8, device=device)


# Non-strict calls are not synchronized, so a row the kernel wrote as NaN/Inf (finite inputs
# beyond its FP32 pipeline) cannot raise; instead each call copies the kernel's output flag
# to pinned host memory asynchronously, and a later call (or flush_output_flags, or the exit of
# the process) warns once when one came back set.  Any failure of this bookkeeping turns it off (with one warning):
# it must never break a call.
_pending_flags = []  # (event, pinned int32 host tensor)
_flags_on = True


def _watch_output_flag(ws, offset, stream_obj):
    global _flags_on
    if not _flags_on:
        return
    import torch

    try:
        host = torch.empty(1, dtype=torch.int32, pin_memory=True)
        host.copy_(ws[offset:offset + 4].view(torch.int32), non_blocking=True)
        ev = torch.cuda.Event()
        ev.record(stream_obj)
        _pending_flags.append((ev, host))
        _register_exit_flush()
        if len(_pending_flags) > 256:  # bounded: the oldest are long done
            flush_output_flags(wait=False)
    except Exception as e:  # pragma: no cover - depends on the torch build
        _flags_on = False
        _lib.warn_once(("flag-watch-off",), f"vcattn: the deferred NaN/Inf check of GPU calls is off ({e})")


_exit_flush_registered = False


def _register_exit_flush():
    """The last calls of a process have no later call to warn them: check them at exit."""
    global _exit_flush_registered
    if _exit_flush_registered:
        return
    import atexit

    def _at_exit():
        try:
            flush_output_flags(wait=True)
        except Exception:  # pragma: no cover - CUDA may already be torn down
            pass

    atexit.register(_at_exit)
    _exit_flush_registered = True


def flush_output_flags(wait=False):
    """Warn (once) if an earlier non-strict GPU call wrote NaN/Inf rows; wait=True waits for
    the calls still running."""
    global _pending_flags
    keep = []
    for ev, host in _pending_flags:
        if wait:
            ev.synchronize()
        elif not ev.query():
            keep.append((ev, host))
            continue
        if int(host[0]) != 0:
            _lib.warn_once(("gpu-output-not-finite",),
                           "vcattn: an earlier GPU attention call wrote NaN/Inf rows for finite inputs "
                           "(beyond the kernel's FP32 pipeline: scores beyond float32, e.g. Q and K "
                           "both scaled by ~1e22; docs/method.md); pass "
                           "strict=True to have such calls raise VcattnError(OUTPUT_NOT_FINITE)")
    _pending_flags = keep


def _bhsd_strides(x, layout):
    s = x.stride()
    return (s[0], s[1], s[2]) if layout == "HND" else (s[0], s[2], s[1])


def _usable(x):
    """The kernel reads rows of 16-bit values with 8-byte loads."""
    s = x.stride()
    return s[3] == 1 and all(v % 4 == 0 for v in s[:3]) and x.data_ptr() % 8 == 0


def _operand(x, dtype):
    if x.dtype != dtype:
        x = x.to(dtype)  # fp32 q/k from RoPE: one cast on the device
    return x if _usable(x) else x.contiguous()


def _shape(x, layout):
    b, a1, a2, d = x.shape
    return (b, a1, a2, d) if layout == "HND" else (b, a2, a1, d)


def kmeans(v, layout, clusters, iterations, seed, init=None):
    """(perm int32 (B,H,S), centroids float32 (B,H,k,D)) on v's device; init: warm-start centroids."""
    import torch

    if v.dtype not in (torch.bfloat16, torch.float16):
        raise Unsupported(f"the GPU k-means reads bfloat16 or float16 V, got {v.dtype}")
    v = v if _usable(v) else v.contiguous()
    b, h, s, d = _shape(v, layout)
    perm = torch.empty((b, h, s), dtype=torch.int32, device=v.device)
    cent = torch.empty((b, h, clusters, d), dtype=torch.float32, device=v.device)
    if init is not None and tuple(init.shape) == (b, h, clusters, d) and init.device == v.device:
        init = init.to(torch.float32).contiguous()
    else:
        init = None
    kp = kmeans_params(v, layout, clusters, iterations, seed, perm, cent, init)
    nbytes = ctypes.c_size_t()
    st = lib.vcattn_gpu_kmeans_workspace_size(ctypes.byref(kp), ctypes.byref(nbytes))
    if st != 0:
        raise Unsupported(f"GPU k-means: {lib.vcattn_status_string(st).decode()}")
    ws = torch.empty(nbytes.value, dtype=torch.uint8, device=v.device)  # k-means owns its buffer
    stream = torch.cuda.current_stream(v.device).cuda_stream
    check(lib.vcattn_gpu_kmeans(ctypes.byref(kp), ws.data_ptr(), nbytes.value, stream), "vcattn_gpu_kmeans")
    return perm, cent


def launch_params(q, k, v, out, layout, method, sm_scale, perm=None, lse=None):
    """The kernel's vcattn_gpu_params for these operands (already of the kernel's dtype and
    usable strides): shapes and (batch, head, seq) element strides read in `layout`, the
    pointers, the method.  Host-only (no launch), so the CPU tests check it on CPU tensors."""
    import torch

    b, h, sq, d = _shape(q, layout)
    p = _lib.GpuParams()
    p.batch, p.heads, p.seq_q, p.seq_kv, p.head_dim = b, h, sq, _shape(k, layout)[2], d
    p.method = method_id(method)
    p.softmax_scale = 0.0 if sm_scale is None else float(sm_scale)  # vcattn.attention passes it resolved
    p.input_dtype = p.output_dtype = _DTYPE_BF16 if v.dtype == torch.bfloat16 else _DTYPE_FP16
    p.q, p.k, p.v, p.o = q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr()
    p.q_stride[:] = _bhsd_strides(q, layout)
    p.k_stride[:] = _bhsd_strides(k, layout)
    p.v_stride[:] = _bhsd_strides(v, layout)
    p.o_stride[:] = _bhsd_strides(out, layout)
    p.perm = None if perm is None else perm.data_ptr()
    p.lse = None if lse is None else lse.data_ptr()
    return p


def kmeans_params(v, layout, clusters, iterations, seed, perm, cent, init=None):
    """The GPU k-means' vcattn_gpu_kmeans_params for this V (host-only, like launch_params)."""
    import torch

    b, h, s, d = _shape(v, layout)
    kp = _lib.GpuKmeansParams()
    kp.batch, kp.heads, kp.seq, kp.head_dim = b, h, s, d
    kp.dtype = _DTYPE_BF16 if v.dtype == torch.bfloat16 else _DTYPE_FP16
    kp.v = v.data_ptr()
    kp.v_stride[:] = _bhsd_strides(v, layout)
    kp.clusters, kp.iterations, kp.seed = clusters, iterations, seed
    if init is not None:
        kp.init_centroids = init.data_ptr()
    kp.centroids, kp.perm = cent.data_ptr(), perm.data_ptr()
    return kp


def grouping(plan, v, layout):
    """The grouping function of ``plan.resolve`` for a CUDA call: the GPU k-means on this V."""
    return lambda init: kmeans(v, layout, plan.clusters, plan.iterations, plan.seed, init)


def check_supported(method, v):
    """Raise Unsupported for a call the kernel does not cover (before any planning work)."""
    import torch

    if method not in GPU_METHODS:
        raise Unsupported(f"method {method} has no GPU kernel (GPU methods: {', '.join(GPU_METHODS)})")
    if not available():
        raise Unsupported("this vcattn build has no CUDA kernels, or the GPU is not a Hopper (sm_90)")
    if v.dtype not in (torch.bfloat16, torch.float16):
        raise Unsupported(f"the kernel reads bfloat16 or float16 V, got {v.dtype}")


def attention(q, k, v, layout, sm_scale, return_lse, method, perm=None, v_smooth=True, strict=False, head_exact=None,
              out=None):
    """(out, lse or None) of the Hopper kernel; raise Unsupported for what it does not cover.
    out: optional view of q's shape to write the output into (a masked call's valid rows inside
    its padded output); used when it has the kernel's dtype (v's, and q's), else a copy lands there.
    perm: the (B,H,Skv) device permutation of a V-Smooth method, None = k-means on this V;
    v_smooth=False runs the method without V-Smooth (the schedule turned it off);
    strict=True waits for the kernel and raises VcattnError(OUTPUT_NOT_FINITE) when a row came
    out NaN or Inf (finite inputs beyond its FP32 pipeline; a launch cannot report that).
    head_exact: optional (B, H) uint8 flags (a plan's head recipes): those heads write P by the
    exact exponential."""
    import torch

    check_supported(method, v)
    if not (q.device == k.device == v.device):
        raise ValueError("vcattn: q, k and v must be on the same device")
    b, h, sq, d = _shape(q, layout)
    if d not in (64, 128):
        raise Unsupported(f"head_dim {d} (the kernel supports 64 and 128)")
    dt = v.dtype
    qq, kk, vv = _operand(q, dt), _operand(k, dt), _operand(v, dt)
    off = False
    if uses_vsmooth(method):
        if not v_smooth:
            off, perm = True, None  # the method's P path without V-Smooth (as the CPU simulation runs it)
        elif perm is None:
            k_ = DEFAULT_KMEANS
            perm = kmeans(vv, layout, k_["clusters"], k_["iterations"], k_["seed"])[0]
        else:
            perm = perm.to(device=q.device, dtype=torch.int32).contiguous()
    else:
        perm = None
    given = out
    into = given is not None and given.dtype == dt == q.dtype and given.stride(-1) == 1
    out = given if into else torch.empty(qq.shape, dtype=dt, device=q.device)
    lse = torch.empty((b, h, sq), dtype=torch.float32, device=q.device) if return_lse else None
    p = launch_params(qq, kk, vv, out, layout, method, sm_scale, perm, lse)
    p.v_smooth_off = int(off)
    if head_exact is not None and uses_vsmooth(method) and not off:
        head_exact = torch.as_tensor(head_exact, device=q.device).to(torch.uint8).contiguous()
        p.head_exact = head_exact.data_ptr()
    # the params are checked here (the layout) and once more by the call itself
    lay = _lib.GpuLayout()
    st = lib.vcattn_gpu_workspace_layout(ctypes.byref(p), ctypes.byref(lay))
    if st != 0:
        raise Unsupported(lib.vcattn_status_string(st).decode(), st)
    nbytes = ctypes.c_size_t(lay.total)
    ws = _workspace(q.device, nbytes.value)
    stream = torch.cuda.current_stream(q.device).cuda_stream
    if _pending_flags:
        flush_output_flags(wait=False)
    check(lib.vcattn_gpu_attention(ctypes.byref(p), ws.data_ptr(), nbytes.value, stream), "vcattn_gpu_attention")
    if not strict and not torch.cuda.is_current_stream_capturing():
        _watch_output_flag(ws, lay.output_flag, torch.cuda.current_stream(q.device))
    if strict and not torch.cuda.is_current_stream_capturing():
        # the launch cannot report rows that came out non-finite; with strict=True ask (one
        # sync; not possible while a CUDA graph is being captured: such calls are not checked)
        check(lib.vcattn_gpu_output_status(ctypes.byref(p), ws.data_ptr(), nbytes.value, stream),
              "vcattn_gpu_output_status")
    if given is not None and not into:
        given.copy_(out)
        out = given
    if out.dtype != q.dtype:
        out = out.to(q.dtype)
    return out, lse


def _psnr_db(ref, out):
    """PSNR per (b, h) of (B, H, n, D) float tensors, (B*H,) FP32 on the device."""
    err = (out.float() - ref).pow(2).mean(dim=(2, 3)).sqrt()
    peak = ref.abs().amax(dim=(2, 3))
    return (20 * (peak / err.clamp_min(1e-30)).log10()).reshape(-1)


def _psnr_heads(ref, *outs):
    """PSNR per (b, h) of each (B, H, n, D) output against ref: (B*H,) float64 for one output,
    (len(outs), B*H) for several - each computed as for one alone, read back in one copy."""
    import torch

    got = torch.stack([_psnr_db(ref, o) for o in outs]).double().cpu().numpy()
    return got[0] if len(outs) == 1 else got


def _row_sq_err(ref, out):
    """(B*H, n) float64: each row's squared error, summed over D, of a (B, H, n, D) output."""
    return (out.float() - ref).pow(2).sum(dim=3).reshape(-1, ref.shape[2]).double()


def _gain_stderr(host_err, recipe_err, population: int):
    """(B*H,) float64 on the device: vcattn_head_gain_stderr (src/head_policy.c) per row of the
    (B*H, n) paired per-row squared errors - the standard error of 10 log10(sum host / sum
    recipe) for n rows sampled from `population` (the delta method, the finite population
    correction; 0 when either sum is 0 or every row was measured, inf for one row of several).
    python/tests/test_torch.py (test_policy_stderr_on_the_device_is_the_c_definition) holds it to the
    C function."""
    import torch

    n = host_err.shape[-1]
    sh, sr = host_err.sum(-1), recipe_err.sum(-1)
    if n == population:
        return torch.zeros_like(sh)
    if n == 1:
        se = torch.full_like(sh, math.inf)
    else:
        d = host_err - (sh / sr).unsqueeze(-1) * recipe_err
        se = (10 / math.log(10)) * (d.var(dim=-1, unbiased=True) * n * (1 - n / population)).sqrt() / sh
    return torch.where((sh == 0) | (sr == 0), torch.zeros_like(se), se)


def _measured_heads(ref, host_err, population: int, *outs):
    """(psnr (len(outs), B*H), stderr_db (len(outs), B*H)) float64 of each (B, H, n, D) output
    against ref, its gain's standard error paired with the host recipe's per-row errors, read
    back in one copy."""
    import torch

    psnr = [_psnr_db(ref, o).double() for o in outs]
    se = [_gain_stderr(host_err, _row_sq_err(ref, o), population) for o in outs]
    got = torch.stack(psnr + se).cpu().numpy()
    return got[:len(outs)], got[len(outs):]


def reference_rows(qh, kh, vh, scale: float, heads_at_once: int = 4):
    """FP32 attention (B, H, n, D) of the (B, H, n, D) rows qh against all of kh, vh.

    BF16 inputs run vcattn_gpu_reference_rows (src/cuda/reference_rows.cu): one pass over K and
    V on the tensor cores, the scores exact products summed in FP32, the softmax in FP32 and P
    in two BF16 parts (~2^-17 relative): a few 1e-6 from FP64 on short rows, up to ~2e-4 on
    long flat ones (python/tests/test_gpu.py, tests/gpu/policy_cost.py), 20-30 dB below the
    recipes' own errors.  Other inputs, or a library without it: FP32 matmuls on a few
    heads at a time (the (rows x keys) FP32 scores in memory).  No torch flag is touched."""
    import torch

    if qh.dtype == kh.dtype == vh.dtype == torch.bfloat16 and qh.shape[3] in (64, 128) and \
            getattr(lib, "vcattn_gpu_reference_rows", None) is not None:
        return _reference_rows_kernel(qh, kh, vh, scale)
    b, h, n, d = qh.shape
    ref = torch.empty(qh.shape, dtype=torch.float32, device=qh.device)
    for h0 in range(0, h, heads_at_once):  # (rows x keys) FP32 scores, a few heads at a time
        hs = slice(h0, h0 + heads_at_once)
        q3, k3, v3 = (x[:, hs].reshape(-1, x.shape[2], d).float() for x in (qh, kh, vh))
        s = torch.bmm(q3, k3.transpose(1, 2)).mul_(scale)
        o = torch.bmm(torch.softmax(s, dim=-1), v3)
        del s
        ref[:, hs] = o.reshape(b, -1, n, d)
        del o
    return ref


def _reference_rows_kernel(qh, kh, vh, scale: float):
    import torch

    qh, kh, vh = (x if _usable(x) else x.contiguous() for x in (qh, kh, vh))
    b, h, n, d = qh.shape
    out = torch.empty((b, h, n, d), dtype=torch.float32, device=qh.device)
    p = _lib.GpuReferenceParams()
    p.batch, p.heads, p.rows, p.seq_kv, p.head_dim = b, h, n, kh.shape[2], d
    p.softmax_scale = float(scale)
    p.q, p.k, p.v, p.o = qh.data_ptr(), kh.data_ptr(), vh.data_ptr(), out.data_ptr()
    p.q_stride[:], p.k_stride[:], p.v_stride[:] = qh.stride()[:3], kh.stride()[:3], vh.stride()[:3]
    nbytes = ctypes.c_size_t(0)
    check(lib.vcattn_gpu_reference_workspace_size(ctypes.byref(p), ctypes.byref(nbytes)),
          "vcattn_gpu_reference_workspace_size")
    ws = _workspace(qh.device, nbytes.value)
    stream = torch.cuda.current_stream(qh.device).cuda_stream
    check(lib.vcattn_gpu_reference_rows(ctypes.byref(p), ws.data_ptr(), nbytes.value, stream),
          "vcattn_gpu_reference_rows")
    return out


class _OrderPair:
    """The method on the sampled rows in both orders at once: one preprocessing of K and V for
    the plan's order and for sequence order (a batch of two with stride-0 inputs, so nothing is
    copied), then the attention kernel once with the method's P (recipes 0 and 1) and, when
    asked, once more with the exact P (recipes 2 and 3) on the same preprocessed operands - the
    P path of a head is a launch choice.  Each (batch, head) of the kernel is independent, so
    every output is the one a call of its own gives (python/tests/test_gpu.py checks it).
    prepare() preprocesses on the current stream; run() may then go on any stream (it waits
    for the preprocessing)."""

    def __init__(self, qs, k, v, layout, sm_scale, method, perm):
        import torch

        dt = v.dtype
        self.q, self.k, self.v = _operand(qs, dt), _operand(k, dt), _operand(v, dt)
        self.layout, self.sm_scale, self.method = layout, sm_scale, method
        b, h = perm.shape[0], perm.shape[1]
        ident = torch.arange(perm.shape[2], dtype=torch.int32, device=qs.device).expand(b, h, -1)
        self.perms = [torch.stack([perm[i], ident[i]]).contiguous() for i in range(b)]
        self.ones = torch.ones((2, h), dtype=torch.uint8, device=qs.device)
        self.ws = []  # per batch element: (params, workspace, layout), after the preprocessing
        self.ready = None  # the event after the preprocessing

    def _pair(self, x, i):
        return x[i:i + 1].expand(2, *x.shape[1:])  # batch stride 0: both orders read the same rows

    def prepare(self):
        import torch

        stream = torch.cuda.current_stream(self.q.device)
        for i, perm2 in enumerate(self.perms):
            out = torch.empty((2,) + tuple(self.q.shape[1:]), dtype=self.q.dtype, device=self.q.device)
            p = launch_params(self._pair(self.q, i), self._pair(self.k, i), self._pair(self.v, i), out,
                              self.layout, self.method, self.sm_scale, perm2)
            lay = _lib.GpuLayout()
            st = lib.vcattn_gpu_workspace_layout(ctypes.byref(p), ctypes.byref(lay))
            if st != 0:
                raise Unsupported(lib.vcattn_status_string(st).decode(), st)
            ws = _workspace(self.q.device, lay.total)
            # the runs write an LSE of their own (run): the preprocessing then keeps what it needs
            lse = torch.empty((2, p.heads, p.seq_q), dtype=torch.float32, device=self.q.device)
            p.lse = lse.data_ptr()
            check(lib.vcattn_gpu_preprocess(ctypes.byref(p), ws.data_ptr(), lay.total, stream.cuda_stream),
                  "vcattn_gpu_preprocess")
            self.ws.append((p, ws, lay))
        self.ready = torch.cuda.Event()
        self.ready.record(stream)

    def run(self, exact: bool):
        """(B, H, n, D) outputs of (plan's order, sequence order): the method's P or the exact P."""
        import torch

        if self.ready is None:
            self.prepare()
        stream = torch.cuda.current_stream(self.q.device)
        stream.wait_event(self.ready)
        outs = []
        for p, ws, lay in self.ws:
            out = torch.empty((2,) + tuple(self.q.shape[1:]), dtype=self.q.dtype, device=self.q.device)
            # an LSE of its own: without one the kernel keeps the quantized pass's LSE in the
            # workspace and the exact keys' merge rewrites it there, so two runs on this
            # workspace at once (the method's P and the exact P, on two streams) would merge
            # each other's LSE
            lse = torch.empty((2, p.heads, p.seq_q), dtype=torch.float32, device=self.q.device)
            ws.record_stream(stream)  # made on the preprocessing's stream, read on this one
            p.o = out.data_ptr()
            p.lse = lse.data_ptr()
            p.head_exact = self.ones.data_ptr() if exact else None
            check(lib.vcattn_gpu_attention_kernel(ctypes.byref(p), ws.data_ptr(), lay.total, stream.cuda_stream),
                  "vcattn_gpu_attention_kernel")
            if not torch.cuda.is_current_stream_capturing():
                _watch_output_flag(ws, lay.output_flag, stream)
            outs.append(out if self.layout == "HND" else out.transpose(1, 2))
        return torch.cat([o[0:1] for o in outs]), torch.cat([o[1:2] for o in outs])


def measure_recipes(q, k, v, layout, sm_scale, method: str, perm, rows: int, policy: str = "faithful",
                    margin_db: float = 0.0):
    """psnr (B*H, 4) (NaN: not run), stderr_db (B*H, 4) (each recipe's gain over the host recipe:
    vcattn_head_gain_stderr), floor (B*H,) on the GPU: the kernel of sage2-8bit and of the
    recipes the policy needs (head_policy.measure_in_order) on `rows` stratified query rows (a small
    Q), compared with FP32 attention of the same rows (reference_rows).  The recipes share one
    preprocessing of K and V per order and run two at a time (_OrderPair): the plan's order and
    sequence order with the method's P, then, where the policy needs them, both with the exact P."""
    import torch

    seq_dim = 2 if layout == "HND" else 1
    sq = q.shape[seq_dim]
    n = min(int(rows), int(sq))
    idx = torch.as_tensor(_lib.stratified_rows(sq, n), device=q.device)
    qs = q.index_select(seq_dim, idx)
    perm = torch.as_tensor(perm, device=q.device).to(torch.int32)
    pair = _OrderPair(qs, k, v, layout, sm_scale, method, perm)
    outs = {}

    # Each run is a few CTAs per head, each walking every key: on a layer of few heads the GPU is
    # mostly idle and the runs' latencies, not their work, are the cost.  So the method's runs
    # (both orders), where the policy may read it and all the runs' CTAs fit on the SMs at once
    # the exact-P pair ahead of need (read only where measure_in_order asks), and sage2-8bit's run
    # go on side streams of their own, the pair first (its preprocessing is the longest chain),
    # and the reference last, on this stream: its CTAs fill every SM in waves, so a run launched
    # after it would wait for them (launched first, it cost the 4-head video layers' measurement
    # 0.5-0.8 ms: docs/kernel-log.md).
    b, h = perm.shape[0], perm.shape[1]
    ctas = b * h * -(-n // 128)  # the attention kernel's 128-row tiles, one order
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    ahead = policy == "faithful" or (policy == "floor" and 5 * ctas <= sms)
    cur = torch.cuda.current_stream(q.device)
    sides = [torch.cuda.Stream(device=q.device) for _ in range(3 if ahead else 2)]
    for st in sides:
        st.wait_stream(cur)
    with torch.cuda.stream(sides[1]):
        pair.prepare()
        outs[0], outs[1] = pair.run(exact=False)
    if ahead:
        with torch.cuda.stream(sides[2]):
            outs[2], outs[3] = pair.run(exact=True)
    with torch.cuda.stream(sides[0]):
        host, _ = attention(qs, k, v, layout, sm_scale, False, "sage2-8bit", None, True)
        host = host if layout == "HND" else host.transpose(1, 2)
    qh, kh, vh = (x if layout == "HND" else x.transpose(1, 2) for x in (qs, k, v))
    ref = reference_rows(qh, kh, vh, float(sm_scale))
    for st in sides:
        cur.wait_stream(st)
    for t in [host] + list(outs.values()):
        t.record_stream(cur)  # made on a side stream, read and freed on this one
    # the PSNRs and standard errors of every output there is, read back at once (one
    # synchronization)
    have = sorted(outs)
    host_err = _row_sq_err(ref, host)
    got, se = _measured_heads(ref, host_err, sq, host, *[outs[r] for r in have])
    floor_db = got[0]
    measured = {r: (got[1 + i], se[1 + i]) for i, r in enumerate(have)}

    def recipe(r):
        if r not in measured:
            outs[2], outs[3] = pair.run(exact=True)
            p2, s2 = _measured_heads(ref, host_err, sq, outs[2], outs[3])
            measured[2], measured[3] = (p2[0], s2[0]), (p2[1], s2[1])
        return measured[r]

    psnr, stderr_db = head_policy.measure_in_order(policy, floor_db, margin_db, recipe)
    return psnr, stderr_db, floor_db
