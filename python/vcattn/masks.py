"""Attention masks that vcattn runs: a per-batch valid *prefix*, read as lengths.

A key-padding mask keeps, in each batch element, the first ``kv_len`` keys; a joint mask
(HunyuanVideo-1.5: ``valid[b, i] & valid[b, j]`` over [video; text] with the padding last)
also keeps only the first ``q_len`` query rows.  Such a mask is two lengths per batch element,
and vcattn runs each batch element as the unpadded problem of those lengths (C:
``q_lens`` / ``kv_lens``, include/vcattn.h "Valid lengths"): the valid rows are bit-identical to
the call on the valid tokens alone, and rows without a valid key are zeros (LSE -inf), as
torch SDPA writes them.

Recognised: boolean masks (True = takes part) and additive float masks whose entries are
only 0 (takes part) and -inf (masked), of any shape that broadcasts to (B, H, Sq, Skv); a
mask repeated per head (diffusers' ``prepare_attention_mask``) must give every head the same
lengths.  Anything else - a pattern that is not a prefix, a bias, heads with different
masks - is not a set of lengths, and ``lengths`` says why.

Reading a mask: the candidate lengths from row 0 and column 0, then one pass that compares the
whole mask with the candidate (``_prefix``: a boolean mask is read once as bytes, 1 byte per
entry, by min / max reductions that make no temporaries; an additive one is read in its own
dtype) and two host synchronizations (the lengths decide the launch), so it is done eagerly,
never while torch.compile traces.  Only a mask that is not a prefix pays for the row and column
sums (int32 slabs, ~13 bytes of traffic per entry), which say why.  The answer for the last
mask tensor is kept, for that tensor object only: a model that hands every block the same mask
reads it once per forward pass, but HunyuanVideo-1.5's processor (diffusers 0.42) builds a new
(B, 1, S, S) mask in every attention call, so each block reads its own (once: the router's
check and the call share the kept answer).  Only a torch tensor's answer is kept, and only
while its identity, shape, strides, dtype and version counter (bumped by in-place writes) are
unchanged; a numpy array or a tensor made under torch.inference_mode (no version counter) is
read at every call.

The joint mask of a padding vector that was never built (``vcattn.deferred_mask``: what
``vcattn.diffusers`` hands HunyuanVideo-1.5's processor instead of its padding mask) is read
from the vector alone: B x S entries, one host synchronization.
"""
from __future__ import annotations

import weakref

import numpy as np

from . import _tensors

__all__ = ["Lengths", "lengths"]


class Lengths:
    """Per-batch valid lengths: ``q`` and ``kv``, tuples of B ints (``q`` None: every row)."""

    __slots__ = ("q", "kv")

    def __init__(self, q, kv):
        self.q = None if q is None else tuple(int(x) for x in q)
        self.kv = tuple(int(x) for x in kv)

    def full(self, sq: int, skv: int) -> bool:
        """True when nothing is masked (the call runs as if there were no mask)."""
        return all(x == skv for x in self.kv) and (self.q is None or all(x == sq for x in self.q))

    def q_len(self, b: int, sq: int) -> int:
        return sq if self.q is None else self.q[b]

    def __eq__(self, other):
        return isinstance(other, Lengths) and (self.q, self.kv) == (other.q, other.kv)

    def __repr__(self):
        return f"Lengths(q={self.q}, kv={self.kv})"


# the last torch mask read: (weak reference, its version, shape, strides, dtype, (b, h, sq, skv)) -> answer
_last = {"key": None, "ref": None, "answer": None}


def _identity(mask, b, h, sq, skv):
    """What a kept answer is keyed by, or None: a tensor made under torch.inference_mode has no
    version counter, so an in-place write to it could not be seen and its answer is not kept."""
    try:
        version = mask._version
    except RuntimeError:  # "Inference tensors do not track version counter"
        return None
    return tuple(mask.shape), tuple(mask.stride()), str(mask.dtype), version, (b, h, sq, skv)


