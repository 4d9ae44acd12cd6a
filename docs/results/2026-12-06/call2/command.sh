#!/usr/bin/env bash
set -u
export PATH=$PATH:/usr/local/cuda/bin
mkdir -p /tmp/pre && tar -xzf .pre/bin.tgz -C /tmp/pre
OUT=${OUT:-out}; mkdir -p $OUT
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
sa=$(ls .peer/sageattention-*.tar.xz | head -1); mkdir -p /tmp/sa && tar -xJf "$sa" -C /tmp/sa
export PYTHONPATH=/tmp/sa:python
el "== python GPU tests"
VCATTN_LIBRARY=/tmp/pre/libvcattn.so timeout 150 python3 -m pytest -q python/tests/test_gpu.py > $OUT/pytest.txt 2>&1; echo "pytest rc $?"; tail -6 $OUT/pytest.txt
el "== policy"
VCATTN_LIBRARY=/tmp/pre/libvcattn.so PYTHONUNBUFFERED=1 timeout 200 python3 tests/gpu/policy_cost.py --vcattn-bin /tmp/pre/vcattn --json $OUT/policy_cost.json > $OUT/policy.txt 2>&1; echo "policy rc $?"; grep "^==" $OUT/policy.txt | cut -c1-220
el "== ncu: the kernels of one call at (1,40,75600,512,128)"
if command -v ncu >/dev/null; then
  VC_BENCH_METHODS=vsmooth-split-blockmax-8bit timeout 120 ncu --launch-skip 0 --launch-count 14 --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__registers_per_thread \
    /tmp/pre/gpu_bench bench 1 40 75600 512 128 1 > $OUT/ncu512.txt 2>&1; echo "ncu rc $?"
  grep -E "^\s+[a-z_]+.*\(|gpu__time_duration|dram__|sm__thr|grid_size" $OUT/ncu512.txt | head -80
else echo "no ncu"; fi
left=$(( 330 - ($(date +%s) - T0) ))
if [ -d pydeps/diffusers ] && [ $left -gt 150 ]; then
  el "== compile wan (limit ${left}s)"
  VCATTN_LIBRARY=/tmp/pre/libvcattn.so PYTHONPATH=python:pydeps timeout $left python3 tests/gpu/block_compile.py --model wan --json $OUT/block_compile_wan.json > $OUT/compile_wan.txt 2>&1; echo "compile rc $?"; tail -4 $OUT/compile_wan.txt
fi
el end
