#!/usr/bin/env bash
# call 22: issue 31's S-first turn (VC_ATT_S_FIRST=1: S_kb issued before P_{kb-1} V_{kb-1}, the softmax's
# values under the warpgroup's own P V) against the kernel as it ships (base: .pre/main.tgz) and the
# softmax split in two halves with the old order (refac): gpu_check check of each (the output hashes
# must agree), A/B timing alternated in rounds, cuDNN BF16 (SDPA) once; then racecheck and synccheck
# of the S-first build; on an H200, with the time left, HunyuanVideo-1.5's padded joint attention
# (tests/gpu/masked_bench.py, main's library from .pre-main/lib.tgz).
# .pre/ab.tgz: refac/ and sfirst/ (gpu_bench, gpu_check).
set -u
export PATH=$PATH:/usr/local/cuda/bin
mkdir -p /tmp/v/base && tar -xzf .pre/main.tgz -C /tmp/v/base && tar -xzf .pre/ab.tgz -C /tmp/v
OUT=${OUT:-out}; mkdir -p $OUT
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
for v in base refac sfirst; do
  el "== check $v"
  timeout 100 /tmp/v/$v/gpu_check check > $OUT/check_$v.txt 2>&1; echo "check $v rc $?"; grep -cE "^ok" $OUT/check_$v.txt; grep -E "FAIL|failed" $OUT/check_$v.txt | head -5
  sed -nE 's/^\S+ +(\([0-9,]+\)) +(\S+) .*out ([0-9a-f]{16}).*/\1 \2 \3/p' $OUT/check_$v.txt > $OUT/hash_$v.txt
done
for v in refac sfirst; do cmp -s $OUT/hash_base.txt $OUT/hash_$v.txt && echo "hashes $v = base ($(wc -l < $OUT/hash_base.txt))" || { echo "hashes $v DIFFER"; diff $OUT/hash_base.txt $OUT/hash_$v.txt | head -6; }; done
el "== cuDNN BF16 (SDPA)"
timeout 100 python3 tests/gpu/bench_sdpa.py 1,40,75600,75600,128 1,40,8192,8192,128 1,48,17550,17550,64 > $OUT/sdpa.txt 2>&1; grep -iE "sdpa|cudnn" $OUT/sdpa.txt | head -6
el "== A/B, rounds alternated"
for r in 1 2; do for s in "1 40 75600 75600 128" "1 40 8192 8192 128" "1 48 17550 17550 64"; do for v in base refac sfirst; do
  VC_BENCH_METHODS=vsmooth-split-blockmax-8bit,sage2-8bit timeout 60 /tmp/v/$v/gpu_bench bench $s 5 2>&1 | grep BENCH | sed "s|^|[$v r$r] |" >> $OUT/ab.txt
done; done; done
sed -E 's/full .* kernel/kernel/; s/ \(.{3,5} TFLOP.s\) prep.*//' $OUT/ab.txt
name=$(head -1 $OUT/gpu.txt)
if [[ $name == *H200* ]] && [ -f .pre-main/lib.tgz ]; then
  left=$(( 560 - ($(date +%s) - T0) ))
  if [ $left -gt 120 ]; then
    el "== masked joint attention (main's library; limit ${left}s)"
    mkdir -p /tmp/pre_main $OUT/masked && tar -xzf .pre-main/lib.tgz -C /tmp/pre_main
    VCATTN_LIBRARY=/tmp/pre_main/libvcattn.so PYTHONPATH=python timeout $left python3 tests/gpu/masked_bench.py \
        --json $OUT/masked/masked_bench.json > $OUT/masked/masked.txt 2>&1; echo "masked rc $?"; tail -12 $OUT/masked/masked.txt
  fi
fi
for tool in racecheck synccheck; do
  left=$(( 540 - ($(date +%s) - T0) )); [ $left -gt 40 ] || break
  el "== $tool small (sfirst; limit ${left}s)"
  timeout $left compute-sanitizer --tool $tool --error-exitcode 3 /tmp/v/sfirst/gpu_check small > $OUT/san_$tool.txt 2>&1; echo "$tool rc $?"; tail -2 $OUT/san_$tool.txt
done
el end
