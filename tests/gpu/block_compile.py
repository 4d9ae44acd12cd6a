#!/usr/bin/env python3
"""A real diffusers transformer block through vcattn.diffusers.enable: eager vs torch.compile.

One block of a diffusers video transformer at its real size, BF16, random weights (no
download), with the model's own positional embedding (``--model``):

  * wan        ``WanTransformerBlock`` with Wan2.2-A14B shapes (dim 5120, 40 heads x 128, FFN
               13824, RMSNorm across heads on q/k, cross-attention norm, cross-attention to 512
               text tokens) and ``WanRotaryPosEmbed`` over a 21 x 45 x 80 latent grid (720p x 81
               frames after the (1, 2, 2) patch) = 75,600 tokens; its attention goes through
               diffusers' ``dispatch_attention_fn``;
  * cogvideox  ``CogVideoXBlock`` with CogVideoX-5B shapes (dim 3072, 48 heads x 64, FFN 4 x dim,
               LayerNorm on q/k, time embedding 512) and ``get_3d_rotary_pos_embed`` over a
               13 x 30 x 45 latent grid (720 x 480 x 49 frames after the 2 x 2 patch) = 17,550
               video tokens + 226 text tokens in one joint self-attention of head_dim 64; its
               processor calls ``torch.nn.functional.scaled_dot_product_attention``;
  * hunyuanvideo15  ``HunyuanVideo15TransformerBlock`` with HunyuanVideo-1.5's shapes (dim 2048,
               16 heads x 128, MLP ratio 4, RMSNorm on q/k) and ``HunyuanVideo15RotaryPosEmbed``
               over a 31 x 45 x 80 latent grid (720p x 121 frames) = 111,600 video tokens, joint
               with 1,300 text tokens of which the last 300 are padding: the block builds the
               boolean (B, 1, S, S) mask ``valid[i] & valid[j]`` and calls
               ``dispatch_attention_fn`` with it; enabled, the processor gets the padding mask
               deferred (``vcattn.deferred_mask``) and vcattn reads the lengths from it, and
               ``vcattn_eager_mask_built`` times the same with the mask built and read back
               (``vcattn.masks``). Eager only: under torch.compile a mask is not read, the call
               stays on the model's backend (docs/python.md), so there is nothing to compare.

Variants, all in one process on the same inputs:

  * unpatched            the block as diffusers ships it (SDPA; on CUDA cuDNN first:
                         ``--sdpa cudnn``, the default, puts cuDNN ahead of flash)
  * vcattn eager         ``vcattn.diffusers.enable`` on a copy of the block (same weights):
                         long self-attention through vcattn (``--method``), a PlanCache
                         (Schedule(40)) grouped at step 0 and timed at ``--step`` (9: a reuse
                         step); cross-attention (Wan's 512 text keys) stays on SDPA
  * vcattn compiled      ``torch.compile`` (inductor, mode default), and again with
                         ``fullgraph=True`` when the block traces in one graph
  * unpatched compiled   the noise floor of inductor's own rounding and its fusion gain
                         (``--no-compiled-baseline`` skips it)

Checks (exit status 1 if one fails; timings never fail the run):
  * graph breaks: 0 in the compiled vcattn block (torch._dynamo.utils.counters), one graph;
  * fullgraph: the block traces with ``fullgraph=True`` (dynamo, backend "eager"), and that
    compiled block gives the eager block's bits (same kernels: bit-identical expected);
    a break or fullgraph failure the unpatched block has too is diffusers' own: reported
    as a NOTE, not failed (diffusers 0.36 breaks in dispatch_attention_fn; 0.42.1 traces);
  * the vcattn op compiled (inductor, fullgraph) on the block's attention shape gives the
    eager op's bits;
  * routing: the eager and the compiled block's calls went through vcattn (the PlanCache
    counted them);
  * outputs finite. The inductor-compiled block is compared with the eager one as max|diff|
    and rel-L2 next to the same numbers for the unpatched block (inductor fuses the norms,
    RoPE and modulation and rounds them differently: not bit-identical, for either).
Reported: median times (CUDA events, after warm-up), compiled / eager and vs unpatched, the
compile time, and the output difference vcattn vs unpatched (rel-L2, PSNR = 20 log10(max|ref|
/ RMSE), max|diff|). Target: the compiled vcattn block no slower than eager (``target_met``:
ratio <= 1.01, timing noise allowed).

    PYTHONPATH=python:pydeps python3 tests/gpu/block_compile.py --model wan [--json out.json]
    PYTHONPATH=python:pydeps python3 tests/gpu/block_compile.py --model cogvideox --small --device cpu

diffusers: scripts/device_pydeps.sh puts a pure-Python one in pydeps/ (the device has none).
"""
import argparse
import contextlib
import copy
import inspect
import json
import math
import os
import statistics
import sys
import time
import traceback

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import vcattn  # noqa: E402
import vcattn.diffusers  # noqa: E402
from vcattn.integration import MIN_SEQ_KV  # noqa: E402

