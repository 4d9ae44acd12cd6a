#!/usr/bin/env bash
# The test command (README, CI): build and run every CPU test, then the same
# tests again under AddressSanitizer + UndefinedBehaviorSanitizer.
# CUDA sources are compiled (not run) whenever nvcc is present.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)

echo "== release build and tests"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$jobs"
ctest --test-dir build --output-on-failure

echo "== Python package tests (the in-tree package over build/libvcattn.so)"
VCATTN_LIBRARY=build/libvcattn.so python3 -m pytest python/tests -q

echo "== ASan + UBSan build and tests"
cmake -S . -B build-san -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVCATTN_SANITIZE=ON >/dev/null
cmake --build build-san -j "$jobs" --target vcattn_tests vcattn_cli
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-san --output-on-failure
