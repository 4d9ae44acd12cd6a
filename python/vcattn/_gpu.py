"""The CUDA path: torch CUDA tensors through vcattn_gpu_attention and vcattn_gpu_kmeans.

Nothing here computes: it describes the caller's tensors to the C API (pointers,
element strides, the current stream), keeps one reusable workspace per device, and
keeps a plan's permutation and centroids on the device between calls.
"""
from __future__ import annotations

import ctypes

from . import _lib
from ._lib import check, lib

# Methods the Hopper kernel implements (include/vcattn.h).
GPU_METHODS = ("sage2-8bit", "vsmooth-8bit", "vsmooth-expcast-8bit", "vsmooth-expcast-tail-8bit")
_VSMOOTH = ("vsmooth-8bit", "vsmooth-expcast-8bit", "vsmooth-expcast-tail-8bit")
_DTYPE_BF16, _DTYPE_FP16 = 0, 1

c_i64 = ctypes.c_int64
c_i64_3 = ctypes.c_int64 * 3


class GpuParams(ctypes.Structure):  # vcattn_gpu_params (include/vcattn.h)
    _fields_ = [
        ("batch", c_i64), ("heads", c_i64), ("seq_q", c_i64), ("seq_kv", c_i64), ("head_dim", c_i64),
        ("method", ctypes.c_int), ("softmax_scale", ctypes.c_double),
        ("input_dtype", ctypes.c_int), ("output_dtype", ctypes.c_int),
        ("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p), ("o", ctypes.c_void_p),
        ("q_stride", c_i64_3), ("k_stride", c_i64_3), ("v_stride", c_i64_3), ("o_stride", c_i64_3),
        ("perm", ctypes.c_void_p), ("lse", ctypes.c_void_p),
    ]


class GpuKmeansParams(ctypes.Structure):  # vcattn_gpu_kmeans_params
    _fields_ = [
        ("batch", c_i64), ("heads", c_i64), ("seq", c_i64), ("head_dim", c_i64),
        ("dtype", ctypes.c_int), ("v", ctypes.c_void_p), ("v_stride", c_i64_3),
        ("clusters", ctypes.c_int), ("iterations", ctypes.c_int), ("seed", ctypes.c_uint64),
        ("init_centroids", ctypes.c_void_p), ("centroids", ctypes.c_void_p),
        ("perm", ctypes.c_void_p), ("labels", ctypes.c_void_p),
    ]


class Unsupported(Exception):
    """This call cannot run on the kernel (the caller falls back or raises)."""


_declared = False


def _declare():
    global _declared
    if _declared:
        return
    P = ctypes.POINTER
    sigs = {
        "vcattn_gpu_device_check": (ctypes.c_int, []),
        "vcattn_gpu_workspace_size": (ctypes.c_int, [P(GpuParams), P(ctypes.c_size_t)]),
        "vcattn_gpu_attention": (ctypes.c_int, [P(GpuParams), ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]),
        "vcattn_gpu_kmeans_workspace_size": (ctypes.c_int, [P(GpuKmeansParams), P(ctypes.c_size_t)]),
        "vcattn_gpu_kmeans": (ctypes.c_int, [P(GpuKmeansParams), ctypes.c_void_p, ctypes.c_size_t,
                                             ctypes.c_void_p]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    _declared = True


def available() -> bool:
    """True when this library has the CUDA kernels and the current device is a Hopper GPU."""
    if not _lib.has_symbol("vcattn_gpu_kmeans"):
        return False
    _declare()
    return lib.vcattn_gpu_device_check() == 0


_workspaces = {}


def _workspace(device, nbytes):
    """One growing uint8 buffer per device, reused by every call (stream-ordered)."""
    import torch

    buf = _workspaces.get(device)
    if buf is None or buf.numel() < nbytes:
        buf = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=device)
        _workspaces[device] = buf
    return buf


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


def _method_id(name):
    mid = ctypes.c_int()
    check(lib.vcattn_method_from_name(name.encode(), ctypes.byref(mid)), "vcattn_method_from_name", name)
    return mid.value


def _kmeans(v, layout, plan, clusters, iterations, seed):
    """(perm, centroids) on the device for v; warm-started from the plan's device centroids."""
    import torch

    b, h, s, d = _shape(v, layout)
    kp = GpuKmeansParams()
    kp.batch, kp.heads, kp.seq, kp.head_dim = b, h, s, d
    kp.dtype = _DTYPE_BF16 if v.dtype == torch.bfloat16 else _DTYPE_FP16
    kp.v = v.data_ptr()
    kp.v_stride[:] = _bhsd_strides(v, layout)
    kp.clusters, kp.iterations, kp.seed = clusters, iterations, seed
    perm = torch.empty((b, h, s), dtype=torch.int32, device=v.device)
    cent = torch.empty((b, h, clusters, d), dtype=torch.float32, device=v.device)
    warm = getattr(plan, "_gpu_centroids", None) if plan is not None and plan.warm_start else None
    if warm is not None and tuple(warm.shape) == (b, h, clusters, d) and warm.device == v.device:
        kp.init_centroids = warm.data_ptr()
    kp.centroids, kp.perm = cent.data_ptr(), perm.data_ptr()
    nbytes = ctypes.c_size_t()
    st = lib.vcattn_gpu_kmeans_workspace_size(ctypes.byref(kp), ctypes.byref(nbytes))
    if st != 0:
        raise Unsupported(f"GPU k-means: {lib.vcattn_status_string(st).decode()}")
    ws = torch.empty(nbytes.value, dtype=torch.uint8, device=v.device)  # k-means owns its buffer
    stream = torch.cuda.current_stream(v.device).cuda_stream
    check(lib.vcattn_gpu_kmeans(ctypes.byref(kp), ws.data_ptr(), nbytes.value, stream), "vcattn_gpu_kmeans")
    return perm, cent


def _shape(x, layout):
    b, a1, a2, d = x.shape
    return (b, a1, a2, d) if layout == "HND" else (b, a2, a1, d)


def _resolve_perm(plan, step, v, layout, method):
    """The device permutation for a V-Smooth method, or None when the schedule turns it off."""
    import torch

    from .plan import GROUP, OFF, REUSE, DEFAULT_KMEANS, Plan

    b, h, s, d = _shape(v, layout)
    if plan is None:
        k = DEFAULT_KMEANS
        return _kmeans(v, layout, None, k["clusters"], k["iterations"], k["seed"])[0]
    if not isinstance(plan, Plan):  # a fixed (B,H,Skv) permutation
        p = plan if _is_torch(plan) else torch.from_numpy(plan)
        if tuple(p.shape) != (b, h, s):
            raise ValueError(f"vcattn: a permutation plan must have shape {(b, h, s)}, got {tuple(p.shape)}")
        return p.to(device=v.device, dtype=torch.int32).contiguous()
    action = plan.schedule.action(step) if (step is not None and plan.schedule is not None) else REUSE
    if action == OFF:
        plan.history.append((step, OFF))
        return None
    have = getattr(plan, "_gpu_perm", None)
    matches = have is not None and tuple(have.shape) == (b, h, s) and have.device == v.device
    if action == GROUP and step is not None and plan.last_grouped_step == step and matches:
        action = REUSE
    if action == REUSE and not matches:
        action = GROUP
    if action == GROUP:
        plan._gpu_perm, plan._gpu_centroids = _kmeans(v, layout, plan, plan.clusters, plan.iterations, plan.seed)
        plan.last_grouped_step = step
        plan.num_groupings += 1
    plan.history.append((step, action))
    return plan._gpu_perm


def _is_torch(x):
    return type(x).__module__.startswith("torch")


def attention(q, k, v, layout, sm_scale, return_lse, method, plan, step):
    """Run the Hopper kernel; raise Unsupported for what it does not cover."""
    import torch

    if method not in GPU_METHODS:
        raise Unsupported(f"method {method} has no GPU kernel (GPU methods: {', '.join(GPU_METHODS)})")
    if not available():
        raise Unsupported("this vcattn build has no CUDA kernels, or the GPU is not a Hopper (sm_90)")
    if v.dtype not in (torch.bfloat16, torch.float16):
        raise Unsupported(f"the kernel reads bfloat16 or float16 V, got {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError("vcattn: q, k and v must be on the same device")
    b, h, sq, d = _shape(q, layout)
    skv = _shape(k, layout)[2]
    if d not in (64, 128):
        raise Unsupported(f"head_dim {d} (the kernel supports 64 and 128)")
    dt = v.dtype
    qq, kk, vv = _operand(q, dt), _operand(k, dt), _operand(v, dt)
    perm = None
    if method in _VSMOOTH:
        perm = _resolve_perm(plan, step, vv, layout, method)
        if perm is None:
            method = "sage2-8bit"  # V-Smooth off for this step: the same kernel without the restore
    out = torch.empty(qq.shape, dtype=dt, device=q.device)
    lse = torch.empty((b, h, sq), dtype=torch.float32, device=q.device) if return_lse else None
    p = GpuParams()
    p.batch, p.heads, p.seq_q, p.seq_kv, p.head_dim = b, h, sq, skv, d
    p.method = _method_id(method)
    p.softmax_scale = 0.0 if sm_scale is None else float(sm_scale)
    p.input_dtype = p.output_dtype = _DTYPE_BF16 if dt == torch.bfloat16 else _DTYPE_FP16
    p.q, p.k, p.v, p.o = qq.data_ptr(), kk.data_ptr(), vv.data_ptr(), out.data_ptr()
    p.q_stride[:] = _bhsd_strides(qq, layout)
    p.k_stride[:] = _bhsd_strides(kk, layout)
    p.v_stride[:] = _bhsd_strides(vv, layout)
    p.o_stride[:] = _bhsd_strides(out, layout)
    p.perm = None if perm is None else perm.data_ptr()
    p.lse = None if lse is None else lse.data_ptr()
    nbytes = ctypes.c_size_t()
    st = lib.vcattn_gpu_workspace_size(ctypes.byref(p), ctypes.byref(nbytes))
    if st != 0:
        raise Unsupported(lib.vcattn_status_string(st).decode())
    ws = _workspace(q.device, nbytes.value)
    stream = torch.cuda.current_stream(q.device).cuda_stream
    check(lib.vcattn_gpu_attention(ctypes.byref(p), ws.data_ptr(), nbytes.value, stream), "vcattn_gpu_attention")
    if out.dtype != q.dtype:
        out = out.to(q.dtype)
    return (out, lse) if return_lse else out
