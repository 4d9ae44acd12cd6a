#!/usr/bin/env python3
"""Exhaustive agreement of vcattn's E4M3 / E2M1 codecs with ml_dtypes.

Usage: codecs_vs_ml_dtypes.py path/to/libvcattn.so
Exits 77 (skipped) when numpy or ml_dtypes is missing.
"""
import ctypes
import sys

try:
    import numpy as np
    import ml_dtypes
except ImportError:
    print("skipped: numpy and ml_dtypes are needed (pip install numpy ml_dtypes)")
    sys.exit(77)

lib = ctypes.CDLL(sys.argv[1])
for name in ("vcattn_encode_e4m3", "vcattn_encode_e2m1"):
    getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    getattr(lib, name).restype = ctypes.c_int


def encode(name, x):
    codes = np.empty(x.size, np.uint8)
    st = getattr(lib, name)(x.ctypes.data, codes.ctypes.data, x.size)
    assert st == 0, st
    return codes


rng = np.random.default_rng()
seed = int(rng.integers(1 << 31))
rng = np.random.default_rng(seed)
failed = 0
n = 2_000_000

# E4M3: random magnitudes over the whole range, plus every midpoint between codes
x = (rng.standard_normal(n) * np.exp2(rng.uniform(-14, 10, n))).astype(np.float32)
x = np.clip(x, -448, 448)  # ml_dtypes overflows to NaN where the cvt saturates
codes = np.arange(0, 0x7F, dtype=np.uint8)
vals = codes.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
mids = ((vals[:-1].astype(np.float64) + vals[1:]) / 2).astype(np.float32)
x = np.concatenate([x, vals, -vals, mids, -mids])
ours = encode("vcattn_encode_e4m3", x)
theirs = x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
bad = np.flatnonzero(ours != theirs)
print(f"e4m3: {x.size} floats, {bad.size} disagree (seed {seed})")
for i in bad[:5]:
    print(f"  x={x[i]!r}: ours {ours[i]:#04x}, ml_dtypes {theirs[i]:#04x}")
failed += bad.size > 0

# E2M1
y = (rng.standard_normal(n) * np.exp2(rng.uniform(-4, 3, n))).astype(np.float32)
y = np.clip(y, -6, 6)
grid = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], np.float32)
y = np.concatenate([y, grid, -grid, (grid[:-1] + grid[1:]) / 2, -(grid[:-1] + grid[1:]) / 2])
ours = encode("vcattn_encode_e2m1", y)
theirs = y.astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 0xF
bad = np.flatnonzero(ours != theirs)
print(f"e2m1: {y.size} floats, {bad.size} disagree")
for i in bad[:5]:
    print(f"  x={y[i]!r}: ours {ours[i]:#x}, ml_dtypes {theirs[i]:#x}")
failed += bad.size > 0
print(f"{2 - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
