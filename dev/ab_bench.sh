#!/usr/bin/env bash
# A/B timing of kernel builds in ONE device call (same GPU state, same inputs):
#   dev/ab_bench.sh "DIR1 DIR2 ..." [shapes] [rounds]
# DIRn holds a gpu_bench built from the tree under test (carried from the dev
# machine; a build from before the check/bench split has gpu_test, used then).
# Prints the cuDNN/flash SDPA baseline once, then every build's
# `gpu_bench bench` lines, labelled by its directory, the builds taking turns
# for `rounds` rounds (default 2) so that clock drift hits them alike.
set -u
DIRS=$1
SHAPES=${2:-"1,40,75600,75600,128 1,40,32760,32760,128"}
ROUNDS=${3:-2}
python3 tests/gpu/bench_sdpa.py $SHAPES 2>&1
for r in $(seq "$ROUNDS"); do
    for d in $DIRS; do
        for s in $SHAPES; do
            b="$d/gpu_bench"; [ -x "$b" ] || b="$d/gpu_test"
            timeout 120 "$b" bench ${s//,/ } 5 2>&1 | sed "s|^|[$d r$r] |"
        done
    done
done
