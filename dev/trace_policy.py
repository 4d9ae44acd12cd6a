#!/usr/bin/env python3
"""The timeline of one head-recipe measurement (vcattn._gpu.measure_recipes): every CUDA kernel
with its start (from the measurement's first launch), duration and stream, the time the GPU is
busy (the union of the kernels) against the wall time, and the host's longest gaps - to tell the
runs' latency from the host's own time (run on the device).

    PYTHONPATH=python VCATTN_LIBRARY=build/libvcattn.so python3 dev/trace_policy.py \\
        --vcattn-bin build/vcattn [--inputs video-long-wan720p-sinks] [--policy floor] [--json out.json]
"""
import argparse
import json
import os
import sys
import tempfile
import time

import torch
from torch.profiler import ProfilerActivity, profile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "python"))
sys.path.insert(0, os.path.join(here, "..", "tests", "gpu"))
import vcattn  # noqa: E402
from vcattn import _gpu  # noqa: E402
from head_fidelity import preset_qkv  # noqa: E402


def union_ms(spans):
    busy, end = 0.0, -1e30
    for s, e in sorted(spans):
        if e > end:
            busy += e - max(s, end)
            end = e
    return busy / 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vcattn-bin", required=True)
    ap.add_argument("--inputs", default="video-long-wan720p-sinks,video-long-wan720p")
    ap.add_argument("--policy", default="floor")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    work = tempfile.mkdtemp()
    res = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "inputs": {}}
    for name in a.inputs.split(","):
        q, k, v = preset_qkv(a.vcattn_bin, name, work)
        plan = vcattn.Plan(seed=0)
        vcattn.attention(q, k, v, plan=plan)
        scale = 1.0 / q.shape[-1] ** 0.5

        def measure():
            return _gpu.measure_recipes(q, k, v, "HND", scale, vcattn.DEFAULT_METHOD, plan.perm, plan.policy_rows,
                                        a.policy, plan.policy_margin_db)

        for _ in range(2):
            measure()  # warm: the workspaces, the streams
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            t0 = time.perf_counter()
            measure()
            torch.cuda.synchronize()
            wall = (time.perf_counter() - t0) * 1e3
        kern = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        start = min(e.time_range.start for e in kern)
        rows = sorted(((e.time_range.start - start) / 1e3, (e.time_range.end - e.time_range.start) / 1e3,
                       getattr(e, "device_resource_id", -1), e.name[:90]) for e in kern)
        busy = union_ms([(e.time_range.start, e.time_range.end) for e in kern])
        span = (max(e.time_range.end for e in kern) - start) / 1e3
        cpu = sorted(((e.time_range.end - e.time_range.start) / 1e3, e.name[:80]) for e in prof.events()
                     if e.device_type == torch.autograd.DeviceType.CPU and e.cpu_parent is None)[-12:]
        print(f"== {name} {tuple(q.shape)}, policy {a.policy}: wall {wall:.2f} ms, first to last kernel "
              f"{span:.2f} ms, GPU busy {busy:.2f} ms, {len(kern)} kernels")
        for s, dur, stream, kname in rows:
            print(f"  {s:8.3f} +{dur:7.3f} ms  s{stream:<3}  {kname}")
        print("  longest host ops (top level): " + "; ".join(f"{n} {t:.2f} ms" for t, n in reversed(cpu)))
        res["inputs"][name] = {"wall_ms": wall, "span_ms": span, "busy_ms": busy, "kernels": rows,
                               "host_top": cpu}
        del q, k, v
        torch.cuda.empty_cache()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
