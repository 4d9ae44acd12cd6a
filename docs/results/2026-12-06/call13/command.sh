#!/usr/bin/env bash
# call 13: the exact keys merged in the attention kernel's epilogue from shared memory (new) against the build with
# the merge kernel behind it (gpu_bench_old): gpu_check check, sanitizers (small, lengths), the
# A/B at four shapes, Python on CUDA tensors
set -u
export PATH=$PATH:/usr/local/cuda/bin
mkdir -p /tmp/pre && tar -xzf .pre/bin.tgz -C /tmp/pre
OUT=${OUT:-out}; mkdir -p $OUT
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
el "== check"
timeout 120 /tmp/pre/gpu_check check > $OUT/check.txt 2>&1; echo "check rc $?"; grep -E "failed|FAIL" $OUT/check.txt | head -20
el "== A/B"
export VC_BENCH_METHODS=vsmooth-split-blockmax-8bit,vsmooth-blockmax-8bit,sage2-8bit
for rep in 1 2; do for s in "1 40 75600 75600 128" "1 40 75600 512 128" "1 48 17550 17550 64" "1 40 8192 8192 128"; do for b in gpu_bench_old gpu_bench; do
  echo "## $b $s" >> $OUT/ab.txt
  timeout 60 /tmp/pre/$b bench $s 5 >> $OUT/ab.txt 2>&1
done; done; done
unset VC_BENCH_METHODS
grep -E "^##|BENCH" $OUT/ab.txt | awk '/^##/{h=$2; next} {print h, $2, $3, $5, $9}'
el "== sanitize"
OUT=$OUT/san VC_PREBUILT=/tmp/pre VC_SANITIZE="small lengths" timeout 260 bash scripts/device_check.sh sanitize > $OUT/sanitize_stage.txt 2>&1; echo "sanitize rc $?"
grep -E "exit|ERROR SUMMARY" $OUT/sanitize_stage.txt | head -12
el "== python"
OUT=$OUT/py VC_PREBUILT=/tmp/pre timeout 200 bash scripts/device_check.sh python > $OUT/python_stage.txt 2>&1; echo "python rc $?"
grep -E "passed|failed|Error" $OUT/python_stage.txt | tail -5
el end
