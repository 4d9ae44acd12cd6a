"""How far a head's measured gain over the host recipe is from its gain on every row (CPU).

    python3 dev/margin_study.py DIR [--seeds 0,1,2,3] [--rows 512] [--truth-rows N] [--json F]
    python3 dev/margin_study.py --summary F.json [F.json ...]   (the table of docs/fidelity-analysis.md)

DIR holds q.npy, k.npy, v.npy as `vcattn workload --out DIR` writes them, or is "randn:B,H,S,D"
(standard normal from numpy's default_rng(1), rounded to BF16).  For each head and k-means seed
(the CPU planner): the default method as designed (recipe 0: the plan's order, the method's P)
and sage2-8bit, simulated on every row (or on --truth-rows stratified rows for long layers: the
"truth"), each against the FP64 reference.  The policy's measurement is the same simulation on
its --rows stratified rows (vcattn_stratified_rows, the policy's own; before 2026-12-08 strided
ones, which alias with the frames of some layers; the CPU's rows simulation is bit-identical to
the full call's rows), so the study separates what the FLOOR policy's margin is for: the rows'
sampling error.  Per head it prints

  gain_rows  10 log10(MSE_host / MSE_recipe0) on the measured rows (dB; the peak cancels),
  se_rows    its standard error from the same rows, as the policy computes it
             (vcattn_head_gain_stderr: the paired per-row squared errors, the delta method,
             the finite-population correction),
  gain_all   the same gain on the truth rows,

and, for a few margin rules, which heads would keep recipe 0 and whether the truth then falls
below the host by more than 0.1 dB (issue 28's per-head bar).  A research tool for
docs/fidelity-analysis.md, not part of the package.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import vcattn  # noqa: E402
from vcattn import _cpu, _lib, head_policy  # noqa: E402

DB = 10 / np.log(10)


def load(path):
    a = np.load(path)
    if a.dtype == np.uint16:
        a = (a.astype(np.uint32) << 16).view(np.float32)
    return np.ascontiguousarray(a, dtype=np.float32)


def bf16(x):
    u = np.ascontiguousarray(x, np.float32).view(np.uint32)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.view(np.float32)


def inputs(spec):
    if spec.startswith("randn:"):
        shape = tuple(int(x) for x in spec[6:].split(","))
        g = np.random.default_rng(1)
        return tuple(bf16(g.standard_normal(shape, dtype=np.float32)) for _ in range(3))
    return tuple(load(os.path.join(spec, f"{t}.npy")) for t in "qkv")


def row_sq_err(out, ref):
    """(B, H, n) per-row squared error, summed over D, in float64."""
    return ((out.astype(np.float64) - ref.astype(np.float64)) ** 2).sum(axis=-1)


def gain_and_se(e_host, e_rec, population):
    """(gain dB, its standard error dB) per head from (B, H, n) paired per-row squared errors of n
    rows out of `population`: the standard error is the policy's own (vcattn_head_gain_stderr)."""
    gain = DB * np.log(e_host.sum(-1) / e_rec.sum(-1))
    n = e_host.shape[-1]
    se = [head_policy.gain_stderr(h, r, population) for h, r in zip(e_host.reshape(-1, n), e_rec.reshape(-1, n))]
    return gain, np.asarray(se).reshape(gain.shape)


RULES = (("margin 0.25 dB", 0.25, 0.0), ("margin 0", 0.0, 0.0), ("2 standard errors", 0.0, 2.0),
         ("2 standard errors - 0.1 dB", -0.1, 2.0))


