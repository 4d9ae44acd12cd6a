#!/usr/bin/env bash
# call 32: the exact keys' merge on the tensor cores (.pre/tree.tgz) against main's build
# (.pre/main.tgz), and the head-recipe measurement launched longest chain first:
#   gpu_check check of the tree (its hashes against call 22's: the merge's arithmetic changed, so
#   the V-Smooth methods' change and sage2-8bit's must not), the GPU tests, memcheck of the merge,
#   A/B of the two builds (kernel alone and full call, alternated rounds; sage2-8bit has no exact
#   keys: the control), then policy_cost.py with the tree (call 31 ran main's)
set -u
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-out}; mkdir -p $OUT; OUT=$(cd $OUT && pwd)
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p /tmp/pre /tmp/tree && tar -xzf .pre/main.tgz -C /tmp/pre && tar -xzf .pre/tree.tgz -C /tmp/tree
el "== check (tree)"
timeout 100 /tmp/tree/gpu_check check > $OUT/check.txt 2>&1; echo "check rc $?"; grep -E ": [0-9]+ failed" $OUT/check.txt
sed -nE 's/^\S+ +(\([0-9,]+\)) +(\S+) .*out ([0-9a-f]{16}).*/\1 \2 \3/p' $OUT/check.txt > $OUT/hash.txt
diff $OUT/hash.txt docs/results/2026-12-07/call22/out/hash_base.txt | grep -c "^<" ; diff $OUT/hash.txt docs/results/2026-12-07/call22/out/hash_base.txt | grep "^<" | awk '{print $3}' | sort | uniq -c
el "== GPU Python tests (tree)"
VCATTN_LIBRARY=/tmp/tree/libvcattn.so PYTHONPATH=python timeout 150 python3 -m pytest -q python/tests/test_gpu.py > $OUT/pytest_gpu.txt 2>&1; tail -4 $OUT/pytest_gpu.txt
el "== memcheck small (tree)"
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 /tmp/tree/gpu_check small > $OUT/san_memcheck.txt 2>&1
echo "memcheck rc $?"; grep -E "ERROR SUMMARY" $OUT/san_memcheck.txt | tail -1
el "== A/B main vs tree"
for r in 1 2; do for s in "1 16 112300 112300 128" "1 40 75600 75600 128" "1 48 17550 17550 64"; do for v in pre tree; do
  VC_BENCH_METHODS=vsmooth-split-blockmax-8bit,sage2-8bit timeout 60 /tmp/$v/gpu_bench bench $s 5 2>&1 | grep BENCH | sed "s|^|[$v r$r] |" >> $OUT/ab.txt
done; done; done
cut -c1-175 $OUT/ab.txt
el "== policy cost (tree)"
(cd tests/gpu && VCATTN_LIBRARY=/tmp/tree/libvcattn.so PYTHONPATH=$PWD/../../python timeout 150 python3 policy_cost.py --vcattn-bin /tmp/tree/vcattn \
   --inputs video-long-wan720p-sinks,video-long-wan720p --json $OUT/policy_cost.json 2>&1 | cut -c1-250 | tee $OUT/policy_cost.txt)
el end
