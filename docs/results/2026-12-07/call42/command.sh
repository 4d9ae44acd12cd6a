#!/usr/bin/env bash
# call 42 (built 2026-12-07 from 20:06, not run: no device was lent that session): main with the
# floor policy's two-standard-error rule (.pre/main.tgz = main's build), every stage while time is
# left:
#  1. the Python GPU tests (the GPU measurement's standard errors against the C definition);
#  2. per-head fidelity over k-means seeds 0-3 on the held-out-style inputs (device_check.sh
#     heads): every head must stay above sage2-8bit, the video layers' recipes unchanged, randn's
#     split heads above sage2-8bit on every row;
#  3. the masked HunyuanVideo-1.5-shaped call on randn in turn (the default now keeps the split on
#     some heads: its speed against cuDNN BF16 on the valid tokens);
#  4. the measuring cost (device_check.sh policy).
set -u
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-out}; mkdir -p $OUT; OUT=$(cd $OUT && pwd)
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
left() { echo $(( ${VC_LIMIT:-570} - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p /tmp/pre && tar -xzf .pre/main.tgz -C /tmp/pre
VCATTN_LIBRARY=/tmp/pre/libvcattn.so PYTHONPATH=python timeout 150 python3 -m pytest -q python/tests/test_gpu.py \
    python/tests/test_plan.py python/tests/test_torch.py > $OUT/pytest_gpu.txt 2>&1; el "pytest rc $?"; tail -2 $OUT/pytest_gpu.txt
[ $(left) -gt 150 ] && { OUT=$OUT/dc VC_PREBUILT=/tmp/pre timeout 300 bash scripts/device_check.sh heads \
    > $OUT/heads_stage.txt 2>&1; el "heads rc $?"; grep -E "policy|rc=" $OUT/heads_stage.txt | cut -c1-200; }
[ $(left) -gt 100 ] && { VCATTN_LIBRARY=/tmp/pre/libvcattn.so PYTHONPATH=python timeout 120 python3 dev/profile_call.py \
    --no-profile --rounds 3 --json $OUT/rounds.json > $OUT/rounds.txt 2>&1; el "rounds rc $?"; tail -7 $OUT/rounds.txt | cut -c1-220; }
[ $(left) -gt 60 ] && { OUT=$OUT/policy VC_PREBUILT=/tmp/pre timeout $(( $(left) - 5 )) bash scripts/device_check.sh policy \
    > $OUT/policy_stage.txt 2>&1; el "policy rc $?"; grep -E "measuring" $OUT/policy_stage.txt | cut -c1-260; }
el end
