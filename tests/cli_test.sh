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

expect_rc 0 "--help exits 0" "$cli" --help
grep -q "eval" "$tmp/out" && ok "--help lists eval" || bad "--help lists eval"
expect_rc 0 "eval --help exits 0" "$cli" eval --help
grep -q -- "--npy" "$tmp/out" && ok "eval --help documents --npy" || bad "eval --help documents --npy"
expect_rc 2 "no command exits 2" "$cli"
expect_rc 2 "unknown command exits 2" "$cli" frobnicate
expect_rc 2 "unknown method exits 2" "$cli" eval --methods sage9 --quiet
expect_rc 2 "bad size exits 2" "$cli" eval --heads 0 --quiet
expect_rc 2 "missing value exits 2" "$cli" eval --clusters
expect_rc 1 "unsupported head dim exits 1" "$cli" eval --head-dim 96 --frames 1 --height 4 --width 64 --quiet
grep -q "head dimension" "$tmp/err" && ok "head-dim error says why" || bad "head-dim error says why"

# numerics: the ExpCast facts
expect_rc 0 "numerics --json" "$cli" numerics --json --samples 20000
for key in agree_share max_code_diff ratio_min ratio_max row_tv_bound; do
    grep -q "\"$key\"" "$tmp/out" && ok "numerics key $key" || bad "numerics key $key"
done

# eval on a small built-in workload: one JSON object per method
expect_rc 0 "eval --json small workload" "$cli" eval --json --quiet --heads 1 --frames 2 --height 8 --width 16 --clusters 4
[ "$(wc -l <"$tmp/out")" -eq 7 ] && ok "seven methods, one line each" || bad "seven methods, one line each"
for key in method rel_l2 cosine psnr_db value_error_share block_energy_share_sequence block_energy_share_cube block_energy_share_clustered; do
    [ "$(grep -c "\"$key\"" "$tmp/out")" -eq 7 ] && ok "eval key $key" || bad "eval key $key"
done
if command -v python3 >/dev/null && python3 -c "import json,sys" 2>/dev/null; then
    python3 - "$tmp/out" <<'PY' && ok "eval JSON parses, values sane" || bad "eval JSON parses, values sane"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert {r["method"] for r in rows} == {"fp8-naive", "sage2-8bit", "vsmooth-8bit", "vsmooth-expcast-8bit", "sage3-4bit", "vsmooth-4bit", "vsmooth-expcast-tail-8bit"}
for r in rows:
    assert 0 < r["rel_l2"] < 0.5 and 0.9 < r["cosine"] <= 1 and r["psnr_db"] > 10, r
    assert 0 <= r["value_error_share"] <= 1, r
PY
fi
expect_rc 0 "eval table with --methods" "$cli" eval --quiet --heads 1 --frames 2 --height 8 --width 16 --methods sage2-8bit,vsmooth-8bit
grep -q "vsmooth-8bit" "$tmp/out" && ! grep -q "fp8-naive" "$tmp/out" && ok "--methods selects" || bad "--methods selects"

# .npy input, when numpy is there to write it
if python3 -c "import numpy" 2>/dev/null; then
    python3 - "$tmp" <<'PY'
import sys, numpy as np
d = sys.argv[1]
rng = np.random.default_rng()
q, k, v = (rng.standard_normal((1, 2, 256, 64)).astype(np.float32) for _ in range(3))
np.save(f"{d}/q.npy", q); np.save(f"{d}/k.npy", k.astype(np.float16)); np.save(f"{d}/v.npy", v)
# bfloat16 stored as uint16: the top half of float32
np.save(f"{d}/vb.npy", (v.view(np.uint32) >> 16).astype("<u2"))
np.save(f"{d}/bad3d.npy", q[0])
np.save(f"{d}/short.npy", q[:, :, :100])
PY
    expect_rc 0 "eval --npy f32/f16" "$cli" eval --json --quiet --npy "$tmp/q.npy" "$tmp/k.npy" "$tmp/v.npy" --clusters 2
    grep -q '"shape": \[1, 2, 256, 64\]' "$tmp/out" && ok "npy shape reported" || bad "npy shape reported"
    # no --grid: the cube order is not measured, and says so as JSON null
    python3 -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; assert all(x['block_energy_share_cube'] is None and x['block_energy_share_clustered'] >= 0 for x in r)" "$tmp/out" \
        && ok "unmeasured cube share is null" || bad "unmeasured cube share is null"
    expect_rc 0 "eval --npy bfloat16 V with --grid" "$cli" eval --json --quiet --npy "$tmp/q.npy" "$tmp/k.npy" "$tmp/vb.npy" --grid 4,8,8 --cube 1,4,8 --clusters 2 --methods vsmooth-8bit
    expect_rc 1 "3-D npy rejected" "$cli" eval --quiet --npy "$tmp/bad3d.npy" "$tmp/k.npy" "$tmp/v.npy"
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

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
