"""vcattn: VC-Attention (V-Smooth + ExpCast) low-bit attention for video DiTs.

A thin ctypes layer over libvcattn (the C library does the work).  numpy is the only
hard dependency; torch tensors are accepted when torch is installed.

    import vcattn
    out = vcattn.attention(q, k, v, tensor_layout="HND")          # (B,H,S,D)
    out, lse = vcattn.attention(q, k, v, return_lse=True)
    ref = vcattn.reference_attention(q, k, v)                      # exact, FP64
    vcattn.fidelity(ref, out)                                      # rel_l2, cosine, psnr_db
    print(vcattn.evaluate(q, k, v).table())                        # every method, per head (vcattn.eval)
    handle = vcattn.diffusers.enable(pipe)                         # a diffusers video pipeline (vcattn.diffusers)

See docs/python.md.  The library is loaded from the package directory;
$VCATTN_LIBRARY (a path to libvcattn.so) overrides it.
"""
from __future__ import annotations

import sys

from ._lib import VcattnError, has_symbol, load_library, library_path
from ._methods import DEFAULT_METHOD, GPU_METHODS, method_config, methods
from .core import PlanCache, attention, expcast_facts, fidelity, merge_attention, reference_attention
from .integration import VcattnAttnProcessor, attention_with_lse, flash_attn_forward, install_wan_processors, patch_sdpa
from .plan import Plan, Schedule, block_energy_share, cube_permutation, kmeans_plan
from . import masks, parallel
from . import diffusers
from .parallel import RingAttention, UlyssesAttention
from .capturing import capture

__version__ = "0.1.0"

load_library()  # fail at import, with the paths tried, when libvcattn cannot be loaded

if "torch" in sys.modules:
    # torch.ops.vcattn.* exist from here on; without torch they are registered by the first
    # call with torch tensors (import vcattn never imports torch itself)
    from . import _ops  # noqa: F401 (registration is the point)


def __getattr__(name):
    # vcattn.evaluate / vcattn.EvalReport load vcattn.eval on first use, so that
    # `python -m vcattn.eval` runs the module fresh (runpy warns about a module imported before)
    if name in ("evaluate", "EvalReport"):
        from . import eval as _eval_module

        return getattr(_eval_module, name)
    raise AttributeError(f"module 'vcattn' has no attribute {name!r}")


def library_version() -> str:
    """The C library's version string (vcattn_version_string)."""
    from ._lib import lib

    return lib.vcattn_version_string().decode()


def library_info() -> dict:
    """Where the library was loaded from, its version, and whether it has the CUDA entry points."""
    return dict(path=library_path(), version=library_version(), cuda_built=has_symbol("vcattn_gpu_attention"))


__all__ = ["VcattnError", "attention", "reference_attention", "fidelity", "merge_attention", "expcast_facts",
           "methods", "method_config", "DEFAULT_METHOD", "GPU_METHODS", "Plan", "PlanCache", "Schedule", "kmeans_plan",
           "cube_permutation", "block_energy_share", "library_info", "library_version", "patch_sdpa",
           "attention_with_lse", "flash_attn_forward", "VcattnAttnProcessor", "install_wan_processors",
           "masks", "parallel", "diffusers", "UlyssesAttention", "RingAttention", "evaluate", "EvalReport", "capture"]
