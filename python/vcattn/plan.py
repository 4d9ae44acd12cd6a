"""V-Smooth plans (the per-(batch, head) key permutation) and the denoising-step schedule.

- ``Schedule``: on which denoising steps a layer re-clusters its V (k-means), reuses the
  last permutation, or (optionally) turns V-Smooth off.
- ``Plan``: one layer's permutation (B, H, Skv) and k-means centroids (B, H, k, D), numpy
  arrays; reused across steps; re-grouping warm-starts from the previous centroids.
  (``vcattn.PlanCache``, in core, keys Plans by layer id.)

The clustering itself is ``vcattn_vsmooth_plan`` in C (plain Lloyd k-means, permutation =
stable sort of the labels) for CPU calls, ``vcattn_gpu_kmeans`` for CUDA ones; ``Plan.resolve``
is the one place that decides, per call, whether to group, reuse or turn V-Smooth off.
"""
from __future__ import annotations

import ast
import ctypes
import itertools
import math
import weakref
from fractions import Fraction

import numpy as np

from . import _lib, _tensors, head_policy
from ._lib import check, lib

__all__ = ["Schedule", "Plan", "LayerRef", "kmeans_plan", "cube_permutation", "block_energy_share"]

GROUP, REUSE, OFF = "group", "reuse", "off"
# vcattn_kmeans_params_init's defaults; plan=None uses them on every call.
DEFAULT_KMEANS = dict(clusters=64, iterations=8, seed=0)


class _CacheStep:
    """The step "of the plan's PlanCache when the call runs": a compiled graph then reads the
    step at run time instead of baking one in (and recompiling on every step)."""

    def __repr__(self):
        return "vcattn.plan.CACHE_STEP"


CACHE_STEP = _CacheStep()


def is_cache_step(step) -> bool:
    # isinstance, not `is`: torch.compile traces it for a symbolic int step too
    return isinstance(step, _CacheStep)


# ---- schedule ------------------------------------------------------------------------

class Schedule:
    """When to group (k-means) during a denoising run of ``num_steps`` steps.

    Default (the paper's): group on the steps of the first ``ceil(num_steps *
    group_fraction)`` steps that are multiples of ``refresh_every``; every other step reuses
    the last permutation.  A 40-step run groups at steps 0, 4 and 8.

    ``group_every_step=True`` groups on every step (the upper bound on fidelity, and cost).
    ``keep_demean_after_window=False`` turns V-Smooth off after the window: later steps run
    the same method without the permutation and block demean (for V-Smooth methods only).
    """

    def __init__(self, num_steps: int, group_fraction: float = 0.25, refresh_every: int = 4,
                 group_every_step: bool = False, keep_demean_after_window: bool = True):
        if isinstance(num_steps, bool) or not isinstance(num_steps, (int, np.integer)) or num_steps < 1:
            raise ValueError(f"vcattn.Schedule: num_steps must be an int >= 1, got {num_steps!r}")
        try:
            frac = Fraction(group_fraction).limit_denominator(1_000_000)
        except (TypeError, ValueError):
            raise ValueError(f"vcattn.Schedule: group_fraction must be a number in (0, 1], got {group_fraction!r}")
        if not 0 < frac <= 1:
            raise ValueError(f"vcattn.Schedule: group_fraction must be in (0, 1], got {group_fraction!r}")
        if isinstance(refresh_every, bool) or not isinstance(refresh_every, (int, np.integer)) or refresh_every < 1:
            raise ValueError(f"vcattn.Schedule: refresh_every must be an int >= 1, got {refresh_every!r}")
        self.num_steps = int(num_steps)
        self.group_fraction = float(group_fraction)
        self.refresh_every = int(refresh_every)
        self.group_every_step = bool(group_every_step)
        self.keep_demean_after_window = bool(keep_demean_after_window)
        # the policy itself lives in C (vcattn_schedule_action_at); this is its handle
        self._c = _lib.Schedule(self.num_steps, self.group_fraction, self.refresh_every,
                                int(self.group_every_step), int(self.keep_demean_after_window))
        self.window = self.num_steps if self.group_every_step else max(1, math.ceil(frac * self.num_steps))

    def _check(self, step) -> int:
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
            raise TypeError(f"vcattn.Schedule: step must be an int, got {type(step).__name__}")
        if not 0 <= step < self.num_steps:
            raise ValueError(f"vcattn.Schedule: step {step} outside [0, {self.num_steps})")
        return int(step)

    def action(self, step: int) -> str:
        """'group', 'reuse' or 'off' for this step."""
        step = self._check(step)
        out = ctypes.c_int()
        _lib.check(_lib.lib.vcattn_schedule_action_at(ctypes.byref(self._c), step, ctypes.byref(out)),
                   "vcattn_schedule_action_at")
        return (GROUP, REUSE, OFF)[out.value]

    def should_group(self, step: int) -> bool:
        """True when this step re-clusters V (k-means) instead of reusing the last plan."""
        return self.action(step) == GROUP

    def uses_vsmooth(self, step: int) -> bool:
        """False only after the window when keep_demean_after_window=False."""
        return self.action(step) != OFF

    def grouping_steps(self) -> list:
        return [s for s in range(self.num_steps) if self.should_group(s)]

    def __repr__(self):
        return (f"Schedule(num_steps={self.num_steps}, group_fraction={self.group_fraction}, "
                f"refresh_every={self.refresh_every}, group_every_step={self.group_every_step}, "
                f"keep_demean_after_window={self.keep_demean_after_window}; groups at {self.grouping_steps()})")


