#!/usr/bin/env bash
# call 31: the timeline of one head-recipe measurement on the 4-head video layers (issue 28's
# measuring cost: 3.4-4.2 ms against one run's ~1.1-1.9 ms and the reference's 0.7 ms in call 24),
# main's python (.pre/python_head.tgz) and the tree's (the reference launched first), then the
# measurement test and policy_cost.py with the tree's
set -u
OUT=${OUT:-out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
OUT=$(cd $OUT && pwd)
mkdir -p /tmp/pre /tmp/head && tar -xzf .pre/main.tgz -C /tmp/pre && tar -xzf .pre/python_head.tgz -C /tmp/head
export VCATTN_LIBRARY=/tmp/pre/libvcattn.so
for tree in head tree; do
  py=python; [ $tree = head ] && py=/tmp/head/python
  PYTHONPATH=$py timeout 200 python3 dev/trace_policy.py --vcattn-bin /tmp/pre/vcattn \
    --policy floor --json $OUT/trace_$tree.json > $OUT/trace_$tree.txt 2>&1; echo "trace $tree rc $?"
  grep "==" $OUT/trace_$tree.txt
done
cut -c1-150 $OUT/trace_head.txt | head -90
PYTHONPATH=python timeout 120 python3 -m pytest -q -x python/tests/test_gpu.py -k "measure or policy or reference" 2>&1 | tail -3
(cd tests/gpu && PYTHONPATH=../../python timeout 200 python3 policy_cost.py --vcattn-bin /tmp/pre/vcattn \
   --inputs video-long-wan720p-sinks,video-long-wan720p --json $OUT/policy_cost.json 2>&1 | cut -c1-330 | tee $OUT/policy_cost.txt)
