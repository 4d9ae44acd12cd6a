"""`python -m vcattn.info`: what this installation of vcattn can do.

Prints the library (path, version, whether it was built with the CUDA kernels), the GPU the
kernels would run on (or why not), the methods (and which have a kernel), the default
method, and which integrations are importable (torch, diffusers, yunchang, xfuser), with
their versions.  `--json` prints the same as one JSON object.  Nothing is imported that is
not needed: a missing integration is reported, never an error.
"""
import argparse
import importlib
import json
import sys

import vcattn
from vcattn import _gpu
from vcattn._methods import GPU_METHODS


def _module_version(name):
    try:
        mod = importlib.import_module(name)
    except Exception as e:  # not installed, or broken: say which
        return {"importable": False, "why": f"{type(e).__name__}: {e}".splitlines()[0][:200]}
    return {"importable": True, "version": getattr(mod, "__version__", "unknown")}


def collect() -> dict:
    """The report as a dict (the keys of --json)."""
    lib = vcattn.library_info()
    gpu = {"kernels_built": bool(lib["cuda_built"])}
    if lib["cuda_built"]:
        ok = _gpu.available()
        gpu["usable"] = ok
        torch_info = _module_version("torch")
        if torch_info["importable"]:
            import torch

            if torch.cuda.is_available():
                gpu["device"] = torch.cuda.get_device_name()
                gpu["capability"] = list(torch.cuda.get_device_capability())
        if not ok:
            gpu["why"] = "no CUDA device of compute capability 9.0 (Hopper) is visible"
    else:
        gpu["usable"] = False
        gpu["why"] = "this libvcattn was built without CUDA (nvcc not found at build time, or -DVCATTN_CUDA=OFF)"
    return {
        "library": lib,
        "gpu": gpu,
        "default_method": vcattn.DEFAULT_METHOD,
        "methods": [{"name": m, "gpu_kernel": m in GPU_METHODS} for m in vcattn.methods()],
        "integrations": {name: _module_version(name) for name in ("torch", "diffusers", "yunchang", "xfuser")},
        "python": sys.version.split()[0],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m vcattn.info", description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="one JSON object instead of the text report")
    args = ap.parse_args(argv)
    r = collect()
    if args.json:
        print(json.dumps(r))
        return 0
    lib, gpu = r["library"], r["gpu"]
    print(f"vcattn {lib['version']}  ({lib['path']}), Python {r['python']}")
    print(f"  CUDA kernels built: {'yes' if gpu['kernels_built'] else 'no'}")
    if gpu.get("usable"):
        print(f"  GPU: {gpu.get('device', 'a Hopper GPU')} (sm_{''.join(map(str, gpu.get('capability', [9, 0])))}): kernels usable")
    else:
        print(f"  GPU: not usable: {gpu['why']}")
    print(f"  default method: {r['default_method']}")
    for m in r["methods"]:
        print(f"  method {m['name']:28s} {'GPU kernel + CPU simulation' if m['gpu_kernel'] else 'CPU simulation only'}")
    for name, i in r["integrations"].items():
        print(f"  {name:10s} {i['version'] if i['importable'] else 'not importable (' + i['why'] + ')'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
