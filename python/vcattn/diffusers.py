"""vcattn in a diffusers video pipeline with one call: ``vcattn.diffusers.enable(pipe)``.

    import vcattn.diffusers
    handle = vcattn.diffusers.enable(pipe)   # long self-attention -> vcattn, the rest -> the model's backend
    video = pipe(prompt, num_inference_steps=40).frames; print(handle.summary())
    handle.disable()                         # everything as it was

How it reaches the attention (the design)
------------------------------------------
diffusers' video transformers attend in one of two ways, and enable() catches both:

- ``dispatch_attention_fn`` (diffusers >= 0.35; 0.34 has no attention_dispatch module:
  Wan, VACE, Animate, SkyReels-V2, HunyuanVideo, HunyuanVideo 1.5, LTX-Video, LTX-2,
  ChronoEdit, SANA-Video's cross-attention - its self-attention is linear, nothing to
  route - ...).  Every
  ``transformer_*.py`` binds the name at import (``from ..attention_dispatch import
  dispatch_attention_fn``), and its ``AttentionBackendName`` enum is closed, so a backend
  cannot be registered by name.  enable() rebinds the name ``dispatch_attention_fn`` in
  every loaded module of diffusers (and in any other module that bound diffusers'
  function) to a wrapper around what was bound there; modules imported later get the
  wrapper from ``attention_dispatch`` itself.  What the wrapper does not route goes to what
  was bound (the model's own backend: native, flash, sage, a context-parallel config, or a
  wrapper of another engine) with the same arguments.
- ``torch.nn.functional.scaled_dot_product_attention`` called inside a processor (every
  model on diffusers 0.34; CogVideoX, Mochi, Allegro, ... whose processors live in
  ``attention_processor.py``, on 0.42 too): enable() swaps the function in
  ``torch.nn.functional`` for a router.

Both routers act only inside an attention module of an enabled transformer: a forward
pre-hook on each module (every submodule with a ``processor``: diffusers' ``Attention``,
``AttentionModuleMixin`` classes, ``MochiAttention``) names the layer, a forward hook
clears it.  That note is process-wide: run one enabled pipeline at a time per process.
Elsewhere (text encoders, VAEs, other models) the calls pass through untouched, and so do
the SDPA calls of the native backend behind a dispatch call that was not routed (no call is
counted twice).  Processors
are not replaced (their signatures, ``set_attention_backend`` and other engines' hooks are
left alone).  The name is the module's path in the transformer (``blocks.3.attn1``; a
second transformer of the pipeline, e.g. Wan 2.2's ``transformer_2``, prefixes its
component name) and keys the layer's Plan in the PlanCache, as a string the
compiled graph carries (``PlanCache.layer_ref``).

Which calls go to vcattn: non-causal, dropout-free self-attention (as many keys as queries;
a joint text + video sequence counts) with head_dim 64 or 128, at least ``min_seq_kv`` keys,
no mask or one that keeps a prefix of each sample (HunyuanVideo's padded joint attention:
``vcattn.masks``), no context-parallel config and no extra backend arguments.  The rest
goes to the model's backend, counted by reason: ``cross_attention`` (Skv != Sq: text or
image keys), ``attn_mask`` (a mask that is not a per-sample prefix), ``causal``,
``dropout``, ``head_dim``, ``short_kv``, ``parallel`` (diffusers' context parallelism);
those are policy (no warning).  Calls vcattn cannot take for other reasons (dtype,
autograd, GQA, ...) go there too, with one warning per reason (``strict=True`` raises
``VcattnError`` instead, and makes the routed calls raise where vcattn would fall back).

HunyuanVideo-1.5's joint mask: its processor builds a (B, 1, S, S) boolean mask from the text's
(B, L) padding mask in every attention call (12.7 GB at 720p, as long as the attention itself),
and vcattn would then read it all back.  For the processors in ``JOINT_MASK_PROCESSORS`` a
forward pre-hook hands the processor its padding mask as a ``vcattn.deferred_mask.DeferredMask``
that follows the build's steps without building anything; a routed call reads the lengths from
the padding vector, and a call that goes to the model's backend gets the built mask (the routers
build it first), bit for bit what the model would have built.  Eager calls only.

The step: with a pipeline, enable() hooks its scheduler (the instance's class becomes a
subclass whose ``set_timesteps`` starts a run at step 0 and whose ``step`` advances it);
the scheduler's ``step`` runs once per denoising step whatever the transformer calls
(classifier-free guidance as a batch of two, or as two calls, as Wan does), so
``PlanCache.set_step`` gets the loop's index.  Without ``num_steps`` or ``plan_cache`` the
Schedule is ``Schedule(len(scheduler.timesteps))``, set when the run starts (a run with
another step count starts its plans afresh).  Set the scheduler before enable() (a scheduler
swapped in later is not hooked).  With a bare transformer there is no loop to follow: call
``handle.set_step(i)`` (or ``plan_cache.set_step(i)``) before each step; without a step
each layer groups on its first call and reuses that plan afterwards.

torch.compile: the hooks and routers are plain Python over shapes and flags, so dynamo
traces them (a tiny Wan compiles to one graph with ``fullgraph=True``); a routed call is
the custom op ``torch.ops.vcattn.attention`` reading the cache's step when it runs (no
recompilation per step).  Each layer's name is a constant of its traced code, so
compiling one block class for all blocks (regional compilation) traces it once per block.  The per-layer counts of
``summary()`` are kept by eager calls only: a compiled call is not counted (counting would
bake a number into the graph).  Compile after enable() (or let it recompile once).
"""
from __future__ import annotations

