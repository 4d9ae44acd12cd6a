#!/usr/bin/env bash
# call 19: HunyuanVideo-1.5's real-size block through vcattn.diffusers.enable with its joint mask
# deferred (vcattn.deferred_mask) against the same block with the mask built and read back, and
# the unpatched block (tests/gpu/block_compile.py; main's library built here, diffusers 0.42.1
# from pydeps/)
set -u
export PATH=$PATH:/usr/local/cuda/bin
mkdir -p /tmp/pre_main && tar -xzf .pre-main/lib.tgz -C /tmp/pre_main
OUT=${OUT:-out}; mkdir -p $OUT
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
el "== hunyuanvideo15 block"
VCATTN_LIBRARY=/tmp/pre_main/libvcattn.so PYTHONPATH=python:pydeps PYTHONUNBUFFERED=1 timeout 400 \
    python3 tests/gpu/block_compile.py --model hunyuanvideo15 --reps 5 --json $OUT/block_compile_hunyuanvideo15.json \
    > $OUT/compile_hunyuanvideo15.txt 2>&1; echo "rc $?"; grep -E "ms \(median|HUNYUAN|FAIL|Error" $OUT/compile_hunyuanvideo15.txt | cut -c1-300
el "== the deferred mask's tests on CUDA tensors"
VCATTN_LIBRARY=/tmp/pre_main/libvcattn.so PYTHONPATH=python:pydeps timeout 120 python3 -m pytest -q python/tests/test_deferred_mask.py python/tests/test_masks.py 2>&1 | tail -3
el end
