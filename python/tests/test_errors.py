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
    with pytest.raises(vcattn.VcattnError, match="INVALID_ARGUMENT"):
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
