#!/usr/bin/env bash
# call 44 (built 2026-12-07 from 22:06, not run: the session's device time went on refused starts).
# Main's build in .pre/main.tgz; carry .pre, .peer (SageAttention2) and .whl (cuDNN's frontend, for
# cuDNN FP8): without .peer the peers are missing from the bench and the heads stage (call 42 ran
# without it: "SageAttention2 not importable").  Every stage while time is left:
#  1. the kernel alone with cuDNN BF16, SageAttention2 and cuDNN FP8 in the same run: Wan 720p,
#     HunyuanVideo-1.5's valid shape, CogVideoX-5B's head_dim 64 shape, 8K (the DIRECT flag per
#     64-row block is on main since call 43; on randn it should change nothing);
#  2. per-head fidelity over k-means seeds 0-3 on the video-like HunyuanVideo-1.5-shaped layer
#     (16 heads, 115,200 tokens), FP64 on every row: the GPU's answer to the CPU study in
#     fidelity-analysis.md (a head whose k-means split loses to sage2-8bit on one seed; three heads
#     per seed off the split);
#  3. one Wan2.2-A14B-shaped denoising step, cuDNN against vcattn (device_check.sh e2e).
set -u
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-out}; mkdir -p $OUT; OUT=$(cd $OUT && pwd); W=/tmp/call44; mkdir -p $W
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
left() { echo $(( ${VC_LIMIT:-570} - ($(date +%s) - T0) )); }
pack() { tar -czf $OUT/call44.tgz.part -C $W . && mv $OUT/call44.tgz.part $OUT/call44.tgz; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $W/gpu.txt
mkdir -p /tmp/pre && tar -xzf .pre/main.tgz -C /tmp/pre
VC_BENCH_SHAPES="1,40,75600,75600,128 1,16,112300,112300,128 1,48,17550,17550,64 1,40,8192,8192,128" \
    VC_BENCH_METHODS=vsmooth-split-blockmax-8bit,sage2-8bit OUT=$W/bench VC_PREBUILT=/tmp/pre \
    timeout 240 bash scripts/device_check.sh bench > $W/bench_stage.txt 2>&1
el "bench rc $?"; sed -n '/== summary/,$p' $W/bench_stage.txt | cut -c1-200; pack
[ $(left) -gt 150 ] && { OUT=$W/heads VC_PREBUILT=/tmp/pre \
    VC_HEADS_ARGS="--inputs video-long-hunyuan720p:heads=16,frames=32" \
    timeout $(( $(left) - 100 )) bash scripts/device_check.sh heads > $W/heads_stage.txt 2>&1
  el "heads rc $?"; grep -E "==|policy" $W/heads_stage.txt | cut -c1-200; pack; }
[ $(left) -gt 170 ] && { OUT=$W/e2e VC_PREBUILT=/tmp/pre timeout $(( $(left) - 10 )) bash scripts/device_check.sh e2e \
    > $W/e2e_stage.txt 2>&1; el "e2e rc $?"; tail -12 $W/e2e_stage.txt | cut -c1-200; pack; }
el end
