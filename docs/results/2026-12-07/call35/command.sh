#!/usr/bin/env bash
# call 35 (call 34's machine, warm): the tree's build at Wan 720p with cuDNN BF16, SageAttention2 and cuDNN FP8 in the same run
mkdir -p /tmp/tree && tar -xzf .pre/tree.tgz -C /tmp/tree; VC_BENCH_SHAPES="1,40,75600,75600,128" VC_BENCH_METHODS=vsmooth-split-blockmax-8bit,sage2-8bit OUT=$OUT/bench VC_PREBUILT=/tmp/tree timeout 200 bash scripts/device_check.sh bench > $OUT/bench_stage.txt 2>&1; echo "bench rc $?"; sed -n '/== summary/,$p' $OUT/bench_stage.txt | cut -c1-200; grep -E "SDPA|BENCH" $OUT/bench/bench.txt | cut -c1-170