import threading

from ._lib import STATUS, VcattnError, warn_once
from ._methods import DEFAULT_METHOD, method_id
from .core import PlanCache, call
from .integration import HEAD_DIMS, MIN_SEQ_KV, mask_unsupported, unsupported
from .plan import CACHE_STEP, Schedule

__all__ = ["enable", "VcattnHandle", "POLICY_REASONS"]

# reasons a call goes to the model's backend by design: no warning, and not an error with strict=True
POLICY_REASONS = ("cross_attention", "attn_mask", "causal", "dropout", "head_dim", "short_kv", "parallel")
ROUTED = "vcattn"

_lock = threading.RLock()
_handles = []           # the enabled handles
_patched = {}           # module name -> (module, what was bound to dispatch_attention_fn there)
_sdpa_original = None   # torch.nn.functional.scaled_dot_product_attention before the router


class _Context:
    """The attention module running now (its _Layer) and whether the dispatch wrapper is
    calling the model's backend (whose own SDPA call must pass).  A plain object: dynamo
    traces its attribute writes; pipelines run one at a time per process."""

    def __init__(self):
        self.layer = None
        self.passing = 0


_ctx = _Context()


def _compiling() -> bool:
    import torch

    compiler = getattr(torch, "compiler", None)
    return bool(compiler is not None and getattr(compiler, "is_compiling", lambda: False)())


# ---- one attention module ------------------------------------------------------------------------

class _Layer:
    """The hooks of one attention module and its counts."""

    def __init__(self, handle, name):
        self.handle = handle
        self.name = name
        self.counts = {}

    def enter(self, module, args):
        _ctx.layer = self

    def leave(self, module, args, output):
        _ctx.layer = None

    def count(self, what):
        if not _compiling():
            self.counts[what] = self.counts.get(what, 0) + 1

    def route(self, q, k, v, attn_mask, dropout_p, is_causal, scale, layout, extra):
        """None when vcattn runs the call, else the reason it goes to the model's backend."""
        h = self.handle
        if extra.get("parallel_config") is not None:
            reason, msg = "parallel", None
        else:
            why = unsupported(q, k, v, None, 0.0, False, scale, extra.get("unknown"), HEAD_DIMS, layout)
            s = 2 if layout == "HND" else 1
            if why is not None and why[0] in ("kwargs", "type", "ndim"):
                reason, msg = why
            elif k.shape[s] != q.shape[s]:
                reason, msg = "cross_attention", None
            elif is_causal:
                reason, msg = "causal", None
            elif dropout_p:
                reason, msg = "dropout", None
            elif why is not None and why[0] == "head_dim":
                reason, msg = "head_dim", None
            elif why is not None:
                reason, msg = why
            elif extra.get("attention_kwargs"):
                reason, msg = "attention_kwargs", f"backend arguments {sorted(extra['attention_kwargs'])}"
            elif k.shape[s] < h.min_seq_kv:
                reason, msg = "short_kv", None
            elif attn_mask is not None and mask_unsupported(q, k, attn_mask, layout) is not None:
                reason, msg = "attn_mask", None  # a mask that is not a per-sample prefix
            else:
                return None
        if msg is not None:
            if h.strict:
                status = "UNSUPPORTED_HEAD_DIM" if reason == "head_dim" else "INVALID_ARGUMENT"
                raise VcattnError(STATUS[status], "vcattn.diffusers (strict)", f"{self.name}: {msg}")
            warn_once(("vcattn.diffusers", reason), f"vcattn.diffusers: {msg}; such calls use the model's attention")
        self.count(reason)
        return reason

    def attend(self, q, k, v, scale, layout, attn_mask=None):
        h = self.handle
        self.count(ROUTED)
        return call(q, k, v, layout, scale, False, h.plan_cache.layer_ref(self.name), CACHE_STEP, h.method,
                    h.num_threads, h.strict, fallback=not h.strict, attn_mask=attn_mask)


