#!/usr/bin/env bash
# call 38: main with the key order in three wide kernels and the masked call written into its padded
# output (.pre/main.tgz), every stage while time is left (570 s in all):
#  1. gpu_check check and the Python GPU tests;
#  2. the masked call in turn, five rounds (randn, dev/profile_call.py);
#  3. the kernel alone with cuDNN BF16, SageAttention2 and cuDNN FP8 in the same run: CogVideoX-5B's
#     head_dim 64 shape, Wan 720p, HunyuanVideo-1.5's valid shape;
#  4. the masked call on a video-like HunyuanVideo-shaped layer (`vcattn workload`, 16 heads,
#     32 x 45 x 80 tokens cut to 112,600), three rounds;
#  5. per-head fidelity over k-means seeds 0-3 (device_check.sh heads; call 39's command alone).
set -u
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-out}; mkdir -p $OUT; OUT=$(cd $OUT && pwd)
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
left() { echo $(( 570 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p /tmp/pre && tar -xzf .pre/main.tgz -C /tmp/pre
timeout 120 /tmp/pre/gpu_check check > $OUT/check.txt 2>&1; el "check rc $?"; grep -E ": [0-9]+ failed" $OUT/check.txt
VCATTN_LIBRARY=/tmp/pre/libvcattn.so PYTHONPATH=python timeout 150 python3 -m pytest -q python/tests/test_gpu.py \
    python/tests/test_masks.py > $OUT/pytest_gpu.txt 2>&1; el "pytest rc $?"; tail -2 $OUT/pytest_gpu.txt
VCATTN_LIBRARY=/tmp/pre/libvcattn.so PYTHONPATH=python timeout 120 python3 dev/profile_call.py --no-profile --rounds 5 \
    --json $OUT/rounds.json > $OUT/rounds.txt 2>&1; el "rounds rc $?"; tail -7 $OUT/rounds.txt | cut -c1-220
[ $(left) -gt 100 ] && { VC_BENCH_SHAPES="1,48,17550,17550,64 1,40,75600,75600,128 1,16,112300,112300,128" \
    VC_BENCH_METHODS=vsmooth-split-blockmax-8bit,sage2-8bit OUT=$OUT/bench VC_PREBUILT=/tmp/pre \
    timeout $(( $(left) - 20 )) bash scripts/device_check.sh bench > $OUT/bench_stage.txt 2>&1
  el "bench rc $?"; sed -n '/== summary/,$p' $OUT/bench_stage.txt | cut -c1-200; }
[ $(left) -gt 80 ] && { timeout 60 /tmp/pre/vcattn workload --preset video-long-hunyuan720p --heads 16 --frames 32 \
    --out /tmp/hy --quiet; el "workload rc $?"
  VCATTN_LIBRARY=/tmp/pre/libvcattn.so PYTHONPATH=python timeout $(( $(left) - 10 )) python3 dev/profile_call.py \
    --no-profile --rounds 3 --inputs /tmp/hy --json $OUT/rounds_video.json > $OUT/rounds_video.txt 2>&1
  el "video rounds rc $?"; tail -8 $OUT/rounds_video.txt | cut -c1-220; rm -rf /tmp/hy; }
[ $(left) -gt 120 ] && { OUT=$OUT/dc VC_PREBUILT=/tmp/pre timeout $(( $(left) - 5 )) bash scripts/device_check.sh heads \
    > $OUT/heads_stage.txt 2>&1; el "heads rc $?"; grep -E "policy|rc=" $OUT/heads_stage.txt | cut -c1-200; }
el end
