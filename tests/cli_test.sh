#!/usr/bin/env bash
# CLI contract: exit codes, --help, the JSON keys later checks depend on,
# .npy input (float32, float16, bfloat16) and clear errors for bad input.
set -u
cli="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
ok()  { pass=$((pass+1)); echo "ok   $1"; }
bad() { fail=$((fail+1)); echo "FAIL $1"; }
expect_rc() { # expect_rc <rc> <name> cmd...
    local want=$1 name=$2; shift 2
    "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
    if [ $rc -eq "$want" ]; then ok "$name"; else bad "$name (rc $rc, want $want)"; sed 's/^/    /' "$tmp/err" | head -5; fi
}

# errors name the cause and the fix, exit non-zero, print nothing on stdout
expect_err() { # expect_err <rc> <name> <grep pattern> cmd...
    local want=$1 name=$2 pat=$3; shift 3
    expect_rc "$want" "$name" "$@"
    grep -q -- "$pat" "$tmp/err" && ok "$name: says '$pat'" || { bad "$name: says '$pat'"; sed 's/^/    /' "$tmp/err" | head -3; }
    [ ! -s "$tmp/out" ] && ok "$name: nothing on stdout" || bad "$name: nothing on stdout"
}

expect_rc 0 "--help exits 0" "$cli" --help
grep -q "eval" "$tmp/out" && ok "--help lists eval" || bad "--help lists eval"
expect_rc 0 "eval --help exits 0" "$cli" eval --help
grep -q -- "--npy" "$tmp/out" && ok "eval --help documents --npy" || bad "eval --help documents --npy"
expect_rc 2 "no command exits 2" "$cli"
expect_rc 2 "unknown command exits 2" "$cli" frobnicate
expect_rc 2 "unknown method exits 2" "$cli" eval --methods sage9 --quiet
expect_err 2 "a method named twice exits 2" "listed twice" "$cli" eval --methods sage2-8bit,vsmooth-8bit,sage2-8bit --quiet
expect_rc 2 "bad size exits 2" "$cli" eval --workload-heads 0 --quiet
expect_rc 2 "missing value exits 2" "$cli" eval --clusters
expect_rc 1 "unsupported head dim exits 1" "$cli" eval --head-dim 96 --frames 1 --height 4 --width 64 --quiet
grep -q "head dimension" "$tmp/err" && ok "head-dim error says why" || bad "head-dim error says why"

# per-head recipes: eval --policy adds METHOD+policy rows and the recipe of every head
expect_rc 0 "eval --policy floor" "$cli" eval --workload-heads 2 --frames 1 --height 16 --width 32 --query-rows 32 \
    --policy-rows 32 --methods sage2-8bit,vsmooth-split-blockmax-8bit --policy floor --quiet
grep -q "vsmooth-split-blockmax-8bit+policy" "$tmp/out" && ok "--policy prints the policy rows" || bad "--policy prints the policy rows"
grep -Eq "recipe per head \(.*\) 0 (k-means|sequence)[a-zA-Z+-]* \([+-][0-9.]+, se [0-9.]+\), 1 (k-means|sequence)" "$tmp/out" &&
    ok "--policy names each head's recipe, its gain and standard error" || bad "--policy names each head's recipe, its gain and standard error"
expect_rc 0 "eval --policy --json" "$cli" eval --workload-heads 1 --frames 1 --height 16 --width 32 --query-rows 32 \
    --policy-rows 32 --methods vsmooth-split-blockmax-8bit --policy faithful --json --quiet
grep -q '"method": "vsmooth-split-blockmax-8bit+policy", "policy": "faithful"' "$tmp/out" && grep -q '"recipes": \["' "$tmp/out" &&
    grep -Eq '"recipe_gain_db": \[-?[0-9.e+-]+\], "recipe_stderr_db": \[[0-9.e+-]+\]' "$tmp/out" &&
    ok "--policy JSON carries the policy and the recipes" || bad "--policy JSON carries the policy and the recipes"
expect_err 2 "a bad --policy exits 2" "floor, fastest or faithful" "$cli" eval --policy best --quiet
expect_err 2 "--policy without a method that has an exact sibling exits 2" "exact sibling" "$cli" eval --methods sage2-8bit \
    --policy floor --frames 1 --height 4 --width 64 --quiet

