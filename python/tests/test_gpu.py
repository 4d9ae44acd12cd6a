"""The CUDA path against the CPU simulation and the exact reference (needs torch, a
Hopper GPU and a CUDA build of libvcattn; skipped otherwise)."""
import threading

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


@pytest.mark.parametrize("dtype,d", [(torch.bfloat16, 128), (torch.float16, 128), (torch.bfloat16, 64)])
def test_exact_keys_merge_carries_sink_rows(dtype, d):
    """Rows whose mass sits on 16 sink keys (large scores, 10x V): the output is the exact keys'
    merge almost alone, so the GPU's merge must give the simulation's (FP32) values to within the
    output's 16-bit rounding - a misplaced key, channel or row would be an O(1) error here, where
    on ordinary rows the quantized pass's 1e-3 hides it."""
    g = torch.Generator().manual_seed(11)
    b, h, sq, skv = 1, 2, 300, 2000
    u = torch.randn(h, 1, d, generator=g)
    u = u / u.norm(dim=-1, keepdim=True)
    q = torch.randn(b, h, sq, d, generator=g) * 0.5 + 2.0 * u
    k = torch.randn(b, h, skv, d, generator=g)
    v = torch.randn(b, h, skv, d, generator=g)
    sinks = torch.stack([torch.randperm(skv, generator=g)[:16] for _ in range(h)])
    for i in range(h):
        k[0, i, sinks[i]] = 4.0 * d ** 0.5 * u[i]  # score ~ 8 against ~N(0, 0.5) elsewhere
        v[0, i, sinks[i]] *= 10.0  # the largest V norms: these are the exact keys
    q, k, v = (x.to(dtype) for x in (q, k, v))
    perm = np.stack([np.random.default_rng(i).permutation(skv) for i in range(h)])[None].astype(np.int32)
    out, lse = vcattn.attention(q.cuda(), k.cuda(), v.cuda(), plan=perm, return_lse=True, strict=True)
    sim, sim_lse = vcattn.attention(q.float(), k.float(), v.float(), plan=perm, return_lse=True)
    ref = vcattn.reference_attention(q.float(), k.float(), v.float())
    assert rel(sim, ref) < 0.02  # the sinks carry the rows: the simulation's error is the exact part's
    assert rel(out.cpu(), sim) < 4e-3, rel(out.cpu(), sim)
    assert (lse.cpu() - sim_lse).abs().max().item() < 2e-3


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_policy_reference_is_fp32_accurate(dtype):
    """The policy's reference (BF16: the tensor cores with P split in two; FP16: FP32 matmuls)
    against FP64, on rows with a sharp softmax and a few keys of massive V (the sink heads it
    must judge): FP32-level (P rounded to BF16 once would be ~1e-3; FP32 scores of these
    sharp rows alone give a few 1e-6, measured 6.4e-6 on an H100 with P in three parts)."""
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 3, n, 128, generator=g) for n in (96, 3000, 3000))
    q *= 2.5  # peaked rows
    v[:, :, torch.randperm(3000, generator=g)[:12]] *= 12.0
    q, k, v = (x.to(dtype).cuda() for x in (q, k, v))
    got = _gpu.reference_rows(q, k, v, 128 ** -0.5, heads_at_once=2)
    ref = torch.softmax(q.double() @ k.double().transpose(-1, -2) * 128 ** -0.5, dim=-1) @ v.double()
    err = ((got.double() - ref).norm(dim=-1) / ref.norm(dim=-1)).max().item()
    assert err < 2e-5, err


