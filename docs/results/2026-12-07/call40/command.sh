#!/usr/bin/env bash
# call 40: where the video-like masked call's extra time goes (dev/profile_call.py --inputs, kernel by
# kernel: call 38 had it 4 ms over randn's), then what measuring the head recipes costs now
# (device_check.sh policy) - main's build (.pre/main.tgz); outputs packed in one tarball
set -u
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-out}; mkdir -p $OUT; OUT=$(cd $OUT && pwd); W=/tmp/call40; mkdir -p $W
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $W/gpu.txt
mkdir -p /tmp/pre && tar -xzf .pre/main.tgz -C /tmp/pre
timeout 60 /tmp/pre/vcattn workload --preset video-long-hunyuan720p --heads 16 --frames 32 --out /tmp/hy --quiet; el "workload rc $?"
VCATTN_LIBRARY=/tmp/pre/libvcattn.so PYTHONPATH=python timeout 150 python3 dev/profile_call.py --reps 3 --inputs /tmp/hy \
    --json $W/profile_video.json > $W/profile_video.txt 2>&1; el "profile rc $?"; grep -v Warn $W/profile_video.txt | cut -c1-150 | head -70
rm -rf /tmp/hy
OUT=$W/policy VC_PREBUILT=/tmp/pre timeout 200 bash scripts/device_check.sh policy > $W/policy_stage.txt 2>&1; el "policy rc $?"
grep -E "^== |measuring" $W/policy_stage.txt | cut -c1-330
tar -czf $OUT/call40.tgz -C $W .
el end