# numerics: the ExpCast facts
expect_rc 0 "numerics --json" "$cli" numerics --json --samples 20000
for key in agree_share max_code_diff ratio_min ratio_max row_tv_bound cut_octaves tail_mass_ratio blockmax total_descent_max group_floor restore_coefficient_max restore_operand_max split exp_share scale_ratio rms_log2_error; do
    grep -q "\"$key\"" "$tmp/out" && ok "numerics key $key" || bad "numerics key $key"
done

# eval on a small built-in workload: one JSON object per method
expect_rc 0 "eval --json small workload" "$cli" eval --json --quiet --workload-heads 1 --frames 2 --height 8 --width 16 --clusters 4
[ "$(wc -l <"$tmp/out")" -eq 8 ] && ok "eight methods, one line each" || bad "eight methods, one line each"
for key in method rel_l2 cosine psnr_db value_error_share block_energy_share_sequence block_energy_share_cube block_energy_share_clustered; do
    [ "$(grep -c "\"$key\"" "$tmp/out")" -eq 8 ] && ok "eval key $key" || bad "eval key $key"
done
if command -v python3 >/dev/null && python3 -c "import json,sys" 2>/dev/null; then
    python3 - "$tmp/out" <<'PY' && ok "eval JSON parses, values sane" || bad "eval JSON parses, values sane"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert {r["method"] for r in rows} == {"fp8-naive", "sage2-8bit", "vsmooth-8bit", "vsmooth-expcast-8bit", "sage3-4bit", "vsmooth-4bit", "vsmooth-blockmax-8bit", "vsmooth-split-blockmax-8bit"}
for r in rows:
    assert 0 < r["rel_l2"] < 0.5 and 0.9 < r["cosine"] <= 1 and r["psnr_db"] > 10, r
    assert 0 <= r["value_error_share"] <= 1, r
PY
fi
expect_rc 0 "eval table with --methods" "$cli" eval --quiet --workload-heads 1 --frames 2 --height 8 --width 16 --methods sage2-8bit,vsmooth-8bit
grep -q "vsmooth-8bit" "$tmp/out" && ! grep -q "fp8-naive" "$tmp/out" && ok "--methods selects" || bad "--methods selects"

# .npy input, when numpy is there to write it
if python3 -c "import numpy" 2>/dev/null; then
    python3 - "$tmp" <<'PY'
import sys, numpy as np
d = sys.argv[1]
rng = np.random.default_rng(20261201)
q, k, v = (rng.standard_normal((1, 2, 256, 64)).astype(np.float32) for _ in range(3))
np.save(f"{d}/q.npy", q); np.save(f"{d}/k.npy", k.astype(np.float16)); np.save(f"{d}/v.npy", v)
# bfloat16 stored as uint16: the top half of float32
np.save(f"{d}/vb.npy", (v.view(np.uint32) >> 16).astype("<u2"))
np.save(f"{d}/bad3d.npy", q[0])
np.save(f"{d}/short.npy", q[:, :, :100])
np.save(f"{d}/q200.npy", q[:, :, :200])  # Sq != Skv
PY
    expect_rc 0 "eval --npy f32/f16" "$cli" eval --json --quiet --npy "$tmp/q.npy" "$tmp/k.npy" "$tmp/v.npy" --clusters 2
    grep -q '"shape": \[1, 2, 256, 64\]' "$tmp/out" && ok "npy shape reported" || bad "npy shape reported"
    # no --grid: the cube order is not measured, and says so as JSON null
    python3 -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; assert all(x['block_energy_share_cube'] is None and x['block_energy_share_clustered'] >= 0 for x in r)" "$tmp/out" \
        && ok "unmeasured cube share is null" || bad "unmeasured cube share is null"
    expect_rc 0 "eval --npy bfloat16 V with --grid" "$cli" eval --json --quiet --npy "$tmp/q.npy" "$tmp/k.npy" "$tmp/vb.npy" --grid 4,8,8 --cube 1,4,8 --clusters 2 --methods vsmooth-8bit
    expect_rc 0 "eval --npy Sq != Skv" "$cli" eval --json --quiet --npy "$tmp/q200.npy" "$tmp/k.npy" "$tmp/v.npy" --grid 4,8,8 --clusters 2 --query-rows 50 --heads 1
    python3 -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; assert len(r)==8 and all(x['shape']==[1,2,200,64] and x['seq_kv']==256 and x['query_rows']==50 and x['evaluated_heads']==[1] and x['block_energy_share_cube'] is not None for x in r)" "$tmp/out" \
        && ok "Sq != Skv: shapes, sampling and head reported" || bad "Sq != Skv: shapes, sampling and head reported"
    expect_err 2 "--heads past the npy heads" "input has 2 heads" "$cli" eval --json --quiet --npy "$tmp/q.npy" "$tmp/k.npy" "$tmp/v.npy" --heads 2
    expect_rc 1 "3-D npy rejected" "$cli" eval --quiet --npy "$tmp/bad3d.npy" "$tmp/k.npy" "$tmp/v.npy"
    grep -q "3 dimensions" "$tmp/err" && ok "3-D npy error names the rank" || bad "3-D npy error names the rank"
    expect_rc 1 "mismatched K/V rejected" "$cli" eval --quiet --npy "$tmp/q.npy" "$tmp/short.npy" "$tmp/v.npy"
    grep -q "disagree" "$tmp/err" && ok "mismatch error names the shapes" || bad "mismatch error names the shapes"
    expect_rc 1 "--grid that does not fit rejected" "$cli" eval --quiet --npy "$tmp/q.npy" "$tmp/k.npy" "$tmp/v.npy" --grid 3,8,8
