#!/usr/bin/env python3
"""Markdown tables from vcattn_ppath --json files (docs/fidelity-analysis.md).

    python3 dev/ppath_tables.py preset  FILE.json          # per head x path
    python3 dev/ppath_tables.py sweep   F1.json F2.json ... # the key-count sweep
    python3 dev/ppath_tables.py sharp   F1.json F2.json ... # heads sorted by sharpness
    python3 dev/ppath_tables.py sim     F1.json F2.json ... # the --simulate cross-check
    python3 dev/ppath_tables.py modes   F1.json F2.json ... # pooled per run (final / running max)
Standard library only.
"""
import json
import math
import sys

PATHS = ["exp-e4m3", "expcast", "expcast-tail"]


def e(x):
    return "-" if x is None else f"{x:.2e}"


def f1(x):
    return "-" if x is None else f"{x:.1f}"


def load(path):
    with open(path) as fh:
        return json.load(fh)


def preset(doc):
    print(f"`{doc['preset']}`, {doc['keys']:,} keys, {doc['rows_per_head']} rows per head:\n")
    print("| head (g_h) | pmax median | peak octave | path | cut mass mean / worst | total | tail | mantissa | rounding "
          "| PSNR dB | exact row sum: total / PSNR | 1 - r_q/r |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows = [(str(h["head"]) + f" ({h['g_h']:.2f})", e(h["pmax_median"]), f1(h["peak_octave"]), h["paths"])
            for h in doc["heads"]]
    rows.append(("all", "", "", doc["all_heads"]["paths"]))
    for name, pm, pk, paths in rows:
        for i, p in enumerate(PATHS):
            s = paths[p]
            r = s["rel_l2"]
            print(f"| {name if i == 0 else ''} | {pm if i == 0 else ''} | {pk if i == 0 else ''} | {p} "
                  f"| {e(s['cut_mass_mean'])} / {e(s['cut_mass_worst'])} | {e(r['total'])} | {e(r['tail'])} "
                  f"| {e(r['mantissa'])} | {e(r['rounding'])} | {f1(s['psnr_db'])} "
                  f"| {e(r['exact_rowsum_total'])} / {f1(s['psnr_db_exact_rowsum'])} | {e(s['rowsum_deficit_mean'])} |")
    print()


def sweep(docs):
    docs = sorted(docs, key=lambda d: d["keys"])
    for p in PATHS:
        print(f"{p}, all heads pooled:\n")
        print("| keys (frames) | cut mass mean | worst row | total | tail | mantissa | rounding | exact row sum total "
              "| 1 - r_q/r |")
        print("|---|---|---|---|---|---|---|---|---|")
        for d in docs:
            s = d["all_heads"]["paths"][p]
            r = s["rel_l2"]
            print(f"| {d['keys']:,} ({d['grid'][0]}) | {e(s['cut_mass_mean'])} | {e(s['cut_mass_worst'])} "
                  f"| {e(r['total'])} | {e(r['tail'])} | {e(r['mantissa'])} | {e(r['rounding'])} "
                  f"| {e(r['exact_rowsum_total'])} | {e(s['rowsum_deficit_mean'])} |")
        lo, hi = docs[0], docs[-1]
        if len(docs) > 1:
            # log-log slope against the number of keys, from the smallest to the largest run
            x = math.log(hi["keys"] / lo["keys"])
            sl = []
            for comp in ["tail", "mantissa", "rounding", "total"]:
                a = lo["all_heads"]["paths"][p]["rel_l2"][comp]
                b = hi["all_heads"]["paths"][p]["rel_l2"][comp]
                sl.append(f"{comp} {math.log(b / a) / x:+.2f}" if a > 1e-12 and b > 1e-12 else f"{comp} -")
            a = lo["all_heads"]["paths"][p]["cut_mass_mean"]
            b = hi["all_heads"]["paths"][p]["cut_mass_mean"]
            sl.append(f"cut mass {math.log(b / a) / x:+.2f}" if a > 0 and b > 0 else "cut mass -")
            print(f"\nslope d log / d log(keys), {lo['keys']:,} -> {hi['keys']:,}: " + ", ".join(sl) + "\n")
    print("Per head, tail component (rel-L2) by keys:\n")
    heads = len(docs[0]["heads"])
    print("| keys | " + " | ".join(f"head {h} {p}" for h in range(heads) for p in PATHS) + " |")
    print("|---|" + "---|" * (heads * len(PATHS)))
    for d in docs:
        cells = [e(d["heads"][h]["paths"][p]["rel_l2"]["tail"]) for h in range(heads) for p in PATHS]
        print(f"| {d['keys']:,} | " + " | ".join(cells) + " |")
    print()


