#!/usr/bin/env bash
# call 4: the product build again (the epilogue merge reverted): gpu_check check (its hashes
# against call 9's), then one Wan2.2-shaped denoising step end to end (device_check.sh e2e)
set -u
export PATH=$PATH:/usr/local/cuda/bin
mkdir -p /tmp/pre && tar -xzf .pre/bin.tgz -C /tmp/pre
OUT=${OUT:-out}; mkdir -p $OUT
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
el "== check"
timeout 120 /tmp/pre/gpu_check check > $OUT/check.txt 2>&1; echo "check rc $?"; grep -E "failed" $OUT/check.txt | head
el "== e2e"
OUT=$OUT/e2e VC_PREBUILT=/tmp/pre timeout 420 bash scripts/device_check.sh e2e > $OUT/e2e_stage.txt 2>&1; echo "e2e rc $?"
tail -15 $OUT/e2e_stage.txt
el end
