#!/usr/bin/env bash
# call 30: is the masked call slower than the same call on the valid tokens (call 29: 111.99 vs
# 106.73 ms, timed one after the other)?  The variants' wall times in turn, five rounds.
set -u
OUT=${OUT:-out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p /tmp/pre && tar -xzf .pre/main.tgz -C /tmp/pre
VCATTN_LIBRARY=/tmp/pre/libvcattn.so PYTHONPATH=python timeout 300 python3 dev/profile_call.py --no-profile --rounds 5 \
    --json $OUT/rounds.json 2>&1 | tee $OUT/rounds.txt | cut -c1-220
