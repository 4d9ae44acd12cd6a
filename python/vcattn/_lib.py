"""ctypes view of libvcattn: loading, the structs of include/vcattn.h, statuses.

The bottom of the package: it imports nothing of vcattn.  Nothing here computes: every
function below is a thin, typed handle on the C API.  The struct layouts mirror
include/vcattn.h field for field; tests/test_abi.py checks them against
vcattn_attention_params_init and vcattn_kmeans_params_init.
"""
from __future__ import annotations

import ctypes
import os
import sys
import warnings
from pathlib import Path

__all__ = ["VcattnError", "lib", "check", "library_path", "STATUS_NAMES", "warn_once", "reset_warnings",
           "MAX_THREADS"]

# ---- status -----------------------------------------------------------------

# Same order as enum vcattn_status in include/vcattn.h.
STATUS_NAMES = (
    "SUCCESS",
    "NULL_POINTER",
    "BAD_SHAPE",
    "BAD_STRIDE",
    "UNSUPPORTED_HEAD_DIM",
    "SIZE_OVERFLOW",
    "NON_FINITE",
    "INVALID_ARGUMENT",
    "OUT_OF_MEMORY",
    "IO_ERROR",
    "BAD_FILE_FORMAT",
    "UNSUPPORTED_DEVICE",
    "CUDA_ERROR",
    "NOT_BUILT",
    "SCORE_OVERFLOW",
    "OUTPUT_NOT_FINITE",
)
STATUS = {name: code for code, name in enumerate(STATUS_NAMES)}

# num_threads: 0 = all online cores, else 1..MAX_THREADS worker threads (Python-side limit: a
# larger count is a typo, and the library would try to allocate per-thread scratch for it).
MAX_THREADS = 1024


def threads_error(value, where: str = "num_threads") -> str:
    """The sentence for a num_threads outside 0..MAX_THREADS."""
    return (f"vcattn: {where} must be an int in 0..{MAX_THREADS} (0 = all cores, 1..{MAX_THREADS} worker "
            f"threads), got {value!r}")


class VcattnError(RuntimeError):
    """A vcattn_status other than SUCCESS, with the library's own sentence.

    Attributes: ``status`` (the int code), ``status_name`` (e.g. ``"NON_FINITE"``),
    ``function`` (the C function that returned it, or a Python-side reason).
    """

    def __init__(self, status: int, function: str = "", detail: str = ""):
        self.status = int(status)
        self.status_name = STATUS_NAMES[status] if 0 <= status < len(STATUS_NAMES) else f"STATUS_{status}"
        self.function = function
        self.detail = detail
        try:
            sentence = load_library().vcattn_status_string(self.status).decode()
        except Exception:  # the library itself failed to load: still say something useful
            sentence = self.status_name.lower().replace("_", " ")
        where = f"{function}: " if function else ""
        msg = f"{where}{sentence} [VCATTN_STATUS_{self.status_name}]"
        if detail:
            msg += f" ({detail})"
        super().__init__(msg)

    def __reduce__(self):  # picklable across processes (the default would pass only the message)
        return (type(self), (self.status, self.function, self.detail))


# ---- loading -------------------------------------------------------------------

_LIB_NAMES = {"linux": "libvcattn.so", "darwin": "libvcattn.dylib", "win32": "vcattn.dll"}
_LIB_NAME = _LIB_NAMES.get(sys.platform, "libvcattn.so")


def _candidates():
    """Where the library may be, in order: $VCATTN_LIBRARY, the package, an in-tree build."""
    env = os.environ.get("VCATTN_LIBRARY")
    if env:
        # An explicit choice is final: no silent fallback to another copy.
        return [Path(env).expanduser()], True
    here = Path(__file__).resolve().parent
    cands = [here / _LIB_NAME]
    # Running from the source tree (PYTHONPATH=python): python/vcattn -> repo root.
    root = here.parent.parent
    if (root / "include" / "vcattn.h").is_file():
        cands += [root / "build" / _LIB_NAME, root / "build-py" / _LIB_NAME]
    return cands, False


_handle = None
_handle_path = None


