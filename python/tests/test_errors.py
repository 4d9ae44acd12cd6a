"""Bad inputs raise clear errors: ValueError / TypeError from Python before C is called,
VcattnError (a RuntimeError) carrying the C status for what the library rejects."""
import numpy as np
import pytest

import vcattn
from helpers import make_qkv


def test_vcattn_error_is_runtime_error_with_status():
    e = vcattn.VcattnError(6, "f")
    assert isinstance(e, RuntimeError)
    assert e.status == 6 and e.status_name == "NON_FINITE"
    assert "NaN or Inf" in str(e) and "VCATTN_STATUS_NON_FINITE" in str(e)


def test_wrong_ndim(rng):
    q, k, v = make_qkv(rng)
    with pytest.raises(ValueError, match="4-D"):
        vcattn.attention(q[0], k, v)
    with pytest.raises(ValueError, match="4-D"):
        vcattn.reference_attention(q, k[..., None], v)


@pytest.mark.parametrize("which", ["batch", "heads", "seq", "dim"])
def test_mismatched_shapes(rng, which):
    q, k, v = make_qkv(rng)
    if which == "batch":
        k = np.concatenate([k, k])
        match = "batch"
    elif which == "heads":
        v = v[:, :1]
        match = "head counts"
    elif which == "seq":
        v = v[:, :, :150]
        match = "sequence lengths"
    else:
        q = np.concatenate([q, q], -1)
        match = "head_dim"
    with pytest.raises(ValueError, match=match):
        vcattn.attention(q, k, v)


def test_head_dim_96_is_unsupported_status(rng):
    q, k, v = make_qkv(rng, d=96)
    with pytest.raises(vcattn.VcattnError) as ei:
        vcattn.attention(q, k, v)
    assert ei.value.status_name == "UNSUPPORTED_HEAD_DIM"
    assert "64 or 128" in str(ei.value)
    with pytest.raises(vcattn.VcattnError, match="UNSUPPORTED_HEAD_DIM"):
        vcattn.reference_attention(q, k, v)


def test_unknown_layout_and_method(rng):
    q, k, v = make_qkv(rng)
    with pytest.raises(ValueError, match="tensor_layout"):
        vcattn.attention(q, k, v, tensor_layout="BHSD")
    with pytest.raises(ValueError, match="unknown method 'sage9'.*vsmooth-8bit"):
        vcattn.attention(q, k, v, method="sage9")
    with pytest.raises(TypeError):
        vcattn.attention(q, k, v, method=3)


def test_non_contiguous_last_dim(rng):
    q, k, v = make_qkv(rng, d=128)
    with pytest.raises(ValueError, match="last .*contiguous"):
        vcattn.attention(q[..., ::2], k[..., ::2], v[..., ::2])


