"""bench_parallel.py - sequence-parallel attention over N GPUs: Ulysses and ring, vcattn vs
BF16 SDPA, time per call and scaling efficiency against one GPU (issue 6).

    torchrun --nproc_per_node N tests/gpu/bench_parallel.py [options]     # N GPUs, NCCL
    python3 tests/gpu/bench_parallel.py [options]                         # world size 1

Options:
    --shape B,H,S,D       full problem (default 1,40,75600,128: Wan 2.x 720p); S divides by N
    --iters 5 --warmup 2  timed calls (median, the slowest rank's time) after warm-up calls
    --fns vcattn,sdpa     per-rank attention: vcattn (vsmooth-expcast-8bit, the Hopper kernel)
                          and/or torch SDPA (BF16; the ring takes flash attention's LSE)
    --modes ulysses,ring
    --method NAME         vcattn method (default vsmooth-expcast-8bit)
    --emulate N           world size 1 only: also time one rank's compute of an N-way split
                          (no communication): Ulysses = the call on H/N heads, ring = N shard
                          calls of S/N keys + N-1 merges - the compute-only bound on scaling
    --check               first compare every parallel result with one whole-sequence SDPA
                          call on the gathered inputs (rel-L2), at --check-shape
    --no-single           skip the 1-GPU reference timing (rank 0, whole problem)

Prints, per (mode, fn): the time per call on N GPUs, the 1-GPU time of the same fn on the
whole problem (rank 0 alone), speedup and efficiency = t1 / (N * tN).  V-Smooth plans are
grouped in the warm-up and reused in the timed calls (as a denoising schedule does after
its grouping steps; the grouping itself is ~0.3% of attention time over 40 steps).
NVLink multicast stays off (NCCL_NVLS_ENABLE=0).
"""
import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
try:
    import vcattn  # noqa: F401
except ImportError:
    sys.path.insert(0, str(ROOT / "python"))
import vcattn  # noqa: E402
from vcattn import parallel  # noqa: E402


def parse():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="1,40,75600,128")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--fns", default="vcattn,sdpa")
    ap.add_argument("--modes", default="ulysses,ring")
    ap.add_argument("--method", default=vcattn.DEFAULT_METHOD)
    ap.add_argument("--emulate", type=int, default=0)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--check-shape", default="1,8,8192,128")
    ap.add_argument("--no-single", action="store_true")
    return ap.parse_args()