def lengths(mask, b: int, h: int, sq: int, skv: int):
    """``Lengths`` for a mask over a (B, H, Sq, Skv) attention call, or a string: why the mask is
    not a per-batch prefix (the call must run elsewhere)."""
    if not (isinstance(mask, np.ndarray) or _tensors.is_torch(mask)):
        return f"attn_mask must be a tensor, got {type(mask).__name__}"
    if _tensors.compiling():
        return "a mask is read on the host (its lengths decide the launch), not while torch.compile traces"
    if not _tensors.is_torch(mask):
        return _read(mask, b, h, sq, skv)  # a numpy array has no version counter: an in-place write is unseen
    from .deferred_mask import DeferredMask  # torch is loaded: the mask is a torch tensor

    if isinstance(mask, DeferredMask):
        if mask.kind == "joint":  # read once: the router's check and the call share it
            if mask.read is None or mask.read[0] != (b, h, sq, skv):
                mask.read = ((b, h, sq, skv), _joint_of_padding(mask.padding(), b, h, sq, skv))
            return mask.read[1]
        mask = mask.materialize()  # not the joint mask of a padding vector: read as any mask
    ident = _identity(mask, b, h, sq, skv)
    if ident is None:
        return _read(mask, b, h, sq, skv)
    ref = _last["ref"]
    if ref is not None and ref() is mask and _last["key"] == ident:
        return _last["answer"]
    answer = _read(mask, b, h, sq, skv)
    try:
        _last["ref"] = weakref.ref(mask)
        _last["key"], _last["answer"] = ident, answer
    except TypeError:  # anything that takes no weak reference is just not kept
        _last["ref"] = None
    return answer


def _read(mask, b, h, sq, skv):
    shape = tuple(mask.shape)
    if len(shape) > 4:
        return f"attn_mask has {len(shape)} dimensions (at most 4: (B, H, Sq, Skv))"
    shape4 = (1,) * (4 - len(shape)) + shape
    for n, w, name in zip(shape4, (b, h, sq, skv), ("batch", "head", "query", "key")):
        if n not in (1, w):
            return f"attn_mask of shape {shape} does not broadcast to {(b, h, sq, skv)}"
    mask = mask.reshape(shape4)
    torch_mask = _tensors.is_torch(mask)
    head_stride = mask.stride(1) if torch_mask else mask.strides[1]
    if shape4[1] > 1 and head_stride == 0:
        mask = mask[:, :1]  # an expanded view: one mask for every head
    if torch_mask:
        import torch

        if mask.dtype != torch.bool and not mask.is_floating_point():
            return _dtype_reason(mask)
        is_bool = mask.dtype == torch.bool
    else:
        is_bool = mask.dtype == np.bool_
        if not (is_bool or np.issubdtype(mask.dtype, np.floating) or str(mask.dtype) == "bfloat16"):
            return _dtype_reason(mask)
    found = _prefix(mask, torch_mask, is_bool)
    if found is not None:
        bn, _, sqn, skn = mask.shape
        return _lengths(found[0], found[1], bn, sqn, skn, b, sq, skv)
    # not a prefix: the sums say why (a bias, heads that differ, or which pattern)
    return _read_torch(mask, b, sq, skv) if torch_mask else _read_numpy(mask, b, sq, skv)


def _joint_of_padding(vec, b, h, sq, skv):
    """``Lengths`` of the joint mask vec[i] & vec[j] of a (B', S) padding vector
    (``vcattn.deferred_mask``), read from the vector alone (one host synchronization): a prefix
    of L valid tokens is L query rows and L keys."""
    import torch

    bn, s = vec.shape
    if bn not in (1, b) or sq != s or skv != s:
        return f"attn_mask of shape {(bn, 1, s, s)} does not broadcast to {(b, h, sq, skv)}"
    counts = vec.sum(dim=1, dtype=torch.int64)
    prefix = (vec == (torch.arange(s, device=vec.device) < counts[:, None])).all(dim=1)
    counts, prefix = torch.stack([counts, prefix.to(torch.int64)]).cpu().numpy()
    if not prefix.all():
        return _NOT_PREFIX
    return _lengths(counts, counts, bn, s, s, b, sq, skv)


