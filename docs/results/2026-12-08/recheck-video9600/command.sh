#!/usr/bin/env bash
# CPU, no device (2026-12-08): the floor policy with its recheck on the held-out-style video-9600
# layer (CPU planner), k-means seeds 0-3, every row evaluated against FP64.
set -eu
B=${1:-build-main}
$B/vcattn workload --preset video-9600 --out /tmp/v9600 --quiet
for s in 0 1 2 3; do
  $B/vcattn eval --npy /tmp/v9600/q.npy /tmp/v9600/k.npy /tmp/v9600/v.npy --grid 4,48,50 \
      --methods sage2-8bit,vsmooth-split-blockmax-8bit --policy floor --seed $s > eval_seed$s.txt
done
