"""Per-head recipes: a plan's choice, per (batch, head), of k-means or sequence order and of the
method's P or the exact exponential (docs/method.md, "Per-head recipes").

The choice is measured, not predicted: on ``rows`` query rows spread over the sequence, every
recipe of the method and the host recipe (``sage2-8bit``) are compared with exact attention of
the same rows, and ``vcattn_head_recipes_choose`` (C) picks per head.  CPU calls measure with the
CPU simulation against the FP64 reference (``_cpu.measure_recipes``, over
``vcattn_head_recipes_measure``); CUDA calls with the kernel itself on the sampled rows against
FP32 attention on the GPU (``_gpu.measure_recipes``).  Policies:

- ``"floor"`` (default): the first recipe in speed order (k-means with the method's P - the method
  as designed -, sequence order, then the same with the exact P) whose PSNR is at least the host
  recipe's on the head by two standard errors of that measured gain (the rows are a sample;
  ``vcattn_head_gain_stderr``) plus the plan's ``policy_margin_db``; if none is, the most faithful;
- ``"fastest"``: the method's P on every head, in the better of the two orders;
- ``"faithful"``: the most faithful recipe on every head;
- ``None``: no measurement, every head the method as it is (the k-means order).
"""
from __future__ import annotations

import ctypes
import functools

import numpy as np

from . import _lib
from ._lib import check, lib

__all__ = ["POLICIES", "RECIPES", "SEQUENCE", "EXACT_P", "check_policy", "choose", "apply", "names",
           "has_exact_sibling", "recipes_needed", "measure_in_order", "gain_stderr"]

POLICIES = ("floor", "fastest", "faithful")
SEQUENCE, EXACT_P = 1, 2  # VCATTN_RECIPE_SEQUENCE, VCATTN_RECIPE_EXACT_P
RECIPES = ("k-means", "sequence", "k-means+exact-P", "sequence+exact-P")

_P = ctypes.c_void_p
_i64 = ctypes.c_int64
_SIGS = {
    "vcattn_head_recipes_choose": [ctypes.c_int, _i64, _P, _P, _P, ctypes.c_double, ctypes.c_double, _P],
    "vcattn_head_recipes_reached": [_i64, ctypes.c_int, _P, _P, _P, ctypes.c_double, ctypes.c_double, _P],
    "vcattn_head_recipes_measure": [_P, ctypes.c_int, _P, _P, _i64, _P, _P, _P],
    "vcattn_head_gain_stderr": [_P, _P, _i64, _i64, _P],
    "vcattn_method_exact_p": [_P, _P],
}


def _fn(name):
    f = getattr(lib, name)
    f.argtypes, f.restype = _SIGS[name], ctypes.c_int
    return f


@functools.lru_cache(maxsize=None)
def defaults():
    """(rows, margin_db, stderrs): the measurement's defaults (vcattn_head_policy_defaults,
    vcattn.h) - rows measured per head, the floor's margin, and how many standard errors of its
    measured gain a recipe must clear besides."""
    rows, margin, stderrs = ctypes.c_int64(), ctypes.c_double(), ctypes.c_double()
    f = lib.vcattn_head_policy_defaults
    f.argtypes, f.restype = [ctypes.POINTER(ctypes.c_int64)] + [ctypes.POINTER(ctypes.c_double)] * 2, None
    f(ctypes.byref(rows), ctypes.byref(margin), ctypes.byref(stderrs))
    return rows.value, margin.value, stderrs.value


def gain_stderr(host_err: np.ndarray, recipe_err: np.ndarray, population: int) -> float:
    """vcattn_head_gain_stderr: the standard error (dB) of a recipe's gain over the host recipe
    from the paired per-row squared errors of n rows sampled from `population`."""
    h = np.ascontiguousarray(host_err, dtype=np.float64)
    r = np.ascontiguousarray(recipe_err, dtype=np.float64)
    out = ctypes.c_double()
    check(_fn("vcattn_head_gain_stderr")(h.ctypes.data, r.ctypes.data, h.shape[0], int(population),
                                         ctypes.addressof(out)), "vcattn_head_gain_stderr")
    return out.value


def measure_fn():
    """vcattn_head_recipes_measure with its prototype (the CPU paths call it)."""
    return _fn("vcattn_head_recipes_measure")


def check_policy(policy, rows, margin_db):
    if policy is not None and policy not in POLICIES:
        raise ValueError(f"vcattn: policy must be one of {POLICIES} or None, got {policy!r}")
    if isinstance(rows, bool) or not isinstance(rows, (int, np.integer)) or not 1 <= rows <= 1 << 20:
        raise ValueError(f"vcattn: policy_rows must be an int in 1..1048576 (query rows measured per head), "
                         f"got {rows!r}")
    if not np.isfinite(float(margin_db)):
        raise ValueError(f"vcattn: policy_margin_db must be a finite number of dB, got {margin_db!r}")


