"""Schedule grouping steps, Plan reuse and warm start, PlanCache bookkeeping."""
import numpy as np
import pytest

import vcattn
from helpers import make_qkv


def test_paper_schedule_40_steps():
    s = vcattn.Schedule(40)
    assert s.window == 10
    assert s.grouping_steps() == [0, 4, 8]
    assert {i for i in range(40) if s.should_group(i)} == {0, 4, 8}
    assert all(s.uses_vsmooth(i) for i in range(40))
    assert [s.action(i) for i in (0, 1, 4, 8, 9, 10, 39)] == ["group", "reuse", "group", "group", "reuse",
                                                             "reuse", "reuse"]


@pytest.mark.parametrize("n,steps", [(50, [0, 4, 8, 12]), (30, [0, 4]), (4, [0]), (1, [0]), (20, [0, 4]),
                                     (16, [0]), (17, [0, 4])])
def test_schedule_variants(n, steps):
    # ceil(n/4) steps, every 4th: 50 -> 13 -> {0,4,8,12}; 17 -> 5 -> {0,4}; 16 -> 4 -> {0}
    assert vcattn.Schedule(n).grouping_steps() == steps


def test_schedule_options():
    assert vcattn.Schedule(40, group_every_step=True).grouping_steps() == list(range(40))
    assert vcattn.Schedule(40, refresh_every=2).grouping_steps() == [0, 2, 4, 6, 8]
    assert vcattn.Schedule(40, group_fraction=0.5).grouping_steps() == [0, 4, 8, 12, 16]
    assert vcattn.Schedule(30, group_fraction=0.1, refresh_every=1).grouping_steps() == [0, 1, 2]  # exact ceil
    s = vcattn.Schedule(40, keep_demean_after_window=False)
    assert [s.action(i) for i in (0, 9, 10, 39)] == ["group", "reuse", "off", "off"]


def test_schedule_bad_arguments():
    for kw in (dict(num_steps=0), dict(num_steps=2.5), dict(num_steps=10, group_fraction=0),
               dict(num_steps=10, group_fraction=1.5), dict(num_steps=10, refresh_every=0)):
        with pytest.raises(ValueError):
            vcattn.Schedule(**kw)
    s = vcattn.Schedule(40)
    with pytest.raises(ValueError, match="outside"):
        s.should_group(40)
    with pytest.raises(TypeError):
        s.should_group(1.0)


def test_plan_groups_once_then_reuses(rng):
    q, k, v = make_qkv(rng)
    plan = vcattn.Plan()
    a = vcattn.attention(q, k, v, plan=plan)
    assert plan.num_groupings == 1 and plan.perm.shape == (1, 2, 200) and plan.centroids.shape == (1, 2, 64, 64)
    perm = plan.perm
    b = vcattn.attention(q, k, v, plan=plan)
    assert plan.num_groupings == 1 and plan.perm is perm
    np.testing.assert_array_equal(a, b)
    # a new shape (another resolution) groups again
    q2, k2, v2 = make_qkv(rng, sq=64, skv=300)
    vcattn.attention(q2, k2, v2, plan=plan)
    assert plan.num_groupings == 2 and plan.perm.shape == (1, 2, 300)


def test_plan_cache_follows_schedule_with_warm_start(rng):
    n = 12
    cache = vcattn.PlanCache(vcattn.Schedule(n), clusters=16, iterations=4)
    q, k, v = make_qkv(rng, sq=128, skv=256)
    for step in range(n):
        cache.set_step(step)
        for layer in ("blocks.0.attn1", "blocks.1.attn1"):
            # the inputs drift a little from step to step, as latents do
            vv = v + 0.01 * step
            out = cache.attention(layer, q, k, vv, method="vsmooth-8bit")
            assert out.shape == q.shape
    assert cache.grouped_steps() == [0]            # ceil(12/4) = 3 -> only step 0
    assert len(cache) == 2 and "blocks.1.attn1" in cache
    summ = cache.summary()
    assert summ[0]["group"] == 2 and summ[5]["reuse"] == 2
    cache40 = vcattn.PlanCache(vcattn.Schedule(40), clusters=8, iterations=2)
    for step in range(12):
        cache40.set_step(step)
        cache40.attention("L", q, k, v + 0.01 * step)
    assert cache40.grouped_steps() == [0, 4, 8]
    assert cache40["L"].num_groupings == 3
    cache40.clear()
    assert len(cache40) == 0


