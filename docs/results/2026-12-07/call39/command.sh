#!/usr/bin/env bash
# call 39: per-head fidelity of the default through vcattn.Plan(seed=s), seeds 0-3, over sage2-8bit
# (device_check.sh heads) with main's build (.pre/main.tgz: the tensor-core merge and the key order in
# three kernels) - the re-check the merge's changed sums call for
set -u
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-out}; mkdir -p $OUT; OUT=$(cd $OUT && pwd)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p /tmp/pre && tar -xzf .pre/main.tgz -C /tmp/pre
OUT=$OUT/dc VC_PREBUILT=/tmp/pre timeout 500 bash scripts/device_check.sh heads > $OUT/heads_stage.txt 2>&1; echo "heads rc $?"
grep -E "layer|rc=" $OUT/heads_stage.txt | grep -E "policy|rc=" | cut -c1-200