def load_library():
    global _handle, _handle_path
    if _handle is not None:
        return _handle
    cands, explicit = _candidates()
    errors = []
    for path in cands:
        if not path.is_file():
            errors.append(f"{path}: not found")
            continue
        try:
            handle = ctypes.CDLL(str(path))
        except OSError as e:  # e.g. a CUDA build on a machine without the driver
            errors.append(f"{path}: {e}")
            if explicit:
                break
            continue
        _declare(handle)
        _handle, _handle_path = handle, path
        return handle
    hint = (
        "VCATTN_LIBRARY is set but the library cannot be loaded"
        if explicit
        else "reinstall with `pip install .` from the repository, or build it "
        "(cmake -S . -B build && cmake --build build) and set VCATTN_LIBRARY=build/libvcattn.so"
    )
    raise ImportError("vcattn: cannot load libvcattn (" + "; ".join(errors) + "). " + hint)


def library_path() -> str:
    load_library()
    return str(_handle_path)


# ---- structs (include/vcattn.h) -------------------------------------------------------

c_i64 = ctypes.c_int64
c_i64_3 = ctypes.c_int64 * 3
c_fp = ctypes.POINTER(ctypes.c_float)


class AttentionParams(ctypes.Structure):
    _fields_ = [
        ("batch", c_i64), ("heads", c_i64), ("seq_q", c_i64), ("seq_kv", c_i64), ("head_dim", c_i64),
        ("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p), ("o", ctypes.c_void_p),
        ("q_stride", c_i64_3), ("k_stride", c_i64_3), ("v_stride", c_i64_3), ("o_stride", c_i64_3),
        ("lse", ctypes.c_void_p),
        ("softmax_scale", ctypes.c_double),
        ("num_threads", ctypes.c_int),
        ("q_lens", ctypes.c_void_p), ("kv_lens", ctypes.c_void_p),  # per-batch valid lengths (host int64)
    ]


class MethodConfig(ctypes.Structure):
    _fields_ = [
        ("qk_format", ctypes.c_int), ("qk_granularity", ctypes.c_int),
        ("smooth_k", ctypes.c_int), ("smooth_q", ctypes.c_int),
        ("v_format", ctypes.c_int), ("v_smooth", ctypes.c_int),
        ("p_format", ctypes.c_int), ("rowsum_from_quantized_p", ctypes.c_int),
        ("p_scale", ctypes.c_int), ("exact_keys", ctypes.c_int),
    ]


class SimOutputs(ctypes.Structure):
    _fields_ = [("o_pq_v", ctypes.c_void_p), ("row_tv", ctypes.c_void_p), ("tv_row_stride", c_i64),
                ("o_f64", ctypes.c_void_p)]


class KmeansParams(ctypes.Structure):
    _fields_ = [
        ("clusters", ctypes.c_int), ("iterations", ctypes.c_int), ("seed", ctypes.c_uint64),
        ("init_centroids", ctypes.c_void_p), ("num_threads", ctypes.c_int),
    ]


class Fidelity(ctypes.Structure):
    _fields_ = [("rel_l2", ctypes.c_double), ("cosine", ctypes.c_double),
                ("psnr_db", ctypes.c_double), ("max_abs_error", ctypes.c_double)]


class ErrorBudget(ctypes.Structure):
    _fields_ = [("value_rel_l2", ctypes.c_double), ("probability_rel_l2", ctypes.c_double),
                ("value_share", ctypes.c_double)]


class ExpcastFacts(ctypes.Structure):
    _fields_ = [("agree_share", ctypes.c_double), ("max_code_diff", ctypes.c_int),
                ("ratio_min", ctypes.c_double), ("ratio_max", ctypes.c_double),
                ("row_tv_bound", ctypes.c_double), ("beta", ctypes.c_double)]


class Schedule(ctypes.Structure):
    _fields_ = [("num_steps", ctypes.c_int), ("group_fraction", ctypes.c_double),
                ("refresh_every", ctypes.c_int), ("group_every_step", ctypes.c_int),
                ("keep_demean_after_window", ctypes.c_int)]


class GpuParams(ctypes.Structure):  # vcattn_gpu_params
    _fields_ = [
        ("batch", c_i64), ("heads", c_i64), ("seq_q", c_i64), ("seq_kv", c_i64), ("head_dim", c_i64),
        ("method", ctypes.c_int), ("softmax_scale", ctypes.c_double),
        ("input_dtype", ctypes.c_int), ("output_dtype", ctypes.c_int),
        ("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p), ("o", ctypes.c_void_p),
        ("q_stride", c_i64_3), ("k_stride", c_i64_3), ("v_stride", c_i64_3), ("o_stride", c_i64_3),
        ("perm", ctypes.c_void_p), ("lse", ctypes.c_void_p), ("head_exact", ctypes.c_void_p),
        ("q_lens", ctypes.c_void_p), ("kv_lens", ctypes.c_void_p),  # per-batch valid lengths (host int64)
        ("v_smooth_off", ctypes.c_int),
    ]


class GpuLayout(ctypes.Structure):  # vcattn_gpu_layout
    _fields_ = [("sq_pad", c_i64), ("skv_pad", c_i64), ("exact_keys", c_i64)] + [
        (name, ctypes.c_size_t) for name in (
            "q_codes", "q_scale", "q_km", "k_codes", "k_scale", "k_mean", "k_partial", "v_codes", "v_scale",
            "v_mean", "v_block_mean", "v_amax", "v_mean_tc", "output_flag", "direct_rows", "key_norm",
            "key_order", "lse_q", "total")]


class GpuReferenceParams(ctypes.Structure):  # vcattn_gpu_reference_params
    _fields_ = [
        ("batch", c_i64), ("heads", c_i64), ("rows", c_i64), ("seq_kv", c_i64), ("head_dim", c_i64),
        ("softmax_scale", ctypes.c_double), ("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p),
        ("q_stride", c_i64_3), ("k_stride", c_i64_3), ("v_stride", c_i64_3), ("o", ctypes.c_void_p)]


class GpuKmeansParams(ctypes.Structure):  # vcattn_gpu_kmeans_params
    _fields_ = [
        ("batch", c_i64), ("heads", c_i64), ("seq", c_i64), ("head_dim", c_i64),
        ("dtype", ctypes.c_int), ("v", ctypes.c_void_p), ("v_stride", c_i64_3),
        ("clusters", ctypes.c_int), ("iterations", ctypes.c_int), ("seed", ctypes.c_uint64),
        ("init_centroids", ctypes.c_void_p), ("centroids", ctypes.c_void_p),
        ("perm", ctypes.c_void_p), ("labels", ctypes.c_void_p),
    ]


def _declare(h):
    P = ctypes.POINTER
    vp, st, i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64
    sigs = {
        "vcattn_status_string": (ctypes.c_char_p, [st]),
        "vcattn_version_string": (ctypes.c_char_p, []),
        "vcattn_attention_params_init": (None, [P(AttentionParams), i64, i64, i64, i64, i64, vp, vp, vp, vp]),
        "vcattn_attention_params_validate": (st, [P(AttentionParams)]),
        "vcattn_reference_attention": (st, [P(AttentionParams)]),
        "vcattn_method_name": (ctypes.c_char_p, [st]),
        "vcattn_method_from_name": (st, [ctypes.c_char_p, P(ctypes.c_int)]),
        "vcattn_method_config_get": (st, [st, P(MethodConfig)]),
        "vcattn_method_has_kernel": (st, [st]),
        "vcattn_method_default": (st, []),
        "vcattn_simulate_attention": (st, [P(AttentionParams), P(MethodConfig), vp, P(SimOutputs)]),
        "vcattn_strided_rows": (st, [i64, i64, P(i64)]),
        "vcattn_stratified_rows": (st, [i64, i64, P(i64)]),
        "vcattn_reference_attention_rows": (st, [P(AttentionParams), P(i64), i64]),
        "vcattn_simulate_attention_rows": (st, [P(AttentionParams), P(MethodConfig), vp, P(i64), i64,
                                                 P(SimOutputs)]),
        "vcattn_simulate_attention_heads": (st, [P(AttentionParams), P(MethodConfig), vp, vp, vp, i64,
                                                  P(SimOutputs)]),
        "vcattn_kmeans_params_init": (None, [P(KmeansParams)]),
        "vcattn_vsmooth_plan": (st, [vp, i64, i64, i64, i64, P(i64), P(KmeansParams), vp, vp, vp]),
        "vcattn_vsmooth_plan_heads": (st, [vp, i64, i64, i64, i64, i64, P(i64), P(KmeansParams), vp, vp, vp]),
        "vcattn_cube_permutation": (st, [i64, i64, i64, i64, i64, i64, vp]),
        "vcattn_block_energy_share": (st, [vp, i64, i64, i64, i64, P(i64), vp, i64, P(ctypes.c_double)]),
        "vcattn_fidelity_compare": (st, [vp, vp, i64, P(Fidelity)]),
        "vcattn_error_budget_compute": (st, [vp, vp, vp, i64, P(ErrorBudget)]),
        "vcattn_expcast_measure": (st, [i64, P(ExpcastFacts)]),
        "vcattn_schedule_init": (None, [P(Schedule), st]),
        "vcattn_schedule_action_at": (st, [P(Schedule), st, P(ctypes.c_int)]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(h, name)
        fn.restype = res
        fn.argtypes = args
    # The CUDA entry points exist only in a CUDA build.
    gpu = {
        "vcattn_gpu_device_check": (st, []),
        "vcattn_gpu_workspace_size": (st, [P(GpuParams), P(ctypes.c_size_t)]),
        "vcattn_gpu_attention": (st, [P(GpuParams), vp, ctypes.c_size_t, vp]),
        "vcattn_gpu_preprocess": (st, [P(GpuParams), vp, ctypes.c_size_t, vp]),
        "vcattn_gpu_attention_kernel": (st, [P(GpuParams), vp, ctypes.c_size_t, vp]),
        "vcattn_gpu_reference_workspace_size": (st, [P(GpuReferenceParams), P(ctypes.c_size_t)]),
        "vcattn_gpu_reference_rows": (st, [P(GpuReferenceParams), vp, ctypes.c_size_t, vp]),
        "vcattn_gpu_output_status": (st, [P(GpuParams), vp, ctypes.c_size_t, vp]),
        "vcattn_gpu_workspace_layout": (st, [P(GpuParams), P(GpuLayout)]),
        "vcattn_gpu_kmeans_workspace_size": (st, [P(GpuKmeansParams), P(ctypes.c_size_t)]),
        "vcattn_gpu_kmeans": (st, [P(GpuKmeansParams), vp, ctypes.c_size_t, vp]),
    }
    for name, (res, args) in gpu.items():
        fn = getattr(h, name, None)
        if fn is not None:
            fn.restype = res
            fn.argtypes = args


class _LazyLib:
    """Attribute access loads the library on first use."""

    def __getattr__(self, name):
        return getattr(load_library(), name)


lib = _LazyLib()


def check(status: int, function: str, detail: str = "") -> None:
    """Raise VcattnError for any status other than SUCCESS."""
    if status != 0:
        raise VcattnError(status, function, detail)


def stratified_rows(seq_q: int, n_rows: int):
    """vcattn_stratified_rows as an int64 numpy array: the query rows a sampled evaluation and the
    per-head policy's measurement use, on the CPU and the GPU alike (one per stratum of the
    sequence at a hashed offset; strided rows line up with the frames of some layers)."""
    import numpy as np

    rows = np.empty(int(n_rows), np.int64)
    check(lib.vcattn_stratified_rows(int(seq_q), int(n_rows), rows.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))),
          "vcattn_stratified_rows")
    return rows


def has_symbol(name: str) -> bool:
    try:
        getattr(load_library(), name)
        return True
    except AttributeError:
        return False


# ---- warnings ---------------------------------------------------------------------------------

_warned = set()


def warn_once(key, message) -> None:
    """One warning per distinct reason per process (a model calls attention thousands of times)."""
    if key in _warned:
        return
    _warned.add(key)
    warnings.warn(message, RuntimeWarning, stacklevel=3)


def reset_warnings() -> None:
    """Forget which warnings were given (tests)."""
    _warned.clear()