def test_warm_start_uses_previous_centroids(rng):
    _, _, v = make_qkv(rng)
    plan = vcattn.Plan(clusters=8, iterations=1)
    plan.group(v)
    c1 = plan.centroids.copy()
    cold = vcattn.kmeans_plan(v + 0.001, clusters=8, iterations=1)[1]
    warm = vcattn.kmeans_plan(v + 0.001, clusters=8, iterations=1, init_centroids=c1)[1]
    plan.group(v + 0.001)
    np.testing.assert_array_equal(plan.centroids, warm)   # the plan warm-starts from its centroids
    assert not np.array_equal(warm, cold)
    no_warm = vcattn.Plan(clusters=8, iterations=1, warm_start=False).group(v)
    no_warm.group(v + 0.001)
    np.testing.assert_array_equal(no_warm.centroids, cold)


def test_one_grouping_per_step_even_with_several_calls(rng):
    q, k, v = make_qkv(rng)
    plan = vcattn.Plan(schedule=vcattn.Schedule(40), clusters=8)
    for _ in range(3):
        vcattn.attention(q, k, v, plan=plan, step=0)
    assert plan.num_groupings == 1
    vcattn.attention(q, k, v, plan=plan, step=4)
    assert plan.num_groupings == 2


def test_vsmooth_off_after_window(rng):
    q, k, v = make_qkv(rng)
    cache = vcattn.PlanCache(vcattn.Schedule(8, keep_demean_after_window=False), clusters=8)
    out_on = cache.attention("L", q, k, v, step=0)
    out_off = cache.attention("L", q, k, v, step=5)
    assert cache["L"].history[-1] == (5, "off")
    assert not np.array_equal(out_on, out_off)
    ref = vcattn.reference_attention(q, k, v)
    assert vcattn.fidelity(ref, out_off)["rel_l2"] < 0.08


def test_plan_validation():
    with pytest.raises(ValueError):
        vcattn.Plan(clusters=0)
    with pytest.raises(ValueError):
        vcattn.Plan(np.zeros((2, 3), np.int32))
    with pytest.raises(TypeError):
        vcattn.Plan(schedule=40)
    with pytest.raises(TypeError):
        vcattn.PlanCache(schedule="paper")


# ---- per-head recipes (vcattn.head_policy) ---------------------------------------------------

def _sink_heads(rng, s=512, d=64):
    """Two heads: head 0 ordinary, head 1 a sink head (a few tokens with massive V whose keys
    take most of every row's mass), as docs/workload.md describes them."""
    q, k, v = make_qkv(rng, h=2, sq=s, d=d)
    sinks = rng.choice(s, 6, replace=False)
    u = rng.standard_normal(d).astype(np.float32)
    u /= np.linalg.norm(u)
    q[0, 1] += 3.0 * u
    k[0, 1, sinks] += 9.0 * np.sqrt(d) / 3.0 * u  # ~9 nats above the rest
    v[0, :, sinks] *= 12.0
    return q, k, v


def test_plan_recipes_are_measured_once_and_replayed(rng):
    q, k, v = _sink_heads(rng)
    plan = vcattn.Plan(policy="floor", policy_rows=64)
    out = vcattn.attention(q, k, v, plan=plan)
    assert plan.recipes.shape == (1, 2) and plan.recipes.dtype == np.uint8
    s = plan.recipe_summary()
    assert s["policy"] == "floor" and len(s["recipes"]) == 2 and len(s["margin_db"][0]) == 4
    assert len(s["stderr_db"]) == 2 and len(s["stderr_db"][0]) == 4
    psnr, floor, se = plan.recipe_psnr, plan.recipe_floor, plan.recipe_stderr
    assert se.shape == (1, 2, 4) and (se[~np.isnan(psnr)] > 0).all()  # 64 rows of 700: a sample
    # the floor rule, from what was measured: the first recipe that reaches sage2-8bit + margin
    # by two standard errors of its measured gain
    stderrs = vcattn.head_policy.defaults()[2]
    assert stderrs == 2.0
    for h in range(2):
        need = floor[0, h] + plan.policy_margin_db + stderrs * se[0, h]
        ok = [r for r in range(4) if psnr[0, h, r] >= need[r]]
        want = ok[0] if ok else int(np.argmax(psnr[0, h]))
        assert plan.recipes[0, h] == want
    # replayed: the same recipes and output on the next call, nothing measured again
    before = plan.recipe_psnr.copy()
    np.testing.assert_array_equal(vcattn.attention(q, k, v, plan=plan), out)
    assert plan.recipe_psnr is not None and np.array_equal(plan.recipe_psnr, before)
    # the output is the method run per head with the chosen recipe (identity order, exact P)
    perm, exact = vcattn.head_policy.apply(plan.perm, plan.recipes.reshape(-1))
    ref = vcattn.attention(q, k, v, plan=vcattn.Plan(perm, policy=None))
    if exact is None:
        np.testing.assert_array_equal(out, ref)
    for h in range(2):
        if not plan.recipes[0, h] & vcattn.head_policy.EXACT_P:
            np.testing.assert_array_equal(out[0, h], ref[0, h])


