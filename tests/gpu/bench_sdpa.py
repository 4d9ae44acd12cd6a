"""bench_sdpa.py - the baselines timed the way gpu_bench times vcattn (median of
CUDA-event timings after warm-up): torch SDPA (cuDNN and flash backends, BF16)
and, when the package imports (PYTHONPATH; device_check.sh carries a prebuilt copy),
SageAttention2's sm90 kernel as sageattn() runs it on Hopper
(core.sageattn_qk_int8_pv_fp8_cuda_sm90 with its defaults, full call).

usage: python3 bench_sdpa.py B,H,Sq,Skv,D [B,H,Sq,Skv,D ...]
prints one line per shape and backend:  SDPA <backend> (B,H,Sq,Skv,D) <ms> ms <TFLOP/s>
(backend: cudnn, flash, sage2)
"""
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel


def time_ms(fn, iters):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(2):
        fn()
    ts = []
    for _ in range(iters):
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
    ts.sort()
    return ts[len(ts) // 2]


def randn_inputs(B, H, Sq, Skv, D):
    """The benchmarks' BF16 randn q (B,H,Sq,D), k and v (B,H,Skv,D) on the GPU, seed 0."""
    g = torch.Generator(device="cuda").manual_seed(0)
    return tuple(torch.randn(B, H, s, D, device="cuda", dtype=torch.bfloat16, generator=g) for s in (Sq, Skv, Skv))


def sage2_fn():
    try:
        from sageattention import core
    except Exception:  # not installed: the line says so
        return None
    return lambda q, k, v: core.sageattn_qk_int8_pv_fp8_cuda_sm90(q, k, v, tensor_layout="HND")


def main():
    sage2 = sage2_fn()
    if sage2 is None:
        print("SageAttention2 not importable: sage2 not timed", flush=True)
    print(f"torch {torch.__version__} cuda {torch.version.cuda} cudnn {torch.backends.cudnn.version()} "
          f"gpu {torch.cuda.get_device_name()}", flush=True)
    for arg in sys.argv[1:]:
        B, H, Sq, Skv, D = (int(x) for x in arg.split(","))
        q, k, v = randn_inputs(B, H, Sq, Skv, D)
        flops = 4.0 * B * H * Sq * Skv * D
        iters = 5 if flops > 5e13 else 20
        for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
            try:
                with sdpa_kernel([be]):
                    ms = time_ms(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v), iters)
                print(f"SDPA {name} ({B},{H},{Sq},{Skv},{D}) {ms:.3f} ms {flops / ms * 1e-9:.0f} TFLOP/s", flush=True)
            except Exception as ex:  # a backend that refuses the shape
                print(f"SDPA {name} ({B},{H},{Sq},{Skv},{D}) failed: {ex}".splitlines()[0], flush=True)
        if sage2 is not None:
            try:
                ms = time_ms(lambda: sage2(q, k, v), iters)
                print(f"SDPA sage2 ({B},{H},{Sq},{Skv},{D}) {ms:.3f} ms {flops / ms * 1e-9:.0f} TFLOP/s", flush=True)
            except Exception as ex:
                print(f"SDPA sage2 ({B},{H},{Sq},{Skv},{D}) failed: {ex}".splitlines()[0], flush=True)
        del q, k, v
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
