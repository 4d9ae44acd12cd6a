#!/usr/bin/env bash
# call 28: the H200 targets only (on another card it stops at once): HunyuanVideo-1.5's padded
# joint attention against cuDNN BF16 on the valid keys and the masked SDPA the model runs
# (tests/gpu/masked_bench.py, issue 32's 1.7x), then the kernel alone at Wan 720p with
# cuDNN BF16, SageAttention2 and cuDNN FP8 in the same run
# (device_check.sh bench, issue 28's 1.74x; VC_BENCH_SHAPES overrides Wan 720p, VC_LIMIT the seconds).  .pre/main.tgz: main's build (a6ec771's sources).
set -u
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-out}; mkdir -p $OUT
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
[[ $(head -1 $OUT/gpu.txt) == *H200* ]] || { echo "not an H200: nothing to do"; exit 0; }
mkdir -p /tmp/pre && tar -xzf .pre/main.tgz -C /tmp/pre
el "== masked"
mkdir -p $OUT/masked
VCATTN_LIBRARY=/tmp/pre/libvcattn.so PYTHONPATH=python timeout 220 python3 tests/gpu/masked_bench.py \
    --json $OUT/masked/masked_bench.json > $OUT/masked/masked.txt 2>&1; echo "masked rc $?"; tail -14 $OUT/masked/masked.txt
left=$(( ${VC_LIMIT:-570} - ($(date +%s) - T0) ))
[ $left -gt 90 ] || { el "no time left for the bench"; exit 0; }
el "== bench"
VC_BENCH_SHAPES="${VC_BENCH_SHAPES:-1,40,75600,75600,128}" VC_BENCH_METHODS=vsmooth-split-blockmax-8bit,sage2-8bit \
    OUT=$OUT/bench VC_PREBUILT=/tmp/pre timeout $left bash scripts/device_check.sh bench > $OUT/bench_stage.txt 2>&1
echo "bench rc $?"; sed -n '/== summary/,$p' $OUT/bench_stage.txt | cut -c1-200; grep -E "SDPA cudnn|BENCH|FP8|sage" $OUT/bench/bench.txt 2>/dev/null | cut -c1-160 | head -20
el end
