"""Sequence parallelism around vcattn: Ulysses and ring attention over torch.distributed.

A pipeline that splits its sequence over ranks puts one of these wrappers where it
calls attention; each rank passes its own sequence shard, in its own layout:

    ulysses = vcattn.parallel.UlyssesAttention(group=sp_group)         # all-to-all over heads
    ring = vcattn.parallel.RingAttention(group=sp_group)               # K/V shards round the ring
    out = ulysses(q, k, v, tensor_layout="NHD")                        # q, k, v: this rank's shard
    out, lse = ring(q, k, v, tensor_layout="HND", return_lse=True)

- **Ulysses**: q, k, v (B, H, S/P, D) are exchanged all-to-all so that each rank holds
  H/P heads over the whole sequence; the per-rank attention runs on the full sequence;
  the output goes back all-to-all to (B, H, S/P, D).  Heads must divide by P.
- **Ring**: each rank keeps its query shard; the P K/V shards travel round the ring
  (batch_isend_irecv, the next shard in flight while the current one is computed); each
  step's per-shard attention returns ``(out, lse)`` (LSE float32, natural log, (B, H, Sq))
  and the partial results are folded with ``vcattn.merge_attention`` in FP32.  With a
  V-Smooth method every shard call plans its own permutation (V-Smooth per shard).

The per-rank attention is pluggable (``attn_fn``): ``"vcattn"`` (default: ``vcattn.attention``
- the CPU simulation for CPU tensors, the Hopper kernel for CUDA tensors), ``"sdpa"``
(torch BF16/FP16 SDPA, the baseline), ``"reference"`` (vcattn's exact FP64 attention, for
tests), or any callable ``fn(q, k, v, tensor_layout, sm_scale, return_lse, plan=None,
step=None)`` that returns ``out`` or ``(out, lse)`` in vcattn's contract.

Backends: whatever the process group uses - gloo with CPU tensors, NCCL with CUDA
tensors.  torch is imported only when a wrapper is built or called.  For the hybrid of the
two (USP) and a whole Wan transformer across ranks, ``vcattn.yunchang`` puts vcattn inside
yunchang's engine instead.  See docs/parallel.md.
"""
from __future__ import annotations

from . import _fallback, _tensors
from ._lib import warn_once
from ._methods import DEFAULT_METHOD, method_id
from .core import attention, merge_attention, reference_attention
from .plan import Plan

__all__ = ["UlyssesAttention", "RingAttention", "vcattn_attention_fn", "sdpa_attention_fn",
           "reference_attention_fn", "per_rank_attention_fn", "shard_sequence", "gather_sequence"]

_VALIDATE = ("first", "always", "never")


# ---- per-rank attention functions ---------------------------------------------------------------

def vcattn_attention_fn(method: str = DEFAULT_METHOD, *, strict: bool = False, num_threads=None):
    """``vcattn.attention`` with a fixed method, in the per-rank calling convention."""
    method_id(method)  # unknown names fail when the wrapper is built

    def fn(q, k, v, tensor_layout, sm_scale, return_lse, plan=None, step=None):
        return attention(q, k, v, tensor_layout, sm_scale, return_lse, plan=plan, step=step, method=method,
                         strict=strict, num_threads=num_threads)

    fn.name = f"vcattn:{method}"
    return fn


def reference_attention_fn(*, num_threads=None):
    """vcattn's exact attention (FP64 scores, softmax and sums; output float32): for tests."""

    def fn(q, k, v, tensor_layout, sm_scale, return_lse, plan=None, step=None):
        return reference_attention(q, k, v, tensor_layout, sm_scale, return_lse, num_threads=num_threads)

    fn.name = "reference"
    return fn


