#!/usr/bin/env bash
# Exit 0 when ${FUZZ_CC:-clang} can build and run a libFuzzer target with
# ASan + UBSan (what scripts/fuzz.sh needs), else 1.  clang alone is not
# enough: the fuzzer runtime is a separate package on Debian
# (libclang-rt-<version>-dev).
cc=${FUZZ_CC:-clang}
command -v "$cc" >/dev/null 2>&1 || exit 1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/t.c" <<'C'
#include <stddef.h>
#include <stdint.h>
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return size > 0 && data[0] == 1; }
C
"$cc" -fsanitize=fuzzer,address,undefined "$tmp/t.c" -o "$tmp/t" >/dev/null 2>&1 &&
    "$tmp/t" -runs=16 >/dev/null 2>&1
