"""Masks that keep a prefix of each sample (vcattn.masks): read as per-batch valid lengths.

- which masks are lengths (boolean, additive 0 / -inf, key padding, HunyuanVideo's joint
  valid[i] & valid[j], repeated per head) and which are not, with the reason;
- a prefix is read by a candidate (row 0, column 0) and one compare over the mask, never the
  int32 sums; a mask that matches the candidate but for one entry anywhere is rejected, and on
  random masks the reader answers exactly what the sums answer;
- a masked call is, on its valid rows, bit-identical to the call on the valid tokens alone
  (numpy and torch, both layouts, ragged batches, a length that is not a multiple of 128,
  length 1, a fully padded sample), its other rows zeros and their LSE -inf, as torch SDPA
  writes fully masked rows; and close to torch SDPA with the mask;
- plans: ragged batches group each sample on its own valid keys (``Plan.part``), once;
- patch_sdpa routes prefix masks and leaves other masks to SDPA with the reason.
"""
import numpy as np
import pytest

import vcattn
from helpers import make_qkv, numpy_attention

METHOD = "vsmooth-8bit"


def prefix(b_lens, s):
    return np.arange(s)[None, :] < np.asarray(b_lens)[:, None]  # (B, S)


def joint(b_lens, s):
    v = prefix(b_lens, s)
    return v[:, None, :, None] & v[:, None, None, :]  # (B, 1, S, S)


def cut(x, b, n, layout="HND"):
    return x[b:b + 1, :, :n] if layout == "HND" else x[b:b + 1, :n]


# ---- which masks are lengths ---------------------------------------------------------------------

def test_masks_read_as_lengths():
    L = vcattn.masks.Lengths
    lens = vcattn.masks.lengths
    assert lens(joint([5, 7], 9), 2, 3, 9, 9) == L([5, 7], [5, 7])
    assert lens(prefix([5, 9], 9)[:, None, None, :], 2, 3, 9, 9) == L(None, [5, 9])   # key padding
    add = np.where(prefix([4, 6], 9), 0.0, -np.inf).astype(np.float32)[:, None, None, :]
    assert lens(add, 2, 3, 4, 9) == L(None, [4, 6])                                     # additive, cross
    assert lens(np.ones((9, 9), bool), 2, 3, 9, 9).full(9, 9)                         # 2-D, all valid
    per_head = np.repeat(joint([3, 8], 9), 3, axis=1)                                  # materialised per head
    assert lens(per_head, 2, 3, 9, 9) == L([3, 8], [3, 8])
    # a sample with no valid key: no row takes part
    assert lens(prefix([0, 9], 9)[:, None, None, :], 2, 3, 9, 9) == L([0, 9], [0, 9])


@pytest.mark.parametrize("mask, why", [
    (np.tril(np.ones((9, 9), bool)), "not a valid prefix"),                  # causal
    (~prefix([5], 9)[:, None, None, :], "not a valid prefix"),                # a suffix
    (np.zeros((1, 1, 1, 9), np.float32) + 0.5, "a bias"),                    # additive values other than 0/-inf
    (np.ones((1, 1, 4, 9), bool), "does not broadcast"),                      # wrong query length
    (np.ones((1, 9), np.int64), "dtype"),
])
def test_masks_that_are_not_lengths_say_why(mask, why):
    got = vcattn.masks.lengths(mask, 1, 3, 9, 9)
    assert isinstance(got, str) and why in got, got


