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

yunchang and torch are imported only when a processor or module is built.  See
docs/parallel.md for what runs on the CPU (gloo) and what was tested where.
"""
from __future__ import annotations

import inspect

from ._methods import DEFAULT_METHOD, method_id
from .integration import flash_attn_forward
from .parallel import per_rank_attention_fn, vcattn_attention_fn

__all__ = ["attn_processor", "long_context_attention", "YunchangProcessor", "TESTED_YUNCHANG"]

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
