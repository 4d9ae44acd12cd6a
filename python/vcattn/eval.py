"""Evaluate every method on one layer's Q/K/V against the FP64 reference (``vcattn eval`` for
tensors in memory, and for the GPU).

    python -m vcattn.eval q.npy k.npy v.npy [--device cuda|cpu] [--methods a,b] [--heads 0,5]
                          [--query-rows N] [--json out.json] [--plot report.png] [--grid T,H,W]

    report = vcattn.evaluate(q, k, v)            # numpy or torch, (B, H, S, D), Sq != Skv allowed
    print(report.table()); report.recommendation; report.results   # one dict per method

Two ways a method is evaluated (each result says which, key ``evaluation``):

* ``"kernel, all rows"`` (device cuda, the methods with a Hopper kernel, ``GPU_METHODS``):
  ``vcattn.attention`` on the chosen heads, one batched call per method, compared on every
  query row with the FP64 reference computed on the GPU (torch float64, chunked over query
  rows).  The error budget split needs the quantized P, which the kernel does not return:
  ``value_*``, ``probability_rel_l2`` and ``mean_row_tv`` are null.
* ``"simulation, N sampled rows"`` (every method on the CPU; on CUDA the methods without a
  kernel): the library's CPU simulation of N stratified query rows per head
  (``vcattn_simulate_attention_rows``; each row exact over all keys, bit-identical to that row
  of a full run), against the FP64 reference of the same rows, with the error budget
  (value vs probability path, from the simulation's ``P_q V`` output) and the row TV.

Metrics are the sums of ``tools/eval_cmd.c`` (``sums_add`` / ``sums_finish``), per head and pooled
over the evaluated heads; the JSON objects carry the keys of docs/eval-json.md (plus
``evaluation``, ``device`` and ``recommended``).  Progress goes to stderr, one line per head
with the elapsed time and an estimate of the time left.

The recommendation: the fastest method with a Hopper kernel (``SPEED_RANKING``: the kernel
times of ``vcattn/data/kernel_speed.json``, written from a device run by
scripts/kernel_speed.py) whose overall PSNR is within ``tolerance_db`` (default 0.5 dB) of the
best evaluated kernel method.
"""
from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

from . import _cpu, _gpu, _lib, _tensors
from ._methods import GPU_METHODS, method_id, methods as all_methods, uses_vsmooth
from .core import attention
from .eval_report import EvalReport
from .plan import DEFAULT_KMEANS, block_energy_share, cube_permutation

__all__ = ["evaluate", "EvalReport", "SPEED_RANKING", "load_npy", "main"]


def _kernel_speed():
    """The kernel times the recommendation ranks by: data/kernel_speed.json, written from a device
    run by scripts/kernel_speed.py (kernel alone at Wan 720p, one run, every kernel method)."""
    import json
    import os

    with open(os.path.join(os.path.dirname(__file__), "data", "kernel_speed.json")) as f:
        data = json.load(f)
    data["kernel_ms"] = {m: ms for m, ms in data["kernel_ms"].items() if m in GPU_METHODS}
    return data


KERNEL_SPEED = _kernel_speed()
# Fastest first: the kernel methods the data file times, then any it does not (unranked)
SPEED_RANKING = tuple(sorted(KERNEL_SPEED["kernel_ms"], key=KERNEL_SPEED["kernel_ms"].get)) + tuple(
    m for m in GPU_METHODS if m not in KERNEL_SPEED["kernel_ms"])
DEFAULT_QUERY_ROWS = 512
DEFAULT_TOLERANCE_DB = 0.5
TV_STRIDE = 16
METRIC_KEYS = ("rel_l2", "cosine", "psnr_db", "max_abs_error", "value_error_share", "value_rel_l2",
               "probability_rel_l2", "mean_row_tv")


# ---- inputs -----------------------------------------------------------------------------------------

