#!/usr/bin/env bash
# one device call: the pipelined merge, the BF16 policy reference, timing old vs new, racecheck, policy cost
set -u
export PATH=$PATH:/usr/local/cuda/bin
mkdir -p /tmp/pre && tar -xzf .pre/bin.tgz -C /tmp/pre
OUT=${OUT:-out}; mkdir -p $OUT
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
el "== gpu_check check"
timeout 90 /tmp/pre/gpu_check check > $OUT/check.txt 2>&1; echo "check rc $?"; tail -15 $OUT/check.txt
el "== python GPU tests"
sa=$(ls .peer/sageattention-*.tar.xz | head -1); mkdir -p /tmp/sa && tar -xJf "$sa" -C /tmp/sa
[ -d .whl ] && python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/nvidia_cudnn_frontend-*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/sa:/tmp/site:python
VCATTN_LIBRARY=/tmp/pre/libvcattn.so timeout 200 python3 -m pytest -q -x python/tests/test_gpu.py > $OUT/pytest.txt 2>&1; echo "pytest rc $?"; tail -15 $OUT/pytest.txt
el "== bench peers"
timeout 120 python3 tests/gpu/bench_sdpa.py 1,40,75600,75600,128 1,40,75600,512,128 > $OUT/bench.txt 2>&1; tail -12 $OUT/bench.txt
el "== bench old vs new"
for s in "1 40 75600 75600 128" "1 40 75600 512 128"; do
  for b in old/gpu_bench gpu_bench; do
    echo "## $b $s" >> $OUT/bench.txt
    VC_BENCH_METHODS=vsmooth-split-blockmax-8bit timeout 90 /tmp/pre/$b bench $s 5 >> $OUT/bench.txt 2>&1
  done
done
grep -E "^##|BENCH" $OUT/bench.txt
el "== racecheck small"
timeout 150 compute-sanitizer --tool racecheck --error-exitcode 3 /tmp/pre/gpu_check small > $OUT/race.txt 2>&1; echo "race rc $?"; tail -3 $OUT/race.txt
el "== policy"
VCATTN_LIBRARY=/tmp/pre/libvcattn.so PYTHONUNBUFFERED=1 timeout 200 python3 tests/gpu/policy_cost.py --vcattn-bin /tmp/pre/vcattn --json $OUT/policy_cost.json > $OUT/policy.txt 2>&1; echo "policy rc $?"; tail -20 $OUT/policy.txt

left=$(( 570 - ($(date +%s) - T0) ))
if [ -d pydeps/diffusers ] && [ $left -gt 60 ]; then
  el "== compile cogvideox (limit ${left}s)"
  VCATTN_LIBRARY=/tmp/pre/libvcattn.so PYTHONPATH=python:pydeps timeout $left python3 tests/gpu/block_compile.py --model cogvideox --json $OUT/block_compile_cogvideox.json > $OUT/compile_cogvideox.txt 2>&1; echo "compile rc $?"; tail -4 $OUT/compile_cogvideox.txt
fi
el end