fi
expect_rc 1 "missing npy file" "$cli" eval --quiet --npy "$tmp/none.npy" "$tmp/none.npy" "$tmp/none.npy"
grep -q "none.npy" "$tmp/err" && ok "missing file named in the error" || bad "missing file named in the error"

# workload: presets written as BF16 .npy that eval --npy reads (tools/workload_cmd.c)
expect_rc 0 "workload --help exits 0" "$cli" workload --help
grep -q "video-long-wan720p" "$tmp/out" && ok "workload --help lists the presets" || bad "workload --help lists the presets"
grep -q "workload" <("$cli" --help) && ok "--help lists workload" || bad "--help lists workload"
expect_rc 2 "workload unknown preset exits 2" "$cli" workload --preset nope --out "$tmp/wl"
grep -q "video-9600" "$tmp/err" && ok "unknown preset error lists the presets" || bad "unknown preset error lists the presets"
expect_rc 2 "workload without --out exits 2" "$cli" workload --preset video-9600
expect_rc 2 "workload bad --heads exits 2" "$cli" workload --preset video-9600 --heads 0 --out "$tmp/wl"
expect_rc 1 "workload unwritable --out exits 1" "$cli" workload --preset video-9600 --frames 1 --heads 1 --out /proc/nonexistent/dir --quiet
expect_rc 0 "workload writes a preset" "$cli" workload --preset video-9600 --frames 1 --heads 2 --out "$tmp/wl" --quiet
for f in q k v; do
    [ -s "$tmp/wl/$f.npy" ] && ok "workload wrote $f.npy" || bad "workload wrote $f.npy"
done
grep -q '"grid": \[1, 48, 50\]' "$tmp/wl/grid.json" && ok "grid.json has the grid" || bad "grid.json has the grid"
expect_rc 0 "eval --npy reads the workload files" "$cli" eval --json --quiet --npy "$tmp/wl/q.npy" "$tmp/wl/k.npy" "$tmp/wl/v.npy" --grid 1,48,50 --methods sage2-8bit --clusters 4
grep -q '"shape": \[1, 2, 2400, 128\]' "$tmp/out" && ok "workload files have (1, 2, 2400, 128)" || bad "workload files have (1, 2, 2400, 128)"
cp "$tmp/wl/v.npy" "$tmp/v_first.npy"
expect_rc 0 "workload is deterministic" "$cli" workload --preset video-9600 --frames 1 --heads 2 --out "$tmp/wl" --quiet
cmp -s "$tmp/wl/v.npy" "$tmp/v_first.npy" && ok "same bytes twice" || bad "same bytes twice"
expect_rc 0 "workload --stats --no-write" "$cli" workload --preset video-9600 --frames 1 --heads 1 --no-write --stats --stats-rows 8 --quiet
grep -q "tail<2^-15" "$tmp/out" && ok "stats table printed" || bad "stats table printed"
if python3 -c "import numpy" 2>/dev/null; then
    python3 - "$tmp/wl" <<'PY' && ok "workload .npy: '<u2' BF16, finite, O(1)" || bad "workload .npy: '<u2' BF16, finite, O(1)"
