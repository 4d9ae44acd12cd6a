#!/usr/bin/env python3
"""Fidelity of every GPU attention method on long video-like inputs (issue 12), on an H200.

Inputs (each (1, H, S, 128) BF16):
  * the synthetic presets video-long-wan720p (21x45x80 = 75,600 keys), video-long-hunyuan720p
    (33x45x80 = 118,800 keys) and video-9600 (4x48x50), written by `vcattn workload` (the CLI
    binary given by --vcattn-bin; docs/workload.md, "Long-video presets");
  * randn (1, 8, 8192, 128) from a CPU torch.Generator seeded with --randn-seed (default 0).
Per input and head:
  * the FP64 reference on the GPU (torch float64 over the BF16 values, chunked over query rows,
    every row);
  * the softmax regime (FP64): mass below 2^-15 and 2^-19 of the row max (mean over every row,
    and the worst row), the octave below the row max where the mass histogram peaks (over
    --stats-rows sampled rows), the median row max probability;
  * every method: vcattn.attention(q, k, v, method=M, strict=True) for sage2-8bit,
    vsmooth-8bit, vsmooth-expcast-8bit and each --methods name (V-Smooth methods group with the
    library's default GPU k-means plan: k = 64, 8 iterations, seed 0, on this call's V); the real
    SageAttention2 kernel (sageattention.core.sageattn_qk_int8_pv_fp8_cuda_sm90, if importable);
    cuDNN BF16 through torch SDPA (and FlashAttention-2 BF16 through SDPA, a second exact-softmax
    baseline);
  * metrics, the definitions of src/metrics.c: PSNR = 20 log10(max|ref| / RMSE), rel-L2 =
    |out - ref| / |ref|, per head and over all heads.
Output: JSON (--json PATH), a table on stdout, progress on stderr.

    PYTHONPATH=python VCATTN_LIBRARY=build-cuda/libvcattn.so \\
        python3 tests/gpu/fidelity_long.py --vcattn-bin build-cuda/vcattn --json fidelity_long.json

Options: --inputs a,b (subset; names: video-long-wan720p, video-long-hunyuan720p, video-9600,
randn-8x8192), --heads N (preset heads, default the preset's 4 / 4 / 8), --seed S (presets),
--randn-seed S (randn's generator, default 0; the input keeps its name), --methods
extra,names, --workdir DIR (where the .npy go; default a temp folder), --reuse (keep .npy
already in --workdir), --chunk ROWS (reference chunk, default 4096), --stats-rows N (default 1024).
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import vcattn  # noqa: E402

PRESETS = ("video-long-wan720p", "video-long-hunyuan720p", "video-9600")
RANDN = "randn-8x8192"
DEFAULT_METHODS = vcattn.GPU_METHODS
OCT_BINS = 48
LN2 = math.log(2.0)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---- inputs -----------------------------------------------------------------------------------

def load_bf16(path, device):
    a = np.load(path)
    if a.dtype != np.uint16 or a.ndim != 4:
        raise SystemExit(f"fidelity_long: {path}: expected a 4-D '<u2' (bfloat16 bits) array, got {a.dtype} {a.shape}")
    t = torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16)
    return t.to(device)


def make_preset(binary, name, workdir, heads, seed, reuse, frames=0):
    out = os.path.join(workdir, name)
    files = [os.path.join(out, f) for f in ("q.npy", "k.npy", "v.npy", "grid.json")]
    if not (reuse and all(os.path.exists(f) for f in files)):
        cmd = [binary, "workload", "--preset", name, "--out", out, "--seed", str(seed), "--quiet"]
        if heads:
            cmd += ["--heads", str(heads)]
        if frames:
            cmd += ["--frames", str(frames)]
        log(f"[gen] {' '.join(cmd)}")
        t0 = time.time()
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            raise SystemExit(f"fidelity_long: `{' '.join(cmd)}` failed (rc {r.returncode}):\n{r.stderr}")
        log(f"[gen] {name}: {time.time() - t0:.1f} s")
    with open(files[3]) as f:
        grid = json.load(f)
    return files[:3], grid


# ---- the FP64 reference and the regime statistics -----------------------------------------------

def reference_head(q, k, v, scale, chunk, stats_rows):
    """q, k, v: (S, D) bf16 CUDA.  Returns (ref (S, D) float64, stats dict)."""
    S = q.shape[0]
    qd, kd, vd = q.double(), k.double(), v.double()
    kt = kd.t().contiguous()
    ref = torch.empty((S, vd.shape[1]), dtype=torch.float64, device=q.device)
    tail15 = torch.empty(S, dtype=torch.float64, device=q.device)
    tail19 = torch.empty(S, dtype=torch.float64, device=q.device)
    pmax = torch.empty(S, dtype=torch.float64, device=q.device)
    n_sel = min(stats_rows, S)
    sel = torch.linspace(0, S - 1, n_sel, device=q.device).round().long().unique()
    hist = torch.zeros(OCT_BINS, dtype=torch.float64, device=q.device)
    for i in range(0, S, chunk):
        j = min(S, i + chunk)
        s = (qd[i:j] @ kt) * scale
        m = s.max(dim=1, keepdim=True).values
        s.sub_(m)                              # s - m <= 0 (natural log of p / p_max)
        p = torch.exp(s)
        l = p.sum(dim=1, keepdim=True)
        ref[i:j] = (p @ vd) / l
        pmax[i:j] = 1.0 / l[:, 0]
        tail15[i:j] = torch.where(s < -15 * LN2, p, 0.0).sum(dim=1) / l[:, 0]
        tail19[i:j] = torch.where(s < -19 * LN2, p, 0.0).sum(dim=1) / l[:, 0]
        rows = sel[(sel >= i) & (sel < j)] - i
        if rows.numel():
            u = (-s[rows] / LN2).floor().clamp_(max=OCT_BINS - 1).long()
            w = p[rows] / l[rows]
            h = torch.zeros((rows.numel(), OCT_BINS), dtype=torch.float64, device=q.device)
            h.scatter_add_(1, u, w)
            hist += h.sum(dim=0)
        del s, p
    hist /= sel.numel()
    peak = int(torch.argmax(hist).item())
    stats = dict(tail_mass_2m15_mean=tail15.mean().item(), tail_mass_2m15_worst=tail15.max().item(),
                 tail_mass_2m15_p99=torch.quantile(tail15.float(), 0.99).item(),
                 tail_mass_2m19_mean=tail19.mean().item(), tail_mass_2m19_worst=tail19.max().item(),
                 peak_octave=peak + 0.5, median_row_max_prob=pmax.median().item(),
                 mass_per_octave=[round(x, 6) for x in hist.tolist()], stats_rows=int(sel.numel()))
    return ref, stats


# ---- methods ------------------------------------------------------------------------------------

def run_vcattn(method):
    def f(q, k, v):
        return vcattn.attention(q, k, v, tensor_layout="HND", method=method, strict=True)
    return f


def run_sage2_real():
    try:
        from sageattention import core  # noqa: F401
    except Exception as e:  # ImportError, or a broken build
        return None, f"sageattention not importable: {type(e).__name__}: {e}"

    def f(q, k, v):
        o = core.sageattn_qk_int8_pv_fp8_cuda_sm90(q, k, v, tensor_layout="HND")
        return o[0] if isinstance(o, (tuple, list)) else o
    return f, None


def run_cudnn(q, k, v):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        return F.scaled_dot_product_attention(q, k, v)


def run_flash(q, k, v):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        return F.scaled_dot_product_attention(q, k, v)


def metrics(ref_heads, out):
    """ref_heads: list of (S, D) float64; out: (1, H, S, D).  Per head and pooled."""
    per = []
    err2_all = ref2_all = 0.0
    n_all = 0
    peak_all = 0.0
    for h, ref in enumerate(ref_heads):
        o = out[0, h].double()
        if not torch.isfinite(o).all():
            per.append(dict(psnr_db=float("nan"), rel_l2=float("nan"), non_finite=True))
            err2_all = float("nan")
            continue
        e2 = ((o - ref) ** 2).sum().item()
        r2 = (ref ** 2).sum().item()
        peak = ref.abs().max().item()
        n = ref.numel()
        rmse = math.sqrt(e2 / n)
        per.append(dict(psnr_db=20 * math.log10(peak / rmse) if rmse > 0 else float("inf"),
                        rel_l2=math.sqrt(e2 / r2) if r2 > 0 else float("nan")))
        err2_all += e2
        ref2_all += r2
        n_all += n
        peak_all = max(peak_all, peak)
    if n_all and math.isfinite(err2_all):
        rmse = math.sqrt(err2_all / n_all)
        overall = dict(psnr_db=20 * math.log10(peak_all / rmse) if rmse > 0 else float("inf"),
                       rel_l2=math.sqrt(err2_all / ref2_all))
    else:
        overall = dict(psnr_db=float("nan"), rel_l2=float("nan"))
    return overall, per


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn, q, k, v):
    sync()
    t0 = time.time()
    out = fn(q, k, v)
    sync()
    return out, time.time() - t0


# ---- driver -------------------------------------------------------------------------------------

def evaluate(name, q, k, v, grid, methods, args):
    _, H, S, D = q.shape
    scale = 1.0 / math.sqrt(D)
    log(f"[{name}] (1, {H}, {S}, {D}) bf16: FP64 reference, {args.chunk} rows per chunk")
    refs, regime = [], []
    t0 = time.time()
    for h in range(H):
        ref, st = reference_head(q[0, h], k[0, h], v[0, h], scale, args.chunk, args.stats_rows)
        refs.append(ref)
        st["head"] = h
        if isinstance(grid, dict) and len(grid.get("head_scales", [])) == H:
            st["head_scale"] = grid["head_scales"][h]  # the generator's per-head Q multiplier g_h
        regime.append(st)
        log(f"[{name}] head {h}: tail<2^-15 mean {st['tail_mass_2m15_mean']:.2e} worst "
            f"{st['tail_mass_2m15_worst']:.2e}, peak octave {st['peak_octave']}")
    sync()
    res = dict(name=name, shape=[1, H, S, D], grid=grid, reference_seconds=round(time.time() - t0, 2),
               regime=regime, methods={})
    for label, fn, why in methods:
        if fn is None:
            res["methods"][label] = dict(error=why)
            log(f"[{name}] {label}: skipped ({why})")
            continue
        try:
            out, sec = timed(fn, q, k, v)
            overall, per = metrics(refs, out)
            res["methods"][label] = dict(overall=overall, per_head=per, seconds=round(sec, 3))
            log(f"[{name}] {label}: PSNR {overall['psnr_db']:.2f} dB, rel-L2 {overall['rel_l2']:.3e} ({sec:.2f} s)")
            del out
        except Exception as e:
            res["methods"][label] = dict(error=f"{type(e).__name__}: {e}")
            log(f"[{name}] {label}: FAILED: {type(e).__name__}: {e}")
    del refs
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return res


def print_tables(results):
    for r in results:
        g = r["grid"]["grid"] if isinstance(r["grid"], dict) else None
        print(f"\n=== {r['name']}  shape {tuple(r['shape'])}  grid {g}")
        print(f"{'head':>4} {'g_h':>6} {'tail<2^-15':>11} {'worst':>9} {'p99':>9} {'tail<2^-19':>11} {'worst':>9} "
              f"{'peak_oct':>8} {'med_pmax':>9}")
        for s in r["regime"]:
            gh = f"{s['head_scale']:.3f}" if "head_scale" in s else "-"
            print(f"{s['head']:>4} {gh:>6} {s['tail_mass_2m15_mean']:>11.3e} {s['tail_mass_2m15_worst']:>9.2e} "
                  f"{s['tail_mass_2m15_p99']:>9.2e} {s['tail_mass_2m19_mean']:>11.3e} "
                  f"{s['tail_mass_2m19_worst']:>9.2e} {s['peak_octave']:>8} {s['median_row_max_prob']:>9.2e}")
        H = r["shape"][1]
        hdr = " ".join(f"{'h' + str(h):>6}" for h in range(H))
        print(f"{'method':<24} {'PSNR dB':>8} {'rel-L2':>10}   per-head PSNR: {hdr}")
        for label, m in r["methods"].items():
            if "error" in m:
                print(f"{label:<24} {'-':>8} {'-':>10}   {m['error'][:70]}")
                continue
            ph = " ".join(f"{x['psnr_db']:>6.2f}" for x in m["per_head"])
            print(f"{label:<24} {m['overall']['psnr_db']:>8.2f} {m['overall']['rel_l2']:>10.3e}   "
                  f"{'':>15}{ph}")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vcattn-bin", required=True, help="the vcattn CLI binary (writes the presets)")
    ap.add_argument("--json", default="fidelity_long.json", help="output JSON path")
    ap.add_argument("--inputs", default=",".join(PRESETS + (RANDN,)))
    ap.add_argument("--methods", default="", help="extra vcattn method names, comma-separated")
    ap.add_argument("--heads", type=int, default=0, help="preset heads (default: each preset's)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--randn-seed", type=int, default=0, help="seed of randn-8x8192's generator (default 0)")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--reuse", action="store_true")
    ap.add_argument("--chunk", type=int, default=4096)
    ap.add_argument("--stats-rows", type=int, default=1024)
    ap.add_argument("--frames", type=int, default=0, help="override the presets' latent frames (smoke tests)")
    ap.add_argument("--device", default="cuda", help="cuda (default); cpu only for a smoke test of the script")
    args = ap.parse_args()

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("fidelity_long: no CUDA device")
    binary = os.path.abspath(args.vcattn_bin)
    if not os.access(binary, os.X_OK):
        raise SystemExit(f"fidelity_long: --vcattn-bin {binary} is not an executable")
    inputs = [x for x in args.inputs.split(",") if x]
    for x in inputs:
        if x not in PRESETS + (RANDN,):
            raise SystemExit(f"fidelity_long: unknown input {x!r}; known: {', '.join(PRESETS + (RANDN,))}")
    names = list(DEFAULT_METHODS) + [m for m in args.methods.split(",") if m and m not in DEFAULT_METHODS]
    known = vcattn.methods()
    for m in names:
        if m not in known:
            raise SystemExit(f"fidelity_long: unknown vcattn method {m!r}; known: {', '.join(known)}")
    from vcattn import _gpu
    if args.device == "cuda" and not _gpu.available():
        log("fidelity_long: WARNING: this libvcattn has no CUDA kernels or the GPU is not sm_90; "
            "the vcattn methods will report errors (set VCATTN_LIBRARY to a CUDA build)")
    methods = [(m, run_vcattn(m), None) for m in names]
    sage, why = run_sage2_real()
    methods.append(("sageattention2-real", sage, why))
    methods.append(("cudnn-bf16", run_cudnn, None))
    methods.append(("flash-bf16", run_flash, None))

    dev = torch.device(args.device)
    workdir = args.workdir or tempfile.mkdtemp(prefix="fidelity_long_")
    os.makedirs(workdir, exist_ok=True)
    t_start = time.time()
    results = []
    for name in inputs:
        if name == RANDN:
            g = torch.Generator(device="cpu").manual_seed(args.randn_seed)
            q, k, v = (torch.randn((1, 8, 8192, 128), generator=g).to(torch.bfloat16).to(dev) for _ in range(3))
            grid = None
        else:
            paths, meta = make_preset(binary, name, workdir, args.heads, args.seed, args.reuse, args.frames)
            q, k, v = (load_bf16(p, dev) for p in paths)
            grid = meta
        results.append(evaluate(name, q, k, v, grid, methods, args))
        del q, k, v
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    meta = dict(torch=torch.__version__,
                device=torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu",
                vcattn_library=os.environ.get("VCATTN_LIBRARY", ""), seed=args.seed, randn_seed=args.randn_seed,
                seconds=round(time.time() - t_start, 1), methods=[m[0] for m in methods])
    with open(args.json, "w") as f:
        json.dump(dict(meta=meta, inputs=results), f, indent=1, allow_nan=True)
    print_tables(results)
    log(f"fidelity_long: wrote {args.json} ({meta['seconds']} s)")
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
