#!/usr/bin/env python3
"""Write python/vcattn/data/kernel_speed.json - the kernel times `vcattn.evaluate` ranks the
methods by - from a device run's gpu_bench output (scripts/device_check.sh bench ->
$OUT/bench.txt), so that the recommendation follows what was measured, not constants in code.

    python3 scripts/kernel_speed.py BENCH_TXT [--shape 1,40,75600,75600,128] [--date D]
                                    [--source PATH] [--device TEXT] [-o python/vcattn/data/kernel_speed.json]

Reads the lines ``BENCH <method> (<shape>) full <ms> ms ... kernel <ms> ms`` of that shape (the
kernel alone, a plan reused) and the peers' ``SDPA cudnn|sage2 (<shape>) <ms> ms`` of the same run.
Methods the file names that the library no longer has are dropped when it is read.
"""
import argparse
import json
import re
import sys


def parse(path, shape):
    kernel, peers, device = {}, {}, None
    for line in open(path):
        m = re.match(r"BENCH (\S+)\s+\((\S+)\) full ([\d.]+) ms .*kernel ([\d.]+) ms", line)
        if m and m.group(2) == shape and "+" not in m.group(1):
            kernel[m.group(1)] = float(m.group(4))
        m = re.match(r"SDPA (\S+) \((\S+)\) ([\d.]+) ms", line)
        if m and m.group(2) == shape:
            peers[m.group(1)] = float(m.group(3))
        m = re.match(r"== device: (.*)", line)
        if m:
            device = m.group(1).strip()
    return kernel, peers, device


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bench")
    ap.add_argument("--shape", default="1,40,75600,75600,128")
    ap.add_argument("--date", default=None)
    ap.add_argument("--source", default=None, help="the bench file's path as the docs cite it")
    ap.add_argument("--device", default=None, help="the GPU and driver, when the bench file does not say")
    ap.add_argument("-o", "--out", default="python/vcattn/data/kernel_speed.json")
    a = ap.parse_args()
    kernel, peers, device = parse(a.bench, a.shape)
    if not kernel:
        sys.exit(f"kernel_speed.py: no BENCH line of shape ({a.shape}) in {a.bench}")
    out = {"shape": [int(x) for x in a.shape.split(",")], "date": a.date, "source": a.source or a.bench,
           "device": a.device or device, "what": "kernel alone (preprocessing excluded), a plan reused; median of CUDA-event "
           "timings (tests/gpu/gpu_bench.c)", "kernel_ms": dict(sorted(kernel.items(), key=lambda kv: kv[1])),
           "peers_ms": peers}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"{a.out}: {len(kernel)} methods, fastest {next(iter(out['kernel_ms']))}")


if __name__ == "__main__":
    main()