import sys, numpy as np
for n in "qkv":
    a = np.load(f"{sys.argv[1]}/{n}.npy")
    assert a.dtype == np.dtype("<u2") and a.shape == (1, 2, 2400, 128), (a.dtype, a.shape)
    x = (a.astype(np.uint32) << 16).view(np.float32)
    assert np.isfinite(x).all() and 0.3 < x.std() < 30, x.std()
PY
fi

# ---- sampling, head selection, per-head results (docs/eval-json.md) ----
small="--workload-heads 2 --frames 2 --height 8 --width 16 --clusters 4"
# progress on stderr (no --quiet), one parseable JSON object per line on stdout
expect_rc 0 "eval --query-rows --json with progress" "$cli" eval --json $small --query-rows 37 --methods sage2-8bit,vsmooth-4bit
cp "$tmp/out" "$tmp/sampled.json"
grep -q "head 1 (2/2)" "$tmp/err" && grep -q "elapsed" "$tmp/err" && grep -q "left" "$tmp/err" \
    && ok "per-head progress with elapsed and time left on stderr" || bad "per-head progress with elapsed and time left on stderr"
expect_rc 0 "eval full --json" "$cli" eval --json --quiet $small --methods sage2-8bit,vsmooth-4bit
cp "$tmp/out" "$tmp/full.json"
expect_rc 0 "eval --query-rows = Sq --json" "$cli" eval --json --quiet $small --query-rows 256 --methods sage2-8bit,vsmooth-4bit
cp "$tmp/out" "$tmp/all.json"
expect_rc 0 "eval --heads 1 --json" "$cli" eval --json --quiet $small --heads 1 --query-rows 37 --methods sage2-8bit,vsmooth-4bit
cp "$tmp/out" "$tmp/head1.json"
expect_rc 0 "eval table per head" "$cli" eval --quiet $small --query-rows 37 --methods sage2-8bit
cp "$tmp/out" "$tmp/table.txt"
if command -v python3 >/dev/null; then
    python3 - "$tmp" "$(dirname "$0")/../docs/eval-json.md" <<'PY' && ok "JSON keys = docs/eval-json.md; heads array; sampling reported; head selection consistent" || bad "JSON keys = docs/eval-json.md; heads array; sampling reported; head selection consistent"
import json, re, sys
d, doc = sys.argv[1], open(sys.argv[2]).read()
def keys(section):
    body = doc.split("## " + section, 1)[1].split("\n## ", 1)[0]
    return {m for m in re.findall(r"^\| `([a-z_0-9]+)` \|", body, re.M)}
method_keys, head_keys = keys("Method object"), keys("Head object")
assert len(method_keys) > 15 and len(head_keys) > 8, (method_keys, head_keys)
load = lambda n: [json.loads(l) for l in open(f"{d}/{n}")]   # every stdout line must parse
sampled, full, allrows, head1 = load("sampled.json"), load("full.json"), load("all.json"), load("head1.json")
for r in sampled + full + head1:
    assert set(r) == method_keys, set(r) ^ method_keys
    assert len(r["heads"]) == len(r["evaluated_heads"])
    for h in r["heads"]:
        assert set(h) == head_keys, set(h) ^ head_keys
for r in sampled:
    assert r["query_rows"] == 37 and r["query_row_rule"] == "stratified", r
    assert r["evaluated_heads"] == [0, 1] and [h["head"] for h in r["heads"]] == [0, 1]
    assert r["row_tv_rows"] == 3  # ceil(37 / 16)
    assert 0 < r["rel_l2"] < 0.5 and 0.9 < r["cosine"] <= 1
for r in full:
    assert r["query_rows"] == 256 and r["query_row_rule"] == "all"
# --query-rows >= Sq is the full run, number for number
strip = lambda rs: [{k: v for k, v in r.items() if k != "seconds"} for r in rs]
assert strip(full) == strip(allrows)
# a sampled run differs from the full one (it is not silently a full run)
assert all(a["rel_l2"] != b["rel_l2"] for a, b in zip(sampled, full))
# selecting head 1 gives the same numbers as head 1 of the two-head run, and its overall = its head entry
for one, both in zip(head1, sampled):
    assert one["evaluated_heads"] == [1]
    assert one["heads"][0] == both["heads"][1], (one["heads"][0], both["heads"][1])
    assert {k: one[k] for k in head_keys if k != "head"} == {k: v for k, v in one["heads"][0].items() if k != "head"}
