"""The report of ``vcattn.evaluate``: the per-method results as a table, JSON lines (the keys
of docs/eval-json.md) and a per-head picture (matplotlib optional)."""
from __future__ import annotations

import json

import numpy as np

__all__ = ["EvalReport"]


# ---- the report -------------------------------------------------------------------------------------------

class EvalReport:
    """What ``evaluate`` found: ``results`` (one dict per method, the keys of docs/eval-json.md
    plus ``evaluation``, ``device``, ``recommended``), ``recommended`` (a method name or None)
    and ``recommendation`` (the sentence why)."""

    def __init__(self, results, recommended, recommendation, info):
        self.results = results
        self.recommended = recommended
        self.recommendation = recommendation
        self.info = info

    def __getitem__(self, method):
        for r in self.results:
            if r["method"] == method:
                return r
        raise KeyError(method)

    def to_json_lines(self) -> str:
        """One JSON object per method per line, as ``vcattn eval --json`` prints them."""
        return "".join(json.dumps(r) + "\n" for r in self.results)

    def write_json(self, path) -> None:
        with open(path, "w") as f:
            f.write(self.to_json_lines())

    def table(self) -> str:
        def num(x, fmt):
            return "n/a" if x is None else format(x, fmt)

        def pct(x, fmt):
            return "n/a" if x is None else format(100.0 * x, fmt) + "%"

        i = self.info
        lines = [f"evaluated: heads {','.join(map(str, i['heads']))} of {i['shape'][1]}; "
                 f"shape {tuple(i['shape'])}, seq_kv {i['seq_kv']}, device {i['device']}"]
        for r in self.results:
            lines.append(f"  {r['method']}: {r['evaluation']}")
        r0 = self.results[0] if self.results else {}
        shares = [(n, r0.get(f"block_energy_share_{n}")) for n in ("sequence", "cube", "clustered")]
        lines.append("V block-energy share removed by the 128-token block mean: " +
                     " ".join(f"{n} {pct(x, '.1f')}" for n, x in shares))
        lines.append("")
        hdr = (f"{'method':<25} {'head':>5} {'rel_l2':>9} {'cosine':>10} {'psnr_db':>8} {'value_error_share':>18} "
               f"{'value_rel_l2':>12} {'probability_rel_l2':>18} {'mean_row_tv':>11}")
        lines.append(hdr)
        for r in self.results:
            rows = ([(str(h["head"]), h) for h in r["heads"]] if len(r["heads"]) > 1 else []) + [("all", r)]
            for name, m in rows:
                lines.append(f"{r['method']:<25} {name:>5} {num(m['rel_l2'], '9.5f')} {num(m['cosine'], '10.7f')} "
                             f"{num(m['psnr_db'], '8.2f')} {pct(m['value_error_share'], '17.1f'):>18} "
                             f"{num(m['value_rel_l2'], '12.5f')} {num(m['probability_rel_l2'], '18.5f')} "
                             f"{pct(m['mean_row_tv'], '10.2f'):>11}")
        lines.append("")
        lines.append(f"recommended: {self.recommendation}")
        return "\n".join(lines) + "\n"

    def plot(self, path) -> None:
        """PNG: per head, each method's PSNR; below it the value / probability split (the value
        path's share of the squared error) where known; the recommendation in the title.  Needs matplotlib (ImportError says so)."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError as e:
            raise ImportError("vcattn.eval: --plot needs matplotlib (pip install matplotlib); "
                              "the table and the JSON do not") from e
        heads = self.info["heads"]
        split = [r for r in self.results if r["value_rel_l2"] is not None]
        width = min(18.0, 10.0 + 0.04 * len(heads) * max(1, len(self.results)))
        fig, axes = plt.subplots(2 if split else 1, 1, figsize=(width, 8.5 if split else 4.8), squeeze=False)
        colors = {r["method"]: f"C{i % 10}" for i, r in enumerate(self.results)}
        x = np.arange(len(heads))

        def bars(ax, rs, key, scale=1.0):
            w = 0.8 / max(1, len(rs))
            for i, r in enumerate(rs):
                ys = [np.nan if hd[key] is None else scale * hd[key] for hd in r["heads"]]
                how = "kernel, all rows" if r["evaluation"].startswith(("kernel", "vcattn")) else "simulation"
                label = f"{r['method']} ({how})" + ("  <- recommended" if r["method"] == self.recommended else "")
                if len(heads) > 12:  # many heads: one line per method reads better than bars
                    ax.plot(x, ys, marker="o", ms=3, lw=2.2 if r["method"] == self.recommended else 1.0,
                            label=label, color=colors[r["method"]])
                else:
                    ax.bar(x + (i - (len(rs) - 1) / 2) * w, ys, w, label=label, color=colors[r["method"]],
                           edgecolor="black" if r["method"] == self.recommended else None)
            ax.set_xticks(x, [str(hd) for hd in heads], fontsize=7 if len(heads) > 20 else 9)
            ax.set_xlabel("head")
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0))

        ax = axes[0][0]
        bars(ax, self.results, "psnr_db")
        ax.set_ylabel("PSNR dB vs the FP64 reference")
        finite = [hd["psnr_db"] for r in self.results for hd in r["heads"] if hd["psnr_db"] is not None]
        if finite:
            ax.set_ylim(min(finite) - 3, max(finite) + 2)
        if split:
            ax2 = axes[1][0]
            bars(ax2, split, "value_error_share", 100.0)
            ax2.set_ylim(0, 100)
            ax2.set_ylabel("value path, % of squared error")
            ax2.set_title("error budget (simulated methods): value path's share; the rest is the "
                          "probability path", fontsize=9)
        fig.suptitle("recommended: " + self.recommendation, fontsize=8, wrap=True)
        fig.tight_layout(rect=(0, 0, 1, 0.93))
        fig.savefig(path, dpi=110)
        plt.close(fig)
