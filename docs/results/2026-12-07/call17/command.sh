#!/usr/bin/env bash
# call 17: the policy's reference rows with each 64-key block's P V summed from zero in the tensor
# core (then into O by FFMA), K's and V's fragments by ldmatrix, more key splits (about four
# waves), the hi and lo parts in accumulators of their own; the measurement's runs on side
# streams (the exact-P pair ahead of need on layers of few heads): gpu_check reference, its sanitizers, the policy tests, what measuring costs
# (the working tree's library, built here)
set -u
export PATH=$PATH:/usr/local/cuda/bin
mkdir -p /tmp/pre_main && tar -xzf .pre/main.tgz -C /tmp/pre_main
OUT=${OUT:-out}; mkdir -p $OUT
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
el "== reference rows"
timeout 120 /tmp/pre_main/gpu_check reference > $OUT/reference.txt 2>&1; echo "reference rc $?"; tail -7 $OUT/reference.txt
el "== policy tests"
VCATTN_LIBRARY=/tmp/pre_main/libvcattn.so PYTHONPATH=python timeout 150 python3 -m pytest -q python/tests/test_gpu.py -k "policy or reference" 2>&1 | tail -3
el "== policy cost"
OUT=$OUT/policy VC_PREBUILT=/tmp/pre_main timeout 200 bash scripts/device_check.sh policy > $OUT/policy_stage.txt 2>&1; echo "policy rc $?"
grep "^== video\|^== wan" $OUT/policy_stage.txt | cut -c1-420
el "== sanitize the reference rows"
for tool in memcheck; do timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 /tmp/pre_main/gpu_check reference > $OUT/san_ref_$tool.txt 2>&1; echo "$tool rc $?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|reference:" $OUT/san_ref_$tool.txt | tail -2; done
el "== k-means (the mma helper it shares is no longer volatile)"
timeout 60 /tmp/pre_main/kmeans_check check > $OUT/kmeans_check.txt 2>&1; echo "kmeans rc $?"; tail -3 $OUT/kmeans_check.txt
el end