# the table: its header names are JSON keys; per-head rows and an overall row
lines = open(f"{d}/table.txt").read().splitlines()
header = next(l for l in lines if l.startswith("method"))
assert set(header.split()) <= method_keys | {"head"}, header
rows = [l.split() for l in lines if l.startswith("sage2-8bit")]
assert [r[1] for r in rows] == ["0", "1", "all"], rows
assert any("37 of 256 query rows per head" in l for l in lines)
PY
fi

# ---- CLI errors (issue 14) ----
expect_err 2 "grid past the sequence limit" "2147483647" "$cli" eval --json --frames 1048575 --height 1048575 --width 1048575
expect_err 2 "frames past the limit" "2147483647" "$cli" eval --json --frames 4294967296
expect_err 2 "--npy with two files then --json" "needs three files" "$cli" eval --npy a.npy b.npy --json
expect_err 2 "--npy with two files at the end" "needs three files" "$cli" eval --json --npy a.npy b.npy
for g in "4,,8" "4,8" "4,8,8,2" "a,b,c" "0,8,8" "-4,8,8" "4,8,8x" "4,8,2000000"; do
    expect_err 2 "--grid '$g' refused" "three positive integers" "$cli" eval --json --quiet --grid "$g"
done
expect_err 2 "--cube '1,,2' refused" "three positive integers" "$cli" eval --json --quiet --cube 1,,2
for h in "1,1" "a" "3-1" "1," "-2"; do
    expect_err 2 "--heads '$h' refused" "distinct head indices" "$cli" eval --json --quiet --heads "$h"
done
expect_err 2 "--heads past the workload" "input has 2 heads" "$cli" eval --json --quiet --workload-heads 2 --heads 0,2 --frames 1 --height 8 --width 16
expect_err 2 "--query-rows 0 refused" "query-rows" "$cli" eval --json --quiet --query-rows 0