# per model: the real size, and --small (a quick run: a few heads, 384 video tokens, 32 text
# tokens; min_seq_kv between the two so that Wan's self-attention is routed and its
# cross-attention is not, as in the full block)
SIZES = {
    "wan": dict(full=dict(heads=40, head_dim=128, ffn=13824, text=512, frames=21, height=45, width=80,
                          min_seq_kv=MIN_SEQ_KV),
                small=dict(heads=4, head_dim=128, ffn=1024, text=32, frames=3, height=8, width=16, min_seq_kv=64)),
    "hunyuanvideo15": dict(full=dict(heads=16, head_dim=128, ffn=4 * 2048, text=1300, pad=300, frames=31, height=45,
                                     width=80, min_seq_kv=MIN_SEQ_KV),
                           small=dict(heads=4, head_dim=128, ffn=1024, text=48, pad=16, frames=3, height=8, width=16,
                                      min_seq_kv=64)),
    "cogvideox": dict(full=dict(heads=48, head_dim=64, ffn=4 * 3072, text=226, frames=13, height=30, width=45,
                                min_seq_kv=MIN_SEQ_KV),
                      small=dict(heads=4, head_dim=64, ffn=1024, text=32, frames=3, height=8, width=16, min_seq_kv=64)),
}


def load_diffusers():
    try:
        import diffusers
        import diffusers.models.transformers  # noqa: F401
    except Exception as e:  # ImportError, or a diffusers too new for this torch
        sys.exit(f"block_compile: cannot import diffusers ({type(e).__name__}: {e}). The device has none: "
                 f"scripts/device_pydeps.sh builds pydeps/ (diffusers 0.42.1: torch >= 2.6) on a machine with "
                 f"PyPI; carry pydeps and run with PYTHONPATH=python:pydeps")
    return diffusers


def as_loaded(block, model_cls, dtype):
    """The block as from_pretrained(torch_dtype=dtype) leaves it: the model's
    _keep_in_fp32_modules stay float32. Returns the list of kept names."""
    keep = getattr(model_cls, "_keep_in_fp32_modules", None) or []
    block = block.to(dtype).eval().requires_grad_(False)
    for name, prm in block.named_parameters():
        if any(m in name for m in keep):
            prm.data = prm.data.float()
    return block, keep


