"""The CUDA path against the CPU simulation and the exact reference (needs torch, a
Hopper GPU and a CUDA build of libvcattn; skipped otherwise)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import vcattn  # noqa: E402
from vcattn import _gpu  # noqa: E402

pytestmark = pytest.mark.skipif(not (torch.cuda.is_available() and _gpu.available()),
                                reason="needs a Hopper GPU and a CUDA build of libvcattn")


def inputs(b=1, h=2, sq=700, skv=900, d=128, seed=0, layout="HND"):
    g = torch.Generator().manual_seed(seed)
    sh = lambda s: (b, h, s, d) if layout == "HND" else (b, s, h, d)  # noqa: E731
    q = (torch.randn(sh(sq), generator=g) * 1.5).to(torch.bfloat16).cuda()
    k = (torch.randn(sh(skv), generator=g) + 2.0 * torch.randn(d, generator=g)).to(torch.bfloat16).cuda()
    v = torch.randn(sh(skv), generator=g)
    v[..., : max(1, skv // 200), :8] *= 20.0  # a few outlier tokens
    return q, k, v.to(torch.bfloat16).cuda()


def rel(a, b):
    a, b = a.float(), b.float()
    return ((a - b).norm() / b.norm()).item()


@pytest.mark.parametrize("method", _gpu.GPU_METHODS)
def test_kernel_matches_simulation_and_reference(method):
    q, k, v = inputs()
    perm = np.stack([np.random.default_rng(i).permutation(900) for i in range(2)])[None].astype(np.int32)
    plan = perm if method != "sage2-8bit" else None
    out, lse = vcattn.attention(q, k, v, method=method, plan=plan, return_lse=True, strict=True)
    assert out.is_cuda and out.dtype == torch.bfloat16 and lse.dtype == torch.float32
    sim, sim_lse = vcattn.attention(q.float().cpu(), k.float().cpu(), v.float().cpu(), method=method,
                                    plan=plan, return_lse=True)
    ref, ref_lse = vcattn.reference_attention(q.float().cpu(), k.float().cpu(), v.float().cpu(), return_lse=True)
    e_sim = rel(sim, ref)
    assert rel(out.cpu(), sim) < 0.01, (rel(out.cpu(), sim), e_sim)   # BF16 output rounding ~2e-3
    assert rel(out.cpu(), ref) <= 2 * e_sim + 4e-3
    assert (lse.cpu() - sim_lse).abs().max().item() < 5e-3
    assert (lse.cpu() - ref_lse).abs().max().item() < 0.05


def test_layouts_and_strided_views_agree():
    q, k, v = inputs(layout="NHD")
    a = vcattn.attention(q, k, v, "NHD", method="sage2-8bit", strict=True)
    b = vcattn.attention(*(x.transpose(1, 2).contiguous() for x in (q, k, v)), "HND", method="sage2-8bit",
                         strict=True)
    assert rel(a.transpose(1, 2), b) < 1e-6


def test_plan_cache_follows_the_schedule_on_the_gpu():
    q, k, v = inputs(sq=1024, skv=1024)
    cache = vcattn.PlanCache(vcattn.Schedule(12), clusters=16, iterations=4)
    ref = vcattn.reference_attention(q.float().cpu(), k.float().cpu(), v.float().cpu())
    for step in range(12):
        cache.set_step(step)
        out = vcattn.attention(q, k, v, plan=cache.layer("l0"), step=step, strict=True)
        assert rel(out.cpu(), ref) < 0.05
    assert cache.layer("l0").num_groupings == 1  # window ceil(12/4) = 3 steps: groups at step 0 only


def test_patch_sdpa_routes_cuda_calls():
    q, k, v = inputs(sq=512, skv=512)
    with vcattn.patch_sdpa(strict=True, min_seq_kv=0) as p:
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    assert p.calls == 1 and out.is_cuda
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float())
    assert rel(out, ref) < 0.05


def test_concurrent_streams_give_the_sequential_bits():
    """Two streams calling at once on different inputs (classifier-free guidance, two
    pipelines) give exactly the outputs of the same calls made one after the other: each
    call has its own workspace (a shared one let the streams overwrite each other)."""
    a, b = inputs(sq=4096, skv=4096, seed=1), inputs(sq=4096, skv=4096, seed=2)
    want_a = vcattn.attention(*a, strict=True)
    want_b = vcattn.attention(*b, strict=True)
    torch.cuda.synchronize()
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    for _ in range(3):
        with torch.cuda.stream(s1):
            got_a = vcattn.attention(*a, strict=True)
        with torch.cuda.stream(s2):
            got_b = vcattn.attention(*b, strict=True)
        torch.cuda.synchronize()
        assert torch.equal(got_a, want_a) and torch.equal(got_b, want_b)


def test_graph_stays_valid_after_a_larger_call():
    """A CUDA graph captured on one shape replays to the eager bits after a larger call
    (which used to grow, and so release, the buffer the graph pointed into)."""
    q, k, v = inputs(sq=1024, skv=1024, seed=3)
    plan = vcattn.Plan(clusters=16)
    vcattn.attention(q, k, v, plan=plan, strict=True)   # groups once, eagerly
    want = vcattn.attention(q, k, v, plan=plan, strict=True)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        vcattn.attention(q, k, v, plan=plan, strict=True)  # warm-up on the capture stream
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = vcattn.attention(q, k, v, plan=plan, strict=True)
    big = inputs(sq=8192, skv=8192, seed=4)
    vcattn.attention(*big, strict=True)                  # a larger call in between
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, want)
