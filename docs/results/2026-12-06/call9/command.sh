#!/usr/bin/env bash
# call 1 (H200): gpu_check check; three consumer warpgroups at head_dim 64 (A/B, every method);
# every method and the three peers at every shape (device_check.sh bench)
set -u
export PATH=$PATH:/usr/local/cuda/bin
mkdir -p /tmp/pre && tar -xzf .pre/bin.tgz -C /tmp/pre
OUT=${OUT:-out}; mkdir -p $OUT
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
el "== check"
timeout 120 /tmp/pre/gpu_check check > $OUT/check.txt 2>&1; echo "check rc $?"; grep -c " ok" $OUT/check.txt; grep -i -E "fail|mismatch" $OUT/check.txt | head
el "== three warpgroups at head_dim 64"
for rep in 1 2; do for s in "1 48 17550 17550 64" "1 24 32760 32760 64"; do for b in gpu_bench gpu_bench_nc3; do
  echo "## $b $s" >> $OUT/ab.txt
  timeout 60 /tmp/pre/$b bench $s 5 >> $OUT/ab.txt 2>&1
done; done; done
grep -E "^##|BENCH" $OUT/ab.txt | awk '/^##/{h=$2" "$4; next} {print h, $2, $3, $9, $10}'
el "== bench (device_check.sh)"
OUT=$OUT/bench VC_PREBUILT=/tmp/pre timeout 450 bash scripts/device_check.sh bench > $OUT/bench_stage.txt 2>&1; echo "bench rc $?"
tail -16 $OUT/bench_stage.txt
el end
