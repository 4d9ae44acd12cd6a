"""The CUDA path's parameter plumbing, checked on the CPU (no GPU needed).

The kernel reads each operand through the (batch, head, seq) element strides the Python op
puts into vcattn_gpu_params; a wrong stride there (NHD read as HND, K's strides for V) would
only show on a Hopper GPU.  Here the same host code (_gpu.launch_params, _gpu.kmeans_params)
fills the structs from CPU tensors of every layout and several views, and each (b, h, s, d)
the kernel would address is compared with the element torch says it is.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from vcattn import _gpu  # noqa: E402

B, H, SQ, SKV, D = 2, 3, 5, 7, 64


def element_address(ptr, strides, b, h, s, d, itemsize=2):
    return ptr + itemsize * (b * strides[0] + h * strides[1] + s * strides[2] + d)


def bhsd(x, layout, b, h, s, d):
    """The (b, h, s, d) element of x as a 0-d view (its data_ptr is its address)."""
    return x[b, h, s, d] if layout == "HND" else x[b, s, h, d]


def sample_indices(rng, seq, n=40):
    idx = [(B - 1, H - 1, seq - 1, D - 1), (0, 0, 0, 0)]
    idx += [(int(rng.integers(B)), int(rng.integers(H)), int(rng.integers(seq)), int(rng.integers(D)))
            for _ in range(n)]
    return idx


def operands(layout, kind, gen):
    """q, k, v, out of the kernel dtype in `layout`, as `kind` of storage: contiguous copies,
    a packed QKV projection (one tensor, three views), or K and V as a packed-KV view with
    Q transposed from the other layout."""
    shape = (lambda s: (B, H, s, D)) if layout == "HND" else (lambda s: (B, s, H, D))
    bf = dict(dtype=torch.bfloat16)
    if kind == "contiguous":
        q, k, v = (torch.randn(*shape(s), generator=gen).to(**bf) for s in (SQ, SKV, SKV))
    elif kind == "packed-qkv":
        qkv = torch.randn(B, SKV, 3, H, D, generator=gen).to(**bf)       # one projection
        q, k, v = (qkv[:, :SQ, 0], qkv[:, :, 1], qkv[:, :, 2])
        if layout == "HND":
            q, k, v = (x.transpose(1, 2) for x in (q, k, v))
    else:  # "kv-view": K, V views of one (B, S, 2, H, D) tensor; Q from the other layout
        kv = torch.randn(B, SKV, 2, H, D, generator=gen).to(**bf)
        k, v = kv[:, :, 0], kv[:, :, 1]
        qt = torch.randn(B, H, SQ, D, generator=gen).to(**bf)
        q = qt if layout == "HND" else qt.transpose(1, 2)   # strided, not contiguous
        if layout == "HND":
            k, v = k.transpose(1, 2), v.transpose(1, 2)
    out = torch.empty(q.shape, **bf)
    return q, k, v, out


@pytest.mark.parametrize("kind", ["contiguous", "packed-qkv", "kv-view"])
@pytest.mark.parametrize("layout", ["HND", "NHD"])
def test_launch_params_address_every_operand_as_torch_does(layout, kind):
    gen = torch.Generator().manual_seed(7)
    rng = np.random.default_rng(11)
    q, k, v, out = operands(layout, kind, gen)
    p = _gpu.launch_params(q, k, v, out, layout, "vsmooth-split-blockmax-8bit", 0.1)
    assert (p.batch, p.heads, p.seq_q, p.seq_kv, p.head_dim) == (B, H, SQ, SKV, D)
    assert p.softmax_scale == pytest.approx(0.1)
    assert p.input_dtype == p.output_dtype == _gpu._DTYPE_BF16
    for name, x, seq in (("q", q, SQ), ("k", k, SKV), ("v", v, SKV), ("o", out, SQ)):
        ptr, strides = getattr(p, name), list(getattr(p, f"{name}_stride"))
        assert ptr == x.data_ptr(), name
        for b, h, s, d in sample_indices(rng, seq):
            want = bhsd(x, layout, b, h, s, d).data_ptr()
            assert element_address(ptr, strides, b, h, s, d) == want, (name, layout, kind, (b, h, s, d))


def test_launch_params_distinct_layouts_per_operand_differ():
    # a K/V packed view has strides unlike Q's: a path that reused one operand's strides for
    # another would pass the contiguous case, so the views must differ here
    q, k, v, out = operands("NHD", "kv-view", torch.Generator().manual_seed(3))
    p = _gpu.launch_params(q, k, v, out, "NHD", "sage2-8bit", None)
    assert list(p.q_stride) != list(p.k_stride)
    assert list(p.o_stride) != list(p.q_stride)
    assert p.v - p.k == H * D * 2      # V sits one token's K heads after K in the packed row
    assert p.softmax_scale == 0.0 and p.perm is None and p.lse is None


def test_launch_params_method_and_optional_pointers():
    q, k, v, out = operands("HND", "contiguous", torch.Generator().manual_seed(5))
    perm = torch.zeros(B, H, SKV, dtype=torch.int32)
    lse = torch.empty(B, H, SQ, dtype=torch.float32)
    for m in _gpu.GPU_METHODS:
        p = _gpu.launch_params(q, k, v, out, "HND", m, None, perm, lse)
        assert p.method == _gpu.method_id(m)
        assert p.perm == perm.data_ptr() and p.lse == lse.data_ptr()
    half = [x.to(torch.float16) for x in (q, k, v, out)]
    assert _gpu.launch_params(*half, "HND", "sage2-8bit", None).input_dtype == _gpu._DTYPE_FP16


@pytest.mark.parametrize("layout", ["HND", "NHD"])
def test_kmeans_params_address_v_as_torch_does(layout):
    _, _, v, _ = operands(layout, "kv-view", torch.Generator().manual_seed(9))
    perm = torch.empty(B, H, SKV, dtype=torch.int32)
    cent = torch.empty(B, H, 16, D, dtype=torch.float32)
    kp = _gpu.kmeans_params(v, layout, 16, 5, 123, perm, cent)
    assert (kp.batch, kp.heads, kp.seq, kp.head_dim) == (B, H, SKV, D)
    assert (kp.clusters, kp.iterations, kp.seed) == (16, 5, 123)
    assert kp.perm == perm.data_ptr() and kp.centroids == cent.data_ptr() and kp.init_centroids is None
    rng = np.random.default_rng(2)
    for b, h, s, d in sample_indices(rng, SKV):
        assert element_address(kp.v, list(kp.v_stride), b, h, s, d) == bhsd(v, layout, b, h, s, d).data_ptr()


def test_operands_the_kernel_cannot_read_are_copied():
    # rows are read with 8-byte loads: a head_dim stride of 1, the other strides multiples of 4
    # elements and an 8-byte aligned pointer; anything else goes to a contiguous copy
    x = torch.randn(1, 2, 8, 64).to(torch.bfloat16)
    assert _gpu._operand(x, torch.bfloat16) is x
    odd = torch.randn(1, 2, 8, 66).to(torch.bfloat16)[..., 1:65]      # 2-byte misaligned rows
    got = _gpu._operand(odd, torch.bfloat16)
    assert got.is_contiguous() and torch.equal(got, odd)
    t = torch.randn(1, 64, 8, 2).to(torch.bfloat16).transpose(1, 3)   # head_dim stride 16
    got = _gpu._operand(t, torch.bfloat16)
    assert got.is_contiguous() and torch.equal(got, t)
    f32 = torch.randn(1, 2, 8, 64)
    got = _gpu._operand(f32, torch.bfloat16)
    assert got.dtype == torch.bfloat16 and torch.equal(got, f32.to(torch.bfloat16))
