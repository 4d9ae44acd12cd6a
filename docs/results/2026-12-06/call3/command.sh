#!/usr/bin/env bash
set -u
export PATH=$PATH:/usr/local/cuda/bin
mkdir -p /tmp/pre && tar -xzf .pre/bin.tgz -C /tmp/pre && tar -xzf .pre/exp.tgz -C /tmp/pre
OUT=${OUT:-out}; mkdir -p $OUT
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
for tool in memcheck synccheck; do
  el "== $tool small (shipped build)"
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 3 /tmp/pre/gpu_check small > $OUT/san_$tool.txt 2>&1; echo "$tool rc $?"; tail -2 $OUT/san_$tool.txt
done
for v in r4lb2 r2lb2; do
  el "== check $v"
  timeout 60 /tmp/pre/$v/gpu_check check > $OUT/check_$v.txt 2>&1; echo "check $v rc $?"; grep -E "failed" $OUT/check_$v.txt | head -5
done
el "== A/B timing (base, r4lb2, r2lb2; twice)"
for rep in 1 2; do for s in "1 40 75600 512 128" "1 40 75600 75600 128"; do for v in . r4lb2 r2lb2; do
  echo "## $v $s" >> $OUT/ab.txt
  VC_BENCH_METHODS=vsmooth-split-blockmax-8bit timeout 60 /tmp/pre/$v/gpu_bench bench $s 5 >> $OUT/ab.txt 2>&1
done; done; done
grep -E "^##|BENCH" $OUT/ab.txt | paste - - | awk '{print $2, $4, $6, $10, $14}'
el "== peers at Wan 720p and 512 keys"
sa=$(ls .peer/sageattention-*.tar.xz | head -1); mkdir -p /tmp/sa && tar -xJf "$sa" -C /tmp/sa
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/nvidia_cudnn_frontend-*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/sa:/tmp/site
timeout 120 python3 tests/gpu/bench_sdpa.py 1,40,75600,75600,128 1,40,75600,512,128 > $OUT/peers.txt 2>&1
(cd tests/gpu && timeout 120 python3 bench_fp8_peer.py 1,40,75600,75600,128 1,40,75600,512,128) >> $OUT/peers.txt 2>&1
grep -E "SDPA|FP8|fp8" $OUT/peers.txt | head
el "== ncu merge"
for v in . r4lb2 r2lb2; do
  VC_BENCH_METHODS=vsmooth-split-blockmax-8bit timeout 60 ncu --kernel-name regex:merge --launch-count 1 --metrics gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed /tmp/pre/$v/gpu_bench bench 1 40 75600 512 128 1 > $OUT/ncu_$( [ $v = . ] && echo base || echo $v ).txt 2>&1
  echo "ncu $v"; grep -E "duration|sm__|dram" $OUT/ncu_$( [ $v = . ] && echo base || echo $v ).txt
done
el end
