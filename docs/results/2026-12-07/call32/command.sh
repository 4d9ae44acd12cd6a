#!/usr/bin/env bash
# call 32: the exact keys' merge on the tensor cores (.pre/tree.tgz) against main's build
# (.pre/main.tgz), and the head-recipe measurement launched longest chain first:
#   gpu_check check of the tree (its hashes: the merge's arithmetic changed), memcheck of the merge,
#   the GPU tests with the tree, A/B of the two builds (kernel alone and full call, 2 rounds),
#   policy_cost.py with main's python + build and with the tree's
set -u
OUT=${OUT:-out}; mkdir -p $OUT; OUT=$(cd $OUT && pwd)
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p /tmp/pre /tmp/tree /tmp/head && tar -xzf .pre/main.tgz -C /tmp/pre && tar -xzf .pre/tree.tgz -C /tmp/tree \
  && tar -xzf .pre/python_head.tgz -C /tmp/head
el "== check"
timeout 200 /tmp/tree/gpu_check check > $OUT/check_tree.txt 2>&1; echo "check rc $?"; grep -ciE "fail|bad" $OUT/check_tree.txt; tail -3 $OUT/check_tree.txt
el "== memcheck"
timeout 90 compute-sanitizer --tool memcheck /tmp/tree/gpu_check small > $OUT/memcheck.txt 2>&1; echo "memcheck rc $?"; tail -2 $OUT/memcheck.txt
el "== tests"
VCATTN_LIBRARY=/tmp/tree/libvcattn.so PYTHONPATH=python timeout 150 python3 -m pytest -q python/tests/test_gpu.py > $OUT/tests.txt 2>&1; tail -3 $OUT/tests.txt
el "== ab"
timeout 200 bash dev/ab_bench.sh "/tmp/pre /tmp/tree" "1,16,112300,112300,128 1,40,75600,75600,128 1,48,17550,17550,64 1,40,8192,8192,128" 2 > $OUT/ab.txt 2>&1
grep -E "SDPA cudnn|vsmooth-split" $OUT/ab.txt | cut -c1-170
el "== policy"
for tree in head tree; do
  py=$PWD/python lib=/tmp/tree; [ $tree = head ] && py=/tmp/head/python lib=/tmp/pre
  (cd tests/gpu && VCATTN_LIBRARY=$lib/libvcattn.so PYTHONPATH=$py timeout 150 python3 policy_cost.py --vcattn-bin $lib/vcattn \
     --inputs video-long-wan720p-sinks,video-long-wan720p --json $OUT/policy_cost_$tree.json 2>&1 | cut -c1-250 | tee $OUT/policy_cost_$tree.txt)
done
el end
