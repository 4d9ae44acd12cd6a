"""vcattn.capture: save the Q/K/V of chosen attention calls to .npy, in the format ``vcattn eval --npy`` and
``python -m vcattn.eval`` read: (B, H, S, D), C order; bfloat16 kept exact as uint16 ('<u2',
the bits), float16 as '<f2', float32 as '<f4'; plus meta.json.

    with vcattn.capture(transformer, "cap/", layers=["blocks.0.attn1"], steps=[0, 20]):
        pipe(prompt, num_inference_steps=40)
    # cap/step020/blocks.0.attn1/{q,k,v}.npy, meta.json ->  python -m vcattn.eval cap/step020/blocks.0.attn1/{q,k,v}.npy

How calls are found: ``torch.nn.functional.scaled_dot_product_attention`` is wrapped while
the block runs (as ``patch_sdpa`` does; the outputs are the original SDPA's, unchanged).
A call's **layer** is the name of the innermost module of ``model`` that has an attention
``processor`` (diffusers attention modules: ``blocks.0.attn1``) or, without a model or
outside such a module, ``call{n}`` - the n-th SDPA call of the step.  The **step** is
``set_step(i)``'s value, or, with a model and no set_step, the number of forward calls of
the model before this one (two per denoising step where classifier-free guidance runs as
two calls).  ``layers`` / ``steps``: which to
save (names, fnmatch patterns or call numbers; None = all).  GQA calls (fewer K/V heads) are
saved with K/V heads repeated, as vcattn needs them.
"""
from __future__ import annotations

import fnmatch
import json
import os
import re

__all__ = ["capture", "save_npy"]


def save_npy(path, t) -> str:
    """One (B, H, S, D) torch tensor or numpy array as a .npy vcattn reads; returns the dtype
    string written ('<u2' for bfloat16 bits, '<f2', '<f4')."""
    import numpy as np

    if isinstance(t, np.ndarray):
        a = t
        if a.dtype.name == "bfloat16":
            a = a.view(np.uint16)
    else:
        import torch

        t = t.detach().contiguous().cpu()
        if t.dtype == torch.bfloat16:
            a = t.view(torch.int16).numpy().view("<u2")  # the bits: exact
        elif t.dtype in (torch.float16, torch.float32):
            a = t.numpy()
        else:
            a = t.to(torch.float32).numpy()
    a = np.ascontiguousarray(a)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    np.save(path, a)
    return a.dtype.str


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name) or "_"


class capture:
    """Context manager: save Q/K/V of the chosen layers and steps under ``out_dir``
    (``step{SSS}/{layer}/q.npy, k.npy, v.npy, meta.json``); ``saved`` lists the folders."""

    def __init__(self, model=None, out_dir="vcattn_capture", layers=None, steps=None, *, max_saves=None):
        self.model = model
        self.out_dir = str(out_dir)
        self.layers = None if layers is None else [layers] if isinstance(layers, (str, int)) else list(layers)
        self.steps = None if steps is None else {int(s) for s in ([steps] if isinstance(steps, int) else steps)}
        self.max_saves = max_saves
        self.saved = []
        self.step = None
        self._auto_step = -1
        self._stack = []
        self._hooks = []
        self._ordinal = 0
        self._original = None

    # -- steps and layers
    def set_step(self, step: int) -> None:
        """The denoising step of the calls that follow (restarts the call numbering)."""
        self.step = int(step)
        self._ordinal = 0

    def _current_step(self):
        return self.step if self.step is not None else max(self._auto_step, 0)

    def _wanted(self, layer, ordinal, step):
        if self.steps is not None and step not in self.steps:
            return False
        if self.max_saves is not None and len(self.saved) >= self.max_saves:
            return False
        if self.layers is None:
            return True
        for sel in self.layers:
            if isinstance(sel, int) and sel == ordinal:
                return True
            if isinstance(sel, str) and (sel == layer or fnmatch.fnmatchcase(layer, sel)):
                return True
        return False

    # -- context
    def __enter__(self):
        import torch.nn.functional as F

        if self._original is not None:
            raise RuntimeError("vcattn.capture: this context is already active")
        os.makedirs(self.out_dir, exist_ok=True)
        if self.model is not None:
            self._hooks.append(self.model.register_forward_pre_hook(self._model_pre))
            for name, mod in self.model.named_modules():
                if name and hasattr(mod, "processor"):
                    self._hooks.append(mod.register_forward_pre_hook(lambda m, a, n=name: self._stack.append(n)))
                    self._hooks.append(mod.register_forward_hook(self._leave))
        self._original = F.scaled_dot_product_attention
        F.scaled_dot_product_attention = self._sdpa
        return self

    def __exit__(self, *exc):
        import torch.nn.functional as F

        F.scaled_dot_product_attention = self._original
        self._original = None
        for hk in self._hooks:
            hk.remove()
        self._hooks = []
        self._stack = []
        return False

    def _leave(self, module, args, output):
        if self._stack:
            self._stack.pop()
        # None: the module's output is left as it is

    def _model_pre(self, module, args):
        if self.step is None:
            self._auto_step += 1
            self._ordinal = 0

    # -- the wrapper
    def _sdpa(self, query, key, value, *args, **kwargs):
        out = self._original(query, key, value, *args, **kwargs)
        n = self._ordinal
        self._ordinal += 1
        layer = self._stack[-1] if self._stack else f"call{n}"
        step = self._current_step()
        if query.dim() == 4 and key.dim() == 4 and self._wanted(layer, n, step):
            self._save(query, key, value, layer, n, step, args, kwargs)
        return out

    def _save(self, q, k, v, layer, ordinal, step, args, kwargs):
        folder = os.path.join(self.out_dir, f"step{step:03d}", _safe(layer))
        if os.path.exists(os.path.join(folder, "meta.json")):  # a second call in the same layer
            folder = os.path.join(self.out_dir, f"step{step:03d}", _safe(f"{layer}.call{ordinal}"))
        os.makedirs(folder, exist_ok=True)
        repeated = 1
        if k.shape[1] != q.shape[1] and k.shape[1] and q.shape[1] % k.shape[1] == 0:
            repeated = q.shape[1] // k.shape[1]
            k = k.repeat_interleave(repeated, dim=1)
            v = v.repeat_interleave(repeated, dim=1)
        dtypes = {n: save_npy(os.path.join(folder, f"{n}.npy"), t) for n, t in (("q", q), ("k", k), ("v", v))}
        scale = kwargs.get("scale")
        meta = dict(layer=layer, step=step, call=ordinal, layout="HND (B, H, S, D)", q_shape=list(q.shape),
                    kv_shape=list(k.shape), dtype=str(q.dtype).replace("torch.", ""), npy_dtypes=dtypes,
                    scale=scale, is_causal=bool(kwargs.get("is_causal", False)),
                    attn_mask=kwargs.get("attn_mask", args[0] if args else None) is not None,
                    kv_heads_repeated=repeated,
                    eval=f"python -m vcattn.eval {folder}/q.npy {folder}/k.npy {folder}/v.npy")
        with open(os.path.join(folder, "meta.json"), "w") as f:
            json.dump(meta, f, indent=1)
        self.saved.append(folder)
