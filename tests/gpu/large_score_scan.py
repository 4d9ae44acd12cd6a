"""Q scaled by 1e3 .. 1e30 on CUDA: NaN rows, non-finite LSE and rel-L2 against the FP64
reference per GPU method (issue 14; the DIRECT kernel, direct_rows.cu).  On the device:
    PYTHONPATH=python VCATTN_LIBRARY=<dir>/libvcattn.so python3 tests/gpu/large_score_scan.py
"""
import sys, numpy as np, torch
sys.path.insert(0, "python/tests")
import vcattn
from helpers import make_qkv
rng = np.random.default_rng(0)
q, k, v = make_qkv(rng, sq=160, skv=200)
for gain in (1e3, 1e6, 1e8, 1e10, 1e15, 1e20, 1e30):
    tq, tk, tv = [torch.from_numpy(x).to(torch.bfloat16).cuda() for x in (q * np.float32(gain), k, v)]
    ref = vcattn.reference_attention(*[t.float().cpu().numpy() for t in (tq, tk, tv)])
    for m in vcattn.GPU_METHODS:
        out, lse = vcattn.attention(tq, tk, tv, method=m, return_lse=True)
        o = out.float().cpu().numpy()
        bad = ~np.isfinite(o).all(axis=-1)
        rl = np.linalg.norm(np.nan_to_num(o) - ref) / np.linalg.norm(ref)
        print(f"gain {gain:g} {m:32s} nan rows {bad.sum(axis=-1).tolist()} lse non-finite {int((~torch.isfinite(lse)).sum())} rel-L2 vs FP64 {rl:.3g}")
