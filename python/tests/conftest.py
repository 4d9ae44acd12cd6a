"""Which vcattn the tests import.

- In-tree (the default when vcattn is not installed, or whenever VCATTN_LIBRARY is set):
  the package from python/ with the library from $VCATTN_LIBRARY, else build/libvcattn.so
  (cmake -S . -B build && cmake --build build).
- Installed (`pip install .`): the installed package and the library inside it.
  VCATTN_TEST_INSTALLED=1 insists on it (the run fails if vcattn is not installed).

The integration tests skip where torch, diffusers or yunchang is missing.  CI sets
VCATTN_TEST_REQUIRE_STACK=1 (VCATTN_TEST_REQUIRE_YUNCHANG=1, the older name, too): the run
then fails at once when one of them (or torch.distributed with gloo, or diffusers'
WanTransformer3DModel) is missing, and any test that still skips for such a reason fails.
"""
import importlib
import importlib.util
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]

_installed = importlib.util.find_spec("vcattn") is not None and not os.environ.get("VCATTN_LIBRARY")
if os.environ.get("VCATTN_TEST_INSTALLED") == "1":
    if not _installed:
        raise RuntimeError("VCATTN_TEST_INSTALLED=1 but vcattn is not installed (or VCATTN_LIBRARY is set)")
elif not _installed:
    sys.path.insert(0, str(ROOT / "python"))

import vcattn  # noqa: E402


def pytest_report_header(config):
    info = vcattn.library_info()
    return [f"vcattn package: {Path(vcattn.__file__).parent}",
            f"libvcattn: {info['path']} (version {info['version']}, CUDA entry points: {info['cuda_built']})",
            f"stack: {stack_versions()} ({sys.executable})"]


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(autouse=True)
def _denormals_on():
    """Code that torch.compile's inductor builds for the CPU is compiled with -ffast-math and,
    once loaded, turns flush-to-zero / denormals-are-zero on for the whole process (measured on
    torch 2.5.1: float32(1e-39) * 1 == 0 after one compiled call).  Later tests of subnormal
    inputs (V x 1e-40) or bit-equality with a subprocess then fail by test order; every test
    starts with denormals on again."""
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "set_flush_denormal"):
        torch.set_flush_denormal(False)
    yield


# ---- CI: the integration stack must be there (no silent skips) -------------------------------------

REQUIRE_STACK = "1" in (os.environ.get("VCATTN_TEST_REQUIRE_STACK"), os.environ.get("VCATTN_TEST_REQUIRE_YUNCHANG"))
# skip reasons that mean "a package of the stack is missing" (GPU-only skips are fine on the CPU)
_STACK_SKIP = re.compile(r"could not import '(torch|diffusers|yunchang|ml_dtypes)|gloo is not available|"
                         r"no WanTransformer3DModel|WanTransformer3DModel is not installed|custom_op needs torch")


def stack_versions() -> str:
    """'torch X, diffusers Y, yunchang Z, numpy W' installed for this interpreter (read from the
    package metadata: nothing is imported)."""
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for name in ("torch", "diffusers", "yunchang", "numpy"):
        try:
            out.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            out.append(f"{name} missing")
    return ", ".join(out)


def _check_stack():
    problems = []
    for name in ("torch", "diffusers", "yunchang", "ml_dtypes"):
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001
            problems.append(f"{name}: {type(e).__name__}: {e}")
    if not problems:
        import diffusers
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_gloo_available()):
            problems.append("torch.distributed with gloo is not available")
        if getattr(diffusers, "WanTransformer3DModel", None) is None:
            problems.append(f"diffusers {diffusers.__version__} has no WanTransformer3DModel")
    if problems:
        raise pytest.UsageError("VCATTN_TEST_REQUIRE_STACK=1 (CI) but the integration stack is incomplete for "
                                f"{sys.executable}: " + "; ".join(problems) +
                                " - install torch, diffusers and yunchang (.ci/run shows how)")


def pytest_configure(config):
    if REQUIRE_STACK:
        _check_stack()


def _stack_skip_reason(report):
    if not report.skipped or hasattr(report, "wasxfail"):
        return None
    lr = report.longrepr
    reason = lr[2] if isinstance(lr, tuple) and len(lr) == 3 else str(lr)
    return reason if _STACK_SKIP.search(reason) else None


def _fail_stack_skip(report):
    reason = _stack_skip_reason(report)
    if REQUIRE_STACK and reason is not None:
        report.outcome = "failed"
        report.longrepr = f"VCATTN_TEST_REQUIRE_STACK=1 (CI): this must run, but it skipped: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_stack_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _fail_stack_skip(outcome.get_result())
