"""The CUDA path: torch CUDA tensors through vcattn_gpu_attention and vcattn_gpu_kmeans.

Nothing here computes: it describes the caller's tensors to the C API (pointers,
element strides, the current stream).  Workspaces come from torch's caching allocator, one
per call, on the call's stream: stream-ordered reuse makes concurrent calls on different
streams safe, and a call captured in a CUDA graph gets its buffer from the graph's pool.
Which permutation a call uses is decided by the caller (``Plan.resolve``).
"""
from __future__ import annotations

import ctypes
import functools

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


def attention(q, k, v, layout, sm_scale, return_lse, method, perm=None, v_smooth=True, strict=False, head_exact=None):
    """(out, lse or None) of the Hopper kernel; raise Unsupported for what it does not cover.
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
    out = torch.empty(qq.shape, dtype=dt, device=q.device)
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
    if out.dtype != q.dtype:
        out = out.to(q.dtype)
    return out, lse


def _psnr_heads(ref, out):
    """PSNR per (b, h) of (B, H, n, D) float tensors."""
    import torch

    err = (out.float() - ref).pow(2).mean(dim=(2, 3)).sqrt()
    peak = ref.abs().amax(dim=(2, 3))
    return (20 * torch.log10(peak / err.clamp_min(1e-30))).reshape(-1).double().cpu().numpy()


@functools.lru_cache(maxsize=None)
def _has_bf16_to_fp32_bmm(device_index: int) -> bool:
    """torch.bmm(..., out_dtype=torch.float32) on BF16 operands (torch 2.8 and later)."""
    import torch

    a = torch.ones((1, 16, 16), dtype=torch.bfloat16, device=torch.device("cuda", device_index))
    try:
        return torch.bmm(a, a, out_dtype=torch.float32).dtype == torch.float32
    except (TypeError, RuntimeError, NotImplementedError):
        return False


def reference_rows(qh, kh, vh, scale: float, heads_at_once: int = 4):
    """FP32 attention (B, H, n, D) of the (B, H, n, D) rows qh against all of kh, vh.

    BF16 inputs (where torch has BF16 -> FP32 matmuls) run on the BF16 tensor cores at FP32's
    accuracy: Q K^T is exact products summed in FP32, and P is split into two BF16 parts whose
    sum is P to ~2^-17 relative (P V: two products summed in FP32), so the result is as close to
    FP64 as FP32 matmuls get (python/tests/test_gpu.py) at a fraction of their time; the time
    goes to the elementwise passes over the (rows x keys) scores, kept to a few. Other inputs:
    FP32 matmuls. No torch flag is touched."""
    import torch

    fast = qh.dtype == torch.bfloat16 and _has_bf16_to_fp32_bmm(qh.device.index or 0)
    b, h, n, d = qh.shape
    ref = torch.empty(qh.shape, dtype=torch.float32, device=qh.device)
    for h0 in range(0, h, heads_at_once):  # (rows x keys) FP32 scores, a few heads at a time
        hs = slice(h0, h0 + heads_at_once)
        q3, k3, v3 = (x[:, hs].reshape(-1, x.shape[2], d) for x in (qh, kh, vh))
        if fast:
            s = torch.bmm(q3, k3.transpose(1, 2), out_dtype=torch.float32).mul_(scale)
            p = torch.softmax(s, dim=-1)
            del s
            hi = p.to(torch.bfloat16)
            o = torch.bmm(hi, v3, out_dtype=torch.float32)
            lo = p.sub_(hi).to(torch.bfloat16)  # P - hi is exact in FP32
            del p, hi
            o += torch.bmm(lo, v3, out_dtype=torch.float32)
            del lo
        else:
            s = torch.bmm(q3.float(), k3.float().transpose(1, 2)).mul_(scale)
            o = torch.bmm(torch.softmax(s, dim=-1), v3.float())
            del s
        ref[:, hs] = o.reshape(b, -1, n, d)
        del o
    return ref


def measure_recipes(q, k, v, layout, sm_scale, method: str, perm, rows: int, policy: str = "faithful",
                    margin_db: float = 0.0):
    """psnr (B*H, 4) (NaN: not run), floor (B*H,) on the GPU: the kernel of sage2-8bit and of the
    recipes the policy needs (head_policy.measure_in_order) on `rows` strided query rows (a small
    Q: the call's K/V preprocessing once per run), compared with FP32 attention of the same rows
    (reference_rows)."""
    import torch

    seq_dim = 2 if layout == "HND" else 1
    sq = q.shape[seq_dim]
    n = min(int(rows), int(sq))
    idx = torch.as_tensor((np.arange(n, dtype=np.int64) * sq) // n, device=q.device)
    qs = q.index_select(seq_dim, idx)
    b, h = (qs.shape[0], qs.shape[1]) if layout == "HND" else (qs.shape[0], qs.shape[2])
    ones = torch.ones((b, h), dtype=torch.uint8, device=q.device)
    ident = torch.arange(perm.shape[2], dtype=torch.int32, device=q.device).expand(perm.shape).contiguous()

    def kernel(m, p=None, exact=None):
        out, _ = attention(qs, k, v, layout, sm_scale, False, m, p, True, head_exact=exact)
        return out if layout == "HND" else out.transpose(1, 2)

    def recipe(r):
        return kernel(method, ident if r & head_policy.SEQUENCE else perm, ones if r & head_policy.EXACT_P else None)

    # sage2-8bit's and the method's runs on a side stream, beside the reference: a few CTAs per
    # head, each walking every key, leave most of the GPU to the reference's matmuls
    cur = torch.cuda.current_stream(q.device)
    side = torch.cuda.Stream(device=q.device)
    side.wait_stream(cur)
    with torch.cuda.stream(side):
        first = [kernel("sage2-8bit"), recipe(0)]
    qh, kh, vh = (x if layout == "HND" else x.transpose(1, 2) for x in (qs, k, v))
    ref = reference_rows(qh, kh, vh, float(sm_scale))
    cur.wait_stream(side)
    for t in first:
        t.record_stream(cur)  # made on the side stream, read and freed on this one
    floor_db = _psnr_heads(ref, first[0])
    psnr = head_policy.measure_in_order(policy, floor_db, margin_db,
                                        lambda r: _psnr_heads(ref, first[1] if r == 0 else recipe(r)))
    return psnr, floor_db
