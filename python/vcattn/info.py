"""`python -m vcattn.info`: what this installation of vcattn can do.

Prints the library (path, version, whether the CUDA kernels are compiled in and for which
GPU architectures), the NVIDIA driver and the GPU the kernels would run on (or why not),
the methods (and which have a kernel), the default method, and which integrations are
importable (torch, diffusers, yunchang, xfuser), with their versions.  `--json` prints the
same as one JSON object.  Nothing is imported that is not needed: a missing integration,
driver or GPU is reported, never an error.
"""
import argparse
import ctypes
import importlib
import json
import struct
import sys

import vcattn
from vcattn import _lib
from vcattn._methods import GPU_METHODS

_NOT_BUILT = _lib.STATUS["NOT_BUILT"]
_FATBIN_MAGIC = 0xBA55ED50
_FATBIN_ELF = 2
_FATBIN_ARCH_SPECIFIC = 0x100000  # entry flag of an "a" target (sm_90a), next to 64-bit and the host bits


def _module_version(name):
    try:
        mod = importlib.import_module(name)
    except Exception as e:  # not installed, or broken: say which
        return {"importable": False, "why": f"{type(e).__name__}: {e}".splitlines()[0][:200]}
    return {"importable": True, "version": getattr(mod, "__version__", "unknown")}


def _elf_section(path, name):
    """The bytes of one section of a 64-bit little-endian ELF file, or None."""
    with open(path, "rb") as f:
        b = f.read()
    if b[:4] != b"\x7fELF" or b[4] != 2 or b[5] != 1:
        return None
    shoff, = struct.unpack_from("<Q", b, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", b, 0x3A)
    secs = [struct.unpack_from("<IIQQQQ", b, shoff + i * shentsize) for i in range(shnum)]
    names = secs[shstrndx][4]
    for sh_name, sh_type, _flags, _addr, off, size in secs:
        start = names + sh_name
        if b[start:b.index(b"\0", start)].decode(errors="replace") == name:
            return b[off:off + size] if sh_type != 8 else None  # SHT_NOBITS holds nothing
    return None


def cuda_architectures(path):
    """The GPU architectures of the device code in the library's .nv_fatbin section
    (e.g. ["sm_90a"]); [] when it has none; None when the file cannot be read as ELF.

    A fatbin section is a run of containers (magic 0xBA55ED50, a 16-byte header, then
    entries); each entry header holds its kind (2: SASS in an ELF image, 1: PTX) at byte 0,
    its header size at 4, its payload size at 8, the SM version at 28 (90 = sm_90) and
    flags at 40, where 0x100000 marks an architecture-specific ("a") target.
    """
    try:
        data = _elf_section(path, ".nv_fatbin")
    except (OSError, struct.error, ValueError, IndexError):
        return None
    if data is None:
        return []
    archs, off = [], 0
    while off + 16 <= len(data):
        magic, _version, hsize, fsize = struct.unpack_from("<IHHQ", data, off)
        if magic != _FATBIN_MAGIC:
            off += 8  # containers are 8-byte aligned
            continue
        e, end = off + hsize, off + hsize + fsize
        while e + 48 <= min(end, len(data)):
            kind, _v, ehsize, psize = struct.unpack_from("<HHIQ", data, e)
            sm, = struct.unpack_from("<I", data, e + 28)
            flags, = struct.unpack_from("<Q", data, e + 40)
            if ehsize == 0:
                break
            name = ("sm_" if kind == _FATBIN_ELF else "compute_") + str(sm)
            if flags & _FATBIN_ARCH_SPECIFIC:
                name += "a"
            if name not in archs:
                archs.append(name)
            e += ehsize + psize
        off = max(end, off + 16)
    return archs


def _driver():
    """The NVIDIA driver (libcuda.so.1): its CUDA version and device count, or why not."""
    try:
        cu = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return {"present": False, "why": f"libcuda.so.1 (the NVIDIA driver) cannot be loaded: {e}"}
    version, count = ctypes.c_int(0), ctypes.c_int(0)
    cu.cuDriverGetVersion(ctypes.byref(version))
    d = {"present": True, "cuda_version": f"{version.value // 1000}.{version.value % 1000 // 10}"}
    rc = cu.cuInit(0)
    if rc != 0:
        d["devices"] = 0
        d["why"] = f"cuInit failed (CUresult {rc}: no usable GPU, or the driver and the device disagree)"
        return d
    cu.cuDeviceGetCount(ctypes.byref(count))
    d["devices"] = count.value
    return d


def collect() -> dict:
    """The report as a dict (the keys of --json)."""
    lib = vcattn.library_info()
    # Every build exports the GPU entry points; a build without CUDA answers NOT_BUILT.
    check = int(_lib.lib.vcattn_gpu_device_check())
    lib["cuda_built"] = check != _NOT_BUILT
    lib["cuda_architectures"] = cuda_architectures(lib["path"]) if lib["cuda_built"] else []
    gpu = {"kernels_built": lib["cuda_built"], "architectures": lib["cuda_architectures"]}
    if lib["cuda_built"]:
        gpu["usable"] = check == 0
        gpu["driver"] = _driver()
        torch_info = _module_version("torch")
        if torch_info["importable"]:
            import torch

            if torch.cuda.is_available():
                gpu["device"] = torch.cuda.get_device_name()
                gpu["capability"] = list(torch.cuda.get_device_capability())
        if not gpu["usable"]:
            drv = gpu["driver"]
            if not drv["present"]:
                gpu["why"] = "no NVIDIA driver: " + drv["why"] + " (the CPU path works)"
            elif drv.get("devices", 0) == 0:
                gpu["why"] = "the NVIDIA driver sees no GPU" + (f" ({drv['why']})" if "why" in drv else "")
            else:
                gpu["why"] = ("no CUDA device of compute capability 9.0 (Hopper) is current, or the driver "
                              f"(CUDA {drv['cuda_version']}) is older than the CUDA runtime the kernels were "
                              "built with")
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
    if gpu["kernels_built"]:
        print(f"  CUDA kernels built: yes, for {', '.join(gpu['architectures']) or 'an unknown architecture'}")
    else:
        print("  CUDA kernels built: no")
    drv = gpu.get("driver")
    if drv is not None:
        if drv["present"]:
            print(f"  NVIDIA driver: CUDA {drv['cuda_version']}, {drv.get('devices', 0)} device(s)")
        else:
            print("  NVIDIA driver: none")
    if gpu.get("usable"):
        print(f"  GPU: {gpu.get('device', 'a Hopper GPU')} (sm_{''.join(map(str, gpu.get('capability', [9, 0])))}): kernels usable")
    else:
        print(f"  GPU: not usable: {gpu['why']}")
    print(f"  default method: {r['default_method']}")
    for m in r["methods"]:
        kernel = m["gpu_kernel"] and gpu["kernels_built"]
        print(f"  method {m['name']:30s} {'GPU kernel + CPU simulation' if kernel else 'CPU simulation only'}")
    for name, i in r["integrations"].items():
        print(f"  {name:10s} {i['version'] if i['importable'] else 'not importable (' + i['why'] + ')'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