@functools.lru_cache(maxsize=None)
def has_exact_sibling(method: str) -> bool:
    """True for a V-Smooth method whose P has an exact-exponential sibling (the recipes apply);
    asked of C once per method, not on every call."""
    from ._methods import config

    out = _lib.MethodConfig()
    return _fn("vcattn_method_exact_p")(ctypes.byref(config(method)), ctypes.byref(out)) == 0


def choose(policy: str, psnr: np.ndarray, floor_db: np.ndarray, margin_db: float = 0.0,
           stderr_db: np.ndarray | None = None) -> np.ndarray:
    """(n,) uint8 recipes from psnr (n, 4), floor_db (n,) and the standard errors of the
    recipes' gains stderr_db (n, 4) or None (vcattn_head_recipes_choose)."""
    psnr = np.ascontiguousarray(psnr, dtype=np.float64)
    floor_db = np.ascontiguousarray(floor_db, dtype=np.float64)
    se = None if stderr_db is None else np.ascontiguousarray(stderr_db, dtype=np.float64)
    out = np.zeros(psnr.shape[0], np.uint8)
    check(_fn("vcattn_head_recipes_choose")(POLICIES.index(policy), psnr.shape[0], psnr.ctypes.data,
                                             None if se is None else se.ctypes.data, floor_db.ctypes.data,
                                             float(margin_db), defaults()[2], out.ctypes.data),
          "vcattn_head_recipes_choose")
    return out


def reached(psnr: np.ndarray, stderr_db: np.ndarray | None, floor_db: np.ndarray, margin_db: float = 0.0,
            n_recipes: int = 4) -> np.ndarray:
    """(n,) bool: the heads where one of the recipes 0 .. n_recipes-1 reaches the "floor" policy's
    floor (vcattn_head_recipes_reached, the rule of vcattn_head_recipes_choose; NaN: not
    measured).  n_recipes=1: the method as designed."""
    psnr = np.ascontiguousarray(psnr, dtype=np.float64)
    floor_db = np.ascontiguousarray(floor_db, dtype=np.float64)
    se = None if stderr_db is None else np.ascontiguousarray(stderr_db, dtype=np.float64)
    out = np.zeros(psnr.shape[0], np.uint8)
    check(_fn("vcattn_head_recipes_reached")(psnr.shape[0], int(n_recipes), psnr.ctypes.data,
                                              None if se is None else se.ctypes.data,
                                              floor_db.ctypes.data, float(margin_db), defaults()[2], out.ctypes.data),
          "vcattn_head_recipes_reached")
    return out.astype(bool)


def recheck_rows(rows: int, seq_q: int) -> int:
    """The rows of the second measurement of the heads whose method as designed did not reach
    the floor (vcattn_head_policy_recheck_rows: 4x, at most seq_q; 0: none, every row was
    measured)."""
    f = lib.vcattn_head_policy_recheck_rows
    f.argtypes, f.restype = [ctypes.c_int64, ctypes.c_int64], ctypes.c_int64
    return int(f(int(rows), int(seq_q)))


def recipes_needed(policy: str) -> int:
    """How many recipes (in the order 0..3) a policy can need measured: "fastest" looks at the
    method's P in both orders, "floor" and "faithful" at all four (floor stops early, below)."""
    return 2 if policy == "fastest" else len(RECIPES)


def measure_in_order(policy: str, floor_db: np.ndarray, margin_db: float, run):
    """(psnr (n, 4), stderr_db (n, 4)) from ``run(r) -> (psnr, stderr_db)``, each (n,), of recipe
    r on every head; NaN where not run.

    Recipes run in the order 0, 1, 2, 3. Under "floor" the next recipe runs only while some head
    has none at ``floor_db + margin_db`` and its standard errors yet: choose() takes the first
    recipe that reaches the floor, and a head that reaches none takes the most faithful - by then
    all four were run -, so it chooses exactly what it would with every recipe measured. On a
    layer whose heads all keep the method as designed that is one kernel run instead of four."""
    floor_db = np.ascontiguousarray(floor_db, np.float64)
    psnr = np.full((floor_db.shape[0], len(RECIPES)), np.nan)
    se = np.full_like(psnr, np.nan)
    for r in range(recipes_needed(policy)):
        psnr[:, r], se[:, r] = run(r)
        if policy == "floor" and reached(psnr, se, floor_db, margin_db).all():
            break
    return psnr, se


def apply(perm, recipes: np.ndarray):
    """(perm with the identity on the sequence-order heads, exact-P flags (B, H) uint8 or None)."""
    b, h, s = perm.shape
    rec = recipes.reshape(b, h)
    seq = (rec & SEQUENCE) != 0
    if seq.any():
        if isinstance(perm, np.ndarray):
            perm = perm.copy()
            perm[seq] = np.arange(s, dtype=perm.dtype)
        else:
            import torch

            perm = perm.clone()
            perm[torch.as_tensor(seq, device=perm.device)] = torch.arange(s, dtype=perm.dtype, device=perm.device)
    exact = ((rec & EXACT_P) != 0).astype(np.uint8)
    return perm, (exact if exact.any() else None)


def names(recipes: np.ndarray) -> list:
    return [RECIPES[int(r)] for r in np.asarray(recipes).reshape(-1)]