def test_plan_policy_none_is_the_method_as_it_is(rng):
    q, k, v = make_qkv(rng)
    plan = vcattn.Plan(policy=None)
    a = vcattn.attention(q, k, v, plan=plan)
    assert plan.recipes is None and plan.recipe_summary() == {}
    np.testing.assert_array_equal(a, vcattn.attention(q, k, v, plan=plan.perm))


def test_plan_faithful_beats_the_floor_on_the_measured_rows(rng):
    q, k, v = _sink_heads(rng)
    plan = vcattn.Plan(policy="faithful", policy_rows=64)
    vcattn.attention(q, k, v, plan=plan)
    best = plan.recipe_psnr.max(axis=2)
    chosen = np.take_along_axis(plan.recipe_psnr, plan.recipes[..., None].astype(np.int64), axis=2)[..., 0]
    np.testing.assert_array_equal(chosen, best)


@pytest.mark.parametrize("policy", vcattn.head_policy.POLICIES)
def test_measuring_in_order_chooses_as_measuring_all(rng, policy):
    """The GPU measures recipes in order and stops when the policy cannot use more: the choice
    must be the one made with every recipe measured, on random tables where heads pass at
    different recipes, none, or all; "floor" must stop after recipe 0 when every head passes."""
    hp = vcattn.head_policy
    for trial in range(200):
        n = int(rng.integers(1, 9))
        full = rng.normal(60.0, 3.0, (n, 4))
        full_se = np.abs(rng.normal(0.0, 1.0, (n, 4)))
        floor = rng.normal(60.0, 3.0, n)
        margin = float(rng.choice([0.0, 0.25, 1.0]))
        runs = []
        got, got_se = hp.measure_in_order(policy, floor, margin,
                                          lambda r: (runs.append(r), (full[:, r], full_se[:, r]))[1])
        assert runs == list(range(len(runs))) and len(runs) <= hp.recipes_needed(policy)
        np.testing.assert_array_equal(got[:, :len(runs)], full[:, :len(runs)])
        np.testing.assert_array_equal(got_se[:, :len(runs)], full_se[:, :len(runs)])
        assert np.isnan(got[:, len(runs):]).all() and np.isnan(got_se[:, len(runs):]).all()
        want = hp.choose(policy, full if policy != "fastest" else np.where(np.arange(4) < 2, full, np.nan),
                         floor, margin, full_se)
        np.testing.assert_array_equal(hp.choose(policy, got, floor, margin, got_se), want)
    runs = []
    hp.measure_in_order(policy, np.full(3, 60.0), 0.25,
                        lambda r: (runs.append(r), (np.full(3, 70.0), np.full(3, 0.5)))[1])
    assert len(runs) == {"floor": 1, "fastest": 2, "faithful": 4}[policy]


