#!/usr/bin/env bash
# call 45 (2026-12-08): main with the policy's stratified rows (vcattn_stratified_rows instead of
# strided ones) and its recheck (a head whose method as designed does not reach the floor is
# measured again on 4x the rows, only those heads); .pre/main.tgz = main's build with both.  Carry .pre, .peer, .whl.  Every stage while
# time is left:
#  1. per-head fidelity over k-means seeds 0-3, FP64 on every row: the five held-out-style layers,
#     randn, and the 115,200-token HunyuanVideo-1.5-shaped layer of the CPU study (the one the
#     strided rows aliased on; call 44 ran the 118,800-token one: the frames=32 option was cut at
#     its comma);
#  2. the Python GPU tests (the GPU measurement's rows and standard errors against the C side);
#  2b. the kernel alone with the peers (as call 44's first stage: on an H200, the issues' targets);
#  3. the masked HunyuanVideo-1.5-shaped call on randn in turn (dev/profile_call.py);
#  4. the measuring cost (device_check.sh policy).
set -u
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-out}; mkdir -p $OUT; OUT=$(cd $OUT && pwd); W=/tmp/call45; mkdir -p $W
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
left() { echo $(( ${VC_LIMIT:-570} - ($(date +%s) - T0) )); }
pack() { tar -czf $OUT/call45.tgz.part -C $W . && mv $OUT/call45.tgz.part $OUT/call45.tgz; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $W/gpu.txt
mkdir -p /tmp/pre && tar -xzf .pre/main.tgz -C /tmp/pre
{ OUT=$W/heads VC_PREBUILT=/tmp/pre \
    VC_HEADS_ARGS="--inputs video-9600,video-9600-sinks,video-long-wan720p-sinks,video-long-wan720p,randn,video-long-hunyuan720p:heads=16,frames=32" \
    timeout $(( $(left) - 40 )) bash scripts/device_check.sh heads > $W/heads_stage.txt 2>&1
  el "heads rc $?"; grep -E "^==|policy" $W/heads_stage.txt | cut -c1-220; pack; }
[ $(left) -gt 60 ] && { VCATTN_LIBRARY=/tmp/pre/libvcattn.so PYTHONPATH=python timeout $(( $(left) - 30 )) python3 -m pytest -q \
    python/tests/test_gpu.py python/tests/test_plan.py python/tests/test_torch.py > $W/pytest_gpu.txt 2>&1
  el "pytest rc $?"; tail -2 $W/pytest_gpu.txt; pack; }
[ $(left) -gt 160 ] && { VC_BENCH_SHAPES="1,40,75600,75600,128 1,16,112300,112300,128 1,48,17550,17550,64 1,40,8192,8192,128" \
    VC_BENCH_METHODS=vsmooth-split-blockmax-8bit,sage2-8bit OUT=$W/bench VC_PREBUILT=/tmp/pre \
    timeout 120 bash scripts/device_check.sh bench > $W/bench_stage.txt 2>&1
  el "bench rc $?"; sed -n '/== summary/,$p' $W/bench_stage.txt | cut -c1-200; pack; }
[ $(left) -gt 100 ] && { VCATTN_LIBRARY=/tmp/pre/libvcattn.so PYTHONPATH=python timeout 120 python3 dev/profile_call.py \
    --no-profile --rounds 3 --json $W/rounds.json > $W/rounds.txt 2>&1; el "rounds rc $?"; tail -7 $W/rounds.txt | cut -c1-220; pack; }
[ $(left) -gt 60 ] && { OUT=$W/policy VC_PREBUILT=/tmp/pre timeout $(( $(left) - 5 )) bash scripts/device_check.sh policy \
    > $W/policy_stage.txt 2>&1; el "policy rc $?"; grep -E "measuring" $W/policy_stage.txt | cut -c1-260; pack; }
el end
