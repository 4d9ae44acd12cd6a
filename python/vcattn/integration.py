"""Integration helpers: which calls vcattn runs (``unsupported``), the SDPA patch, the
(out, lse) forward of xDiT / yunchang, and a diffusers attention processor wrapper.
Nothing here needs model weights; torch is imported only by the helpers that need it.

For diffusers pipelines use ``vcattn.diffusers.enable`` (any video transformer, any
attention backend); ``VcattnAttnProcessor`` / ``install_wan_processors`` predate it.
"""
from __future__ import annotations

import threading

from . import _fallback, _lib, _tensors, masks
from ._lib import VcattnError, warn_once
from ._methods import DEFAULT_METHOD, method_id
from .core import PlanCache, attention, call
from .plan import CACHE_STEP

__all__ = ["patch_sdpa", "unsupported", "attention_with_lse", "flash_attn_forward", "VcattnAttnProcessor",
           "install_wan_processors"]

HEAD_DIMS = (64, 128)
# Below this many keys the routed call goes to the original SDPA: cross-attention to ~512 text
# tokens is faster in cuDNN than in vcattn, and its few keys gain little from V-Smooth.
MIN_SEQ_KV = 4096


def _strict_error(reason_key: str, message: str) -> VcattnError:
    status = {"head_dim": "UNSUPPORTED_HEAD_DIM", "cuda": "NOT_BUILT"}.get(reason_key, "INVALID_ARGUMENT")
    return VcattnError(_lib.STATUS[status], "vcattn (strict)", message)


# ---- (out, lse) forward ---------------------------------------------------------------------

def attention_with_lse(q, k, v, tensor_layout: str = "NHD", sm_scale=None, **kwargs):
    """``attention(..., return_lse=True)`` with the flash-attn default layout (B, S, H, D)."""
    return attention(q, k, v, tensor_layout, sm_scale, True, **kwargs)


def flash_attn_forward(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                       softcap=0.0, alibi_slopes=None, deterministic=False, return_softmax=False, *,
                       method: str = DEFAULT_METHOD, plan=None, step=None, strict: bool = False, num_threads=None):
    """The forward contract of yunchang / xDiT ring and Ulysses attention (``fwd-only``).

    q, k, v: (B, S, H, D); returns ``(out (B, S, H, D) in q's dtype, lse (B, H, S) float32)``,
    the LSE in natural log - what ``update_out_and_lse`` / ``merge_attention`` combine.
    Cases vcattn does not run (causal, a local window, softcap) take an exact float32
    fallback with one warning (``strict=True`` raises); dropout and ALiBi are refused.
    """
    if dropout_p:
        raise ValueError("vcattn.flash_attn_forward: dropout_p must be 0 (inference only)")
    if alibi_slopes is not None:
        raise ValueError("vcattn.flash_attn_forward: alibi_slopes are not supported")
    if return_softmax:
        raise ValueError("vcattn.flash_attn_forward: return_softmax is not supported")
    window = tuple(int(w) for w in (window_size if window_size is not None else (-1, -1)))
    reasons = []
    if causal:
        reasons.append("causal")
    if window != (-1, -1):
        reasons.append("window_size")
    if softcap:
        reasons.append("softcap")
    if not reasons:
        return attention(q, k, v, "NHD", softmax_scale, True, plan=plan, step=step, method=method,
                         num_threads=num_threads, strict=strict)
    msg = "vcattn does not implement " + ", ".join(reasons)
    if strict:
        raise _strict_error("feature", msg)
    _tensors.kind_of(q, k, v)
    warn_once(("flash_attn_forward",) + tuple(reasons), f"{msg}; using the exact float32 fallback for these calls")
    return _fallback.attention(q, k, v, "NHD", softmax_scale, True, causal, window, softcap)


# ---- which calls vcattn runs ---------------------------------------------------------------