# ---- k-means through the C planner ------------------------------------------------------

def cpu_kmeans(v: _tensors.Operand, clusters: int, iterations: int, seed: int, init, num_threads: int):
    """(perm int32 (B,H,S), centroids float32 (B,H,k,D)) from vcattn_vsmooth_plan."""
    b, h, s, d = v.shape
    params = _lib.KmeansParams()
    lib.vcattn_kmeans_params_init(ctypes.byref(params))
    params.clusters = int(clusters)
    params.iterations = int(iterations)
    params.seed = int(seed) & 0xFFFFFFFFFFFFFFFF
    params.num_threads = int(num_threads)
    if init is not None:
        init = np.ascontiguousarray(init, dtype=np.float32)
        params.init_centroids = init.ctypes.data
    perm = np.empty((b, h, s), np.int32)
    cent = np.empty((b, h, int(clusters), d), np.float32)
    strides = (ctypes.c_int64 * 3)(*v.strides)
    st = lib.vcattn_vsmooth_plan(v.ptr, b, h, s, d, strides, ctypes.byref(params),
                                 perm.ctypes.data, None, cent.ctypes.data)
    check(st, "vcattn_vsmooth_plan")
    return perm, cent


def check_kmeans_args(clusters, iterations, num_threads):
    for name, val, lo in (("clusters", clusters, 1), ("iterations", iterations, 1)):
        if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < lo:
            raise ValueError(f"vcattn: {name} must be an int >= {lo}, got {val!r}")
    if (isinstance(num_threads, bool) or not isinstance(num_threads, (int, np.integer))
            or not 0 <= num_threads <= _lib.MAX_THREADS):
        raise ValueError(_lib.threads_error(num_threads))


_HOW_TO_PLAN = ("build one with vcattn.kmeans_plan(v)[0] (or vcattn.Plan.from_values(v), a Plan that keeps it), "
                "or pass plan=None to group this call's V")


