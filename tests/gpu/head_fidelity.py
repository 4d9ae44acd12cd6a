#!/usr/bin/env python3
"""Per-head fidelity of the default method through the product path, over k-means seeds, on the GPU.

For every input (the `vcattn workload` presets named by --inputs - "preset:heads=16,frames=32"
for a preset at another size - and randn (1, 8, 8192, 128)
from a CPU torch.Generator seeded 0), on the GPU:
  * the FP64 reference (torch float64 over the BF16 values, every row, chunked);
  * sage2-8bit (vcattn), and the real SageAttention2 kernel if importable
    (sageattention.core.sageattn_qk_int8_pv_fp8_cuda_sm90);
  * for each seed: the default method with ``vcattn.Plan(seed=s)`` (its per-head policy,
    "floor") and with ``vcattn.Plan(seed=s, policy=None)`` (every head in the k-means order with
    the method's P: the method as it was); the recipes the policy chose per head;
  * per head and per layer: PSNR = 20 log10(max|ref| / RMSE) (src/metrics.c), rel-L2;
  * time: the first call of a plan (k-means + the policy's measurement) and the median of
    reused calls (CUDA events), for the policy and for policy=None.
Output: JSON (--json), a table on stdout.

    PYTHONPATH=python VCATTN_LIBRARY=build-dev/libvcattn.so python3 tests/gpu/head_fidelity.py \\
        --vcattn-bin build-dev/vcattn --json head_fidelity.json
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import vcattn  # noqa: E402
from bench_sdpa import time_ms  # noqa: E402  (the same CUDA-event median as the benchmarks)

METHOD = vcattn.DEFAULT_METHOD


def load_bf16(path):
    a = np.load(path)  # '<u2' BF16 bits
    return torch.from_numpy(a.astype(np.int16)).view(torch.bfloat16).cuda()


def preset_qkv(vcattn_bin, name, work):
    """q, k, v (CUDA BF16) of `vcattn workload --preset name`, written under work.  A name may
    carry workload options after a colon, "preset:heads=16,frames=32" meaning `--preset preset
    --heads 16 --frames 32` (a preset at another size)."""
    preset, _, opts = name.partition(":")
    args = ["--preset", preset]
    for kv in filter(None, opts.split(",")):
        key, _, val = kv.partition("=")
        args += [f"--{key}", val]
    d = os.path.join(work, name.replace(":", "_").replace(",", "_").replace("=", ""))
    subprocess.run([vcattn_bin, "workload", *args, "--out", d, "--quiet"], check=True)
    return tuple(load_bf16(os.path.join(d, f"{t}.npy")) for t in "qkv")


def input_names(spec):
    """--inputs split at its commas, except those between a preset's options: "a:heads=16,frames=32,b"
    is ["a:heads=16,frames=32", "b"] (an item with '=' and no ':' continues the one before)."""
    names = []
    for item in filter(None, spec.split(",")):
        if names and ":" in names[-1] and "=" in item and ":" not in item:
            names[-1] += "," + item
        else:
            names.append(item)
    return names


def reference(q, k, v, chunk=2048):
    b, h, s, d = q.shape
    out = torch.empty((b, h, s, d), dtype=torch.float64, device=q.device)
    scale = 1.0 / d ** 0.5
    for hh in range(h):
        kk, vv = k[:, hh].double(), v[:, hh].double()
        for i in range(0, s, chunk):
            sc = torch.matmul(q[:, hh, i:i + chunk].double(), kk.transpose(-1, -2)) * scale
            out[:, hh, i:i + chunk] = torch.matmul(torch.softmax(sc, dim=-1), vv)
    return out


def metrics(ref, out):
    e = out.double() - ref
    per_head = (20 * torch.log10(ref.abs().amax(dim=(0, 2, 3)) / e.pow(2).mean(dim=(0, 2, 3)).sqrt())).tolist()
    layer = float(20 * torch.log10(ref.abs().max() / e.pow(2).mean().sqrt()))
    rel = float(e.norm() / ref.norm())
    return dict(head_psnr=per_head, layer_psnr=layer, rel_l2=rel)


def first_call_ms(fn):
    torch.cuda.synchronize()
    t = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return out, (time.perf_counter() - t) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vcattn-bin", required=True)
    ap.add_argument("--inputs", default="video-9600,video-9600-sinks,video-long-wan720p-sinks,video-long-wan720p,randn")
    ap.add_argument("--seeds", default="0,1,2,3")
    ap.add_argument("--json", required=True)
    a = ap.parse_args()
    try:
        from sageattention import core as sage_core
        sage2 = lambda q, k, v: sage_core.sageattn_qk_int8_pv_fp8_cuda_sm90(q, k, v, tensor_layout="HND")  # noqa
    except Exception as ex:  # not importable: the JSON says so
        print(f"SageAttention2 not importable: {ex}", file=sys.stderr)
        sage2 = None
    seeds = [int(s) for s in a.seeds.split(",")]
    results = dict(method=METHOD, torch=torch.__version__, gpu=torch.cuda.get_device_name(), inputs={})
    work = tempfile.mkdtemp()
    for name in input_names(a.inputs):
        t0 = time.time()
        if name == "randn":
            g = torch.Generator().manual_seed(0)
            q, k, v = (torch.randn(1, 8, 8192, 128, generator=g).to(torch.bfloat16).cuda() for _ in range(3))
        else:
            q, k, v = preset_qkv(a.vcattn_bin, name, work)
        ref = reference(q, k, v)
        r = dict(shape=list(q.shape))
        r["sage2-8bit"] = metrics(ref, vcattn.attention(q, k, v, method="sage2-8bit", strict=True))
        if sage2 is not None:
            r["sageattention2"] = metrics(ref, sage2(q, k, v))
        r["seeds"] = {}
        for s in seeds:
            row = {}
            for label, kw in (("policy", {}), ("method_as_is", {"policy": None})):
                plan = vcattn.Plan(seed=s, **kw)
                out, first = first_call_ms(lambda: vcattn.attention(q, k, v, plan=plan, method=METHOD, strict=True))
                row[label] = metrics(ref, out)
                row[label]["first_call_ms"] = first
                row[label]["reuse_ms"] = time_ms(lambda: vcattn.attention(q, k, v, plan=plan, method=METHOD), 5)
                if kw == {}:
                    row[label]["recipes"] = vcattn.head_policy.names(plan.recipes)
                    row[label]["measured_margin_db"] = plan.recipe_summary()["margin_db"]
            r["seeds"][s] = row
        base = r["sage2-8bit"]["head_psnr"]
        print(f"== {name} {tuple(q.shape)} ({time.time() - t0:.0f} s): per head over sage2-8bit, dB "
              f"(sage2-8bit: {' '.join(f'{x:.2f}' for x in base)}; layer {r['sage2-8bit']['layer_psnr']:.2f})")
        if sage2 is not None:
            print("   SageAttention2 kernel    " + " ".join(f"{x - b:+6.2f}" for x, b in zip(r["sageattention2"]["head_psnr"], base)))
        for s, row in r["seeds"].items():
            for label in ("policy", "method_as_is"):
                m = row[label]
                print(f"   seed {s} {label:13s} " + " ".join(f"{x - b:+6.2f}" for x, b in zip(m["head_psnr"], base))
                      + f" | layer {m['layer_psnr'] - r['sage2-8bit']['layer_psnr']:+.2f}"
                      + f" | first {m['first_call_ms']:.1f} ms reuse {m['reuse_ms']:.2f} ms"
                      + (f" | {','.join(x[:3] + ('+x' if 'exact' in x else '') for x in m['recipes'])}" if label == "policy" else ""))
        results["inputs"][name] = r
        del q, k, v, ref
        torch.cuda.empty_cache()
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