def load_npy(path):
    """A .npy as `vcattn eval --npy` reads it: float32 / float16 / float64, or bfloat16 stored as
    uint16 ('<u2') or by ml_dtypes ('<V2'); returned as float32 / float16 numpy, or as a bfloat16
    torch tensor when the file holds bfloat16 and torch is installed (else float32, exact)."""
    a = np.load(path, allow_pickle=False)
    if a.ndim != 4:
        raise ValueError(f"vcattn.eval: {path}: expected a 4-D (B, H, S, D) array, got shape {a.shape}")
    if a.dtype.kind == "V" and a.dtype.itemsize == 2 or a.dtype.name == "bfloat16":
        a = a.view(np.uint16)
    if a.dtype == np.uint16:
        return _bf16_bits(a)
    if a.dtype.name not in ("float32", "float16", "float64"):
        raise ValueError(f"vcattn.eval: {path}: dtype {a.dtype} (use float32, float16, or bfloat16 as '<u2')")
    return a


def _bf16_bits(a: np.ndarray):
    a = np.ascontiguousarray(a, dtype="<u2")
    try:
        import torch
    except ImportError:
        return (a.astype(np.uint32) << 16).view(np.float32)  # bfloat16 -> float32 is exact
    return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)


def _host_f32(x) -> np.ndarray:
    """float32 numpy (B, H, S, D) of a numpy array or torch tensor (a view when already float32)."""
    if isinstance(x, np.ndarray):
        if x.dtype == np.uint16:
            return (x.astype(np.uint32) << 16).view(np.float32)
        return x if x.dtype == np.float32 else x.astype(np.float32)
    import torch

    return x.detach().to("cpu", torch.float32).numpy()


def _shapes(q, k, v):
    for x, n in ((q, "q"), (k, "k"), (v, "v")):
        if len(tuple(x.shape)) != 4:
            raise ValueError(f"vcattn.evaluate: {n} must be 4-D (B, H, S, D), got shape {tuple(x.shape)}")
    (b, h, sq, d), (bk, hk, skv, dk) = tuple(q.shape), tuple(k.shape)
    if tuple(k.shape) != tuple(v.shape) or (b, h, d) != (bk, hk, dk):
        raise ValueError(f"vcattn.evaluate: shapes disagree: q {tuple(q.shape)}, k {tuple(k.shape)}, "
                         f"v {tuple(v.shape)}; K and V must match, Q may differ in S only")
    return b, h, sq, skv, d


# ---- metrics: the sums of tools/eval_cmd.c ---------------------------------------------------------------

_SUM_FIELDS = ("err2", "ref2", "out2", "dot", "peak", "max_err", "val2", "prob2", "tv_sum", "n", "tv_n")


def _new_sums():
    return dict.fromkeys(_SUM_FIELDS, 0.0) | {"split": True}


def _add(s, ref, out, pqv=None, tv=None, where=""):
    """Accumulate ref/out (and the split with pq_v) of one head; numpy or torch (any device),
    in float64."""
    if _tensors.is_torch(ref):
        r, o = ref.double(), out.double()
        e = None if pqv is None else pqv.double()
        fin = lambda x: bool(x.isfinite().all())  # noqa: E731
        red = lambda x: float(x.item())  # noqa: E731
    else:
        r, o = ref.astype(np.float64), out.astype(np.float64)
        e = None if pqv is None else pqv.astype(np.float64)
        fin = lambda x: bool(np.isfinite(x).all())  # noqa: E731
        red = float
    if not (fin(r) and fin(o) and (e is None or fin(e))):
        raise ValueError(f"vcattn.evaluate: non-finite output or reference ({where})")
    d = o - r
    s["err2"] += red((d * d).sum())
    s["ref2"] += red((r * r).sum())
    s["out2"] += red((o * o).sum())
    s["dot"] += red((r * o).sum())
    s["peak"] = max(s["peak"], red(abs(r).max()))
    s["max_err"] = max(s["max_err"], red(abs(d).max()))
    s["n"] += int(np.prod(tuple(r.shape)))
    if e is None:
        s["split"] = False
    else:
        s["val2"] += red(((e - o) ** 2).sum())
        s["prob2"] += red(((r - e) ** 2).sum())
    if tv is not None:
        s["tv_sum"] += float(np.sum(tv))
        s["tv_n"] += int(np.size(tv))


