#!/usr/bin/env bash
# CPU, no device (2026-12-08): the floor policy on the video-like HunyuanVideo-1.5-shaped layer of
# results/2026-12-07/hy-video-policy (115,200 tokens, 16 heads), k-means seeds 0 and 1, now measuring
# 512 stratified rows per head (vcattn_stratified_rows) instead of 512 strided ones; 16 evaluated
# rows only (the recipes per head are the result; their gains are in the previous study's files).
set -eu
B=${1:-build-main}
[ -f /tmp/hy/q.npy ] || $B/vcattn workload --preset video-long-hunyuan720p --heads 16 --frames 32 --out /tmp/hy --quiet
for s in 0 1; do
  $B/vcattn eval --npy /tmp/hy/q.npy /tmp/hy/k.npy /tmp/hy/v.npy --grid 32,45,80 --query-rows 16 \
      --methods sage2-8bit,vsmooth-split-blockmax-8bit --policy floor --seed $s > eval_policy512stratified_seed$s.txt
done
# then the heads whose recipe the rows decided (11, 13; and 10, the one the aliased rows misread
# most) on 2,000 stratified evaluated rows, each seed: the unaliased answer to the previous study's
# 2,000 strided rows (115,200 / 2,000 rows put 16 of them on frame-first tokens)
for s in 0 1; do
  $B/vcattn eval --npy /tmp/hy/q.npy /tmp/hy/k.npy /tmp/hy/v.npy --grid 32,45,80 --heads 10,11,13 --query-rows 2000 \
      --methods sage2-8bit,vsmooth-split-blockmax-8bit --policy floor --seed $s > eval_2000stratified_heads10_11_13_seed$s.txt
done
# then the floor policy with its recheck (a head that reaches no recipe at the floor on 512 rows is
# measured again on 2,048): head 11 on seed 0, the one the 512 rows refused the split on
$B/vcattn eval --npy /tmp/hy/q.npy /tmp/hy/k.npy /tmp/hy/v.npy --grid 32,45,80 --heads 11 --query-rows 2000 \
    --methods sage2-8bit,vsmooth-split-blockmax-8bit --policy floor --seed 0 > eval_recheck_2000stratified_head11_seed0.txt
