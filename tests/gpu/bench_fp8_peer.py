"""bench_fp8_peer.py - cuDNN's FP8 attention (cudnn-frontend's sdpa_fp8 graph, per-tensor
descales, E4M3 Q/K/V/O, FP32 softmax; inputs quantized beforehand, so the kernel alone is
timed), the way bench_sdpa.py times the BF16 peers: median of CUDA-event timings after warm-up.

usage: python3 bench_fp8_peer.py B,H,Sq,Skv,D [...]      (needs the nvidia-cudnn-frontend wheel)
prints one line per shape:  SDPA cudnn-fp8 (B,H,Sq,Skv,D) <ms> ms <TFLOP/s>
"""
import sys

import torch

from bench_sdpa import randn_inputs, time_ms


def fp8_fn(q, k, v):
    import cudnn

    e4m3 = torch.float8_e4m3fn
    amax = [float(x.abs().max()) for x in (q, k, v)]
    desc = [a / 448.0 for a in amax]
    q8, k8, v8 = ((x / d).to(e4m3) for x, d in zip((q, k, v), desc))
    b, h, sq, dim = q.shape
    o8 = torch.empty((b, h, sq, dim), dtype=e4m3, device=q.device)
    one = lambda val: torch.full((1, 1, 1, 1), val, dtype=torch.float32, device=q.device)  # noqa: E731
    scal = dict(descale_q=one(desc[0]), descale_k=one(desc[1]), descale_v=one(desc[2]), descale_s=one(1.0 / 448.0),
                scale_s=one(448.0), scale_o=one(1.0))
    amax_s = torch.empty((1, 1, 1, 1), dtype=torch.float32, device=q.device)
    amax_o = torch.empty_like(amax_s)
    g = cudnn.pygraph(io_data_type=cudnn.data_type.FP8_E4M3, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT)
    tq, tk, tv = (g.tensor(name=n, dim=list(x.shape), stride=list(x.stride()), data_type=cudnn.data_type.FP8_E4M3)
                  for n, x in (("q", q8), ("k", k8), ("v", v8)))
    ts = {n: g.tensor(name=n, dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=cudnn.data_type.FLOAT) for n in scal}
    o, _, a_s, a_o = g.sdpa_fp8(q=tq, k=tk, v=tv, descale_q=ts["descale_q"], descale_k=ts["descale_k"],
                                descale_v=ts["descale_v"], descale_s=ts["descale_s"], scale_s=ts["scale_s"],
                                scale_o=ts["scale_o"], is_inference=True, attn_scale=1.0 / dim ** 0.5,
                                use_causal_mask=False)
    o.set_output(True).set_dim(list(o8.shape)).set_stride(list(o8.stride())).set_data_type(cudnn.data_type.FP8_E4M3)
    for t in (a_s, a_o):
        t.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(cudnn.data_type.FLOAT)
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()
    ws = torch.empty(max(g.get_workspace_size(), 1), dtype=torch.uint8, device=q.device)
    pack = {tq: q8, tk: k8, tv: v8, o: o8, a_s: amax_s, a_o: amax_o}
    pack.update({ts[n]: scal[n] for n in scal})
    return lambda: g.execute(pack, ws)


def main():
    print(f"torch {torch.__version__} cudnn {torch.backends.cudnn.version()} gpu {torch.cuda.get_device_name()}",
          flush=True)
    for arg in sys.argv[1:]:
        B, H, Sq, Skv, D = (int(x) for x in arg.split(","))
        q, k, v = randn_inputs(B, H, Sq, Skv, D)
        flops = 4.0 * B * H * Sq * Skv * D
        try:
            fn = fp8_fn(q, k, v)
            ms = time_ms(fn, 5 if flops > 5e13 else 20)
            print(f"SDPA cudnn-fp8 ({B},{H},{Sq},{Skv},{D}) {ms:.3f} ms {flops / ms * 1e-9:.0f} TFLOP/s", flush=True)
        except Exception as ex:  # the wheel missing, or a shape cuDNN refuses
            print(f"SDPA cudnn-fp8 ({B},{H},{Sq},{Skv},{D}) failed: {ex}".splitlines()[0], flush=True)
        del q, k, v
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
