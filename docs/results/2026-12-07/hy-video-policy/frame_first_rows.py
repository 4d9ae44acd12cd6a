# The measured rows of a 115,200-token layer (32 frames of 3,600): their losses by frame-first tokens.
# Run from the repository root; needs /tmp/hy (command.sh).
import sys, os, numpy as np
sys.path.insert(0, 'dev'); sys.path.insert(0, 'python')
import margin_study as ms
from vcattn import _cpu
import vcattn
q, k, v = (ms.load(f'/tmp/hy/{t}.npy') for t in 'qkv')
heads = [4, 7, 10, 14, 0, 5]
q, k, v = (np.ascontiguousarray(x[:, heads]) for x in (q, k, v))
sq = q.shape[2]; scale = 1 / np.sqrt(q.shape[3])
for n in (512, 2048):
    rows = _cpu.strided_rows(sq, n)
    ref = _cpu.reference_rows(q, k, v, rows, scale, 2)
    host, _, _ = _cpu.simulate_rows(q, k, v, rows, scale, 2, "sage2-8bit", None)
    perm = _cpu.plan_heads(v, 0, 2, seed=0)
    rec, _, _ = _cpu.simulate_rows(q, k, v, rows, scale, 2, vcattn.DEFAULT_METHOD, perm)
    eh, er = ms.row_sq_err(host, ref)[0], ms.row_sq_err(rec, ref)[0]
    first = (rows % 3600) == 0
    print(f"{n} rows: {first.sum()} at a frame's first token")
    for i, h in enumerate(heads):
        g = 10 * np.log10(eh[i].sum() / er[i].sum())
        g2 = 10 * np.log10(eh[i][~first].sum() / er[i][~first].sum())
        print(f"  head {h:2d}: gain {g:+.2f} dB, without the frame-first rows {g2:+.2f}; their share of the host's error "
              f"{eh[i][first].sum() / eh[i].sum():.1%}, of the recipe's {er[i][first].sum() / er[i].sum():.1%}")