def _permutation_fault(p: np.ndarray):
    """None, or a sentence naming the first (batch, head) row of a (..., S) integer array that
    is not a permutation of 0..S-1 and what is wrong with it."""
    s = p.shape[-1]
    if p.size == 0:
        return None
    rows = p.reshape(-1, s)
    lead = p.shape[:-1]
    if ((rows >= 0) & (rows < s)).all():  # the common case, one pass: each row's counts of 0..S-1
        flat = rows.astype(np.int64) + np.arange(rows.shape[0], dtype=np.int64)[:, None] * s
        if (np.bincount(flat.ravel(), minlength=rows.size) == 1).all():
            return None
    for r in range(rows.shape[0]):
        row = rows[r]
        where = tuple(int(i) for i in np.unravel_index(r, lead)) if lead else ()
        out = np.flatnonzero((row < 0) | (row >= s))
        if out.size:
            j = int(out[0])
            return (f"entry {list(where + (j,))} is {int(row[j])}, outside 0..{s - 1} "
                    f"(row {list(where)} has {out.size} such entries)")
        counts = np.bincount(row.astype(np.int64), minlength=s)
        if (counts != 1).any():
            dup = int(np.flatnonzero(counts > 1)[0])
            miss = int(np.flatnonzero(counts == 0)[0])
            return (f"row {list(where)} holds token {dup} {int(counts[dup])} times and never token {miss} "
                    f"({int((counts == 0).sum())} of its {s} tokens are missing)")
    return None


def check_permutation(perm, shape, what: str = "vcattn: the permutation plan") -> None:
    """ValueError unless perm is an integer (B, H, Skv) array / tensor whose every (batch, head)
    row is a permutation of 0..Skv-1 (what the library needs; it only answers INVALID_ARGUMENT).
    Values are read only outside torch.compile's tracing (a traced call is checked by C)."""
    shape = tuple(int(n) for n in shape)
    if _tensors.is_torch(perm):
        dt = str(perm.dtype).replace("torch.", "")
        ok_type = not (perm.is_floating_point() or perm.is_complex() or dt == "bool")
    else:
        p = np.asarray(perm)
        dt = p.dtype.name
        ok_type = np.issubdtype(p.dtype, np.integer)
    if not ok_type or tuple(perm.shape) != shape:
        raise ValueError(f"{what} must be an integer array of shape (B, H, Skv) = {shape} for this call, "
                         f"got {dt} {tuple(perm.shape)}; {_HOW_TO_PLAN}")
    if _tensors.compiling():
        return
    p = perm.detach().cpu().numpy() if _tensors.is_torch(perm) else np.asarray(perm)
    fault = _permutation_fault(p)
    if fault is not None:
        raise ValueError(f"{what} is not a permutation of 0..{shape[2] - 1} per (batch, head): {fault}; "
                         f"{_HOW_TO_PLAN}")


def kmeans_plan(v, tensor_layout: str = "HND", clusters: int = 64, iterations: int = 8, seed: int = 0,
                init_centroids=None, num_threads: int = 0):
    """k-means over V's tokens per (batch, head): returns (perm (B,H,S) int32, centroids (B,H,k,D))."""
    _tensors.check_layout(tensor_layout)
    _tensors.kind_of(v, names=("v",))
    _tensors.bhsd(v, tensor_layout, "v")
    _tensors.check_dtype(v, "v")
    _tensors.check_last_dim(v, "v")
    check_kmeans_args(clusters, iterations, num_threads)
    op = _tensors.as_operand(v, tensor_layout)
    if init_centroids is not None:
        b, h, _, d = op.shape
        init_centroids = np.asarray(init_centroids)
        if init_centroids.shape != (b, h, clusters, d):
            raise ValueError(f"vcattn: init_centroids must have shape {(b, h, clusters, d)}, got {init_centroids.shape}")
    return cpu_kmeans(op, clusters, iterations, seed, init_centroids, num_threads)


def cube_permutation(frames: int, height: int, width: int, ct: int = 2, ch: int = 8, cw: int = 8) -> np.ndarray:
    """Static 3-D cube order over a T x H x W token grid (t-major raster), (T*H*W,) int32."""
    n = int(frames) * int(height) * int(width)
    if n <= 0:
        raise ValueError("vcattn.cube_permutation: the grid must be non-empty")
    perm = np.empty(n, np.int32)
    check(lib.vcattn_cube_permutation(frames, height, width, ct, ch, cw, perm.ctypes.data), "vcattn_cube_permutation")
    return perm


