"""The example scripts run (small sizes) and exit 0; torch / diffusers ones skip cleanly."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

import vcattn

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_example(name, *args, timeout=60):
    env = dict(os.environ, PYTHONPATH=str(Path(vcattn.__file__).resolve().parents[1]),
               VCATTN_LIBRARY=vcattn.library_info()["path"])
    r = subprocess.run([sys.executable, str(EXAMPLES / name), *args], env=env, capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return r.stdout


pytestmark = pytest.mark.skipif(not EXAMPLES.is_dir(), reason="examples/ not next to the tests")


def test_attention_numpy():
    out = run_example("attention_numpy.py", "--frames", "2", "--height", "8", "--width", "16", "--head-dim", "64")
    for m in vcattn.methods():
        assert m in out
    assert "PSNR" in out


def test_schedule_demo():
    out = run_example("schedule_demo.py", "--steps", "40", "--layers", "1", "--seq", "256")
    assert "grouped at steps [0, 4, 8] (schedule says [0, 4, 8])" in out


def test_torch_examples_run_or_skip():
    run_example("sdpa_patch_torch.py")
    run_example("diffusers_wan_processor.py", "--steps", "2", timeout=120)


def test_yunchang_wan_torchrun():
    # two ranks over gloo on the CPU: Ulysses with vcattn, then the ring with exact attention
    # (the script checks the gathered output against one process and exits non-zero on a miss)
    if os.environ.get("VCATTN_TEST_REQUIRE_YUNCHANG") != "1":
        pytest.importorskip("torch")
        pytest.importorskip("yunchang")
    for extra in ([], ["--ulysses-degree", "1", "--attn-fn", "reference"]):
        out = run_torchrun("yunchang_wan_torchrun.py", 2, *extra)
        assert "check: ok" in out and "2 ranks" in out


def run_torchrun(name, nproc, *args, timeout=120):
    env = dict(os.environ, PYTHONPATH=str(Path(vcattn.__file__).resolve().parents[1]),
               VCATTN_LIBRARY=vcattn.library_info()["path"], OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
                        str(EXAMPLES / name), *args], env=env, capture_output=True, text=True, timeout=timeout)
    # torchrun's own traceback fills the tail of stderr; the failing rank's message comes earlier
    cause = [ln for ln in r.stderr.splitlines()
             if any(w in ln for w in ("terminate called", "what():", "Error", "error:", "Traceback"))]
    assert r.returncode == 0, (r.stdout[-2000:] + "\n-- rank messages:\n" + "\n".join(cause[:20]) +
                               "\n-- stderr tail:\n" + r.stderr[-2000:])
    return r.stdout