# ---- the joint mask a processor builds ------------------------------------------------------------

# Processors that build a (B, 1, S, S) joint mask from a (B, L) padding mask in every call
# (vcattn.deferred_mask); their module's padding mask is handed over deferred, so the joint mask
# is built only if the call leaves vcattn.
JOINT_MASK_PROCESSORS = ("HunyuanVideo15AttnProcessor2_0",)


def _defer_joint_mask(module, args, kwargs):
    """Forward pre-hook (with kwargs) of an attention module whose processor builds the joint
    mask: its boolean padding mask becomes a DeferredMask.  Eager calls only (under
    torch.compile a mask is not read: the call stays on the model's backend)."""
    if _compiling() or type(getattr(module, "processor", None)).__name__ not in JOINT_MASK_PROCESSORS:
        return None
    from .deferred_mask import DeferredMask

    if "attention_mask" in kwargs:
        kwargs = dict(kwargs, attention_mask=DeferredMask.wrap(kwargs["attention_mask"]))
    elif len(args) > 2:  # Attention.forward(hidden_states, encoder_hidden_states, attention_mask, ...)
        args = args[:2] + (DeferredMask.wrap(args[2]),) + args[3:]
    else:
        return None
    return args, kwargs


# ---- the routers ---------------------------------------------------------------------------------

_DISPATCH_KNOWN = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa",
                   "attention_kwargs", "backend", "parallel_config")


def _dispatch_router(original):
    import inspect

    try:
        names = [p.name for p in inspect.signature(original).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        names = list(_DISPATCH_KNOWN[:9])

    def dispatch_attention_fn(*args, **kwargs):
        layer = _ctx.layer
        if layer is None or _ctx.passing:
            return original(*_built(args), **_built(kwargs))
        a = dict(zip(names, args))
        a.update(kwargs)
        q, k, v = a.get("query"), a.get("key"), a.get("value")
        unknown = [n for n in a if n not in _DISPATCH_KNOWN]
        extra = dict(parallel_config=a.get("parallel_config"), attention_kwargs=a.get("attention_kwargs"),
                     unknown=unknown or None)
        why = layer.route(q, k, v, a.get("attn_mask"), a.get("dropout_p", 0.0), a.get("is_causal", False),
                          a.get("scale"), "NHD", extra)
        if why is None:
            return layer.attend(q, k, v, a.get("scale"), "NHD", a.get("attn_mask"))
        _ctx.passing += 1
        try:
            return original(*_built(args), **_built(kwargs))
        finally:
            _ctx.passing -= 1

    dispatch_attention_fn.__wrapped__ = original
    dispatch_attention_fn._vcattn_router = True
    return dispatch_attention_fn


def _sdpa_router(original):
    def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *args,
                                     scale=None, **kwargs):
        layer = _ctx.layer
        if layer is None or _ctx.passing or args:
            return original(query, key, value, _built(attn_mask), dropout_p, is_causal, *args, scale=scale, **kwargs)
        unknown = [n for n in kwargs if n != "enable_gqa"]
        why = layer.route(query, key, value, attn_mask, dropout_p, is_causal, scale, "HND",
                          dict(unknown=unknown or None))
        if why is None:
            return layer.attend(query, key, value, scale, "HND", attn_mask)
        return original(query, key, value, _built(attn_mask), dropout_p, is_causal, scale=scale, **kwargs)

    scaled_dot_product_attention.__wrapped__ = original
    scaled_dot_product_attention._vcattn_router = True
    return scaled_dot_product_attention