def unsupported(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, extra=None,
                head_dims=HEAD_DIMS, layout: str = "HND"):
    """Why vcattn cannot run this SDPA-like call: ``(reason, message)``, or None when it can.

    The checks of ``patch_sdpa`` and ``vcattn.diffusers`` (shapes and flags only, so
    torch.compile traces them).  q, k, v are 4-D, (B, H, S, D) for layout "HND" and
    (B, S, H, D) for "NHD"; ``extra`` names arguments the caller does not know."""
    import math

    import torch

    if extra:
        return "kwargs", f"unknown SDPA arguments {sorted(extra)}"
    if dropout_p:
        return "dropout", "dropout_p > 0 is not supported"
    if is_causal:
        return "causal", "is_causal=True is not supported"
    if not all(isinstance(x, torch.Tensor) for x in (q, k, v)):
        return "type", "q, k, v must be tensors"
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        axes = "(B, H, S, D)" if layout == "HND" else "(B, S, H, D)"
        return "ndim", f"only 4-D {axes} inputs are routed (got {q.dim()}-D)"
    if q.shape[-1] not in head_dims or k.shape[-1] != q.shape[-1] or v.shape[-1] != q.shape[-1]:
        return "head_dim", (f"head_dim must be one of {tuple(head_dims)} and equal for q, k, v "
                            f"(got {q.shape[-1]}, {k.shape[-1]}, {v.shape[-1]})")
    h, s = (1, 2) if layout == "HND" else (2, 1)
    if not (q.shape[0] == k.shape[0] == v.shape[0] and q.shape[h] == k.shape[h] == v.shape[h]):
        return "heads", "batch and head counts of q, k, v must be equal (no broadcasting or GQA)"
    if any(x.dtype not in (torch.float16, torch.bfloat16, torch.float32) for x in (q, k, v)):
        return "dtype", "dtypes other than float16 / bfloat16 / float32"
    if any(x.stride(-1) != 1 for x in (q, k, v)):
        return "stride", "a non-contiguous head_dim axis"
    if not (q.device == k.device == v.device):
        return "device", "q, k, v on different devices"
    if scale is not None and not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        return "scale", f"scale must be finite and > 0, got {scale!r}"
    if q.shape[0] == 0 or q.shape[h] == 0 or q.shape[s] == 0 or k.shape[s] == 0:
        return "empty", f"an empty batch, head or sequence axis (q {tuple(q.shape)}, k {tuple(k.shape)})"
    if torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v)):
        return "autograd", "vcattn has no backward pass (tensors require grad)"
    if attn_mask is not None:
        return mask_unsupported(q, k, attn_mask, layout)
    return None


def mask_unsupported(q, k, attn_mask, layout: str = "HND"):
    """None when vcattn runs this mask (a per-batch valid prefix, ``vcattn.masks``), else
    ``("attn_mask", why)``.  Reads the mask (a prefix: one byte-wise pass and two host
    synchronizations, ``vcattn.masks``; the answer for the last mask is kept, so the call that
    follows reads nothing)."""
    h, s = (1, 2) if layout == "HND" else (2, 1)
    lens = masks.lengths(attn_mask, q.shape[0], q.shape[h], q.shape[s], k.shape[s])
    if isinstance(lens, str):
        return "attn_mask", lens
    return None


# ---- SDPA patch -----------------------------------------------------------------------------

_patch_lock = threading.RLock()


def _compiling(torch) -> bool:
    compiler = getattr(torch, "compiler", None)
    return bool(compiler is not None and getattr(compiler, "is_compiling", lambda: False)())


