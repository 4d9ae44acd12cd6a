#!/usr/bin/env bash
# call 41 (next session): the DIRECT kernel's tiles flagged per 64-row block of Q instead of per head
# (branch direct-rows; .pre/tree.tgz = its build) against main's build (.pre/main.tgz):
#  1. gpu_check reference (the policy's reference rows with the shared P split, vc_mma16_split),
#     gpu_check check (every earlier shape's hash must stay: outputs bit-identical; compare with
#     results/2026-12-07/call38/out/check.txt) and memcheck + racecheck of gpu_check small;
#  2. the video-like HunyuanVideo-shaped masked call kernel by kernel (tree), and in turn (each build);
#  3. Wan 720p on a video-like layer (`vcattn workload --preset video-long-wan720p --heads 40`,
#     unmasked) against cuDNN BF16, in turn, each build: what the DIRECT kernel costs at the headline
#     shape on inputs that are not randn;
#  4. what measuring the head recipes costs (device_check.sh policy, the 4-head layers, tree).
# The outputs are packed into one tarball after every stage (a run cut short keeps what it had).
set -u
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-out}; mkdir -p $OUT; OUT=$(cd $OUT && pwd); W=/tmp/call41; mkdir -p $W
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
left() { echo $(( ${VC_LIMIT:-560} - ($(date +%s) - T0) )); }
pack() { tar -czf $OUT/call41.tgz.part -C $W . && mv $OUT/call41.tgz.part $OUT/call41.tgz; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $W/gpu.txt
mkdir -p /tmp/pre /tmp/tree && tar -xzf .pre/main.tgz -C /tmp/pre && tar -xzf .pre/tree.tgz -C /tmp/tree
timeout 90 /tmp/tree/gpu_check reference > $W/reference.txt 2>&1; el "reference rc $?"; tail -3 $W/reference.txt
timeout 60 /tmp/tree/gpu_check check > $W/check.txt 2>&1; el "check rc $?"; grep -E ": [0-9]+ failed" $W/check.txt; pack
for tool in memcheck racecheck; do timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 /tmp/tree/gpu_check small \
    > $W/san_$tool.txt 2>&1; el "$tool rc $?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $W/san_$tool.txt | tail -1; done; pack
timeout 30 /tmp/tree/vcattn workload --preset video-long-hunyuan720p --heads 16 --frames 32 --out /tmp/hy --quiet; el "workload rc $?"
VCATTN_LIBRARY=/tmp/tree/libvcattn.so PYTHONPATH=python timeout 40 python3 dev/profile_call.py --reps 3 --inputs /tmp/hy \
    --json $W/profile_tree.json > $W/profile_tree.txt 2>&1; el "profile rc $?"; grep -A3 "== vcattn-mask:" $W/profile_tree.txt | cut -c1-130; pack
for r in 1 2; do for v in pre tree; do [ $(left) -gt 200 ] || break
  VCATTN_LIBRARY=/tmp/$v/libvcattn.so PYTHONPATH=python timeout 40 python3 dev/profile_call.py --no-profile --rounds 1 \
    --inputs /tmp/hy --json $W/rounds_hy_${v}_$r.json > $W/rounds_hy_${v}_$r.txt 2>&1; el "hy $v $r rc $?"
  grep "round 0" $W/rounds_hy_${v}_$r.txt | cut -c1-200; pack
done; done
rm -rf /tmp/hy
timeout 60 /tmp/tree/vcattn workload --preset video-long-wan720p --heads 40 --out /tmp/wan --quiet; el "workload rc $?"
for r in 1 2; do for v in pre tree; do [ $(left) -gt 60 ] || break
  VCATTN_LIBRARY=/tmp/$v/libvcattn.so PYTHONPATH=python timeout 60 python3 dev/profile_call.py --no-profile --rounds 1 \
    --frames 21 --text 0 --pad 0 --inputs /tmp/wan --json $W/rounds_wan_${v}_$r.json > $W/rounds_wan_${v}_$r.txt 2>&1
  el "wan $v $r rc $?"; grep "round 0" $W/rounds_wan_${v}_$r.txt | cut -c1-200; pack
done; done
rm -rf /tmp/wan
[ $(left) -gt 60 ] && { OUT=$W/policy VC_PREBUILT=/tmp/tree VC_POLICY_ARGS="--inputs video-long-wan720p-sinks,video-long-wan720p" \
  timeout $(( $(left) - 5 )) bash scripts/device_check.sh policy > $W/policy_stage.txt 2>&1; el "policy rc $?"
  grep -E "measuring" $W/policy_stage.txt | cut -c1-260; pack; }
el end
