"""randn (1, 8, 8192, 128) Q, K, V as BF16 .npy ('<u2' bits, as vcattn eval --npy reads them),
numpy's generator seeded 0; rounded to nearest even BF16."""
import sys

import numpy as np

out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/randn"
rng = np.random.default_rng(0)
for name in "qkv":
    x = rng.standard_normal((1, 8, 8192, 128)).astype(np.float32).view(np.uint32)
    bits = ((x + 0x7FFF + ((x >> 16) & 1)) >> 16).astype("<u2")
    np.save(f"{out}/{name}.npy", bits)