def test_torch_mask_sums_run_a_slab_of_rows_at_a_time(monkeypatch):
    """The sums (the reason a mask is not a prefix) of a 720p joint mask cover 1.3e10 entries:
    they run over slabs of rows (here a few rows each), and give what one pass gives - lengths,
    a bias in a late slab, a non-prefix."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(vcattn.masks, "_CHUNK_ELEMENTS", 20)
    L = vcattn.masks.Lengths
    sums = vcattn.masks._read_torch
    assert sums(torch.from_numpy(joint([5, 7], 9)), 2, 9, 9) == L([5, 7], [5, 7])
    add = torch.from_numpy(np.where(joint([3, 8], 9), 0.0, -np.inf).astype(np.float32))
    assert sums(add, 2, 9, 9) == L([3, 8], [3, 8])
    late = add.clone()
    late[1, 0, 8, 0] = 0.5                               # only the last slab sees it
    assert "a bias" in sums(late, 2, 9, 9)
    assert "a bias" in vcattn.masks.lengths(late, 2, 3, 9, 9)
    hole = torch.from_numpy(joint([6, 9], 9))
    hole[1, 0, 7, 2] = False
    assert "not a valid prefix" in sums(hole, 2, 9, 9)
    assert "not a valid prefix" in vcattn.masks.lengths(hole, 2, 3, 9, 9)


def _backends():
    out = [("numpy", np.bool_), ("numpy", np.float32)]
    try:
        import torch
    except ImportError:
        return out
    return out + [("torch", torch.bool), ("torch", torch.float32), ("torch", torch.bfloat16)]


def _as(mask_bool, backend, dtype):
    """A boolean mask as the backend's tensor: boolean, or additive (0 / -inf) of ``dtype``."""
    if backend == "numpy":
        return mask_bool.copy() if dtype == np.bool_ else np.where(mask_bool, 0.0, -np.inf).astype(dtype)
    import torch

    t = torch.from_numpy(mask_bool.copy())
    return t if dtype == torch.bool else torch.zeros(t.shape, dtype=dtype).masked_fill(~t, float("-inf"))


@pytest.mark.parametrize("backend, dtype", _backends(), ids=lambda x: str(x).replace("torch.", ""))
def test_a_prefix_is_read_without_the_sums(monkeypatch, backend, dtype):
    """A prefix mask is read by the candidate-then-compare pass alone (row 0 and column 0, then
    each entry once): the int32 sums never run."""
    def no_sums(*a):
        raise AssertionError("the sums ran on a prefix mask")

    monkeypatch.setattr(vcattn.masks, "_read_torch", no_sums)
    monkeypatch.setattr(vcattn.masks, "_read_numpy", no_sums)
    L = vcattn.masks.Lengths
    lens = vcattn.masks.lengths
    assert lens(_as(joint([5, 7], 9), backend, dtype), 2, 3, 9, 9) == L([5, 7], [5, 7])
    assert lens(_as(joint([0, 9], 9), backend, dtype), 2, 3, 9, 9) == L([0, 9], [0, 9])  # a fully padded sample
    assert lens(_as(prefix([4, 9], 9)[:, None, None, :], backend, dtype), 2, 3, 6, 9) == L(None, [4, 9])
    assert lens(_as(np.repeat(joint([3, 8], 9), 3, axis=1), backend, dtype), 2, 3, 9, 9) == L([3, 8], [3, 8])
    one = _as(joint([6], 9), backend, dtype)
    expanded = np.broadcast_to(one, (2, 3, 9, 9)) if backend == "numpy" else one.expand(2, 3, 9, 9)
    assert lens(expanded, 2, 3, 9, 9) == L([6, 6], [6, 6])   # an expanded view: one head read


@pytest.mark.parametrize("backend, dtype", _backends(), ids=lambda x: str(x).replace("torch.", ""))
def test_a_mask_that_matches_the_candidate_but_one_entry_is_rejected(backend, dtype):
    """The candidate comes from row 0 and column 0; a mask that agrees with it there and
    everywhere else but one entry deep inside (or far outside) is not a prefix, with the
    reason the sums give: the compare reads the whole mask."""
    s, n = 40, 31
    lens = vcattn.masks.lengths
    for i, j, value in [(n - 1, n - 2, False),   # a hole deep inside [0, Lq) x [0, Lkv)
                        (s - 1, s - 1, True),    # the last entry, far outside
                        (2, s - 1, True),        # a valid key past Lkv in a valid row
                        (s - 1, 3, True)]:       # a valid padded row
        m = joint([n], s)
        m[0, 0, i, j] = value
        got = lens(_as(m, backend, dtype), 1, 2, s, s)
        assert isinstance(got, str) and "not a valid prefix" in got, (i, j, got)
    # one head differs from the other deep inside: the heads' masks differ
    m = np.repeat(joint([n], s), 2, axis=1)
    m[0, 1, n - 1, n - 1] = False
    got = lens(_as(m, backend, dtype), 1, 2, s, s)
    assert isinstance(got, str) and "differs between heads" in got, got
    if dtype in (np.bool_,) or str(dtype) == "torch.bool":
        return
    for i, j, value in [(n - 1, n - 2, float("nan")), (n - 1, n - 2, 0.5), (s - 1, s - 1, float("inf")),
                        (s - 1, s - 1, 0.25), (n - 1, s - 1, float("nan"))]:
        a = _as(joint([n], s), backend, dtype)
        a[0, 0, i, j] = value
        got = lens(a, 1, 2, s, s)
        assert isinstance(got, str) and "a bias" in got, (i, j, value, got)