@pytest.mark.parametrize("where", ["q", "k", "v"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_input(rng, where, bad):
    q, k, v = make_qkv(rng)
    {"q": q, "k": k, "v": v}[where][0, 1, 17, 5] = bad
    with pytest.raises(vcattn.VcattnError) as ei:
        vcattn.attention(q, k, v)
    assert ei.value.status_name == "NON_FINITE"
    with pytest.raises(vcattn.VcattnError, match="NON_FINITE"):
        vcattn.reference_attention(q, k, v)


def test_bad_types_and_dtypes(rng):
    q, k, v = make_qkv(rng)
    with pytest.raises(TypeError, match="numpy.ndarray or a torch.Tensor"):
        vcattn.attention(q.tolist(), k, v)
    with pytest.raises(TypeError, match="dtype"):
        vcattn.attention(q.astype(np.int32), k, v)


@pytest.mark.parametrize("scale", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_sm_scale(rng, scale):
    q, k, v = make_qkv(rng)
    with pytest.raises(ValueError, match="sm_scale"):
        vcattn.attention(q, k, v, sm_scale=scale)


def test_bad_plan_and_step(rng):
    q, k, v = make_qkv(rng)
    with pytest.raises(ValueError, match="shape"):
        vcattn.attention(q, k, v, plan=np.zeros((1, 2, 7), np.int32))
    with pytest.raises(ValueError, match="not a permutation"):
        vcattn.attention(q, k, v, plan=np.zeros((1, 2, 200), np.int32))  # not a permutation
    with pytest.raises(ValueError, match="step needs a plan"):
        vcattn.attention(q, k, v, step=3)
    with pytest.raises(ValueError, match="step"):
        vcattn.attention(q, k, v, plan=vcattn.Plan(), step=-1)
    with pytest.raises(TypeError, match="plan"):
        vcattn.attention(q, k, v, plan="auto")
    with pytest.raises(TypeError, match="plan"):
        vcattn.attention(q, k, v, plan="auto", method="sage2-8bit")  # checked for every method


def test_bad_num_threads(rng):
    q, k, v = make_qkv(rng)
    with pytest.raises(ValueError, match="num_threads"):
        vcattn.attention(q, k, v, num_threads=-1)


# ---- issue 29: errors that name the cause and the fix (fresh random, non-zero inputs) ---------

def fresh(rng, **kw):
    q, k, v = make_qkv(rng, **kw)
    assert all(np.count_nonzero(x) == x.size for x in (q, k, v))
    return q, k, v


@pytest.mark.parametrize("case", ["S=0", "B=0", "H=0", "Skv=0", "NHD S=0"])
def test_zero_size_input_names_the_empty_axis(rng, case):
    # was: "q's last (head_dim) axis must be contiguous ... got strides (0, 0, 0, 0) - call .contiguous()",
    # a fix that does not work (numpy gives every axis of an empty array stride 0)
    q, k, v = fresh(rng, sq=96, skv=128)
    layout = "HND"
    if case == "S=0":
        q, name, axis = q[:, :, :0], "q", "S (tokens) is 0"
    elif case == "B=0":
        q, k, v = q[:0], k[:0], v[:0]
        name, axis = "q", "B (batch) is 0"
    elif case == "H=0":
        q, k, v = q[:, :0], k[:, :0], v[:, :0]
        name, axis = "q", "H (heads) is 0"
    elif case == "Skv=0":
        k, v = k[:, :, :0], v[:, :, :0]
        name, axis = "k", "S (tokens) is 0"
    else:
        q, k, v = (np.ascontiguousarray(x.transpose(0, 2, 1, 3)) for x in (q, k, v))
        q, name, axis, layout = q[:, :0], "q", "S (tokens) is 0", "NHD"
    for fn in (vcattn.attention, vcattn.reference_attention):
        with pytest.raises(vcattn.VcattnError) as ei:
            fn(q, k, v, tensor_layout=layout)
        msg = str(ei.value)
        assert ei.value.status_name == "BAD_SHAPE", msg
        assert f"{name} has shape" in msg and axis in msg and "skip the call" in msg, msg
        assert "stride" not in msg and "contiguous" not in msg, msg


def test_invalid_permutation_plan_names_the_plan_the_bad_entry_and_the_fix(rng):
    q, k, v = fresh(rng, sq=64, skv=160)
    good = vcattn.kmeans_plan(v, clusters=8)[0]
    vcattn.attention(q, k, v, plan=good)  # the fix works
    dup = good.copy()
    dup[0, 1, 7] = dup[0, 1, 9]            # token dup[0,1,9] twice, the old dup[0,1,7] never
    missing = int(good[0, 1, 7])
    with pytest.raises(ValueError) as ei:
        vcattn.attention(q, k, v, plan=dup)
    msg = str(ei.value)
    assert "permutation plan" in msg and "not a permutation of 0..159" in msg, msg
    assert f"row [0, 1] holds token {int(good[0, 1, 9])} 2 times and never token {missing}" in msg, msg
    assert "vcattn.kmeans_plan" in msg and "vcattn.Plan" in msg, msg
    big = good.copy()
    big[0, 0, 5] = 160
    with pytest.raises(ValueError, match=r"entry \[0, 0, 5\] is 160, outside 0..159.*kmeans_plan"):
        vcattn.attention(q, k, v, plan=big)
    neg = good.copy()
    neg[0, 1, 0] = -3
    with pytest.raises(ValueError, match=r"entry \[0, 1, 0\] is -3"):
        vcattn.attention(q, k, v, plan=neg)
    for bad, got in ((good[:, :, :100], r"int32 \(1, 2, 100\)"), (good[0], r"int32 \(2, 160\)"),
                     (good.astype(np.float32), r"float32 \(1, 2, 160\)")):
        with pytest.raises(ValueError) as ei:
            vcattn.attention(q, k, v, plan=bad)
        msg = str(ei.value)
        assert "shape (B, H, Skv) = (1, 2, 160)" in msg and "kmeans_plan" in msg, msg
        assert __import__("re").search(got, msg), msg
    with pytest.raises(ValueError, match=r"vcattn.Plan: perm is not a permutation.*row \[0, 1\].*kmeans_plan"):
        vcattn.Plan(perm=dup)


def test_num_threads_out_of_range_names_the_range(rng, monkeypatch):
    # was: OUT_OF_MEMORY from the library for num_threads=100000
    q, k, v = fresh(rng)
    for bad in (100000, 1025, -1, 2.0, True):
        with pytest.raises(ValueError) as ei:
            vcattn.attention(q, k, v, num_threads=bad)
        assert "num_threads must be an int in 0..1024" in str(ei.value) and "0 = all cores" in str(ei.value)
        with pytest.raises(ValueError, match=r"0\.\.1024"):
            vcattn.reference_attention(q, k, v, num_threads=bad)
    for make in (lambda: vcattn.PlanCache(num_threads=100000), lambda: vcattn.Plan(num_threads=100000),
                 lambda: vcattn.kmeans_plan(v, num_threads=100000)):
        with pytest.raises(ValueError, match=r"num_threads must be an int in 0\.\.1024"):
            make()
    monkeypatch.setenv("VCATTN_NUM_THREADS", "100000")
    with pytest.raises(ValueError, match=r"VCATTN_NUM_THREADS must be an int in 0\.\.1024"):
        vcattn.attention(q, k, v)
    out = vcattn.attention(q, k, v, num_threads=2)  # an explicit count wins over the variable
    assert np.isfinite(out).all()


@pytest.mark.parametrize("layout", ["HND", "NHD"])
@pytest.mark.parametrize("where", ["q", "k", "v"])
@pytest.mark.parametrize("bad", [np.nan, -np.inf])
def test_non_finite_error_names_the_tensor_and_index(rng, where, bad, layout):
    q, k, v = fresh(rng, layout=layout)
    x = {"q": q, "k": k, "v": v}[where]
    idx = (0, 1, 17, 5) if layout == "HND" else (0, 17, 1, 5)
    x[idx] = bad
    for fn in (vcattn.attention, vcattn.reference_attention):
        with pytest.raises(vcattn.VcattnError) as ei:
            fn(q, k, v, tensor_layout=layout)
        msg = str(ei.value)
        assert ei.value.status_name == "NON_FINITE", msg
        assert f"{where} holds {float(bad)} at index {list(idx)}" in msg, msg
        assert [n for n in "qkv" if f"{n} holds" in msg] == [where], msg


@pytest.mark.parametrize("flag", ["no", "False", 1, 0, None])
def test_return_lse_must_be_a_bool(rng, flag):
    q, k, v = fresh(rng)
    for fn in (vcattn.attention, vcattn.reference_attention):
        with pytest.raises(TypeError, match="return_lse must be True or False"):
            fn(q, k, v, return_lse=flag)
    out, lse = vcattn.attention(q, k, v, return_lse=np.bool_(True))
    assert lse.shape == (1, 2, 200)


def _torch():
    import os

    if os.environ.get("VCATTN_TEST_REQUIRE_STACK") == "1":
        import torch
        return torch
    return pytest.importorskip("torch")


def test_torch_tensors_get_the_same_messages(rng):
    torch = _torch()
    q, k, v = (torch.from_numpy(x) for x in fresh(rng))
    bad = k.clone()
    bad[0, 0, 3, 9] = float("nan")
    with pytest.raises(vcattn.VcattnError, match=r"k holds nan at index \[0, 0, 3, 9\]"):
        vcattn.attention(q, bad, v)
    with pytest.raises(vcattn.VcattnError, match=r"S \(tokens\) is 0.*skip the call"):
        vcattn.attention(q[:, :, :0], k, v)
    with pytest.raises(ValueError, match=r"not a permutation.*kmeans_plan"):
        vcattn.attention(q, k, v, plan=torch.zeros(1, 2, 200, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"0\.\.1024"):
        vcattn.attention(q, k, v, num_threads=100000)
    with pytest.raises(TypeError, match="return_lse"):
        vcattn.attention(q, k, v, return_lse="no")


def test_fidelity_shape_mismatch():
    with pytest.raises(ValueError, match="shapes differ"):
        vcattn.fidelity(np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32))
    with pytest.raises(vcattn.VcattnError, match="NON_FINITE"):
        vcattn.fidelity(np.array([1.0, np.nan], np.float32), np.zeros(2, np.float32))


def test_error_pickles():
    import pickle

    e = pickle.loads(pickle.dumps(vcattn.VcattnError(6, "vcattn_simulate_attention", "method x")))
    assert e.status_name == "NON_FINITE" and "method x" in str(e)


def test_import_does_not_import_torch():
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = dict(os.environ, PYTHONPATH=str(Path(vcattn.__file__).resolve().parents[1]))
    env.setdefault("VCATTN_LIBRARY", vcattn.library_info()["path"])
    code = "import sys, vcattn; assert 'torch' not in sys.modules, 'vcattn imported torch'"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_bad_library_path_fails_at_import(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    pkg_parent = str(Path(vcattn.__file__).resolve().parents[1])
    env = dict(os.environ, VCATTN_LIBRARY=str(tmp_path / "nope.so"), PYTHONPATH=pkg_parent)
    r = subprocess.run([sys.executable, "-c", "import vcattn"], env=env, capture_output=True, text=True)
    assert r.returncode != 0
    assert "ImportError" in r.stderr and "nope.so" in r.stderr and "VCATTN_LIBRARY" in r.stderr


def test_works_where_torch_cannot_be_imported():
    # torch is optional: with every torch import failing, vcattn imports and computes, and
    # only the torch helpers say they need it
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = "\n".join([
        "import sys, importlib.abc",
        "class NoTorch(importlib.abc.MetaPathFinder):",
        "    def find_spec(self, name, path, target=None):",
        "        if name == 'torch' or name.startswith('torch.'):",
        "            raise ImportError('no torch here')",
        "sys.meta_path.insert(0, NoTorch())",
        "import numpy as np, vcattn",
        "q, k, v = np.random.default_rng(0).standard_normal((3, 1, 2, 130, 64)).astype(np.float32)",
        "f = vcattn.fidelity(vcattn.reference_attention(q, k, v), vcattn.attention(q, k, v))",
        "assert f['rel_l2'] < 0.08, f",
        "try:",
        "    vcattn.patch_sdpa().__enter__()",
        "except ImportError as e:",
        "    assert 'needs torch' in str(e), e",
        "else:",
        "    raise SystemExit('patch_sdpa did not raise ImportError')",
        "print('ok')",
    ])
    env = dict(os.environ, PYTHONPATH=str(Path(vcattn.__file__).resolve().parents[1]))
    env.setdefault("VCATTN_LIBRARY", vcattn.library_info()["path"])
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
