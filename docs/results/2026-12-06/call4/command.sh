#!/usr/bin/env bash
set -u
mkdir -p /tmp/pre && tar -xzf .pre/lib.tgz -C /tmp/pre
OUT=${OUT:-out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
VCATTN_LIBRARY=/tmp/pre/libvcattn.so PYTHONPATH=python:pydeps timeout 200 python3 tests/gpu/block_compile.py --model hunyuanvideo15 --reps 5 --json $OUT/block_compile_hunyuanvideo15.json > $OUT/compile_hunyuanvideo15.txt 2>&1; echo "rc $?"; tail -3 $OUT/compile_hunyuanvideo15.txt