@pytest.mark.parametrize("backend, dtype", _backends(), ids=lambda x: str(x).replace("torch.", ""))
def test_the_compare_answers_what_the_sums_answer(backend, dtype):
    """On random masks - prefixes of every broadcast shape, and prefixes with one entry changed
    in one head, or values other than 0 / -inf - ``lengths`` gives exactly what the row and column
    sums give (the reader before the candidate-then-compare pass): the same lengths, or the same
    reason."""
    rng = np.random.default_rng(11)
    sums = vcattn.masks._read_numpy if backend == "numpy" else vcattn.masks._read_torch
    bool_mask = dtype == np.bool_ or str(dtype) == "torch.bool"
    kinds = {}
    for case in range(300):
        b, h, sq, skv = int(rng.integers(1, 3)), int(rng.integers(1, 4)), int(rng.integers(1, 8)), int(rng.integers(1, 9))
        bn, hn = int(rng.choice([1, b])), int(rng.choice([1, h]))
        sqn, skn = int(rng.choice([1, sq])), int(rng.choice([1, skv]))
        lq = rng.integers(0, sqn + 1, size=bn)
        lk = rng.integers(0, skn + 1, size=bn)
        m = (np.arange(sqn)[None, :, None] < lq[:, None, None]) & (np.arange(skn)[None, None, :] < lk[:, None, None])
        m = np.repeat(m[:, None], hn, axis=1)
        what = rng.integers(0, 4)
        if what == 1:
            m[tuple(rng.integers(0, n) for n in m.shape)] ^= True
        elif what == 2:
            m = rng.random(m.shape) < 0.7
        mask = _as(m, backend, dtype)
        if not bool_mask and what == 3:
            mask[tuple(int(rng.integers(0, n)) for n in m.shape)] = float(rng.choice([0.5, np.inf, np.nan, -1.0]))
        want = sums(mask, b, sq, skv)
        vcattn.masks._last["ref"] = None
        got = vcattn.masks.lengths(mask, b, h, sq, skv)
        assert got == want, (case, m.shape, what, got, want)
        kinds[isinstance(got, str)] = kinds.get(isinstance(got, str), 0) + 1
    assert kinds.get(True, 0) > 30 and kinds.get(False, 0) > 30, kinds


def test_a_kept_answer_is_never_reused_for_changed_contents():
    """The answer for the last torch mask is kept (the router's check and the call read once),
    but an in-place write (the version counter) reads it again; a numpy array, which has no
    version counter, is read at every call."""
    L = vcattn.masks.Lengths
    lens = vcattn.masks.lengths
    m = np.ones((1, 1, 9, 9), bool)
    assert lens(m, 1, 2, 9, 9) == L([9], [9])
    m[:, :, :, 5:] = False
    m[:, :, 5:, :] = False
    assert lens(m, 1, 2, 9, 9) == L([5], [5])
    torch = pytest.importorskip("torch")
    t = torch.ones(1, 1, 9, 9, dtype=torch.bool)
    assert lens(t, 1, 2, 9, 9) == L([9], [9])
    assert lens(t, 1, 2, 9, 9) == L([9], [9])          # kept
    t[:, :, :, 4:] = False
    t[:, :, 4:, :] = False
    assert lens(t, 1, 2, 9, 9) == L([4], [4])          # written in place: read again
    t[:, :, 3, 3] = False
    assert "not a valid prefix" in lens(t, 1, 2, 9, 9)


def test_heads_with_different_masks_are_not_lengths():
    m = np.concatenate([joint([4], 9), joint([5], 9)], axis=1)  # (1, 2, 9, 9): two heads, two prefixes
    got = vcattn.masks.lengths(m, 1, 2, 9, 9)
    assert isinstance(got, str) and "differs between heads" in got
    with pytest.raises(ValueError, match="differs between heads"):
        q, k, v = make_qkv(np.random.default_rng(0), b=1, h=2, sq=9)
        vcattn.attention(q, k, v, attn_mask=m, method=METHOD)


# ---- a masked call is the call on its valid tokens ------------------------------------------------

