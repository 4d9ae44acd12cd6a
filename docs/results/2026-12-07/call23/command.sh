#!/usr/bin/env bash
# call 23 (call 20 without the block, on the H100 call 22 left warm; one call for whichever card comes; this session's device starts mostly failed):
#  - on an H200: the speed targets set on that card - cuDNN BF16 (SDPA) against vcattn's default
#    and sage2-8bit at Wan 720p and HunyuanVideo 720p, kernel alone (device_check.sh bench), and
#    HunyuanVideo-1.5's padded joint attention (tests/gpu/masked_bench.py);
#  - on an H100: the reference rows of branch reference-ldmatrix-streams (3e031a0: ldmatrix
#    fragments, block-summed P V, more key splits) and its measurement on side streams:
#    gpu_check reference and its memcheck, kmeans_check, the policy tests, the measuring cost;
#  - on both: HunyuanVideo-1.5's real-size block with its joint mask deferred against built
#    (tests/gpu/block_compile.py, main's library, diffusers 0.42.1 from pydeps/).
# .pre/main.tgz: the branch's binaries; .pre/branch_tree.tgz: its python/ and tests/gpu/;
# .pre-main/lib.tgz: main's library.  VC_SHORT=1: the block and the deferred mask's tests only.
set -u
export PATH=$PATH:/usr/local/cuda/bin
mkdir -p /tmp/pre_branch /tmp/branch /tmp/pre_main
tar -xzf .pre/main.tgz -C /tmp/pre_branch && tar -xzf .pre/branch_tree.tgz -C /tmp/branch && tar -xzf .pre-main/lib.tgz -C /tmp/pre_main
OUT=${OUT:-out}; mkdir -p $OUT
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
block() {
el "== HunyuanVideo-1.5 block: the joint mask deferred vs built"
VCATTN_LIBRARY=/tmp/pre_main/libvcattn.so PYTHONPATH=python:pydeps PYTHONUNBUFFERED=1 timeout 200 \
    python3 tests/gpu/block_compile.py --model hunyuanvideo15 --reps 5 --json $OUT/block_compile_hunyuanvideo15.json \
    > $OUT/compile_hunyuanvideo15.txt 2>&1; echo "block rc $?"; grep -E "ms \(median|HUNYUAN|FAIL|Error" $OUT/compile_hunyuanvideo15.txt | cut -c1-300
el "== the deferred mask's tests on CUDA tensors (main)"
VCATTN_LIBRARY=/tmp/pre_main/libvcattn.so PYTHONPATH=python:pydeps timeout 90 python3 -m pytest -q python/tests/test_deferred_mask.py \
    python/tests/test_masks.py 2>&1 | tail -2
}
bench() {
    el "== bench"
    VC_BENCH_SHAPES="${VC_BENCH_SHAPES:-1,40,75600,75600,128 1,24,118800,118800,128}" VC_BENCH_METHODS=vsmooth-split-blockmax-8bit,sage2-8bit \
        OUT=$OUT/bench VC_PREBUILT=/tmp/pre_branch timeout 240 bash scripts/device_check.sh bench > $OUT/bench_stage.txt 2>&1
    echo "bench rc $?"; sed -n '/== summary/,$p' $OUT/bench_stage.txt | cut -c1-200
}
masked() {
    el "== masked"
    mkdir -p $OUT/masked
    VCATTN_LIBRARY=/tmp/pre_main/libvcattn.so PYTHONPATH=python timeout 200 python3 tests/gpu/masked_bench.py \
        --json $OUT/masked/masked_bench.json > $OUT/masked/masked.txt 2>&1; echo "masked rc $?"; tail -12 $OUT/masked/masked.txt
}
if [ -n "${VC_SHORT:-}" ]; then
    : # the block was timed in call 20
    el "(VC_SHORT: the device time left allows the block alone)"
elif [[ $name == *H200* ]]; then  # the speed targets first, the block after (VC_H200_STAGES: which, in order)
    for st in ${VC_H200_STAGES:-bench masked block}; do $st; done
else
    : # the block was timed in call 20
    el "== reference rows (branch)"
    timeout 120 /tmp/pre_branch/gpu_check reference > $OUT/reference.txt 2>&1; echo "reference rc $?"; tail -7 $OUT/reference.txt
    el "== policy tests (branch)"
    (cd /tmp/branch && VCATTN_LIBRARY=/tmp/pre_branch/libvcattn.so PYTHONPATH=python timeout 150 \
        python3 -m pytest -q python/tests/test_gpu.py -k "policy or reference or overlapping" 2>&1 | tail -3)
    el "== memcheck of the reference rows"
    timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 /tmp/pre_branch/gpu_check reference > $OUT/san_ref_memcheck.txt 2>&1
    echo "memcheck rc $?"; grep -E "ERROR SUMMARY|reference:" $OUT/san_ref_memcheck.txt | tail -2
    el "== k-means (the shared mma helper)"
    timeout 60 /tmp/pre_branch/kmeans_check check > $OUT/kmeans_check.txt 2>&1; echo "kmeans rc $?"; tail -3 $OUT/kmeans_check.txt
    el "== policy cost (branch)"
    VCATTN_LIBRARY=/tmp/pre_branch/libvcattn.so PYTHONUNBUFFERED=1 timeout 150 python3 /tmp/branch/tests/gpu/policy_cost.py \
        --vcattn-bin /tmp/pre_branch/vcattn --json $OUT/policy_cost.json > $OUT/policy.txt 2>&1; echo "policy rc $?"
    grep "^== video\|^== wan" $OUT/policy.txt | cut -c1-420
fi
el end
