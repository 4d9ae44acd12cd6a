#!/usr/bin/env bash
# call 29: where the masked call's time goes beyond its attention kernel (issue 32: 1.59x through
# the mask against the kernel's 1.77x at HunyuanVideo 720p, H100): dev/profile_call.py kernel by
# kernel, then the kernel alone at the masked call's valid shape and at HunyuanVideo 720p with
# the peers in the same run, and with every head on the exact P (what the default plan picks on randn).
set -u
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-out}; mkdir -p $OUT
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p /tmp/pre && tar -xzf .pre/main.tgz -C /tmp/pre
el "== profile"
VCATTN_LIBRARY=/tmp/pre/libvcattn.so PYTHONPATH=python timeout 200 python3 dev/profile_call.py \
    --json $OUT/profile_call.json > $OUT/profile_call.txt 2>&1; echo "profile rc $?"; cut -c1-150 $OUT/profile_call.txt | head -60
left=$(( ${VC_LIMIT:-570} - ($(date +%s) - T0) ))
[ $left -gt 90 ] || { el "no time left for the bench"; exit 0; }
el "== bench"
VC_BENCH_SHAPES="${VC_BENCH_SHAPES:-1,16,112300,112300,128 1,24,118800,118800,128}" VC_BENCH_METHODS=vsmooth-split-blockmax-8bit,sage2-8bit \
    VC_BENCH_EXACT_HEADS="${VC_BENCH_EXACT_HEADS:-16}" OUT=$OUT/bench VC_PREBUILT=/tmp/pre timeout $left bash scripts/device_check.sh bench > $OUT/bench_stage.txt 2>&1
echo "bench rc $?"; sed -n '/== summary/,$p' $OUT/bench_stage.txt | cut -c1-200; grep -E "SDPA cudnn|BENCH|FP8|sage|exact" $OUT/bench/bench.txt 2>/dev/null | cut -c1-160 | head -30
el end