@pytest.mark.parametrize("layout", ["HND", "NHD"])
def test_masked_call_is_the_unpadded_call(layout):
    rng = np.random.default_rng(1)
    s, lens = 300, [1, 300, 173, 0]  # length 1, full, not a multiple of 128, fully padded
    q, k, v = make_qkv(rng, b=4, h=2, sq=s, d=64, layout=layout)
    out, lse = vcattn.attention(q, k, v, layout, return_lse=True, method=METHOD, attn_mask=joint(lens, s))
    for b, n in enumerate(lens):
        if n:
            o1, l1 = vcattn.attention(cut(q, b, n, layout), cut(k, b, n, layout), cut(v, b, n, layout), layout,
                                      return_lse=True, method=METHOD)
            np.testing.assert_array_equal(cut(out, b, n, layout), o1)
            np.testing.assert_array_equal(lse[b:b + 1, :, :n], l1)
        rest = out[b, :, n:] if layout == "HND" else out[b, n:]
        assert not rest.any()                       # padded rows: zeros
        assert np.all(np.isneginf(lse[b, :, n:]))   # and no LSE


def test_key_padding_keeps_every_row_and_matches_the_reference():
    rng = np.random.default_rng(2)
    q, k, v = make_qkv(rng, b=2, h=2, sq=200, skv=260, d=128)
    lens = [131, 260]
    mask = prefix(lens, 260)[:, None, None, :]
    out = vcattn.attention(q, k, v, method=METHOD, attn_mask=mask)
    for b, n in enumerate(lens):
        ref, _ = numpy_attention(q[b:b + 1], k[b:b + 1, :, :n], v[b:b + 1, :, :n])
        f = vcattn.fidelity(ref, out[b:b + 1])
        assert f["psnr_db"] > 40, f


def test_torch_masked_call_matches_sdpa_and_the_unpadded_call():
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    rng = np.random.default_rng(3)
    s, lens = 260, [260, 129]
    q, k, v = (torch.from_numpy(x) for x in make_qkv(rng, b=2, h=2, sq=s, d=64))
    mask = torch.from_numpy(joint(lens, s))
    got = vcattn.attention(q, k, v, method=METHOD, attn_mask=mask)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # padded rows: zeros there too
    assert vcattn.fidelity(want, got)["psnr_db"] > 40
    assert torch.equal(got[1:, :, 129:], torch.zeros_like(got[1:, :, 129:]))
    one = vcattn.attention(q[1:, :, :129], k[1:, :, :129], v[1:, :, :129], method=METHOD)
    assert torch.equal(got[1:, :, :129], one)
    # an additive mask is the same mask
    add = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
    assert torch.equal(vcattn.attention(q, k, v, method=METHOD, attn_mask=add), got)


@pytest.mark.parametrize("layout", ["HND", "NHD"])
def test_torch_masked_batch_of_equal_lengths_is_one_call_into_the_padded_output(layout, monkeypatch):
    """Every sample the same lengths: one op call writes the padded output (out_rows), whose
    valid rows are the unpadded call's bits, the rest zeros with LSE -inf - and nothing is copied
    into it from a second output when the op wrote it itself."""
    torch = pytest.importorskip("torch")
    from vcattn import _ops

    rng = np.random.default_rng(6)
    s, n = 300, 173
    q, k, v = (torch.from_numpy(x) for x in make_qkv(rng, b=2, h=2, sq=s, d=64, layout=layout))
    calls = []
    real = _ops.attention

    def spy(*args):
        calls.append(args[-1])  # out_rows
        return real(*args)

    monkeypatch.setattr(_ops, "attention", spy)
    mask = torch.from_numpy(joint([n, n], s))
    out, lse = vcattn.attention(q, k, v, layout, return_lse=True, method=METHOD, attn_mask=mask)
    assert calls == [s] and tuple(out.shape) == tuple(q.shape) and tuple(lse.shape) == (2, 2, s)
    monkeypatch.setattr(_ops, "attention", real)

    def rows(x, sel):
        return x[:, :, sel] if layout == "HND" else x[:, sel]

    o1, l1 = vcattn.attention(rows(q, slice(n)), rows(k, slice(n)), rows(v, slice(n)), layout, return_lse=True,
                              method=METHOD)
    rest = rows(out, slice(n, None))
    assert torch.equal(rows(out, slice(n)), o1) and torch.equal(lse[:, :, :n], l1)
    assert not rest.any() and bool(torch.isneginf(lse[:, :, n:]).all())


