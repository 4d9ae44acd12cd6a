#!/usr/bin/env bash
# The binary wheel installs and runs without a compiler (issue 29):
#
#   scripts/wheel_check.sh [WHEEL]
#
# Builds the wheel with scripts/build_wheel.sh (or takes WHEEL), creates a fresh venv, and
# with no compiler on the PATH (the PATH is the venv's bin alone) and no CUDA toolkit
# visible (CUDA_HOME, CUDA_PATH, CUDACXX, LIBRARY_PATH, LD_LIBRARY_PATH unset) installs it
# with pip (numpy from PyPI, binary wheels only), timing the install (budget: 30 s of CPU,
# VCATTN_WHEEL_INSTALL_BUDGET_S; the wall time is printed).  Then it checks that `python -m vcattn.info`
# reports the CUDA kernels compiled in for sm_90a and the driver/GPU state without an error,
# that the library loads from the venv and needs nothing `ldd` cannot find, and that one CPU
# attention call matches the FP64 reference (PSNR > 30 dB on random inputs).  Any failure
# exits non-zero.
#
# Without nvcc (and no WHEEL given): "skipped", exit 0; with VCATTN_REQUIRE_WHEEL=1 (CI) a
# failure instead.  nvcc is looked for as scripts/build_wheel.sh does ($CUDACXX, the PATH,
# $CUDA_HOME/bin, /usr/local/cuda/bin); VCATTN_WHEEL_NVCC=<path>, when set, is the only
# place looked at (VCATTN_WHEEL_NVCC= : as if there were none).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
t_start=$(date +%s)
budget=${VCATTN_WHEEL_INSTALL_BUDGET_S:-30}
fail() { echo "wheel_check: FAIL: $*" >&2; exit 1; }