def build_wan(cfg, device, dtype):
    """(block, inputs, attention tokens): Wan2.2-A14B's block as WanTransformer3DModel builds it
    (cross_attn_norm=True, qk_norm rms_norm_across_heads, eps 1e-6), its RoPE cast like the model."""
    from diffusers.models.transformers import transformer_wan as tw
    dim, tokens = cfg["heads"] * cfg["head_dim"], cfg["frames"] * cfg["height"] * cfg["width"]
    with torch.device(device):
        block = tw.WanTransformerBlock(dim, cfg["ffn"], cfg["heads"], "rms_norm_across_heads", True, 1e-6, None)
        rope = tw.WanRotaryPosEmbed(cfg["head_dim"], (1, 2, 2), 1024)
    block, keep = as_loaded(block, tw.WanTransformer3DModel, dtype)  # diffusers >= 0.4x keeps rope too
    if "rope" not in keep:
        rope = rope.to(dtype)
    x = torch.randn(1, tokens, dim, device=device, dtype=dtype)
    ctx = torch.randn(1, cfg["text"], dim, device=device, dtype=dtype)
    temb = (0.5 * torch.randn(1, 6, dim, device=device)).to(dtype)      # the model's timestep_proj
    latent = torch.empty(1, 16, cfg["frames"], 2 * cfg["height"], 2 * cfg["width"], device=device, dtype=dtype)
    with torch.no_grad():
        rotary = rope(latent)
    return block, (x, ctx, temb, rotary), tokens


def build_cogvideox(cfg, device, dtype):
    """(block, inputs, attention tokens): CogVideoX-5B's block as CogVideoXTransformer3DModel
    builds it (gelu-approximate, attention bias, affine norms, eps 1e-5, time_embed_dim 512),
    the 3-D RoPE as the pipeline makes it at its native grid (use_real: (cos, sin))."""
    from diffusers.models.embeddings import get_3d_rotary_pos_embed
    from diffusers.models.transformers import cogvideox_transformer_3d as tc
    dim, tokens = cfg["heads"] * cfg["head_dim"], cfg["frames"] * cfg["height"] * cfg["width"]
    with torch.device(device):
        block = tc.CogVideoXBlock(dim=dim, num_attention_heads=cfg["heads"], attention_head_dim=cfg["head_dim"],
                                  time_embed_dim=512, dropout=0.0, activation_fn="gelu-approximate",
                                  attention_bias=True, norm_elementwise_affine=True, norm_eps=1e-5,
                                  ff_inner_dim=cfg["ffn"])
    block, _ = as_loaded(block, tc.CogVideoXTransformer3DModel, dtype)
    grid = (cfg["height"], cfg["width"])
    cos, sin = get_3d_rotary_pos_embed(embed_dim=cfg["head_dim"], crops_coords=((0, 0), grid), grid_size=grid,
                                       temporal_size=cfg["frames"], device=device)
    x = torch.randn(1, tokens, dim, device=device, dtype=dtype)
    ctx = torch.randn(1, cfg["text"], dim, device=device, dtype=dtype)
    temb = torch.randn(1, 512, device=device, dtype=dtype)
    return block, (x, ctx, temb, (cos, sin)), tokens + cfg["text"]


def build_hunyuanvideo15(cfg, device, dtype):
    """(block, inputs, attention tokens): HunyuanVideo-1.5's double-stream block as its
    Transformer3DModel builds it (qk_norm rms_norm), the RoPE of the model's defaults (patch 1,
    axes 16/56/56, theta 256) over the latent grid, and the text mask as the model hands it to
    every block: the valid tokens first (the model reorders each sample so), the padding last."""
    from diffusers.models.transformers import transformer_hunyuan_video15 as th
    dim, tokens = cfg["heads"] * cfg["head_dim"], cfg["frames"] * cfg["height"] * cfg["width"]
    mlp_ratio = cfg["ffn"] / dim
    with torch.device(device):
        block = th.HunyuanVideo15TransformerBlock(cfg["heads"], cfg["head_dim"], mlp_ratio, qk_norm="rms_norm")
        rope = th.HunyuanVideo15RotaryPosEmbed(1, 1, [16, 56, 56], 256.0)
    block, _ = as_loaded(block, th.HunyuanVideo15Transformer3DModel, dtype)
    x = torch.randn(1, tokens, dim, device=device, dtype=dtype)
    ctx = torch.randn(1, cfg["text"], dim, device=device, dtype=dtype)
    temb = torch.randn(1, dim, device=device, dtype=dtype)
    mask = torch.ones(1, cfg["text"], dtype=torch.bool, device=device)
    mask[:, cfg["text"] - cfg["pad"]:] = False
    latent = torch.empty(1, 65, cfg["frames"], cfg["height"], cfg["width"], device=device, dtype=dtype)
    with torch.no_grad():
        freqs = rope(latent)
    return block, (x, ctx, temb, mask, freqs), tokens + cfg["text"]