def _merge(parts):
    s = _new_sums()
    for p in parts:
        for f in ("err2", "ref2", "out2", "dot", "val2", "prob2", "tv_sum", "n", "tv_n"):
            s[f] += p[f]
        s["peak"] = max(s["peak"], p["peak"])
        s["max_err"] = max(s["max_err"], p["max_err"])
        s["split"] = s["split"] and p["split"]
    return s


def _finish(s) -> dict:
    """tools/eval_cmd.c sums_finish; None where the CLI prints null (and for the split of a kernel)."""
    ref2, err2 = s["ref2"], s["err2"]
    rel = math.sqrt(err2 / ref2) if ref2 > 0 else (math.inf if err2 > 0 else 0.0)
    cos = s["dot"] / math.sqrt(ref2 * s["out2"]) if ref2 > 0 and s["out2"] > 0 else (1.0 if ref2 == s["out2"] else 0.0)
    rmse = math.sqrt(err2 / s["n"]) if s["n"] else 0.0
    psnr = 20.0 * math.log10(s["peak"] / rmse) if rmse > 0 else None
    m = dict(rel_l2=rel, cosine=cos, psnr_db=psnr, max_abs_error=s["max_err"], value_error_share=None,
             value_rel_l2=None, probability_rel_l2=None, mean_row_tv=None)
    if s["split"]:
        denom = math.sqrt(ref2) if ref2 > 0 else 1.0
        m["value_rel_l2"] = math.sqrt(s["val2"]) / denom
        m["probability_rel_l2"] = math.sqrt(s["prob2"]) / denom
        tot = s["val2"] + s["prob2"]
        m["value_error_share"] = s["val2"] / tot if tot > 0 else 0.0
    if s["tv_n"] > 0:
        m["mean_row_tv"] = s["tv_sum"] / s["tv_n"]
    return m


# ---- the FP64 reference on the tensors' device (torch) ------------------------------------------------

