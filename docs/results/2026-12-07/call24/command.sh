#!/usr/bin/env bash
# call 24: branch land (main + reference-ldmatrix-streams at 42c3211; python/ and tests/gpu/ from land) - the direct-heads word from the
# preprocessing (the kernel half wrote each launch's exact-P choice into the shared workspace:
# the race behind recipe 0's -70 dB in calls 20, 21 and 23).  gpu_check check (its output hashes
# against call 22's shipped kernel), the reference rows, the GPU Python tests (the new
# workspace test, the overlapping test, the policy tests), memcheck of gpu_check small, then the
# measuring cost.  .pre/main.tgz: the branch's build; .pre/branch_tree.tgz: its python/ and tests/gpu/.
set -u
export PATH=$PATH:/usr/local/cuda/bin
mkdir -p /tmp/pre_branch /tmp/branch
tar -xzf .pre/main.tgz -C /tmp/pre_branch && tar -xzf .pre/branch_tree.tgz -C /tmp/branch
OUT=${OUT:-out}; mkdir -p $OUT
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
el "== check (branch)"
timeout 100 /tmp/pre_branch/gpu_check check > $OUT/check.txt 2>&1; echo "check rc $?"; grep -E ": [0-9]+ failed" $OUT/check.txt
sed -nE 's/^\S+ +(\([0-9,]+\)) +(\S+) .*out ([0-9a-f]{16}).*/\1 \2 \3/p' $OUT/check.txt > $OUT/hash.txt
cmp -s $OUT/hash.txt docs/results/2026-12-07/call22/out/hash_base.txt && echo "hashes = call 22's shipped kernel ($(wc -l < $OUT/hash.txt))" || { echo "hashes DIFFER"; diff $OUT/hash.txt docs/results/2026-12-07/call22/out/hash_base.txt | head; }
el "== GPU Python tests (branch)"
(cd /tmp/branch && VCATTN_LIBRARY=/tmp/pre_branch/libvcattn.so PYTHONPATH=python timeout 200 \
    python3 -m pytest -q python/tests/test_gpu.py 2>&1 | tail -4) | tee $OUT/pytest_gpu.txt
el "== memcheck small (branch)"
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 /tmp/pre_branch/gpu_check small > $OUT/san_memcheck.txt 2>&1
echo "memcheck rc $?"; grep -E "ERROR SUMMARY" $OUT/san_memcheck.txt | tail -1
el "== policy cost (branch)"
VCATTN_LIBRARY=/tmp/pre_branch/libvcattn.so PYTHONUNBUFFERED=1 timeout 150 python3 /tmp/branch/tests/gpu/policy_cost.py \
    --vcattn-bin /tmp/pre_branch/vcattn --json $OUT/policy_cost.json > $OUT/policy.txt 2>&1; echo "policy rc $?"
grep "^== video\|^== wan" $OUT/policy.txt | cut -c1-460
el end
# then the restore turns as an instantiation of their own (branch restore-apart: no dummy HGMMA
# and warpgroup.arrive every turn) against the shipped kernel (base): check, A/B in alternated rounds.
# .pre/ab2.tgz: base/ (3e031a0's build, the shipped kernel) and ra/.
mkdir -p /tmp/v && tar -xzf .pre/ab2.tgz -C /tmp/v
el "== check ra"
timeout 100 /tmp/v/ra/gpu_check check > $OUT/check_ra.txt 2>&1; echo "check ra rc $?"; grep -E ": [0-9]+ failed" $OUT/check_ra.txt
sed -nE 's/^\S+ +(\([0-9,]+\)) +(\S+) .*out ([0-9a-f]{16}).*/\1 \2 \3/p' $OUT/check_ra.txt > $OUT/hash_ra.txt
cmp -s $OUT/hash_ra.txt docs/results/2026-12-07/call22/out/hash_base.txt && echo "ra hashes = call 22's shipped kernel" || echo "ra hashes DIFFER"
el "== A/B base vs ra"
for r in 1 2 3; do for s in "1 40 75600 75600 128" "1 40 8192 8192 128" "1 48 17550 17550 64"; do for v in base ra; do
  VC_BENCH_METHODS=vsmooth-split-blockmax-8bit,sage2-8bit timeout 60 /tmp/v/$v/gpu_bench bench $s 5 2>&1 | grep BENCH | sed "s|^|[$v r$r] |" >> $OUT/ab.txt
done; done; done
sed -E 's/full .* kernel/kernel/; s/ \(.{3,5} TFLOP.s\) prep.*//' $OUT/ab.txt
el end2
