#!/usr/bin/env bash
# call 4: per-head fidelity of the default over k-means seeds (issue 28, the shipped build with the
# exact keys' streamed merge) and the Python package's tests on CUDA (the head_dim 64 kernel included)
set -u
export PATH=$PATH:/usr/local/cuda/bin
mkdir -p /tmp/pre && tar -xzf .pre/bin.tgz -C /tmp/pre
OUT=${OUT:-out}; mkdir -p $OUT
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
el "== heads + python"
OUT=$OUT/dc VC_PREBUILT=/tmp/pre timeout 560 bash scripts/device_check.sh heads,python > $OUT/stages.txt 2>&1; echo "rc $?"
grep -E "^==|layer|passed|failed" $OUT/stages.txt | tail -40
el end