def _built(x):
    """x (an argument, or a tuple or dict of them) with a deferred joint mask (``_defer_joint_mask``)
    replaced by the real tensor: a call that leaves vcattn gets the mask the model would have built."""
    if isinstance(x, tuple):
        return tuple(_built(a) for a in x)
    if isinstance(x, dict):
        return {n: _built(a) for n, a in x.items()}
    return x.materialize() if getattr(x, "_vcattn_deferred", False) else x


def _is_router(fn) -> bool:
    return bool(getattr(fn, "_vcattn_router", False))


def _install_routers():
    """Called under _lock when the first handle is enabled."""
    global _sdpa_original
    import sys

    import torch.nn.functional as F

    if _sdpa_original is None:
        _sdpa_original = F.scaled_dot_product_attention
        F.scaled_dot_product_attention = _sdpa_router(_sdpa_original)
    try:
        from diffusers.models import attention_dispatch
    except ImportError:  # diffusers < 0.35: every processor calls SDPA
        return
    theirs = attention_dispatch.dispatch_attention_fn
    theirs = getattr(theirs, "__wrapped__", theirs) if _is_router(theirs) else theirs
    for name, mod in list(sys.modules.items()):
        d = getattr(mod, "__dict__", None)
        fn = d.get("dispatch_attention_fn") if isinstance(d, dict) else None
        if fn is None or _is_router(fn) or not callable(fn):
            continue
        if name == "diffusers" or name.startswith("diffusers.") or fn is theirs:
            _patched[name] = (mod, fn)
            setattr(mod, "dispatch_attention_fn", _dispatch_router(fn))


def _remove_routers():
    """Called under _lock when the last handle is disabled."""
    global _sdpa_original
    import sys

    import torch.nn.functional as F

    for name, (mod, fn) in _patched.items():
        if _is_router(getattr(mod, "dispatch_attention_fn", None)):
            setattr(mod, "dispatch_attention_fn", fn)
    _patched.clear()
    for mod in list(sys.modules.values()):  # modules imported while enabled took the router from attention_dispatch
        d = getattr(mod, "__dict__", None)
        fn = d.get("dispatch_attention_fn") if isinstance(d, dict) else None
        if _is_router(fn):
            setattr(mod, "dispatch_attention_fn", fn.__wrapped__)
    if _sdpa_original is not None:
        if _is_router(F.scaled_dot_product_attention):
            F.scaled_dot_product_attention = _sdpa_original
        else:
            warn_once(("vcattn.diffusers", "sdpa-replaced"), "vcattn.diffusers: torch.nn.functional."
                      "scaled_dot_product_attention was replaced after enable(); leaving the new one in place")
        _sdpa_original = None


# ---- the scheduler -------------------------------------------------------------------------------

_scheduler_classes = {}


def _scheduler_class(cls):
    """A subclass of the scheduler's class whose set_timesteps / step tell the handles."""
    sub = _scheduler_classes.get(cls)
    if sub is None:
        def set_timesteps(self, *args, **kwargs):
            out = cls.set_timesteps(self, *args, **kwargs)
            timesteps = getattr(self, "timesteps", None)
            for h in list(_handles):
                if h.scheduler is self:
                    h._start_run(0 if timesteps is None else len(timesteps))
            return out

        def step(self, *args, **kwargs):
            out = cls.step(self, *args, **kwargs)
            for h in list(_handles):
                if h.scheduler is self:
                    h._advance()
            return out

        sub = type(cls.__name__, (cls,), {"set_timesteps": set_timesteps, "step": step, "__module__": cls.__module__,
                                          "__qualname__": cls.__qualname__, "_vcattn_base": cls})
        _scheduler_classes[cls] = sub
    return sub


# ---- the handle ----------------------------------------------------------------------------------

