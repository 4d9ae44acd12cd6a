#!/usr/bin/env bash
# call 1 (2026-12-06 from 06:12): the head_dim 64 kernel - check against the simulation, sanitizers,
# A/B against the padded 128 kernel (base) and the narrow-K variant, the peers at head_dim 64
set -u
export PATH=$PATH:/usr/local/cuda/bin
mkdir -p /tmp/pre && tar -xzf .pre/bin.tgz -C /tmp/pre
OUT=${OUT:-out}; mkdir -p $OUT
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
for v in new narrow; do
  el "== check $v"
  timeout 90 /tmp/pre/$v/gpu_check check > $OUT/check_$v.txt 2>&1; echo "check $v rc $?"; grep -E "FAIL|failed" $OUT/check_$v.txt | head -8
done
el "== peers at head_dim 64"
sa=$(ls .peer/sageattention-*.tar.xz | head -1); mkdir -p /tmp/sa && tar -xJf "$sa" -C /tmp/sa
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/nvidia_cudnn_frontend-*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/sa:/tmp/site
S64="1,48,17550,17550,64 1,24,32760,32760,64"
timeout 150 python3 tests/gpu/bench_sdpa.py $S64 > $OUT/peers.txt 2>&1
(cd tests/gpu && timeout 120 python3 bench_fp8_peer.py $S64) >> $OUT/peers.txt 2>&1
grep -E "SDPA|FP8|fp8" $OUT/peers.txt | head
el "== A/B: base (padded 128 kernel), new, narrow; twice"
for rep in 1 2; do for s in "1 48 17550 17550 64" "1 24 32760 32760 64"; do for v in base new narrow; do
  echo "## $v $s" >> $OUT/ab.txt
  VC_BENCH_METHODS=vsmooth-split-blockmax-8bit,sage2-8bit timeout 60 /tmp/pre/$v/gpu_bench bench $s 5 >> $OUT/ab.txt 2>&1
done; done; done
grep -E "^##|BENCH" $OUT/ab.txt
el "== every method, new build"
for s in "1 48 17550 17550 64" "1 24 32760 32760 64"; do
  timeout 90 /tmp/pre/new/gpu_bench bench $s 5 >> $OUT/bench_new.txt 2>&1
done
grep BENCH $OUT/bench_new.txt
for tool in memcheck racecheck synccheck; do
  left=$(( 560 - ($(date +%s) - T0) )); [ $left -gt 40 ] || break
  el "== $tool small (new; limit ${left}s)"
  timeout $left compute-sanitizer --tool $tool --error-exitcode 3 /tmp/pre/new/gpu_check small > $OUT/san_$tool.txt 2>&1; echo "$tool rc $?"; tail -2 $OUT/san_$tool.txt
done
el end
