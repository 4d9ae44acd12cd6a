#!/usr/bin/env bash
# CPU, no device (2026-12-07 from 22:06): the floor policy on a video-like HunyuanVideo-1.5-shaped
# layer (the inputs of calls 41 and 43's video rounds, uncut: 115,200 tokens), per head, k-means
# seeds 0 and 1; first 300 strided query rows per head (few of them among the policy's 512), then
# 2,000 rows on the two heads whose 300-row numbers looked wrong.
set -eu
B=${1:-build-main}
$B/vcattn workload --preset video-long-hunyuan720p --heads 16 --frames 32 --out /tmp/hy --quiet
for s in 0 1; do
  $B/vcattn eval --npy /tmp/hy/q.npy /tmp/hy/k.npy /tmp/hy/v.npy --grid 32,45,80 --query-rows 300 \
      --methods sage2-8bit,vsmooth-split-blockmax-8bit --policy floor --seed $s > eval_300rows_seed$s.txt
  $B/vcattn eval --npy /tmp/hy/q.npy /tmp/hy/k.npy /tmp/hy/v.npy --grid 32,45,80 --heads 10,13 --query-rows 2000 \
      --methods sage2-8bit,vsmooth-split-blockmax-8bit --policy floor --seed $s > eval_2000rows_heads10_13_seed$s.txt
done
# then the policy on 2,048 rows per head instead of 512 (a few evaluated rows only), and the
# measured rows' share of frame-first tokens (frame_first_rows.py, run from the repository root)
for s in 0 1; do
  $B/vcattn eval --npy /tmp/hy/q.npy /tmp/hy/k.npy /tmp/hy/v.npy --grid 32,45,80 --query-rows 16 \
      --methods sage2-8bit,vsmooth-split-blockmax-8bit --policy floor --policy-rows 2048 --seed $s > eval_policy2048rows_seed$s.txt
done
(cd ../../../.. && python3 docs/results/2026-12-07/hy-video-policy/frame_first_rows.py) > frame_first_rows.txt