def init():
    if "RANK" not in os.environ:  # plain python3: a world of one
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=os.environ.get("MASTER_PORT", "29533"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    return dist.get_rank(), dist.get_world_size(), torch.device("cuda", local)


def say(*a):
    if dist.get_rank() == 0:
        print(*a, flush=True)


def time_ms(fn, iters, warmup, everyone=True):
    """Median over iters of the slowest rank's time (CUDA events, a barrier before each call)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        if everyone:
            dist.barrier()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        t = torch.tensor([s.elapsed_time(e)], device="cuda")
        if everyone:
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
        ts.append(float(t))
    ts.sort()
    return ts[len(ts) // 2]


def per_rank_fn(name, method):
    return parallel.vcattn_attention_fn(method) if name == "vcattn" else parallel.sdpa_attention_fn()


def local_inputs(shape, world, rank, dev, seed):
    b, h, s, d = shape
    g = torch.Generator(device=dev).manual_seed(seed + rank)
    return [torch.randn(b, h, s // world, d, device=dev, dtype=torch.bfloat16, generator=g) for _ in range(3)]


def check(args, world, rank, dev):
    """Every (mode, fn) on a small problem vs one whole-sequence SDPA call (FP32 math)."""
    shape = tuple(int(x) for x in args.check_shape.split(","))
    g = torch.Generator(device=dev).manual_seed(1)
    q, k, v = (torch.randn(*shape, device=dev, dtype=torch.bfloat16, generator=g) for _ in range(3))
    ql, kl, vl = (parallel.shard_sequence(x) for x in (q, k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float())
    for mode in args.modes.split(","):
        for fn in args.fns.split(","):
            cls = parallel.UlyssesAttention if mode == "ulysses" else parallel.RingAttention
            out = cls(attn_fn=per_rank_fn(fn, args.method))(ql, kl, vl)
            full = parallel.gather_sequence(out)
            rel = float((full.float() - ref).norm() / ref.norm())
            say(f"check {mode:8s} {fn:6s} world {world} shape {shape}: rel_l2 vs FP32 SDPA {rel:.5f}")
    # the (out, lse) contract on this GPU, and the ring's merge emulated on one GPU (n K/V shards)
    if rank == 0:
        sc = (q.float() @ k.float().transpose(-1, -2)) * shape[3] ** -0.5
        lse_ref = torch.logsumexp(sc, -1)
        del sc
        for fn in args.fns.split(","):
            f = per_rank_fn(fn, args.method)
            o, l = f(q, k, v, "HND", None, True)
            msg = (f"check lse      {fn:6s} max|lse - FP32 logsumexp| {float((l - lse_ref).abs().max()):.2e} "
                   f"(shape {tuple(l.shape)}); whole call rel_l2 {float((o.float() - ref).norm() / ref.norm()):.5f}")
            for n in (2, 4):
                out = lse = None
                for kj, vj in zip(torch.chunk(k, n, dim=2), torch.chunk(v, n, dim=2)):
                    o, l = f(q, kj.contiguous(), vj.contiguous(), "HND", None, True)
                    o = o.float()
                    out, lse = (o, l) if out is None else vcattn.merge_attention(out, lse, o, l)
                msg += (f"; {n} shards merged rel_l2 {float((out - ref).norm() / ref.norm()):.5f}, "
                        f"lse err {float((lse - lse_ref).abs().max()):.2e}")
            print(msg, flush=True)
    dist.barrier()


def main():
    args = parse()
    rank, world, dev = init()
    shape = tuple(int(x) for x in args.shape.split(","))
    b, h, s, d = shape
    say(f"torch {torch.__version__} cuda {torch.version.cuda} gpu {torch.cuda.get_device_name()} world {world}; "
        f"vcattn {vcattn.library_info()}")
    if s % world:
        raise SystemExit(f"S={s} does not divide by the world size {world}")
    if args.check:
        check(args, world, rank, dev)
    fns = args.fns.split(",")
    modes = args.modes.split(",")

    single = {}
    if not args.no_single:  # rank 0 alone on the whole problem: the 1-GPU time
        if rank == 0:
            q, k, v = local_inputs(shape, 1, 0, dev, 7)
            for fn in fns:
                f = per_rank_fn(fn, args.method)
                plan = vcattn.Plan() if fn == "vcattn" else None
                kw = {} if plan is None else {"plan": plan}
                single[fn] = time_ms(lambda: f(q, k, v, "HND", None, False, **kw), args.iters, args.warmup,
                                     everyone=False)
                print(f"1-GPU   {fn:6s} {shape} {single[fn]:9.2f} ms", flush=True)
            del q, k, v
            torch.cuda.empty_cache()
        dist.barrier()
        t = torch.tensor([single.get(fn, 0.0) for fn in fns], device=dev)
        dist.broadcast(t, 0)
        single = dict(zip(fns, t.tolist()))

    q, k, v = local_inputs(shape, world, rank, dev, 11)
    for mode in modes:
        for fn in fns:
            f = per_rank_fn(fn, args.method)
            if mode == "ulysses":
                if h % world:
                    say(f"{mode} {fn}: {h} heads do not divide by {world}; skipped")
                    continue
                wrap = parallel.UlyssesAttention(attn_fn=f)
                kw = {"plan": vcattn.Plan()} if fn == "vcattn" else {}
            else:
                wrap = parallel.RingAttention(attn_fn=f)
                kw = {"plan": [vcattn.Plan() for _ in range(world)]} if fn == "vcattn" else {}
            ms = time_ms(lambda: wrap(q, k, v, "HND", **kw), args.iters, args.warmup)
            line = f"{mode:8s} {fn:6s} world {world} {shape} {ms:9.2f} ms"
            if single.get(fn):
                sp = single[fn] / ms
                line += f"  1-GPU {single[fn]:.2f} ms  speedup {sp:.2f}x  efficiency {100 * sp / world:.1f}%"
            say(line)

    if args.emulate > 1 and world == 1:
        n = args.emulate
        if s % n:
            raise SystemExit(f"--emulate {n}: S={s} does not divide")
        for fn in fns:
            f = per_rank_fn(fn, args.method)
            for mode in modes:
                if mode == "ulysses":
                    if h % n:
                        continue
                    qe, ke, ve = (x[:, :h // n].contiguous() for x in (q, k, v))
                    plan = vcattn.Plan() if fn == "vcattn" else None
                    kw = {} if plan is None else {"plan": plan}
                    call = lambda: f(qe, ke, ve, "HND", None, False, **kw)  # noqa: E731
                else:
                    qe, ke, ve = (x[:, :, :s // n].contiguous() for x in (q, k, v))
                    plans = [vcattn.Plan() for _ in range(n)] if fn == "vcattn" else [None] * n

                    def call():
                        out = lse = None
                        for j in range(n):
                            kw = {} if plans[j] is None else {"plan": plans[j]}
                            o, l = f(qe, ke, ve, "HND", None, True, **kw)
                            o = o.float()
                            out, lse = (o, l) if out is None else vcattn.merge_attention(out, lse, o, l)
                        return out.to(qe.dtype)
                ms = time_ms(call, args.iters, args.warmup, everyone=False)
                line = f"emulate {mode:8s} {fn:6s} {n}-way compute only {ms:9.2f} ms"
                if single.get(fn):
                    sp = single[fn] / ms
                    line += f"  compute-bound speedup {sp:.2f}x  efficiency {100 * sp / n:.1f}%"
                say(line)
                del qe, ke, ve
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
