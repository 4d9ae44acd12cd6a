"""vcattn as the per-rank attention of yunchang's USP engine (``yunchang.LongContextAttention``).

yunchang (https://github.com/feifeibear/long-context-attention) runs Ulysses, ring and the
hybrid of the two (USP: ``ulysses_degree x ring_degree`` ranks, set up once per process with
``yunchang.set_seq_parallel_pg``).  Its "basic" ring calls one forward per ring step and
folds the partial results by their LSE; this module supplies that forward:

    import yunchang, vcattn.yunchang as vy
    yunchang.set_seq_parallel_pg(ulysses_degree, ring_degree, rank, world_size)
    attn = vy.long_context_attention(method="vsmooth-expcast-8bit")    # a yunchang module
    out_l = attn(q_l, k_l, v_l)                  # (B, S/P, H, D): this rank's sequence shard

    proc = vy.attn_processor(method="vsmooth-8bit")                     # the per-step forward
    out, lse = proc(q, k, v, softmax_scale=None)  # (B, S, H, D) in, lse (B, H, S) float32

The per-step contract (yunchang's ``fwd-only`` stage): q, k, v (B, S, H, D) ("NHD"), keyword
arguments ``dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
return_softmax``; returns ``(out (B, S, H, D) in q's dtype, lse (B, H, S) float32, natural
log)``, what yunchang's ``update_out_and_lse`` folds.  vcattn's LSE is that of the original
scores (K smoothing and ExpCast's scale are undone), so shards merge exactly.

``parallelize_wan`` runs a diffusers Wan transformer with its video tokens split over
yunchang's ranks.  yunchang is imported only when a module is built or a transformer
parallelized, torch only when tensors arrive.  See docs/parallel.md for what runs on the CPU
(gloo) and what was tested where.
"""
from __future__ import annotations

import inspect
import threading

from ._methods import DEFAULT_METHOD, method_id
from .integration import VcattnAttnProcessor, flash_attn_forward
from .parallel import per_rank_attention_fn, vcattn_attention_fn

__all__ = ["attn_processor", "long_context_attention", "YunchangProcessor", "parallelize_wan", "WanSequenceParallel",
           "TESTED_YUNCHANG"]

TESTED_YUNCHANG = "0.6.4"  # the version CI installs (.ci/run) and the tests run against

# yunchang's ring implementations that hand each step to ``attn_processor``: only "basic".
# "zigzag" and "strip" are causal load-balancing schemes that call their kernels directly,
# "basic_pytorch" always calls torch SDPA, "basic_flashinfer" / "basic_npu" their own kernels.
_RING_IMPLS = ("basic",)


def _yunchang():
    """The yunchang package, or an ImportError that says what to install."""
    try:
        import yunchang
    except ImportError as e:
        raise ImportError(f"vcattn.yunchang needs the yunchang package: pip install yunchang=={TESTED_YUNCHANG} "
                          "(it imports torch and triton; the PyPI torch wheels bring triton along)") from e
    params = inspect.signature(yunchang.LongContextAttention.__init__).parameters
    if "attn_processor" not in params:
        raise ImportError(f"yunchang {getattr(yunchang, '__version__', '?')} has no attn_processor argument in "
                          f"LongContextAttention, which vcattn plugs into; install yunchang=={TESTED_YUNCHANG}")
    return yunchang


class YunchangProcessor:
    """yunchang's per-step forward (``fwd-only``) over a vcattn per-rank function.

    Calls without the features vcattn lacks go to the per-rank function (``attn_fn``, in
    ``vcattn.parallel``'s convention: "vcattn" with ``method``, "reference", "sdpa" or a
    callable).  Calls with them (causal, a local window, softcap, dropout, ALiBi) go to
    ``vcattn.flash_attn_forward``, the one place that decides: exact float32 fallback with
    one warning for causal / window / softcap (``strict=True`` raises ``VcattnError``),
    ValueError for dropout and ALiBi.  The processor keeps no state between calls: every ring
    step plans its own V-Smooth grouping over the keys it sees.
    """

    def __init__(self, method: str = DEFAULT_METHOD, attn_fn=None, *, strict: bool = False, num_threads=None):
        method_id(method)  # unknown names fail here, not at the first ring step on every rank
        self.method = method
        self.strict = strict
        self.num_threads = num_threads
        if attn_fn is None or attn_fn == "vcattn":
            self.fn = vcattn_attention_fn(method, strict=strict, num_threads=num_threads)
        else:
            self.fn = per_rank_attention_fn(attn_fn, method)
        self.name = getattr(self.fn, "name", getattr(self.fn, "__name__", "callable"))

    def __call__(self, q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                 alibi_slopes=None, return_softmax=False):
        window = (-1, -1) if window_size is None else tuple(int(w) for w in window_size)
        if dropout_p or causal or window != (-1, -1) or softcap or alibi_slopes is not None or return_softmax:
            return flash_attn_forward(q, k, v, dropout_p, softmax_scale, causal, window, softcap, alibi_slopes,
                                      return_softmax=return_softmax, method=self.method, strict=self.strict,
                                      num_threads=self.num_threads)
        res = self.fn(q, k, v, "NHD", softmax_scale, True)
        if not (isinstance(res, tuple) and len(res) == 2):
            raise TypeError(f"vcattn.yunchang: the per-rank function {self.name!r} must return (out, lse) when "
                            f"asked for the LSE, got {type(res).__name__}")
        return res

    def __repr__(self):
        return f"vcattn.yunchang.YunchangProcessor({self.name})"