def _cuda_sdpa_lse(qq, kk, vv, sm_scale, backend):
    """(out, lse (B, H, Sq) float32) from torch's own fused forward kernels, HND inputs."""
    import torch

    b, h, sq, _ = qq.shape
    if backend == "cudnn":
        res = torch.ops.aten._scaled_dot_product_cudnn_attention(qq, kk, vv, None, True, 0.0, False, False,
                                                                 scale=sm_scale)
    else:
        res = torch.ops.aten._scaled_dot_product_flash_attention(qq, kk, vv, 0.0, False, False, scale=sm_scale)
    out, lse = res[0], res[1]
    if lse is None or lse.numel() != b * h * sq:
        raise RuntimeError(f"{backend} returned no usable logsumexp")
    return out, lse.reshape(b, h, sq).float()


_SDPA_LSE_BACKENDS = ["cudnn", "flash"]


def sdpa_attention_fn():
    """torch SDPA (the baseline): without an LSE the plain ``scaled_dot_product_attention``;
    with one, on CUDA, torch's fused forward that also returns the natural-log logsumexp -
    cuDNN (``aten._scaled_dot_product_cudnn_attention``, what SDPA picks on Hopper), else
    flash attention (``aten._scaled_dot_product_flash_attention``), else exact float32
    attention (vcattn's fallback: slow, one warning); on the CPU that fallback too.  The
    output takes q's dtype; q/k are cast to v's dtype as vcattn does."""

    def fn(q, k, v, tensor_layout, sm_scale, return_lse, plan=None, step=None):
        if not return_lse or q.device.type != "cuda":
            return _fallback.attention(q, k, v, tensor_layout, sm_scale, return_lse)
        qq, kk, vv = (x.to(v.dtype) for x in (q, k, v))
        if tensor_layout == "NHD":
            qq, kk, vv = (x.transpose(1, 2) for x in (qq, kk, vv))
        for backend in list(_SDPA_LSE_BACKENDS):
            try:
                out, lse = _cuda_sdpa_lse(qq, kk, vv, sm_scale, backend)
            except Exception as e:  # dtype / head_dim / GPU / torch version the kernel refuses
                warn_once(("parallel-sdpa", backend), f"vcattn.parallel: torch's {backend} attention with LSE "
                          f"refused the call ({str(e).splitlines()[0] if str(e) else type(e).__name__})")
                continue
            if tensor_layout == "NHD":
                out = out.transpose(1, 2)
            return out.to(q.dtype), lse
        warn_once(("parallel-sdpa", "slow"), "vcattn.parallel: using exact float32 attention for the LSE (slow)")
        return _fallback.attention(q, k, v, tensor_layout, sm_scale, True)

    fn.name = "sdpa"
    return fn


def per_rank_attention_fn(attn_fn=None, method: str = DEFAULT_METHOD):
    """The per-rank function that ``attn_fn`` names: None / "vcattn" (``method``), "sdpa",
    "reference", or a callable in the per-rank convention (returned as it is)."""
    if attn_fn is None or attn_fn == "vcattn":
        return vcattn_attention_fn(method)
    if attn_fn == "sdpa":
        return sdpa_attention_fn()
    if attn_fn == "reference":
        return reference_attention_fn()
    if callable(attn_fn):
        return attn_fn
    raise ValueError(f"vcattn.parallel: attn_fn must be 'vcattn', 'sdpa', 'reference' or a callable, got {attn_fn!r}")


# ---- process group and argument checks ---------------------------------------------------------

def _dist():
    try:
        import torch.distributed as dist
    except ImportError as e:  # pragma: no cover - torch without distributed
        raise ImportError("vcattn.parallel needs torch with torch.distributed") from e
    if not dist.is_available():
        raise RuntimeError("vcattn.parallel: this torch build has no torch.distributed")
    return dist


class _GroupInfo:
    def __init__(self, group):
        dist = _dist()
        if not dist.is_initialized():
            raise RuntimeError("vcattn.parallel: torch.distributed is not initialized "
                               "(call torch.distributed.init_process_group first)")
        self.group = group
        self.size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        if self.rank < 0:
            raise RuntimeError("vcattn.parallel: this process is not a member of the group")
        self.backend = str(dist.get_backend(group)).lower()

    def global_rank(self, group_rank):
        dist = _dist()
        if self.group is None:
            return group_rank
        get = getattr(dist, "get_global_rank", None) or getattr(dist.distributed_c10d, "_get_global_rank")
        return get(self.group, group_rank)


