#!/usr/bin/env bash
# call 43: main with the DIRECT kernel per 64-row block (direct-rows merged; .pre/main.tgz = main's
# build), every stage while time is left:
#  1. gpu_check check: every hash against call 38's (the Q x 1e6 shapes now come last, so every
#     earlier shape keeps its inputs); compute-sanitizer synccheck of gpu_check small (memcheck and
#     racecheck ran in call 41 on the same kernels);
#  2. the kernel alone with cuDNN BF16, SageAttention2 and cuDNN FP8 in the same run: Wan 720p,
#     HunyuanVideo-1.5's valid shape, CogVideoX-5B's head_dim 64 shape, 8K;
#  3. HunyuanVideo-1.5's masked call in turn with cuDNN BF16 on the valid tokens, two rounds: randn,
#     then a video-like layer (`vcattn workload --preset video-long-hunyuan720p --heads 16 --frames 32`);
#  4. one Wan2.2-A14B-shaped denoising step, cuDNN against vcattn (device_check.sh e2e).
# The outputs are packed into one tarball after every stage (a run cut short keeps what it had).
set -u
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-out}; mkdir -p $OUT; OUT=$(cd $OUT && pwd); W=/tmp/call43; mkdir -p $W
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
left() { echo $(( ${VC_LIMIT:-570} - ($(date +%s) - T0) )); }
pack() { tar -czf $OUT/call43.tgz.part -C $W . && mv $OUT/call43.tgz.part $OUT/call43.tgz; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $W/gpu.txt
mkdir -p /tmp/pre && tar -xzf .pre/main.tgz -C /tmp/pre
timeout 90 /tmp/pre/gpu_check check > $W/check.txt 2>&1; el "check rc $?"; grep -E ": [0-9]+ failed" $W/check.txt
hashes() { grep -oE "^(ok|FAIL).*out [0-9a-f]+" $1 | sed -E 's/rel-L2.*out/out/'; }
diff <(hashes $W/check.txt | head -65) <(hashes docs/results/2026-12-07/call38/out/check.txt) > $W/hash_diff.txt \
    && el "hashes: the 65 of call 38 identical" || el "hashes: DIFFER ($(wc -l < $W/hash_diff.txt) diff lines)"
timeout 60 compute-sanitizer --tool synccheck --error-exitcode 9 /tmp/pre/gpu_check small > $W/san_synccheck.txt 2>&1
el "synccheck rc $?"; grep -E "ERROR SUMMARY" $W/san_synccheck.txt | tail -1; pack
[ $(left) -gt 200 ] && { VC_BENCH_SHAPES="1,40,75600,75600,128 1,16,112300,112300,128 1,48,17550,17550,64 1,40,8192,8192,128" \
    VC_BENCH_METHODS=vsmooth-split-blockmax-8bit,sage2-8bit OUT=$W/bench VC_PREBUILT=/tmp/pre \
    timeout 240 bash scripts/device_check.sh bench > $W/bench_stage.txt 2>&1
  el "bench rc $?"; sed -n '/== summary/,$p' $W/bench_stage.txt | cut -c1-200; pack; }
[ $(left) -gt 120 ] && { VCATTN_LIBRARY=/tmp/pre/libvcattn.so PYTHONPATH=python timeout 90 python3 dev/profile_call.py \
    --no-profile --rounds 2 --json $W/rounds.json > $W/rounds.txt 2>&1; el "randn rounds rc $?"; tail -6 $W/rounds.txt | cut -c1-200; pack; }
[ $(left) -gt 120 ] && { timeout 30 /tmp/pre/vcattn workload --preset video-long-hunyuan720p --heads 16 --frames 32 \
    --out /tmp/hy --quiet; el "workload rc $?"
  VCATTN_LIBRARY=/tmp/pre/libvcattn.so PYTHONPATH=python timeout 90 python3 dev/profile_call.py --no-profile --rounds 2 \
    --inputs /tmp/hy --json $W/rounds_video.json > $W/rounds_video.txt 2>&1; el "video rounds rc $?"
  tail -6 $W/rounds_video.txt | cut -c1-200; rm -rf /tmp/hy; pack; }
[ $(left) -gt 170 ] && { OUT=$W/e2e VC_PREBUILT=/tmp/pre timeout $(( $(left) - 10 )) bash scripts/device_check.sh e2e \
    > $W/e2e_stage.txt 2>&1; el "e2e rc $?"; tail -12 $W/e2e_stage.txt | cut -c1-200; pack; }
el end