def _prefix(mask, torch_mask, is_bool):
    """(q_lens, kv_lens) of a (B', H', Sq', Skv') mask that is the per-batch prefix product -
    entry (i, j) takes part exactly when i < Lq and j < Lkv, in every head - else None.

    The candidate lengths come from row 0 and column 0 (Lkv: row 0's valid entries; Lq:
    column 0's; either 0: no entry takes part), then the whole mask is compared with the
    candidate: [0, Lq) x [0, Lkv) all valid, the rest of the rows [0, Lq) and every row from Lq
    on none valid.  Each entry is read once in its own dtype (a float mask's inside twice) by
    reductions that make no temporaries: a boolean mask's minimum inside and maximum outside,
    as bytes; a float mask's maximum and minimum inside (0; NaN fails both) and maximum outside
    (-inf only when every entry there is -inf).  Two host synchronizations: the candidate, the
    verdict.  A prefix is determined by its row 0 and column 0, so a mask that is not the
    candidate is no prefix at all: None is exact, and the caller's sums then say why."""
    bn, hn, sqn, skn = mask.shape
    if bn * hn * sqn * skn == 0:
        return None
    row0, col0 = mask[:, :, 0, :], mask[:, :, :, 0]
    if torch_mask:
        import torch

        if not is_bool:
            row0, col0 = row0 == 0, col0 == 0
        probe = torch.cat([row0.sum(dim=2, dtype=torch.int64), col0.sum(dim=2, dtype=torch.int64)], dim=1)
        probe = probe.cpu().numpy()  # the first host synchronization: the candidate's shape
    else:
        if not is_bool:
            row0, col0 = row0.astype(np.float32) == 0, col0.astype(np.float32) == 0
        probe = np.concatenate([row0.sum(axis=2), col0.sum(axis=2)], axis=1)
    kv_c, q_c = probe[:, :hn], probe[:, hn:]
    if np.any(kv_c != kv_c[:, :1]) or np.any(q_c != q_c[:, :1]):
        return None  # heads with different masks
    q_lens, kv_lens, checks = [], [], []
    for i in range(bn):
        lq, lk = int(q_c[i, 0]), int(kv_c[i, 0])
        if lq == 0 or lk == 0:
            lq = lk = 0
        m = mask[i]
        inside = [r for r in (m[:, :lq, :lk],) if lq * lk > 0]
        outside = [r for r in (m[:, :lq, lk:], m[:, lq:, :]) if r.shape[1] * r.shape[2] > 0]
        if torch_mask and is_bool:  # as bytes: torch's bool all / any are several times slower on the CPU
            checks.extend(r.view(torch.uint8).amin() != 0 for r in inside)
            checks.extend(r.view(torch.uint8).amax() == 0 for r in outside)
        elif is_bool:
            checks.extend(bool(r.all()) for r in inside)
            checks.extend(not r.any() for r in outside)
        else:  # 0 inside (its maximum and minimum; NaN fails both), -inf outside (its maximum)
            checks.extend((r.amax() == 0) & (r.amin() == 0) if torch_mask else r.max() == 0 and r.min() == 0
                          for r in inside)
            checks.extend(r.amax() == float("-inf") if torch_mask else r.max() == -np.inf for r in outside)
        q_lens.append(lq)
        kv_lens.append(lk)
    if not checks:
        ok = True
    elif torch_mask:
        ok = bool(torch.stack(checks).all().item())  # the second host synchronization
    else:
        ok = all(bool(c) for c in checks)
    return (q_lens, kv_lens) if ok else None


_BIAS = ("an additive attn_mask with values other than 0 and -inf (a bias, not a mask: "
         "vcattn reads 0 = takes part, -inf = masked)")


def _dtype_reason(mask):
    return f"attn_mask of dtype {mask.dtype} (boolean or additive float masks)"


_NOT_ONE_MASK = "a mask that differs between heads (vcattn reads one mask for all heads)"

_NOT_PREFIX = ("attn_mask is not a valid prefix per batch element (vcattn runs masks that keep the first "
               "L keys - and optionally the first L query rows - of each sample; other patterns run the "
               "model's attention)")


def _from_sums(rows, cols, b, sq, skv):
    """Lengths from the mask's row sums (B', Sq') and column sums (B', Skv') of valid entries, or
    the reason it is not a prefix.  Rows i < Lq holding Lkv entries each, the other rows none, and
    columns j < Lkv holding Lq each, the others none, put every valid entry inside the
    [0, Lq) x [0, Lkv) block, and the rows' Lq * Lkv entries then fill it: the mask is the
    prefix product, with no further pass over it."""
    bn, sqn = rows.shape
    skn = cols.shape[1]
    q_lens, kv_lens = [], []
    for i in range(bn):
        r, c = rows[i], cols[i]
        lq = int(np.count_nonzero(r))
        lk = int(np.count_nonzero(c))
        prefix = (lq == 0 or (np.all(r[:lq] == lk) and not np.any(r[lq:]))) and \
                 (lk == 0 or (np.all(c[:lk] == lq) and not np.any(c[lk:])))
        if not prefix:
            return _NOT_PREFIX
        q_lens.append(lq)
        kv_lens.append(lk)
    return _lengths(q_lens, kv_lens, bn, sqn, skn, b, sq, skv)