def block_energy_share(v, perm=None, tensor_layout: str = "HND") -> float:
    """128 |mu_b|^2 / |V_b|_F^2 averaged over full 128-token blocks (vcattn_block_energy_share).

    perm: None (sequence order), a Plan, a (B,H,S) permutation, or one (S,) permutation
    shared by every (batch, head)."""
    _tensors.check_layout(tensor_layout)
    _tensors.kind_of(v, names=("v",))
    _tensors.bhsd(v, tensor_layout, "v")
    _tensors.check_dtype(v, "v")
    _tensors.check_last_dim(v, "v")
    op = _tensors.as_operand(v, tensor_layout)
    b, h, s, d = op.shape
    if isinstance(perm, Plan):
        perm = perm.perm
        if perm is None:
            raise ValueError("vcattn.block_energy_share: the Plan has not grouped yet")
    if _tensors.is_torch(perm):
        perm = perm.detach().cpu().numpy()
    pstride = 0
    pptr = None
    if perm is not None:
        perm = np.ascontiguousarray(perm, dtype=np.int32)
        if perm.shape == (s,):
            pstride = 0
        elif perm.shape == (b, h, s):
            pstride = s
        else:
            raise ValueError(f"vcattn.block_energy_share: perm must have shape {(s,)} or {(b, h, s)}, got {perm.shape}")
        pptr = perm.ctypes.data
    out = ctypes.c_double()
    strides = (ctypes.c_int64 * 3)(*op.strides)
    check(lib.vcattn_block_energy_share(op.ptr, b, h, s, d, strides, pptr, pstride, ctypes.byref(out)),
          "vcattn_block_energy_share")
    return out.value


# ---- plan -------------------------------------------------------------------------------------

# Plans and PlanCaches by handle: a torch custom op takes no Python objects, so a compiled
# graph names them by an int and finds them when it runs.
_handles = itertools.count(1)
_live = weakref.WeakValueDictionary()


def register(obj) -> int:
    """A handle for obj (kept only as long as obj lives)."""
    handle = next(_handles)
    _live[handle] = obj
    return handle


def from_handle(handle: int):
    obj = _live.get(int(handle))
    if obj is None:
        raise ValueError(f"vcattn: no live Plan or PlanCache with handle {handle}")
    return obj


def literal_key(key) -> bool:
    """True for a layer key that survives repr -> ast.literal_eval (str, int, tuples of them):
    such a key can travel through a custom op's str argument.  Plain isinstance checks, so
    torch.compile can trace it."""
    if isinstance(key, tuple):
        return all(literal_key(k) for k in key)
    return isinstance(key, (str, int))


class LayerRef:
    """One layer's plan in a PlanCache, named (cache handle, key) instead of held: the Plan is
    looked up - made on first use - when the call runs, so a traced graph holds no Plan and
    creates none.  Keys must be ``literal_key``s."""

    __slots__ = ("cache", "key")

    def __init__(self, cache_handle: int, key):
        self.cache = cache_handle
        self.key = key

    def plan(self) -> "Plan":
        return from_handle(self.cache).layer(self.key)

    def part(self, b: int) -> "LayerRef":
        """Batch element b's plan when a mask gives the batch ragged lengths (``Plan.part``)."""
        return LayerRef(self.cache, (self.key, "batch", int(b)))

    @staticmethod
    def from_repr(cache_handle: int, key_repr: str) -> "Plan":
        return from_handle(cache_handle).layer(ast.literal_eval(key_repr))


def _where(x):
    """None for a numpy array, the device for a torch tensor: where a plan's arrays live."""
    return None if isinstance(x, np.ndarray) else x.device


def _copy(x):
    return x.copy() if isinstance(x, np.ndarray) else x.clone()


