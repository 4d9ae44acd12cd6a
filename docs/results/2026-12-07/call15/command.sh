#!/usr/bin/env bash
# call 15: (1) the exact keys merged in the attention kernel's epilogue, per-warpgroup 16-bit
# copies staged at the consumers' start with the LSE computed only where the merge or the caller
# takes it (gpu_bench, branch exact-merge-staged 38f1953) against the shipped merge kernel
# (gpu_bench_old): gpu_check check, the A/B at four shapes (two alternated rounds), sanitizers;
# (2) HunyuanVideo-1.5's padded joint attention with the shipped library (main), now also with
# the method as designed on every head (Plan(policy=None)) beside the default plan's policy;
# (3) the head recipes' measurement with one preprocessing per order and the recipes two at a time
# and the reference rows in one fused kernel (vcattn_gpu_reference_rows; working tree's python/ and
# library, built here): gpu_check reference, the policy tests on CUDA, then what it costs (policy stage)
set -u
export PATH=$PATH:/usr/local/cuda/bin
mkdir -p /tmp/pre /tmp/pre_main && tar -xzf .pre/bin.tgz -C /tmp/pre && tar -xzf .pre/main.tgz -C /tmp/pre_main
OUT=${OUT:-out}; mkdir -p $OUT
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
el "== check"
timeout 120 /tmp/pre/gpu_check check > $OUT/check.txt 2>&1; echo "check rc $?"; grep -cE " ok" $OUT/check.txt; grep -E "failed|FAIL" $OUT/check.txt | head -20
el "== reference rows (main + working tree)"
timeout 120 /tmp/pre_main/gpu_check reference 2>&1 | tail -8
el "== policy measurement test"
VCATTN_LIBRARY=/tmp/pre_main/libvcattn.so PYTHONPATH=python timeout 150 python3 -m pytest -q python/tests/test_gpu.py -k "policy" 2>&1 | tail -5
el "== masked (main)"
mkdir -p $OUT/masked; VCATTN_LIBRARY=/tmp/pre_main/libvcattn.so PYTHONPATH=python timeout 300 python3 tests/gpu/masked_bench.py --json $OUT/masked/masked_bench.json > $OUT/masked_stage.txt 2>&1; echo "masked rc $?"
grep -A9 '"ms"' $OUT/masked_stage.txt | head -12; grep -A4 '"recipes"' $OUT/masked_stage.txt | head -5; grep -A5 '"ratios"' $OUT/masked_stage.txt | head -6
el "== policy cost (main)"
OUT=$OUT/policy VC_PREBUILT=/tmp/pre_main timeout 300 bash scripts/device_check.sh policy > $OUT/policy_stage.txt 2>&1; echo "policy rc $?"
tail -12 $OUT/policy_stage.txt
el "== A/B"
export VC_BENCH_METHODS=vsmooth-split-blockmax-8bit,sage2-8bit
for rep in 1; do for s in "1 40 75600 75600 128" "1 40 75600 512 128" "1 48 17550 17550 64" "1 40 8192 8192 128"; do for b in gpu_bench_old gpu_bench; do
  echo "## $b $s" >> $OUT/ab.txt
  timeout 60 /tmp/pre/$b bench $s 5 >> $OUT/ab.txt 2>&1
done; done; done
unset VC_BENCH_METHODS
awk '/^##/{b=$2; s=$3" "$4" "$5" "$6" "$7; next} /BENCH/{for(i=1;i<=NF;i++) if($i=="kernel") k=$(i+1); print s, $2, b, k}' $OUT/ab.txt | sort -k1,7 -s | awk '{key=$1" "$2" "$3" "$4" "$5" "$6" "$7; v[key]=v[key]" "$8} END{for(k in v) print k, v[k]}' | sort
el "== sanitize the reference rows (main + working tree)"
for tool in memcheck racecheck; do timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 /tmp/pre_main/gpu_check reference > $OUT/san_ref_$tool.txt 2>&1; echo "$tool rc $?"; grep -E "ERROR SUMMARY|reference:" $OUT/san_ref_$tool.txt | tail -2; done
el end