# ---- plans ---------------------------------------------------------------------------------------------

def test_ragged_batch_plans_each_sample_on_its_own_keys():
    rng = np.random.default_rng(4)
    s, lens = 300, [300, 200]
    q, k, v = make_qkv(rng, b=2, h=2, sq=s, d=64)
    plan = vcattn.Plan(policy=None)
    m = joint(lens, s)
    a = vcattn.attention(q, k, v, method=METHOD, plan=plan, attn_mask=m)
    b = vcattn.attention(q, k, v, method=METHOD, plan=plan, attn_mask=m)
    np.testing.assert_array_equal(a, b)
    for i, n in enumerate(lens):
        part = plan.part(i)
        assert part.perm.shape == (1, 2, n) and part.num_groupings == 1  # grouped once, then reused
        own = vcattn.Plan(policy=None)
        np.testing.assert_array_equal(
            a[i:i + 1, :, :n], vcattn.attention(q[i:i + 1, :, :n], k[i:i + 1, :, :n], v[i:i + 1, :, :n],
                                                method=METHOD, plan=own))
    # uniform lengths: the plan itself, on the valid keys
    plan2 = vcattn.Plan(policy=None)
    vcattn.attention(q, k, v, method=METHOD, plan=plan2, attn_mask=joint([250, 250], s))
    assert plan2.perm.shape == (2, 2, 250)


def test_permutation_plan_is_cut_to_the_valid_keys():
    rng = np.random.default_rng(5)
    q, k, v = make_qkv(rng, b=1, h=2, sq=200, d=64)
    perm = np.stack([rng.permutation(150) for _ in range(2)])[None].astype(np.int32)
    full = np.concatenate([perm, np.broadcast_to(np.arange(150, 200, dtype=np.int32), (1, 2, 50))], axis=2)
    got = vcattn.attention(q, k, v, method=METHOD, plan=full, attn_mask=joint([150], 200))
    want = vcattn.attention(q[:, :, :150], k[:, :, :150], v[:, :, :150], method=METHOD, plan=perm)
    np.testing.assert_array_equal(got[:, :, :150], want)


# ---- patch_sdpa ------------------------------------------------------------------------------------

def test_patch_sdpa_routes_prefix_masks_and_names_the_others():
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    rng = np.random.default_rng(6)
    q, k, v = (torch.from_numpy(x) for x in make_qkv(rng, b=2, h=2, sq=140, d=64))
    mask = torch.from_numpy(joint([140, 90], 140))
    causal = torch.ones(140, 140, dtype=torch.bool).tril()
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=causal)
    with pytest.warns(RuntimeWarning, match="not a valid prefix"):
        with vcattn.patch_sdpa(METHOD, min_seq_kv=0) as p:
            got = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            same = F.scaled_dot_product_attention(q, k, v, attn_mask=causal)
    assert p.stats()["routed"] == 1 and p.stats()["fallbacks"] == {"attn_mask": 1}
    assert torch.equal(same, want)
    assert torch.equal(got, vcattn.attention(q, k, v, method=METHOD, attn_mask=mask))


def test_a_mask_made_under_inference_mode_is_read_and_not_kept():
    """An inference tensor has no version counter (an in-place write could not be seen): its
    answer is read at every call, never kept, and the masked call runs."""
    torch = pytest.importorskip("torch")
    q, k, v = (torch.as_tensor(x) for x in make_qkv(np.random.default_rng(3), 1, 2, 40, 40, 64))
    with torch.inference_mode():
        mask = torch.as_tensor(joint([31], 40))
        assert vcattn.masks.lengths(mask, 1, 2, 40, 40) == vcattn.masks.Lengths([31], [31])
        mask[:, :, :, 10] = False  # in place: a hole, no longer a prefix, and the read says so
        assert isinstance(vcattn.masks.lengths(mask, 1, 2, 40, 40), str)
        mask[:, :, :, 10] = mask[:, :, :, 0]
        mask[:, :, 30:, :] = False  # 30 rows x 31 keys
        got = vcattn.attention(q, k, v, method=METHOD, attn_mask=mask)
    want = vcattn.attention(q[:, :, :30], k[:, :, :31], v[:, :, :31], method=METHOD)
    assert torch.equal(got[:, :, :30], want) and not got[:, :, 30:].any()
