"""Marshalling between numpy / torch tensors and the C API's float32 (B, H, S, D) view.

The C API takes float32 rows with explicit element strides for (batch, head, seq)
and a contiguous head_dim.  We pass the caller's strides through and copy only when
the dtype must change (float16 / bfloat16 / float64 -> float32) or the strides are
ones C cannot describe (negative, or 0 on an axis of size > 1).
"""
from __future__ import annotations

import sys

import numpy as np

LAYOUTS = ("HND", "NHD")
# (batch, head, seq) axis of each layout; dim is always the last axis.
_AXES = {"HND": (0, 1, 2), "NHD": (0, 2, 1)}

_NUMPY_OK = {"float32", "float16", "float64", "bfloat16"}


def is_torch(x) -> bool:
    """True for a torch.Tensor (torch need not be importable: no torch, no tensor)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def kind_of(*xs, names=("q", "k", "v")) -> str:
    """'numpy' or 'torch' for a set of tensors that must all be one or the other."""
    kinds = []
    for x, n in zip(xs, names):
        if isinstance(x, np.ndarray):
            kinds.append("numpy")
        elif is_torch(x):
            kinds.append("torch")
        else:
            raise TypeError(f"vcattn: {n} must be a numpy.ndarray or a torch.Tensor, got {type(x).__name__}")
    if len(set(kinds)) > 1:
        raise TypeError("vcattn: " + ", ".join(names) + " mix numpy arrays and torch tensors; pass one kind")
    return kinds[0]


def compiling() -> bool:
    """True while torch.compile traces (no torch imported: False).  Checks that read tensor
    values (a permutation plan's entries, where a NaN is) are skipped there: they run eagerly."""
    torch = sys.modules.get("torch")
    compiler = getattr(torch, "compiler", None) if torch is not None else None
    return bool(compiler is not None and getattr(compiler, "is_compiling", lambda: False)())


def check_layout(tensor_layout: str) -> str:
    if tensor_layout not in LAYOUTS:
        raise ValueError(f"vcattn: tensor_layout must be 'HND' (B,H,S,D) or 'NHD' (B,S,H,D), got {tensor_layout!r}")
    return tensor_layout


def bhsd(x, layout: str, name: str):
    """(B, H, S, D) of a 4-D tensor in the given layout."""
    shape = tuple(x.shape)
    if len(shape) != 4:
        raise ValueError(
            f"vcattn: {name} must be 4-D ({'B,H,S,D' if layout == 'HND' else 'B,S,H,D'} for "
            f"tensor_layout={layout!r}), got shape {shape}")
    ab, ah, as_ = _AXES[layout]
    return shape[ab], shape[ah], shape[as_], shape[3]


def heads_subset(q, k, v, perm, layout: str, heads):
    """(q, k, v, perm, "HND") of the listed (batch, head) pairs only, as one batch item: heads are
    flat indices b * H + h; q, k, v become (1, n, S, D) and perm (1, n, Skv), contiguous copies
    (numpy or torch alike, on the tensors' device) - for measuring a few heads of a layer again."""
    def pick(x, is_perm=False):
        if not is_perm and layout == "NHD":
            x = x.transpose(1, 2) if is_torch(x) else np.swapaxes(x, 1, 2)
        flat = x.reshape((-1,) + tuple(x.shape[2:]))
        if is_torch(x):
            import torch

            return flat.index_select(0, torch.as_tensor(np.asarray(heads), device=x.device))[None].contiguous()
        return np.ascontiguousarray(flat[np.asarray(heads)][None])
    return pick(q), pick(k), pick(v), pick(perm, True), "HND"


def heads_measure(q, k, v, layout: str, run):
    """``measure(perm, rows, heads=None)`` for Plan.apply_recipes from ``run(q, k, v, layout, perm,
    rows)``: the whole call, or with ``heads`` only those (batch, head) pairs (heads_subset)."""
    def measure(perm, rows, heads=None):
        if heads is None:
            return run(q, k, v, layout, perm, rows)
        sq, sk, sv, sp, lay = heads_subset(q, k, v, perm, layout, heads)
        return run(sq, sk, sv, lay, sp, rows)
    return measure


_AXIS_NAMES = ("B (batch)", "H (heads)", "S (tokens)", "D (head_dim)")


def check_not_empty(x, layout: str, name: str, function: str = "vcattn.attention") -> None:
    """A VcattnError (BAD_SHAPE) that names the zero-size axis of a 4-D tensor, before any
    stride check (numpy gives every axis of an empty array stride 0, which would otherwise be
    blamed on the strides)."""
    b, h, s, d = bhsd(x, layout, name)
    zero = [n for n, size in zip(_AXIS_NAMES, (b, h, s, d)) if size == 0]
    if not zero:
        return
    from ._lib import STATUS, VcattnError  # _lib imports nothing of vcattn

    what = "key" if name in ("k", "v") else "query"
    raise VcattnError(
        STATUS["BAD_SHAPE"], function,
        f"{name} has shape {tuple(x.shape)} (tensor_layout={layout!r}): {' and '.join(zero)} "
        f"{'is' if len(zero) == 1 else 'are'} 0; attention needs at least one batch entry, one head, one "
        f"{what} token and head_dim 64 or 128 - skip the call for an empty batch or sequence (its output is empty)")


def first_non_finite(x):
    """(index tuple, value) of the first NaN / Inf in x (numpy or torch), or None."""
    if isinstance(x, np.ndarray):
        bad = ~np.isfinite(x.astype(np.float32) if x.dtype.name == "bfloat16" else x)
        if not bad.any():
            return None
        idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), x.shape))
        return idx, float(x[idx])
    import torch

    bad = ~torch.isfinite(x.detach())
    if not bool(bad.any()):
        return None
    idx = tuple(int(i) for i in bad.nonzero()[0].tolist())
    return idx, float(x[idx])