BUILDERS = {"wan": build_wan, "cogvideox": build_cogvideox, "hunyuanvideo15": build_hunyuanvideo15}
EAGER_ONLY = {"hunyuanvideo15"}  # a mask is not read under torch.compile: nothing routed to compare


def output_of(y):
    """One tensor of a block's output (CogVideoX's block returns video and text states)."""
    return torch.cat([t.flatten() for t in y]) if isinstance(y, tuple) else y


def sdpa_context(kind, device):
    """The SDPA backends of every variant (unpatched calls and the cross-attention the
    processor leaves to SDPA): cuDNN first on CUDA, torch's default order otherwise."""
    if device.type != "cuda" or kind == "default":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    order = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    if "set_priority" in inspect.signature(sdpa_kernel).parameters:
        return sdpa_kernel(order, set_priority=True)
    return sdpa_kernel(order)  # older torch: the set, in torch's own priority


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bench(fn, reps, warmup, device):
    """(median ms, all ms, last output): CUDA events on CUDA, wall clock on the CPU."""
    out = None
    for _ in range(warmup):
        out = fn()
    sync(device)
    ts = []
    for _ in range(reps):
        if device.type == "cuda":
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            out = fn()
            e1.record()
            torch.cuda.synchronize(device)
            ts.append(e0.elapsed_time(e1))
        else:
            t0 = time.perf_counter()
            out = fn()
            ts.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(ts), ts, out


def first_call(fn, device):
    """(seconds, output) of a compiled function's first call (tracing + code generation)."""
    sync(device)
    t0 = time.perf_counter()
    out = fn()
    sync(device)
    return time.perf_counter() - t0, out


def compare(ref, out):
    """rel-L2, PSNR (dB, peak max|ref|), max|diff| of out vs ref, in float32 on the device."""
    r, o = ref.float(), out.float()
    d = o - r
    rmse = d.pow(2).mean().sqrt().item()
    peak = r.abs().max().item()
    return dict(rel_l2=(d.norm() / r.norm()).item(), psnr_db=(20 * math.log10(peak / rmse) if rmse > 0 else math.inf),
                max_abs_diff=d.abs().max().item(), bit_identical=bool(torch.equal(ref, out)))


def graph_stats():
    from torch._dynamo.utils import counters
    breaks = dict(counters["graph_break"])
    return dict(graph_breaks=int(sum(breaks.values())),
                graph_break_reasons={str(k)[:300]: v for k, v in breaks.items()},
                unique_graphs=int(counters["stats"].get("unique_graphs", 0)))


