#!/usr/bin/env bash
# call 31: the timeline of one head-recipe measurement on the 4-head video layers (issue 28's
# measuring cost: 3.4-4.2 ms against one run's ~1.1-1.9 ms and the reference's 0.7 ms in call 24)
set -u
OUT=${OUT:-out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p /tmp/pre && tar -xzf .pre/main.tgz -C /tmp/pre
for pol in floor faithful; do
VCATTN_LIBRARY=/tmp/pre/libvcattn.so PYTHONPATH=python timeout 240 python3 dev/trace_policy.py --vcattn-bin /tmp/pre/vcattn \
    --policy $pol --json $OUT/trace_$pol.json > $OUT/trace_$pol.txt 2>&1; echo "trace $pol rc $?"
done
cut -c1-160 $OUT/trace_floor.txt | head -150
grep "==" $OUT/trace_faithful.txt
