#!/usr/bin/env bash
# call 2: the diagnostic (tensor cores alone / softmax alone, the latter fixed) at Wan 720p and
# CogVideoX-5B; every method and the three peers re-timed at every shape (device_check.sh bench)
set -u
export PATH=$PATH:/usr/local/cuda/bin
mkdir -p /tmp/pre && tar -xzf .pre/bin.tgz -C /tmp/pre
OUT=${OUT:-out}; mkdir -p $OUT
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
el "== diag"
for rep in 1 2; do for s in "1 40 75600 75600 128" "1 48 17550 17550 64"; do for b in gpu_bench gpu_bench_diag1 gpu_bench_diag2; do
  echo "## $b $s" >> $OUT/diag.txt
  VC_BENCH_METHODS=vsmooth-split-blockmax-8bit,sage2-8bit timeout 60 /tmp/pre/$b bench $s 5 >> $OUT/diag.txt 2>&1
done; done; done
grep -E "^##|BENCH" $OUT/diag.txt | awk '/^##/{h=$2" "$4; next} {print h, $2, $3, $9, $10}'
el "== bench (device_check.sh)"
OUT=$OUT/bench VC_PREBUILT=/tmp/pre timeout 480 bash scripts/device_check.sh bench > $OUT/bench_stage.txt 2>&1; echo "bench rc $?"
tail -14 $OUT/bench_stage.txt
el end
