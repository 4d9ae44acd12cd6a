#!/usr/bin/env bash
# call 36: call 30 again with the tensor-core merge (main at 3ec4e15's build): the masked call, the
# same call on the valid tokens and cuDNN BF16 on the valid tokens, five rounds in turn
set -u
OUT=${OUT:-out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p /tmp/tree && tar -xzf .pre/tree.tgz -C /tmp/tree
VCATTN_LIBRARY=/tmp/tree/libvcattn.so PYTHONPATH=python timeout 200 python3 dev/profile_call.py --no-profile --rounds 5 \
    --json $OUT/rounds.json 2>&1 | tee $OUT/rounds.txt | cut -c1-220
