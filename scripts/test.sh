#!/usr/bin/env bash
# The test command (README, CI): build and run every CPU test, then the same
# tests again under AddressSanitizer + UndefinedBehaviorSanitizer, then the
# fuzzers' short run (scripts/fuzz.sh, 60 s in all; VCATTN_FUZZ_SECONDS=n
# changes it, 0 skips it) when clang with libFuzzer is installed; with
# VCATTN_REQUIRE_FUZZ=1 (CI) a missing libFuzzer is a failure, not a skip.
# CUDA sources are compiled (not run) whenever nvcc is present; VCATTN_CUDA=OFF
# skips that compile (a machine with nvcc but no time for it).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)

# The Python-side tests need numpy, ml_dtypes and pytest; fetch them if missing.
if ! python3 -c "import numpy, ml_dtypes, pytest" 2>/dev/null; then
    echo "== installing numpy, ml_dtypes, pytest (python3 -m pip)"
    python3 -m pip install -q numpy ml_dtypes pytest 2>/dev/null ||
        python3 -m pip install -q --user numpy ml_dtypes pytest 2>/dev/null ||
        echo "   (could not install them: the codec comparison and the Python tests will be skipped)"
fi

echo "== release build and tests"
cuda_opt=()
[ -n "${VCATTN_CUDA:-}" ] && cuda_opt=(-DVCATTN_CUDA="$VCATTN_CUDA")
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${cuda_opt[@]}" >/dev/null
cmake --build build -j "$jobs"
ctest --test-dir build --output-on-failure

echo "== Python package tests (the in-tree package over build/libvcattn.so)"
# Once with python3, then once more with each interpreter in VCATTN_EXTRA_PYTHONS (space-separated
# paths; CI: the oldest supported stack's venv, .ci/run).  Each run says which stack it tests; a
# failure on any of them fails the command (after all of them ran).  With
# VCATTN_TEST_REQUIRE_STACK=1 (CI) a missing torch / diffusers / yunchang fails instead of skipping.
py_stack() {
    "$1" - <<'PY' 2>/dev/null || echo "(cannot run $1)"
import sys
from importlib.metadata import PackageNotFoundError, version
def v(n):
    try:
        return version(n)
    except PackageNotFoundError:
        return "missing"
print(f"python {sys.version.split()[0]}, torch {v('torch')}, diffusers {v('diffusers')}, "
      f"yunchang {v('yunchang')}, numpy {v('numpy')}")
PY
}
py_failed=()
for py in python3 ${VCATTN_EXTRA_PYTHONS:-}; do
    stack=$(py_stack "$py")
    echo "-- Python tests on $py: $stack"
    if ! "$py" -c "import numpy, pytest" 2>/dev/null; then
        if [ "$py" = python3 ] && [ "${VCATTN_TEST_REQUIRE_STACK:-0}" != 1 ]; then
            echo "   skipped: numpy and pytest are not installed"
        else
            echo "   FAIL: $py lacks numpy or pytest" >&2
            py_failed+=("$py: $stack")
        fi
        continue
    fi
    case "$stack" in *"torch missing"*)
        echo "   torch is not installed for $py: the torch, torch.compile, diffusers and parallel tests skip" ;;
    esac
    VCATTN_LIBRARY=build/libvcattn.so "$py" -m pytest python/tests -q || py_failed+=("$py: $stack")
done
if [ ${#py_failed[@]} -gt 0 ]; then
    printf '   FAIL: the Python tests failed on %s\n' "${py_failed[@]}" >&2
    exit 1
fi

echo "== ASan + UBSan build and tests"
cmake -S . -B build-san -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVCATTN_SANITIZE=ON >/dev/null
cmake --build build-san -j "$jobs" --target vcattn_tests vcattn_cli
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-san --output-on-failure

# The binary wheel (VCATTN_TEST_WHEEL=1; CI sets it): built with scripts/build_wheel.sh and
# installed into a fresh venv with no compiler or CUDA toolkit visible (scripts/wheel_check.sh,
# ~1 min on 2 cores; needs PyPI for numpy and auditwheel).  VCATTN_REQUIRE_WHEEL=1: no nvcc fails.
if [ "${VCATTN_TEST_WHEEL:-0}" = 1 ]; then
    echo "== the binary wheel (scripts/wheel_check.sh)"
    ./scripts/wheel_check.sh
fi

fuzz_seconds=${VCATTN_FUZZ_SECONDS:-60}
echo "== fuzzers, short run (${fuzz_seconds} s in all; docs/fuzzing.md)"
if [ "$fuzz_seconds" -eq 0 ]; then
    echo "   skipped: VCATTN_FUZZ_SECONDS=0"
elif ./scripts/have_libfuzzer.sh; then
    ./scripts/fuzz.sh "$fuzz_seconds"
elif [ "${VCATTN_REQUIRE_FUZZ:-0}" = 1 ]; then
    echo "   FAIL: clang with libFuzzer is required (VCATTN_REQUIRE_FUZZ=1) but cannot build a fuzz target" >&2
    exit 1
else
    echo "   skipped: clang with libFuzzer is not installed (Debian: apt-get install clang libclang-rt-14-dev)"
fi
