#!/usr/bin/env bash
# The k-means pass against the memory ceiling (run on the device): the read bandwidth of a
# plain streaming pass over V's bytes (dev/cuda/readbw.cu), then an ncu profile of one cold
# grouping call at Wan 720p with per-instruction stall samples, as text under $OUT:
#   dev/profile_kmeans.sh DIR_WITH_KMEANS_BENCH [B H S D]
set -u
BIN=$1/kmeans_bench; [ -x "$BIN" ] || BIN=$1/kmeans_check   # a build from before the check/bench split
B=${2:-1}; H=${3:-40}; S=${4:-75600}; D=${5:-128}
OUT=${OUT:-out}; mkdir -p "$OUT"
export PATH=$PATH:/usr/local/cuda/bin
MB=$(( B * H * S * D * 2 / 1048576 ))
[ -n "${KM_SKIP_READBW:-}" ] || { nvcc -O3 -gencode=arch=compute_90a,code=sm_90a dev/cuda/readbw.cu -o "$OUT/readbw" && "$OUT/readbw" $MB | tee "$OUT/readbw.txt"; }
KM_NO_ATTENTION=1 "$BIN" bench $B $H $S $D | tee "$OUT/bench.txt"
KM_NO_ATTENTION=1 ncu --set full --clock-control none --import-source yes -k regex:'vc_km_fused|km2_main' -c 1 -f -o "$OUT/km" \
    "$BIN" bench $B $H $S $D > "$OUT/ncu_run.txt" 2>&1
tail -3 "$OUT/ncu_run.txt"
ncu -i "$OUT/km.ncu-rep" --page details > "$OUT/details.txt" 2>&1
ncu -i "$OUT/km.ncu-rep" --page source --csv --print-source sass > "$OUT/source_sass.csv" 2>&1
rm -f "$OUT/km.ncu-rep" "$OUT/readbw"
grep -E "Duration|DRAM Throughput|Memory Throughput|Issue Slots Busy|Warp Cycles Per Issued|No Eligible|Active Warps|L2 Hit" "$OUT/details.txt" | head -30
