#!/usr/bin/env bash
# call 37: the exact keys' order in three wide kernels (branch key-order-parallel, .pre/tree.tgz) on the
# device: gpu_check prepcheck (the GPU's key order against the CPU's, bit for bit) and check, memcheck +
# racecheck of gpu_check small, the full call and its preprocessing against main's build (.pre/main.tgz)
# alternated over two rounds; then, time allowing, call 36 (the masked call in turn, main's build)
set -u
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-out}; mkdir -p $OUT; OUT=$(cd $OUT && pwd)
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p /tmp/pre /tmp/tree && tar -xzf .pre/main.tgz -C /tmp/pre && tar -xzf .pre/tree.tgz -C /tmp/tree
timeout 100 /tmp/tree/gpu_check prepcheck > $OUT/prepcheck.txt 2>&1; el "prepcheck rc $?"; tail -1 $OUT/prepcheck.txt
timeout 120 /tmp/tree/gpu_check check > $OUT/check.txt 2>&1; el "check rc $?"; grep -E ": [0-9]+ failed" $OUT/check.txt
for tool in memcheck racecheck; do timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 /tmp/tree/gpu_check small > $OUT/san_$tool.txt 2>&1
  el "$tool rc $?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $OUT/san_$tool.txt | tail -1; done
for r in 1 2; do for s in "1 4 75600 75600 128" "1 16 112300 112300 128" "1 40 75600 75600 128"; do for v in pre tree; do
  VC_BENCH_METHODS=vsmooth-split-blockmax-8bit timeout 60 /tmp/$v/gpu_bench bench $s 5 2>&1 | grep BENCH | sed "s|^|[$v r$r] |" >> $OUT/ab.txt
done; done; done
el "ab done"; cut -c1-175 $OUT/ab.txt
left=$(( 560 - ($(date +%s) - T0) ))
[ $left -gt 120 ] || { el "no time left for the masked rounds"; exit 0; }
VCATTN_LIBRARY=/tmp/pre/libvcattn.so PYTHONPATH=python timeout $left python3 dev/profile_call.py --no-profile --rounds 5 \
    --json $OUT/rounds.json > $OUT/rounds.txt 2>&1; el "rounds rc $?"; tail -8 $OUT/rounds.txt | cut -c1-220