def dtype_name(x) -> str:
    if isinstance(x, np.ndarray):
        return x.dtype.name
    return str(x.dtype).replace("torch.", "")


def check_dtype(x, name: str) -> None:
    if isinstance(x, np.ndarray):
        if x.dtype.name not in _NUMPY_OK:
            raise TypeError(f"vcattn: {name} has dtype {x.dtype}; use float32, float16 "
                            "(bfloat16 via ml_dtypes; float64 is rounded to float32)")
    else:
        n = dtype_name(x)
        if n not in ("float32", "float16", "bfloat16", "float64"):
            raise TypeError(f"vcattn: {name} has dtype {x.dtype}; use float32, float16 or bfloat16")


def check_last_dim(x, name: str) -> None:
    if isinstance(x, np.ndarray):
        ok = x.shape[-1] <= 1 or x.strides[-1] == x.itemsize
    else:
        ok = x.shape[-1] <= 1 or x.stride(-1) == 1
    if not ok:
        raise ValueError(f"vcattn: {name}'s last (head_dim) axis must be contiguous (stride 1); "
                         f"got strides {tuple(x.strides) if isinstance(x, np.ndarray) else tuple(x.stride())} "
                         "- call .contiguous() / np.ascontiguousarray first")


class Operand:
    """A float32 numpy view of one tensor plus its (batch, head, seq) element strides."""

    __slots__ = ("array", "strides", "shape")

    def __init__(self, array: np.ndarray, layout: str):
        self.array = array
        ab, ah, as_ = _AXES[layout]
        isz = array.itemsize
        s = array.strides
        self.strides = (s[ab] // isz, s[ah] // isz, s[as_] // isz)
        self.shape = bhsd(array, layout, "tensor")

    @property
    def ptr(self) -> int:
        return self.array.ctypes.data


def _c_describable(a: np.ndarray) -> bool:
    if not a.flags.aligned:
        return False
    for n, s in zip(a.shape, a.strides):
        if n > 1 and (s <= 0 or s % a.itemsize):
            return False
    return True


def as_operand(x, layout: str) -> Operand:
    """float32 numpy view of x (copy only when the dtype or unusable strides force it)."""
    if isinstance(x, np.ndarray):
        a = x if x.dtype == np.float32 else x.astype(np.float32)  # order='K' keeps the layout
    else:
        t = x.detach()
        if t.dtype != _torch_f32():
            t = t.to(_torch_f32())
        a = t.numpy()
    if not _c_describable(a):
        a = np.ascontiguousarray(a)
    return Operand(a, layout)


def _torch_f32():
    import torch

    return torch.float32


def empty_out(b, h, s, d, layout: str) -> np.ndarray:
    """float32 output allocated in the caller's layout."""
    return np.empty((b, h, s, d) if layout == "HND" else (b, s, h, d), np.float32)


def like(result: np.ndarray, ref):
    """result (float32 numpy) in ref's kind and dtype."""
    if isinstance(ref, np.ndarray):
        return result if result.dtype == ref.dtype else result.astype(ref.dtype)
    import torch

    t = torch.from_numpy(result)
    return t if t.dtype == ref.dtype else t.to(ref.dtype)


def to_numpy_f32(x, name: str) -> np.ndarray:
    """Any supported tensor as a C-contiguous float32 numpy array (for metrics)."""
    if isinstance(x, np.ndarray):
        check_dtype(x, name)
        return np.ascontiguousarray(x, dtype=np.float32)
    if is_torch(x):
        check_dtype(x, name)
        import torch

        return np.ascontiguousarray(x.detach().to("cpu", torch.float32).numpy())
    raise TypeError(f"vcattn: {name} must be a numpy.ndarray or a torch.Tensor, got {type(x).__name__}")