_DTYPE_CODES = {"float32": 0, "float16": 1, "bfloat16": 2, "float64": 3}


def _check_local(q, k, v, layout, gi: _GroupInfo, who):
    """Checks on this rank's tensors; returns (B, H, Sq_local, Skv_local, D)."""
    _tensors.check_layout(layout)
    for x, n in ((q, "q"), (k, "k"), (v, "v")):
        if not _tensors.is_torch(x):
            raise TypeError(f"vcattn.{who}: {n} must be a torch.Tensor (sequence parallelism runs over "
                            f"torch.distributed), got {type(x).__name__}")
        _tensors.check_dtype(x, n)
    devs = {str(x.device) for x in (q, k, v)}
    if len(devs) > 1:
        raise ValueError(f"vcattn.{who}: q, k, v are on different devices: {sorted(devs)}")
    dev = q.device
    if gi.backend == "nccl" and dev.type != "cuda":
        raise ValueError(f"vcattn.{who}: the process group uses NCCL, which needs CUDA tensors; got {dev} "
                         "(use a gloo group for CPU tensors)")
    if gi.backend == "gloo" and dev.type != "cpu":
        raise ValueError(f"vcattn.{who}: the process group uses gloo; pass CPU tensors or use an NCCL group "
                         f"for {dev} tensors")
    (bq, hq, sq, dq) = _tensors.bhsd(q, layout, "q")
    (bk, hk, sk, dk) = _tensors.bhsd(k, layout, "k")
    (bv, hv, sv, dv) = _tensors.bhsd(v, layout, "v")
    if not (bq == bk == bv) or not (hq == hk == hv) or not (dq == dk == dv) or sk != sv:
        raise ValueError(f"vcattn.{who}: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} do not "
                         f"agree in B, H, D (and k, v in their sequence length) for tensor_layout={layout!r}")
    for x, n in ((q, "q"), (k, "k"), (v, "v")):
        _tensors.check_last_dim(x, n)
    return bq, hq, sq, sk, dq


def _check_across_ranks(seen, validate, gi: _GroupInfo, sig, who, device):
    """All ranks must call with the same (layout, B, H, Sq_local, Skv_local, D, dtypes): otherwise
    the collectives would hang or mix shards.  One small all_gather, on the first call with a
    given signature ('first'), on every call ('always') or never."""
    if validate == "never" or gi.size == 1 or (validate == "first" and sig in seen):
        return
    import torch

    dist = _dist()
    mine = torch.tensor(sig, dtype=torch.int64, device=device)
    allsig = [torch.empty_like(mine) for _ in range(gi.size)]
    dist.all_gather(allsig, mine, group=gi.group)
    rows = [tuple(int(x) for x in t.cpu().tolist()) for t in allsig]
    if any(r != rows[0] for r in rows):
        desc = "; ".join(f"rank {i}: B,H,Sq,Skv,D = {r[1:6]}, dtypes {r[6:]}" for i, r in enumerate(rows))
        raise ValueError(f"vcattn.{who}: the ranks' local shards differ ({desc}). Every rank must pass "
                         "equal shards: split the sequence into world_size equal parts "
                         "(vcattn.parallel.shard_sequence; pad the sequence when it does not divide)")
    seen.add(sig)


def _signature(layout, shape5, q, k, v):
    return (0 if layout == "HND" else 1,) + tuple(int(s) for s in shape5) + tuple(
        _DTYPE_CODES.get(_tensors.dtype_name(x), 9) for x in (q, k, v))


def _seq_axis(layout):
    return 2 if layout == "HND" else 1


# ---- sharding helpers ---------------------------------------------------------------------------

