#!/usr/bin/env bash
# call 34: the measurement's launch order once more - the pair first, the reference last (main's
# python + build against the tree's, alternated, 2 rounds; call 33 ran the reference-first order),
# then the merge A/B at Wan 720p and (1,4,75600,128), 3 more rounds (main's build vs the tree's)
set -u
OUT=${OUT:-out}; mkdir -p $OUT; OUT=$(cd $OUT && pwd)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p /tmp/pre /tmp/tree /tmp/head; tar -xzf .pre/main.tgz -C /tmp/pre; tar -xzf .pre/tree.tgz -C /tmp/tree; tar -xzf .pre/python_head.tgz -C /tmp/head
cd tests/gpu
for r in 1 2; do for t in head tree; do py=$PWD/../../python; lib=/tmp/tree; [ $t = head ] && py=/tmp/head/python lib=/tmp/pre
  VCATTN_LIBRARY=$lib/libvcattn.so PYTHONPATH=$py timeout 100 python3 policy_cost.py --vcattn-bin $lib/vcattn \
    --inputs video-long-wan720p-sinks,video-long-wan720p --json $OUT/pc_${t}$r.json 2>&1 | grep "^==" | cut -c1-200 | sed "s/^/[$t r$r] /"
done; done
cd ../..
for r in 1 2 3; do for s in "1 40 75600 75600 128" "1 4 75600 75600 128"; do for v in pre tree; do
  VC_BENCH_METHODS=vsmooth-split-blockmax-8bit timeout 60 /tmp/$v/gpu_bench bench $s 5 2>&1 | grep BENCH | sed "s|^|[$v r$r] |" >> $OUT/ab.txt
done; done; done
cut -c1-175 $OUT/ab.txt
