#!/usr/bin/env python3
"""What HunyuanVideo-1.5's joint mask costs per attention call outside the kernel (issue 32):
diffusers building it, and vcattn reading it as lengths - on CUDA or the CPU.

HunyuanVideo15AttnProcessor2_0 (diffusers 0.42) gets the 1-D text mask (B, T), the valid tokens
first, and builds the boolean (B, 1, S, S) joint mask in every attention call (a new tensor per
block: ``F.pad`` with True for the video tokens, ``.view(B, 1, 1, S).repeat(1, 1, S, 1)``, ``&``
with its transpose); vcattn.diffusers reads each one (``vcattn.masks.lengths``, once per call:
the second look in the same call finds the kept answer). Timed, per S (median of --reps, after
one warm-up; CUDA: synchronized wall time):

  * ``build``      the processor's construction, as it runs in the block (the model's cost, paid
                   by the unpatched block too; its repeat and the result are both S^2 bytes);
  * ``build-bcast`` ``valid[:, None, :, None] & valid[:, None, None, :]``: the same mask in one
                   broadcast pass (what a one-line change in the processor would cost);
  * ``read``       ``masks.lengths`` on a mask it has not seen (the kept answer forgotten):
                   the candidate from row 0 / column 0, then one byte-wise min / max pass;
  * ``read-sums``  the row / column sums (``masks._read_torch``: int32 slabs, ~13 bytes of
                   traffic per entry) - the reader before issue 32, now only the path that says
                   why a mask is not a prefix;
  * with ``--float``: the same two reads of the additive (0 / -inf) BF16 mask.

Bytes per entry in the table are the model's (what each pass must move at least), not measured.

    VCATTN_LIBRARY=build/libvcattn.so PYTHONPATH=python python3 tests/gpu/mask_read.py --device cpu --sizes 8192,16384
    VCATTN_LIBRARY=build/libvcattn.so PYTHONPATH=python python3 tests/gpu/mask_read.py --device cuda      # S = 112,900 (720p x 121)
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
from vcattn import masks  # noqa: E402

BYTES = {"build": 4.0, "build-bcast": 1.0, "read": 1.0, "read-sums": 13.0, "read-float": 4.0,
         "read-sums-float": 23.0}  # BF16: == 0, isneginf, |, all (10), then the int32 sums (13)


def timer(device, reps):
    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def timed(fn):
        fn()
        ts = []
        for _ in range(reps):
            sync()
            t = time.perf_counter()
            out = fn()
            sync()
            ts.append(time.perf_counter() - t)
            del out
        return sorted(ts)[len(ts) // 2] * 1e3
    return timed


def fresh_lengths(mask, heads):
    masks._last["ref"] = None  # forget the kept answer: each call reads, as in a new block
    b, _, s, _ = mask.shape
    return masks.lengths(mask, b, heads, s, s)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--sizes", default=None, help="joint lengths S, comma list (default: 112900 on CUDA, "
                                                  "8192,16384 on the CPU)")
    ap.add_argument("--text", type=int, default=1300)
    ap.add_argument("--pad", type=int, default=300)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--float", action="store_true", help="also the additive BF16 mask (2 S^2 bytes more)")
    ap.add_argument("--no-sums", action="store_true", help="skip read-sums (the old reader)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    dev = torch.device(args.device)
    sizes = [int(x) for x in (args.sizes or ("112900" if dev.type == "cuda" else "8192,16384")).split(",")]
    timed = timer(dev, args.reps)
    res = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
           "threads": torch.get_num_threads(), "torch": torch.__version__, "bytes_per_entry": BYTES, "runs": []}
    for S in sizes:
        text = min(args.text, S // 2)
        pad = min(args.pad, text - 1)
        m1 = torch.ones(1, text, dtype=torch.bool, device=dev)
        m1[:, text - pad:] = False

        def build():  # HunyuanVideo15AttnProcessor2_0.__call__, diffusers 0.42.1
            am = F.pad(m1, (S - m1.shape[1], 0), value=True).bool()
            a1 = am.view(1, 1, 1, S).repeat(1, 1, S, 1)
            return (a1 & a1.transpose(2, 3)).bool()

        def build_bcast():
            am = F.pad(m1, (S - m1.shape[1], 0), value=True)
            return am[:, None, :, None] & am[:, None, None, :]

        ms = {"build": timed(build), "build-bcast": timed(build_bcast)}
        mask = build()
        assert torch.equal(mask, build_bcast())
        want = masks.Lengths([S - pad], [S - pad])
        assert fresh_lengths(mask, args.heads) == want
        ms["read"] = timed(lambda: fresh_lengths(mask, args.heads))
        if not args.no_sums:
            assert masks._read_torch(mask, 1, S, S) == want
            ms["read-sums"] = timed(lambda: masks._read_torch(mask, 1, S, S))
        if args.float:
            add = torch.zeros(mask.shape, dtype=torch.bfloat16, device=dev).masked_fill_(~mask, float("-inf"))
            del mask
            assert fresh_lengths(add, args.heads) == want
            ms["read-float"] = timed(lambda: fresh_lengths(add, args.heads))
            if not args.no_sums:
                ms["read-sums-float"] = timed(lambda: masks._read_torch(add, 1, S, S))
            del add
        else:
            del mask
        run = {"S": S, "entries": S * S, "valid": S - pad, "ms": ms,
               "GB_per_s": {k: BYTES[k] * S * S / (v * 1e-3) / 1e9 for k, v in ms.items()}}
        res["runs"].append(run)
        print(f"S={S:,} ({S * S / 1e9:.3g} G entries, {res['device']}):")
        for k, v in ms.items():
            print(f"  {k:16s} {v:10.2f} ms   ~{BYTES[k]:4.1f} B/entry   {run['GB_per_s'][k]:7.1f} GB/s")
        if "read-sums" in ms:
            print(f"  read-sums / read: {ms['read-sums'] / ms['read']:.1f}x")
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