def attn_processor(method: str = DEFAULT_METHOD, attn_fn=None, *, strict: bool = False,
                   num_threads=None) -> YunchangProcessor:
    """The per-step forward to pass as ``attn_processor`` to yunchang's ring functions and
    ``LongContextAttention`` (with ``attn_type=None``; see ``long_context_attention``)."""
    return YunchangProcessor(method, attn_fn, strict=strict, num_threads=num_threads)


def long_context_attention(method: str = DEFAULT_METHOD, attn_fn=None, *, ring_impl_type: str = "basic",
                           use_sync: bool = False, strict: bool = False, num_threads=None):
    """A ``yunchang.LongContextAttention`` whose per-rank attention is vcattn.

    Call ``yunchang.set_seq_parallel_pg(ulysses_degree, ring_degree, rank, world_size)`` first
    (it builds the Ulysses and ring groups the module reads).  The module's call is yunchang's:
    ``attn(q, k, v, softmax_scale=None)`` with this rank's (B, S/P, H, D) shard of the
    sequence (chunk ``rank`` of P equal chunks); H must divide by the Ulysses degree.  It
    returns this rank's output shard; yunchang drops the LSE (for the LSE of a ring, call
    ``yunchang.ring_flash_attn_func(..., return_attn_probs=True, attn_type=None,
    attn_processor=attn_processor(...))``).  Forward only: yunchang's backward has no
    processor hook.  ``use_sync`` is yunchang's (a CUDA synchronize after each all-to-all).
    """
    yunchang = _yunchang()
    if ring_impl_type not in _RING_IMPLS:
        raise ValueError(f"vcattn.yunchang: ring_impl_type={ring_impl_type!r} does not call a per-step processor "
                         f"in yunchang (only {_RING_IMPLS} does); use ring_impl_type='basic'")
    from yunchang.globals import PROCESS_GROUP

    if PROCESS_GROUP.ULYSSES_PG is None and PROCESS_GROUP.RING_PG is None:
        raise RuntimeError("vcattn.yunchang: yunchang's sequence-parallel groups are not set up; call "
                           "yunchang.set_seq_parallel_pg(ulysses_degree, ring_degree, rank, world_size) after "
                           "torch.distributed.init_process_group")
    proc = attn_processor(method, attn_fn, strict=strict, num_threads=num_threads)
    # attn_type=None: yunchang's select_flash_attn_impl returns attn_processor only when the
    # attn_type names none of its built-in kernels, and AttnType is a closed Enum (no member
    # can be registered), so None is the value that selects the processor.
    return yunchang.LongContextAttention(ring_impl_type=ring_impl_type, use_sync=use_sync, attn_type=None,
                                         attn_processor=proc)


# ---- a diffusers Wan transformer across ranks ------------------------------------------------------

_sdpa_lock = threading.RLock()


def _sp_layout():
    """(chunk index of this rank, sequence-parallel size, [(group, size)] to gather over) from
    yunchang's groups.  Chunk c = ring_rank * U + ulysses_rank: the Ulysses group's U chunks
    form ring block ring_rank.  Non-causal attention does not care which tokens a rank holds,
    only that every rank is consistent, so this serves both of yunchang's group layouts."""
    import torch.distributed as dist

    _yunchang()
    from yunchang.globals import PROCESS_GROUP

    if not dist.is_initialized():
        raise RuntimeError("vcattn.yunchang: torch.distributed is not initialized (call init_process_group first)")
    if PROCESS_GROUP.ULYSSES_PG is None or PROCESS_GROUP.RING_PG is None:
        raise RuntimeError("vcattn.yunchang: yunchang's sequence-parallel groups are not set up; call "
                           "yunchang.set_seq_parallel_pg(ulysses_degree, ring_degree, rank, world_size) first")
    ug, rg = PROCESS_GROUP.ULYSSES_PG, PROCESS_GROUP.RING_PG
    u, r = dist.get_world_size(ug), dist.get_world_size(rg)
    return dist.get_rank(rg) * u + dist.get_rank(ug), u * r, [(ug, u), (rg, r)]