def test_floor_measures_heads_that_refused_the_method_again_on_more_rows():
    """Under "floor" a head whose method as designed (recipe 0) does not reach the floor is
    measured again on 4x the rows - only those heads - and takes that measurement's choice; heads
    whose method reached it keep the first one."""
    hp = vcattn.head_policy
    nan = float("nan")
    floor = np.array([60.0, 60.0, 60.0, 60.0])
    first = (np.array([[62.0, 61.0, 63.0, nan],    # head 0: recipe 0 at the floor (62 >= 60 + 2 x 0.5)
                       [60.5, 60.2, 60.8, 60.1],   # head 1: none (a gain under two standard errors)
                       [59.0, 58.0, 59.5, 58.5],   # head 2: none
                       [60.5, 62.0, nan, nan]]),   # head 3: sequence order, not the method
             np.full((4, 4), 0.5), floor)
    second = (np.array([[55.0, 55.0, 55.0, 55.0],  # head 0 would lose here: not asked again
                        [60.2, 61.5, 61.0, 60.0],  # head 1: sequence order reaches it (61.5 >= 60.4)
                        [59.0, 58.0, 59.8, 58.5],  # head 2: none again: the most faithful
                        [61.0, 62.0, nan, nan]]),  # head 3: the method reaches it now
              np.full((4, 4), 0.2), floor + 0.0)
    perm = np.tile(np.arange(4096, dtype=np.int32), (1, 4, 1))
    for policy, seq_q, want_rows in (("floor", 75600, [512, 2048]), ("floor", 512, [512]),
                                     ("faithful", 75600, [512]), ("floor", 1000, [512, 1000])):
        plan = vcattn.Plan(policy=policy, policy_rows=512)
        rows = []

        def measure(pm, n, heads=None):
            rows.append(n)
            assert (heads is None) == (len(rows) == 1)  # the second measures those heads only
            if heads is not None:
                assert heads.tolist() == [1, 2, 3]
            got = first if len(rows) == 1 else second
            return tuple(np.array(a if heads is None else a[heads], copy=True) for a in got)

        plan.apply_recipes(perm, "vsmooth-split-blockmax-8bit", measure, seq_q)
        assert rows == want_rows, (policy, seq_q)
        if policy == "floor" and len(rows) == 2:
            assert hp.names(plan.recipes) == ["k-means", "sequence", "k-means+exact-P", "k-means"]
            assert plan.recipe_rechecked.tolist() == [[False, True, True, True]]
            np.testing.assert_array_equal(plan.recipe_psnr[0, 0], first[0][0])
            np.testing.assert_array_equal(plan.recipe_psnr[0, 1:], second[0][1:])
            assert plan.recipe_summary()["rechecked"] == [False, True, True, True]
        elif policy == "floor":
            assert hp.names(plan.recipes) == ["k-means", "k-means+exact-P", "k-means+exact-P", "sequence"]
            assert not plan.recipe_rechecked.any()


@pytest.mark.parametrize("layout", ["HND", "NHD"])
def test_measuring_some_heads_again_is_those_heads_of_the_whole(rng, layout):
    """The recheck measures only the heads that reached no recipe, as one batch item: each head's
    numbers must be the ones a measurement of the whole call gives it (both layouts, B > 1,
    cross-attention)."""
    from vcattn import _cpu, _tensors

    b, h, sq, skv = 2, 3, 300, 260
    q, k, v = make_qkv(rng, b=b, h=h, sq=sq, skv=skv, layout=layout)
    perm = np.stack([np.stack([rng.permutation(skv) for _ in range(h)]) for _ in range(b)]).astype(np.int32)
    method = vcattn.DEFAULT_METHOD
    whole = _cpu.measure_recipes(_cpu.Problem(q, k, v, layout, 0.0, False, 1).params, method, perm, sq, 96)
    heads = np.array([1, 3, 5])  # (0, 1), (1, 0), (1, 2)
    sq_, sk_, sv_, sp_, lay = _tensors.heads_subset(q, k, v, perm, layout, heads)
    assert sq_.shape == (1, 3, sq, q.shape[-1]) and sk_.shape == (1, 3, skv, q.shape[-1]) and sp_.shape == (1, 3, skv)
    part = _cpu.measure_recipes(_cpu.Problem(sq_, sk_, sv_, lay, 0.0, False, 1).params, method, sp_, sq, 96)
    for w, p in zip(whole, part):
        np.testing.assert_array_equal(p, w[heads])


def test_recheck_through_the_call_is_the_same_in_every_path(rng):
    """On randn with few measured rows the split rarely reaches the floor, so most heads are
    measured again: the numpy path (HND) and the torch CPU path (NHD) must take the same choices,
    rechecked heads alike, and give the same output."""
    torch = pytest.importorskip("torch")
    q, k, v = (rng.standard_normal((1, 4, 512, 64)).astype(np.float32) for _ in range(3))
    a = vcattn.Plan(seed=0, policy_rows=64)
    out = vcattn.attention(q, k, v, plan=a)
    assert a.recipe_rechecked.any()
    nhd = [torch.from_numpy(x).transpose(1, 2).contiguous() for x in (q, k, v)]
    b = vcattn.Plan(seed=0, policy_rows=64)
    out_t = vcattn.attention(*nhd, plan=b, tensor_layout="NHD")
    assert a.recipe_summary() == b.recipe_summary()
    np.testing.assert_array_equal(out_t.transpose(1, 2).numpy(), out)


@pytest.mark.parametrize("kw, word", [(dict(policy="best"), "policy"), (dict(policy_rows=0), "policy_rows"),
                                      (dict(policy_margin_db=float("nan")), "policy_margin_db")])
def test_plan_policy_arguments_are_checked(kw, word):
    with pytest.raises(ValueError, match=word):
        vcattn.Plan(**kw)
