"""The methods the library knows: names, ids and flag sets (vcattn_method_*).

The table is read from the library once, at import: a name lookup is then plain Python,
which torch.compile can trace (a ctypes call inside a traced function is a graph break).
"""
from __future__ import annotations

import ctypes

from . import _lib
from ._lib import check, lib

__all__ = ["DEFAULT_METHOD", "GPU_METHODS", "methods", "method_id", "method_config", "config", "uses_vsmooth"]

_QK_FORMATS = ("fp32", "int8", "e4m3", "nvfp4")
_QK_GRAN = ("block", "thread")
_V_FORMATS = ("fp32", "e4m3_per_block", "e4m3_per_channel", "nvfp4")
_P_FORMATS = ("fp32", "e4m3", "expcast", "nvfp4", "expcast_tail", "split")
_P_SCALES = ("running_max", "block_max")
_CONFIG_FIELDS = [name for name, _ in _lib.MethodConfig._fields_]


def _read_table():
    """{name: (id, flag values)} in the library's order (vcattn_method_name stops with NULL)."""
    table = {}
    i = 0
    while True:
        n = lib.vcattn_method_name(i)
        if n is None:
            break
        mid = ctypes.c_int()
        check(lib.vcattn_method_from_name(n, ctypes.byref(mid)), "vcattn_method_from_name", n.decode())
        cfg = _lib.MethodConfig()
        check(lib.vcattn_method_config_get(mid.value, ctypes.byref(cfg)), "vcattn_method_config_get")
        table[n.decode()] = (mid.value, tuple(getattr(cfg, f) for f in _CONFIG_FIELDS))
        i += 1
    return table


_TABLE = _read_table()
_VSMOOTH = frozenset(n for n, (_, values) in _TABLE.items() if values[_CONFIG_FIELDS.index("v_smooth")])
# The default of the library, the CLI and Python (VCATTN_METHOD_DEFAULT, include/vcattn.h).
DEFAULT_METHOD = next(n for n, (i, _) in _TABLE.items() if i == lib.vcattn_method_default())
# Methods the Hopper kernel implements (vcattn_method_has_kernel); the 4-bit ones need Blackwell.
GPU_METHODS = tuple(n for n, (i, _) in _TABLE.items() if lib.vcattn_method_has_kernel(i))


def methods() -> list:
    """Names of the methods the library simulates, e.g. ['fp8-naive', 'sage2-8bit', ...]."""
    return list(_TABLE)


def method_id(method) -> int:
    """The library's id of a method name; TypeError / ValueError for anything else."""
    if not isinstance(method, str):
        raise TypeError(f"vcattn: method must be a str, got {type(method).__name__}")
    entry = _TABLE.get(method)
    if entry is None:
        raise ValueError(f"vcattn: unknown method {method!r}; known: {', '.join(_TABLE)}")
    return entry[0]


def config(method) -> _lib.MethodConfig:
    """A fresh vcattn_method_config of the method (callers may change their copy)."""
    method_id(method)
    return _lib.MethodConfig(*_TABLE[method][1])


def uses_vsmooth(method) -> bool:
    """True for a V-Smooth method (a set lookup: traceable, unlike building the ctypes struct)."""
    method_id(method)
    return method in _VSMOOTH


def method_config(method: str) -> dict:
    """The flag set of a method (vcattn_method_config), as a dict of readable values."""
    c = config(method)
    return dict(qk_format=_QK_FORMATS[c.qk_format], qk_granularity=_QK_GRAN[c.qk_granularity],
                smooth_k=bool(c.smooth_k), smooth_q=bool(c.smooth_q), v_format=_V_FORMATS[c.v_format],
                v_smooth=bool(c.v_smooth), p_format=_P_FORMATS[c.p_format],
                rowsum_from_quantized_p=bool(c.rowsum_from_quantized_p), p_scale=_P_SCALES[c.p_scale],
                exact_keys=int(c.exact_keys))