if [ $# -ge 1 ]; then
    whl=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
    [ -f "$whl" ] || fail "no such wheel: $1"
else
    have_nvcc=0
    if [ -n "${VCATTN_WHEEL_NVCC+set}" ]; then cands=("$VCATTN_WHEEL_NVCC")  # the only choice when set
    else cands=("${CUDACXX:-}" "$(command -v nvcc 2>/dev/null || true)" "${CUDA_HOME:+$CUDA_HOME/bin/nvcc}" /usr/local/cuda/bin/nvcc)
    fi
    for c in "${cands[@]}"; do
        if [ -n "$c" ] && [ -x "$c" ]; then have_nvcc=1; break; fi
    done
    if [ $have_nvcc = 0 ]; then
        if [ "${VCATTN_REQUIRE_WHEEL:-0}" = 1 ]; then
            fail "nvcc not found, and VCATTN_REQUIRE_WHEEL=1 requires the wheel (with its CUDA kernels) to be built"
        fi
        echo "wheel_check: skipped: nvcc not found (the wheel carries the CUDA kernels; VCATTN_REQUIRE_WHEEL=1 makes this a failure)"
        exit 0
    fi
    echo "== wheel_check: building the wheel (scripts/build_wheel.sh)"
    whl=$(./scripts/build_wheel.sh | tail -1) || fail "scripts/build_wheel.sh failed"
fi
t_built=$(date +%s)
echo "== wheel_check: $(basename "$whl") ($(du -k "$whl" | cut -f1) KiB)"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/venv" || fail "python3 -m venv failed (Debian: apt-get install python3-venv)"
venv="$tmp/venv"
# The environment of a machine without a compiler or a CUDA toolkit: the venv's bin is the
# whole PATH (no gcc, cc, c++, ld, nvcc, cmake), the CUDA variables unset.  Kept: HOME, the
# locale, and pip's and the TLS stack's own settings (proxies, certificates, index).
run() {
    env -u CUDA_HOME -u CUDA_PATH -u CUDACXX -u CUDA_ROOT -u LIBRARY_PATH -u LD_LIBRARY_PATH -u CPATH \
        -u CC -u CXX -u PYTHONPATH -u VCATTN_LIBRARY -u PYTHONHOME \
        PATH="$venv/bin" "$@"
}
bash_path=$(command -v bash)
run "$bash_path" -c 'echo "$PATH"' | grep -qx "$venv/bin" || fail "the restricted environment does not run"
for tool in gcc cc c++ g++ clang ld nvcc cmake make; do
    if run "$bash_path" -c "command -v $tool" >/dev/null 2>&1; then
        fail "$tool is still reachable in the restricted environment"
    fi
done

echo "== wheel_check: pip install (no compiler on PATH, no CUDA toolkit visible, binary wheels only)"
cd "$tmp"  # not the repository: nothing of python/ on sys.path
# The budget is on the install's CPU time (pip and its children: unpacking numpy and vcattn,
# byte-compiling), which a loaded machine does not inflate; the wall time is printed too.
TIMEFORMAT='%R %U %S'
{ time run "$venv/bin/python" -m pip install -q --disable-pip-version-check --only-binary=:all: "$whl" \
      2>"$tmp/pip.err"; } 2>"$tmp/time" || { cat "$tmp/pip.err" >&2; fail "pip install of the wheel failed"; }
read -r wall_s user_s sys_s <"$tmp/time"
cpu_s=$(python3 -c "print(f'{$user_s + $sys_s:.1f}')")
echo "   installed (vcattn + numpy) in $wall_s s wall, $cpu_s s CPU (budget $budget s of CPU)"
python3 -c "import sys; sys.exit(0 if $user_s + $sys_s < $budget else 1)" ||
    fail "pip install took $cpu_s s of CPU, over the $budget s budget"
install_s="$wall_s s wall, $cpu_s s CPU"

echo "== wheel_check: python -m vcattn.info"
run "$venv/bin/python" -m vcattn.info || fail "python -m vcattn.info failed"
run "$venv/bin/python" -m vcattn.info --json >"$tmp/info.json" || fail "python -m vcattn.info --json failed"
"$venv/bin/python" - "$tmp/info.json" "$venv" <<'PY' || fail "vcattn.info does not report what the wheel holds"
import json, sys
r, venv = json.load(open(sys.argv[1])), sys.argv[2]
lib, gpu = r["library"], r["gpu"]
assert lib["path"].startswith(venv) and lib["path"].endswith("vcattn/libvcattn.so"), f"library not from the venv: {lib['path']}"
assert lib["cuda_built"] and gpu["kernels_built"], "the CUDA kernels are not reported compiled in"
assert gpu["architectures"] == ["sm_90a"], f"kernel architectures {gpu['architectures']}, expected ['sm_90a']"
kernels = [m["name"] for m in r["methods"] if m["gpu_kernel"]]
import vcattn as _v
assert kernels == list(_v.GPU_METHODS) and _v.DEFAULT_METHOD in kernels, (kernels, _v.GPU_METHODS)
assert gpu["usable"] or gpu["why"], "no GPU and no reason given"
print(f"   kernels for {', '.join(gpu['architectures'])}; {len(kernels)} methods with a kernel; "
      f"GPU {'usable' if gpu['usable'] else 'not usable: ' + gpu['why']}")
PY

echo "== wheel_check: what the installed library needs (ldd)"
so=$(run "$venv/bin/python" -c "import vcattn; print(vcattn.library_path())")
ldd "$so" | sed 's/^/   /'
if ldd "$so" | grep -q "not found"; then fail "libvcattn.so needs a library that is not there"; fi
if readelf -dW "$so" | grep -q 'NEEDED.*\(libcuda\|libcudart\)'; then fail "libvcattn.so links the CUDA driver or runtime dynamically"; fi

echo "== wheel_check: one CPU attention call against the FP64 reference; the GPU path without a GPU"
run "$venv/bin/python" - <<'PY' || fail "the CPU attention call or the GPU path check failed"
import numpy as np
import vcattn
from vcattn import _gpu, _lib

rng = np.random.default_rng(29)
q, k, v = (rng.standard_normal((1, 2, 256, 128)).astype(np.float32) for _ in range(3))
out = vcattn.attention(q, k, v)
ref = vcattn.reference_attention(q, k, v)
f = vcattn.fidelity(ref, out)
print(f"   {vcattn.DEFAULT_METHOD} on the CPU: psnr {f['psnr_db']:.1f} dB, rel_l2 {f['rel_l2']:.4f}")
assert out.shape == q.shape and np.isfinite(out).all()
assert f["psnr_db"] > 30, f
# the GPU path answers cleanly where there is no GPU or driver: a status, never a crash
st = int(_lib.lib.vcattn_gpu_device_check())
print(f"   vcattn_gpu_device_check: {_lib.STATUS_NAMES[st]}; _gpu.available() = {_gpu.available()}")
assert st in (_lib.STATUS["SUCCESS"], _lib.STATUS["UNSUPPORTED_DEVICE"]), _lib.STATUS_NAMES[st]
assert _gpu.available() == (st == 0)
PY
echo "wheel_check: ok ($(basename "$whl"): install $install_s; $(( $(date +%s) - t_start )) s in all, of which $(( t_built - t_start )) s building)"
