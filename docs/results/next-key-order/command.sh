#!/usr/bin/env bash
# The exact keys' order in three wide kernels (branch key-order-parallel), on the device:
# gpu_check prepcheck (the GPU key order against the CPU's, bit for bit, 11 shapes incl. 9,000 keys)
# and check, memcheck + racecheck of gpu_check small, then the preprocessing's time against
# main's build (.pre/main.tgz = main's build, .pre/tree.tgz = this branch's)
set -u
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-out}; mkdir -p $OUT; OUT=$(cd $OUT && pwd)
mkdir -p /tmp/pre /tmp/tree && tar -xzf .pre/main.tgz -C /tmp/pre && tar -xzf .pre/tree.tgz -C /tmp/tree
timeout 100 /tmp/tree/gpu_check prepcheck > $OUT/prepcheck.txt 2>&1; echo "prepcheck rc $?"; tail -1 $OUT/prepcheck.txt
timeout 100 /tmp/tree/gpu_check check > $OUT/check.txt 2>&1; echo "check rc $?"; grep -E ": [0-9]+ failed" $OUT/check.txt
for tool in memcheck racecheck; do timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 /tmp/tree/gpu_check small > $OUT/san_$tool.txt 2>&1
  echo "$tool rc $?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $OUT/san_$tool.txt | tail -1; done
for r in 1 2; do for s in "1 40 75600 75600 128" "1 4 75600 75600 128" "1 16 112300 112300 128"; do for v in pre tree; do
  VC_BENCH_METHODS=vsmooth-split-blockmax-8bit timeout 60 /tmp/$v/gpu_bench bench $s 5 2>&1 | grep BENCH | sed "s|^|[$v r$r] |" >> $OUT/ab.txt
done; done; done
cut -c1-175 $OUT/ab.txt
