"""The joint mask of a padding vector, never built (vcattn.deferred_mask).

- HunyuanVideo-1.5's processor steps (pad, bool, view, repeat, transpose, &, bool) on a
  deferred padding mask give a deferred joint mask that stands for exactly the tensor the steps
  build on the real mask, on fresh random padding vectors (prefixes and not);
- vcattn.masks reads its lengths from the vector alone and answers what reading the built mask
  answers (lengths, or why not);
- every other operation - the steps in another order, reductions, indexing, torch SDPA - gives
  what it gives on the built mask, bit for bit, for every kind (vector, rows, columns, joint);
- a masked vcattn call with the deferred mask is bit-identical to the call with the built one.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import vcattn  # noqa: E402
from vcattn.deferred_mask import DeferredMask  # noqa: E402

# CUDA too where there is one (the device's test runs): the masks live where the model's do
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def processor_build(mask, s):
    """The steps HunyuanVideo15AttnProcessor2_0 (diffusers 0.42) takes from the (B, L) padding
    mask to the (B, 1, S, S) joint mask, with the video tokens' S - L in front."""
    b = mask.shape[0]
    m = F.pad(mask, (s - mask.shape[1], 0), value=True).bool()
    rows = m.view(b, 1, 1, s).repeat(1, 1, s, 1)
    return (rows & rows.transpose(2, 3)).bool()


def padding_masks(seed, count=6):
    """(B, L) boolean padding masks with S: text prefixes of random lengths (0 .. L), some
    ragged, and some that are no prefix (a hole, a valid token after the padding)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        b, text = int(rng.integers(1, 4)), int(rng.integers(1, 12))
        s = text + int(rng.integers(1, 40))
        valid = rng.integers(0, text + 1, size=b)
        m = torch.as_tensor(np.arange(text)[None, :] < valid[:, None])
        if i % 3 == 2:  # not a prefix: flip one entry
            m[int(rng.integers(0, b)), int(rng.integers(0, text))] ^= True
        out.append((m, s))
    return out


# pipelines run under no_grad or inference_mode (where composite operations such as aten.pad
# reach the mask undecomposed); training, with autograd
MODES = {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode, "grad": torch.enable_grad}


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_processor_steps_defer_and_stand_for_the_built_mask(seed, device, mode):
    for mask, s in padding_masks(seed):
        with MODES[mode]():
            check_one_build(mask.to(device), s)


def check_one_build(mask, s):
    built = processor_build(mask, s)
    deferred = processor_build(DeferredMask.wrap(mask), s)
    assert isinstance(deferred, DeferredMask) and deferred.kind == "joint", deferred
    assert deferred.shape == built.shape and deferred.dtype == built.dtype
    assert torch.equal(deferred.materialize(), built)
    b = mask.shape[0]
    want = vcattn.masks.lengths(built, b, 2, s, s)
    got = vcattn.masks.lengths(deferred, b, 2, s, s)
    assert got == want, (mask, got, want)
    assert vcattn.masks.lengths(deferred, b, 2, s, s - 1) == vcattn.masks.lengths(built, b, 2, s, s - 1)


def test_lengths_are_read_from_the_vector(monkeypatch):
    """The deferred joint mask's lengths never build it."""
    mask = torch.arange(10)[None, :] < torch.tensor([[7], [3]])
    deferred = processor_build(DeferredMask.wrap(mask), 30)

    def refuse(self):
        raise AssertionError("the joint mask was built")

    monkeypatch.setattr(DeferredMask, "materialize", refuse)
    assert vcattn.masks.lengths(deferred, 2, 4, 30, 30) == vcattn.masks.Lengths([27, 23], [27, 23])


OPS = {
    "sum": lambda m: m.sum(),
    "float mean": lambda m: m.float().mean(dim=-1),
    "index": lambda m: m[..., 1:, :3],
    "not": lambda m: ~m,
    "int": lambda m: m.to(torch.int32),
    "where": lambda m: torch.where(m, 1.0, -1.0),
    "contiguous clone": lambda m: m.contiguous().clone(),
    "and itself": lambda m: m & m,
}


@pytest.mark.parametrize("op", sorted(OPS))
def test_any_other_operation_runs_on_the_real_tensor(op):
    mask = torch.as_tensor(np.random.default_rng(5).random((2, 6)) < 0.7)
    s = 11
    b = mask.shape[0]
    # each kind along the processor's steps, the deferred one beside the real one
    real_v = F.pad(mask, (s - 6, 0), value=True).view(b, 1, 1, s)
    dv = F.pad(DeferredMask.wrap(mask), (s - 6, 0), value=True).view(b, 1, 1, s)
    real_r, dr = real_v.repeat(1, 1, s, 1), dv.repeat(1, 1, s, 1)
    real_c, dc = real_r.transpose(2, 3), dr.transpose(2, 3)
    kinds = [(real_v, dv), (real_r, dr), (real_c, dc), (real_r & real_c, dr & dc), (real_c & real_r, dc & dr)]
    assert [d.kind for _, d in kinds] == ["vector", "rows", "columns", "joint", "joint"]
    for real, deferred in kinds:
        got = OPS[op](deferred)
        assert not isinstance(got, DeferredMask) or op == "contiguous clone" and deferred.kind == "vector"
        got = got.materialize() if isinstance(got, DeferredMask) else got
        assert torch.equal(got, OPS[op](real)), (op, deferred.kind)
    # the steps in another order (a repeat that is not the processor's): the real thing
    assert torch.equal(dv.repeat(1, 2, s, 1), real_v.repeat(1, 2, s, 1))


@pytest.mark.parametrize("device", DEVICES)
def test_sdpa_with_the_deferred_mask_is_sdpa_with_the_built_one(device):
    g = torch.Generator().manual_seed(7)
    mask = (torch.arange(8)[None, :] < torch.tensor([[6], [2]])).to(device)
    s = 40
    q, k, v = (torch.randn(2, 3, s, 16, generator=g).to(device) for _ in range(3))
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=processor_build(mask, s))
    got = F.scaled_dot_product_attention(q, k, v, attn_mask=processor_build(DeferredMask.wrap(mask), s))
    assert type(got) is torch.Tensor and torch.equal(got, want)


@pytest.mark.parametrize("device", DEVICES)
def test_a_masked_vcattn_call_is_the_call_with_the_built_mask(device):
    g = torch.Generator().manual_seed(11)
    mask = (torch.arange(9)[None, :] < torch.tensor([[7], [4]])).to(device)
    s = 160
    dtype = torch.bfloat16 if device == "cuda" else torch.float32  # the kernel's inputs
    q, k, v = (torch.randn(2, 2, s, 64, generator=g).to(device, dtype) for _ in range(3))
    want = vcattn.attention(q, k, v, method="vsmooth-8bit", attn_mask=processor_build(mask, s))
    got = vcattn.attention(q, k, v, method="vsmooth-8bit", attn_mask=processor_build(DeferredMask.wrap(mask), s))
    assert torch.equal(got, want)


@pytest.mark.parametrize("mask", [torch.ones(2, 5), torch.ones(2, 5, dtype=torch.int64),
                                  torch.ones(1, 2, 5, dtype=torch.bool), None, np.ones((2, 5), bool)])
def test_wrap_leaves_anything_but_a_boolean_padding_mask_alone(mask):
    assert DeferredMask.wrap(mask) is mask
