#!/usr/bin/env bash
# CPU, no device (2026-12-08, later): as command.sh, with the recheck triggered by the method as
# designed (recipe 0) not reaching the floor, instead of no recipe reaching it.
set -eu
B=${1:-build-main}
[ -f /tmp/randn/q.npy ] || { mkdir -p /tmp/randn && python3 make_randn.py /tmp/randn; }
for s in 0 1 2 3; do
  $B/vcattn eval --npy /tmp/randn/q.npy /tmp/randn/k.npy /tmp/randn/v.npy \
      --methods sage2-8bit,vsmooth-split-blockmax-8bit --policy floor --seed $s > eval_method_recheck_seed$s.txt
done