def _torch_reference(qh, kh, vh, scale, chunk_rows=None):
    """Exact attention of one head, (B, Sq, D) each: float64 scores, softmax and sums on the
    tensors' device, chunked over query rows; returned rounded to float32 (as the CLI's ref)."""
    import torch

    b, sq, d = qh.shape
    skv = kh.shape[1]
    if chunk_rows is None:  # about 2 GiB of float64 scores per chunk
        chunk_rows = max(128, min(sq, (1 << 31) // (8 * skv)))
    ref = torch.empty((b, sq, d), dtype=torch.float32, device=qh.device)
    for bi in range(b):
        kt = kh[bi].double().t()
        vd = vh[bi].double()
        qd = qh[bi].double()
        for i in range(0, sq, chunk_rows):
            j = min(sq, i + chunk_rows)
            s = (qd[i:j] @ kt).mul_(scale)
            s.sub_(s.max(dim=1, keepdim=True).values).exp_()
            ref[bi, i:j] = ((s @ vd) / s.sum(dim=1, keepdim=True)).float()
            del s
    return ref


def _torch_index(rows, like):
    import torch

    return torch.as_tensor(rows, dtype=torch.int64, device=like.device)


def _recommend(results, tolerance_db):
    psnr = {r["method"]: r["psnr_db"] for r in results}
    inf = lambda p: math.inf if p is None else p  # noqa: E731 (exact output: no error)
    ranked = [m for m in SPEED_RANKING if m in psnr]
    if not ranked:
        if not results:
            return None, "no method evaluated"
        best = max(results, key=lambda r: inf(r["psnr_db"]))["method"]
        return best, (f"{best}: the highest PSNR of the evaluated methods; none of them has a Hopper kernel "
                      f"(ranked by speed: {', '.join(SPEED_RANKING)})")
    best = max(ranked, key=lambda m: inf(psnr[m]))
    top = inf(psnr[best])
    pick = next(m for m in ranked if inf(psnr[m]) >= top - tolerance_db)
    fmt = lambda p: "exact" if p is None else f"{p:.2f} dB"  # noqa: E731
    ms = KERNEL_SPEED["kernel_ms"].get(pick)
    timed = "untimed" if ms is None else f"{ms:.1f} ms"
    why = (f"{pick} ({fmt(psnr[pick])}): the fastest kernel ({KERNEL_SPEED['device'].split(',')[0]}, {KERNEL_SPEED['date']}, kernel alone at "
           f"{tuple(KERNEL_SPEED['shape'])}: {timed}; vcattn/data/kernel_speed.json) within {tolerance_db:g} dB "
           f"of the best kernel method {best} ({fmt(psnr[best])})")
    faster = [m for m in ranked[:ranked.index(pick)]]
    if faster:
        why += "; faster but further below: " + ", ".join(f"{m} {fmt(psnr[m])}" for m in faster)
    return pick, why


# ---- the evaluation ------------------------------------------------------------------------------------------

def _parse_heads(heads, h):
    if heads is None:
        return list(range(h))
    if isinstance(heads, str):
        out = []
        for part in heads.split(","):
            a, _, b = part.partition("-")
            out += list(range(int(a), int(b or a) + 1))
        heads = out
    heads = sorted(int(x) for x in heads)
    if len(set(heads)) != len(heads) or not heads or heads[0] < 0 or heads[-1] >= h:
        raise ValueError(f"vcattn.evaluate: heads must be distinct indices in [0, {h}), got {heads}")
    return heads


def _default_device(q):
    if _tensors.is_torch(q) and q.device.type == "cuda":
        return "cuda"
    try:
        import torch
    except ImportError:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def evaluate(q, k, v, methods=None, device=None, heads=None, query_rows=None, *, grid=None, cube=(2, 8, 8),
             sm_scale=None, full_methods=None, tolerance_db=DEFAULT_TOLERANCE_DB, tv_stride=TV_STRIDE,
             num_threads=None, chunk_rows=None, progress=True) -> EvalReport:
    """Evaluate methods on one layer's q, k, v ((B, H, S, D) numpy or torch; Sq != Skv allowed).

    methods: names (default all); device: "cuda" / "cpu" (default: cuda when torch sees a GPU);
    heads: indices or "0-3,8" (default all); query_rows: rows per head of the simulated methods
    (default 512; "all" or >= Sq: every row); grid: (T, H, W) of the K/V tokens (cube order
    statistic); full_methods: the methods run through ``vcattn.attention`` on every row on the
    tensors' device (default on cuda: those of ``GPU_METHODS`` that are asked for and have a
    kernel here; on cpu: none - given on the CPU, they run the same code path with the CPU
    simulation, which is how the CUDA path is tested without a GPU).  progress: per-head lines
    on stderr (True), or a file.
    """
    t0 = time.time()
    log = (sys.stderr if progress is True else progress) if progress else None

    def say(msg):
        if log is not None:
            print(msg, file=log, flush=True)

    b, h, sq, skv, d = _shapes(q, k, v)
    names = all_methods() if methods is None else ([m for m in methods.split(",") if m]
                                                    if isinstance(methods, str) else list(methods))
    for m in names:
        method_id(m)
    hsel = _parse_heads(heads, h)
    device = _default_device(q) if device is None else device
    if device not in ("cuda", "cpu"):
        raise ValueError(f"vcattn.evaluate: device must be 'cuda' or 'cpu', got {device!r}")
    scale = 1.0 / math.sqrt(d) if sm_scale is None else float(sm_scale)
    threads = _cpu.threads(num_threads)
    notes = []

    if full_methods is None:
        full = []
        if device == "cuda":
            if _gpu.available():
                full = [m for m in names if m in GPU_METHODS]
            else:
                notes.append("no Hopper kernel in this build / on this GPU: every method is simulated")
    else:
        full = [m for m in full_methods if m in names]
    sampled = [m for m in names if m not in full]
    if query_rows in (None, 0):
        nr = min(DEFAULT_QUERY_ROWS, sq) if query_rows is None else sq
    elif query_rows == "all":
        nr = sq
    else:
        nr = min(int(query_rows), sq)
        if nr < 1:
            raise ValueError(f"vcattn.evaluate: query_rows must be >= 1, got {query_rows!r}")
    rows = _lib.stratified_rows(sq, nr)
    ntv = -(-nr // tv_stride)

    # the tensors of the full-row path: torch on the device (bfloat16 / float16 for the kernel)
    tq = tk = tv_ = None
    if full:
        import torch

        dev = torch.device("cuda" if device == "cuda" else "cpu")

        def to_dev(x):
            t = x if _tensors.is_torch(x) else (_bf16_bits(x) if x.dtype == np.uint16 else torch.from_numpy(x))
            if not _tensors.is_torch(t):
                t = torch.from_numpy(t)
            t = t.detach()[:, hsel]  # the chosen heads only (a copy), before any cast or transfer
            if device == "cuda" and t.dtype not in (torch.bfloat16, torch.float16):
                t = t.to(torch.bfloat16)
            if device == "cpu":
                t = t.to(torch.float32)  # the simulation's own input type: float32 outputs, as the rows path
            return t.to(dev).contiguous()

        tq, tk, tv_ = to_dev(q), to_dev(k), to_dev(v)
        if device == "cuda" and not (_tensors.is_torch(v) and v.dtype in (torch.bfloat16, torch.float16)):
            notes.append("inputs rounded to bfloat16 for the kernel; the reference and the simulations use the "
                         "same bfloat16 values")
        if device == "cuda":
            notes.append(f"kernel outputs are {str(tv_.dtype).replace('torch.', '')} (what the model gets): their "
                         "rounding is part of the kernel methods' error; simulated outputs are float32")
    say(f"vcattn.eval: B={b} H={h} Sq={sq} Skv={skv} D={d}, {len(hsel)} heads, device {device}; "
        f"kernel, all rows: {', '.join(full) or '-'}; simulation, {nr} sampled rows: {', '.join(sampled) or '-'}")
    for n in notes:
        say("  note: " + n)

    def host_head(x, t, hi, hh):
        """(B, 1, S, D) float32 numpy of head hh: from the device copy when there is one (the
        values the kernel saw), else from the caller's tensor."""
        if t is not None:
            return t[:, hi:hi + 1].float().cpu().numpy()
        if isinstance(x, np.ndarray):
            return _host_f32(x[:, hh:hh + 1])
        return _host_f32(x[:, hh:hh + 1])

    sums = {m: [] for m in names}
    secs = dict.fromkeys(names, 0.0)
    outs = {}
    sync = (lambda: __import__("torch").cuda.synchronize()) if device == "cuda" and full else (lambda: None)
    for m in full:
        ts = time.time()
        outs[m] = attention(tq, tk, tv_, method=m, sm_scale=sm_scale, strict=True, num_threads=threads)
        sync()
        secs[m] += time.time() - ts
        say(f"  {m}: kernel on {len(hsel)} heads, all {sq} rows: {time.time() - ts:.2f} s"
            if device == "cuda" else f"  {m}: vcattn.attention on {len(hsel)} heads, all rows: {time.time() - ts:.2f} s")
    gperm = None
    if device == "cuda" and full and _gpu.available():
        # the V-Smooth grouping the kernel's plan=None uses, for the clustered block-energy share
        kdef = DEFAULT_KMEANS
        gperm = _gpu.kmeans(tv_, "HND", kdef["clusters"], kdef["iterations"], kdef["seed"])[0].cpu().numpy()
    cube_perm = None
    if grid is not None:
        grid = tuple(int(x) for x in grid)
        if grid[0] * grid[1] * grid[2] != skv:
            raise ValueError(f"vcattn.evaluate: grid {grid} has {grid[0] * grid[1] * grid[2]} tokens, the K/V "
                             f"sequence {skv}")
        cube_perm = cube_permutation(*grid, *cube)
    share = {"sequence": [], "cube": [], "clustered": []}

    t_heads = time.time()
    for hi, hh in enumerate(hsel):
        th = time.time()
        parts = []
        ref_dev = None
        if full:
            ts = time.time()
            ref_dev = _torch_reference(tq[:, hi], tk[:, hi], tv_[:, hi], scale, chunk_rows)
            sync()
            parts.append(f"reference (all rows) {time.time() - ts:.2f} s")
            for m in full:
                s = _new_sums()
                _add(s, ref_dev, outs[m][:, hi], where=f"{m}, head {hh}")
                sums[m].append(s)
        vh = host_head(v, tv_, hi, hh)
        need_plan = any(uses_vsmooth(m) for m in sampled) or gperm is None
        perm = None
        if need_plan:
            ts = time.time()
            perm = _cpu.plan_heads(vh, hh, threads)
            parts.append(f"k-means {time.time() - ts:.2f} s")
        if skv >= 128:
            share["sequence"].append(block_energy_share(vh))
            if cube_perm is not None:
                share["cube"].append(block_energy_share(vh, cube_perm))
            share["clustered"].append(block_energy_share(vh, perm if perm is not None else gperm[:, hi:hi + 1]))
        if sampled:
            qh, kh = host_head(q, tq, hi, hh), host_head(k, tk, hi, hh)
            ts = time.time()
            if ref_dev is not None:
                ref_rows = ref_dev[:, _torch_index(rows, ref_dev)].cpu().numpy()[:, None]
                parts.append("reference rows from the device")
            else:
                ref_rows = _cpu.reference_rows(qh, kh, vh, rows, scale, threads)
                parts.append(f"reference {time.time() - ts:.2f} s")
            for m in sampled:
                ts = time.time()
                out, pqv, tvv = _cpu.simulate_rows(qh, kh, vh, rows, scale, threads, m,
                                                   perm if uses_vsmooth(m) else None, tv_stride)
                secs[m] += time.time() - ts
                parts.append(f"{m} {time.time() - ts:.2f} s")
                s = _new_sums()
                _add(s, ref_rows, out, pqv, tvv, where=f"{m}, head {hh}")
                sums[m].append(s)
        elapsed = time.time() - t_heads
        say(f"head {hh} ({hi + 1}/{len(hsel)}): " + ", ".join(parts) + f"; head {time.time() - th:.1f} s, elapsed {time.time() - t0:.1f} s, "
            f"about {elapsed / (hi + 1) * (len(hsel) - hi - 1):.0f} s left")
        del ref_dev

    mean = lambda xs: (sum(xs) / len(xs)) if xs else None  # noqa: E731
    results = []
    for m in names:
        is_full = m in full
        rec = {"method": m}
        rec.update(_finish(_merge(sums[m])))
        rec.update(block_energy_share_sequence=mean(share["sequence"]), block_energy_share_cube=mean(share["cube"]),
                   block_energy_share_clustered=mean(share["clustered"]), seconds=round(secs[m], 3),
                   shape=[b, h, sq, d], seq_kv=skv, query_rows=sq if is_full else nr,
                   query_row_rule="all" if is_full or nr == sq else "stratified",
                   row_tv_rows=0 if is_full else ntv, evaluated_heads=list(hsel),
                   heads=[dict(head=hh, **_finish(s)) for hh, s in zip(hsel, sums[m])])
        rec["evaluation"] = ((("kernel" if device == "cuda" else "vcattn.attention") + ", all rows") if is_full
                             else f"simulation, {nr} sampled rows" if nr < sq else "simulation, all rows")
        rec["device"] = device if is_full else "cpu"
        results.append(rec)
    pick, why = _recommend(results, tolerance_db)
    for r in results:
        r["recommended"] = r["method"] == pick
    say(f"done in {time.time() - t0:.1f} s")
    info = dict(shape=[b, h, sq, d], seq_kv=skv, heads=list(hsel), device=device, notes=notes)
    return EvalReport(results, pick, why, info)


# ---- command line ----------------------------------------------------------------------------------------------

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m vcattn.eval", description=(
        "Every method vs the FP64 reference on captured Q/K/V (.npy, (B,H,S,D); bfloat16 as '<u2'). "
        "On CUDA the kernel methods run on all rows (FP64 reference on the GPU), the others as the CPU "
        "simulation of sampled rows."))
    ap.add_argument("q")
    ap.add_argument("k")
    ap.add_argument("v")
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda when available")
    ap.add_argument("--methods", default=None, help="comma-separated (default: all): " + ",".join(all_methods()))
    ap.add_argument("--heads", default=None, help="like 0,5,17 or 0-3,8 (default: all)")
    ap.add_argument("--query-rows", default=None,
                    help=f"rows per head of the simulated methods (default {DEFAULT_QUERY_ROWS}; 'all')")
    ap.add_argument("--grid", default=None, help="T,H,W of the K/V tokens (cube-order statistic)")
    ap.add_argument("--json", default=None, metavar="OUT.json", help="one JSON object per method per line")
    ap.add_argument("--plot", default=None, metavar="REPORT.png", help="PSNR per head and method (matplotlib)")
    ap.add_argument("--tolerance-db", type=float, default=DEFAULT_TOLERANCE_DB,
                    help="recommendation: the fastest kernel within this many dB of the best (default 0.5)")
    ap.add_argument("--scale", type=float, default=None, help="softmax scale (default 1/sqrt(D))")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (default $VCATTN_NUM_THREADS or all)")
    ap.add_argument("--quiet", action="store_true", help="no progress on stderr")
    a = ap.parse_args(argv)
    qr = a.query_rows
    if qr is not None and qr != "all":
        try:
            qr = int(qr)
        except ValueError:
            ap.error(f"--query-rows wants a row count or 'all', got {qr!r}")
    grid = None
    if a.grid:
        try:
            grid = tuple(int(x) for x in a.grid.replace("x", ",").split(","))
            assert len(grid) == 3 and min(grid) >= 1
        except (ValueError, AssertionError):
            ap.error(f"--grid wants T,H,W, got {a.grid!r}")
    try:
        q, k, v = (load_npy(p) for p in (a.q, a.k, a.v))
        rep = evaluate(q, k, v, methods=a.methods, device=a.device, heads=a.heads, query_rows=qr, grid=grid,
                       sm_scale=a.scale, tolerance_db=a.tolerance_db, num_threads=a.threads, progress=not a.quiet)
    except (ValueError, TypeError, OSError, RuntimeError) as e:  # RuntimeError: VcattnError (a library status)
        print(f"vcattn.eval: {e}", file=sys.stderr)
        return 1
    sys.stdout.write(rep.table())
    if a.json:
        rep.write_json(a.json)
        print(f"vcattn.eval: wrote {a.json}", file=sys.stderr)
    if a.plot:
        try:
            rep.plot(a.plot)
            print(f"vcattn.eval: wrote {a.plot}", file=sys.stderr)
        except ImportError as e:
            print(f"vcattn.eval: cannot write {a.plot}: {e}", file=sys.stderr)
            return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