class patch_sdpa:
    """Route ``torch.nn.functional.scaled_dot_product_attention`` through vcattn inside a block.

        with vcattn.patch_sdpa(method="vsmooth-8bit", plan_cache=cache, step=i):
            transformer(...)

    Supported calls: 4-D (B, H, S, D) float16 / bfloat16 / float32 tensors, head_dim 64 or
    128, no attn_mask or one that keeps a prefix of each sample (``vcattn.masks``: key padding,
    HunyuanVideo's joint mask), dropout_p == 0, is_causal False, equal head counts, one device, a
    finite scale > 0 (or None), non-empty, no autograd.  Anything else runs the original SDPA, with one warning per reason per process
    (``strict=True`` raises VcattnError instead); so does a call the library rejects when it
    runs (e.g. NaN input: exact attention, one warning).  CUDA tensors run the Hopper kernel
    (``vcattn.GPU_METHODS``); other methods, or a build/GPU without
    it, take SDPA with one warning.

    Short key sequences: a call with fewer than ``min_seq_kv`` keys (default 4096) runs the
    original SDPA (counted in ``fallbacks['short_kv']``; one warning per process that names
    the threshold; never an error, even with ``strict=True``): cross-attention to 512 text
    tokens is faster in cuDNN, and V-Smooth has little to smooth there.  ``min_seq_kv=0``
    routes every supported call - a small test model needs it, or nothing reaches vcattn.

    Counts: ``calls`` (routed through vcattn) and ``fallbacks`` ({reason: calls that ran the
    original SDPA}) cover the last block; ``stats()`` returns both as a dict and
    ``summary()`` as one line to print.

    torch.compile: a compiled model called inside the block traces the routed calls into
    the custom op ``torch.ops.vcattn.attention`` (no graph break, also with
    ``fullgraph=True``).  Drive the step through ``plan_cache.set_step`` rather than
    ``step=``: a step given here is a constant of the graph, so each new one recompiles.

    Plans: with ``plan_cache`` each call's Plan is ``plan_cache.layer(key)``, key = ``layer``
    (and ``(layer, n)`` for the n-th further call in the block) or, without ``layer``, the
    call's ordinal in the block - enter the block once per denoising step so the ordinals
    name the same layers every step.  ``step`` defaults to ``plan_cache.step``.  Without a
    cache, V-Smooth methods cluster on every call.

    The patch is process-wide while the block runs (all threads see it); blocks may nest.
    Only code that looks the function up at call time (``F.scaled_dot_product_attention``)
    is routed; a reference taken earlier (``from torch.nn.functional import
    scaled_dot_product_attention``) is not.
    """

    def __init__(self, method: str = DEFAULT_METHOD, *, strict: bool = False, plan_cache: PlanCache | None = None,
                 step=None, layer=None, num_threads=None, head_dims=HEAD_DIMS, min_seq_kv: int = MIN_SEQ_KV):
        method_id(method)  # unknown names fail here, not inside the model
        if isinstance(min_seq_kv, bool) or not isinstance(min_seq_kv, int) or min_seq_kv < 0:
            raise ValueError(f"vcattn.patch_sdpa: min_seq_kv must be an int >= 0, got {min_seq_kv!r}")
        if plan_cache is not None and not isinstance(plan_cache, PlanCache):
            raise TypeError("vcattn.patch_sdpa: plan_cache must be a vcattn.PlanCache or None")
        self.method = method
        self.strict = bool(strict)
        self.plan_cache = plan_cache
        self.step = step
        self.layer = layer
        self.num_threads = num_threads
        self.head_dims = tuple(head_dims)
        self.min_seq_kv = min_seq_kv
        self.calls = 0          # calls routed through vcattn in the current block
        self.fallbacks = {}     # reason -> count, for the current block
        self._original = None

    # -- context
    def __enter__(self):
        try:
            import torch
            import torch.nn.functional as F
        except ImportError as e:
            raise ImportError("vcattn.patch_sdpa needs torch") from e

        if _compiling(torch):  # a block inside a compiled region (a processor): dynamo traces the
            self._enter(F)     # swap and replays it; a lock is not traceable, and not needed there
        else:
            with _patch_lock:
                self._enter(F)
        return self

    def _enter(self, F):
        if self._original is not None:
            raise RuntimeError("vcattn.patch_sdpa: this context is already active")
        self._original = F.scaled_dot_product_attention
        self.calls = 0
        self._ordinal = 0
        self.fallbacks = {}
        F.scaled_dot_product_attention = self._sdpa

    def __exit__(self, *exc):
        import torch
        import torch.nn.functional as F

        if _compiling(torch):
            self._exit(F)
        else:
            with _patch_lock:
                self._exit(F)
        return False

    def _exit(self, F):
        F.scaled_dot_product_attention = self._original
        self._original = None

    # -- what the block did
    _REASONS = {
        "short_kv": "fewer keys than min_seq_kv={min_seq_kv} (min_seq_kv=0 routes them)",
        "kwargs": "SDPA arguments vcattn does not take", "attn_mask": "an attn_mask that is not a valid prefix", "dropout": "dropout_p > 0",
        "causal": "is_causal=True", "type": "non-tensor inputs", "ndim": "not 4-D (B, H, S, D)",
        "head_dim": "head_dim not in {head_dims}", "heads": "unequal batch / head counts (GQA)",
        "dtype": "a dtype other than float16 / bfloat16 / float32", "stride": "a non-contiguous head_dim axis",
        "device": "q, k, v on different devices", "scale": "a scale that is not finite and > 0",
        "empty": "an empty batch, head or sequence axis", "autograd": "tensors that require grad",
    }

    def stats(self) -> dict:
        """{'routed': calls through vcattn, 'sdpa': calls on the original SDPA, 'fallbacks':
        {reason: calls}, 'min_seq_kv': the threshold} for the current or last block."""
        return dict(routed=self.calls, sdpa=sum(self.fallbacks.values()), fallbacks=dict(self.fallbacks),
                    min_seq_kv=self.min_seq_kv)

    def summary(self) -> str:
        """One line: how many SDPA calls the block routed through vcattn and why the others
        ran the original SDPA."""
        st = self.stats()
        total = st["routed"] + st["sdpa"]
        line = f"vcattn.patch_sdpa(method={self.method!r}): {st['routed']} of {total} SDPA calls ran vcattn"
        if st["sdpa"]:
            why = ", ".join(
                f"{n} {self._REASONS.get(r, r).format(min_seq_kv=self.min_seq_kv, head_dims=self.head_dims)}"
                f" [{r}]" for r, n in sorted(st["fallbacks"].items(), key=lambda kv: -kv[1]))
            line += f"; {st['sdpa']} ran the original SDPA: {why}"
        return line

    def __repr__(self):
        return f"<{self.summary()}>"

    # -- the replacement
    def _sdpa(self, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
              enable_gqa=False, **extra):
        why = unsupported(query, key, value, attn_mask, dropout_p, is_causal, scale, extra, self.head_dims)
        short = why is None and key.shape[2] < self.min_seq_kv
        if short:
            why = "short_kv", None  # routing policy, not a failure: strict or not, it never raises
        if why is not None:
            reason, msg = why
            if self.strict and msg is not None:
                raise _strict_error(reason, msg)
            self.fallbacks[reason] = self.fallbacks.get(reason, 0) + 1
            if msg is not None:
                warn_once(("patch_sdpa", reason), f"vcattn.patch_sdpa: {msg}; such calls use the original SDPA")
            elif short:
                # said once: a small test model otherwise sends nothing to vcattn and looks fine
                warn_once(("patch_sdpa", "short_kv"),
                          f"vcattn.patch_sdpa: an SDPA call with {key.shape[2]} keys ran the original SDPA, not "
                          f"vcattn: calls with fewer than min_seq_kv={self.min_seq_kv} keys stay on SDPA (short "
                          "cross-attention is faster there); pass min_seq_kv=0 (patch_sdpa, VcattnAttnProcessor, "
                          "install_wan_processors) to route them. .summary() counts routed and SDPA calls")
            kw = dict(attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, **extra)
            if enable_gqa:
                kw["enable_gqa"] = enable_gqa
            return self._original(query, key, value, **kw)
        plan = None
        step = None
        if self.plan_cache is not None:
            n = self._ordinal
            key_id = n if self.layer is None else (self.layer if n == 0 else (self.layer, n))
            plan = self.plan_cache.layer_ref(key_id)
            # the cache's step when the call runs (a compiled graph must not bake it in)
            step = CACHE_STEP if self.step is None else self.step
        self._ordinal += 1
        self.calls += 1
        return call(query, key, value, "HND", scale, False, plan, step, self.method, self.num_threads, self.strict,
                    fallback=not self.strict, attn_mask=attn_mask)