class Plan:
    """One attention layer's V-Smooth plan: a key permutation per (batch, head), reused.

    ``perm``: int32 (B, H, Skv), permuted position j holds original token perm[j].
    ``centroids``: float32 (B, H, clusters, D), kept to warm-start the next grouping.
    Both are numpy arrays after a CPU grouping and device tensors after a CUDA one (a
    plan used on another device than its arrays groups again, as for a new shape).

    Pass it as ``vcattn.attention(..., plan=plan, step=step)``.  Without a schedule the
    plan groups on first use (or when the shape changes) and is reused afterwards; with a
    schedule (``PlanCache`` sets one) it follows ``schedule.action(step)``.

    ``handle`` names the plan in torch custom-op calls (an op takes no Python objects);
    ``cache`` is the PlanCache that made it (its step is the step of ``CACHE_STEP``).
    """

    def __init__(self, perm=None, centroids=None, *, clusters: int = 64, iterations: int = 8, seed: int = 0,
                 schedule: Schedule | None = None, warm_start: bool = True, num_threads: int = 0, name=None,
                 policy: str | None = "floor", policy_rows: int | None = None, policy_margin_db: float | None = None):
        check_kmeans_args(clusters, iterations, num_threads)
        rows_default, margin_default, _ = head_policy.defaults()
        policy_rows = rows_default if policy_rows is None else policy_rows
        policy_margin_db = margin_default if policy_margin_db is None else policy_margin_db
        head_policy.check_policy(policy, policy_rows, policy_margin_db)
        self.policy = policy
        self.policy_rows = int(policy_rows)
        self.policy_margin_db = float(policy_margin_db)
        self.recipes = None       # (B, H) uint8 head recipes (vcattn.head_policy), chosen on first use
        self.recipe_psnr = None   # (B, H, 4) what each recipe measured, dB (NaN: not run)
        self.recipe_floor = None  # (B, H) the host recipe's (sage2-8bit) PSNR on the same rows
        self.recipe_stderr = None  # (B, H, 4) the standard error of each recipe's gain over it, dB
        self.recipe_rechecked = None  # (B, H) bool: the head's measurement is the second one (more rows)
        self._applied = None      # (perm, perm with the recipes applied, exact-P flags)
        if schedule is not None and not isinstance(schedule, Schedule):
            raise TypeError("vcattn.Plan: schedule must be a vcattn.Schedule or None")
        self.clusters = int(clusters)
        self.iterations = int(iterations)
        self.seed = int(seed)
        self.schedule = schedule
        self.warm_start = bool(warm_start)
        self.num_threads = int(num_threads)
        self.name = name
        self.perm = None if perm is None else self._as_perm(perm)
        self.centroids = None if centroids is None else np.ascontiguousarray(centroids, dtype=np.float32)
        if self.centroids is not None and (self.centroids.ndim != 4 or self.centroids.shape[2] != self.clusters):
            raise ValueError(f"vcattn.Plan: centroids must be (B, H, clusters={self.clusters}, D), "
                             f"got {self.centroids.shape}")
        self.history = []  # (step, action) of every resolve: 'group', 'reuse', 'off'
        self.last_grouped_step = None
        self.num_groupings = 0
        self.cache = None
        self.handle = register(self)

    @staticmethod
    def _as_perm(perm) -> np.ndarray:
        p = np.asarray(perm)
        if p.ndim != 3 or not np.issubdtype(p.dtype, np.integer):
            raise ValueError(f"vcattn.Plan: perm must be an integer array (B, H, Skv), got {p.dtype} {p.shape}; "
                             f"{_HOW_TO_PLAN}")
        fault = _permutation_fault(p)
        if fault is not None:
            raise ValueError(f"vcattn.Plan: perm is not a permutation of 0..{p.shape[2] - 1} per (batch, head): "
                             f"{fault}; {_HOW_TO_PLAN}")
        return np.ascontiguousarray(p, dtype=np.int32)

    def part(self, b: int) -> "Plan":
        """Batch element b's own plan, for calls whose mask gives the batch ragged lengths: each
        element then runs as its own problem (its valid tokens only) and groups its own keys.
        Made on first use with this plan's settings and kept."""
        parts = self.__dict__.setdefault("_parts", {})
        p = parts.get(int(b))
        if p is None:
            p = Plan(clusters=self.clusters, iterations=self.iterations, seed=self.seed, schedule=self.schedule,
                     warm_start=self.warm_start, num_threads=self.num_threads, name=(self.name, "batch", int(b)),
                     policy=self.policy, policy_rows=self.policy_rows, policy_margin_db=self.policy_margin_db)
            p.cache = self.cache
            parts[int(b)] = p
        return p

    # -- grouping
    @classmethod
    def from_values(cls, v, tensor_layout: str = "HND", **kwargs) -> "Plan":
        """A plan grouped now on V."""
        plan = cls(**kwargs)
        return plan.group(v, tensor_layout)

    def group(self, v, tensor_layout: str = "HND", step=None) -> "Plan":
        """Run k-means on V now, on the CPU (warm-started from the centroids when their shape fits)."""
        _tensors.check_layout(tensor_layout)
        _tensors.kind_of(v, names=("v",))
        _tensors.bhsd(v, tensor_layout, "v")
        _tensors.check_dtype(v, "v")
        _tensors.check_last_dim(v, "v")
        op = _tensors.as_operand(v, tensor_layout)
        self._group(op.shape, step, self.cpu_grouping(op), None)
        return self

    def cpu_grouping(self, v: _tensors.Operand):
        """The grouping function of ``resolve`` for a CPU call: the C planner on this V."""
        return lambda init: cpu_kmeans(v, self.clusters, self.iterations, self.seed, init, self.num_threads)

    def _group(self, shape, step, group, where):
        b, h, s, d = shape
        init = None
        if (self.warm_start and self.centroids is not None and tuple(self.centroids.shape) == (b, h, self.clusters, d)
                and _where(self.centroids) == where):
            init = self.centroids
        self.perm, self.centroids = group(init)
        self.last_grouped_step = step
        self.num_groupings += 1

    def matches(self, batch, heads, seq_kv, where=None) -> bool:
        """True when the permutation fits a call of this shape on this device (None: the CPU)."""
        return (self.perm is not None and tuple(self.perm.shape) == (batch, heads, seq_kv)
                and _where(self.perm) == where)

    def step_at_call(self, step):
        """The step a call means: ``CACHE_STEP`` is the cache's current step."""
        if is_cache_step(step):
            return None if self.cache is None else self.cache.step
        return step

    def resolve(self, shape, step, group, where=None):
        """The permutation for a call on V of this (B, H, Skv, D) shape, grouping first when due,
        or None for 'V-Smooth off'.  ``group(init_centroids) -> (perm, centroids)`` runs k-means
        on this call's V on the call's backend; ``where`` is its device (None: the CPU)."""
        b, h, s, _ = shape
        step = self.step_at_call(step)
        if step is not None and self.schedule is not None:
            action = self.schedule.action(step)
        else:
            action = REUSE
        if action == OFF:
            self.history.append((step, OFF))
            return None
        fits = self.matches(b, h, s, where)
        if action == GROUP and step is not None and self.last_grouped_step == step and fits:
            action = REUSE  # one grouping per step, however many calls the layer makes
        if action == REUSE and not fits:
            action = GROUP  # nothing to reuse yet (first call, a new shape or device)
        if action == GROUP:
            self._group(shape, step, group, where)
        self.history.append((step, action))
        return self.perm

    def apply_recipes(self, perm, method: str, measure, seq_q: int):
        """(perm, head_exact or None) for a call of `method` on this permutation: the head recipes
        (chosen on the first call of a shape with ``measure(perm, rows, heads=None) -> (psnr, stderr,
        floor)`` on `policy_rows` query rows of the call's seq_q, then reused on every later step)
        applied - sequence order where chosen, exact-P flags.  Under "floor", the heads whose method as
        designed (recipe 0) does not reach the floor (``heads``: their flat b * H + h indices) are
        measured again on head_policy.recheck_rows() rows and take that choice."""
        if self.policy is None or perm is None or not head_policy.has_exact_sibling(method):
            return perm, None
        b, h, _ = perm.shape
        if self.recipes is None or self.recipes.shape != (b, h):
            psnr, stderr_db, floor_db = measure(perm, self.policy_rows)
            recipes = head_policy.choose(self.policy, psnr, floor_db, self.policy_margin_db, stderr_db)
            rows2 = head_policy.recheck_rows(self.policy_rows, seq_q) if self.policy == "floor" else 0
            again = np.zeros(b * h, bool)
            if rows2:
                again = ~head_policy.reached(psnr, stderr_db, floor_db, self.policy_margin_db, n_recipes=1)
            if again.any():  # only those heads, as one batch item: the rest keep their choice
                psnr2, stderr2, floor2 = measure(perm, rows2, np.flatnonzero(again))
                recipes2 = head_policy.choose(self.policy, psnr2, floor2, self.policy_margin_db, stderr2)
                recipes[again], psnr[again], stderr_db[again], floor_db[again] = recipes2, psnr2, stderr2, floor2
            self.recipe_rechecked = again.reshape(b, h)
            self.recipes = recipes.reshape(b, h)
            self.recipe_psnr = psnr.reshape(b, h, 4)
            self.recipe_stderr = stderr_db.reshape(b, h, 4)
            self.recipe_floor = floor_db.reshape(b, h)
            self._applied = None
        # the applied permutation and flags are kept while the plan's permutation stays: a call
        # captured in a CUDA graph then copies nothing from the host
        applied = getattr(self, "_applied", None)  # plans pickled before it existed
        if applied is None or applied[0] is not perm:
            out, exact = head_policy.apply(perm, self.recipes)
            if exact is not None and not isinstance(perm, np.ndarray):
                import torch

                exact = torch.as_tensor(exact, device=perm.device)
            self._applied = (perm, out, exact)
        return self._applied[1], self._applied[2]

    def recipe_summary(self) -> dict:
        """Per head: the chosen recipe, what each recipe measured against the floor and that
        gain's standard error (dB; None for a recipe the policy did not need to run)."""
        if self.recipes is None:
            return {}
        margin = (self.recipe_psnr - self.recipe_floor[..., None]).reshape(-1, 4).round(2)
        out = {"policy": self.policy, "recipes": head_policy.names(self.recipes),
               "margin_db": [[None if np.isnan(x) else float(x) for x in row] for row in margin]}
        if self.recipe_stderr is not None:
            se = self.recipe_stderr.reshape(-1, 4).round(3)
            out["stderr_db"] = [[None if np.isnan(x) else float(x) for x in row] for row in se]
        if getattr(self, "recipe_rechecked", None) is not None:
            out["rechecked"] = [bool(x) for x in self.recipe_rechecked.reshape(-1)]
        return out

    def __setstate__(self, state):
        # an unpickled or deep-copied plan is another plan: it gets its own handle
        self.__dict__.update(state)
        self.__dict__.setdefault("recipe_stderr", None)  # plans pickled before they existed
        self.__dict__.setdefault("recipe_rechecked", None)
        self.handle = register(self)

    def copy(self) -> "Plan":
        p = Plan(clusters=self.clusters, iterations=self.iterations, seed=self.seed, schedule=self.schedule,
                 warm_start=self.warm_start, num_threads=self.num_threads, name=self.name, policy=self.policy,
                 policy_rows=self.policy_rows, policy_margin_db=self.policy_margin_db)
        p._applied = None
        for name in ("recipes", "recipe_psnr", "recipe_floor", "recipe_stderr", "recipe_rechecked"):
            val = getattr(self, name, None)  # the last two: not in plans pickled before them
            setattr(p, name, None if val is None else val.copy())
        p.perm = None if self.perm is None else _copy(self.perm)
        p.centroids = None if self.centroids is None else _copy(self.centroids)
        return p

    def __repr__(self):
        shape = None if self.perm is None else tuple(self.perm.shape)
        return (f"Plan(name={self.name!r}, perm={shape}, clusters={self.clusters}, "
                f"groupings={self.num_groupings}, last_grouped_step={self.last_grouped_step})")