# ---- errors that name the cause and the fix (issue 29) ----
# every numeric option's error names its valid range
range_case() { # range_case <name> <range text> cmd...
    local name=$1 pat=$2; shift 2
    expect_err 2 "$name" "$pat" "$@"
}
range_case "--clusters 0: range" "--clusters wants a k-means cluster count in \[1, 65536\], got '0'" "$cli" eval --quiet --clusters 0
range_case "--clusters x: range" "in \[1, 65536\]" "$cli" eval --quiet --clusters x
range_case "--iterations 0: range" "--iterations wants .* in \[1, 1000\], got '0'" "$cli" eval --quiet --iterations 0
range_case "--tv-stride 0: range" "--tv-stride wants .* in \[1, 1073741824\]" "$cli" eval --quiet --tv-stride 0
range_case "--threads 100000: range" "--threads wants .* in \[0, 1024\], got '100000'" "$cli" eval --quiet --threads 100000
range_case "--threads -1: range" "in \[0, 1024\]" "$cli" eval --quiet --threads -1
range_case "--seed -1: range" "--seed wants an integer >= 0, got '-1'" "$cli" eval --quiet --seed -1
range_case "--scale 0: range" "--scale wants a finite number > 0" "$cli" eval --quiet --scale 0
range_case "--scale empty: range" "--scale wants a finite number > 0" "$cli" eval --quiet --scale ""
range_case "--head-dim x: values" "--head-dim wants 64 or 128" "$cli" eval --quiet --head-dim x
range_case "--workload-heads 0: range" "--workload-heads wants an integer in \[1, 2147483647\]" "$cli" eval --quiet --workload-heads 0
range_case "--frames 0: range" "--frames wants an integer in \[1, 2147483647\]" "$cli" eval --quiet --frames 0
range_case "--height x: range" "--height wants an integer in \[1, 2147483647\]" "$cli" eval --quiet --height x
range_case "--width 0: range" "--width wants an integer in \[1, 2147483647\]" "$cli" eval --quiet --width 0
range_case "--query-rows x: range" "--query-rows wants a row count in \[1, 2147483647\]" "$cli" eval --quiet --query-rows x
range_case "--grid 0,8,8: range" "in \[1, 1048576\]" "$cli" eval --quiet --grid 0,8,8
range_case "--cube 0,8,8: range" "in \[1, 1048576\]" "$cli" eval --quiet --cube 0,8,8
range_case "--heads -2: range" "in \[0, 1048576\]" "$cli" eval --quiet --heads -2
range_case "numerics --samples 3: range" "--samples wants .* in \[16, 100000000\], got '3'" "$cli" numerics --samples 3
range_case "workload --heads 0: range" "--heads wants an integer in \[1, 4096\]" "$cli" workload --preset video-9600 --heads 0 --out "$tmp/wl"
range_case "workload --frames 0: range" "--frames wants an integer in \[1, 100000\]" "$cli" workload --preset video-9600 --frames 0 --out "$tmp/wl"
range_case "workload --stats-rows 0: range" "--stats-rows wants an integer in \[1, 1000000\]" "$cli" workload --preset video-9600 --stats-rows 0 --no-write
range_case "workload --seed x: range" "--seed wants an integer >= 0" "$cli" workload --preset video-9600 --seed x --out "$tmp/wl"
# a stray word is an unexpected argument (not "an option without its value"), with the way to --help
expect_err 2 "eval extra-word: unexpected argument" "unexpected argument 'extra-word'" "$cli" eval extra-word
grep -q "needs a value" "$tmp/err" && bad "eval extra-word: no 'needs a value'" || ok "eval extra-word: no 'needs a value'"
grep -q "vcattn eval --help" "$tmp/err" && ok "eval extra-word: points at --help" || bad "eval extra-word: points at --help"
expect_err 2 "eval --quiet extra-word: unexpected argument" "unexpected argument 'extra-word'" "$cli" eval --quiet extra-word
expect_err 2 "eval --frobnicate: unknown option" "unknown option '--frobnicate'" "$cli" eval --frobnicate
expect_err 2 "eval --clusters at the end: needs a value" "option '--clusters' needs a value" "$cli" eval --quiet --clusters
expect_err 2 "numerics extra-word: unexpected argument" "unexpected argument 'extra-word'" "$cli" numerics extra-word
expect_err 2 "numerics --samples at the end: needs a value" "option '--samples' needs a value" "$cli" numerics --samples
expect_err 2 "workload extra-word: unexpected argument" "unexpected argument 'extra-word'" "$cli" workload --preset video-9600 extra-word
expect_err 2 "workload --out at the end: needs a value" "option '--out' needs a value" "$cli" workload --preset video-9600 --out
expect_err 2 "workload --frobnicate: unknown option" "unknown option '--frobnicate'" "$cli" workload --frobnicate
# a directory or a missing file as a .npy path: said so, not "read error in the preamble"
mkdir -p "$tmp/adir.npy"
expect_err 1 "a directory as --npy" "adir.npy: is a directory" "$cli" eval --quiet --npy "$tmp/adir.npy" "$tmp/adir.npy" "$tmp/adir.npy"
grep -q "preamble" "$tmp/err" && bad "a directory as --npy: no 'preamble'" || ok "a directory as --npy: no 'preamble'"
expect_err 1 "a missing --npy file" "none.npy: no such file (missing" "$cli" eval --quiet --npy "$tmp/none.npy" "$tmp/none.npy" "$tmp/none.npy"
# NaN / Inf in a captured tensor: the tensor (Q, K or V), its file and the element are named
if python3 -c "import numpy" 2>/dev/null; then
    python3 - "$tmp" <<'PY'
import sys, numpy as np
d = sys.argv[1]
rng = np.random.default_rng(29)
x = rng.standard_normal((1, 2, 128, 64)).astype(np.float32)
np.save(f"{d}/fin.npy", x)
kn = x.copy(); kn[0, 1, 17, 3] = np.nan; np.save(f"{d}/knan.npy", kn)
vi = x.copy(); vi[0, 0, 5, 0] = -np.inf; np.save(f"{d}/vinf.npy", vi.astype(np.float16))
PY
    expect_err 1 "NaN in K named" "K (.*knan.npy) has NaN at element (0, 1, 17, 3)" "$cli" eval --quiet --npy "$tmp/fin.npy" "$tmp/knan.npy" "$tmp/fin.npy"
    expect_err 1 "-Inf in V named" "V (.*vinf.npy) has -Inf at element (0, 0, 5, 0)" "$cli" eval --quiet --npy "$tmp/fin.npy" "$tmp/fin.npy" "$tmp/vinf.npy"
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
