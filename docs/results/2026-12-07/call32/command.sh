#!/usr/bin/env bash
# call 32: the head-recipe measurement launched longest chain first, its PSNRs read back at once:
# the policy's GPU tests, then policy_cost.py (the 4-head video layers and Wan 720p randn at 40
# heads) and the timeline (dev/trace_policy.py) with main's python (.pre/python_head.tgz) and the tree's, in turn
set -u
OUT=${OUT:-out}; mkdir -p $OUT; OUT=$(cd $OUT && pwd)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p /tmp/pre /tmp/head && tar -xzf .pre/main.tgz -C /tmp/pre && tar -xzf .pre/python_head.tgz -C /tmp/head
export VCATTN_LIBRARY=/tmp/pre/libvcattn.so
PYTHONPATH=python timeout 150 python3 -m pytest -q python/tests/test_gpu.py 2>&1 | tail -3
for round in 1 2; do for tree in head tree; do
  py=$PWD/python; [ $tree = head ] && py=/tmp/head/python
  (cd tests/gpu && PYTHONPATH=$py timeout 200 python3 policy_cost.py --vcattn-bin /tmp/pre/vcattn \
     --inputs video-long-wan720p-sinks,video-long-wan720p$([ $round = 1 ] && echo ,wan720p-randn) \
     --json $OUT/policy_cost_${tree}$round.json 2>&1 | cut -c1-250 | tee $OUT/policy_cost_${tree}$round.txt)
done; done
PYTHONPATH=python timeout 100 python3 dev/trace_policy.py --vcattn-bin /tmp/pre/vcattn --policy floor \
    --json $OUT/trace_tree.json > $OUT/trace_tree.txt 2>&1; echo "trace rc $?"; grep "==" $OUT/trace_tree.txt
