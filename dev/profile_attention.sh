#!/usr/bin/env bash
# ncu profile of one attention launch with per-instruction stall samples,
# written as text under $OUT (run on the device):
#   [VC_PROF_MODE=6] [VC_BENCH_METHODS=name] dev/profile_attention.sh DIR_WITH_GPU_BENCH [B H S]
# VC_PROF_MODE: the kernel's MODE template argument (VC_MODE_* in src/cuda/gpu_common.cuh;
# default 2, plain ExpCast); the fast (non-DIRECT) kernel is profiled.
set -u
BIN=$1/gpu_bench; [ -x "$BIN" ] || BIN=$1/gpu_test   # a build from before the check/bench split
B=${2:-1}; H=${3:-8}; S=${4:-32760}
OUT=${OUT:-out}; mkdir -p "$OUT"
ncu --set full --import-source no --kernel-name-base mangled -k regex:"vc_attention_kernelILi${VC_PROF_MODE:-2}E.*Lb0E" -c 1 -f -o "$OUT/prof" \
    "$BIN" bench $B $H $S $S 128 1 > "$OUT/ncu_run.txt" 2>&1
tail -3 "$OUT/ncu_run.txt"
ncu -i "$OUT/prof.ncu-rep" --page details > "$OUT/details.txt" 2>&1
ncu -i "$OUT/prof.ncu-rep" --page source --csv --print-source sass > "$OUT/source_sass.csv" 2>&1 ||
    ncu -i "$OUT/prof.ncu-rep" --page source --csv > "$OUT/source_sass.csv" 2>&1
wc -l "$OUT"/*.txt "$OUT"/*.csv
grep -E "Duration|Issue Slots Busy|Executed Ipc Active|Tensor|Warp Cycles Per Issued|No Eligible|Active Warps" "$OUT/details.txt" | head -30
