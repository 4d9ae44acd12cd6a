"""Which vcattn the tests import.

- In-tree (the default when vcattn is not installed, or whenever VCATTN_LIBRARY is set):
  the package from python/ with the library from $VCATTN_LIBRARY, else build/libvcattn.so
  (cmake -S . -B build && cmake --build build).
- Installed (`pip install .`): the installed package and the library inside it.
  VCATTN_TEST_INSTALLED=1 insists on it (the run fails if vcattn is not installed).
"""
import importlib.util
import os
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
            f"libvcattn: {info['path']} (version {info['version']}, CUDA entry points: {info['cuda_built']})"]


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