class _SelfAttentionProcessor:
    """Runs the module's own processor with SDPA swapped for yunchang's USP attention: the
    processor's projections, norms and RoPE run on this rank's tokens; its one SDPA call
    (B, H, S/P, D) becomes LongContextAttention on (B, S/P, H, D)."""

    def __init__(self, base, attention, ulysses):
        self.base = base
        self.attention = attention
        self.ulysses = ulysses

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, rotary_emb=None,
                 *args, **kwargs):
        # named like diffusers' processors: Attention.forward drops keywords a processor's
        # signature does not name, and a dropped rotary_emb would run without RoPE
        if encoder_hidden_states is not None or attention_mask is not None:
            raise ValueError("vcattn.yunchang.parallelize_wan: the self-attention got encoder_hidden_states or an "
                             "attention_mask; only Wan's unmasked self-attention (attn1) runs across ranks")
        import torch.nn.functional as F

        usp = self.attention
        calls = []

        def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False,
                 **extra):
            # enable_gqa: newer diffusers pass enable_gqa=False on every call; equal head counts
            # (what Wan has) make it a no-op either way
            if enable_gqa and not (query.shape[1] == key.shape[1] == value.shape[1]):
                raise ValueError("vcattn.yunchang.parallelize_wan: grouped-query attention (fewer K/V heads "
                                 "than query heads) does not run across ranks")
            if attn_mask is not None or dropout_p or is_causal or extra:
                raise ValueError("vcattn.yunchang.parallelize_wan: the self-attention's SDPA call has a mask, "
                                 "dropout, is_causal or other arguments that USP attention does not take")
            if query.shape[1] % self.ulysses:
                raise ValueError(f"vcattn.yunchang.parallelize_wan: {query.shape[1]} heads do not divide by the "
                                 f"Ulysses degree {self.ulysses}; pick a ulysses_degree that divides the head count "
                                 "in set_seq_parallel_pg (and put the rest in the ring degree)")
            calls.append(1)
            out = usp(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), softmax_scale=scale)
            return out.transpose(1, 2)

        with _sdpa_lock:  # process-wide while the processor runs, as vcattn.patch_sdpa
            original = F.scaled_dot_product_attention
            F.scaled_dot_product_attention = sdpa
            try:
                out = self.base(attn, hidden_states, None, None, rotary_emb, *args, **kwargs)
            finally:
                F.scaled_dot_product_attention = original
        if not calls:
            # the processor attended without F.scaled_dot_product_attention: over this rank's
            # tokens only, which would be silently wrong
            raise RuntimeError(f"vcattn.yunchang.parallelize_wan: the self-attention processor "
                               f"{type(self.base).__name__} did not call torch.nn.functional."
                               "scaled_dot_product_attention, so its attention cannot run across ranks; use "
                               "diffusers' Wan processor (tested with diffusers 0.34.0 and 0.42.1)")
        return out