def sharp(docs):
    rows = []
    for d in docs:
        for h in d["heads"]:
            rows.append((h["pmax_median"], d, h))
    rows.sort(key=lambda t: t[0])
    print("| pmax median | preset, keys, head (g_h) | peak | "
          + " | ".join(f"{p}: cut / tail / mant / round / total" for p in PATHS) + " |")
    print("|---|---|---|" + "---|" * len(PATHS))
    for pm, d, h in rows:
        cells = []
        for p in PATHS:
            s = h["paths"][p]
            r = s["rel_l2"]
            cells.append(f"{e(s['cut_mass_mean'])} / {e(r['tail'])} / {e(r['mantissa'])} / {e(r['rounding'])} / "
                         f"{e(r['total'])}")
        print(f"| {e(pm)} | {d['preset']}, {d['keys']:,}, {h['head']} ({h['g_h']:.2f}) | {f1(h['peak_octave'])} | "
              + " | ".join(cells) + " |")
    print()


def sim(docs):
    print("| preset, keys, head | exp-e4m3 isolated / simulated | exp-e4m3, l from FP32 p: isolated / simulated "
          "| expcast isolated / simulated | expcast-tail isolated / simulated |")
    print("|---|---|---|---|---|")
    for d in docs:
        for h in d["heads"]:
            s = h.get("simulate_rel_l2")
            if not s:
                continue
            P = h["paths"]
            print(f"| {d['preset']}, {d['keys']:,}, {h['head']} "
                  f"| {e(P['exp-e4m3']['rel_l2']['total'])} / {e(s['exp-e4m3'])} "
                  f"| {e(P['exp-e4m3']['rel_l2']['exact_rowsum_total'])} / {e(s['exp-e4m3_fp32_rowsum'])} "
                  f"| {e(P['expcast']['rel_l2']['total'])} / {e(s['expcast'])} "
                  f"| {e(P['expcast-tail']['rel_l2']['total'])} / {e(s['expcast-tail'])} |")
    print()


def modes(docs):
    print("| preset, keys | codes against | path | cut mass mean / worst | total | tail | mantissa | rounding "
          "| exact row sum total | 1 - r_q/r |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for d in docs:
        rm = d.get("running_max", False)
        label = {False: "final max", "sequence-order": "running max, sequence order",
                 "kmeans-order": "running max, k-means order"}.get(rm, str(rm))
        for i, p in enumerate(PATHS):
            s = d["all_heads"]["paths"][p]
            r = s["rel_l2"]
            print(f"| {d['preset'] + ', ' + format(d['keys'], ',') if i == 0 else ''} | {label if i == 0 else ''} "
                  f"| {p} | {e(s['cut_mass_mean'])} / {e(s['cut_mass_worst'])} | {e(r['total'])} | {e(r['tail'])} "
                  f"| {e(r['mantissa'])} | {e(r['rounding'])} | {e(r['exact_rowsum_total'])} "
                  f"| {e(s['rowsum_deficit_mean'])} |")
    print()


def main(argv):
    if len(argv) < 3 or argv[1] not in ("preset", "sweep", "sharp", "sim", "modes"):
        print(__doc__)
        return 2
    docs = [load(p) for p in argv[2:]]
    if argv[1] == "preset":
        for d in docs:
            preset(d)
    elif argv[1] == "sweep":
        sweep(docs)
    elif argv[1] == "sharp":
        sharp(docs)
    elif argv[1] == "modes":
        modes(docs)
    else:
        sim(docs)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