def _lengths(q_lens, kv_lens, bn, sqn, skn, b, sq, skv):
    """``Lengths`` of the call from the per-batch prefix (Lq, Lkv) of a (B', ., Sq', Skv') mask
    (either 0 when no entry takes part): a broadcast batch, key or query axis spread out."""
    q_lens, kv_lens = list(q_lens), list(kv_lens)
    if bn == 1 and b > 1:
        q_lens, kv_lens = q_lens * b, kv_lens * b
    if skn == 1:  # a broadcast key axis: every key or none
        kv_lens = [skv if k else 0 for k in kv_lens]
    if sqn == 1:  # a broadcast query axis: every row, unless the sample has no key at all
        q = None if all(k > 0 for k in kv_lens) else [sq if k > 0 else 0 for k in kv_lens]
    else:
        q = q_lens
    return Lengths(q, kv_lens)


# Elements of the mask read per step by the sums (a mask that is not a prefix): a (B, 1, S, S)
# mask at HunyuanVideo 720p holds 1.3e10, and a reduction over all of it at once makes int64 /
# bool temporaries of its full size (94 GiB).
_CHUNK_ELEMENTS = 1 << 26


def _read_torch(mask, b, sq, skv):
    """Row and column sums of the valid entries, read a slab of query rows at a time (temporaries
    of at most _CHUNK_ELEMENTS entries), with one host synchronization at the end: the reason a
    mask that ``_prefix`` did not take is not a prefix (~13 bytes of traffic per entry: int32
    slabs, summed twice)."""
    import torch

    if mask.dtype != torch.bool and not mask.is_floating_point():
        return _dtype_reason(mask)
    bn, hn, sqn, skn = mask.shape
    step = max(1, _CHUNK_ELEMENTS // max(1, bn * hn * skn))
    rows = torch.empty((bn, hn, sqn), dtype=torch.int32, device=mask.device)
    cols = torch.zeros((bn, hn, skn), dtype=torch.int32, device=mask.device)
    bias = torch.zeros((), dtype=torch.bool, device=mask.device)  # any value but 0 / -inf
    for i in range(0, sqn, step):
        part = mask[:, :, i:i + step]
        if part.dtype == torch.bool:
            valid = part
        else:
            valid = part == 0
            bias |= ~torch.all(valid | torch.isneginf(part))
        counts = valid.to(torch.int32)
        rows[:, :, i:i + step] = counts.sum(dim=3, dtype=torch.int32)
        cols += counts.sum(dim=2, dtype=torch.int32)
    sums = torch.cat([rows, cols, bias.to(torch.int32).expand(bn, hn, 1)], dim=2).cpu().numpy()
    if sums[0, 0, -1]:
        return _BIAS
    return _per_head(sums[..., :sqn], sums[..., sqn:sqn + skn], b, sq, skv)


def _per_head(rows, cols, b, sq, skv):
    """The lengths of head 0, when every head's sums (so every head's prefix) are the same."""
    if rows.shape[1] > 1 and not (np.all(rows == rows[:, :1]) and np.all(cols == cols[:, :1])):
        return _NOT_ONE_MASK
    return _from_sums(rows[:, 0], cols[:, 0], b, sq, skv)


def _read_numpy(mask, b, sq, skv):
    """``_read_torch`` for numpy masks (one pass, no slabs: the CPU path's masks are small)."""
    if mask.dtype == np.bool_:
        valid = mask
    elif np.issubdtype(mask.dtype, np.floating) or str(mask.dtype) == "bfloat16":
        m = mask.astype(np.float32)
        valid = m == 0
        if not np.all(valid | np.isneginf(m)):
            return _BIAS
    else:
        return _dtype_reason(mask)
    rows = valid.sum(axis=3, dtype=np.int64)
    cols = valid.sum(axis=2, dtype=np.int64)
    return _per_head(rows, cols, b, sq, skv)