@pytest.mark.parametrize("layout", ["HND", "NHD"])
def test_policy_measurement_is_the_runs_one_by_one(layout):
    """measure_recipes overlaps its runs on two side streams with the reference (here the exact-P
    pair too, ahead of need): every PSNR must be the one the runs give one after another on the
    caller's stream."""
    q, k, v = inputs(sq=700, skv=900, layout=layout)
    method, scale, rows = vcattn.DEFAULT_METHOD, 128 ** -0.5, 64
    g = torch.Generator().manual_seed(3)
    perm = torch.stack([torch.randperm(900, generator=g) for _ in range(2)])[None].to(torch.int32).cuda()
    psnr, se, floor = _gpu.measure_recipes(q, k, v, layout, scale, method, perm, rows, "faithful", 0.0)
    d = 2 if layout == "HND" else 1
    qs = q.index_select(d, torch.as_tensor((np.arange(rows) * 700) // rows, device="cuda"))
    hnd = (lambda x: x) if layout == "HND" else (lambda x: x.transpose(1, 2))
    ref = _gpu.reference_rows(hnd(qs), hnd(k), hnd(v), scale)
    one = lambda m, p=None, ex=None: _gpu._psnr_heads(  # noqa: E731
        ref, hnd(_gpu.attention(qs, k, v, layout, scale, False, m, p, True, head_exact=ex)[0]))
    ident = torch.arange(900, dtype=torch.int32, device="cuda").expand(1, 2, 900).contiguous()
    ones = torch.ones((1, 2), dtype=torch.uint8, device="cuda")
    run = lambda m, p=None, ex=None: hnd(_gpu.attention(qs, k, v, layout, scale, False, m, p, True,  # noqa: E731
                                                         head_exact=ex)[0])
    np.testing.assert_array_equal(floor, one("sage2-8bit"))
    host_err = _gpu._row_sq_err(ref, run("sage2-8bit")).cpu().numpy()
    for r in range(4):
        out = run(method, ident if r & 1 else perm, ones if r & 2 else None)
        np.testing.assert_array_equal(psnr[:, r], _gpu._psnr_heads(ref, out))
        # each gain's standard error: the C definition on the same rows' errors
        rec_err = _gpu._row_sq_err(ref, out).cpu().numpy()
        for i in range(2):
            assert se[i, r] == pytest.approx(vcattn.head_policy.gain_stderr(host_err[i], rec_err[i], 700), rel=1e-9)
    assert np.isfinite(psnr).all() and (psnr > 20).all() and (se > 0).all() and np.isfinite(se).all()


def test_overlapping_policy_runs_share_no_state():
    """On a layer long enough that the measurement's runs overlap in time (each one a few tiles
    walking 40,000 keys), the method's P and the exact P run at once on one preprocessed
    workspace: each must still give what it gives alone (they once shared the exact keys' LSE
    and the per-head kernel word in the workspace).  Three draws, fresh inputs each."""
    method, scale, rows, skv = vcattn.DEFAULT_METHOD, 128 ** -0.5, 256, 40_000
    ident = torch.arange(skv, dtype=torch.int32, device="cuda").expand(1, 4, skv).contiguous()
    ones = torch.ones((1, 4), dtype=torch.uint8, device="cuda")
    for seed in range(3):
        q, k, v = inputs(h=4, sq=2048, skv=skv, seed=100 + seed)
        g = torch.Generator().manual_seed(seed)
        perm = torch.stack([torch.randperm(skv, generator=g) for _ in range(4)])[None].to(torch.int32).cuda()
        psnr, _, _ = _gpu.measure_recipes(q, k, v, "HND", scale, method, perm, rows, "faithful", 0.0)
        qs = q.index_select(2, torch.as_tensor((np.arange(rows) * 2048) // rows, device="cuda"))
        ref = _gpu.reference_rows(qs, k, v, scale)
        for r in range(4):
            got = _gpu.attention(qs, k, v, "HND", scale, False, method, ident if r & 1 else perm, True,
                                 head_exact=ones if r & 2 else None)[0]
            np.testing.assert_array_equal(psnr[:, r], _gpu._psnr_heads(ref, got), err_msg=f"seed {seed}, recipe {r}")


def test_attention_kernel_writes_nothing_of_its_workspace():
    """Runs of one preprocessed workspace may overlap (the policy's measurement runs the method's
    P and the exact P at once) only if the kernel half, given an LSE of its own, leaves the
    workspace as the preprocessing wrote it but for the output flag: it once wrote each launch's
    per-head exact-P choice there, and a run that read the other's skipped those heads."""
    q, k, v = inputs(h=4, sq=300, skv=2000, seed=7)
    g = torch.Generator().manual_seed(7)
    perm = torch.stack([torch.randperm(2000, generator=g) for _ in range(4)])[None].to(torch.int32).cuda()
    pair = _gpu._OrderPair(q, k, v, "HND", 128 ** -0.5, vcattn.DEFAULT_METHOD, perm)
    pair.prepare()
    (p, ws, lay), = pair.ws
    flag = slice(lay.output_flag, lay.output_flag + 4)
    before = ws.clone()
    for exact in (True, False, True):
        pair.run(exact)
        torch.cuda.synchronize()
        after = ws.clone()
        after[flag] = before[flag]
        assert torch.equal(before, after), f"exact={exact}: {int((before != after).sum())} workspace bytes changed"


def test_layouts_and_strided_views_agree():
    q, k, v = inputs(layout="NHD")
    a = vcattn.attention(q, k, v, "NHD", method="sage2-8bit", strict=True)
    b = vcattn.attention(*(x.transpose(1, 2).contiguous() for x in (q, k, v)), "HND", method="sage2-8bit",
                         strict=True)
    assert rel(a.transpose(1, 2), b) < 1e-6


@pytest.mark.parametrize("layout", ["HND", "NHD"])
def test_masked_call_writes_the_padded_output_with_the_unpadded_bits(layout):
    """HunyuanVideo's joint mask on a batch of equal lengths: the kernel writes the valid rows
    straight into the padded output (strided rows of a larger tensor) - bit for bit the call on
    the valid tokens, zeros and LSE -inf past them."""
    s, n = 900, 611
    q, k, v = inputs(b=2, sq=s, skv=s, layout=layout, seed=3)
    valid = torch.arange(s, device="cuda") < n
    mask = (valid[:, None] & valid[None, :])[None, None]

    def rows(x, sel):
        return x[:, :, sel] if layout == "HND" else x[:, sel]

    out, lse = vcattn.attention(q, k, v, layout, return_lse=True, attn_mask=mask, plan=vcattn.Plan(policy=None),
                                strict=True)
    one, l1 = vcattn.attention(*(rows(x, slice(n)).contiguous() for x in (q, k, v)), layout, return_lse=True,
                               plan=vcattn.Plan(policy=None), strict=True)
    assert torch.equal(rows(out, slice(n)), one) and torch.equal(lse[:, :, :n], l1)
    assert not rows(out, slice(n, None)).any() and bool(torch.isneginf(lse[:, :, n:]).all())


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


def test_threads_give_the_sequential_bits_on_their_own_streams_and_on_one():
    """Four host threads calling at once, each with its own inputs and method (V-Smooth ones
    group on the GPU each call), each on its own stream and then all on the default
    stream: every output and LSE equals the same call made alone, one after the other."""
    methods = list(_gpu.GPU_METHODS)
    n = 4
    args = [inputs(sq=2048, skv=2048 + 128 * i, seed=20 + i) for i in range(n)]
    meth = [methods[i % len(methods)] for i in range(n)]
    want = [vcattn.attention(*args[i], method=meth[i], return_lse=True, strict=True) for i in range(n)]
    torch.cuda.synchronize()
    for own_streams in (True, False):
        streams = [torch.cuda.Stream() if own_streams else torch.cuda.default_stream() for _ in range(n)]
        got, errors = [None] * n, []
        barrier = threading.Barrier(n)

        def work(i):
            try:
                with torch.cuda.stream(streams[i]):
                    barrier.wait()
                    got[i] = [vcattn.attention(*args[i], method=meth[i], return_lse=True, strict=True)
                              for _ in range(3)]
                streams[i].synchronize()
            except BaseException as e:  # noqa: BLE001 - re-raised below, in the test's thread
                errors.append((i, e))
                barrier.abort()

        threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads), "a thread hung"
        if errors:
            raise errors[0][1]
        torch.cuda.synchronize()
        for i in range(n):
            for r, (out, lse) in enumerate(got[i]):
                assert torch.equal(out, want[i][0]) and torch.equal(lse, want[i][1]), (own_streams, meth[i], r)


@pytest.mark.parametrize("method", _gpu.GPU_METHODS)
@pytest.mark.parametrize("layout", ["HND", "NHD"])
def test_repeated_calls_are_bit_identical(method, layout):
    """The same call three times gives the same bits (output and LSE): without a plan
    (V-Smooth: the GPU k-means groups every call) and with a Plan grouped once."""
    q, k, v = inputs(sq=1000, skv=1500, seed=30, layout=layout)
    for plan in (None, vcattn.Plan(clusters=16)):
        first = vcattn.attention(q, k, v, layout, method=method, plan=plan, return_lse=True, strict=True)
        for r in range(3):
            out, lse = vcattn.attention(q, k, v, layout, method=method, plan=plan, return_lse=True, strict=True)
            assert torch.equal(out, first[0]) and torch.equal(lse, first[1]), (plan is None, r)


def test_graph_stays_valid_after_calls_of_other_shapes_and_methods():
    """A CUDA graph captured on one call replays to its eager bits after later eager calls
    of smaller and larger shapes, other head counts, head_dim 64 and other methods (each
    with its own workspace and, for V-Smooth without a plan, its own GPU k-means), and
    reads its inputs where they were captured: new values copied in give their answer."""
    q, k, v = inputs(sq=1024, skv=1024, seed=40)
    plan = vcattn.Plan(clusters=16)
    vcattn.attention(q, k, v, plan=plan, strict=True)   # groups once, eagerly
    want = vcattn.attention(q, k, v, plan=plan, return_lse=True, strict=True)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        vcattn.attention(q, k, v, plan=plan, return_lse=True, strict=True)  # warm-up on the capture stream
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out, lse = vcattn.attention(q, k, v, plan=plan, return_lse=True, strict=True)
    others = [(dict(sq=8192, skv=8192, seed=41), "sage2-8bit"),
              (dict(sq=100, skv=200, seed=42), "vsmooth-8bit"),
              (dict(h=6, sq=3000, skv=5000, d=64, seed=43), "vsmooth-expcast-8bit"),
              (dict(b=2, h=3, sq=512, skv=300, seed=44), vcattn.DEFAULT_METHOD),
              (dict(sq=16384, skv=16384, seed=45), vcattn.DEFAULT_METHOD)]
    for shape, method in others:
        vcattn.attention(*inputs(**shape), method=method, return_lse=True, strict=True)
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, want[0]) and torch.equal(lse, want[1]), (shape, method)
    q2 = inputs(sq=1024, skv=1024, seed=46)[0]
    want2 = vcattn.attention(q2, k, v, plan=plan, return_lse=True, strict=True)
    q.copy_(q2)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, want2[0]) and torch.equal(lse, want2[1])
    assert not torch.equal(want2[0], want[0])


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