def shard_sequence(x, group=None, tensor_layout: str = "HND"):
    """This rank's equal part of a full (B, H, S, D) / (B, S, H, D) tensor (a contiguous copy).
    Raises ValueError when S does not divide by the group's size."""
    _tensors.check_layout(tensor_layout)
    gi = _GroupInfo(group)
    ax = _seq_axis(tensor_layout)
    s = x.shape[ax]
    if s % gi.size:
        raise ValueError(f"vcattn.shard_sequence: sequence length {s} does not divide by the world size "
                         f"{gi.size}; pad it to a multiple of {gi.size}")
    n = s // gi.size
    return x.narrow(ax, gi.rank * n, n).contiguous()


def gather_sequence(x_local, group=None, tensor_layout: str = "HND"):
    """The full tensor from every rank's equal shard (all_gather, concatenated along the sequence).
    (B, H, S/P) LSE tensors work too: their sequence axis is the last one."""
    import torch

    _tensors.check_layout(tensor_layout)
    gi = _GroupInfo(group)
    ax = x_local.dim() - 1 if x_local.dim() == 3 else _seq_axis(tensor_layout)
    parts = [torch.empty_like(x_local.contiguous()) for _ in range(gi.size)]
    _dist().all_gather(parts, x_local.contiguous(), group=gi.group)
    return torch.cat(parts, dim=ax)


# ---- Ulysses ---------------------------------------------------------------------------------------

def _a2a(send, gi: _GroupInfo):
    """all_to_all_single over dim 0 (P equal chunks): chunk j goes to rank j, chunk j of the
    result came from rank j."""
    import torch

    recv = torch.empty_like(send)
    _dist().all_to_all_single(recv, send, group=gi.group)
    return recv


