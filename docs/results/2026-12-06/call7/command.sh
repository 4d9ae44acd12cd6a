#!/usr/bin/env bash
# call 3: diag 2 without bank conflicts; HunyuanVideo-1.5's joint mask outside the kernel (build and
# read, issue 32) and its real-size block through enable() with the new mask read
set -u
export PATH=$PATH:/usr/local/cuda/bin
mkdir -p /tmp/pre && tar -xzf .pre/bin.tgz -C /tmp/pre
OUT=${OUT:-out}; mkdir -p $OUT
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
el "== diag"
for rep in 1 2; do for s in "1 40 75600 75600 128" "1 48 17550 17550 64"; do for b in gpu_bench gpu_bench_diag2; do
  echo "## $b $s" >> $OUT/diag.txt
  VC_BENCH_METHODS=vsmooth-split-blockmax-8bit,sage2-8bit timeout 60 /tmp/pre/$b bench $s 5 >> $OUT/diag.txt 2>&1
done; done; done
grep -E "^##|BENCH" $OUT/diag.txt | awk '/^##/{h=$2" "$4; next} {print h, $2, $3, $9, $10}'
el "== mask read"
VCATTN_LIBRARY=/tmp/pre/libvcattn.so PYTHONPATH=python timeout 200 python3 tests/gpu/mask_read.py --device cuda --json $OUT/mask_read.json > $OUT/mask_read.txt 2>&1; echo "rc $?"; tail -12 $OUT/mask_read.txt
el "== hunyuanvideo15 block"
VCATTN_LIBRARY=/tmp/pre/libvcattn.so PYTHONPATH=python:pydeps timeout 250 python3 tests/gpu/block_compile.py --model hunyuanvideo15 --reps 5 --json $OUT/block_compile_hunyuanvideo15.json > $OUT/compile_hunyuanvideo15.txt 2>&1; echo "rc $?"; tail -5 $OUT/compile_hunyuanvideo15.txt
el end