# ---- diffusers ---------------------------------------------------------------------------------

class VcattnAttnProcessor:
    """(Prefer ``vcattn.diffusers.enable``, which needs no processor and reaches every backend.)

    A diffusers attention processor that runs another processor with SDPA routed through
    vcattn: self-attention always, cross-attention when ``cross_attention`` is True or a
    method name (e.g. ``"sage2-8bit"`` for the 512 text tokens), else with plain SDPA.

    ``base``: the processor to wrap (default: the module's own, captured by
    ``install_wan_processors``; ``diffusers.models.transformers.transformer_wan.WanAttnProcessor``
    otherwise).  ``layer_id`` keys the layer's Plan in ``plan_cache`` (default: the module's
    identity); the step comes from
    ``plan_cache.step`` (set it each denoising step, e.g. in ``callback_on_step_end``).
    ``min_seq_kv``: calls with fewer keys run plain SDPA (see ``patch_sdpa``), so even with
    ``cross_attention`` set, the 512 text tokens of Wan's cross-attention go to SDPA unless
    it is lowered.

    On diffusers >= 0.35 the wrapped processor calls ``dispatch_attention_fn``, which reaches
    SDPA (and so vcattn) only while the module's attention backend is the native one.
    """

    def __init__(self, base=None, *, layer_id=None, plan_cache: PlanCache | None = None,
                 method: str = DEFAULT_METHOD, cross_attention=False, strict: bool = False, num_threads=None,
                 min_seq_kv: int = MIN_SEQ_KV):
        method_id(method)
        if isinstance(cross_attention, str):
            method_id(cross_attention)
        self.base = base
        self.layer_id = layer_id
        self.plan_cache = plan_cache
        self.method = method
        self.cross_attention = cross_attention
        self.strict = strict
        self.num_threads = num_threads
        self.min_seq_kv = min_seq_kv

    def _base(self):
        if self.base is None:
            from diffusers.models.transformers import transformer_wan

            cls = getattr(transformer_wan, "WanAttnProcessor", None) or transformer_wan.WanAttnProcessor2_0
            self.base = cls()
        return self.base

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, rotary_emb=None,
                 *args, **kwargs):
        # attention_mask and rotary_emb are named: diffusers' Attention.forward drops every
        # keyword the processor's signature does not name (**kwargs does not count), and a
        # dropped rotary_emb would silently run the wrapped processor without RoPE
        if attention_mask is not None:
            kwargs["attention_mask"] = attention_mask
        if rotary_emb is not None:
            kwargs["rotary_emb"] = rotary_emb
        base = self._base()
        is_cross = encoder_hidden_states is not None or bool(getattr(attn, "is_cross_attention", False))
        if is_cross and not self.cross_attention:
            return base(attn, hidden_states, encoder_hidden_states, *args, **kwargs)
        method = self.cross_attention if (is_cross and isinstance(self.cross_attention, str)) else self.method
        # without a layer id, the module itself names the layer (stable across steps)
        layer = self.layer_id if self.layer_id is not None else f"{type(attn).__name__}@{id(attn):x}"
        with patch_sdpa(method, strict=self.strict, plan_cache=self.plan_cache, layer=layer,
                        num_threads=self.num_threads, min_seq_kv=self.min_seq_kv):
            return base(attn, hidden_states, encoder_hidden_states, *args, **kwargs)


