#!/usr/bin/env bash
# CPU, no device (2026-12-08): the floor policy with its recheck on randn (1, 8, 8192, 128)
# (make_randn.py), the CPU planner, k-means seeds 0-3, every row evaluated against FP64.
set -eu
B=${1:-build-main}
mkdir -p /tmp/randn && python3 make_randn.py /tmp/randn
for s in 0 1 2 3; do
  $B/vcattn eval --npy /tmp/randn/q.npy /tmp/randn/k.npy /tmp/randn/v.npy \
      --methods sage2-8bit,vsmooth-split-blockmax-8bit --policy floor --seed $s > eval_seed$s.txt
done