def summary(paths):
    """Per recorded input: how the measured rows' gain falls from the truth's, in standard errors,
    and what each margin rule keeps of recipe 0 (heads x seeds)."""
    print("| input | heads x seeds | standard error, dB | rows - truth: rms / max, in standard errors |"
          + "".join(f" {name}: kept, of them truth < 0 / < -0.1 |" for name, _, _ in RULES))
    print("|---|---|---|---|" + "---|" * len(RULES))
    for path in paths:
        with open(path) as f:
            r = json.load(f)
        g_all, g_rows, se = (np.concatenate([np.asarray(d[key]) for d in r["seeds"].values()])
                             for key in ("gain_all", "gain_rows", "se_rows"))
        z = (g_rows - g_all) / se
        cells = []
        for _, margin, k in RULES:
            keep = g_rows >= margin + k * se
            cells.append(f" {keep.sum()}, {(keep & (g_all < 0)).sum()} / {(keep & (g_all < -0.1)).sum()} |")
        truth = "all rows" if r["truth_rows"] == r["shape"][2] else f"{r['truth_rows']} rows"
        print(f"| {os.path.basename(r['spec'].rstrip('/'))} {tuple(r['shape'])}, truth on {truth} | {len(z)} | "
              f"{se.min():.3f} .. {se.max():.3f} | {np.sqrt((z ** 2).mean()):.2f} / {np.abs(z).max():.2f} |"
              + "".join(cells))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--summary":
        return summary(sys.argv[2:])
    ap = argparse.ArgumentParser()
    ap.add_argument("spec")
    ap.add_argument("--seeds", default="0,1,2,3")
    ap.add_argument("--rows", type=int, default=512)
    ap.add_argument("--truth-rows", type=int, default=0, help="0: every row")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json")
    a = ap.parse_args()
    q, k, v = inputs(a.spec)
    b, h, sq, d = q.shape
    scale = 1.0 / d ** 0.5
    method = vcattn.DEFAULT_METHOD
    mrows = _lib.stratified_rows(sq, min(a.rows, sq))
    trows = np.arange(sq, dtype=np.int64) if a.truth_rows <= 0 else _lib.stratified_rows(sq, min(a.truth_rows, sq))
    # the measured rows' positions within the truth rows (they are among them only when the truth
    # is every row; otherwise the measured rows are simulated on their own)
    ref_t = _cpu.reference_rows(q, k, v, trows, scale, a.threads)
    host_t, _, _ = _cpu.simulate_rows(q, k, v, trows, scale, a.threads, "sage2-8bit", None)
    ref_m = _cpu.reference_rows(q, k, v, mrows, scale, a.threads)
    host_m, _, _ = _cpu.simulate_rows(q, k, v, mrows, scale, a.threads, "sage2-8bit", None)
    eh_t, eh_m = row_sq_err(host_t, ref_t), row_sq_err(host_m, ref_m)
    res = dict(spec=a.spec, shape=[b, h, sq, d], method=method, rows=len(mrows), truth_rows=len(trows), seeds={})
    for seed in (int(s) for s in a.seeds.split(",")):
        perm = _cpu.plan_heads(v, 0, a.threads, seed=seed)
        rec_t, _, _ = _cpu.simulate_rows(q, k, v, trows, scale, a.threads, method, perm)
        rec_m, _, _ = _cpu.simulate_rows(q, k, v, mrows, scale, a.threads, method, perm)
        g_all, _ = gain_and_se(eh_t, row_sq_err(rec_t, ref_t), sq)
        g_rows, se = gain_and_se(eh_m, row_sq_err(rec_m, ref_m), sq)
        res["seeds"][seed] = dict(gain_all=g_all.reshape(-1).tolist(), gain_rows=g_rows.reshape(-1).tolist(),
                                  se_rows=se.reshape(-1).tolist())
        for hh in range(b * h):
            print(f"{a.spec} seed {seed} head {hh}: gain_rows {g_rows.reshape(-1)[hh]:+.3f} "
                  f"se {se.reshape(-1)[hh]:.3f}  gain_all {g_all.reshape(-1)[hh]:+.3f}  "
                  f"(rows - all) / se {(g_rows.reshape(-1)[hh] - g_all.reshape(-1)[hh]) / se.reshape(-1)[hh]:+.2f}",
                  flush=True)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