def reset_dynamo():
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(BUILDERS), default="wan", help="the block (default wan)")
    ap.add_argument("--small", action="store_true", help="reduced sizes (4 heads, 384 video tokens): a quick run")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--method", default=vcattn.DEFAULT_METHOD)
    ap.add_argument("--step", type=int, default=9,
                    help="denoising step timed (default 9: a reuse step of Schedule(40), the plan grouped at step 0)")
    ap.add_argument("--reps", type=int, default=None, help="timed runs per variant (default 10; 3 with --small)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--sdpa", choices=["cudnn", "default"], default="cudnn")
    ap.add_argument("--frames", type=int)
    ap.add_argument("--height", type=int)
    ap.add_argument("--width", type=int)
    ap.add_argument("--heads", type=int)
    ap.add_argument("--ffn", type=int)
    ap.add_argument("--text", type=int)
    ap.add_argument("--min-seq-kv", type=int, dest="min_seq_kv")
    ap.add_argument("--no-compiled-baseline", action="store_true", help="skip the compiled unpatched block")
    ap.add_argument("--no-fullgraph", action="store_true", help="skip the inductor fullgraph=True variant")
    ap.add_argument("--eager-only", action="store_true",
                    help="no torch.compile variant (a quick check that the block routes; hunyuanvideo15 always)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    cfg = dict(SIZES[args.model]["small" if args.small else "full"])
    for k in ("frames", "height", "width", "heads", "ffn", "text", "min_seq_kv"):
        if getattr(args, k) is not None:
            cfg[k] = getattr(args, k)
    reps = args.reps if args.reps is not None else (3 if args.small else 10)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("block_compile: no CUDA device (use --device cpu --small for a CPU run)")
    diffusers = load_diffusers()
    dtype = torch.bfloat16
    dim = cfg["heads"] * cfg["head_dim"]
    torch.manual_seed(0)
    block, inputs, tokens = BUILDERS[args.model](cfg, device, dtype)

    patched = copy.deepcopy(block)
    cache = vcattn.PlanCache(vcattn.Schedule(40))
    handle = vcattn.diffusers.enable(patched, plan_cache=cache, method=args.method, strict=True,
                                     min_seq_kv=cfg["min_seq_kv"])

    def reuses():
        return sum(v.get("reuse", 0) for v in cache.summary().values())

    res = dict(config=dict(cfg, dim=dim, tokens=tokens, dtype="bfloat16", device=str(device), method=args.method,
                           step=args.step, reps=reps, warmup=args.warmup, sdpa=args.sdpa, small=args.small,
                           model=args.model, attention_modules=len(handle.layers)),
               versions=dict(torch=torch.__version__, diffusers=diffusers.__version__,
                             vcattn=vcattn.library_info().get("version"),
                             gpu=torch.cuda.get_device_name(device) if device.type == "cuda" else None,
                             cudnn=torch.backends.cudnn.version() if device.type == "cuda" else None),
               times_ms={}, all_times_ms={}, compile_s={}, checks={}, compare={}, errors={}, complete=False)
    failures = []
    notes = []  # what fails for diffusers' own reasons (the unpatched block too)

    def save():
        # after every section, so a run cut short by its time limit still leaves its numbers
        if args.json:
            res["failures"], res["notes"] = failures, notes
            with open(args.json, "w") as fh:
                json.dump(res, fh, indent=1, default=str)

    def record(name, med, ts):
        res["times_ms"][name] = med
        res["all_times_ms"][name] = ts
        print(f"  {name:28s} {med:10.2f} ms (median of {len(ts)})", flush=True)
        save()

    def compiled(name, module):
        """Compile module (inductor), time its first call (the compile) and then its runs; the output."""
        fn = lambda: output_of(module(*inputs))  # noqa: E731
        t_c, _ = first_call(fn, device)
        res["compile_s"][name] = t_c
        print(f"  {name + ' first call':28s} {t_c:10.1f} s (compile)", flush=True)
        med, ts, y = bench(fn, reps, args.warmup, device)
        record(name, med, ts)
        return y

    run_base = lambda: output_of(block(*inputs))  # noqa: E731
    run_vc = lambda: output_of(patched(*inputs))  # noqa: E731
    print(f"{args.model.upper()} BLOCK {tokens} attention tokens, dim {dim} ({cfg['heads']} x {cfg['head_dim']}), ffn {cfg['ffn']}, "
          f"{cfg['text']} text tokens, {device}, diffusers {diffusers.__version__}, torch {torch.__version__}, "
          f"method {args.method}", flush=True)
    with torch.no_grad(), sdpa_context(args.sdpa, device):
        # ---- eager
        med, ts, y_base = bench(run_base, reps, args.warmup, device)
        record("unpatched_eager", med, ts)
        handle.set_step(0)
        run_vc()                                       # groups every routed layer once (step 0)
        handle.set_step(args.step)
        med, ts, y_vc = bench(run_vc, reps, args.warmup, device)
        record("vcattn_eager", med, ts)
        routed_keys = sorted(map(str, cache.keys()))
        res["checks"]["routed_layers"] = routed_keys
        if not routed_keys:
            failures.append("no call went through vcattn (the PlanCache has no layer)")
        res["compare"]["vcattn_vs_unpatched"] = compare(y_base, y_vc)
        if args.model == "hunyuanvideo15":
            # the same routed block with the joint mask built by the processor and read back (the
            # path before vcattn.deferred_mask): what deferring it saves, and the same output
            deferred = vcattn.diffusers.JOINT_MASK_PROCESSORS
            vcattn.diffusers.JOINT_MASK_PROCESSORS = ()
            try:
                med, ts, y_built = bench(run_vc, reps, args.warmup, device)
            finally:
                vcattn.diffusers.JOINT_MASK_PROCESSORS = deferred
            record("vcattn_eager_mask_built", med, ts)
            res["compare"]["vcattn_mask_deferred_vs_built"] = compare(y_built, y_vc)
            if not res["compare"]["vcattn_mask_deferred_vs_built"]["bit_identical"]:
                failures.append("the deferred joint mask's output differs from the built mask's")
            del y_built
        for name, y in (("unpatched", y_base), ("vcattn", y_vc)):
            if not torch.isfinite(y).all():
                failures.append(f"{name} eager output not finite")

        compiles = args.model not in EAGER_ONLY and not args.eager_only
        if args.model in EAGER_ONLY:
            res["config"]["eager_only"] = ("under torch.compile the block's mask is not read and its attention stays "
                                           "on the model's backend (docs/python.md)")
        elif not compiles:
            res["config"]["eager_only"] = "--eager-only"
        if compiles:
            # ---- fullgraph tracing (dynamo only, backend "eager"): the same kernels, the same bits.
            # The unpatched block first: a break there is diffusers' own (e.g. diffusers 0.36's
            # dispatch_attention_fn calls is_torch_version under dynamo), not vcattn's
            reset_dynamo()
            base_dynamo_identical = None
            try:
                y = output_of(torch.compile(block, backend="eager", fullgraph=True)(*inputs))
                res["checks"]["unpatched_fullgraph_traces"] = True
                res["compare"]["unpatched_dynamo_eager_fullgraph_vs_eager"] = compare(y_base, y)
                base_dynamo_identical = res["compare"]["unpatched_dynamo_eager_fullgraph_vs_eager"]["bit_identical"]
                del y
            except Exception as e:
                res["checks"]["unpatched_fullgraph_traces"] = False
                res["errors"]["unpatched_fullgraph_trace"] = f"{type(e).__name__}: {e}"[:2000]
            reset_dynamo()
            torch.compile(block, backend="eager")(*inputs)
            res["checks"]["unpatched_graphs"] = graph_stats()
            base_breaks = res["checks"]["unpatched_graphs"]["graph_breaks"]
            reset_dynamo()
            try:
                f = torch.compile(patched, backend="eager", fullgraph=True)
                _, y = first_call(lambda: output_of(f(*inputs)), device)
                c = compare(y_vc, y)
                res["compare"]["dynamo_eager_fullgraph_vs_eager"] = c
                res["checks"]["fullgraph_traces"] = True
                res["checks"]["dynamo_eager_bit_identical"] = c["bit_identical"]
                if not c["bit_identical"]:
                    # the unpatched block differing too means the surrounding ops do, not vcattn
                    (notes if base_dynamo_identical is False else failures).append(
                        f"dynamo (backend eager, fullgraph) block differs from eager: max|diff| {c['max_abs_diff']:.3g} "
                        f"(unpatched block bit-identical: {base_dynamo_identical})")
            except Exception as e:
                res["checks"]["fullgraph_traces"] = False
                res["errors"]["fullgraph_trace"] = f"{type(e).__name__}: {e}"[:2000]
                first_line = str(e).splitlines()[0][:300] if str(e) else ""
                (notes if not res["checks"]["unpatched_fullgraph_traces"] else failures).append(
                    f"the vcattn block does not trace with fullgraph=True: {type(e).__name__}: {first_line}")

            # ---- inductor, mode default
            reset_dynamo()
            comp = torch.compile(patched)
            before = reuses()
            t_c, _ = first_call(lambda: output_of(comp(*inputs)), device)
            res["compile_s"]["vcattn_compiled"] = t_c
            print(f"  {'vcattn_compiled first call':28s} {t_c:10.1f} s (compile)", flush=True)
            gs = graph_stats()
            med, ts, y_comp = bench(lambda: output_of(comp(*inputs)), reps, args.warmup, device)
            gs_after = graph_stats()
            record("vcattn_compiled", med, ts)
            res["checks"]["compiled_graphs"] = gs
            res["checks"]["compiled_recompiles_while_timed"] = gs_after["unique_graphs"] - gs["unique_graphs"]
            calls = 1 + args.warmup + reps
            res["checks"]["compiled_vcattn_calls"] = reuses() - before
            if gs["graph_breaks"]:
                # breaks the unpatched block has too are diffusers' (reported, not failed)
                (failures if gs["graph_breaks"] > base_breaks else notes).append(
                    f"{gs['graph_breaks']} graph break(s) in the compiled vcattn block ({base_breaks} in the unpatched "
                    f"block): {list(gs['graph_break_reasons'])[:3]}")
            if reuses() - before < calls * len(routed_keys):
                failures.append(f"the compiled block made {reuses() - before} vcattn calls, expected "
                                f">= {calls * len(routed_keys)}")
            res["compare"]["vcattn_compiled_vs_eager"] = compare(y_vc, y_comp)
            res["compare"]["vcattn_compiled_vs_unpatched"] = compare(y_base, y_comp)
            if not torch.isfinite(y_comp).all():
                failures.append("compiled vcattn output not finite")

            # ---- inductor, fullgraph=True
            if not args.no_fullgraph and res["checks"].get("fullgraph_traces"):
                reset_dynamo()
                try:
                    y_cf = compiled("vcattn_compiled_fullgraph", torch.compile(patched, fullgraph=True))
                    res["compare"]["vcattn_compiled_fullgraph_vs_eager"] = compare(y_vc, y_cf)
                except Exception as e:
                    res["errors"]["compiled_fullgraph"] = f"{type(e).__name__}: {e}"[:2000]
                    failures.append(f"inductor fullgraph=True failed: {type(e).__name__}")

            # ---- inductor on the unpatched block: inductor's own rounding, and what fusion gains
            if not args.no_compiled_baseline:
                reset_dynamo()
                y_cb = compiled("unpatched_compiled", torch.compile(block))
                res["compare"]["unpatched_compiled_vs_eager"] = compare(y_base, y_cb)

        # ---- the vcattn op alone on the block's attention shape (HND, as diffusers' SDPA
        # call hands it over): inductor fullgraph vs eager, same plan -> the same bits
        reset_dynamo()
        g = torch.Generator(device=device).manual_seed(1)
        q, k, v = (torch.randn(1, cfg["heads"], tokens, cfg["head_dim"], generator=g, device=device).to(dtype)
                   for _ in range(3))
        plan = vcattn.Plan()
        op = lambda q, k, v: vcattn.attention(q, k, v, "HND", method=args.method, plan=plan, strict=True)  # noqa
        want = op(q, k, v)                              # groups once; every later call reuses
        want = op(q, k, v)
        try:
            got = torch.compile(op, fullgraph=True)(q, k, v)
            c = compare(want, got)
            res["compare"]["op_compiled_vs_eager"] = c
            res["checks"]["op_compiled_bit_identical"] = c["bit_identical"]
            if not c["bit_identical"]:
                failures.append(f"the compiled vcattn op differs from eager: max|diff| {c['max_abs_diff']:.3g}")
        except Exception as e:
            res["errors"]["op_compiled"] = f"{type(e).__name__}: {e}"[:2000]
            failures.append(f"the vcattn op does not compile: {type(e).__name__}")

    t = res["times_ms"]
    r = {}
    if "vcattn_compiled" in t:
        r["compiled_over_eager"] = t["vcattn_compiled"] / t["vcattn_eager"]
        r["compiled_over_unpatched_eager"] = t["vcattn_compiled"] / t["unpatched_eager"]
    if "vcattn_compiled_fullgraph" in t:
        r["compiled_fullgraph_over_eager"] = t["vcattn_compiled_fullgraph"] / t["vcattn_eager"]
    r["vcattn_eager_over_unpatched_eager"] = t["vcattn_eager"] / t["unpatched_eager"]
    if "unpatched_compiled" in t:
        r["unpatched_compiled_over_eager"] = t["unpatched_compiled"] / t["unpatched_eager"]
        if "vcattn_compiled" in t:
            r["compiled_over_unpatched_compiled"] = t["vcattn_compiled"] / t["unpatched_compiled"]
    res["ratios"] = r
    best = min(r.get("compiled_over_eager", math.inf), r.get("compiled_fullgraph_over_eager", math.inf))
    # CPU timings mean nothing; an eager-only block has no compiled time
    res["target_met"] = bool(best <= 1.01) if device.type == "cuda" and "vcattn_compiled" in t else None
    res["failures"] = failures
    res["notes"] = notes
    res["ok"] = not failures

    fv = res["compare"]["vcattn_vs_unpatched"]
    print(json.dumps({k: res[k] for k in ("ratios", "compile_s", "checks", "compare", "errors")}, indent=1,
                     default=str))
    if "eager_only" in res["config"]:
        print(f"{args.model.upper()} BLOCK {tokens} attention tokens, eager only ({res['config']['eager_only']}): "
              f"unpatched {t['unpatched_eager']:.2f} ms, vcattn {t['vcattn_eager']:.2f} ms -> "
              f"{r['vcattn_eager_over_unpatched_eager']:.3f}; vcattn vs unpatched rel-L2 {fv['rel_l2']:.3g}, "
              f"PSNR {fv['psnr_db']:.1f} dB")
    else:
        print(f"{args.model.upper()} BLOCK COMPILE {tokens} attention tokens: unpatched {t['unpatched_eager']:.2f} ms, vcattn eager "
              f"{t['vcattn_eager']:.2f} ms, compiled {t.get('vcattn_compiled', math.nan):.2f} ms -> compiled/eager "
              f"{r.get('compiled_over_eager', math.nan):.3f} "
              f"(fullgraph {r.get('compiled_fullgraph_over_eager', math.nan):.3f})"
              f", compiled/unpatched {r.get('compiled_over_unpatched_eager', math.nan):.3f}; vcattn vs unpatched "
              f"rel-L2 {fv['rel_l2']:.3g}, PSNR {fv['psnr_db']:.1f} dB; graph breaks "
              f"{res['checks'].get('compiled_graphs', {}).get('graph_breaks')}; target_met {res['target_met']}")
    for n_ in notes:
        print("NOTE (the unpatched diffusers block too):", n_)
    for f_ in failures:
        print("FAIL:", f_)
    res["complete"] = True
    save()
    return 0 if not failures else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit:
        raise
    except Exception:
        traceback.print_exc()
        sys.exit(2)
