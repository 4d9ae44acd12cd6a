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

Reading a mask costs one pass over it and a host synchronization (the lengths decide the
launch), so it is done eagerly, never while torch.compile traces.  The answer for the last
mask tensor is kept (one forward pass hands the same mask to every block).
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


# the last mask read: (weak reference, its version, shape, strides, dtype, (b, sq, skv)) -> answer
_last = {"key": None, "ref": None, "answer": None}


def _identity(mask, b, h, sq, skv):
    version = getattr(mask, "_version", None)
    return (tuple(mask.shape), tuple(mask.stride()) if _tensors.is_torch(mask) else mask.strides,
            str(mask.dtype), version, (b, h, sq, skv))


def lengths(mask, b: int, h: int, sq: int, skv: int):
    """``Lengths`` for a mask over a (B, H, Sq, Skv) attention call, or a string: why the mask is
    not a per-batch prefix (the call must run elsewhere)."""
    if not (isinstance(mask, np.ndarray) or _tensors.is_torch(mask)):
        return f"attn_mask must be a tensor, got {type(mask).__name__}"
    if _tensors.compiling():
        return "a mask is read on the host (its lengths decide the launch), not while torch.compile traces"
    ident = _identity(mask, b, h, sq, skv)
    ref = _last["ref"]
    if ref is not None and ref() is mask and _last["key"] == ident:
        return _last["answer"]
    answer = _read(mask, b, h, sq, skv)
    try:
        _last["ref"] = weakref.ref(mask)
        _last["key"], _last["answer"] = ident, answer
    except TypeError:  # numpy arrays take weak references; anything that does not is just not kept
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
    if _tensors.is_torch(mask):
        if shape4[1] > 1 and mask.stride(1) == 0:
            mask = mask[:, :1]  # an expanded view: one mask for every head
        return _read_torch(mask, b, sq, skv)
    return _read_numpy(mask, b, sq, skv)


_BIAS = ("an additive attn_mask with values other than 0 and -inf (a bias, not a mask: "
         "vcattn reads 0 = takes part, -inf = masked)")


def _dtype_reason(mask):
    return f"attn_mask of dtype {mask.dtype} (boolean or additive float masks)"


_NOT_ONE_MASK = "a mask that differs between heads (vcattn reads one mask for all heads)"


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
            return ("attn_mask is not a valid prefix per batch element (vcattn runs masks that keep the first "
                    "L keys - and optionally the first L query rows - of each sample; other patterns run the "
                    "model's attention)")
        q_lens.append(lq)
        kv_lens.append(lk)
    if bn == 1 and b > 1:
        q_lens, kv_lens = q_lens * b, kv_lens * b
    if skn == 1:  # a broadcast key axis: every key or none
        kv_lens = [skv if k else 0 for k in kv_lens]
    if sqn == 1:  # a broadcast query axis: every row, unless the sample has no key at all
        q = None if all(k > 0 for k in kv_lens) else [sq if k > 0 else 0 for k in kv_lens]
    else:
        q = q_lens
    return Lengths(q, kv_lens)


# Elements of the mask read per step: a (B, 1, S, S) mask at HunyuanVideo 720p holds 1.3e10, and
# a reduction over all of it at once makes int64 / bool temporaries of its full size (94 GiB).
_CHUNK_ELEMENTS = 1 << 26


def _read_torch(mask, b, sq, skv):
    """Row and column sums of the valid entries, read a slab of query rows at a time (temporaries
    of at most _CHUNK_ELEMENTS entries), with one host synchronization at the end."""
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