class VcattnHandle:
    """What ``enable`` installed.  ``summary()`` counts the calls, ``set_step(i)`` drives
    the schedule by hand, ``disable()`` (or leaving a ``with`` block) undoes everything."""

    def __init__(self, transformers, scheduler, plan_cache, num_steps, method, min_seq_kv, strict, num_threads):
        self.method = method
        self.min_seq_kv = min_seq_kv
        self.strict = strict
        self.num_threads = num_threads
        self.scheduler = scheduler
        self.num_steps = num_steps
        self._owns_cache = plan_cache is None
        if plan_cache is None:
            plan_cache = PlanCache(Schedule(num_steps) if num_steps else None)
        self.plan_cache = plan_cache
        self.step = None
        self.runs = 0
        self.steps_seen = 0     # scheduler steps of the current (last) run
        self._transformers = transformers
        self._layers = {}
        self._hooks = []
        self._scheduler_class = None
        self.enabled = False

    # -- install / remove
    def _enable(self):
        for prefix, t in self._transformers:
            for name, module in t.named_modules():
                if not callable(getattr(module, "processor", None)):
                    continue
                proc = getattr(module, "processor", None)
                if type(proc).__module__.split(".")[0] == "vcattn":
                    raise ValueError(f"vcattn.diffusers.enable: {prefix}{name} already has a vcattn processor "
                                     f"({type(proc).__name__}); it routes its attention itself")
                layer = _Layer(self, prefix + name)
                self._layers[layer.name] = layer
                self._hooks.append(module.register_forward_pre_hook(layer.enter))
                if type(proc).__name__ in JOINT_MASK_PROCESSORS:
                    self._hooks.append(module.register_forward_pre_hook(_defer_joint_mask, with_kwargs=True))
                self._hooks.append(module.register_forward_hook(layer.leave, always_call=True))
        if not self._layers:
            self._remove_hooks()
            raise ValueError("vcattn.diffusers.enable: no attention module (a submodule with a processor) found")
        if self.scheduler is not None:
            cls = type(self.scheduler)
            base = getattr(cls, "_vcattn_base", None)
            if base is None:
                self._scheduler_class = cls
                self.scheduler.__class__ = _scheduler_class(cls)
        with _lock:
            if not _handles:
                _install_routers()
            _handles.append(self)
        self.enabled = True

    def _remove_hooks(self):
        for hk in self._hooks:
            hk.remove()
        self._hooks = []

    def disable(self) -> None:
        """Restore the pipeline: hooks removed, the scheduler's class back, and (with the last
        handle) dispatch_attention_fn and SDPA as they were.  Idempotent."""
        if not self.enabled:
            return
        self._remove_hooks()
        if self._scheduler_class is not None and getattr(type(self.scheduler), "_vcattn_base", None) is not None:
            self.scheduler.__class__ = self._scheduler_class
        self._scheduler_class = None
        with _lock:
            if self in _handles:
                _handles.remove(self)
            if not _handles:
                _remove_routers()
        if _ctx.layer is not None and _ctx.layer.handle is self:
            _ctx.layer = None
        self.enabled = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.disable()
        return False

    # -- the step
    def set_step(self, step) -> None:
        """Set the denoising step (a bare transformer: call it before each step)."""
        self.step = step
        sched = self.plan_cache.schedule
        if step is not None and sched is not None and step >= sched.num_steps:
            step = sched.num_steps - 1  # a run longer than the schedule keeps its last step's action
        self.plan_cache.set_step(step)

    def _start_run(self, n):
        self.runs += 1
        self.steps_seen = 0
        if self._owns_cache and not self.num_steps and n > 0:
            sched = self.plan_cache.schedule
            if sched is None or sched.num_steps != n:
                self.plan_cache.schedule = Schedule(n)
                self.plan_cache.clear()  # plans follow the schedule they were made with
        self.set_step(0)

    def _advance(self):
        self.steps_seen += 1
        self.set_step(0 if self.step is None else self.step + 1)

    # -- the counts
    @property
    def layers(self) -> list:
        """The attention modules enable() hooked, by name."""
        return list(self._layers)

    def summary(self) -> dict:
        """Calls since enable(), eager ones (compiled calls are not counted):

        ``{"vcattn": n routed, "backend": {reason: n}, "layers": {name: {"vcattn": n, reason: n}},
        "steps": scheduler steps of the last run, "runs": pipeline runs (set_timesteps calls),
        "plans": PlanCache.summary()}``
        (layers that made no call are left out)."""
        backend = {}
        routed = 0
        layers = {}
        for name, layer in self._layers.items():
            if not layer.counts:
                continue
            layers[name] = dict(sorted(layer.counts.items(), key=lambda kv: (kv[0] != ROUTED, kv[0])))
            for what, n in layer.counts.items():
                if what == ROUTED:
                    routed += n
                else:
                    backend[what] = backend.get(what, 0) + n
        return {"vcattn": routed, "backend": dict(sorted(backend.items())), "layers": layers,
                "steps": self.steps_seen, "runs": self.runs,
                "plans": self.plan_cache.summary()}

    def reset_counts(self) -> None:
        for layer in self._layers.values():
            layer.counts = {}

    def __repr__(self):
        s = self.summary()
        state = "enabled" if self.enabled else "disabled"
        return (f"<vcattn.diffusers handle ({state}): {len(self._layers)} attention modules, method {self.method}, "
                f"{s['vcattn']} calls to vcattn, backend {s['backend']}>")


