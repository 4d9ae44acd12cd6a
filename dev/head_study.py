"""Per-head fidelity of grouping choices across k-means seeds (CPU simulation, sampled rows).

    python3 dev/head_study.py DIR [--rows 1024] [--seeds 0,1,2,3] [--heads 0-7]

DIR holds q.npy, k.npy, v.npy as `vcattn workload --out DIR` writes them.  For every head:
PSNR (dB, against the FP64 reference on the same rows) of sage2-8bit, and of each V-Smooth
method with the k-means permutation of every seed, with sequence order (identity) and with
V-Smooth off; plus the error budget's probability and value terms.  A research tool for
docs/fidelity-analysis.md, not part of the package.
"""
import argparse
import json
import sys

import numpy as np

import vcattn
from vcattn import _cpu, _lib
from vcattn._methods import method_config


def load(path):
    a = np.load(path)
    if a.dtype == np.uint16:
        a = (a.astype(np.uint32) << 16).view(np.float32)
    return np.ascontiguousarray(a, dtype=np.float32)


def psnr(ref, out):
    err = np.sqrt(np.mean((out.astype(np.float64) - ref) ** 2))
    return 20 * np.log10(np.abs(ref).max() / err)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--rows", type=int, default=1024)
    ap.add_argument("--seeds", default="0,1,2,3")
    ap.add_argument("--methods", default="vsmooth-8bit,vsmooth-split-blockmax-8bit")
    ap.add_argument("--json")
    a = ap.parse_args()
    q, k, v = (load(f"{a.dir}/{n}.npy") for n in "qkv")
    B, H, S, D = q.shape
    scale = 1.0 / np.sqrt(D)
    rows = _lib.stratified_rows(S, a.rows)
    th = _cpu.threads(None)
    ref = _cpu.reference_rows(q, k, v, rows, scale, th).astype(np.float64)
    res = {}

    def record(name, out, pqv):
        for h in range(H):
            r, o, p = ref[0, h], out[0, h].astype(np.float64), pqv[0, h].astype(np.float64)
            n = np.linalg.norm(r)
            res.setdefault(name, []).append(dict(psnr=psnr(r, o), prob=np.linalg.norm(r - p) / n,
                                                 value=np.linalg.norm(p - o) / n))

    out, pqv, _ = _cpu.simulate_rows(q, k, v, rows, scale, th, "sage2-8bit")
    record("sage2-8bit", out, pqv)
    ident = np.broadcast_to(np.arange(S, dtype=np.int32), (B, H, S)).copy()
    perms = {f"kmeans{s}": _cpu.plan_heads(v, 0, th, seed=int(s)) for s in a.seeds.split(",")}
    perms["sequence"] = ident
    for m in a.methods.split(","):
        for pname, perm in perms.items():
            out, pqv, _ = _cpu.simulate_rows(q, k, v, rows, scale, th, m, perm=perm)
            record(f"{m}/{pname}", out, pqv)
        print(f"done {m}", file=sys.stderr, flush=True)
    base = res["sage2-8bit"]
    print("per head: PSNR over sage2-8bit (dB); sage2-8bit's PSNR in the first row")
    print("%-44s" % "sage2-8bit" + " ".join("%7.2f" % x["psnr"] for x in base))
    for name, hs in res.items():
        if name == "sage2-8bit":
            continue
        print("%-44s" % name + " ".join("%+7.2f" % (x["psnr"] - b["psnr"]) for x, b in zip(hs, base)))
    print("probability term |(P-P_q)V|/|O| and value term |P_q(V-V_q)|/|O| per head")
    for name, hs in res.items():
        print("%-44s" % name + " ".join("%.4f/%.4f" % (x["prob"], x["value"]) for x in hs))
    if a.json:
        json.dump(res, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