class WanSequenceParallel:
    """What ``parallelize_wan`` installed (hooks and processors); ``remove()`` undoes it."""

    def __init__(self, transformer, attention):
        import torch

        blocks = getattr(transformer, "blocks", None)
        if not isinstance(blocks, torch.nn.ModuleList) or len(blocks) == 0 or not all(
                hasattr(b, "attn1") and hasattr(b.attn1, "set_processor") for b in blocks):
            raise TypeError("vcattn.yunchang.parallelize_wan: expected a diffusers WanTransformer3DModel "
                            "(a .blocks ModuleList whose blocks have an attn1 attention module)")
        for i, block in enumerate(blocks):
            if isinstance(block.attn1.processor, VcattnAttnProcessor):
                # it would swap SDPA for vcattn on the local tokens inside our swap: attention
                # over this rank's keys only, silently wrong
                raise ValueError(f"vcattn.yunchang.parallelize_wan: blocks.{i}.attn1 already has a "
                                 "vcattn.VcattnAttnProcessor (install_wan_processors); call parallelize_wan on "
                                 "the transformer first (its USP attention runs vcattn per rank already)")
        self.attention = attention
        self.chunk, self.size, self.gather_groups = _sp_layout()
        self._handles = []
        self._processors = []
        for block in blocks:
            self._handles.append(block.register_forward_pre_hook(self._shard_inputs))
            base = block.attn1.processor
            self._processors.append((block.attn1, base))
            block.attn1.set_processor(_SelfAttentionProcessor(base, attention, self.gather_groups[0][1]))
        self._handles.append(blocks[-1].register_forward_hook(self._gather_output))

    def _take(self, x, dim):
        n = x.shape[dim]
        if n % self.size:
            raise ValueError(f"vcattn.yunchang.parallelize_wan: {n} tokens do not divide by the {self.size} "
                             "sequence-parallel ranks; choose a frame count and resolution whose latent token "
                             "count divides (or pad the latents)")
        m = n // self.size
        return x.narrow(dim, self.chunk * m, m).contiguous()

    @staticmethod
    def _rope_parts(rope):
        """[(tensor, its sequence dim)] of Wan's rotary embedding, in either of diffusers' forms:
        one complex tensor (1, 1, S, D/2) (diffusers <= 0.34) or a (cos, sin) tuple of
        (1, S, 1, D) tensors (later releases)."""
        if isinstance(rope, (tuple, list)):
            if len(rope) == 0 or not all(hasattr(t, "shape") and t.dim() == 4 for t in rope):
                raise TypeError("vcattn.yunchang.parallelize_wan: expected Wan's rotary embedding as a (cos, sin) "
                                "tuple of 4-D (1, S, 1, D) tensors, got "
                                f"{[tuple(getattr(t, 'shape', ())) or type(t).__name__ for t in rope]}")
            return [(t, 1) for t in rope]
        if not (hasattr(rope, "shape") and rope.dim() == 4):
            raise TypeError("vcattn.yunchang.parallelize_wan: expected Wan's rotary embedding as a 4-D "
                            f"(1, 1, S, D/2) tensor or a (cos, sin) tuple, got {type(rope).__name__}")
        return [(rope, 2)]

    def _shard_inputs(self, module, args):
        # WanTransformer3DModel calls block(hidden_states, encoder_hidden_states, timestep_proj,
        # rotary_emb): rotary_emb always covers the whole sequence - a (1, 1, S, D/2) tensor up to
        # diffusers 0.34, a (cos, sin) tuple of (1, S, 1, D) after - and the hidden states do on
        # the first block only (later blocks get this rank's chunk back)
        if len(args) != 4:
            raise TypeError("vcattn.yunchang.parallelize_wan: a Wan block was called with "
                            f"{len(args)} positional arguments; expected (hidden_states, encoder_hidden_states, "
                            "timestep_proj, rotary_emb) as diffusers' WanTransformer3DModel passes them")
        hidden, text, temb, rope = args
        parts = self._rope_parts(rope)
        full = parts[0][0].shape[parts[0][1]]
        if any(t.shape[d] != full for t, d in parts):
            raise ValueError("vcattn.yunchang.parallelize_wan: the rotary embedding's parts cover different "
                             f"sequence lengths {[t.shape[d] for t, d in parts]}")
        if temb.dim() != 3:
            raise ValueError("vcattn.yunchang.parallelize_wan: per-token timestep embeddings (timestep_proj "
                             f"{tuple(temb.shape)}) are not split across ranks; only (B, 6, dim) is supported")
        if hidden.shape[1] == full:
            hidden = self._take(hidden, 1)
        elif hidden.shape[1] * self.size != full:
            raise ValueError(f"vcattn.yunchang.parallelize_wan: a Wan block got {hidden.shape[1]} tokens; expected "
                             f"the whole sequence ({full}, the rotary embedding's length) or this rank's "
                             f"{full // self.size}")
        shards = [self._take(t, d) for t, d in parts]
        return hidden, text, temb, (type(rope)(shards) if isinstance(rope, (tuple, list)) else shards[0])

    def _gather_output(self, module, args, out):
        import torch
        import torch.distributed as dist

        for group, n in self.gather_groups:  # Ulysses group first: chunk c = ring_rank * U + ulysses_rank
            if n > 1:
                parts = [torch.empty_like(out) for _ in range(n)]
                dist.all_gather(parts, out.contiguous(), group=group)
                out = torch.cat(parts, dim=1)
        return out

    def remove(self):
        for h in self._handles:
            h.remove()
        for module, base in self._processors:
            module.set_processor(base)
        self._handles, self._processors = [], []


def parallelize_wan(transformer, attention=None, *, method: str = DEFAULT_METHOD, attn_fn=None,
                    strict: bool = False, num_threads=None) -> WanSequenceParallel:
    """Run a diffusers ``WanTransformer3DModel`` with its sequence split over yunchang's ranks.

    After ``yunchang.set_seq_parallel_pg(...)``, every rank calls this on its copy of the
    transformer (same weights) and then runs the pipeline as usual, with the same inputs on
    every rank.  Before the first block each rank keeps its chunk of the video tokens (and of
    the rotary embedding); each block's self-attention (attn1) runs through ``attention``
    (default: ``long_context_attention(method=..., attn_fn=...)``, vcattn per rank); the
    cross-attention to the text, the feed-forward and the norms run on the local tokens; after
    the last block the chunks are gathered, so the output (and everything after the blocks)
    is the whole latent on every rank.  Inference only.  ``remove()`` on the result undoes it.
    """
    if attention is None:
        attention = long_context_attention(method, attn_fn, strict=strict, num_threads=num_threads)
    return WanSequenceParallel(transformer, attention)
