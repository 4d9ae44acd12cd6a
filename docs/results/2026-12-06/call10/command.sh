#!/usr/bin/env bash
# call 2: HunyuanVideo-1.5's padded joint attention (device_check.sh masked) and per-head fidelity
# over k-means seeds 0-3 (device_check.sh heads)
set -u
export PATH=$PATH:/usr/local/cuda/bin
mkdir -p /tmp/pre && tar -xzf .pre/bin.tgz -C /tmp/pre
OUT=${OUT:-out}; mkdir -p $OUT
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
el "== masked"
OUT=$OUT/masked VC_PREBUILT=/tmp/pre timeout 240 bash scripts/device_check.sh masked > $OUT/masked_stage.txt 2>&1; echo "masked rc $?"
grep -E "x cuDNN|ms|rc" $OUT/masked_stage.txt | tail -14
el "== heads"
OUT=$OUT/dc VC_PREBUILT=/tmp/pre timeout 330 bash scripts/device_check.sh heads > $OUT/heads_stage.txt 2>&1; echo "heads rc $?"
grep -E "layer|worst|rc" $OUT/heads_stage.txt | tail -30
el end
