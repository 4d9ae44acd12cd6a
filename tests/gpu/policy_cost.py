#!/usr/bin/env python3
"""What a plan's per-head policy costs on the GPU, against the attention it steers.

For each input (the `vcattn workload` presets named by --inputs; "wan720p-randn" is randn
(1, 40, 75600, 128), Wan 720p's real head count, from a CPU torch.Generator seeded 0):
  * reuse: the median of reused calls of the default with a plan (CUDA events);
  * the measurement (vcattn._gpu.measure_recipes on the plan's permutation, wall time with the
    device synchronized, median of 3) under "floor" (recipes run in order, stopping when every
    head has one at the floor) and under "faithful" (all four), and one run of the kernel on
    the measured rows (the reference's share is the rest);
  * the measurement over 40 reused calls (a 40-step schedule's attention on this layer).
Output: a table on stdout and --json.

    PYTHONPATH=python VCATTN_LIBRARY=build-dev/libvcattn.so python3 tests/gpu/policy_cost.py \\
        --vcattn-bin build-dev/vcattn --json policy_cost.json
"""
import argparse
import json
import os
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import vcattn  # noqa: E402
from vcattn import _gpu  # noqa: E402
from bench_sdpa import time_ms  # noqa: E402
from head_fidelity import preset_qkv  # noqa: E402

METHOD = vcattn.DEFAULT_METHOD


def wall_ms(fn, iters=3):
    ts = []
    for _ in range(iters):
        torch.cuda.synchronize()
        t = time.perf_counter()
        out = fn()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t) * 1e3)
    return sorted(ts)[len(ts) // 2], out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vcattn-bin", required=True)
    ap.add_argument("--inputs", default="video-long-wan720p-sinks,video-long-wan720p,wan720p-randn")
    ap.add_argument("--json", required=True)
    a = ap.parse_args()
    work = tempfile.mkdtemp()
    res = dict(method=METHOD, gpu=torch.cuda.get_device_name(), torch=torch.__version__, inputs={})
    for name in a.inputs.split(","):
        if name == "wan720p-randn":
            g = torch.Generator().manual_seed(0)
            q, k, v = (torch.randn(1, 40, 75600, 128, generator=g).to(torch.bfloat16).cuda() for _ in range(3))
        else:
            q, k, v = preset_qkv(a.vcattn_bin, name, work)
        plan = vcattn.Plan(seed=0)
        vcattn.attention(q, k, v, plan=plan, method=METHOD, strict=True)
        reuse = time_ms(lambda: vcattn.attention(q, k, v, plan=plan, method=METHOD), 5)
        scale = 1.0 / q.shape[-1] ** 0.5
        r = dict(shape=list(q.shape), reuse_ms=reuse, recipes=vcattn.head_policy.names(plan.recipes))
        for policy in ("floor", "faithful"):
            ms, (psnr, _, _) = wall_ms(lambda: _gpu.measure_recipes(q, k, v, "HND", scale, METHOD, plan.perm,
                                                                plan.policy_rows, policy, plan.policy_margin_db))
            r[policy] = dict(ms=ms, runs=int((~torch.as_tensor(psnr).isnan()).any(dim=0).sum()) + 1,
                             over_40_steps=ms / (40 * reuse))
        n = min(plan.policy_rows, q.shape[2])
        qs = q[:, :, :n].contiguous()
        r["one_run_ms"], _ = wall_ms(lambda: _gpu.attention(qs, k, v, "HND", scale, False, METHOD, plan.perm, True))
        qr = q.index_select(2, torch.as_tensor([(i * q.shape[2]) // n for i in range(n)], device=q.device))
        r["reference_ms"], ref = wall_ms(lambda: _gpu.reference_rows(qr, k, v, scale))
        # the reference on this very input against FP64 (every row, a few heads at a time)
        worst = 0.0
        for h0 in range(0, q.shape[1], 4):
            hs = slice(h0, h0 + 4)
            s64 = (qr[:, hs].double() @ k[:, hs].double().transpose(-1, -2)) * scale
            o64 = torch.softmax(s64, dim=-1) @ v[:, hs].double()
            del s64
            e = (ref[:, hs].double() - o64).norm(dim=-1) / o64.norm(dim=-1)
            worst = max(worst, float(e.max()))
            del o64
        r["reference_vs_fp64_worst_row"] = worst
        r["floor_margins_db"] = (plan.recipe_psnr.reshape(-1, 4) - plan.recipe_floor.reshape(-1, 1)).round(3).tolist()
        print(f"== {name} {tuple(q.shape)}: reuse {reuse:.2f} ms; measuring: floor {r['floor']['ms']:.2f} ms "
              f"({r['floor']['runs']} runs, {100 * r['floor']['over_40_steps']:.3f}% of 40 calls), faithful "
              f"{r['faithful']['ms']:.2f} ms ({r['faithful']['runs']} runs, {100 * r['faithful']['over_40_steps']:.3f}%); "
              f"one run on {n} rows {r['one_run_ms']:.2f} ms, their reference {r['reference_ms']:.2f} ms "
              f"(worst row vs FP64 {r['reference_vs_fp64_worst_row']:.1e}); recipe 0 over the floor "
              f"{[m[0] for m in r['floor_margins_db']][:8]} dB; recipes {','.join(r['recipes'])}", flush=True)
        res["inputs"][name] = r
        del q, k, v
        torch.cuda.empty_cache()
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