def install_wan_processors(transformer, plan_cache: PlanCache | None = None, *, method: str = DEFAULT_METHOD,
                           cross_attention=False, strict: bool = False, num_threads=None,
                           min_seq_kv: int = MIN_SEQ_KV) -> int:
    """Deprecated: use ``vcattn.diffusers.enable(transformer, plan_cache=cache, ...)``, which
    covers every diffusers video transformer and attention backend.

    Wrap the processor of every attention module of a diffusers transformer (Wan:
    ``blocks.{i}.attn1`` self, ``blocks.{i}.attn2`` cross) in a VcattnAttnProcessor whose
    layer id is the module name.  Returns the number of modules wrapped."""
    import warnings

    warnings.warn("vcattn.install_wan_processors is deprecated: use vcattn.diffusers.enable(transformer, "
                  "plan_cache=...), which covers every diffusers video transformer", DeprecationWarning, stacklevel=2)
    n = 0
    for name, module in transformer.named_modules():
        if not (hasattr(module, "set_processor") and hasattr(module, "processor")):
            continue
        base = module.processor
        if isinstance(base, VcattnAttnProcessor):
            base = base.base
        module.set_processor(VcattnAttnProcessor(base, layer_id=name, plan_cache=plan_cache, method=method,
                                                 cross_attention=cross_attention, strict=strict,
                                                 num_threads=num_threads, min_seq_kv=min_seq_kv))
        n += 1
    return n