def _to_heads_view(x, layout, p):
    """(B, H, Sl, D) / (B, Sl, H, D) -> a (P, B, ...) view whose chunk j holds head group j."""
    if layout == "HND":
        b, h, sl, d = x.shape
        return x.reshape(b, p, h // p, sl, d).permute(1, 0, 2, 3, 4)        # (P, B, Hp, Sl, D)
    b, sl, h, d = x.shape
    return x.reshape(b, sl, p, h // p, d).permute(2, 0, 1, 3, 4)            # (P, B, Sl, Hp, D)


def _from_seq_chunks(r, layout):
    """(P, B, ...) received by sequence shard -> (B, Hp, S, D) / (B, S, Hp, D)."""
    p = r.shape[0]
    if layout == "HND":
        _, b, hp, sl, d = r.shape
        return r.permute(1, 2, 0, 3, 4).reshape(b, hp, p * sl, d)
    _, b, sl, hp, d = r.shape
    return r.permute(1, 0, 2, 3, 4).reshape(b, p * sl, hp, d)


def _to_seq_view(y, layout, p):
    """(B, Hp, S, D) / (B, S, Hp, D) -> a (P, B, ...) view whose chunk j holds sequence shard j."""
    if layout == "HND":
        b, hp, s, d = y.shape
        return y.reshape(b, hp, p, s // p, d).permute(2, 0, 1, 3, 4)        # (P, B, Hp, Sl, D)
    b, s, hp, d = y.shape
    return y.reshape(b, p, s // p, hp, d).permute(1, 0, 2, 3, 4)            # (P, B, Sl, Hp, D)


def _from_head_chunks(r, layout):
    """(P, B, ...) received by head group -> (B, H, Sl, D) / (B, Sl, H, D)."""
    p = r.shape[0]
    if layout == "HND":
        _, b, hp, sl, d = r.shape
        return r.permute(1, 0, 2, 3, 4).reshape(b, p * hp, sl, d)
    _, b, sl, hp, d = r.shape
    return r.permute(1, 2, 0, 3, 4).reshape(b, sl, p * hp, d)


class _SequenceParallel:
    """What the two sequence-parallel wrappers share: the process group, the per-rank
    attention function and the cross-rank validation policy (its signatures seen so far)."""

    def __init__(self, group=None, attn_fn=None, *, method: str = DEFAULT_METHOD, validate: str = "first"):
        if validate not in _VALIDATE:
            raise ValueError(f"vcattn.{type(self).__name__}: validate must be one of {_VALIDATE}, got {validate!r}")
        self.group = group
        self.attn_fn = per_rank_attention_fn(attn_fn, method)
        self.validate = validate
        self._seen = set()


class UlyssesAttention(_SequenceParallel):
    """Ulysses sequence parallelism (all-to-all over heads) around a per-rank attention.

        attn = UlyssesAttention(group=None, attn_fn="vcattn", method="vsmooth-expcast-8bit")
        out = attn(q, k, v, tensor_layout="HND", sm_scale=None, return_lse=False, plan=None, step=None)

    q, k, v: this rank's sequence shard, (B, H, S/P, D) for "HND" or (B, S/P, H, D) for "NHD";
    every rank passes the same local shape (H divisible by the group size P).  The per-rank
    call sees (B, H/P, S, D): H/P heads over the whole sequence, so V-Smooth plans and groups
    over the full sequence exactly as a single-GPU call does.  ``plan`` / ``step`` go to that
    call (a ``vcattn.Plan`` per layer: its permutation is (B, H/P, S)).  Returns this rank's
    shard of the output in q's layout and dtype (and, with return_lse, its (B, H, S/P) float32 LSE).

    ``validate``: 'first' (default) checks once per local signature that all ranks pass the same
    shapes and dtypes (one small all_gather), 'always' on every call, 'never' not at all.
    """

    def __call__(self, q, k, v, tensor_layout: str = "HND", sm_scale=None, return_lse: bool = False, plan=None,
                 step=None):
        import torch

        gi = _GroupInfo(self.group)
        shape5 = _check_local(q, k, v, tensor_layout, gi, "UlyssesAttention")
        h = shape5[1]
        if h % gi.size:
            raise ValueError(f"vcattn.UlyssesAttention: {h} heads do not divide by the world size {gi.size} "
                             "(Ulysses gives each rank H/P heads; use RingAttention, or a group whose size "
                             "divides the head count)")
        _check_across_ranks(self._seen, self.validate, gi, _signature(tensor_layout, shape5, q, k, v),
                            "UlyssesAttention", q.device)
        p = gi.size
        kw = {} if plan is None and step is None else dict(plan=plan, step=step)
        if p == 1:
            return self.attn_fn(q, k, v, tensor_layout, sm_scale, return_lse, **kw)
        # sequence shards -> head groups; q, k, v in one exchange when they can share a buffer
        if q.dtype == k.dtype == v.dtype and q.shape == k.shape == v.shape:
            r = _a2a(torch.stack([_to_heads_view(x, tensor_layout, p) for x in (q, k, v)], dim=1), gi)
            qh, kh, vh = (_from_seq_chunks(r[:, i], tensor_layout) for i in range(3))
        else:
            qh, kh, vh = (_from_seq_chunks(_a2a(_to_heads_view(x, tensor_layout, p).contiguous(), gi),
                                           tensor_layout) for x in (q, k, v))
        res = self.attn_fn(qh, kh, vh, tensor_layout, sm_scale, return_lse, **kw)
        out, lse = res if return_lse else (res, None)
        # head groups -> sequence shards
        out = _from_head_chunks(_a2a(_to_seq_view(out, tensor_layout, p).contiguous(), gi), tensor_layout)
        if out.dtype != q.dtype:
            out = out.to(q.dtype)
        if not return_lse:
            return out
        b, hp, s = lse.shape
        lr = _a2a(lse.reshape(b, hp, p, s // p).permute(2, 0, 1, 3).contiguous(), gi)   # (P, B, Hp, Sl)
        lse = lr.permute(1, 0, 2, 3).reshape(b, p * hp, s // p)
        return out, lse


# ---- ring ------------------------------------------------------------------------------------------

def _f32(x):
    import torch

    return x if x.dtype == torch.float32 else x.float()


class RingAttention(_SequenceParallel):
    """Ring attention: K/V shards travel round the ring, partial results merge by their LSE.

        attn = RingAttention(group=None, attn_fn="vcattn", method="vsmooth-expcast-8bit")
        out = attn(q, k, v, tensor_layout="HND", sm_scale=None, return_lse=False, plan=None, step=None)

    q: this rank's query shard, k, v: its K/V shard ((B, H, S/P, D) "HND" or (B, S/P, H, D)
    "NHD"; equal shapes on every rank; q and k/v shards may differ in length).  Step t
    (t = 0 .. P-1) computes the local queries against the K/V shard of rank (rank - t) mod P
    with the per-rank function, which returns (out, lse); while it runs, that shard is sent to
    rank + 1 and the next one received from rank - 1 (batch_isend_irecv).  The partial results
    are folded in that order with ``vcattn.merge_attention`` in FP32.

    V-Smooth is per shard: each shard call plans its own permutation over its S/P tokens.
    ``plan``: None (each call groups its shard), or a sequence of P plans indexed by the rank
    that owns the K/V shard (e.g. ``[cache.layer((name, j)) for j in range(P)]``), each a
    ``vcattn.Plan`` or a (B, H, S/P) permutation; ``step`` goes to every call.

    Returns this rank's output shard in q's layout and dtype (with return_lse also its
    (B, H, Sq/P) float32 natural-log LSE over the whole key sequence).  ``validate`` as in
    UlyssesAttention.
    """

    def __call__(self, q, k, v, tensor_layout: str = "HND", sm_scale=None, return_lse: bool = False, plan=None,
                 step=None):
        import torch

        dist = _dist()
        gi = _GroupInfo(self.group)
        shape5 = _check_local(q, k, v, tensor_layout, gi, "RingAttention")
        p, rank = gi.size, gi.rank
        if plan is not None:
            if isinstance(plan, Plan) or _tensors.is_torch(plan) or hasattr(plan, "dtype"):
                raise ValueError("vcattn.RingAttention: plan must be a sequence of world_size plans, one per "
                                 "K/V shard (indexed by the rank that owns the shard): each shard has its own "
                                 "V-Smooth permutation")
            plan = list(plan)
            if len(plan) != p:
                raise ValueError(f"vcattn.RingAttention: {len(plan)} plans for a ring of {p} shards")
        _check_across_ranks(self._seen, self.validate, gi, _signature(tensor_layout, shape5, q, k, v),
                            "RingAttention", q.device)

        def kw(src):
            if plan is None and step is None:
                return {}
            return dict(plan=None if plan is None else plan[src], step=step)

        if p == 1:  # one shard: nothing to merge, no LSE unless asked for
            return self.attn_fn(q, k, v, tensor_layout, sm_scale, return_lse, **kw(0))

        packed = k.dtype == v.dtype and k.shape == v.shape
        cur = [torch.stack((k, v))] if packed else [k.contiguous(), v.contiguous()]
        nxt_peer, prv_peer = gi.global_rank((rank + 1) % p), gi.global_rank((rank - 1) % p)
        out = lse = None
        for t in range(p):
            reqs = None
            if t < p - 1:
                nxt = [torch.empty_like(x) for x in cur]
                ops = [dist.P2POp(dist.isend, x, nxt_peer, gi.group) for x in cur]
                ops += [dist.P2POp(dist.irecv, x, prv_peer, gi.group) for x in nxt]
                reqs = dist.batch_isend_irecv(ops)
            kk, vv = (cur[0][0], cur[0][1]) if packed else (cur[0], cur[1])
            o, l = self.attn_fn(q, kk, vv, tensor_layout, sm_scale, True, **kw((rank - t) % p))
            if out is None:
                out, lse = _f32(o), _f32(l)
            else:
                out, lse = merge_attention(out, lse, _f32(o), _f32(l), tensor_layout)
            if reqs is not None:
                for r in reqs:
                    r.wait()
                cur = nxt
        out = out.to(q.dtype)
        return (out, lse) if return_lse else out