# ---- the call ------------------------------------------------------------------------------------

def _transformers_of(obj):
    """[(prefix, transformer)], scheduler of a pipeline or a bare transformer."""
    import torch

    def unwrap(m):
        return getattr(m, "_orig_mod", m)  # torch.compile's OptimizedModule

    if isinstance(obj, torch.nn.Module):
        return [("", unwrap(obj))], None
    components = getattr(obj, "components", None)
    if not isinstance(components, dict):
        raise TypeError("vcattn.diffusers.enable: expected a diffusers pipeline (with .components) or a transformer "
                        f"(torch.nn.Module), got {type(obj).__name__}")
    found = [(name, unwrap(m)) for name, m in components.items()
             if name.startswith("transformer") and isinstance(m, torch.nn.Module)]
    if not found:
        raise ValueError(f"vcattn.diffusers.enable: the pipeline has no transformer component ({sorted(components)})")
    found.sort(key=lambda nm: (nm[0] != "transformer", nm[0]))
    return [("" if name == "transformer" else name + ".", m) for name, m in found], components.get("scheduler")


def enable(pipe_or_transformer, *, method: str | None = None, plan_cache: PlanCache | None = None,
           num_steps: int | None = None, min_seq_kv: int = MIN_SEQ_KV, strict: bool = False,
           num_threads=None) -> VcattnHandle:
    """Route the long self-attention of a diffusers pipeline (or transformer) through vcattn.

    ``pipe_or_transformer``: a pipeline (every ``transformer*`` component is enabled and its
    scheduler drives the step) or a transformer (drive the step with ``handle.set_step``).
    ``method``: a vcattn method (default ``vcattn.DEFAULT_METHOD``).  ``plan_cache``: the
    plans, one per attention module (default: a new cache following ``Schedule(num_steps)``,
    or the pipeline run's step count when ``num_steps`` is None).  ``min_seq_kv``: calls
    with fewer keys go to the model's backend (0 routes every call vcattn can run).
    ``strict``: raise ``VcattnError`` where a call would otherwise leave vcattn unexpectedly.

    Returns a ``VcattnHandle``: ``.summary()``, ``.set_step(i)``, ``.disable()``; also a
    context manager.  See the module's docstring for what is routed and how.
    """
    method = DEFAULT_METHOD if method is None else method
    method_id(method)  # unknown names fail here
    if isinstance(min_seq_kv, bool) or not isinstance(min_seq_kv, int) or min_seq_kv < 0:
        raise ValueError(f"vcattn.diffusers.enable: min_seq_kv must be an int >= 0, got {min_seq_kv!r}")
    if plan_cache is not None and not isinstance(plan_cache, PlanCache):
        raise TypeError("vcattn.diffusers.enable: plan_cache must be a vcattn.PlanCache or None")
    if num_steps is not None and (isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1):
        raise ValueError(f"vcattn.diffusers.enable: num_steps must be an int >= 1 or None, got {num_steps!r}")
    if plan_cache is not None and num_steps is not None:
        raise ValueError("vcattn.diffusers.enable: give plan_cache (with its schedule) or num_steps, not both")
    transformers, scheduler = _transformers_of(pipe_or_transformer)
    with _lock:
        for h in _handles:
            for _, t in h._transformers:
                if any(t is mine for _, mine in transformers):
                    raise ValueError("vcattn.diffusers.enable: this transformer is already enabled "
                                     "(call disable() on its handle first)")
    handle = VcattnHandle(transformers, scheduler, plan_cache, num_steps, method, min_seq_kv, bool(strict),
                          num_threads)
    handle._enable()
    return handle
