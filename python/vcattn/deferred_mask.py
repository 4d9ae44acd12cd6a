"""A joint padding mask kept as the padding vector it is built from.

HunyuanVideo-1.5's attention processor (diffusers' ``HunyuanVideo15AttnProcessor2_0``) gets a
(B, L) boolean padding mask and, in every attention call, builds the (B, 1, S, S) joint mask
``valid[i] & valid[j]`` from it::

    m = F.pad(mask, (S - L, 0), value=True).bool()
    m1 = m.view(B, 1, 1, S).repeat(1, 1, S, 1)
    m = (m1 & m1.transpose(2, 3)).bool()

At 720p (S = 112,900) that is 12.7 GB written and read again per call - about as long as the
attention itself on an H100 (docs/benchmarks.md) - and vcattn would then read all of it back to
find the two lengths the mask stands for.  ``DeferredMask.wrap(mask)`` gives the processor a
tensor that follows those steps without building anything: each step it knows (the pad, the
view, the repeat, the transpose, the ``&``) returns another ``DeferredMask`` that remembers the
(B, S) vector, and the last one is the joint mask of that vector.  ``vcattn.masks`` reads its
lengths from the vector (B x S entries instead of B x S x S).

Everything else is exact: a ``DeferredMask`` has no storage of its own, and any other operation
on it - a step it does not know, a torch function it is handed to - runs on the real tensor,
built then (``materialize``), so a changed processor gets the mask the model would have built,
bit for bit.  Only code that reads its memory without an operation (a raw ``data_ptr()``, which
is 0) would not; so the diffusers integration, which hands the deferred mask to the processor,
builds the real one itself before a call goes anywhere but vcattn (``vcattn.diffusers``), and
nothing else makes a ``DeferredMask``.
"""
from __future__ import annotations

import torch
from torch.utils._pytree import tree_map

__all__ = ["DeferredMask", "materialized"]

VECTOR, ROWS, COLUMNS, JOINT = "vector", "rows", "columns", "joint"
# Operations by name (their overload packet), the composite ones too: under torch.inference_mode
# they reach __torch_dispatch__ undecomposed (aten.pad, aten.to, aten.__and__, ...).
# Steps that keep a padding vector a (small) padding vector; their result is computed on it:
_VECTOR_STEPS = {"pad", "constant_pad_nd", "view", "_unsafe_view", "reshape", "unsqueeze", "clone", "alias",
                 "detach", "_to_copy", "to"}
_AND = {"bitwise_and", "__and__"}
_SAME = {"alias", "detach"}  # a joint mask's own view
_CAST = {"to", "_to_copy"}   # a joint mask cast: to bool on its device is itself


class DeferredMask(torch.Tensor):
    """A boolean mask of one of four kinds, all from a padding vector ``vec`` (B, S):

    - ``vector``: the vector itself in any shape (``vec`` is then the real tensor of this shape);
    - ``rows``: (B, 1, S, S), entry (i, j) = vec[j] (the view's repeat over the query rows);
    - ``columns``: (B, 1, S, S), entry (i, j) = vec[i] (its transpose);
    - ``joint``: (B, 1, S, S), vec[i] & vec[j] - the mask the processor hands to attention."""

    @staticmethod
    def __new__(cls, kind, vec, shape):
        out = torch.Tensor._make_wrapper_subclass(cls, tuple(shape), dtype=torch.bool, device=vec.device)
        out.kind, out.vec = kind, vec
        out.read = None  # (call shape, answer): what vcattn.masks read from it, for the call after the check
        return out

    __torch_function__ = torch._C._disabled_torch_function_impl
    _vcattn_deferred = True  # what vcattn.diffusers' routers look for (no import on their path)

    @classmethod
    def wrap(cls, mask):
        """A (B, L) boolean padding mask as a deferred one; anything else is returned as it is."""
        if isinstance(mask, cls) or not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.dim() != 2:
            return mask
        return cls(VECTOR, mask, mask.shape)

    def padding(self):
        """(B, S) the padding vector of a rows, columns or joint mask."""
        return self.vec

    def materialize(self):
        """The real tensor this mask stands for (a joint one: B x S x S bytes, built now)."""
        if self.kind == VECTOR:
            return self.vec
        b, s = self.vec.shape
        if self.kind == ROWS:
            return self.vec.view(b, 1, 1, s).expand(b, 1, s, s)
        if self.kind == COLUMNS:
            return self.vec.view(b, 1, s, 1).expand(b, 1, s, s)
        return self.vec.view(b, 1, s, 1) & self.vec.view(b, 1, 1, s)

    def __repr__(self):
        return f"DeferredMask({self.kind}, shape={tuple(self.shape)}, padding={tuple(self.vec.shape)})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        step = _step(cls, func, args, kwargs)
        if step is not None:
            return step
        return func(*tree_map(materialized, args), **tree_map(materialized, kwargs))


def materialized(x):
    """x, with a DeferredMask replaced by the real tensor."""
    return x.materialize() if isinstance(x, DeferredMask) else x


def _transposes_last_two(x, d0, d1):
    n = x.dim()
    return sorted((d0 % n, d1 % n)) == [n - 2, n - 1]


def _keeps_bool_here(x, args, kwargs):
    """A cast (aten.to / aten._to_copy) of x that asks for bool on x's device, or for nothing."""
    for a in list(args[1:]) + list(kwargs.values()):
        if isinstance(a, torch.dtype) and a != torch.bool:
            return False
        if isinstance(a, (torch.device, str)) and torch.device(a) != x.device:
            return False
    return True


def _step(cls, func, args, kwargs):
    """The result of one of the build's steps, still deferred, or None (run it on real tensors)."""
    name = func.overloadpacket.__name__
    x = args[0] if args else None
    if not isinstance(x, cls):
        if name in _AND and len(args) == 2 and isinstance(args[1], cls):
            return _step(cls, func, (args[1], x), kwargs)  # & commutes
        return None
    if x.kind == VECTOR and name in _VECTOR_STEPS:
        out = func(x.vec, *args[1:], **kwargs)
        if isinstance(out, torch.Tensor) and out.dtype == torch.bool and out.device == x.vec.device:
            return cls(VECTOR, out, out.shape)
        return out
    if name == "repeat" and x.kind == VECTOR and x.dim() == 4:
        b, one, one2, s = x.shape
        if one == one2 == 1 and list(args[1]) == [1, 1, s, 1]:
            return cls(ROWS, x.vec.reshape(b, s), (b, 1, s, s))
        return None
    if name == "transpose" and x.kind in (ROWS, COLUMNS) and _transposes_last_two(x, args[1], args[2]):
        return cls(COLUMNS if x.kind == ROWS else ROWS, x.vec, x.shape)
    if name in _AND and len(args) == 2 and isinstance(args[1], cls):
        y = args[1]
        if {x.kind, y.kind} == {ROWS, COLUMNS} and x.vec is y.vec:
            return cls(JOINT, x.vec, x.shape)
        return None
    if x.kind == JOINT and (name in _SAME or name in _CAST and _keeps_bool_here(x, args, kwargs)):
        return cls(JOINT, x.vec, x.shape)
    return None
